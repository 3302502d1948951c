"""The plotting helpers return matplotlib figures drawn as the paper's Figs. 6, 7 and 12."""

import io

import matplotlib
import numpy as np
import pytest
from inspection_helpers import build_vit

matplotlib.use("Agg")

from matplotlib.figure import Figure  # noqa: E402

from keras_vit.inspection import (  # noqa: E402
    attention_maps,
    attention_rollout,
    attention_weights,
    embedding_filter_components,
    mean_attention_distance,
    plot_attention_maps,
    plot_attention_matrix,
    plot_attention_rollout,
    plot_distance_from_uniform,
    plot_embedding_filters,
    plot_largest_batch,
    plot_mean_attention_distance,
    plot_position_embedding_similarity,
    plot_speed_by_size,
    position_embedding_similarity,
)


@pytest.fixture(scope="module")
def token_vit():
    return build_vit("token")


@pytest.fixture(scope="module")
def gap_vit():
    return build_vit("gap")


@pytest.fixture
def vit_images():
    return np.random.default_rng(0).uniform(-1, 1, (3, 16, 16, 3)).astype("float32")


def _renders(fig):
    assert isinstance(fig, Figure)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    assert buffer.getvalue()[:8] == b"\x89PNG\r\n\x1a\n"


def test_all_figures_from_a_model(token_vit, vit_images):
    components = embedding_filter_components(token_vit, n=14)
    fig = plot_embedding_filters(components)
    assert len(fig.axes) == 14 and "first 14 principal components" in fig._suptitle.get_text()
    _renders(fig)

    fig = plot_position_embedding_similarity(position_embedding_similarity(token_vit))
    axis = fig.axes[0]
    assert axis.get_ylabel() == "Input patch row"
    assert [t.get_text() for t in axis.get_xticklabels()] == ["1", "2", "3", "4"]
    assert axis.images[0].get_array().shape == (4 * 5 - 1, 4 * 5 - 1)
    _renders(fig)

    distances = mean_attention_distance(token_vit, vit_images)
    fig = plot_mean_attention_distance(distances, image_size=16)
    axis = fig.axes[0]
    assert axis.get_xlabel() == "Network depth (layer)"
    assert len(axis.collections) == 2  # one scatter per head
    np.testing.assert_allclose(axis.collections[1].get_offsets()[:, 1], distances[:, 1])
    assert axis.get_ylim()[1] == pytest.approx(np.hypot(16, 16))
    assert not axis.lines  # no reference line unless asked for
    _renders(fig)

    fig = plot_attention_rollout(vit_images, attention_rollout(token_vit, vit_images),
                                 max_images=2)
    assert [axis.get_title() for axis in fig.axes[:4]] == ["Input", "Attention rollout"] * 2
    _renders(fig)

    fig = plot_attention_maps(vit_images[0], attention_maps(token_vit, vit_images)[0])
    assert len(fig.axes) == 2 * (1 + 3) + 1  # heads x (image + layers), one colour bar
    _renders(fig)


def test_uniform_reference_line_is_labelled():
    fig = plot_mean_attention_distance(np.ones((3, 2)), uniform=5.25)
    line = fig.axes[0].lines[0]
    assert line.get_label() == "uniform attention (5.2 px)"
    assert set(line.get_ydata()) == {5.25}
    assert "uniform attention (5.2 px)" in [t.get_text() for t in fig.axes[0].get_legend().texts]


def test_head_maps_share_one_log_scale_relative_to_uniform():
    maps = np.full((2, 3, 2, 2), 0.25)
    maps[1, 2, 0, 0] = 0.7  # one sharp head
    fig = plot_attention_maps(np.zeros((8, 8, 1)), maps)
    panels = [axis for axis in fig.axes[:-1] if axis.images and axis.images[0].get_cmap().name
              == "RdBu_r"]
    assert len(panels) == 6
    # every panel on the same log scale from 1/100 to 100 times uniform, centred at 1
    assert {axis.images[0].get_clim() for axis in panels} == {(0.01, 100.0)}
    assert all(type(axis.images[0].norm).__name__ == "LogNorm" for axis in panels)
    flat = panels[0].images[0]
    np.testing.assert_allclose(flat.get_array(), 1.0)  # uniform attention is 1, the centre
    assert flat.norm(1.0) == pytest.approx(0.5)
    sharp = panels[-1].images[0]  # head 3 of layer 1: 0.7 x 4 patches = 2.8 times uniform
    assert sharp.get_array()[0, 0] == pytest.approx(2.8)
    bar = fig.axes[-1]
    assert bar.get_ylabel() == "attention / uniform (1/4), log scale"
    assert "1 (uniform)" in [t.get_text() for t in bar.get_yticklabels()]
    # a second figure with the same limit shares the scale; another limit is stated
    other = plot_attention_maps(np.zeros((8, 8, 1)), maps, limit=10)
    assert other.axes[1].images[0].get_clim() == (0.1, 10.0)
    with pytest.raises(ValueError, match="num_layers, num_heads, rows, cols"):
        plot_attention_maps(np.zeros((8, 8, 1)), maps[0])
    with pytest.raises(ValueError, match="factor above 1"):
        plot_attention_maps(np.zeros((8, 8, 1)), maps, limit=1)


def test_attention_matrix_rows_are_the_maps(token_vit, vit_images):
    layer, head = 1, 0
    matrix = attention_weights(token_vit, vit_images[:1])[layer][0, head]
    fig = plot_attention_matrix(matrix, token_vit.config.grid, rows=[0, 6], image=vit_images[0])
    whole, picture, class_row, patch_row = fig.axes[:4]
    assert whole.get_title() == "Attention matrix (17 x 17)"
    np.testing.assert_allclose(whole.images[0].get_array(), matrix * 16, rtol=1e-6)
    # row 0 over the patches is the class token's map of attention_maps, on the same scale
    expected = attention_maps(token_vit, vit_images[:1])[0, layer, head]
    np.testing.assert_allclose(class_row.images[0].get_array(), expected * 16, rtol=1e-5)
    assert class_row.get_title() == "row 0: class token"
    # token 6 is patch 5: row 1, column 1 of the 4 x 4 grid; outlined on its map and the image
    assert patch_row.get_title() == "row 6: patch (1, 1)"
    np.testing.assert_allclose(patch_row.images[0].get_array(),
                               matrix[6, 1:].reshape(4, 4) * 16, rtol=1e-6)
    assert patch_row.patches[0].get_xy() == (0.5, 0.5)
    assert picture.patches[0].get_xy() == (3.5, 3.5)  # 4-pixel patches of the 16-pixel image
    assert {axis.images[0].get_clim() for axis in (whole, class_row, patch_row)} == {
        (0.01, 100.0)}
    _renders(fig)
    gap = plot_attention_matrix(np.full((4, 4), 0.25), (2, 2), rows=[3])
    assert gap.axes[1].get_title() == "row 3: patch (1, 1)"
    with pytest.raises(ValueError, match="square attention matrix over 16 or 17 tokens"):
        plot_attention_matrix(matrix[:, 1:], (4, 4), rows=[0])
    with pytest.raises(ValueError, match="between 0 and 16"):
        plot_attention_matrix(matrix, (4, 4), rows=[17])


def test_distance_from_uniform_zooms_to_the_differences():
    trained = np.array([[27.0, 29.0], [28.0, 30.5]])
    fig = plot_distance_from_uniform({"trained": trained, "untrained": np.full((2, 2), 29.0)},
                                     uniform=29.0)
    axis = fig.axes[0]
    heads, medians = axis.collections[0], axis.collections[1]
    np.testing.assert_allclose(heads.get_offsets()[:, 1], [-2.0, 0.0, -1.0, 1.5])
    np.testing.assert_allclose(medians.get_offsets()[:, 1], [-1.0, 0.25])
    # in each layer's column the first model's dots left of the layer, the second's right
    layer = np.repeat([0, 1], 2)
    assert np.all(heads.get_offsets()[:, 0] < layer)
    assert np.all(axis.collections[2].get_offsets()[:, 0] > layer)
    assert axis.get_ylim()[0] > -3 and axis.get_ylim()[1] < 3  # zoomed, not 0 to the diagonal
    labels = [t.get_text() for t in axis.get_legend().texts]
    assert labels == ["trained: one dot per head", "trained: median head",
                      "untrained: one dot per head", "untrained: median head",
                      "uniform attention (29.0 px)"]
    _renders(fig)
    with pytest.raises(ValueError, match="same number of layers"):
        plot_distance_from_uniform({"a": np.ones((2, 2)), "b": np.ones((3, 2))}, uniform=1.0)


def test_similarity_is_on_a_diverging_scale_centred_at_zero():
    fig = plot_position_embedding_similarity(np.zeros((2, 2, 2, 2)))
    image = fig.axes[0].images[0]
    assert image.get_clim() == (-1.0, 1.0) and image.get_cmap().name.startswith("RdBu")
    assert fig.axes[-1].get_ylabel() == "Cosine similarity"


def test_similarity_panels_side_by_side_share_one_scale():
    fig = plot_position_embedding_similarity(
        {"slow": np.zeros((2, 2, 2, 2)), "fast": np.full((2, 2, 2, 2), 0.5)}, title="two models")
    images = [axis.images[0] for axis in fig.axes[:2]]
    assert [axis.get_title() for axis in fig.axes[:2]] == ["slow", "fast"]
    assert all(image.get_clim() == (-1.0, 1.0) for image in images)
    assert len(fig.axes) == 3 and "one scale" in fig.axes[-1].get_ylabel()
    assert fig._suptitle.get_text() == "two models"
    with pytest.raises(ValueError, match="at least one"):
        plot_position_embedding_similarity({})


def test_grey_images_and_filters():
    fig = plot_embedding_filters(np.random.default_rng(0).normal(size=(3, 4, 4, 1)), columns=2)
    assert len(fig.axes) == 3
    fig = plot_attention_rollout(np.ones((1, 8, 8, 1)), np.ones((1, 2, 2)), value_range=(0, 1))
    assert fig.axes[0].images[0].get_cmap().name == "gray"
    np.testing.assert_allclose(fig.axes[0].images[0].get_array(), 1.0)


def test_similarity_mosaic_places_each_patch_tile():
    similarity = np.zeros((2, 2, 2, 2))
    similarity[1, 0, 1, 0] = 1.0
    mosaic = plot_position_embedding_similarity(similarity).axes[0].images[0].get_array()
    # tile (row 1, col 0) starts at mosaic row 3 (2 rows + 1 gap); its own entry [1, 0] is 1
    assert mosaic[3 + 1, 0] == 1.0 and np.nansum(mosaic) == 1.0
    assert np.ma.getmaskarray(mosaic)[2, 2] or np.isnan(mosaic[2, 2])


def test_similarity_tiles_draw_a_subset_of_rows_and_columns():
    similarity = np.zeros((5, 5, 5, 5))
    similarity[4, 0, 2, 3] = 1.0
    fig = plot_position_embedding_similarity(similarity, tiles=(0, 4))
    mosaic = fig.axes[0].images[0].get_array()
    # 2 x 2 tiles of 5 x 5 cells and one gap: tile (row 5, column 1) is the lower left one
    assert mosaic.shape == (11, 11) and mosaic[6 + 2, 3] == 1.0 and np.nansum(mosaic) == 1.0
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["1", "5"]


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: plot_embedding_filters(np.zeros((4, 1, 1, 32))), "C = 1 or 3"),
        (lambda: plot_position_embedding_similarity(np.zeros((4, 4, 16))), "rows, cols, rows"),
        (lambda: plot_position_embedding_similarity(np.zeros((3, 3, 3, 3)), tiles=(0, 3)),
         "indices from 0 to 2"),
        (lambda: plot_mean_attention_distance(np.zeros(5)), "num_layers, num_heads"),
        (lambda: plot_attention_rollout(np.zeros((2, 8, 8, 3)), np.zeros((1, 2, 2))),
         "one \\(rows, cols\\) rollout map per image"),
        (lambda: plot_attention_rollout(np.zeros((1, 8, 8, 3)), np.zeros((1, 2, 2)),
                                        value_range=(1, 1)), "high > low"),
        (lambda: plot_largest_batch({}), "at least one size per model"),
    ],
)
def test_bad_plot_inputs_are_rejected(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_plots_take_any_backend_model_output(gap_vit, vit_images):
    rollout = attention_rollout(gap_vit, vit_images[:1])
    _renders(plot_attention_rollout(vit_images[:1], rollout))
    fig = plot_mean_attention_distance(np.ones((12, 17)))
    assert fig.axes[0].get_legend() is None  # 16 heads or fewer get a legend, more do not
    assert fig.axes[0].get_ylim()[0] == 0


def test_largest_batch_figure_from_the_memory_model():
    from keras_vit.costs.batches import figure_12

    table = figure_12(["ViT-H/14", "BiT-R50x1"], [224, 512], training=True)
    assert table["ViT-H/14"][1] == (518, 0)  # one training example does not fit 16 GiB
    fig = plot_largest_batch(table, memory_gib=16, training=True)
    axis = fig.axes[0]
    assert axis.get_yscale() == "log" and axis.get_xlabel() == "Input size (pixels)"
    assert axis.get_ylabel() == "Largest training batch per 16 GiB device"
    vit, bit = axis.lines
    assert list(vit.get_xdata()) == [224] and list(vit.get_ydata()) == [table["ViT-H/14"][0][1]]
    assert (vit.get_linestyle(), bit.get_linestyle()) == ("-", "--")
    assert vit.get_marker() != bit.get_marker()
    # each line named at its right end with its last batch, lowest first
    labels = [t.get_text() for t in axis.texts]
    assert labels == [f"ViT-H/14: {table['ViT-H/14'][0][1]}",
                      f"BiT-R50x1: {table['BiT-R50x1'][1][1]}"]
    _renders(fig)


def test_lines_that_coincide_are_named_apart_and_the_log_ticks_read_as_numbers():
    """ViT-B/16 and R50+ViT-B/16 end at 90 and 85 images: their end labels are moved apart,
    and the log axis labels 1, 2 and 5 times each power of ten in plain numbers."""
    from keras_vit.costs.batches import figure_12

    table = figure_12(["ViT-B/16", "R50+ViT-B/16", "BiT-R50x1"], training=False)
    fig = plot_largest_batch(table, memory_gib=16, device="TPUv3 core")
    axis = fig.axes[0]
    assert axis.get_ylabel() == "Largest inference batch per 16 GiB TPUv3 core"
    fig.canvas.draw()
    ticks = [t.get_text() for t in axis.get_yticklabels() if t.get_text()]
    assert {"100", "200", "500", "1000"} <= set(ticks), ticks
    low, high = (np.log10(limit) for limit in axis.get_ylim())
    heights = sorted(np.log10(t.get_position()[1]) for t in axis.texts)
    assert min(np.diff(heights)) >= 0.06 * (high - low) - 1e-9
    assert [t.get_text() for t in axis.texts][:2] == ["R50+ViT-B/16: 85", "ViT-B/16: 90"]
    assert list(axis.get_xticks()) == [224, 288, 384, 448, 512]


def test_speed_figure_by_size():
    table = {"ViT-Ti/16": [(224, 21.0), (384, 4.6)], "BiT-R26x1": [(224, 8.3), (384, 2.9)]}
    fig = plot_speed_by_size(table, batch_size=8)
    axis = fig.axes[0]
    assert axis.get_yscale() == "log" and axis.get_title() == "Fig. 12 (left), measured"
    assert axis.get_ylabel() == "Inference images per second (batch 8)"
    assert [line.get_linestyle() for line in axis.lines] == ["-", "--"]
    assert [t.get_text() for t in axis.texts] == ["BiT-R26x1: 2.9", "ViT-Ti/16: 4.6"]
    with pytest.raises(ValueError, match="speed_by_size"):
        plot_speed_by_size({"ViT-Ti/16": []})
    _renders(fig)
