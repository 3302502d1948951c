"""The number of weights of a model, counted from its description without building it.

A built model answers ``count_params()``; a description (a ``ViTConfig``, such as a registered
name's: ``"ViT-H/14"``, 632M weights) is counted layer by layer, so that ``memory`` can size a
model nobody built. ``tests/costs/test_memory.py`` checks the count against ``count_params()``
of built models.

Example (paper Table 1: ViT-B has 86M weights, ViT-H 632M):
>>> from keras_vit.models.registry import model_config
>>> count_parameters(model_config("ViT-H/14"), 224, 224)
632045800
"""

import keras

from keras_vit.costs.architecture import AXIAL_PROJECTION_WIDTH, resnet_units, token_spans
from keras_vit.layers.resnet import EXPANSION, ROOT_KERNEL, root_width
from keras_vit.models.description import Description
from keras_vit.models.registry import AXIAL_RESNET, AXIAL_VIT, BIT, HYBRID, VIT

NORM_WEIGHTS = 2  # a LayerNorm or GroupNorm: a scale and a bias per channel


def _norm(channels):
    return NORM_WEIGHTS * channels


def _conv(kernel, channels_in, channels_out):
    """A weight-standardised convolution: no bias (a GroupNorm follows)."""
    return kernel * kernel * channels_in * channels_out


def _dense(width_in, width_out):
    return (width_in + 1) * width_out


def _axial_attention(features, heads, length):
    """One attention of an AxialUnit along an axis of ``length``: its 1x1 projection to 2C, its
    (2C / heads, 2L - 1) relative table, and GroupNorms of 2C and C."""
    projected = AXIAL_PROJECTION_WIDTH * features
    table = AXIAL_PROJECTION_WIDTH * (features // heads) * (2 * length - 1)
    return _conv(1, features, projected) + table + _norm(projected) + _norm(features)


def _bit_middle(side_in, channels, features, out, heads):
    """BiT's (pre-activation: gn1 reads the unit's input): conv2, gn1, gn2, gn3."""
    return _conv(3, features, features) + _norm(channels) + 2 * _norm(features)


def _hybrid_middle(side_in, channels, features, out, heads):
    """A hybrid's (post-activation): conv2, gn1, gn2, gn3 (on the unit's output)."""
    return _conv(3, features, features) + 2 * _norm(features) + _norm(out)


def _axial_middle(side_in, channels, features, out, heads):
    """An AxialResNet's: two attentions instead of conv2 and gn2; gn1, gn3."""
    return _norm(features) + _norm(out) + sum(
        _axial_attention(features, heads, length) for length in side_in)


# Kind of ResNet (a family's stem, ``keras_vit.models.family.STEMS``) -> (the weights of its
# unit besides conv1, conv3 and the shortcut; its GroupNorms after the root and after each
# projection; its GroupNorms before the head). Post-activation units (hybrid, axial) normalise
# what they compute; BiT's pre-activation units leave one norm for the end.
UNITS = {"bit": (_bit_middle, 0, 1), "hybrid": (_hybrid_middle, 1, 0),
         "axial": (_axial_middle, 1, 0)}


def _unit(kind, side_in, channels, features, stride, heads):
    """A bottleneck unit of a ResNet of ``kind`` (``UNITS``); a projection shortcut where the
    shape changes."""
    middle, norms, _ = UNITS[kind]
    out = EXPANSION * features
    count = _conv(1, channels, features) + _conv(1, features, out)  # conv1, conv3
    count += middle(side_in, channels, features, out, heads)
    if channels != out or stride != 1:
        count += _conv(1, channels, out) + norms * _norm(out)
    return count


def _resnet(channels, side, stages, width_factor, kind, heads=None):
    """Weights and output channels of a ResNet of ``kind`` (``UNITS``) on images of ``side``;
    a post-activation root has a GroupNorm, BiT's none."""
    width = root_width(width_factor)
    count = _conv(ROOT_KERNEL, channels, width) + UNITS[kind][1] * _norm(width)
    out_channels = width
    for side_in, _, channels, features, stride in resnet_units(side, stages, width_factor):
        count += _unit(kind, side_in, channels, features, stride, heads)
        out_channels = EXPANSION * features
    return count, out_channels


def _position(config, grid, spans):
    """The position embedding's tables (paper Appendix D.4)."""
    encoder = config.encoder
    dim, layers = encoder.hidden_size, encoder.num_layers
    if encoder.position_embedding == "relative":  # a (2 span - 1, heads, head width) table each
        return layers * sum(2 * span - 1 for span in spans) * dim
    if encoder.position_embedding == "none":
        return 0
    grid = config.position_embedding_grid or grid
    cls = encoder.classifier == "token"
    table = (grid[0] * grid[1] + cls) * dim
    if encoder.position_embedding == "learned_2d":  # X and Y tables of D / 2, and the class row
        table = (grid[0] + grid[1]) * (dim // 2) + cls * dim
    return table * (layers if encoder.position_embedding_placement == "every_layer" else 1)


def _head(width, representation_size, num_classes):
    """``pre_logits`` (if any), then the classifier (if any)."""
    count = 0
    if representation_size is not None:
        count += _dense(width, representation_size)
        width = representation_size
    return count + (0 if num_classes is None else _dense(width, num_classes))


def _encoder_block(dim, mlp):
    """Two LayerNorms, the q, k, v and output projections, the MLP's two layers."""
    return 2 * _norm(dim) + 4 * _dense(dim, dim) + _dense(dim, mlp) + _dense(mlp, dim)


def _resnet_model(description, height, width):
    """BiT (a final GroupNorm before the head) or AxialResNet (none)."""
    stages, head, kind = description.stages, description.head, description.family.stem
    count, channels = _resnet(description.num_channels, (height, width), stages.block_units,
                              stages.width_factor, kind,
                              getattr(description.axial, "num_heads", None))
    return count + UNITS[kind][2] * _norm(channels) + (
        0 if head is None else _head(channels, head.representation_size, head.num_classes))


def _vit_model(config, height, width):
    """A ViT or Axial-ViT: patches of the image."""
    return _transformer(config, height, width, config.patches.num_channels)


def _hybrid_model(config, height, width):
    """A hybrid: its ResNet stem, then the ViT on the stem's feature map."""
    stem = config.stem
    count, channels = _resnet(config.patches.num_channels, (height, width), stem.num_layers,
                              stem.width_factor, config.family.stem)
    return count + _transformer(config, height, width, channels)


def _transformer(config, height, width, channels):
    """A ViT's weights from the patch embedding of a ``channels``-deep input on."""
    encoder, patch = config.encoder, config.patches.patch_size
    dim = encoder.hidden_size
    grid = (height // config.stride, width // config.stride)
    _, spans = token_spans(config, grid)
    count = _conv(patch, channels, dim) + dim  # the patch embedding has a bias
    count += (encoder.classifier == "token") * dim + _position(config, grid, spans)
    head = config.head
    count += _norm(dim) + (0 if head is None else _head(dim, head.representation_size,
                                                         head.num_classes))  # final LayerNorm
    return count + encoder.num_layers * len(spans) * _encoder_block(dim, encoder.mlp_dim)


# Family (``keras_vit.models.family.Family``) -> its count.
COUNTS = {VIT: _vit_model, HYBRID: _hybrid_model, BIT: _resnet_model, AXIAL_VIT: _vit_model,
          AXIAL_RESNET: _resnet_model}


def count_parameters(model, height, width):
    """The weights of a built model, or of a description (``keras_vit.models.description``) at
    images of ``height`` x ``width`` (which size a relative position table, and the learned one
    unless its grid is fixed)."""
    if isinstance(model, keras.Model):
        return model.count_params()
    if not isinstance(model, Description):
        raise TypeError(f"count_parameters counts a built model or a description (ViTConfig, "
                        f"ResNetConfig), got {type(model).__name__}.")
    return COUNTS[model.family](model, height, width)
