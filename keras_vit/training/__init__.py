"""Training: the paper's optimizers, schedules and losses, fine-tuning surgery, masked patch
prediction, the AugReg settings by name (the distribution helpers live in
``keras_vit.distribution``).

Example:
>>> from keras_vit import training
>>> type(training.pretraining_optimizer(100, warmup_steps=10)).__name__
'AdamW'
"""

from keras_vit import _submodules
from keras_vit.training.augreg import AugRegSetting, augreg_checkpoint_setting, augreg_setting
from keras_vit.training.mpp import MaskedPatchPrediction
from keras_vit.training.optimizers import AccumulatingSGD, AdjustableAdamW, TraceSGD
from keras_vit.training.recipes import (
    classification_loss,
    finetuning_optimizer,
    prepare_finetuning,
    pretraining_optimizer,
)
from keras_vit.training.schedules import (
    AdjustableWarmupDecay,
    WarmupDecay,
    WarmupLinearDecay,
    warmup_schedule,
)

# Modules not imported above are imported when first reached as attributes.
__getattr__, __dir__ = _submodules.attribute_hook(__name__)

__all__ = [
    "AccumulatingSGD",
    "AdjustableAdamW",
    "AdjustableWarmupDecay",
    "AugRegSetting",
    "MaskedPatchPrediction",
    "TraceSGD",
    "WarmupDecay",
    "WarmupLinearDecay",
    "augreg_checkpoint_setting",
    "augreg_setting",
    "classification_loss",
    "finetuning_optimizer",
    "prepare_finetuning",
    "pretraining_optimizer",
    "warmup_schedule",
]
