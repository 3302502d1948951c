"""The ``keras-vit`` commands: each command's run function, by name.

Each takes its command's dataclass of ``keras_vit.app.configs`` (or a dict of its fields) and
returns the run's metrics, which it also writes into the run folder (``run_files``).
"""

from keras_vit import pretrained
from keras_vit.app import configs
from keras_vit.app.evaluate import evaluate, fewshot
from keras_vit.app.finetune import finetune
from keras_vit.app.train import pretrain_mpp, train
from keras_vit.checkpoints import convert as conversion


def convert(config):
    """Convert a model between ``.keras``, the checkpoint formats and the export formats
    (``keras_vit.checkpoints.convert``).

    ``config``: a ``ConvertConfig`` or a dict of its fields.
    """
    options = configs.ConvertConfig.coerce(config).to_dict()
    return dict(conversion.convert(options.pop("source"), options.pop("target"), **options),
                command="convert")


def presets(config):
    """The named presets as a table to read (``keras_vit.pretrained.describe``)."""
    return {"command": "presets", "table": pretrained.describe()}


RUNS = {"train": train, "finetune": finetune, "evaluate": evaluate, "fewshot": fewshot,
        "pretrain-mpp": pretrain_mpp, "convert": convert, "presets": presets}


def run(config):
    """Run the command of ``config``, a dataclass of ``keras_vit.app.configs.COMMANDS``."""
    return RUNS[config.command](config)
