"""The models of published weights: ``create_model`` (a paper name, randomly initialised or
filled from a checkpoint) and the presets by name, which ``from_preset`` loads.

It stands on the models and the checkpoint readers, so that the models import nothing from
them: their ``from_preset`` reaches this module through the hook it fills
(``keras_vit._hooks.NAMED_PRESETS``).

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
import types

from keras_vit import _hooks
from keras_vit.checkpoints.formats import load_checkpoint
from keras_vit.models import registry
from keras_vit.models.base import MODEL_KEYWORDS

# Settings a fine-tuning or a file may change without changing the architecture.
_FREE = (*MODEL_KEYWORDS, "num_classes", "representation_size", "dropout_rate",
         "attention_dropout_rate")

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


def load_preset(preset, cls, *, load_weights=True, preprocessor="default", **kwargs):
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


def create_model(name, *, image_size=224, num_classes=1000, weights=None, **overrides):
    """Build a model from its paper name, randomly initialised or with weights.

    Args:
        name: e.g. ``"ViT-B/16"``, ``"ViT-Ti/4"``, ``"R50+ViT-B/16"``, ``"BiT-R50x1"``
            (``keras_vit.models.registry``).
        image_size: input side (or (height, width)); ``None`` with ``position_embedding_grid``
            for a ViT of any size at call time.
        num_classes: head size, or None for a feature extractor.
        weights: None for random initialisation, or any checkpoint ``load_checkpoint`` reads
            (an official ``.npz`` path, URL or published name such as
            ``"imagenet21k/ViT-B_16"``, a timm file, a transformers folder); the file must hold
            the named architecture (checked against the name's configuration).
        **overrides: any constructor argument (``dropout_rate``, ``classifier``, ...).

    Example:
    >>> model = create_model("ViT-Ti/4", image_size=28, num_classes=10, num_channels=1)
    >>> model.count_params()
    5353738
    """
    if weights is None:
        return registry.build_model(name, image_size=image_size, num_classes=num_classes,
                                    **overrides)
    family, model_class, expected = registry.parse(name)
    if family in registry.UNPUBLISHED:
        raise ValueError(
            f"No weights exist for {name!r}: {family} models (paper Appendix D.6) were never "
            "published in the official, timm or transformers formats. Build it with "
            "weights=None and train or fine-tune it, or load a .keras file with "
            "keras.saving.load_model."
        )
    # load_checkpoint's num_classes=None keeps the file's head; 0 leaves it out (a ViTBackbone)
    model = load_checkpoint(weights, image_size=image_size,
                            num_classes=0 if num_classes is None else num_classes, **overrides)
    found = registry.family_of(model)
    if found != family:
        raise ValueError(
            f"The weights {weights!r} hold a {found} checkpoint, but {name!r} is a {family}. "
            f"Use create_model with a {found} name, or load_checkpoint(weights) to build whatever "
            "the file holds."
        )
    different = _differences(model.config, expected, overrides)
    if different:
        raise ValueError(
            f"The weights {weights!r} do not hold a {name} model; differing settings "
            f"(file, name): {different}. Use create_model with the matching name, or "
            "load_checkpoint to build whatever the file holds."
        )
    return model


# What a file's model may differ in from its name's: the head, the size, the dropout rates.
_FREE_FIELDS = ("head", "image_size", "position_embedding_grid", "dropout_rate",
                "attention_dropout_rate")


def _differences(found, expected, overrides):
    """``{setting: (file, name)}`` where the loaded model's description differs from the
    name's (with ``overrides``), the settings of ``_FREE_FIELDS`` aside."""
    expected = expected.replace(**{k: v for k, v in overrides.items() if k not in _FREE})
    file, named = found.flat(_FREE_FIELDS), expected.flat(_FREE_FIELDS)
    return {key: (file.get(key), named.get(key)) for key in {**file, **named}
            if file.get(key) != named.get(key)}


_hooks.fill(_hooks.NAMED_PRESETS, types.SimpleNamespace(load=load_preset))
