"""The compute of a forward pass, counted by formula from the architecture (paper Fig. 5, Table 6).

A multiply-add is two FLOPs. Counted: every matrix product and convolution (patch embedding,
the q/k/v/out projections, the attention matrix q k^T and its product with v, the MLP, the ResNet
convolutions, ``pre_logits`` and the head). Not counted: element-wise work (LayerNorm, GroupNorm,
softmax, GELU, bias and residual adds, the position embedding, pooling, weight
standardisation), a fraction of a per cent for a ViT-B; XLA's cost analysis counts those too.

Example (ViT-B/16 at 224 px: 17.6 GMACs, the figure timm and papers quote):
>>> import keras_vit
>>> count = flops(keras_vit.create_model("ViT-B/16"))
>>> round(count / 2e9, 1)
17.6
>>> sorted(count.parts)
['attention_matrix', 'attention_projections', 'head', 'mlp', 'patch_embedding', 'stem']

A registered name or a ``ViTConfig`` is counted from its description, without building the
model, so that ViT-H/14 or BiT-R200x3 cost nothing to count (``flops("ViT-H/14")``,
``flops(keras_vit.models.registry.model_config("ViT-H/14"))``). ``pretraining_flops`` is
our estimate of the compute column of the paper's Table 6 (``keras_vit.costs.table_6``).
"""

from keras_vit.costs.architecture import (
    AXIAL_PROJECTION_WIDTH,
    ceil_half,
    read,
    resnet_units,
    root_output,
    token_spans,
)
from keras_vit.costs.table_6 import JFT_CLASSES, JFT_IMAGES, PRETRAINING_IMAGE_SIZE
from keras_vit.layers.resnet import EXPANSION, ROOT_KERNEL, root_width
from keras_vit.models.description import Description
from keras_vit.models.registry import AXIAL_RESNET, AXIAL_VIT, BIT, HYBRID, VIT

FLOPS_PER_MULTIPLY_ADD = 2
# A training step's products: the forward pass, and a backward pass that multiplies twice as
# much (the gradients of each product's two operands). Table 6 counts compute this way: its
# column is forward FLOPs x 3 x images seen (tests/costs/test_compute.py, within 2.5 %).
TRAINING_OVER_FORWARD = 3
# A Transformer block's products per token: the q, k, v and output projections (D x D each),
# the attention's two (q k^T, then the probabilities times v, over the keys of its span), and
# the MLP's two layers (D x mlp_dim each).
ATTENTION_PROJECTIONS = 4
ATTENTION_MATRIX_PRODUCTS = 2
MLP_LAYERS = 2
# Axial-DeepLab's attention (an AxialUnit's column or row attention, per position and key),
# after its projection (``AXIAL_PROJECTION_WIDTH``): three products C/2 wide (q.k, q.r^q,
# k.r^k: queries and keys take C/2 each) and two C wide (the probabilities times v and r^v).
AXIAL_LOGIT_PRODUCTS, AXIAL_LOGIT_WIDTH = 3, 0.5
AXIAL_VALUE_PRODUCTS, AXIAL_VALUE_WIDTH = 2, 1.0


class FlopCount(int):
    """A FLOP count (an ``int``) with its per-part breakdown ``parts`` (name -> FLOPs)."""

    def __new__(cls, parts):
        count = super().__new__(cls, sum(parts.values()))
        count.parts = dict(parts)
        return count


def _conv(side, kernel, channels_in, channels_out):
    """FLOPs of a convolution producing a (side[0], side[1]) map."""
    return FLOPS_PER_MULTIPLY_ADD * side[0] * side[1] * kernel * kernel * channels_in * channels_out


def _conv3x3(side_in, side_out, features):
    return _conv(side_out, 3, features, features)


def _axial_pair(side_in, side_out, features):
    """An AxialUnit's column and row attention on the unit's input map (heads do not count)."""
    positions = side_in[0] * side_in[1]
    projection = _conv(side_in, 1, features, AXIAL_PROJECTION_WIDTH * features)
    per_key = (AXIAL_LOGIT_PRODUCTS * AXIAL_LOGIT_WIDTH
               + AXIAL_VALUE_PRODUCTS * AXIAL_VALUE_WIDTH) * features
    return sum(projection + FLOPS_PER_MULTIPLY_ADD * positions * per_key * length
               for length in side_in)


def _resnet(side, channels, stages, width_factor, middle):
    """FLOPs of a BiT/hybrid/axial ResNet (root 7x7/2, max-pool /2, bottleneck stages) and its
    output.

    Every kind has the same convolutions: conv1 1x1, conv2 3x3 carrying the stride (``middle``,
    the kind's ``MIDDLES`` entry, counts it or what replaces it), conv3 1x1 to
    ``EXPANSION`` x the width, and a strided 1x1 projection in each stage's first unit.
    """
    width = root_width(width_factor)
    root = _conv((ceil_half(side[0]), ceil_half(side[1])), ROOT_KERNEL, channels, width)
    out = root_output(side)  # without stages (R+ViT-Ti/16) the output is the root's
    total, channels_out = 0, width
    for side_in, out, channels_in, features, stride in resnet_units(side, stages, width_factor):
        channels_out = EXPANSION * features
        total += _conv(side_in, 1, channels_in, features) + int(middle(side_in, out, features))
        total += _conv(out, 1, features, channels_out)
        if channels_in != channels_out or stride != 1:
            total += _conv(out, 1, channels_in, channels_out)
    return root, total, out, channels_out


def _dense(width_in, width_out, rows=1):
    return FLOPS_PER_MULTIPLY_ADD * rows * width_in * width_out


def _vit_flops(config, height, width):
    """A ViT or Axial-ViT: patches of the image, no stem."""
    return _transformer_flops(config, (height, width), config.patches.num_channels, 0)


def _hybrid_flops(config, height, width):
    """A hybrid: its ResNet stem, then the ViT on the stem's feature map."""
    stem = config.stem
    root, stages, side, channels = _resnet((height, width), config.patches.num_channels,
                                           stem.num_layers, stem.width_factor,
                                           MIDDLES[config.family.stem])
    return _transformer_flops(config, side, channels, root + stages)


def _transformer_flops(config, side, channels, stem):
    """A ViT's parts from the patch embedding of a (``side``, ``channels``) input on, after a
    stem of ``stem`` FLOPs."""
    parts = {"stem": stem}
    encoder, patch = config.encoder, config.patches.patch_size
    grid = (side[0] // patch, side[1] // patch)
    dim, layers = encoder.hidden_size, encoder.num_layers
    tokens, spans = token_spans(config, grid)
    blocks = layers * len(spans)  # an Axial-ViT layer has a row and a column block
    parts["patch_embedding"] = _conv(grid, patch, channels, dim)
    parts["attention_projections"] = blocks * ATTENTION_PROJECTIONS * _dense(dim, dim, tokens)
    parts["attention_matrix"] = layers * sum(_attention_matrix(encoder, tokens, span, dim)
                                             for span in spans)
    parts["mlp"] = blocks * MLP_LAYERS * _dense(dim, encoder.mlp_dim, tokens)
    head = config.head
    parts["head"] = 0 if head is None else _head(dim, head.representation_size, head.num_classes)
    return parts


def _attention_matrix(encoder, tokens, span, dim):
    """Every token against the ``span`` keys of its attention (and their relative offsets)."""
    count = ATTENTION_MATRIX_PRODUCTS * _dense(span, dim, tokens)
    if encoder.position_embedding == "relative":  # queries against the 2 span - 1 offsets
        count += _dense(2 * span - 1, dim, tokens)
    return count


def _head(width_in, representation_size, num_classes):
    """``pre_logits`` (if any), then the classifier (if any)."""
    head = 0
    if representation_size is not None:
        head += _dense(width_in, representation_size)
        width_in = representation_size
    if num_classes is not None:
        head += _dense(width_in, num_classes)
    return head


# Kind of ResNet (a family's stem, ``keras_vit.models.family.STEMS``) -> what its units have
# in place of a 3x3 convolution.
MIDDLES = {"bit": _conv3x3, "hybrid": _conv3x3, "axial": _axial_pair}


def _resnet_flops(description, height, width):
    stages = description.stages
    root, total, _, channels = _resnet((height, width), description.num_channels,
                                       stages.block_units, stages.width_factor,
                                       MIDDLES[description.family.stem])
    head = description.head
    return {"stem": root, "stages": total,
            "head": 0 if head is None else _head(channels, head.representation_size,
                                                 head.num_classes)}


# Family (``keras_vit.models.family.Family``) -> its count.
COUNTS = {VIT: _vit_flops, HYBRID: _hybrid_flops, BIT: _resnet_flops, AXIAL_VIT: _vit_flops,
          AXIAL_RESNET: _resnet_flops}


def flops(model, image_size=None, **overrides):
    """FLOPs of one forward pass of one image, with a per-part breakdown.

    Counted from the architecture (no tracing), a multiply-add being two FLOPs; the paper's
    pre-training compute (Table 6) is this x 3 (forward and backward) x images seen.

    Args:
        model: a keras_vit backbone or classifier of any family (ViT, hybrid, Axial-ViT, BiT
            ResNet, AxialResNet); or, counted without building a model, a registered name
            (``"ViT-H/14"``, ``"R50+ViT-B/16"``, ``"BiT-R200x3"``) or a description
            (``ViTConfig``, ``ResNetConfig``).
        image_size: int or (height, width); by default the model's own, 224 for a name.
        **overrides: with a name, the arguments ``create_model`` takes (``num_classes``, 1000
            by default, ``classifier``, ``num_channels``, ``stem``...); with a description, the
            settings its ``replace`` takes.

    Returns:
        a ``FlopCount``: the total as an ``int``, and ``.parts`` (name -> FLOPs): ``stem``,
        ``patch_embedding``, ``attention_projections``, ``attention_matrix``, ``mlp``, ``head``
        for a ViT (``stem`` is the ResNet of a hybrid, 0 otherwise; ``head`` is 0 for a
        backbone); ``stem`` (root), ``stages`` and ``head`` for BiT and AxialResNet.

    Example (the attention matrix grows with the square of the token count; a description
    is counted as the model it describes, nothing built):
    >>> from keras_vit.models.registry import model_config
    >>> config = model_config("ViT-B/16")
    >>> small, large = flops(config, 224), flops(config, 448)
    >>> round(large.parts["attention_matrix"] / small.parts["attention_matrix"], 1)
    15.9
    >>> round(flops("ViT-H/14") / 1e9)  # by name: nothing is built
    335
    """
    try:
        description, height, width = read(model, image_size, overrides)
    except TypeError as error:
        if isinstance(model, (str, Description)) or hasattr(model, "config"):
            raise
        raise TypeError(f"{error} Count other models with XLA's cost analysis "
                        "(jax.jit(f).lower(x).compile().cost_analysis()).") from error
    return FlopCount(COUNTS[description.family](description, height, width))


def pretraining_flops(model, epochs, *, images=JFT_IMAGES, image_size=PRETRAINING_IMAGE_SIZE,
                      num_classes=JFT_CLASSES):
    """Pre-training compute as the paper's Table 6 counts it: forward FLOPs x
    ``TRAINING_OVER_FORWARD`` (forward and backward) x images seen.

    Args:
        model: a registered name or a description (counted without building a model), or a
            built model.
        epochs: passes over the ``images`` training images (JFT-300M by default).
        image_size: the pre-training resolution (224 in the paper).
        num_classes: the pre-training head (JFT's 18,291 classes by default).

    Example (ViT-L/16, 14 epochs on JFT-300M; the paper's Table 6 says 1567 exaFLOPs):
    >>> round(pretraining_flops("ViT-L/16", 14) / 1e18)
    1567
    """
    if isinstance(model, (str, Description)):
        forward = flops(model, image_size, num_classes=num_classes)
    else:
        forward = flops(model, image_size)
    return TRAINING_OVER_FORWARD * forward * epochs * images
