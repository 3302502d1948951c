"""Axial attention layers (paper Appendix D.6): each against a per-row/per-column reference."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_vit.layers.attention import AxialAttention, MultiHeadSelfAttention
from keras_vit.layers.axial import (
    AxialEncoder,
    AxialEncoderBlock,
    AxialUnit,
    PositionSensitiveAxialAttention,
)
from keras_vit.layers.encoder import EncoderBlock, EncoderConfig


def _x(*shape):
    return np.random.default_rng(0).normal(size=shape).astype("float32")


def _np(x):
    return ops.convert_to_numpy(x)


def _lines(x, axis):
    """The rows (axis 2) or columns (axis 1) of a (batch, H, W, D) grid as a batch of sequences:
    attention along one axis is self-attention on each of them, independently."""
    grid = x if axis == 2 else x.transpose(0, 2, 1, 3)
    return grid.reshape(-1, *grid.shape[2:]), grid.shape


def _grid(lines, shape, axis):
    grid = np.asarray(lines).reshape(shape)
    return grid if axis == 2 else grid.transpose(0, 2, 1, 3)


@pytest.mark.parametrize("axis", [1, 2])
def test_axial_attention_is_self_attention_on_each_row_or_column(axis):
    x = _x(2, 3, 4, 8)
    layer = AxialAttention(2, axis=axis, relative_position=True)
    y, probs = layer(x), layer.probabilities(x)
    plain = MultiHeadSelfAttention(2, relative_position=True)
    plain.build((None, x.shape[axis], 8))
    plain.set_weights(layer.get_weights())
    lines, shape = _lines(x, axis)
    out, p = plain(lines), plain.probabilities(lines)
    np.testing.assert_allclose(_np(y), _grid(_np(out), shape, axis), atol=1e-5)
    np.testing.assert_allclose(_np(probs), _np(p).reshape(_np(probs).shape), atol=1e-6)


def test_axial_block_is_a_row_block_then_a_column_block():
    x = _x(2, 3, 4, 8)
    block = AxialEncoderBlock(EncoderConfig(1, 2, 16))
    y, (row_probs, column_probs) = block(x), block.attention_probabilities(x)
    assert row_probs.shape == (2, 3, 2, 4, 4) and column_probs.shape == (2, 4, 2, 3, 3)
    row, column = EncoderBlock(EncoderConfig(1, 2, 16)), EncoderBlock(EncoderConfig(1, 2, 16))
    row.build((None, 4, 8))
    column.build((None, 3, 8))
    row.set_weights(block.row.get_weights())
    column.set_weights(block.column.get_weights())
    lines, shape = _lines(x, 2)
    h = _grid(_np(row(lines)), shape, 2)
    lines, shape = _lines(h, 1)
    np.testing.assert_allclose(_np(y), _grid(_np(column(lines)), shape, 1), atol=1e-5)


def test_class_row_and_position_placements():
    x = _x(2, 3, 4, 8)
    for options in (dict(position_embedding="learned_2d"),
                    dict(position_embedding_placement="every_layer"),
                    dict(position_embedding="relative"), dict(classifier="gap")):
        encoder = AxialEncoder(EncoderConfig(2, 2, 16, **options), (3, 4))
        out, seen = encoder(x), {}
        np.testing.assert_allclose(_np(encoder.encode(x, out=seen)), _np(out), atol=1e-5)
        probs = seen["attention"]
        rows = 3 + (options.get("classifier", "token") == "token")
        assert out.shape == (2, rows * 4, 8) and len(probs) == 4
        assert probs[1].shape == (2, 4, 2, rows, rows)
    # The class token is copied above every column: one learned token, as in the ViT.
    encoder = AxialEncoder(EncoderConfig(1, 2, 16), (3, 4))
    encoder(x)
    assert [w.path.split("/")[-1] for w in encoder.cls.weights] == ["cls"]
    assert encoder.position_layers[0].pos_embedding.shape == (1, 13, 8)


def _group_norm64(norm, t):
    """``norm`` (a ``GroupNormalization`` over the last axis) in float64, variance in two passes.
    (Keras' own layer under torch takes E[x^2] - E[x]^2 in float32, which loses digits when a
    group's mean is large against its spread: up to 3e-5 on these outputs.)"""
    groups, channels = norm.groups, t.shape[-1]
    g = t.reshape(t.shape[0], -1, groups, channels // groups)
    g = (g - g.mean((1, 3), keepdims=True)) / np.sqrt(g.var((1, 3), keepdims=True) + norm.epsilon)
    return g.reshape(t.shape) * _np(norm.gamma) + _np(norm.beta)


def _reference_position_sensitive(layer, x):
    """Wang et al. (2020) Eq. 4 with loops over the positions, on the layer's own weights, in
    float64."""
    x = x.astype("float64")
    xt = x if layer.axis == 2 else x.transpose(0, 2, 1, 3)
    batch, other, length, channels = xt.shape
    heads, width = layer.num_heads, channels // layer.num_heads
    qkv = _group_norm64(layer.gn_qkv, xt @ _np(layer.qkv.kernel)).reshape(
        batch, other, length, heads, -1)
    q, k, v = qkv[..., : width // 2], qkv[..., width // 2 : width], qkv[..., width:]
    table = _np(layer.relative_embedding).astype("float64")
    rq, rk, rv = table[: width // 2], table[width // 2 : width], table[width:]
    y = np.zeros((batch, other, length, heads, width))
    for o in range(length):
        offsets = np.arange(length) - o + length - 1  # p - o for every key p
        logits = (np.einsum("bnhd,bnphd->bnhp", q[:, :, o], k)
                  + np.einsum("bnhd,dp->bnhp", q[:, :, o], rq[:, offsets])
                  + np.einsum("bnphd,dp->bnhp", k, rk[:, offsets]))
        probs = np.exp(logits - logits.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        y[:, :, o] = (np.einsum("bnhp,bnphd->bnhd", probs, v)
                      + np.einsum("bnhp,dp->bnhd", probs, rv[:, offsets]))
    y = _group_norm64(layer.gn_out, y.reshape(batch, other, length, channels))
    return y if layer.axis == 2 else y.transpose(0, 2, 1, 3)


@pytest.mark.parametrize("axis", [1, 2])
@pytest.mark.parametrize("heads, size, seed", [(2, (5, 3), 1), (4, (6, 5), 2), (4, (6, 5), 4)],
                         ids=["wide", "narrow", "narrow-seed4"])
def test_position_sensitive_attention_follows_the_equation(axis, heads, size, seed):
    """4 heads of 32 channels give queries and keys of 4 channels: another form of the relative
    logits under jax.

    The tolerance is float32 rounding: outputs are at most about 3 in size, but ``gn_out``
    divides each group by its spread, here as small as 0.035, so the float32 layer's rounding
    (about 1e-7 before the norm) grows up to 30-fold. Against this float64 reference the layer
    was within 2.4e-6 on seeds 1-8, both axes, all three backends."""
    x = _x(2, *size, 32)
    layer = PositionSensitiveAxialAttention(heads, axis=axis)
    layer.build(x.shape)
    rng = np.random.default_rng(seed)
    layer.set_weights([rng.normal(0, 0.3, w.shape).astype("float32") for w in layer.weights])
    np.testing.assert_allclose(_np(layer(x)), _reference_position_sensitive(layer, x),
                               atol=1e-5)
    length = x.shape[axis]
    assert layer.relative_embedding.shape == (2 * 32 // heads, 2 * length - 1)


def test_position_sensitive_attention_of_one_position():
    layer = PositionSensitiveAxialAttention(2, axis=1)
    assert layer(_x(1, 1, 3, 32)).shape == (1, 1, 3, 32)


def test_unit_shapes_and_bad_input():
    assert AxialUnit(32, strides=2, num_heads=2)(_x(1, 5, 7, 64)).shape == (1, 3, 4, 128)
    identity = AxialUnit(32, num_heads=2)
    assert identity(_x(1, 5, 7, 128)).shape == (1, 5, 7, 128) and identity.conv_proj is None
    with pytest.raises(ValueError, match="divisible by 2 \\* num_heads"):
        PositionSensitiveAxialAttention(3, axis=2)(_x(1, 4, 4, 32))
    with pytest.raises(ValueError, match="axis must be 1"):
        AxialAttention(2, axis=3)
    with pytest.raises(ValueError, match="grid"):
        AxialAttention(2)(_x(2, 5, 8))
    with pytest.raises(ValueError, match="fixed image_size"):
        PositionSensitiveAxialAttention(2).build((None, None, None, 32))
    inputs = keras.Input((4, None, 8))
    with pytest.raises(ValueError, match="fixed image size"):
        AxialEncoder(EncoderConfig(1, 2, 16, position_embedding="relative"), (4, 4))(inputs)
