"""The paper's inspection figures, drawn with matplotlib (Fig. 6, Fig. 7 left, centre, right, and
Fig. 12 right: the largest batch that fits a device), and one head's attention matrix beside its
rows drawn as maps.

Each helper takes the arrays computed by ``keras_vit.inspection`` (or, for Fig. 12, the table of
``keras_vit.costs.batches.figure_12``) and returns a
``matplotlib.figure.Figure`` (not registered with pyplot: show it in a notebook as the cell's
value or with ``display(fig)``, or write it with ``fig.savefig``). matplotlib is imported only
when a helper is called (``pip install matplotlib``, or the ``inspection`` extra).
"""

from collections import Counter
from collections.abc import Mapping

import numpy as np

from keras_vit import _optional
from keras_vit.checks import pair
from keras_vit.inspection.attention import rollout_to_image
from keras_vit.inspection.embeddings import FilterComponents, check_similarity


def _new_figure(figsize):
    """A figure, once the helper has checked its input (matplotlib is imported here)."""
    figure = _optional.need("matplotlib.figure", "The keras_vit.inspection plots")
    return figure.Figure(figsize=figsize, layout="constrained")


def _unit_range(image):
    low, high = float(image.min()), float(image.max())
    return (image - low) / (high - low) if high > low else np.zeros_like(image)


def plot_embedding_filters(components, columns=7, title=None):
    """Fig. 7 (left): the principal components of the RGB patch-embedding filters.

    Each component is stretched to [0, 1] on its own and drawn as a P x P image (RGB for three
    channels, grey for one), in order of explained variance, row by row.

    Args:
        components: the ``FilterComponents`` of ``embedding_filter_components``, or an
            (n, P, P, C) array with C 1 or 3.
        columns: components per row (the paper shows 28 in 4 rows of 7).
        title: the figure title; by default "RGB embedding filters (first n principal
            components)".

    Example:
    >>> import numpy as np
    >>> fig = plot_embedding_filters(np.random.default_rng(0).normal(size=(28, 4, 4, 3)))
    >>> len(fig.axes)
    28
    """
    if isinstance(components, FilterComponents):
        components = components.components
    components = np.asarray(components, dtype=np.float64)
    if components.ndim != 4 or components.shape[-1] not in (1, 3):
        raise ValueError(
            "Expected filter components of shape (n, P, P, C) with C = 1 or 3 channels, got "
            f"{components.shape}. A hybrid's 1x1 filters over ResNet features are not images."
        )
    count = len(components)
    columns = max(1, min(int(columns), count))
    rows = -(-count // columns)
    fig = _new_figure((1.1 * columns, 1.1 * rows + 0.5))
    grey = components.shape[-1] == 1
    for index, component in enumerate(components):
        axis = fig.add_subplot(rows, columns, index + 1)
        image = _unit_range(component)
        axis.imshow(image[..., 0] if grey else image, cmap="gray" if grey else None,
                    interpolation="nearest")
        axis.set_xticks([])
        axis.set_yticks([])
    channel = "Grey" if grey else "RGB"
    fig.suptitle(title or f"{channel} embedding filters\n(first {count} principal components)")
    return fig


def _similarity_mosaic(similarity, row_tiles, col_tiles):
    """The tiles (row_tiles x col_tiles) of a similarity array laid out as one image, NaN
    between tiles."""
    rows, cols = similarity.shape[2:]
    gap = 1
    mosaic = np.full((len(row_tiles) * (rows + gap) - gap, len(col_tiles) * (cols + gap) - gap),
                     np.nan)
    for i, r in enumerate(row_tiles):
        for j, c in enumerate(col_tiles):
            top, left = i * (rows + gap), j * (cols + gap)
            mosaic[top:top + rows, left:left + cols] = similarity[r, c]
    return mosaic


def _check_tiles(tiles, rows, cols):
    """The rows and the columns whose tiles are drawn: all of them, or ``tiles`` for both."""
    if tiles is None:
        return list(range(rows)), list(range(cols))
    picked = [int(t) for t in tiles]
    if not picked or any(t < 0 or t >= min(rows, cols) for t in picked):
        raise ValueError(f"Expected tiles as row and column indices from 0 to "
                         f"{min(rows, cols) - 1} (the grid is {rows} x {cols}), got {list(tiles)}.")
    return picked, picked


def _draw_similarity_panel(axis, values, tiles, cmap):
    """One mosaic of ``plot_position_embedding_similarity`` on ``axis``; returns its image."""
    rows, cols = values.shape[2:]
    row_tiles, col_tiles = _check_tiles(tiles, rows, cols)
    image = axis.imshow(_similarity_mosaic(values, row_tiles, col_tiles), cmap=cmap, vmin=-1,
                        vmax=1, interpolation="nearest")
    # one tick per tile at its centre, named by its patch's row or column counted from 1
    axis.set_xticks(np.arange(len(col_tiles)) * (cols + 1) + (cols - 1) / 2,
                    [c + 1 for c in col_tiles])
    axis.set_yticks(np.arange(len(row_tiles)) * (rows + 1) + (rows - 1) / 2,
                    [r + 1 for r in row_tiles])
    axis.tick_params(length=0)
    for side in axis.spines.values():
        side.set_visible(False)
    axis.set_xlabel("Input patch column")
    axis.set_ylabel("Input patch row")
    return image


def plot_position_embedding_similarity(similarity, title="Position embedding similarity",
                                       tiles=None):
    """Fig. 7 (centre) and Fig. 10: the similarity of each patch's embedding with all others.

    Tile (r, c) of the mosaic shows, over the whole grid, the cosine similarity between the
    position embedding of the patch at row r, column c and every other patch's, on one diverging
    colour scale from -1 (blue) through 0 (white) to 1 (red) shared by all tiles.

    Args:
        similarity: (rows, cols, rows, cols) array from ``position_embedding_similarity``, or a
            mapping from panel titles to such arrays: the panels are drawn side by side, on the
            same colour scale with one colour bar (Fig. 10 compares models this way).
        title: the figure title.
        tiles: the rows and columns (counted from 0) whose tiles are drawn, the same for both,
            e.g. ``(0, 4, 9, 13)``: 16 tiles, each still over the whole grid, large enough to
            read where all 14 x 14 of a 14 x 14 grid are not. By default every tile.

    Example:
    >>> import numpy as np
    >>> fig = plot_position_embedding_similarity(np.ones((3, 3, 3, 3)))
    >>> fig.axes[0].get_xlabel()
    'Input patch column'
    >>> fig = plot_position_embedding_similarity({"A": np.ones((3, 3, 3, 3)),
    ...                                           "B": np.zeros((3, 3, 3, 3))})
    >>> [axis.get_title() for axis in fig.axes[:2]], len(fig.axes)
    (['A', 'B'], 3)
    >>> fig = plot_position_embedding_similarity(np.ones((5, 5, 5, 5)), tiles=(0, 4))
    >>> [tick.get_text() for tick in fig.axes[0].get_xticklabels()]
    ['1', '5']
    """
    single = not isinstance(similarity, Mapping)
    panels = {None: similarity} if single else dict(similarity)
    if not panels:
        raise ValueError("Expected at least one similarity array to plot, got an empty mapping.")
    panels = {name: check_similarity(value) for name, value in panels.items()}
    for values in panels.values():
        _check_tiles(tiles, *values.shape[:2])
    fig = _new_figure((5.5 + 4.6 * (len(panels) - 1), 5.0))
    # cosine similarity is signed: a diverging map centred at 0 (white), the same for every tile
    # and every panel; the gaps between tiles grey, so that they differ from a similarity of 0
    from matplotlib import colormaps

    cmap = colormaps["RdBu_r"].with_extremes(bad="0.75")
    axes = [fig.add_subplot(1, len(panels), index + 1) for index in range(len(panels))]
    for axis, values in zip(axes, panels.values()):
        image = _draw_similarity_panel(axis, values, tiles, cmap)
    if single:
        axes[0].set_title(title)
    else:
        for axis, name in zip(axes, panels):
            axis.set_title(name)
        fig.suptitle(title)
    label = "Cosine similarity" + ("" if len(panels) == 1 else " (one scale for all panels)")
    fig.colorbar(image, ax=axes, label=label, shrink=0.8)
    return fig


def plot_mean_attention_distance(distances, image_size=None, title=None, uniform=None):
    """Fig. 7 (right) and Fig. 11: mean attention distance of every head against depth.

    Args:
        distances: (num_layers, num_heads) array from ``mean_attention_distance``.
        image_size: optional image side (int or (height, width)); the y axis then spans the
            image's diagonal, the largest possible distance.
        title: the figure title; by default the number of heads and layers.
        uniform: optional distance of uniform attention (``uniform_attention_distance``), drawn
            as a labelled dotted line: heads on it attend everywhere alike.

    Example:
    >>> import numpy as np
    >>> fig = plot_mean_attention_distance(np.ones((4, 3)), uniform=2.0)
    >>> fig.axes[0].get_ylabel(), fig.axes[0].lines[0].get_label()
    ('Mean attention distance (pixels)', 'uniform attention (2.0 px)')
    """
    distances = np.asarray(distances, dtype=np.float64)
    if distances.ndim != 2:
        raise ValueError(
            "Expected a (num_layers, num_heads) array from mean_attention_distance, got shape "
            f"{distances.shape}."
        )
    layers, heads = distances.shape
    fig = _new_figure((6.2 if heads <= 16 else 5.0, 4.0))
    axis = fig.add_subplot(1, 1, 1)
    depth = np.arange(layers)
    for head in range(heads):
        axis.scatter(depth, distances[:, head], s=14, label=f"Head {head + 1}")
    if uniform is not None:
        axis.axhline(float(uniform), color="grey", linestyle=":", linewidth=1.2,
                     label=f"uniform attention ({float(uniform):.1f} px)")
    _depth_axis(axis, layers)
    axis.set_ylabel("Mean attention distance (pixels)")
    if image_size is not None:
        height, width = pair("image_size", image_size)
        axis.set_ylim(0, float(np.hypot(height, width)))
    else:
        axis.set_ylim(bottom=0)
    if heads <= 16:
        # outside the axes, so that the legend never hides a point
        axis.legend(fontsize="x-small", ncol=2 if heads > 8 else 1, loc="upper left",
                    bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    elif uniform is not None:
        axis.legend(handles=axis.lines[:1], fontsize="x-small", loc="lower right")
    axis.set_title(title or f"{heads} heads, {layers} layers")
    return fig


def plot_distance_from_uniform(distances, uniform, title=None, colors=None):
    """Mean attention distance minus that of uniform attention, per head, for models side by side.

    Zoomed to the differences: one dot per head at its layer (the models' dots side by side),
    a short bar at each layer's median head, and the dotted line at 0 for uniform attention. A
    head below 0 looks closer than uniform attention, one above further.

    Args:
        distances: ``{label: (num_layers, num_heads) array}`` from ``mean_attention_distance``
            (e.g. a trained model and its untrained copy), or one such array.
        uniform: the distance of uniform attention (``uniform_attention_distance``), in pixels.
        title: the figure title.
        colors: optional list of one matplotlib colour per model (``C0``, ``C1``, ... by default).

    Example:
    >>> import numpy as np
    >>> fig = plot_distance_from_uniform({"a": np.full((2, 3), 9.0), "b": np.full((2, 3), 11.5)},
    ...                                  uniform=10.0)
    >>> fig.axes[0].get_ylabel()
    'Mean attention distance minus uniform (pixels)'
    >>> [float(y) for y in fig.axes[0].collections[3].get_offsets()[:, 1]]  # b's medians
    [1.5, 1.5]
    """
    models = _relative_distances(distances, uniform)
    layers = next(iter(models.values())).shape[0]
    fig = _new_figure((7.4, 3.8))
    axis = fig.add_subplot(1, 1, 1)
    slot = 0.8 / len(models)
    for index, (label, values) in enumerate(models.items()):
        colour = colors[index] if colors is not None else f"C{index}"
        centre = np.arange(layers) + (index - (len(models) - 1) / 2) * slot
        _draw_heads_beside(axis, values, centre, slot, colour, label)
    axis.axhline(0.0, color="grey", linestyle=":", linewidth=1.2,
                 label=f"uniform attention ({float(uniform):.1f} px)")
    for boundary in np.arange(1, layers) - 0.5:  # the layers' columns
        axis.axvline(boundary, color="0.85", linewidth=0.8)
    axis.set_xlim(-0.5, layers - 0.5)
    _depth_axis(axis, layers)
    axis.set_ylabel("Mean attention distance minus uniform (pixels)")
    axis.grid(True, axis="y", alpha=0.3)
    axis.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.02, 1.0),
                borderaxespad=0)
    axis.set_title(title or "Mean attention distance, relative to uniform attention")
    return fig


def _relative_distances(distances, uniform):
    """``{label: (num_layers, num_heads) distances - uniform}``, checked."""
    if not isinstance(distances, dict):
        distances = {"model": distances}
    models = {}
    for label, values in distances.items():
        values = np.asarray(values, dtype=np.float64)
        if values.ndim != 2:
            raise ValueError(
                "Expected (num_layers, num_heads) arrays from mean_attention_distance, got shape "
                f"{values.shape} for {label!r}."
            )
        models[label] = values - float(uniform)
    if not models or len({values.shape[0] for values in models.values()}) != 1:
        raise ValueError("Expected at least one model, all with the same number of layers.")
    return models


def _draw_heads_beside(axis, values, centre, slot, colour, label):
    """One model's heads as dots spread within its ``slot`` around each layer's ``centre``,
    and a bar at each layer's median head."""
    heads = values.shape[1]
    spread = (np.arange(heads) - (heads - 1) / 2) / max(heads - 1, 1) * 0.6 * slot
    axis.scatter((centre[:, None] + spread[None]).ravel(), values.ravel(), s=16,
                 color=colour, alpha=0.8, label=f"{label}: one dot per head")
    axis.scatter(centre, np.median(values, axis=1), marker="_", s=260, linewidths=2,
                 color=colour, label=f"{label}: median head")


def _depth_axis(axis, layers):
    depth = np.arange(layers)
    axis.set_xlabel("Network depth (layer)")
    axis.set_xticks(depth if layers <= 12 else depth[::2])


def _pictures(images, value_range):
    """Images in ``value_range`` -> [0, 1] for display; checks the shapes."""
    images = np.asarray(images, dtype=np.float64)
    if images.ndim != 4 or images.shape[-1] not in (1, 3):
        raise ValueError(
            f"Expected images of shape (batch, height, width, 1 or 3), got {images.shape}."
        )
    low, high = value_range
    if not high > low:
        raise ValueError(f"value_range must be (low, high) with high > low, got {value_range!r}.")
    return np.clip((images - low) / (high - low), 0.0, 1.0)


def _show_image(axis, picture):
    grey = picture.shape[-1] == 1
    axis.imshow(picture[..., 0] if grey else picture, cmap="gray" if grey else None, vmin=0,
                vmax=1)
    axis.set_xticks([])
    axis.set_yticks([])


def plot_attention_rollout(images, rollout, value_range=(-1.0, 1.0), max_images=None,
                           titles=None, vmax=None):
    """Fig. 6: each input image beside its Attention Rollout map, drawn as a heat map on it.

    The maps are shown relative to uniform attention (the map times the number of patches, so
    1 means "as much as any patch would get if attention were uniform", marked on the colour
    bar), on one linear colour scale from 0 shared by all images and all models: a near-uniform
    map looks uniform, and maps of different images and models can be compared.

    Args:
        images: (batch, height, width, channels) images with values in ``value_range``.
        rollout: (batch, rows, cols) maps from ``attention_rollout``, or a dict
            ``{label: maps}`` of several models' maps of the same images (say a trained model and
            its untrained copy), drawn as one column each, beside the input. The maps are
            upsampled onto the image (``rollout_to_image``, bilinear).
        value_range: the range of the image values (the models' [-1, 1] by default).
        max_images: draw at most this many images.
        titles: optional list of one title per image (e.g. the class), above its input.
        vmax: the top of the shared colour scale, in units of the uniform share; by default
            the largest value drawn (at least 1).

    Example:
    >>> import numpy as np
    >>> fig = plot_attention_rollout(np.zeros((2, 8, 8, 3)), np.ones((2, 2, 2)))
    >>> [axis.get_title() for axis in fig.axes[:4]]
    ['Input', 'Attention rollout', 'Input', 'Attention rollout']
    >>> maps = {"trained": np.ones((1, 2, 2)), "untrained": np.ones((1, 2, 2))}
    >>> fig = plot_attention_rollout(np.zeros((1, 8, 8, 3)), maps)
    >>> [axis.get_title() for axis in fig.axes[:3]]
    ['Input', 'trained', 'untrained']
    """
    pictures, maps, count = _images_and_maps(images, rollout, "Attention rollout", value_range,
                                             max_images)
    heats = {label: _relative_heat(values, pictures, count) for label, values in maps.items()}
    top = float(vmax) if vmax is not None else max(
        max(float(heat.max()) for heat in heats.values()), 1.0)
    columns = 1 + len(heats)
    fig = _new_figure((2.3 * columns, 2.0 * count + 0.4))
    axes = fig.subplots(count, columns, squeeze=False)
    for index in range(count):
        label = titles[index] if titles is not None else "Input"
        image = _draw_rollout_row(axes[index], pictures[index], label, heats, index, top)
    bar = fig.colorbar(image, ax=axes[:, 1:], shrink=min(0.9, 0.35 + 0.15 * count),
                       label="rollout / uniform share\n(cyan line: 1, uniform)")
    bar.ax.axhline(1.0, color="cyan", linewidth=2)
    return fig


def _images_and_maps(images, maps, label, value_range, max_images):
    """The pictures, the maps as ``{label: maps}`` (one array gets ``label``) and how many
    images to draw, for the plots of maps beside their images."""
    pictures = _pictures(images, value_range)
    maps = dict(maps) if isinstance(maps, dict) else {label: maps}
    if not maps:
        raise ValueError("Expected maps to draw, got an empty dict.")
    count = len(pictures) if max_images is None else max(1, min(int(max_images), len(pictures)))
    return pictures, maps, count


def plot_relevancy(images, maps, value_range=(-1.0, 1.0), max_images=None, titles=None):
    """Each image beside explanation maps of it (gradient relevancy, Chefer et al. 2021, and
    whatever else is given, say raw attention and rollout), drawn as heat maps on the image.

    Relevancy is not normalised and its scale differs from attention's, so every map is divided
    by its own maximum (upsampled onto the image, bilinear): the colours compare where each map
    puts its weight, not how much.

    Args:
        images: (batch, height, width, channels) images with values in ``value_range``.
        maps: (batch, rows, cols) maps from ``relevancy``, or a dict ``{label: maps}`` of
            several explanations of the same images, drawn as one column each.
        value_range: the range of the image values (the models' [-1, 1] by default).
        max_images: draw at most this many images.
        titles: optional list of one title per image (e.g. the class), above its input.

    Example:
    >>> import numpy as np
    >>> maps = {"rollout": np.ones((1, 2, 2)), "relevancy": np.eye(2)[None]}
    >>> fig = plot_relevancy(np.zeros((1, 8, 8, 3)), maps)
    >>> [axis.get_title() for axis in fig.axes[:3]]
    ['Input', 'rollout', 'relevancy']
    """
    pictures, maps, count = _images_and_maps(images, maps, "Relevancy", value_range, max_images)
    heats = {}
    for label, values in maps.items():
        values = np.asarray(values, dtype=np.float64)
        if values.ndim != 3 or len(values) != len(pictures):
            raise ValueError(f"Expected one (rows, cols) map per image for {label!r}, i.e. "
                             f"shape ({len(pictures)}, rows, cols), got {values.shape}.")
        heats[label] = rollout_to_image(values[:count], pictures.shape[1:3], normalize=True)
    columns = 1 + len(heats)
    fig = _new_figure((2.3 * columns, 2.0 * count + 0.4))
    axes = fig.subplots(count, columns, squeeze=False)
    for index in range(count):
        label = titles[index] if titles is not None else "Input"
        image = _draw_rollout_row(axes[index], pictures[index], label, heats, index, 1.0)
    fig.colorbar(image, ax=axes[:, 1:], shrink=min(0.9, 0.35 + 0.15 * count),
                 label="share of the map's maximum")
    return fig


def _relative_heat(values, pictures, count):
    """The first ``count`` rollout maps relative to the uniform share, upsampled onto the
    images."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 3 or len(values) != len(pictures):
        raise ValueError(
            f"Expected one (rows, cols) rollout map per image, i.e. shape ({len(pictures)}, "
            f"rows, cols), got {values.shape}."
        )
    patches = values.shape[1] * values.shape[2]
    relative = values[:count] / values[:count].sum(axis=(1, 2), keepdims=True) * patches
    return rollout_to_image(relative, pictures.shape[1:3], normalize=False)


def _draw_rollout_row(axes, picture, label, heats, index, top):
    """One image, then each model's heat map over a dimmed grey copy of it (so both stay
    readable); returns the last map drawn, for the colour bar."""
    _show_image(axes[0], picture)
    axes[0].set_title(label, fontsize=9)
    grey = picture.mean(axis=-1, keepdims=True)
    for column, (name, heat) in enumerate(heats.items(), start=1):
        _show_image(axes[column], 0.35 + 0.5 * grey)
        image = axes[column].imshow(heat[index], cmap="inferno", vmin=0, vmax=top, alpha=0.6)
        axes[column].set_title(name, fontsize=9)
    return image


def _relative_scale(limit):
    """The log colour scale of attention relative to uniform: from 1/limit to limit, white at 1."""
    limit = float(limit)
    if not limit > 1:
        raise ValueError(f"limit must be a factor above 1, got {limit!r}.")
    colors = _optional.need("matplotlib.colors", "The keras_vit.inspection plots")
    from matplotlib import colormaps

    return colors.LogNorm(vmin=1 / limit, vmax=limit), colormaps["RdBu_r"]


def _relative_colorbar(fig, shown, axes, limit, patches, shrink=0.8):
    bar = fig.colorbar(shown, ax=axes, shrink=shrink, extend="both",
                       label=f"attention / uniform (1/{patches}), log scale")
    ticks = [10.0**k for k in range(-int(np.floor(np.log10(limit))),
                                    int(np.floor(np.log10(limit))) + 1)]
    bar.set_ticks(ticks, labels=[("1 (uniform)" if t == 1 else
                                  f"{t:g}" if t > 1 else f"1/{1 / t:g}") for t in ticks])
    bar.minorticks_off()
    return bar


def plot_attention_maps(image, maps, value_range=(-1.0, 1.0), title=None, limit=100.0):
    """Every head's attention map for one image, layer by layer, on one shared colour scale.

    Column 0 shows the image; row h, column l + 1 the attention of head h in block l over the
    patches (``attention_maps``). Each weight is drawn relative to uniform attention (times the
    number of patches) on a log scale centred at 1, with a diverging colour map: white where a
    patch gets what uniform attention would give it, red where it gets more, blue where less.
    A head that attends everywhere alike is white; weights beyond the scale take its end colours.
    Draw two models with the same ``limit`` to compare them.

    Args:
        image: (height, width, channels) image with values in ``value_range``.
        maps: (num_layers, num_heads, rows, cols) maps of this image, e.g.
            ``attention_maps(model, images)[i]``.
        value_range: the range of the image values.
        title: the figure title.
        limit: the scale spans uniform / limit to uniform * limit (default 100: from a hundredth
            to a hundred times the uniform weight).

    Example:
    >>> import numpy as np
    >>> fig = plot_attention_maps(np.zeros((8, 8, 1)), np.full((2, 3, 2, 2), 0.25))
    >>> len(fig.axes)  # 3 heads x (image + 2 layers) and the colour bar
    10
    """
    picture = _pictures(np.asarray(image)[None], value_range)[0]
    maps = np.asarray(maps, dtype=np.float64)
    if maps.ndim != 4:
        raise ValueError(
            "Expected maps of shape (num_layers, num_heads, rows, cols) for one image, e.g. "
            f"attention_maps(model, images)[0], got {maps.shape}."
        )
    layers, heads, rows, cols = maps.shape
    norm, cmap = _relative_scale(limit)
    relative = maps * (rows * cols)
    fig = _new_figure((1.25 * (layers + 1) + 1.4, 1.3 * heads + 0.6))
    axes = fig.subplots(heads, layers + 1, squeeze=False)
    for head in range(heads):
        _show_image(axes[head, 0], picture)
        axes[head, 0].set_ylabel(f"head {head + 1}", fontsize=8)
        for layer in range(layers):
            shown = axes[head, layer + 1].imshow(relative[layer, head], cmap=cmap, norm=norm,
                                                 interpolation="nearest")
            axes[head, layer + 1].set_xticks([])
            axes[head, layer + 1].set_yticks([])
            if head == 0:
                axes[head, layer + 1].set_title(f"layer {layer}", fontsize=8)
    _relative_colorbar(fig, shown, axes, limit, rows * cols)
    if title:
        fig.suptitle(title)
    return fig


def plot_attention_matrix(matrix, grid_size, rows, image=None, value_range=(-1.0, 1.0),
                          limit=100.0, title=None):
    """One head's full attention matrix beside some of its rows drawn as maps over the patches.

    The left panel is the (tokens x tokens) matrix of one head in one block (row i: how query
    token i spreads its attention over all keys; token 0 is the class token when there are
    rows * cols + 1 tokens). The right panels take the chosen rows, drop the class token's
    column and reshape them to the patch grid: row 0 is the class token's map of
    ``attention_maps``, a patch's row is what that patch looks at (its own patch outlined).
    Everything is on one log scale relative to uniform (1 / patches), as in
    ``plot_attention_maps``; each chosen row is marked on the matrix in its map's colour.

    Args:
        matrix: (tokens, tokens) attention probabilities of one head, e.g.
            ``attention_weights(model, images)[layer][image, head]``.
        grid_size: (rows, cols) of the patch grid (``model.config.grid``).
        rows: the query tokens to draw as maps (e.g. ``[0, 50, 120]``).
        image: optional (height, width, channels) image, drawn first with the chosen query
            patches outlined.
        value_range: the range of the image values.
        limit: the scale spans uniform / limit to uniform * limit.
        title: the figure title.

    Example:
    >>> import numpy as np
    >>> fig = plot_attention_matrix(np.full((5, 5), 0.2), (2, 2), rows=[0, 3])
    >>> [axis.get_title() for axis in fig.axes[:3]]
    ['Attention matrix (5 x 5)', 'row 0: class token', 'row 3: patch (1, 0)']
    """
    matrix, grid, rows = _checked_matrix(matrix, grid_size, rows)
    tokens, patches = matrix.shape[0], grid[0] * grid[1]
    first = tokens - patches  # 1 with a class token
    norm, cmap = _relative_scale(limit)
    colours = [f"C{k + 2}" for k in range(len(rows))]  # C0, C1 are the models' colours
    panels = len(rows) + (image is not None)
    columns = min(panels, 2)
    lines = -(-panels // columns)
    fig = _new_figure((4.8 + 2.5 * columns + 1.2, max(4.6, 2.5 * lines + 0.6)))
    layout = fig.add_gridspec(lines, 1 + columns, width_ratios=[2.1 * lines] + [1.0] * columns)
    axis = fig.add_subplot(layout[:, 0])
    shown = axis.imshow(matrix * patches, cmap=cmap, norm=norm, interpolation="nearest")
    axis.set_title(f"Attention matrix ({tokens} x {tokens})", fontsize=10)
    axis.set_xlabel("key token (what is looked at)" + ("\n0 = class token" if first else ""))
    axis.set_ylabel("query token (who looks)")
    for row, colour in zip(rows, colours):
        axis.annotate("", xy=(-0.5, row), xytext=(-0.12 * tokens, row),
                      arrowprops=dict(arrowstyle="->", color=colour, linewidth=2),
                      annotation_clip=False)
    maps = [fig.add_subplot(layout[k // columns, 1 + k % columns]) for k in range(panels)]
    if image is not None:
        _draw_query_patches(maps.pop(0), image, value_range, grid, first, rows, colours)
    for panel, row, colour in zip(maps, rows, colours):
        _draw_row_map(panel, matrix[row, first:].reshape(grid) * patches, row, grid, first,
                      colour, dict(cmap=cmap, norm=norm))
    _relative_colorbar(fig, shown, list(fig.axes), limit, patches, shrink=0.8)
    if title:
        fig.suptitle(title)
    return fig


def _checked_matrix(matrix, grid_size, rows):
    """``(matrix, (grid rows, grid cols), rows)`` of ``plot_attention_matrix``, checked."""
    matrix = np.asarray(matrix, dtype=np.float64)
    grid_rows, grid_cols = (int(n) for n in grid_size)
    patches = grid_rows * grid_cols
    tokens = matrix.shape[0] if matrix.ndim == 2 else -1
    if matrix.ndim != 2 or matrix.shape[1] != tokens or tokens not in (patches, patches + 1):
        raise ValueError(
            f"Expected a square attention matrix over {patches} or {patches + 1} tokens (the "
            f"{grid_rows} x {grid_cols} patches, and a class token first if any), got "
            f"{matrix.shape}."
        )
    rows = [int(r) for r in rows]
    if not rows or any(not 0 <= r < tokens for r in rows):
        raise ValueError(f"rows must be query tokens between 0 and {tokens - 1}, got {rows}.")
    return matrix, (grid_rows, grid_cols), rows


def _draw_query_patches(panel, image, value_range, grid, first, rows, colours):
    """The image, each chosen query patch outlined in its row's colour."""
    picture = _pictures(np.asarray(image)[None], value_range)[0]
    _show_image(panel, picture)
    panel.set_title("query patches", fontsize=9)
    height, width = picture.shape[:2]
    for row, colour in zip(rows, colours):
        if row >= first:
            r, c = divmod(row - first, grid[1])
            panel.add_patch(_patch_outline(r, c, height / grid[0], width / grid[1], colour))


def _draw_row_map(panel, weights, row, grid, first, colour, scale):
    """One query's attention over the patch grid, framed in its colour; a patch's own patch
    outlined (black on white, readable on any colour)."""
    from matplotlib import patheffects

    panel.imshow(weights, interpolation="nearest", **scale)
    panel.set_xticks([])
    panel.set_yticks([])
    for side in panel.spines.values():
        side.set_color(colour)
        side.set_linewidth(3)
    if row < first:
        panel.set_title(f"row {row}: class token", fontsize=9)
        return
    r, c = divmod(row - first, grid[1])
    panel.set_title(f"row {row}: patch ({r}, {c})", fontsize=9)
    outline = _patch_outline(r, c, 1.0, 1.0, "black", origin=-0.5)
    outline.set_path_effects([patheffects.withStroke(linewidth=3, foreground="white")])
    panel.add_patch(outline)


def _patch_outline(row, col, height, width, colour, origin=-0.5):
    from matplotlib.patches import Rectangle

    return Rectangle((origin + col * width, origin + row * height), width, height, fill=False,
                     edgecolor=colour, linewidth=1.5)


def plot_largest_batch(table, memory_gib=16, training=False, title=None, device="device"):
    """Fig. 12 (right): the largest batch that fits one device against the input size.

    One line per model, on a log scale of batch sizes (they span two orders of magnitude) whose
    ticks are labelled at 1, 2 and 5 times each power of ten; BiT ResNets dashed, ViTs and
    hybrids solid, each with its own marker and its name and last batch written at its right
    end (lines that run close together stay told apart). A size where not even one example fits
    (batch 0) is left out of its line.

    Args:
        table: ``{model: [(image_size, batch), ...]}`` from
            ``keras_vit.costs.batches.figure_12``.
        memory_gib: the device memory the table was counted for (the y label says it).
        training: whether the table counts a training step rather than inference.
        title: the figure title; by default "Fig. 12 (right), from keras_vit.memory".
        device: what the y label calls the device ("TPUv3 core"...).

    Example:
    >>> fig = plot_largest_batch({"ViT-B/32": [(224, 6735), (512, 818)],
    ...                           "BiT-R50x1": [(224, 1978), (512, 378)]})
    >>> axis = fig.axes[0]
    >>> axis.get_yscale(), axis.get_xlabel(), [line.get_linestyle() for line in axis.lines]
    ('log', 'Input size (pixels)', ['-', '--'])
    >>> [text.get_text() for text in axis.texts]
    ['BiT-R50x1: 378', 'ViT-B/32: 818']
    """
    step = "training" if training else "inference"
    return _plot_by_size(table, f"Largest {step} batch per {memory_gib:g} GiB {device}",
                         title or "Fig. 12 (right), from keras_vit.memory", ".0f",
                         "keras_vit.costs.batches.figure_12()")


def plot_speed_by_size(table, batch_size=None, title=None):
    """Fig. 12 (left): images per second of inference against the input size, as measured.

    Drawn as ``plot_largest_batch`` draws Fig. 12 (right): one line per model on a log scale
    labelled at 1, 2 and 5 times each power of ten, BiT ResNets dashed, each line's name and
    last speed at its right end.

    Args:
        table: ``{model: [(image_size, images per second), ...]}`` from
            ``keras_vit.evaluation.speed_by_size``.
        batch_size: the batch the speeds were measured with (the y label says it).
        title: the figure title; by default "Fig. 12 (left), measured".

    Example:
    >>> fig = plot_speed_by_size({"ViT-Ti/16": [(224, 21.0), (384, 4.6)],
    ...                           "BiT-R26x1": [(224, 8.3), (384, 2.9)]}, batch_size=8)
    >>> axis = fig.axes[0]
    >>> axis.get_ylabel(), [text.get_text() for text in axis.texts]
    ('Inference images per second (batch 8)', ['BiT-R26x1: 2.9', 'ViT-Ti/16: 4.6'])
    """
    label = "Inference images per second" + (f" (batch {batch_size})" if batch_size else "")
    return _plot_by_size(table, label, title or "Fig. 12 (left), measured", ".3g",
                         "keras_vit.evaluation.speed_by_size()")


MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">")
END_LABEL_GAP = 0.06  # the least distance between two end labels, in parts of the log axis


def _plot_by_size(table, ylabel, title, value_format, source):
    """One line per model of ``{model: [(image_size, value), ...]}`` against the size, on a log
    scale with readable ticks, each line named with its last value at the right end."""
    rows = {name: [(int(size), float(value)) for size, value in row if value > 0]
            for name, row in dict(table).items()}
    if not rows or not all(dict(table).values()):
        raise ValueError("Expected a table {model: [(image_size, value), ...]} with at least "
                         f"one size per model, e.g. {source}.")
    ticker = _optional.need("matplotlib.ticker", "The keras_vit.inspection plots")
    fig = _new_figure((7.2, 4.4))
    axis = fig.add_subplot(1, 1, 1)
    ends = []
    for (name, row), marker in zip(rows.items(), MARKERS * len(rows)):
        sizes, values = zip(*row) if row else ((), ())
        (line,) = axis.plot(sizes, values, "--" if name.startswith("BiT") else "-",
                            marker=marker, label=name)
        if row:
            ends.append((values[-1], name, line.get_color()))
    axis.set_yscale("log")
    low, high = axis.get_ylim()
    subs = (1, 2, 5) if np.log10(high / low) > 1.5 else (1, 2, 3, 5, 7)  # a few ticks at least
    axis.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=subs))
    axis.yaxis.set_major_formatter(ticker.FuncFormatter(lambda value, _: f"{value:g}"))
    axis.yaxis.set_minor_formatter(ticker.NullFormatter())
    _end_labels(axis, sorted(ends), value_format)
    axis.set_xlabel("Input size (pixels)")
    axis.set_ylabel(ylabel)
    axis.grid(True, which="major", alpha=0.3)
    axis.set_title(title)
    return fig


def _end_labels(axis, ends, value_format):
    """Write each ``(value, name, colour)`` right of the lines' ends, lowest first, moved up
    where it would overlap the one below."""
    all_sizes = [int(x) for line in axis.lines for x in line.get_xdata()]
    left, right = min(all_sizes), max(all_sizes)
    span = max(right - left, 1)
    axis.set_xlim(left - 0.04 * span, right + 0.34 * span)
    counts, ticks = Counter(all_sizes), []  # the sizes most models share, none too close
    for size in sorted(counts, key=lambda size: (-counts[size], size)):
        if all(abs(size - tick) > 0.03 * span for tick in ticks):
            ticks.append(size)
    axis.set_xticks(sorted(ticks))
    low, high = (np.log10(limit) for limit in axis.get_ylim())
    gap, placed = END_LABEL_GAP * (high - low), []
    for value, name, colour in ends:
        y = np.log10(value)
        if placed and y < placed[-1] + gap:
            y = placed[-1] + gap
        placed.append(y)
        axis.text(right + 0.05 * span, 10**y, f"{name}: {value:{value_format}}", color=colour,
                  fontsize=8, va="center")
    if placed and placed[-1] + gap / 2 > high:
        axis.set_ylim(top=10 ** (placed[-1] + gap / 2))
