"""What a checkpoint format is (``Format``, one per format module) and can hold
(``Capabilities``), and the one check every reader and writer runs before it builds or writes a
model.

A format holds a model only when it has a place for every part of it: the position embedding
and where it is added (paper Appendix D.4), the pooling (class token or GAP), the pre-logits
layer (``representation_size``), the stem (patches, a hybrid's ResNet, a BiT ResNetV2), the
GELU and the LayerNorm epsilon. Axial models (Appendix D.6) have no place in any of them.
"""

import dataclasses
from collections.abc import Callable

from keras_vit.layers.tree import quantization_modes, sublayers
from keras_vit.models.family import family_of_model

POSITION = ("learned_1d", "stem")  # the one position embedding every foreign format holds


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What a format holds (see the module docstring); ``name`` is how errors call it."""

    name: str
    stems: tuple  # the kinds of stem it holds (``keras_vit.models.family.STEMS``)
    classifiers: tuple = ("token", "gap")
    pre_logits: str | None = None  # why a classifier's pre-logits layer has no place; None: it has
    pooler: bool = False  # whether a pre-logits layer without classes has a place
    exact_gelu_only: bool = False
    layer_norm_epsilon: float | None = None  # the one epsilon the format has, None: any


@dataclasses.dataclass(frozen=True)
class Format:
    """A checkpoint format behind ``load_checkpoint`` and ``save_checkpoint``: one module each,
    listed once in ``keras_vit.checkpoints.formats.FORMATS``.

    ``name`` is what ``format=`` says; ``holds`` what it can hold (``check_expressible``);
    ``suffixes`` the endings of its file names (none for a folder); ``claims(path)`` whether an
    existing path is in this format, by its form; ``load(path, *, image_size, num_classes,
    drop_pre_logits, **overrides)`` builds the model it describes and ``save(model, path)``
    writes one, nothing when it cannot hold the model.
    """

    name: str
    holds: Capabilities
    suffixes: tuple
    claims: Callable
    load: Callable
    save: Callable
    what: str  # the paths it reads, for the messages that list every format


def _family_with_layout(model, can):
    """The family record of ``model``, refused where the format ``can`` has no layout for it."""
    family = family_of_model(model)
    if family is None:
        raise TypeError(f"{type(model).__name__} has no checkpoint layout; expected a keras_vit "
                        "ViT (plain or hybrid) or BiT ResNet, backbone or classifier.")
    if not family.weights:
        raise ValueError(
            f"This {family.name} has no {can.name} layout: no official, timm or transformers "
            f"checkpoints of the {family.name} family exist. Save it with "
            "model.save('model.keras') and load it with keras.saving.load_model.")
    return family


def check_expressible(model, can, strict=True):
    """Raise a ``ValueError`` naming what of ``model`` a format that holds ``can`` (its
    ``Capabilities``) cannot hold, and the fix.

    ``strict=False`` lets a tanh-GELU model go to a format with only the exact GELU.
    """
    stem = _family_with_layout(model, can).stem
    check_float_weights(model, can.name)
    if stem not in can.stems:
        error, message = STEM_ERRORS[stem]
        raise error(message.format(name=can.name))
    CHECKS[stem](model.config, can, strict)


def check_float_weights(model, name):
    """Raise a ``ValueError`` when a layer of ``model`` is quantized or carries LoRA factors.

    The foreign formats hold one float kernel per projection: a quantized kernel (int8, int4,
    float8 scales) has no place there, and LoRA factors must first be merged into the kernels.
    """
    quantized = quantization_modes(model)
    if quantized:
        raise ValueError(
            f"This model is quantized ({', '.join(quantized)}); the {name} format holds float "
            "weights only. Save the quantized model with model.save('model.keras'), or write "
            "the float model before calling model.quantize()."
        )
    if any(getattr(layer, "lora_enabled", False) for layer in sublayers(model)):
        raise ValueError(
            f"This model carries LoRA factors, which the {name} format has no place for. Merge "
            "them into the kernels first: keras_vit.models.lora.merge_lora(model)."
        )


# Kind of stem (``keras_vit.models.family.STEMS``) -> the error of a format without it.
STEM_ERRORS = {
    "hybrid": (ValueError, "The {name} ViT has no ResNet stem, so a hybrid ResNet+ViT cannot be "
                           "expressed; save it in the official or timm format, or keep it as a "
                           "keras_vit model."),
    "bit": (TypeError, "The {name} format holds a keras_vit ViT; it has no BiT ResNetV2 with this "
                       "layout (save it in the official or timm format)."),
}


def check_position(model, can):
    """Raise the error for a ViT whose position embedding a format that holds ``can`` has no
    place for.

    Readers call this alone on the model they built, as overrides may ask for another
    embedding than the file's; the rest of ``check_expressible`` is about writing.
    """
    _check_position(model.config.encoder, can)


def _check_position(encoder, can):
    options = (encoder.position_embedding, encoder.position_embedding_placement)
    if options != POSITION:
        raise ValueError(
            f"The {can.name} format holds only a learned 1-D position embedding "
            "added after the stem, but this model uses "
            f"position_embedding={options[0]!r} with placement {options[1]!r} (paper Appendix "
            "D.4). Save such a model with model.save('model.keras'), which keeps every "
            "variant, or use the defaults ('learned_1d', 'stem') to exchange checkpoint files."
        )


def _check_vit(config, can, strict):
    encoder = config.encoder
    _check_position(encoder, can)
    if encoder.classifier not in can.classifiers:
        raise ValueError(f"The {can.name} ViT pools the class token; a classifier='gap' model "
                         "cannot be written for it (use the official or timm format).")
    _check_pre_logits(config.head, can)
    if can.exact_gelu_only and encoder.approximate_gelu and strict:
        raise ValueError(
            f"The model uses the tanh-approximated GELU (as the official checkpoints do) and "
            f"{can.name} only has the exact one, so the outputs would change (about 1e-4). Pass "
            "strict=False to convert anyway: keras_vit.to_keras_hub(model, strict=False), then "
            "its save_to_preset(folder)."
        )
    epsilon = can.layer_norm_epsilon
    if epsilon is not None and encoder.layer_norm_epsilon != epsilon:
        raise ValueError(
            f"The {can.name} ViT uses LayerNorm epsilon {epsilon}; this model uses "
            f"{encoder.layer_norm_epsilon} (e.g. loaded from Hugging Face) and cannot be "
            "expressed exactly. Save it with save_checkpoint(..., format='transformers') instead."
        )


def _check_bit(config, can, strict):
    head, name = config.head, can.name
    if head is not None and head.representation_size is not None:
        raise ValueError(
            f"BiT's {name} layout has a head of one layer; this model's head has a "
            f"pre-logits layer (representation_size={head.representation_size}). Save it with "
            "model.save('model.keras'), or write its backbone (model.backbone).")


# Kind of stem (``keras_vit.models.family.STEMS``) of a family with a layout -> what a format
# must hold of its description.
CHECKS = {"patches": _check_vit, "hybrid": _check_vit, "bit": _check_bit}


def _check_pre_logits(head, can):
    if head is None or head.representation_size is None or can.pre_logits is None:
        return
    if head.num_classes is None:
        if can.pooler:
            return
        raise ValueError(
            f"This model's head is a pre-logits layer without classes, which the {can.name} "
            "format has no place for. Write its backbone (model.backbone), or save it in the "
            "official or transformers format.")
    raise ValueError(
        f"{can.pre_logits} (representation_size={head.representation_size}). Drop it first "
        "(load_checkpoint(..., drop_pre_logits=True), as fine-tuning does), write the "
        "backbone alone (model.backbone), or save in the official format, which keeps it."
    )


def fixed_image_size(config, name):
    """``(height, width)`` of a ViT's ``config``, for a format whose model has a fixed size."""
    if config.image_size is None:
        raise ValueError(
            f"The {name} ViT has a fixed image size, and this model takes any size "
            "(image_size=None). Build it at one size first: keras_vit.resize_model(model, "
            f"{tuple(side * config.stride for side in config.learned_grid)}) keeps the "
            "position table it learned."
        )
    return config.image_size
