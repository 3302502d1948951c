"""The published fine-tune runs of the official code, as named recipes.

Each recipe is what the official configuration sets: the pre-trained file, the dataset and its
train/test splits, the resolution, the global batch and its gradient accumulation, the number
of updates, the warmup, the base learning rate, the decay and the clipping; and the accuracy the
official code published for it. ``keras-vit finetune --recipe NAME`` (or
``keras_vit.app.finetune.finetune({"recipe": NAME})``) runs it with the official step
(``keras_vit.training.finetuning_optimizer``) and the official preprocessing (vit_jax's
Inception crop and flip for training, a plain resize for evaluation), and records the published
figure beside its own.

Sources (vision_transformer at c6de1e5): ``vit_jax.ipynb`` (the official Colab: ViT-B/32 to
CIFAR-10 at 224 px, 100 updates, "0.977" after fine-tuning) and ``README.md``'s table of short
CIFAR runs of ViT-B/16 at the configuration's 384 px (``vit_jax/configs/common.py``: batch 512,
``accum_steps`` 8, base rate 0.03, cosine, clipping at 1, train split ``train[:98%]``).

Example:
>>> r = recipe("vit_jax-colab-b32-cifar10")
>>> r.checkpoint, r.image_size, r.batch_size, r.accumulation, r.steps, r.published_accuracy
('imagenet21k/ViT-B_32', 224, 512, 8, 100, 0.977)
>>> sorted(r.options())[:3]
['augmentation', 'batch_size', 'checkpoint']
"""

import dataclasses
import difflib


@dataclasses.dataclass(frozen=True)
class Recipe:
    """One published fine-tune: the official settings and the published test accuracy."""

    name: str
    checkpoint: str
    dataset: str
    image_size: int
    steps: int
    warmup_steps: int
    published_accuracy: float
    source: str
    batch_size: int = 512
    accumulation: int = 8
    learning_rate: float = 0.03
    decay: str = "cosine"
    clipnorm: float = 1.0
    momentum_dtype: str = "bfloat16"
    train_split: str = "train[:98%]"
    test_split: str = "test"
    augmentation: str = "inception_crop"
    eval_every: int = 100

    def options(self):
        """The ``keras-vit finetune`` options this recipe sets."""
        values = dataclasses.asdict(self)
        # the accumulation is the run's to choose (by the device's memory), the recipe's on a CPU
        for key in ("name", "published_accuracy", "source", "accumulation"):
            values.pop(key)
        return values


_README = "vision_transformer README.md, table of CIFAR runs with fewer steps"
RECIPES = {r.name: r for r in (
    Recipe("vit_jax-colab-b32-cifar10", "imagenet21k/ViT-B_32", "cifar10", 224, 100, 5, 0.977,
           "vit_jax.ipynb (the official Colab), accuracy after fine-tuning"),
    Recipe("vit_jax-b16-cifar10-500", "imagenet21k/ViT-B_16", "cifar10", 384, 500, 50, 0.9859,
           _README),
    Recipe("vit_jax-b16-cifar10-1000", "imagenet21k/ViT-B_16", "cifar10", 384, 1000, 100,
           0.9886, _README),
    Recipe("vit_jax-b16-cifar100-500", "imagenet21k/ViT-B_16", "cifar100", 384, 500, 50,
           0.8917, _README),
    Recipe("vit_jax-b16-cifar100-1000", "imagenet21k/ViT-B_16", "cifar100", 384, 1000, 100,
           0.9115, _README),
)}


def recipe(name):
    """The recipe called ``name``; an unknown name raises a ``ValueError`` listing them."""
    if name in RECIPES:
        return RECIPES[name]
    close = difflib.get_close_matches(str(name), RECIPES, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ValueError(f"Unknown fine-tuning recipe {name!r}{hint}; the recipes are: "
                     f"{', '.join(RECIPES)}.")
