"""Training: the paper's optimizers, schedules and losses, fine-tuning surgery, masked patch
prediction (the distribution helpers live in ``keras_vit.distribution``).

Example:
>>> from keras_vit import training
>>> type(training.pretraining_optimizer(100, warmup_steps=10)).__name__
'AdamW'
"""

from keras_vit import _deprecated, _submodules
from keras_vit.training.mpp import MaskedPatchPrediction
from keras_vit.training.optimizers import AccumulatingSGD, TraceSGD
from keras_vit.training.recipes import (
    classification_loss,
    finetuning_optimizer,
    prepare_finetuning,
    pretraining_optimizer,
)
from keras_vit.training.schedules import WarmupLinearDecay, warmup_schedule

# Deprecated aliases of the application's modules, which moved to keras_vit.app (issue 28);
# they import nothing until one of their names is used.
_deprecated.install(__name__, {
    "configs": ("keras_vit.app.configs", ()),
    "planning": ("keras_vit.app.planning", ()),
    "run_files": ("keras_vit.app.run_files", ()),
    "runs": ("keras_vit.app.runs", ("keras_vit.app.train", "keras_vit.app.finetune",
                                    "keras_vit.app.evaluate", "keras_vit.app.commands",
                                    "keras_vit.checkpoints.convert")),
})

# Modules not imported above are imported when first reached as attributes.
__getattr__, __dir__ = _submodules.attribute_hook(__name__)

__all__ = [
    "AccumulatingSGD",
    "MaskedPatchPrediction",
    "TraceSGD",
    "WarmupLinearDecay",
    "classification_loss",
    "finetuning_optimizer",
    "prepare_finetuning",
    "pretraining_optimizer",
    "warmup_schedule",
]
