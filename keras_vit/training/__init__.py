"""Training: the paper's optimizers, schedules and losses, fine-tuning surgery, masked patch
prediction, and distribution helpers.

Example:
>>> from keras_vit import training
>>> type(training.pretraining_optimizer(100, warmup_steps=10)).__name__
'AdamW'
"""

from keras_vit.training.distribution import check_batch_size, layout_map, num_replicas, strategy
from keras_vit.training.mpp import MaskedPatchPrediction
from keras_vit.training.recipes import (
    classification_loss,
    finetuning_optimizer,
    prepare_finetuning,
    pretraining_optimizer,
)
from keras_vit.training.schedules import WarmupLinearDecay, warmup_schedule

__all__ = [
    "MaskedPatchPrediction",
    "WarmupLinearDecay",
    "check_batch_size",
    "classification_loss",
    "finetuning_optimizer",
    "layout_map",
    "num_replicas",
    "prepare_finetuning",
    "pretraining_optimizer",
    "strategy",
    "warmup_schedule",
]
