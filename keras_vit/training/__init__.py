"""Training recipes: optimizers, schedules and losses of the paper, fine-tuning surgery.

Example:
>>> from keras_vit import training
>>> type(training.pretraining_optimizer(100, warmup_steps=10)).__name__
'AdamW'
"""

from keras_vit.training.recipes import (
    classification_loss,
    finetuning_optimizer,
    prepare_finetuning,
    pretraining_optimizer,
)
from keras_vit.training.schedules import WarmupLinearDecay, warmup_schedule

__all__ = [
    "WarmupLinearDecay",
    "classification_loss",
    "finetuning_optimizer",
    "prepare_finetuning",
    "pretraining_optimizer",
    "warmup_schedule",
]
