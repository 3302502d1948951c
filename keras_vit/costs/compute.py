"""The compute of a forward pass, counted by formula from the architecture (paper Fig. 5, Table 6).

A multiply-add is two FLOPs. Counted: every matrix product and convolution (patch embedding,
the q/k/v/out projections, the attention matrix q k^T and its product with v, the MLP, the ResNet
convolutions, ``pre_logits`` and the head). Not counted: element-wise work (LayerNorm, GroupNorm,
softmax, GELU, bias and residual adds, the position embedding, pooling, weight
standardisation), a fraction of a per cent for a ViT-B; XLA's cost analysis counts those too.

Example (ViT-B/16 at 224 px: 17.6 GMACs, the figure timm and papers quote):
>>> from keras_vit.models.registry import build_model as create_model
>>> count = flops(create_model("ViT-B/16"))
>>> round(count / 2e9, 1)
17.6
>>> sorted(count.parts)
['attention_matrix', 'attention_projections', 'head', 'mlp', 'patch_embedding', 'stem']

A registered name is counted from its configuration, without building the model, so that
ViT-H/14 or BiT-R200x3 cost nothing to count (``flops("ViT-H/14")``). ``TABLE_6`` holds the
paper's Table 6 (the data of Fig. 5) and ``pretraining_flops`` our estimate of its compute column.
"""

import collections
import inspect
import types

from keras_vit.layers.encoder import EncoderConfig
from keras_vit.layers.resnet import check_units, hybrid_stride, root_width, stage_strides
from keras_vit.models.axial import AxialResNet, AxialVisionTransformer
from keras_vit.models.base import ConfiguredModel, image_shape
from keras_vit.models.registry import parse
from keras_vit.models.resnet_v2 import ResNetV2
from keras_vit.models.vit import VisionTransformer, vit_arguments

# JFT-300M (paper Sec. 4.1): 303M images in 18k classes (18,291 in the official configs).
JFT_IMAGES = 303_000_000
JFT_CLASSES = 18291

Table6Row = collections.namedtuple(
    "Table6Row",
    ["name", "model", "epochs", "exaflops", "imagenet", "imagenet_real", "cifar10", "cifar100",
     "pets", "flowers"],
)
Table6Row.__doc__ = """One row of the paper's Table 6: its ``name``, our registry name (``model``),
JFT-300M pre-training ``epochs``, the paper's pre-training compute in ``exaflops``, and the
fine-tuned transfer accuracies in per cent."""

# The paper's Table 6 (Appendix D), as printed: the data of Fig. 5.
TABLE_6 = tuple(Table6Row(*row) for row in [
    ("ViT-B/32", "ViT-B/32", 7, 55, 80.73, 86.27, 98.61, 90.49, 93.40, 99.27),
    ("ViT-B/16", "ViT-B/16", 7, 224, 84.15, 88.85, 99.00, 91.87, 95.80, 99.56),
    ("ViT-L/32", "ViT-L/32", 7, 196, 84.37, 88.28, 99.19, 92.52, 95.83, 99.45),
    ("ViT-L/16", "ViT-L/16", 7, 783, 86.30, 89.43, 99.38, 93.46, 96.81, 99.66),
    ("ViT-L/16", "ViT-L/16", 14, 1567, 87.12, 89.99, 99.38, 94.04, 97.11, 99.56),
    ("ViT-H/14", "ViT-H/14", 14, 4262, 88.08, 90.36, 99.50, 94.71, 97.11, 99.71),
    ("ResNet50x1", "BiT-R50x1", 7, 50, 77.54, 84.56, 97.67, 86.07, 91.11, 94.26),
    ("ResNet50x2", "BiT-R50x2", 7, 199, 82.12, 87.94, 98.29, 89.20, 93.43, 97.02),
    ("ResNet101x1", "BiT-R101x1", 7, 96, 80.67, 87.07, 98.48, 89.17, 94.08, 95.95),
    ("ResNet152x1", "BiT-R152x1", 7, 141, 81.88, 87.96, 98.82, 90.22, 94.17, 96.94),
    ("ResNet152x2", "BiT-R152x2", 7, 563, 84.97, 89.69, 99.06, 92.05, 95.37, 98.62),
    ("ResNet152x2", "BiT-R152x2", 14, 1126, 85.56, 89.89, 99.24, 91.92, 95.75, 98.75),
    ("ResNet200x3", "BiT-R200x3", 14, 3306, 87.22, 90.15, 99.34, 93.53, 96.32, 99.04),
    ("R50x1+ViT-B/32", "R50+ViT-B/32", 7, 106, 84.90, 89.15, 99.01, 92.24, 95.75, 99.46),
    ("R50x1+ViT-B/16", "R50+ViT-B/16", 7, 274, 85.58, 89.65, 99.14, 92.63, 96.65, 99.40),
    ("R50x1+ViT-L/32", "R50+ViT-L/32", 7, 246, 85.68, 89.04, 99.24, 92.93, 96.97, 99.43),
    ("R50x1+ViT-L/16", "R50+ViT-L/16", 7, 859, 86.60, 89.72, 99.18, 93.64, 97.03, 99.40),
    ("R50x1+ViT-L/16", "R50+ViT-L/16", 14, 1668, 87.12, 89.76, 99.31, 93.89, 97.36, 99.11),
])


class FlopCount(int):
    """A FLOP count (an ``int``) with its per-part breakdown ``parts`` (name -> FLOPs)."""

    def __new__(cls, parts):
        count = super().__new__(cls, sum(parts.values()))
        count.parts = dict(parts)
        return count


def _ceil_half(side):
    return -(-side // 2)


def _conv(side, kernel, channels_in, channels_out):
    """FLOPs of a convolution producing a (side[0], side[1]) map."""
    return 2 * side[0] * side[1] * kernel * kernel * channels_in * channels_out


def _conv3x3(side_in, side_out, features):
    return _conv(side_out, 3, features, features)


def _axial_pair(side_in, side_out, features):
    """An AxialUnit's column and row attention on the unit's input map (heads do not count).

    Per position and layer: the 1x1 projection to 2C, then over the L positions of its axis
    q.k, q.r^q, k.r^k (C/2 wide in all heads) and the probabilities times v and r^v (C wide).
    """
    positions = side_in[0] * side_in[1]
    projection = 2 * positions * features * 2 * features
    return sum(projection + 2 * positions * 3.5 * features * length for length in side_in)


def resnet_units(side, stages, width_factor):
    """The bottleneck units of a BiT/hybrid/axial ResNet on an image of ``side`` (height,
    width): per unit ``(side_in, side_out, channels_in, features, stride)``, its output having
    ``4 * features`` channels. They follow the root (7x7/2 conv, max-pool /2: ``side`` halved
    twice, rounded up; ``root_width(width_factor)`` channels)."""
    width = root_width(width_factor)
    side = (_ceil_half(_ceil_half(side[0])), _ceil_half(_ceil_half(side[1])))
    channels = width
    for i, (units, stage_stride) in enumerate(zip(stages, stage_strides(len(stages)))):
        features = width * 2**i
        for unit in range(units):
            stride = stage_stride if unit == 0 else 1
            out = (-(-side[0] // stride), -(-side[1] // stride))
            yield side, out, channels, features, stride
            side, channels = out, 4 * features


def _resnet(side, channels, stages, width_factor, middle=_conv3x3):
    """FLOPs of a BiT/hybrid ResNet (root 7x7/2, max-pool /2, bottleneck stages) and its output.

    Both styles have the same convolutions: conv1 1x1, conv2 3x3 carrying the stride (``middle``
    counts what replaces it: ``_axial_pair`` for the AxialResNet), conv3 1x1 to 4x the width,
    and a strided 1x1 projection in each stage's first unit.
    """
    width = root_width(width_factor)
    root = _conv((_ceil_half(side[0]), _ceil_half(side[1])), 7, channels, width)
    # Without stages (R+ViT-Ti/16) the output is the root's.
    out = (_ceil_half(_ceil_half(side[0])), _ceil_half(_ceil_half(side[1])))
    total, channels_out = 0, width
    for side_in, out, channels_in, features, stride in resnet_units(side, stages, width_factor):
        total += _conv(side_in, 1, channels_in, features) + int(middle(side_in, out, features))
        total += _conv(out, 1, features, 4 * features)
        if channels_in != 4 * features or stride != 1:
            total += _conv(out, 1, channels_in, 4 * features)
        channels_out = 4 * features
    return root, total, out, channels_out


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


def _vit_flops(model, height, width):
    parts = {"stem": 0}
    side, channels = (height, width), model.num_channels
    if model.resnet is not None:
        root, stages, side, channels = _resnet(
            side, channels, model.resnet.get("num_layers", (3, 4, 9)),
            model.resnet.get("width_factor", 1))
        parts["stem"] = root + stages
    patch = model.patch_size
    grid = (side[0] // patch, side[1] // patch)
    dim, layers = model.hidden_size, model.num_layers
    tokens, spans = token_spans(model, grid)
    parts["patch_embedding"] = _conv(grid, patch, channels, dim)
    parts["attention_projections"] = layers * len(spans) * 2 * tokens * dim * 4 * dim
    matrix = 0
    for span in spans:  # every token against the span keys: q k^T, then probabilities times v
        matrix += 2 * 2 * tokens * span * dim
        if model.position_embedding == "relative":
            matrix += 2 * tokens * (2 * span - 1) * dim  # queries against the offset table
    parts["attention_matrix"] = layers * matrix
    parts["mlp"] = layers * len(spans) * 2 * 2 * tokens * dim * model.mlp_dim
    width_in, head = dim, 0
    if model.representation_size is not None:
        head += 2 * dim * model.representation_size
        width_in = model.representation_size
    if model.num_classes is not None:
        head += 2 * width_in * model.num_classes
    parts["head"] = head
    return parts


def _bit_flops(model, height, width):
    middle = _axial_pair if getattr(model, "num_heads", None) else _conv3x3
    root, stages, _, channels = _resnet(
        (height, width), model.num_channels, model.block_units, model.width_factor, middle)
    head = 0 if model.num_classes is None else 2 * channels * model.num_classes
    return {"stem": root, "stages": stages, "head": head}


def _check_size(model, image_size):
    size = image_size if image_size is not None else model.image_size
    if size is None:
        raise ValueError(
            f"{model.name} takes any image size; pass flops(model, image_size=...) to count one."
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


def _configuration(name, image_size, num_classes, overrides):
    """The checked configuration of a registered name, as the attributes ``flops`` reads.

    Nothing is built: the architecture is all ``flops`` needs, and ViT-H/14 has 632M weights.
    """
    _, model_class, config = parse(name)
    unknown = sorted(set(overrides) - set(_defaults(model_class)) - {"name", "dtype"})
    if unknown:
        raise TypeError(f"{model_class.__name__} takes no argument {', '.join(unknown)}; "
                        f"flops({name!r}, ...) takes the arguments of create_model.")
    config.update(overrides, image_size=image_size, num_classes=num_classes)
    arguments = {**_defaults(model_class), **config}
    arguments.pop("name"), arguments.pop("dtype")
    if issubclass(model_class, VisionTransformer):
        encoder, rest = EncoderConfig.split(arguments)
        arguments = vit_arguments(encoder, **rest)
        arguments["axial"] = issubclass(model_class, AxialVisionTransformer)
        resnet = arguments["resnet"]
        stem = 1 if resnet is None else hybrid_stride(resnet.get("num_layers", (3, 4, 9)))
        arguments["stride"] = arguments["patch_size"] * stem
    else:
        arguments["block_units"] = check_units(arguments["block_units"], "block_units",
                                               allow_empty=False)
        arguments["image_size"] = image_shape(arguments["image_size"])
    return model_class, types.SimpleNamespace(name=name, **arguments)


def flops(model, image_size=None, **overrides):
    """FLOPs of one forward pass of one image, with a per-part breakdown.

    Counted from the architecture (no tracing), a multiply-add being two FLOPs; the paper's
    pre-training compute (Table 6) is this x 3 (forward and backward) x images seen.

    Args:
        model: a ``VisionTransformer`` (plain, hybrid or Axial-ViT), a ``ResNetV2`` (BiT) or an
            ``AxialResNet``, or a
            registered name (``"ViT-H/14"``, ``"R50+ViT-B/16"``, ``"BiT-R200x3"``), counted from
            its configuration without building the model.
        image_size: int or (height, width); by default the model's own, 224 for a name.
        **overrides: with a name only, the arguments ``create_model`` takes (``num_classes``,
            1000 by default, ``classifier``, ``num_channels``...).

    Returns:
        a ``FlopCount``: the total as an ``int``, and ``.parts`` (name -> FLOPs): ``stem``,
        ``patch_embedding``, ``attention_projections``, ``attention_matrix``, ``mlp``, ``head``
        for a ViT (``stem`` is the ResNet of a hybrid, 0 otherwise); ``stem`` (root),
        ``stages`` and ``head`` for BiT.

    Example (the attention matrix grows with the square of the token count):
    >>> from keras_vit.models.registry import build_model as create_model
    >>> model = create_model("ViT-B/16", image_size=None, position_embedding_grid=(14, 14))
    >>> small, large = flops(model, 224), flops(model, 448)
    >>> round(large.parts["attention_matrix"] / small.parts["attention_matrix"], 1)
    15.9
    >>> round(flops("ViT-H/14") / 1e9)  # by name: nothing is built
    335
    """
    if isinstance(model, str):
        num_classes = overrides.pop("num_classes", 1000)
        model_class, model = _configuration(
            model, 224 if image_size is None else image_size, num_classes, overrides)
    elif overrides:
        raise TypeError(f"flops takes {', '.join(sorted(overrides))} only with a model name; a "
                        "built model has its configuration already.")
    elif isinstance(model, (VisionTransformer, ResNetV2, AxialResNet)):
        model_class = type(model)
    else:
        raise TypeError(
            f"flops counts keras_vit VisionTransformer and ResNetV2 models (Axial-ViT and "
            f"AxialResNet included) and their registered names, got {type(model).__name__}; "
            "count other models with XLA's cost analysis "
            "(jax.jit(f).lower(x).compile().cost_analysis())."
        )
    count = _vit_flops if issubclass(model_class, VisionTransformer) else _bit_flops
    return FlopCount(count(model, *_check_size(model, image_size)))


def pretraining_flops(model, epochs, *, images=JFT_IMAGES, image_size=224,
                      num_classes=JFT_CLASSES):
    """Pre-training compute as the paper's Table 6 counts it: forward FLOPs x 3 x images seen.

    The backward pass costs about twice the forward one, hence x 3 (forward and backward).

    Args:
        model: a registered name (counted without building it) or a built model.
        epochs: passes over the ``images`` training images (JFT-300M by default).
        image_size: the pre-training resolution (224 in the paper).
        num_classes: the pre-training head (JFT's 18,291 classes by default).

    Example (ViT-L/16, 14 epochs on JFT-300M; the paper's Table 6 says 1567 exaFLOPs):
    >>> round(pretraining_flops("ViT-L/16", 14) / 1e18)
    1567
    """
    if isinstance(model, str):
        forward = flops(model, image_size, num_classes=num_classes)
    else:
        forward = flops(model, image_size)
    return 3 * forward * epochs * images
