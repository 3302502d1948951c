"""The compute of a forward pass, counted by formula from the architecture (paper Fig. 5, Table 6).

A multiply-add is two FLOPs. Counted: every matrix product and convolution (patch embedding,
the q/k/v/out projections, the attention matrix q k^T and its product with v, the MLP, the ResNet
convolutions, ``pre_logits`` and the head). Not counted: element-wise work (LayerNorm, GroupNorm,
softmax, GELU, bias and residual adds, the position embedding, pooling, weight
standardisation), a fraction of a per cent for a ViT-B; XLA's cost analysis counts those too.

Example (ViT-B/16 at 224 px: 17.6 GMACs, the figure timm and papers quote):
>>> from keras_vit.models.registry import create_model
>>> count = flops(create_model("ViT-B/16"))
>>> round(count / 2e9, 1)
17.6
>>> sorted(count.parts)
['attention_matrix', 'attention_projections', 'head', 'mlp', 'patch_embedding', 'stem']
"""

from keras_vit.layers.resnet import root_width, stage_strides
from keras_vit.models.base import image_shape
from keras_vit.models.resnet_v2 import ResNetV2
from keras_vit.models.vit import VisionTransformer


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


def _resnet(side, channels, stages, width_factor):
    """FLOPs of a BiT/hybrid ResNet (root 7x7/2, max-pool /2, bottleneck stages) and its output.

    Both styles have the same convolutions: conv1 1x1, conv2 3x3 carrying the stride, conv3 1x1
    to 4x the width, and a strided 1x1 projection in each stage's first unit.
    """
    width = root_width(width_factor)
    side = (_ceil_half(side[0]), _ceil_half(side[1]))
    root = _conv(side, 7, channels, width)
    side = (_ceil_half(side[0]), _ceil_half(side[1]))  # the max-pool
    total, channels = 0, width
    for i, (units, stage_stride) in enumerate(zip(stages, stage_strides(len(stages)))):
        features = width * 2**i
        for unit in range(units):
            stride = stage_stride if unit == 0 else 1
            out = (-(-side[0] // stride), -(-side[1] // stride))
            total += _conv(side, 1, channels, features) + _conv(out, 3, features, features)
            total += _conv(out, 1, features, 4 * features)
            if channels != 4 * features or stride != 1:
                total += _conv(out, 1, channels, 4 * features)
            side, channels = out, 4 * features
    return root, total, side, channels


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
    tokens = grid[0] * grid[1] + (model.classifier == "token")
    parts["patch_embedding"] = _conv(grid, patch, channels, dim)
    parts["attention_projections"] = layers * 2 * tokens * dim * 4 * dim
    matrix = 2 * 2 * tokens * tokens * dim  # q k^T, then the probabilities times v
    if model.position_embedding == "relative":
        matrix += 2 * tokens * (2 * tokens - 1) * dim  # queries against the offset table
    parts["attention_matrix"] = layers * matrix
    parts["mlp"] = layers * 2 * 2 * tokens * dim * model.mlp_dim
    width_in, head = dim, 0
    if model.representation_size is not None:
        head += 2 * dim * model.representation_size
        width_in = model.representation_size
    if model.num_classes is not None:
        head += 2 * width_in * model.num_classes
    parts["head"] = head
    return parts


def _bit_flops(model, height, width):
    root, stages, _, channels = _resnet(
        (height, width), model.num_channels, model.block_units, model.width_factor)
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


def flops(model, image_size=None):
    """FLOPs of one forward pass of one image, with a per-part breakdown.

    Counted from the architecture (no tracing), a multiply-add being two FLOPs; the paper's
    pre-training compute (Table 6) is this x 3 (forward and backward) x images seen.

    Args:
        model: a ``VisionTransformer`` (plain or hybrid) or a ``ResNetV2`` (BiT).
        image_size: int or (height, width); by default the model's own.

    Returns:
        a ``FlopCount``: the total as an ``int``, and ``.parts`` (name -> FLOPs): ``stem``,
        ``patch_embedding``, ``attention_projections``, ``attention_matrix``, ``mlp``, ``head``
        for a ViT (``stem`` is the ResNet of a hybrid, 0 otherwise); ``stem`` (root),
        ``stages`` and ``head`` for BiT.

    Example (the attention matrix grows with the square of the token count):
    >>> from keras_vit.models.registry import create_model
    >>> model = create_model("ViT-B/16", image_size=None, position_embedding_grid=(14, 14))
    >>> small, large = flops(model, 224), flops(model, 448)
    >>> round(large.parts["attention_matrix"] / small.parts["attention_matrix"], 1)
    15.9
    """
    if isinstance(model, VisionTransformer):
        return FlopCount(_vit_flops(model, *_check_size(model, image_size)))
    if isinstance(model, ResNetV2):
        return FlopCount(_bit_flops(model, *_check_size(model, image_size)))
    raise TypeError(
        f"flops counts keras_vit VisionTransformer and ResNetV2 models, got "
        f"{type(model).__name__}; count other models with XLA's cost analysis "
        "(jax.jit(f).lower(x).compile().cost_analysis())."
    )
