"""Presets by name, and foreign folders, for ``from_preset`` (``keras_vit.models.presets``).

A paper name is a preset of its published ImageNet-21k pre-training (vit_jax's
``imagenet21k/`` files, 224 px, 21,843 classes and the pre-logits layer; for BiT, big_transfer's
BiT-M files, the ResNets the paper compares with), the checkpoint a fine-tuning starts from;
with ``load_weights=False`` it is the registry's randomly initialised model. Any published
checkpoint name (``"imagenet21k+imagenet2012/ViT-B_16"``, ``"augreg/ViT-S/16"``,
``"BiT-M-R50x1"``) and a transformers or timm folder are read by ``load_checkpoint``. A
backbone class gets the file's model without its head.

Example (a paper name without weights):
>>> from keras_vit.models.vit import ViTBackbone
>>> backbone = ViTBackbone.from_preset("ViT-Ti/4", load_weights=False, image_size=8)
>>> backbone.config.encoder.hidden_size
192
"""

import re

from keras_vit.checkpoints.formats import load_checkpoint
from keras_vit.models import registry
from keras_vit.pretrained import create_model

# Paper names whose ImageNet-21k pre-training vit_jax published (gs://vit_models/imagenet21k).
IMAGENET21K = ("ViT-B/16", "ViT-B/32", "ViT-L/16", "ViT-L/32", "ViT-H/14", "R50+ViT-B/16")
# BiT names whose ImageNet-21k pre-training (BiT-M) big_transfer published (gs://bit_models).
BIT_M = ("BiT-R50x1", "BiT-R50x3", "BiT-R101x1", "BiT-R101x3", "BiT-R152x2", "BiT-R152x4")
IMAGENET21K_CLASSES = 21_843


def checkpoint_of(name):
    """The published checkpoint a paper name's preset loads, or None.

    Example:
    >>> checkpoint_of("ViT-B/16"), checkpoint_of("BiT-R50x1"), checkpoint_of("ViT-Ti/4")
    ('imagenet21k/ViT-B_16', 'BiT-M-R50x1', None)
    """
    if name in IMAGENET21K:
        return f"imagenet21k/{name.replace('/', '_')}"
    bit = re.sub(r"^BiT-[MS]-", "BiT-", name)
    return bit.replace("BiT-", "BiT-M-") if bit in BIT_M else None


def _is_paper_name(preset):
    try:
        registry.parse(preset)
    except ValueError:
        return False
    return True


def load(preset, cls, *, load_weights=True, preprocessor="default", **kwargs):
    """The model of ``cls`` a name or a foreign folder stands for (see the module docstring)."""
    backbone = cls.backbone_cls is None
    if _is_paper_name(preset):
        model = _paper_name(preset, backbone, load_weights, kwargs)
    elif not load_weights:
        raise ValueError(f"load_weights=False builds a paper name's model (e.g. 'ViT-B/16'); "
                         f"{preset!r} is a checkpoint, whose architecture is its file's.")
    else:
        if backbone:
            kwargs["num_classes"] = 0
        model = load_checkpoint(preset, **kwargs)
    if not isinstance(model, cls):
        raise ValueError(f"The preset {preset!r} holds a {type(model).__name__}, not a "
                         f"{cls.__name__}: load it with {type(model).__name__}.from_preset.")
    if not backbone:
        if preprocessor == "default":
            from keras_vit.models.preprocessor import ImagePreprocessor

            preprocessor = ImagePreprocessor.for_model(model)
        model.preprocessor = preprocessor
    return model


def _paper_name(name, backbone, load_weights, kwargs):
    """A paper name's model: its published pre-training, or the registry's at random."""
    kwargs.setdefault("num_classes", None if backbone else (
        IMAGENET21K_CLASSES if load_weights else 1000))
    if not load_weights:
        return create_model(name, **kwargs)
    weights = checkpoint_of(name)
    if weights is None:
        raise ValueError(
            f"No published pre-training is a preset of {name!r} (those of "
            f"{', '.join(IMAGENET21K + BIT_M)} are). Pass load_weights=False for the randomly "
            "initialised model, or a checkpoint name ('augreg/ViT-S/16', ...) as the preset.")
    return create_model(name, weights=weights, **kwargs)
