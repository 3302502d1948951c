"""What the analytic models read of a model: its description, the token grid its attentions
span, and the maps of its ResNet.

A ViT (plain, hybrid or Axial-ViT) is read as its ``ViTConfig``: a built model's ``.config``, a
registered name's ``keras_vit.models.registry.model_config`` (nothing built), or a ``ViTConfig``
given directly. A BiT ``ResNetV2`` or an ``AxialResNet`` is read as a ``ResNetDescription`` of
its constructor's arguments. ``flops`` and ``memory`` count all of them alike; ViT-H/14 has 632M
weights, none of which need to exist to count them.
"""

import dataclasses
import inspect

import keras

from keras_vit.checks import check_multiple, pair
from keras_vit.layers.resnet import EXPANSION, check_units, plain_number, root_width, stage_strides
from keras_vit.models.axial import AxialResNet
from keras_vit.models.base import model_keywords
from keras_vit.models.description import ViTConfig
from keras_vit.models.registry import parse
from keras_vit.models.resnet_v2 import ResNetV2
from keras_vit.models.vit import ViTBackbone, ViTImageClassifier

# A registered name is counted at the paper's pre-training resolution and ImageNet's classes
# unless told otherwise (the defaults of ``keras_vit.create_model``).
NAME_IMAGE_SIZE = 224
NAME_NUM_CLASSES = 1000
# An AxialUnit's attention projects its C channels to 2C with a 1x1 convolution: queries and
# keys C/2 each, values C (Axial-DeepLab; keras_vit.layers.axial).
AXIAL_PROJECTION_WIDTH = 2
VIT_MODELS = (ViTBackbone, ViTImageClassifier)
RESNET_MODELS = (ResNetV2, AxialResNet)


@dataclasses.dataclass(frozen=True)
class ResNetDescription:
    """What the counts read of a BiT ``ResNetV2`` or an ``AxialResNet``: its constructor's
    arguments (``num_heads`` is the AxialResNet's, None for BiT)."""

    block_units: tuple
    width_factor: float
    num_classes: int | None = 1000
    image_size: tuple | None = (224, 224)
    num_channels: int = 3
    num_heads: int | None = None

    def __post_init__(self):
        units = tuple(check_units(self.block_units, "block_units", allow_empty=False))
        object.__setattr__(self, "block_units", units)
        object.__setattr__(self, "width_factor", plain_number(self.width_factor))
        if self.image_size is not None:
            object.__setattr__(self, "image_size", pair("image_size", self.image_size))

    stride = 1  # a ResNet has no patches to align an image with

    @property
    def axial(self):
        return self.num_heads is not None

    @classmethod
    def of(cls, model):
        """The description of a built ``ResNetV2`` or ``AxialResNet``."""
        return cls(model.block_units, model.width_factor, model.num_classes, model.image_size,
                   model.num_channels, model.num_heads if isinstance(model, AxialResNet) else None)


def ceil_half(side):
    """A side after a stride-2 'SAME' convolution or pooling: half, rounded up."""
    return -(-side // 2)


def root_output(side):
    """The (height, width) after a ResNet root: the stride-2 convolution, then the max-pool."""
    return ceil_half(ceil_half(side[0])), ceil_half(ceil_half(side[1]))


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


def token_spans(config, grid):
    """(tokens, the key span of each attention of a layer) of the ViT ``config`` on a ``grid``
    of patches.

    A ViT attends over all its tokens once per layer; an Axial-ViT twice, within each row (span
    the grid's width) and within each column (its height, plus the class row).
    """
    cls = config.encoder.classifier == "token"
    if config.encoder.axial:
        return (grid[0] + cls) * grid[1], (grid[1], grid[0] + cls)
    tokens = grid[0] * grid[1] + cls
    return tokens, (tokens,)


def check_size(description, image_size, label, what="flops"):
    """The (height, width) to count at: ``image_size`` or the description's own, checked
    against its stride (``label`` names the model, ``what`` the function counting, in the
    errors)."""
    size = image_size if image_size is not None else description.image_size
    if size is None:
        raise ValueError(
            f"{label} takes any image size; pass {what}(model, image_size=...) to count one."
        )
    height, width = pair("image_size", size)
    stride = description.stride
    for name, side in (("height", height), ("width", width)):
        if side < stride:
            raise ValueError(
                f"The image {name} ({side}) is smaller than one patch ({stride} pixels with the "
                "stem); use a larger image or a smaller patch size."
            )
    check_multiple((height, width), stride, unit="model's stride")
    return height, width


def _resnet_of_name(name, model_class, arguments, overrides, what):
    """The ``ResNetDescription`` of a registered ResNet name with ``overrides``: the arguments
    create_model passes to the constructor, named and defaulted by its signature."""
    signature = inspect.signature(model_class)
    named = [key for key, parameter in signature.parameters.items()
             if parameter.kind is parameter.KEYWORD_ONLY or (
                 parameter.kind is parameter.POSITIONAL_OR_KEYWORD)]
    unknown = sorted(set(overrides) - set(named))
    if unknown:
        raise TypeError(f"{model_class.__name__} takes no argument {', '.join(unknown)}; "
                        f"{what}({name!r}, ...) takes the arguments of create_model.")
    bound = signature.bind(**{**arguments, **overrides})
    bound.apply_defaults()
    fields = [field.name for field in dataclasses.fields(ResNetDescription)]
    return ResNetDescription(**{key: bound.arguments[key] for key in fields
                                if key in bound.arguments})


def describe_name(name, image_size=None, overrides=None, what="flops"):
    """The description of a registered name as ``create_model(name, image_size=...,
    **overrides)`` would build it (224 px and 1,000 classes unless told): a ``ViTConfig`` or a
    ``ResNetDescription``. Nothing is built."""
    overrides = dict(overrides or {})
    model_keywords(overrides)  # the name, dtype and trainable count nothing (memory takes dtype)
    size = NAME_IMAGE_SIZE if image_size is None else image_size
    num_classes = overrides.pop("num_classes", NAME_NUM_CLASSES)
    _, model_class, config = parse(name)
    if not isinstance(config, ViTConfig):
        return _resnet_of_name(name, model_class, config,
                               dict(overrides, image_size=size, num_classes=num_classes), what)
    try:
        return config.replace(image_size=size, num_classes=num_classes, **overrides)
    except TypeError as error:
        raise TypeError(f"{what}({name!r}, ...) takes the arguments of create_model: "
                        f"{error}") from error


def read(model, image_size=None, overrides=None, what="flops"):
    """``(description, height, width)`` of a registered name (``overrides``: the arguments of
    ``create_model``, ``num_classes`` included), of a ``ViTConfig`` (``overrides``: its flat
    settings) or of a built model (none): the description is a ``ViTConfig`` for a ViT and a
    ``ResNetDescription`` for a ResNet. A ViT is counted with the position tables of the image
    it is counted at, unless its ``position_embedding_grid`` fixes them."""
    overrides = dict(overrides or {})
    if isinstance(model, str):
        description = describe_name(model, image_size, overrides, what)
    elif isinstance(model, ViTConfig):
        description = model.replace(**overrides) if overrides else model
    else:
        if overrides:
            raise TypeError(f"{what} takes {', '.join(sorted(overrides))} only with a model name "
                            "or a ViTConfig; a built model has its configuration already.")
        description = _description_of(model, what)
    return description, *check_size(description, image_size, label(model), what)


def label(model):
    """How the errors name what is counted: a name, a built model's name, or its config."""
    if isinstance(model, str):
        return model
    return "The ViTConfig's model" if isinstance(model, ViTConfig) else model.name


def _description_of(model, what):
    """The description of a built keras_vit model (its class checked by the caller)."""
    if isinstance(model, VIT_MODELS):
        return model.config
    if isinstance(model, RESNET_MODELS):
        return ResNetDescription.of(model)
    raise TypeError(f"{what} reads keras_vit models, got {type(model).__name__}.")


def is_vit(description):
    return isinstance(description, ViTConfig)


def dtype_policy(model, dtype):
    """The dtype policy a count assumes: ``dtype``, else a built model's, else the global."""
    if dtype is not None:
        return keras.dtype_policies.get(dtype)
    if isinstance(model, keras.Model):
        return model.dtype_policy
    return keras.dtype_policies.get(keras.config.dtype_policy())
