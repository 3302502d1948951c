"""The applications, above the library: the ``keras-vit`` command, and the set-up of the
teaching notebooks. They import ``keras_vit``, never the reverse.

- ``cli``: the command line, flags built from the run configurations.
- ``configs``: one typed configuration per command (options, defaults, help).
- ``commands``: each command's run function; what they share: ``runs`` (a run's start and end),
  ``run_model`` (its model), ``run_data`` (its data and the evaluation of its model), ``run_plan``
  (its device, precision and warmup); ``train`` (``train``, ``pretrain-mpp``), ``finetune``,
  ``evaluate`` (``evaluate``, ``fewshot``);
  ``convert`` is the library's ``keras_vit.checkpoints.convert``.
- ``run_files``: the folder a run writes; ``planning``: the epochs that fit a time budget, and
  their re-plans as the run trains.
- ``backend_choice``: the command's Keras backend, chosen in ``main`` before Keras is imported.
- ``errors``: ``UsageError``, what a command reports as one line instead of a traceback.
- ``runtime``: the notebooks' side: Colab or Kaggle, their devices, the one set-up cell's
  ``setup`` (the command does not use it); ``shipped``: the training run of the Fashion-MNIST
  ViT shipped with the package, to repeat or lengthen it.
"""

from keras_vit import _submodules
from keras_vit.app import backend_choice

# Modules not imported above are imported when first reached as attributes.
__getattr__, __dir__ = _submodules.attribute_hook(__name__)


def main(argv=None):
    """Entry point of the ``keras-vit`` console script and of ``python -m keras_vit``."""
    backend_choice.prepare_command_line()
    # Imported only now: the command line imports Keras, which fixes its backend on import.
    from keras_vit.app import cli

    return cli.main(argv)
