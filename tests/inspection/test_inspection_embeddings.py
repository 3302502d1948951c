"""position_embedding_similarity and embedding_filter_components, on analytic cases."""

import numpy as np
import pytest
from inspection_helpers import build_vit, to_numpy

from keras_vit.inspection import (
    FilterComponents,
    embedding_filter_components,
    position_embedding_similarity,
    position_similarity_by_distance,
    position_similarity_by_offset,
    position_similarity_summary,
)


def _orthonormal(rows, cols, seed):
    q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(max(rows, cols), cols)))
    return q[:rows]


@pytest.mark.parametrize("classifier", ["token", "gap"])
def test_orthonormal_position_embeddings_give_the_identity(classifier):
    model = build_vit(classifier)
    layer = model.get_layer("posembed_input")
    table = 3.0 * _orthonormal(16, 16, seed=1)
    if classifier == "token":
        table = np.concatenate([np.full((1, 16), 5.0), table])  # the class row is left out
    layer.pos_embedding.assign(table[None].astype("float32"))
    similarity = position_embedding_similarity(model)
    assert similarity.shape == (4, 4, 4, 4)
    np.testing.assert_allclose(similarity.reshape(16, 16), np.eye(16), atol=1e-6)


def test_2d_embedding_similarity_counts_shared_row_and_column():
    model = build_vit(position_embedding="learned_2d")
    layer = model.get_layer("posembed_input")
    layer.col_embedding.assign(_orthonormal(4, 8, seed=2).astype("float32"))
    layer.row_embedding.assign(_orthonormal(4, 8, seed=3).astype("float32"))
    similarity = position_embedding_similarity(model)
    r, c = np.meshgrid(np.arange(4), np.arange(4), indexing="ij")
    expected = ((r[:, :, None, None] == r[None, None]).astype(float)
                + (c[:, :, None, None] == c[None, None])) / 2
    np.testing.assert_allclose(similarity, expected, atol=1e-6)


def test_similarity_of_a_random_table_is_its_cosine_matrix():
    model = build_vit("token")
    similarity = position_embedding_similarity(model)
    table = to_numpy(model.get_layer("posembed_input").pos_embedding)[0, 1:].astype("float64")
    unit = table / np.linalg.norm(table, axis=-1, keepdims=True)
    np.testing.assert_allclose(similarity.reshape(16, 16), unit @ unit.T, atol=1e-6)
    np.testing.assert_allclose(np.diagonal(similarity.reshape(16, 16)), 1.0, atol=1e-6)
    np.testing.assert_array_equal(position_embedding_similarity(model.backbone), similarity)


def test_similarity_of_a_model_of_any_size_is_over_its_learned_grid():
    model = build_vit("gap", image_size=None, position_embedding_grid=(2, 3))
    table = to_numpy(model.get_layer("posembed_input").pos_embedding)[0].astype("float64")
    unit = table / np.linalg.norm(table, axis=-1, keepdims=True)
    similarity = position_embedding_similarity(model)
    assert similarity.shape == (2, 3, 2, 3)
    np.testing.assert_allclose(similarity.reshape(6, 6), unit @ unit.T, atol=1e-6)


def test_every_layer_similarity_reads_the_chosen_block():
    model = build_vit(position_embedding_placement="every_layer")
    first, last = (position_embedding_similarity(model, block=b) for b in (0, 2))
    table = to_numpy(model.get_layer("posembed_2").pos_embedding)[0, 1:].astype("float64")
    unit = table / np.linalg.norm(table, axis=-1, keepdims=True)
    np.testing.assert_allclose(last.reshape(16, 16), unit @ unit.T, atol=1e-6)
    assert not np.allclose(first, last)
    with pytest.raises(ValueError, match="block must be in"):
        position_embedding_similarity(model, block=3)


@pytest.mark.parametrize("kind", ["relative", "none"])
def test_similarity_needs_an_absolute_embedding(kind):
    with pytest.raises(ValueError, match="no absolute position embedding"):
        position_embedding_similarity(build_vit(position_embedding=kind))


def test_components_recover_a_known_basis():
    """Filters = mean + sum_k s_k a_k v_k^T with orthonormal zero-mean a_k and orthonormal v_k."""
    model = build_vit()
    kernel = model.get_layer("embedding").conv.kernel
    size, count = 4 * 4 * 3, 16
    rng = np.random.default_rng(4)
    basis = _orthonormal(size, 5, seed=5).T  # 5 orthonormal filters of 48 values
    q, _ = np.linalg.qr(np.concatenate([np.ones((count, 1)), rng.normal(size=(count, 5))], 1))
    scales = np.array([5.0, 4.0, 3.0, 2.0, 1.0])
    filters = rng.normal(size=(1, size)) + (q[:, 1:] * scales) @ basis  # (count, size)
    kernel.assign(filters.T.reshape(4, 4, 3, count).astype("float32"))
    result = embedding_filter_components(model, n=5)
    assert isinstance(result, FilterComponents)
    found = result.components.reshape(5, size)
    np.testing.assert_allclose(np.abs(np.sum(found * basis, axis=1)), 1.0, atol=1e-5)
    np.testing.assert_allclose(result.explained_variance, scales**2 / (count - 1), rtol=1e-4)
    np.testing.assert_allclose(result.explained_variance_ratio, scales**2 / np.sum(scales**2),
                               rtol=1e-4)
    peaks = np.abs(found).argmax(1)
    assert np.all(found[np.arange(5), peaks] > 0)


@pytest.mark.parametrize("num_channels", [3, 1])
def test_components_are_orthonormal_and_ordered(num_channels):
    model = build_vit(num_channels=num_channels)
    result = embedding_filter_components(model, n=16)
    assert result.components.shape == (16, 4, 4, num_channels)
    flat = result.components.reshape(16, -1).astype("float64")
    np.testing.assert_allclose(flat @ flat.T, np.eye(16), atol=1e-5)
    assert np.all(np.diff(result.explained_variance) <= 1e-12)
    kernel = to_numpy(model.get_layer("embedding").conv.kernel).reshape(-1, 16).T
    projected = (kernel - kernel.mean(0)) @ flat.T
    np.testing.assert_allclose(projected.var(0, ddof=1), result.explained_variance, rtol=1e-4,
                               atol=1e-9)
    assert result.explained_variance_ratio.sum() <= 1 + 1e-9


def test_all_components_explain_all_the_variance():
    # 48 grey 4 x 4 filters (as in notebook 06's model) span the 16 pixel values: the 16
    # components are the whole variance, and the cumulative curve ends at 1
    model = build_vit(num_channels=1, hidden_size=48)
    ratio = embedding_filter_components(model, n=16).explained_variance_ratio
    assert np.cumsum(ratio)[-1] == pytest.approx(1.0, abs=1e-9)
    assert np.all(ratio > 0)


def test_component_count_is_checked():
    model = build_vit()
    for n in (0, 17, 2.5):
        with pytest.raises(ValueError, match="between 1 and 16"):
            embedding_filter_components(model, n=n)


def test_similarity_summary_groups_patches_by_grid_relation():
    rows, cols = 3, 4
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    # similarity = 1 within a column, 0.5 for a neighbour in the same row, -1 elsewhere
    column = c[:, :, None, None] == c[None, None]
    row_neighbour = (r[:, :, None, None] == r[None, None]) & (
        np.abs(c[:, :, None, None] - c[None, None]) == 1)
    similarity = np.where(column, 1.0, np.where(row_neighbour, 0.5, -1.0))
    summary = position_similarity_summary(similarity)
    assert summary["same_column"] == 1.0 and summary["other"] == -1.0
    # same row: per row 6 neighbour pairs (x2 orders) at 0.5 among 12 ordered pairs at -1
    assert summary["same_row"] == pytest.approx((6 * 0.5 - 6 * 1.0) / 12)
    # neighbours: 17 grid edges, 8 vertical (1.0) and 9 horizontal (0.5)
    assert summary["neighbours"] == pytest.approx((8 * 1.0 + 9 * 0.5) / 17)


def test_summary_of_a_model_and_bad_input():
    summary = position_similarity_summary(position_embedding_similarity(build_vit("token")))
    assert set(summary) == {"neighbours", "same_row", "same_column", "other"}
    assert all(-1 <= value <= 1 for value in summary.values())
    with pytest.raises(ValueError, match="rows, cols, rows, cols"):
        position_similarity_summary(np.zeros((4, 4)))
    with pytest.raises(ValueError, match="at least 2 x 2"):
        position_similarity_summary(np.zeros((1, 3, 1, 3)))


def test_similarity_by_distance_averages_each_distance_once():
    # similarity = exp(-distance) on a 3 x 4 grid: each distance's mean is exp(-distance)
    r, c = (a.ravel() for a in np.meshgrid(np.arange(3), np.arange(4), indexing="ij"))
    distance = np.hypot(r[:, None] - r[None], c[:, None] - c[None])
    distances, means = position_similarity_by_distance(np.exp(-distance).reshape(3, 4, 3, 4))
    expected = np.sqrt([1, 2, 4, 5, 8, 9, 10, 13])  # every distinct squared step on 3 x 4
    np.testing.assert_allclose(distances, expected)
    np.testing.assert_allclose(means, np.exp(-expected))
    # a pattern that is 1 for the 4-neighbours and 0 elsewhere: only distance 1 is non-zero
    _, means = position_similarity_by_distance((distance == 1).reshape(3, 4, 3, 4) * 1.0)
    assert means[0] == 1.0 and not means[1:].any()
    with pytest.raises(ValueError, match="at least 2 patches"):
        position_similarity_by_distance(np.ones((1, 1, 1, 1)))


def test_similarity_by_offset_averages_the_pairs_at_each_offset():
    rng = np.random.default_rng(0)
    table = rng.normal(size=(12, 5))
    unit = table / np.linalg.norm(table, axis=1, keepdims=True)
    similarity = (unit @ unit.T).reshape(3, 4, 3, 4)
    offsets = position_similarity_by_offset(similarity)
    assert offsets.shape == (5, 7)
    np.testing.assert_allclose(offsets[2, 3], 1.0)  # every patch with itself
    np.testing.assert_allclose(offsets, offsets[::-1, ::-1])  # (a, b) and (b, a) are alike
    # two rows down, one column left: the pairs (0, c) -> (2, c - 1) for c = 1, 2, 3
    expected = np.mean([similarity[0, c, 2, c - 1] for c in (1, 2, 3)])
    np.testing.assert_allclose(offsets[2 + 2, 3 - 1], expected)
    # the corner offset has one pair only
    np.testing.assert_allclose(offsets[0, 0], similarity[2, 3, 0, 0])
    with pytest.raises(ValueError, match="similarity array"):
        position_similarity_by_offset(np.ones((3, 4, 4, 3)))

