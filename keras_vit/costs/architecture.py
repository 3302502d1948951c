"""What the analytic models read of a model: its description, the token grid its attentions
span, and the maps of its ResNet.

Every model is read as its description (``keras_vit.models.description``): a ``ViTConfig`` for
a ViT (plain, hybrid or Axial-ViT), a ``ResNetConfig`` for a BiT ResNet or AxialResNet; a built
model's ``.config``, a registered name's ``keras_vit.models.registry.model_config`` (nothing
built), or a description given directly. ``flops`` and ``memory`` count all of them alike;
ViT-H/14 has 632M weights, none of which need to exist to count them.
"""

import keras

from keras_vit.checks import pair
from keras_vit.layers.resnet import EXPANSION, root_width, stage_strides
from keras_vit.models.base import DescribedModel
from keras_vit.models.description import Description, model_keywords
from keras_vit.models.registry import parse

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
    """The (height, width) to count at: ``image_size`` or the description's own, checked as
    the model checks its input (``label`` names the model, ``what`` the function counting, in
    the errors)."""
    size = image_size if image_size is not None else description.image_size
    if size is None:
        raise ValueError(
            f"{label} takes any image size; pass {what}(model, image_size=...) to count one."
        )
    height, width = pair("image_size", size)
    description.check_input((height, width), "image")
    return height, width


def describe_name(name, image_size=None, overrides=None, what="flops"):
    """The description of a registered name as ``create_model(name, image_size=...,
    **overrides)`` would build it (224 px and 1,000 classes unless told). Nothing is built."""
    overrides = dict(overrides or {})
    model_keywords(overrides)  # the name, dtype and trainable count nothing (memory takes dtype)
    size = NAME_IMAGE_SIZE if image_size is None else image_size
    num_classes = overrides.pop("num_classes", NAME_NUM_CLASSES)
    config = parse(name)[2]
    try:
        return config.replace(image_size=size, num_classes=num_classes, **overrides)
    except TypeError as error:
        raise TypeError(f"{what}({name!r}, ...) takes the arguments of create_model: "
                        f"{error}") from error


def read(model, image_size=None, overrides=None, what="flops"):
    """``(description, height, width)`` of a registered name (``overrides``: the arguments of
    ``create_model``, ``num_classes`` included), of a description (``overrides``: its flat
    settings) or of a built model (none). A ViT is counted with the position tables of the image
    it is counted at, unless its ``position_embedding_grid`` fixes them."""
    overrides = dict(overrides or {})
    if isinstance(model, str):
        description = describe_name(model, image_size, overrides, what)
    elif isinstance(model, Description):
        description = model.replace(**overrides) if overrides else model
    elif isinstance(model, DescribedModel):
        if overrides:
            raise TypeError(f"{what} takes {', '.join(sorted(overrides))} only with a model name "
                            "or a description; a built model has its configuration already.")
        description = model.config
    else:
        raise TypeError(
            f"{what} counts keras_vit models (a backbone or classifier of any family), their "
            "descriptions (ViTConfig, ResNetConfig) and registered names (keras_vit."
            f"model_names()), got {type(model).__name__}.")
    return description, *check_size(description, image_size, label(model), what)


def label(model):
    """How the errors name what is counted: a name, a built model's name, or its config."""
    if isinstance(model, str):
        return model
    return f"The {type(model).__name__}'s model" if isinstance(model, Description) else model.name


def dtype_policy(model, dtype):
    """The dtype policy a count assumes: ``dtype``, else a built model's, else the global."""
    if dtype is not None:
        return keras.dtype_policies.get(dtype)
    if isinstance(model, keras.Model):
        return model.dtype_policy
    return keras.dtype_policies.get(keras.config.dtype_policy())
