"""What the analytic models read of a model: its settings, from a built model or from a registered
name without building it, the token grid its attentions span, and the maps of its ResNet.

A registered name (``"ViT-H/14"``) is read from its configuration into the same attributes a
built model has (``hidden_size``, ``num_layers``, ``resnet``...), so ``flops`` and ``memory`` count
both alike; ViT-H/14 has 632M weights, none of which need to exist to count them.
"""

import inspect
import types

from keras_vit.layers.encoder import EncoderConfig
from keras_vit.layers.resnet import (
    EXPANSION,
    HYBRID_STAGES,
    check_units,
    hybrid_stride,
    root_width,
    stage_strides,
)
from keras_vit.models.axial import AxialVisionTransformer
from keras_vit.models.base import ConfiguredModel, image_shape
from keras_vit.models.registry import parse
from keras_vit.models.vit import VisionTransformer, vit_arguments

# A registered name is counted at the paper's pre-training resolution and ImageNet's classes
# unless told otherwise (the defaults of ``keras_vit.create_model``).
NAME_IMAGE_SIZE = 224
NAME_NUM_CLASSES = 1000
# An AxialUnit's attention projects its C channels to 2C with a 1x1 convolution: queries and
# keys C/2 each, values C (Axial-DeepLab; keras_vit.layers.axial).
AXIAL_PROJECTION_WIDTH = 2


def ceil_half(side):
    """A side after a stride-2 'SAME' convolution or pooling: half, rounded up."""
    return -(-side // 2)


def root_output(side):
    """The (height, width) after a ResNet root: the stride-2 convolution, then the max-pool."""
    return ceil_half(ceil_half(side[0])), ceil_half(ceil_half(side[1]))


def hybrid_stages(resnet):
    """The units per stage of a hybrid's ResNet (``resnet``: the model's ``resnet`` dict)."""
    return resnet.get("num_layers", HYBRID_STAGES)


def hybrid_width_factor(resnet):
    return resnet.get("width_factor", 1)


def resnet_units(side, stages, width_factor):
    """The bottleneck units of a BiT/hybrid/axial ResNet on an image of ``side`` (height,
    width): per unit ``(side_in, side_out, channels_in, features, stride)``, its output having
    ``EXPANSION * features`` channels. They follow the root (``root_output``;
    ``root_width(width_factor)`` channels)."""
    width = root_width(width_factor)
    side, channels = root_output(side), width
    for i, (units, stage_stride) in enumerate(zip(stages, stage_strides(len(stages)))):
        features = width * 2**i
        for unit in range(units):
            stride = stage_stride if unit == 0 else 1
            out = (-(-side[0] // stride), -(-side[1] // stride))
            yield side, out, channels, features, stride
            side, channels = out, EXPANSION * features


def token_spans(model, grid):
    """(tokens, the key span of each attention of a layer) of a ViT on a ``grid`` of patches.

    A ViT attends over all its tokens once per layer; an Axial-ViT twice, within each row (span
    the grid's width) and within each column (its height, plus the class row).
    """
    cls = model.classifier == "token"
    if getattr(model, "axial", False) or isinstance(model, AxialVisionTransformer):
        return (grid[0] + cls) * grid[1], (grid[1], grid[0] + cls)
    tokens = grid[0] * grid[1] + cls
    return tokens, (tokens,)


def check_size(model, image_size, what="flops"):
    """The (height, width) to count ``model`` at: ``image_size`` or the model's own, checked
    against its stride (``what``: the function counting, named in the error)."""
    size = image_size if image_size is not None else model.image_size
    if size is None:
        raise ValueError(
            f"{model.name} takes any image size; pass {what}(model, image_size=...) to count one."
        )
    height, width = image_shape(size)
    stride = getattr(model, "stride", 1)
    for name, side in (("height", height), ("width", width)):
        if side < stride:
            raise ValueError(
                f"The image {name} ({side}) is smaller than one patch ({stride} pixels with the "
                "stem); use a larger image or a smaller patch size."
            )
        if side % stride:
            raise ValueError(
                f"The image {name} ({side}) is not a multiple of the model's stride ({stride}); "
                f"use a multiple of {stride}, e.g. {side // stride * stride or stride}."
            )
    return height, width


def _defaults(model_class):
    """The constructor defaults, a subclass's over its bases' (Axial-ViT over ViT)."""
    defaults = {}
    for klass in reversed(model_class.__mro__):
        if "__init__" in vars(klass) and issubclass(klass, ConfiguredModel) and (
                klass is not ConfiguredModel):
            defaults.update({key: parameter.default
                             for key, parameter in inspect.signature(klass).parameters.items()
                             if parameter.default is not inspect.Parameter.empty})
    return defaults


def configuration(name, image_size, num_classes, overrides, what="flops"):
    """``(model class, settings)`` of a registered name: the checked configuration, as the
    attributes a built model has, plus ``stride`` (pixels per patch, stem included) and
    ``axial`` for a ViT. Nothing is built."""
    _, model_class, config = parse(name)
    unknown = sorted(set(overrides) - set(_defaults(model_class)) - {"name", "dtype"})
    if unknown:
        raise TypeError(f"{model_class.__name__} takes no argument {', '.join(unknown)}; "
                        f"{what}({name!r}, ...) takes the arguments of create_model.")
    config.update(overrides, image_size=image_size, num_classes=num_classes)
    arguments = {**_defaults(model_class), **config}
    arguments.pop("name"), arguments.pop("dtype")
    if issubclass(model_class, VisionTransformer):
        encoder, rest = EncoderConfig.split(arguments)
        arguments = vit_arguments(encoder, **rest)
        arguments["axial"] = issubclass(model_class, AxialVisionTransformer)
        resnet = arguments["resnet"]
        stem = 1 if resnet is None else hybrid_stride(hybrid_stages(resnet))
        arguments["stride"] = arguments["patch_size"] * stem
    else:
        arguments["block_units"] = check_units(arguments["block_units"], "block_units",
                                               allow_empty=False)
        arguments["image_size"] = image_shape(arguments["image_size"])
    return model_class, types.SimpleNamespace(name=name, **arguments)


def read(model, image_size, overrides, what="flops"):
    """``(model class, settings, height, width)`` of a registered name (``overrides``: the
    arguments of ``create_model``, ``num_classes`` included) or of a built model (none)."""
    if isinstance(model, str):
        num_classes = overrides.pop("num_classes", NAME_NUM_CLASSES)
        size = NAME_IMAGE_SIZE if image_size is None else image_size
        model_class, settings = configuration(model, size, num_classes, overrides, what)
        return model_class, settings, *check_size(settings, image_size, what)
    if overrides:
        raise TypeError(f"{what} takes {', '.join(sorted(overrides))} only with a model name; a "
                        "built model has its configuration already.")
    return type(model), model, *check_size(model, image_size, what)
