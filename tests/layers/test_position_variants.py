"""The position-embedding layers of the paper's Appendix D.4 and the attention bias they use."""

import math

import keras
import numpy as np
import pytest

from keras_vit.layers.attention import MultiHeadSelfAttention
from keras_vit.layers.position import (
    AddPositionEmbedding,
    AddPositionEmbedding2D,
    RelativePositionLogits,
)


def _np(x):
    return np.asarray(keras.ops.convert_to_numpy(x))


def test_2d_embedding_concatenates_x_and_y_halves():
    layer = AddPositionEmbedding2D(grid_size=(2, 3))
    out = _np(layer(np.zeros((1, 7, 8), "float32")))
    col, row, cls = (_np(w) for w in (layer.col_embedding, layer.row_embedding,
                                      layer.cls_embedding))
    np.testing.assert_allclose(out[0, 0], cls[0])
    for r in range(2):
        for c in range(3):
            token = out[0, 1 + r * 3 + c]
            np.testing.assert_allclose(token[:4], col[c])
            np.testing.assert_allclose(token[4:], row[r])


@pytest.mark.parametrize("tokens, extra", [(6, 0), (7, 8)])
def test_2d_embedding_parameters_are_rows_plus_cols_times_half_width(tokens, extra):
    layer = AddPositionEmbedding2D(grid_size=(2, 3))
    layer.build((None, tokens, 8))
    assert layer.count_params() == (2 + 3) * 8 // 2 + extra
    assert layer.has_class_token == bool(extra)


def test_2d_embedding_adds_to_the_inputs():
    layer = AddPositionEmbedding2D(grid_size=2)
    x = np.random.default_rng(1).normal(size=(3, 4, 6)).astype("float32")
    out = _np(layer(x))
    np.testing.assert_allclose(out - x, np.broadcast_to(_np(layer.position_embeddings()), x.shape),
                               atol=1e-6)


def test_2d_embedding_rejects_odd_width_and_wrong_token_count():
    with pytest.raises(ValueError, match="must be even"):
        AddPositionEmbedding2D(grid_size=2)(np.zeros((1, 4, 5), "float32"))
    with pytest.raises(ValueError, match="expects 4 tokens"):
        AddPositionEmbedding2D(grid_size=2)(np.zeros((1, 6, 4), "float32"))
    with pytest.raises(ValueError, match="grid_size"):
        AddPositionEmbedding2D(grid_size=(2, 2, 2))


def test_1d_embedding_exposes_its_table():
    layer = AddPositionEmbedding()
    layer(np.zeros((1, 5, 4), "float32"))
    np.testing.assert_array_equal(_np(layer.position_embeddings()), _np(layer.pos_embedding))


def _relative_reference(query, table):
    """b[b, h, i, j] = q[b, i, h] . r[i - j + N - 1, h], computed with loops."""
    batch, tokens, heads, _ = query.shape
    out = np.zeros((batch, heads, tokens, tokens))
    for i in range(tokens):
        for j in range(tokens):
            out[:, :, i, j] = np.einsum("bhd,hd->bh", query[:, i], table[i - j + tokens - 1])
    return out


def test_relative_logits_match_the_offset_definition():
    rng = np.random.default_rng(2)
    query = rng.normal(size=(2, 5, 3, 4)).astype("float32")
    layer = RelativePositionLogits()
    layer.build(query.shape)
    table = rng.normal(size=(9, 3, 4)).astype("float32")
    layer.embedding.assign(table)
    np.testing.assert_allclose(_np(layer(query)), _relative_reference(query, table), atol=1e-5)
    assert tuple(layer.embedding.shape) == (2 * 5 - 1, 3, 4)


def test_relative_logits_are_toeplitz_for_a_constant_query():
    layer = RelativePositionLogits(initializer_stddev=1.0)
    logits = _np(layer(np.ones((1, 6, 2, 4), "float32")))[0]
    for h in range(2):
        for offset in range(-5, 6):
            assert np.ptp(np.diagonal(logits[h], offset)) < 1e-5


def _attention_reference(layer, x, bias):
    heads = (layer.num_heads, layer.head_dim)
    q, k, v = ((x @ _np(p.kernel) + _np(p.bias)).reshape(*x.shape[:2], *heads)
               for p in (layer.query, layer.key, layer.value))
    logits = np.einsum("bqhk,bshk->bhqs", q, k) / math.sqrt(q.shape[-1]) + bias
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    context = np.einsum("bhqs,bshk->bqhk", probs, v)
    context = context.reshape(*x.shape[:2], -1)
    return context @ _np(layer.out.kernel) + _np(layer.out.bias), probs


def test_attention_bias_on_both_paths_matches_numpy():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    bias = rng.normal(size=(2, 2, 5, 5)).astype("float32")
    layer = MultiHeadSelfAttention(num_heads=2)
    layer.build(x.shape)
    expected, expected_probs = _attention_reference(layer, x.astype("float64"), bias)
    fast = _np(layer(x, bias=bias))
    probs = layer.probabilities(x, bias=bias)
    np.testing.assert_allclose(fast, expected, atol=1e-5)
    np.testing.assert_allclose(_np(probs), expected_probs, atol=1e-5)


def test_attention_bias_can_mask_keys_and_broadcasts():
    x = np.random.default_rng(4).normal(size=(1, 4, 8)).astype("float32")
    bias = np.zeros((1, 1, 1, 4), "float32")
    bias[..., 2:] = -1e9
    layer = MultiHeadSelfAttention(num_heads=2)
    layer.build(x.shape)
    probs = _np(layer.probabilities(x, bias=bias))
    np.testing.assert_allclose(probs[..., 2:], 0.0, atol=1e-7)
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-6)
    masked_fast = _np(layer(x, bias=bias))
    plain = _np(layer(x))
    assert not np.allclose(masked_fast, plain, atol=1e-4)
    expected, _ = _attention_reference(layer, x.astype("float64"), bias)
    np.testing.assert_allclose(masked_fast, expected, atol=1e-5)


def test_relative_attention_adds_its_logits_on_both_paths():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    layer = MultiHeadSelfAttention(num_heads=2, relative_position=True)
    layer.build(x.shape)
    table = rng.normal(size=(9, 2, 4)).astype("float32")
    layer.relative_logits.embedding.assign(table)
    q = (x @ _np(layer.query.kernel) + _np(layer.query.bias)).reshape(2, 5, 2, 4)
    bias = _relative_reference(q / 2.0, table)  # queries scaled by 1/sqrt(head_dim = 4)
    expected, expected_probs = _attention_reference(layer, x.astype("float64"), bias)
    np.testing.assert_allclose(_np(layer(x)), expected, atol=1e-5)
    np.testing.assert_allclose(_np(layer.probabilities(x)), expected_probs, atol=1e-5)


def test_relative_attention_config_and_weight_path():
    layer = MultiHeadSelfAttention(num_heads=2, relative_position=True, name="attn")
    layer.build((None, 5, 8))
    config = layer.get_config()
    assert config["relative_position"] is True
    clone = MultiHeadSelfAttention.from_config(config)
    clone.build((None, 5, 8))
    assert [w.path for w in clone.weights] == [w.path for w in layer.weights]
    assert "attn/relative_position/embedding" in [w.path for w in layer.weights]
    plain = MultiHeadSelfAttention(num_heads=2)
    plain.build((None, 5, 8))
    assert len(plain.weights) == 8 and plain.relative_logits is None
