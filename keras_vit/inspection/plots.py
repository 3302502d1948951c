"""The paper's inspection figures, drawn with matplotlib (Fig. 6 and Fig. 7 left, centre, right).

Each helper takes the arrays computed by ``keras_vit.inspection`` and returns a
``matplotlib.figure.Figure`` (not registered with pyplot: show it in a notebook as the cell's
value or with ``display(fig)``, or write it with ``fig.savefig``). matplotlib is imported only
when a helper is called (``pip install matplotlib``, or the ``inspection`` extra).
"""

import numpy as np

from keras_vit.inspection.attention import rollout_to_image
from keras_vit.inspection.embeddings import FilterComponents


def _new_figure(figsize):
    try:
        from matplotlib.figure import Figure
    except ImportError as error:
        raise ImportError(
            "The keras_vit.inspection plots need matplotlib: pip install matplotlib "
            "(or keras-vit-paper[inspection])."
        ) from error
    return Figure(figsize=figsize, layout="constrained")


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


def plot_position_embedding_similarity(similarity, title="Position embedding similarity"):
    """Fig. 7 (centre) and Fig. 10: the similarity of each patch's embedding with all others.

    Tile (r, c) of the mosaic shows, over the whole grid, the cosine similarity between the
    position embedding of the patch at row r, column c and every other patch's.

    Args:
        similarity: (rows, cols, rows, cols) array from ``position_embedding_similarity``.
        title: the figure title.

    Example:
    >>> import numpy as np
    >>> fig = plot_position_embedding_similarity(np.ones((3, 3, 3, 3)))
    >>> fig.axes[0].get_xlabel()
    'Input patch column'
    """
    similarity = np.asarray(similarity, dtype=np.float64)
    if similarity.ndim != 4 or similarity.shape[:2] != similarity.shape[2:]:
        raise ValueError(
            "Expected a (rows, cols, rows, cols) similarity array from "
            f"position_embedding_similarity, got shape {similarity.shape}."
        )
    rows, cols = similarity.shape[:2]
    gap = 1
    mosaic = np.full((rows * (rows + gap) - gap, cols * (cols + gap) - gap), np.nan)
    for r in range(rows):
        for c in range(cols):
            top, left = r * (rows + gap), c * (cols + gap)
            mosaic[top:top + rows, left:left + cols] = similarity[r, c]
    fig = _new_figure((5.5, 5.0))
    axis = fig.add_subplot(1, 1, 1)
    image = axis.imshow(mosaic, cmap="viridis", vmin=-1, vmax=1, interpolation="nearest")
    axis.set_xticks(np.arange(cols) * (cols + gap) + (cols - 1) / 2, np.arange(1, cols + 1))
    axis.set_yticks(np.arange(rows) * (rows + gap) + (rows - 1) / 2, np.arange(1, rows + 1))
    axis.tick_params(length=0)
    for side in axis.spines.values():
        side.set_visible(False)
    axis.set_xlabel("Input patch column")
    axis.set_ylabel("Input patch row")
    axis.set_title(title)
    fig.colorbar(image, ax=axis, label="Cosine similarity", shrink=0.8)
    return fig


def plot_mean_attention_distance(distances, image_size=None, title=None):
    """Fig. 7 (right) and Fig. 11: mean attention distance of every head against depth.

    Args:
        distances: (num_layers, num_heads) array from ``mean_attention_distance``.
        image_size: optional image side (int or (height, width)); the y axis then spans the
            image's diagonal, the largest possible distance.
        title: the figure title; by default the number of heads and layers.

    Example:
    >>> import numpy as np
    >>> fig = plot_mean_attention_distance(np.ones((4, 3)))
    >>> fig.axes[0].get_ylabel()
    'Mean attention distance (pixels)'
    """
    distances = np.asarray(distances, dtype=np.float64)
    if distances.ndim != 2:
        raise ValueError(
            "Expected a (num_layers, num_heads) array from mean_attention_distance, got shape "
            f"{distances.shape}."
        )
    layers, heads = distances.shape
    fig = _new_figure((5.0, 4.0))
    axis = fig.add_subplot(1, 1, 1)
    depth = np.arange(layers)
    for head in range(heads):
        axis.scatter(depth, distances[:, head], s=14, label=f"Head {head + 1}")
    axis.set_xlabel("Network depth (layer)")
    axis.set_ylabel("Mean attention distance (pixels)")
    if image_size is not None:
        if isinstance(image_size, (tuple, list)):
            height, width = image_size
        else:
            height = width = image_size
        axis.set_ylim(0, float(np.hypot(height, width)))
    else:
        axis.set_ylim(bottom=0)
    if heads <= 16:
        axis.legend(fontsize="x-small", ncol=2 if heads > 8 else 1, loc="lower right")
    axis.set_title(title or f"{heads} heads, {layers} layers")
    return fig


def plot_attention_rollout(images, rollout, value_range=(-1.0, 1.0), max_images=None):
    """Fig. 6: each input image beside the image multiplied by its Attention Rollout map.

    Args:
        images: (batch, height, width, channels) images with values in ``value_range``.
        rollout: (batch, rows, cols) maps from ``attention_rollout``; they are upsampled onto the
            image and divided by their maximum (``rollout_to_image``).
        value_range: the range of the image values (the models' [-1, 1] by default).
        max_images: draw at most this many images.

    Example:
    >>> import numpy as np
    >>> fig = plot_attention_rollout(np.zeros((2, 8, 8, 3)), np.ones((2, 2, 2)))
    >>> [axis.get_title() for axis in fig.axes]
    ['Input', 'Attention', 'Input', 'Attention']
    """
    images = np.asarray(images, dtype=np.float64)
    rollout = np.asarray(rollout, dtype=np.float64)
    if images.ndim != 4 or images.shape[-1] not in (1, 3):
        raise ValueError(
            f"Expected images of shape (batch, height, width, 1 or 3), got {images.shape}."
        )
    if rollout.ndim != 3 or len(rollout) != len(images):
        raise ValueError(
            f"Expected one (rows, cols) rollout map per image, i.e. shape ({len(images)}, rows, "
            f"cols), got {rollout.shape}."
        )
    low, high = value_range
    if not high > low:
        raise ValueError(f"value_range must be (low, high) with high > low, got {value_range!r}.")
    count = len(images) if max_images is None else max(1, min(int(max_images), len(images)))
    pictures = np.clip((images[:count] - low) / (high - low), 0.0, 1.0)
    masks = rollout_to_image(rollout[:count], images.shape[1:3])
    fig = _new_figure((4.0, 2.0 * count))
    grey = images.shape[-1] == 1
    for index in range(count):
        shown = (pictures[index], pictures[index] * masks[index][..., None])
        for column, (picture, label) in enumerate(zip(shown, ("Input", "Attention"))):
            axis = fig.add_subplot(count, 2, 2 * index + column + 1)
            axis.imshow(picture[..., 0] if grey else picture, cmap="gray" if grey else None,
                        vmin=0, vmax=1)
            axis.set_title(label)
            axis.set_xticks([])
            axis.set_yticks([])
    return fig
