"""Settings, the base of every description of settings (the encoder's ``EncoderConfig`` and the
models' descriptions of ``keras_vit.models.description``): a frozen dataclass's JSON form and its
checked copies. It lives with the layers, the lowest package that describes settings, so
that the encoder's settings and the models' share it."""

import dataclasses


class Settings:
    """What a frozen dataclass of settings shares: a JSON form (``to_dict``, ``from_dict``, with
    nested settings and tuples as dicts and lists) and checked copies (``replace``)."""

    def to_dict(self):
        """The settings as a JSON-able dict (``from_dict`` reads it back)."""
        return {field.name: _json(getattr(self, field.name)) for field in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, values):
        """The settings of ``to_dict``'s dict (None, or settings of this class, unchanged)."""
        if values is None or isinstance(values, cls):
            return values
        unknown = sorted(set(values) - set(cls.field_names()))
        if unknown:
            raise TypeError(f"{cls.__name__} has no setting {', '.join(unknown)}; its settings "
                            f"are {', '.join(cls.field_names())}.")
        return cls(**values)

    @classmethod
    def field_names(cls):
        return [field.name for field in dataclasses.fields(cls)]

    def replace(self, **changes):
        """A copy with ``changes`` (checked again)."""
        return dataclasses.replace(self, **changes)


def _json(value):
    if isinstance(value, tuple):
        return [_json(v) for v in value]
    return value.to_dict() if isinstance(value, Settings) else value
