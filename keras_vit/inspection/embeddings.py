"""What a ViT's embeddings learn: position-embedding similarity and patch-filter components.

- ``position_embedding_similarity``: the cosine similarity between the position embedding of
  every patch and that of every other patch (paper Sec. 4.5, Fig. 7 centre, Fig. 10).
- ``embedding_filter_components``: the top principal components of the learned patch-embedding
  filters, the rows of ``E`` seen as P x P x C images (paper Fig. 7 left).
"""

from typing import NamedTuple

import keras
import numpy as np

from keras_vit.inspection.attention import backbone_of


def position_embedding_similarity(model, block=0):
    """Cosine similarity of the patches' position embeddings, as a (rows, cols, rows, cols) array.

    Entry ``[r, c, i, j]`` is the similarity between the embedding of the patch at grid row r,
    column c and that of the patch at row i, column j (the class token's row is left out). For a
    2-D embedding the patch's embedding is its concatenated X and Y halves.

    Args:
        model: a keras_vit ``ViTImageClassifier`` or ``ViTBackbone`` with
            ``position_embedding`` "learned_1d" or "learned_2d".
        block: for the "every_layer" placement, the block whose embedding to compare.

    Returns:
        float32 numpy array (rows, cols, rows, cols) over the grid the table is learned at
        (``config.learned_grid``: the image's grid, or ``position_embedding_grid``).

    Example:
    >>> from keras_vit import ViTImageClassifier
    >>> model = ViTImageClassifier(image_size=8, patch_size=4, hidden_size=8, num_layers=1,
    ...                            num_heads=2, mlp_dim=16, num_classes=3)
    >>> similarity = position_embedding_similarity(model)
    >>> similarity.shape, round(float(similarity[0, 1, 0, 1]), 4)
    ((2, 2, 2, 2), 1.0)
    """
    backbone = backbone_of(model)
    layer = backbone.position_embedding_layer(block)
    table = np.asarray(keras.ops.convert_to_numpy(layer.position_embeddings()), np.float64)[0]
    config = backbone.config
    if config.encoder.classifier == "token":
        table = table[1:]
    rows, cols = config.learned_grid
    norms = np.linalg.norm(table, axis=-1, keepdims=True)
    unit = table / np.maximum(norms, 1e-12)
    return (unit @ unit.T).reshape(rows, cols, rows, cols).astype(np.float32)


class FilterComponents(NamedTuple):
    """Principal components of the patch-embedding filters, by decreasing explained variance.

    Attributes:
        components: (n, P, P, C) unit-norm, mutually orthogonal filters.
        explained_variance: (n,) variance of the filters along each component.
        explained_variance_ratio: (n,) that variance as a fraction of the filters' total.
    """

    components: np.ndarray
    explained_variance: np.ndarray
    explained_variance_ratio: np.ndarray


def embedding_filter_components(model, n=28):
    """The top ``n`` principal components of the patch-embedding filters (paper Fig. 7 left).

    The embedding kernel (P, P, C, D) holds D filters of P*P*C values each (the rows of the
    paper's projection E). They are centred and decomposed with an SVD; component k is the k-th
    right singular vector, reshaped to a P x P x C image, with the sign chosen so that its
    largest-magnitude entry is positive. For a hybrid the filters act on the ResNet feature map
    (P is then 1 and C the feature width).

    Args:
        model: a keras_vit ``ViTImageClassifier`` or ``ViTBackbone``.
        n: number of components, at most min(D, P*P*C) (the paper shows 28).

    Returns:
        ``FilterComponents(components, explained_variance, explained_variance_ratio)``.

    Example:
    >>> from keras_vit import ViTImageClassifier
    >>> model = ViTImageClassifier(image_size=8, patch_size=4, hidden_size=8, num_layers=1,
    ...                            num_heads=2, mlp_dim=16, num_classes=3)
    >>> result = embedding_filter_components(model, n=5)
    >>> result.components.shape, result.explained_variance.shape
    ((5, 4, 4, 3), (5,))
    """
    backbone = backbone_of(model)
    kernel = np.asarray(keras.ops.convert_to_numpy(backbone.patch_embedding.conv.kernel))
    height, width, channels, count = kernel.shape
    size = height * width * channels
    limit = min(count, size)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= limit:
        raise ValueError(
            f"n must be an integer between 1 and {limit} (the model has {count} filters of "
            f"{height}x{width}x{channels} = {size} values), got {n!r}."
        )
    filters = kernel.reshape(size, count).T.astype(np.float64)
    filters -= filters.mean(axis=0)
    _, singular, basis = np.linalg.svd(filters, full_matrices=False)
    peaks = np.argmax(np.abs(basis), axis=1)
    basis *= np.sign(basis[np.arange(len(basis)), peaks])[:, None]
    variance = singular**2 / max(count - 1, 1)
    total = variance.sum()
    ratio = variance / total if total > 0 else np.zeros_like(variance)
    return FilterComponents(
        components=basis[:n].reshape(n, height, width, channels).astype(np.float32),
        explained_variance=variance[:n],
        explained_variance_ratio=ratio[:n],
    )


def check_similarity(similarity):
    """``similarity`` as float64 after checking it is a (rows, cols, rows, cols) array."""
    similarity = np.asarray(similarity, dtype=np.float64)
    if similarity.ndim != 4 or similarity.shape[:2] != similarity.shape[2:]:
        raise ValueError(
            "Expected a (rows, cols, rows, cols) similarity array from "
            f"position_embedding_similarity, got shape {similarity.shape}."
        )
    return similarity


def position_similarity_summary(similarity):
    """Mean cosine similarity of each patch's position embedding to groups of other patches.

    The numbers behind the paper's reading of Fig. 10 ("closer patches tend to have more similar
    position embeddings"; "row-column structure"): the mean over all patch pairs of the grid's
    4-neighbours, of other patches in the same row, in the same column, and of all the rest.

    Args:
        similarity: (rows, cols, rows, cols) array from ``position_embedding_similarity``.

    Returns:
        dict with float ``neighbours``, ``same_row``, ``same_column`` and ``other``.

    Example:
    >>> import numpy as np
    >>> rows = np.arange(3)[:, None, None, None] == np.arange(3)[None, None, :, None]
    >>> summary = position_similarity_summary(np.broadcast_to(rows, (3, 3, 3, 3)) * 1.0)
    >>> summary["same_row"], summary["same_column"], summary["other"]
    (1.0, 0.0, 0.0)
    """
    similarity = check_similarity(similarity)
    rows, cols = similarity.shape[:2]
    if rows * cols < 4 or min(rows, cols) < 2:
        raise ValueError(f"Need a grid of at least 2 x 2 patches, got {rows} x {cols}.")
    r, c = (axis.ravel() for axis in np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij"))
    flat = similarity.reshape(rows * cols, rows * cols)
    gap = np.abs(r[:, None] - r[None]) + np.abs(c[:, None] - c[None])
    same_row = (r[:, None] == r[None]) & (gap > 0)
    same_column = (c[:, None] == c[None]) & (gap > 0)
    groups = dict(neighbours=gap == 1, same_row=same_row, same_column=same_column,
                  other=(gap > 0) & ~same_row & ~same_column)
    return {name: float(flat[mask].mean()) if mask.any() else float("nan")
            for name, mask in groups.items()}


def position_similarity_by_distance(similarity):
    """Mean cosine similarity of two patches' position embeddings against their distance.

    How fast the similarity falls as patches lie further apart: a fine pattern (the paper's
    Appendix D.4, Fig. 10) falls off within a patch or two, a coarse one spreads further. The
    distance is the Euclidean one between the two patches' grid positions, in patches (1 for a
    left, right, upper or lower neighbour, sqrt(2) for a diagonal one); every ordered pair of
    distinct patches counts once.

    Args:
        similarity: (rows, cols, rows, cols) array from ``position_embedding_similarity``.

    Returns:
        ``(distances, means)``: float64 arrays over the distinct distances, in increasing order
        (0, a patch with itself, left out).

    Example:
    >>> import numpy as np
    >>> distances, means = position_similarity_by_distance(np.zeros((2, 2, 2, 2)))
    >>> distances.round(3).tolist(), means.tolist()
    ([1.0, 1.414], [0.0, 0.0])
    """
    similarity = check_similarity(similarity)
    rows, cols = similarity.shape[:2]
    if rows * cols < 2:
        raise ValueError(f"Need a grid of at least 2 patches, got {rows} x {cols}.")
    r, c = (axis.ravel() for axis in np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij"))
    squared = (r[:, None] - r[None]) ** 2 + (c[:, None] - c[None]) ** 2
    flat = similarity.reshape(rows * cols, rows * cols)
    steps = np.unique(squared[squared > 0])
    means = np.array([flat[squared == step].mean() for step in steps])
    return np.sqrt(steps.astype(np.float64)), means


def position_similarity_by_offset(similarity):
    """Mean cosine similarity of two patches' position embeddings for every offset between them.

    The similarity maps of ``plot_position_embedding_similarity`` drawn as one average: entry
    ``[rows - 1 + dr, cols - 1 + dc]`` is the mean over all pairs of patches whose second patch
    lies ``dr`` rows below and ``dc`` columns right of the first (negative: above, left). The
    centre is a patch with itself. Patches of one column lie on the vertical line through the
    centre, patches of one row on the horizontal line, so a row-column structure (the paper's
    Sec. 4.5 and Fig. 10) shows as a cross, a preference for columns as a vertical line.

    Args:
        similarity: (rows, cols, rows, cols) array from ``position_embedding_similarity``.

    Returns:
        float64 array (2 * rows - 1, 2 * cols - 1), symmetric about its centre.

    Example (a pattern in which only patches of the same column are alike):
    >>> import numpy as np
    >>> column = np.arange(3)[None, :, None, None] == np.arange(3)[None, None, None, :]
    >>> offsets = position_similarity_by_offset(np.broadcast_to(column, (3, 3, 3, 3)) * 1.0)
    >>> offsets.shape, offsets[:, 2].tolist(), offsets[2].tolist()
    ((5, 5), [1.0, 1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 1.0, 0.0, 0.0])
    """
    similarity = check_similarity(similarity)
    rows, cols = similarity.shape[:2]
    r, c = (axis.ravel() for axis in np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij"))
    where = (rows - 1 + r[None] - r[:, None], cols - 1 + c[None] - c[:, None])
    total, count = np.zeros((2 * rows - 1, 2 * cols - 1)), np.zeros((2 * rows - 1, 2 * cols - 1))
    np.add.at(total, where, similarity.reshape(rows * cols, rows * cols))
    np.add.at(count, where, 1)
    return total / count
