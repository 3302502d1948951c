"""The errors a ``keras-vit`` command reports as one line, without a traceback."""


class UsageError(ValueError):
    """A request a command cannot carry out, said with what to do instead: a bad option value,
    a run folder that holds another run, a missing optional package.

    A ``ValueError``, like the library's refusals of bad values, which the command reports the
    same way (``keras_vit.app.cli.USER_ERRORS``).
    """
