"""What a ViT attends to: attention weights, Attention Rollout and mean attention distance.

- ``attention_weights``: the softmax probabilities of every block (the explicit path of the
  attention layer, recorded by the backbone's own forward, ``ViTBackbone.record``; the model is
  not changed).
- ``attention_rollout``: Attention Rollout (Abnar & Zuidema, 2020) as in the paper's Appendix D.8
  and Fig. 6: average the heads, add the identity for the residual connection, re-normalise the
  rows, and multiply the matrices of all layers.
- ``effective_patch_count``: how many patches a map spreads its attention over (the exponential
  of its entropy), for telling a selective head from a uniform one.
- ``mean_attention_distance``: the paper's "attention distance" (Sec. 4.5, Fig. 7 right, Fig. 11,
  Appendix D.7): for every head, the attention-weighted mean distance in pixels between a query
  patch and the patches it attends to, averaged over query patches and images.

Each takes a ``ViTImageClassifier`` or its ``ViTBackbone`` (plain or hybrid; a model of any image
size reads the grid of the images it is given) and reads the backbone.
"""

import keras
import numpy as np

from keras_vit.checks import pair, positive_int
from keras_vit.models.description import ViTConfig
from keras_vit.models.vit import ViTBackbone


def backbone_of(model):
    """The ``ViTBackbone`` of a ``ViTImageClassifier``, or the backbone itself."""
    backbone = getattr(model, "backbone", model)
    if isinstance(backbone, ViTBackbone):  # attention_model() is the ViT backbone's own
        return backbone
    raise TypeError(
        f"Expected a keras_vit ViTImageClassifier or ViTBackbone (plain or hybrid), got "
        f"{type(model).__name__}. Build the model with keras_vit.ViTImageClassifier, "
        "keras_vit.create_model or keras_vit.load_checkpoint."
    )


def _config_of(model):
    """The ``ViTConfig`` of a model (classifier or backbone), or the config itself."""
    return model if isinstance(model, ViTConfig) else backbone_of(model).config


def _full_attention(config, what):
    config.family.check("token_attention", what,
                        "attention_weights(model, images) gives the maps it has (an Axial-ViT's "
                        "row and column maps).")


def _check_images(backbone, images):
    """The images as the model's input dtype, checked, and their (rows, cols) patch grid."""
    images = np.asarray(keras.ops.convert_to_numpy(images))
    config = backbone.config
    channels = config.patches.num_channels
    sides = config.image_size or (None, None)
    expected = (*sides, channels)
    if images.ndim != 4 or any(want not in (None, got)
                               for want, got in zip(expected, images.shape[1:])):
        if config.image_size is None:
            shape, size = f"(batch, height, width, {channels})", "a multiple of the stride"
        else:
            shape, size = f"(batch, {sides[0]}, {sides[1]}, {channels})", "the model's image_size"
        hint = " Add a batch axis with images[None]." if images.ndim == 3 else ""
        raise ValueError(
            f"Expected a batch of images of shape {shape} for this model, got {images.shape}."
            f"{hint} Resize the images to {size} (values in [-1, 1])."
        )
    if len(images) == 0:
        raise ValueError("Got an empty batch of images; pass at least one image.")
    config.check_input(images.shape[1:3])
    grid = tuple(side // config.stride for side in images.shape[1:3])
    return images.astype(backbone.input.dtype or "float32"), grid


def _grid(config, image_size):
    """The (rows, cols) patch grid of ``image_size``, by default the model's own."""
    if image_size is None:
        if config.grid is None:
            raise ValueError("This model takes any image size; pass image_size=... for the grid.")
        return config.grid
    sides = pair("image_size", image_size)
    config.check_input(sides)
    return tuple(side // config.stride for side in sides)


def attention_weights(model, images, batch_size=32):
    """The attention probabilities of every encoder block.

    Args:
        model: a keras_vit ``ViTImageClassifier`` or ``ViTBackbone`` (plain or hybrid, any
            position embedding).
        images: (batch, height, width, channels) array, preprocessed as for the model.
        batch_size: images per forward pass.

    Returns:
        A list with one float32 numpy array per block, each (batch, heads, tokens, tokens); row i
        of a map is the distribution of query token i over the keys (token 0 is the class token
        for ``classifier="token"`` models). An Axial-ViT gives two per layer, its row attention
        (batch, rows, heads, cols, cols) then its column one (batch, cols, heads, rows, rows),
        the rows counting the class row.

    Example:
    >>> import numpy as np
    >>> from keras_vit import ViTImageClassifier
    >>> model = ViTImageClassifier(image_size=8, patch_size=4, hidden_size=8, num_layers=2,
    ...                            num_heads=2, mlp_dim=16, num_classes=3)
    >>> [w.shape for w in attention_weights(model, np.zeros((1, 8, 8, 3), "float32"))]
    [(1, 2, 5, 5), (1, 2, 5, 5)]
    """
    backbone = backbone_of(model)
    images, _ = _check_images(backbone, images)
    chunks = list(_attention_batches(backbone, images, batch_size))
    return [np.concatenate(layer) for layer in zip(*chunks)]


def _attention_batches(backbone, images, batch_size):
    """Per batch of images, the list of every block's attention probabilities (float32 numpy).

    Analyses that reduce over images consume these one batch at a time, so that memory holds
    one batch's maps (a ViT-B/16 at 384 px has 12 x 12 maps of 577 x 577 per image)."""
    batch_size = positive_int("batch_size", batch_size)
    for start in range(0, len(images), int(batch_size)):
        outputs = backbone.record(images[start:start + int(batch_size)])["attention"]
        yield [np.asarray(keras.ops.convert_to_numpy(w), np.float32) for w in outputs]


def _rollout_matrices(weights):
    """The (batch, tokens, tokens) rollout A_L' ... A_1' with A' = rownorm(mean_heads(A) + I)."""
    tokens = weights[0].shape[-1]
    eye = np.eye(tokens)
    rollout = None
    for layer in weights:
        mixed = layer.astype(np.float64).mean(axis=1) + eye
        mixed /= mixed.sum(axis=-1, keepdims=True)
        rollout = mixed if rollout is None else mixed @ rollout
    return rollout


def attention_rollout(model, images, batch_size=32):
    """Attention Rollout maps over the patch grid (paper Appendix D.8, Fig. 6).

    The attention of each block is averaged over heads; the identity is added (the residual
    connection) and the rows are re-normalised; the matrices of all blocks are multiplied, later
    blocks on the left. The map of a ``"token"`` model is the class token's row over the patch
    tokens; a ``"gap"`` model, whose output is the mean of all tokens, gets the mean of the rows.

    Args:
        model: a keras_vit ``ViTImageClassifier`` or ``ViTBackbone``.
        images: (batch, height, width, channels) array, preprocessed as for the model.
        batch_size: images per forward pass.

    Returns:
        float32 numpy array (batch, rows, cols) over the images' patch grid: the share of the
        output's attention flow that reaches each patch. Upsample it onto the image with
        ``rollout_to_image``.

    Example:
    >>> import numpy as np
    >>> from keras_vit import ViTImageClassifier
    >>> tiny = dict(hidden_size=8, num_layers=2, num_heads=2, mlp_dim=16, num_classes=3)
    >>> model = ViTImageClassifier(image_size=8, patch_size=4, **tiny)
    >>> attention_rollout(model, np.zeros((1, 8, 8, 3), "float32")).shape
    (1, 2, 2)
    """
    backbone = backbone_of(model)
    _full_attention(backbone.config, "attention_rollout")
    images, grid = _check_images(backbone, images)
    maps = [_output_row(backbone.config, _rollout_matrices(weights))
            for weights in _attention_batches(backbone, images, batch_size)]
    return np.concatenate(maps).reshape(-1, *grid).astype(np.float32)


def _output_row(config, matrices):
    """The row of (..., tokens, tokens) matrices that reaches the classifier, over the patches:
    the class token's row for a ``"token"`` model, the mean of all rows for a ``"gap"`` one."""
    if config.encoder.classifier == "token":
        return matrices[..., 0, 1:]
    return matrices.mean(axis=-2)


def attention_maps(model, images, batch_size=32):
    """Every head's attention from the classifier's input over the patches, per block.

    For a ``"token"`` model, the class token's attention row over the patch tokens (the weight
    it gives itself is left out, so a row sums to less than 1); for a ``"gap"`` model, the mean
    of all tokens' rows. Uniform attention puts 1 / (tokens) on every patch.

    Args:
        model: a keras_vit ``ViTImageClassifier`` or ``ViTBackbone``.
        images: (batch, height, width, channels) array, preprocessed as for the model.
        batch_size: images per forward pass.

    Returns:
        float32 numpy array (batch, num_layers, num_heads, rows, cols) over the images' patch
        grid.

    Example:
    >>> import numpy as np
    >>> from keras_vit import ViTBackbone
    >>> model = ViTBackbone(image_size=8, patch_size=4, hidden_size=8, num_layers=2,
    ...                     num_heads=2, mlp_dim=16)
    >>> attention_maps(model, np.zeros((1, 8, 8, 3), "float32")).shape
    (1, 2, 2, 2, 2)
    """
    backbone = backbone_of(model)
    _full_attention(backbone.config, "attention_maps")
    images, grid = _check_images(backbone, images)
    batches = []
    for weights in _attention_batches(backbone, images, batch_size):
        rows = _output_row(backbone.config, np.stack(weights, axis=1))
        batches.append(rows.reshape(*rows.shape[:3], *grid))  # (batch, layers, heads, grid)
    return np.concatenate(batches).astype(np.float32)


def effective_patch_count(maps):
    """How many patches a map spreads its attention over: the exponential of its entropy.

    Each map is normalised to sum 1 over the patches (the class token's own share, left out of
    ``attention_maps``, is ignored). Uniform attention over N patches gives N; attention on one
    patch gives 1; attention split evenly over k patches gives k.

    Args:
        maps: (..., rows, cols) maps, e.g. ``attention_maps(model, images)`` or
            ``attention_rollout(model, images)``.

    Returns:
        float64 numpy array (...), one count per map.

    Example:
    >>> import numpy as np
    >>> maps = np.zeros((2, 4, 4)); maps[0] = 1 / 16; maps[1, :2, :2] = 0.2  # even over 4
    >>> [round(float(n), 6) for n in effective_patch_count(maps)]
    [16.0, 4.0]
    """
    maps = np.asarray(maps, dtype=np.float64)
    if maps.ndim < 2:
        raise ValueError(f"Expected maps of shape (..., rows, cols), got {maps.shape}.")
    flat = maps.reshape(*maps.shape[:-2], -1)
    if np.any(flat < 0) or np.any(flat.sum(axis=-1) <= 0):
        raise ValueError("Expected attention maps: non-negative, each with a positive sum.")
    p = flat / flat.sum(axis=-1, keepdims=True)
    entropy = -(p * np.log(np.where(p > 0, p, 1.0))).sum(axis=-1)
    return np.exp(entropy)


def rollout_to_image(rollout, image_size, normalize=True):
    """Upsample rollout maps from the patch grid onto the image (bilinear), for an overlay.

    Args:
        rollout: (batch, rows, cols) or (rows, cols) maps, e.g. from ``attention_rollout``.
        image_size: int or (height, width) of the image.
        normalize: divide every map by its maximum, so that it lies in [0, 1] and can multiply
            the image as in the paper's Fig. 6.

    Returns:
        float32 numpy array (batch, height, width), or (height, width) for a single map.

    Example:
    >>> import numpy as np
    >>> rollout_to_image(np.ones((2, 2)), 8).shape
    (8, 8)
    """
    maps = np.asarray(rollout, dtype=np.float32)
    single = maps.ndim == 2
    if single:
        maps = maps[None]
    if maps.ndim != 3:
        raise ValueError(
            f"Expected rollout maps of shape (batch, rows, cols) or (rows, cols), got {maps.shape}."
        )
    height, width = pair("image_size", image_size)
    resized = keras.ops.image.resize(
        maps[..., None], (height, width), interpolation="bilinear", data_format="channels_last"
    )
    resized = np.asarray(keras.ops.convert_to_numpy(resized), dtype=np.float32)[..., 0]
    if normalize:
        peak = resized.max(axis=(1, 2), keepdims=True)
        resized = resized / np.where(peak > 0, peak, 1.0)
    return resized[0] if single else resized


def patch_centres(model, image_size=None):
    """The (rows*cols, 2) pixel coordinates (y, x) of the patch centres, row-major.

    Patches are ``config.stride`` pixels apart (the patch size, times the ResNet stem's stride
    for a hybrid, whose patches are taken from a downsampled feature map).

    Args:
        model: a ``ViTImageClassifier``, a ``ViTBackbone`` or a ``ViTConfig``.
        image_size: int or (height, width); by default the model's own.
    """
    config = _config_of(model)
    return _centres(_grid(config, image_size), config.stride)


def _centres(grid, stride):
    rows, cols = grid
    points = np.stack(np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij"), axis=-1)
    return (points.reshape(-1, 2) + 0.5) * stride


def mean_attention_distance(model, images, batch_size=32):
    """Mean attention distance in pixels, per block and head (paper Fig. 7 right, Appendix D.7).

    For every query patch, the distances from its centre to the centres of all patches are
    averaged with its attention weights over the patches (the class token, if any, is left out
    and the remaining weights re-normalised); the result is averaged over query patches and
    images. This is the "receptive field size" of the head, the analogue of a CNN's.

    Args:
        model: a keras_vit ``ViTImageClassifier`` or ``ViTBackbone`` (plain or hybrid).
        images: (batch, height, width, channels) array, preprocessed as for the model.
        batch_size: images per forward pass.

    Returns:
        float64 numpy array (num_layers, num_heads).

    Example:
    >>> import numpy as np
    >>> from keras_vit import ViTImageClassifier
    >>> model = ViTImageClassifier(image_size=8, patch_size=4, hidden_size=8, num_layers=2,
    ...                            num_heads=2, mlp_dim=16, num_classes=3)
    >>> mean_attention_distance(model, np.zeros((1, 8, 8, 3), "float32")).shape
    (2, 2)
    """
    backbone = backbone_of(model)
    config = backbone.config
    _full_attention(config, "mean_attention_distance")
    images, grid = _check_images(backbone, images)
    centres = _centres(grid, config.stride)
    distance = np.linalg.norm(centres[:, None, :] - centres[None, :, :], axis=-1)
    first = 1 if config.encoder.classifier == "token" else 0
    total = 0.0
    for weights in _attention_batches(backbone, images, batch_size):
        per_layer = []
        for layer in weights:
            patches = layer[:, :, first:, first:].astype(np.float64)
            patches /= patches.sum(axis=-1, keepdims=True)
            per_query = (patches * distance).sum(axis=-1)  # (batch, heads, queries)
            per_layer.append(per_query.mean(axis=2).sum(axis=0))
        total = total + np.stack(per_layer)
    return total / len(images)


def uniform_attention_distance(model, image_size=None):
    """The mean attention distance (pixels) of a head that attends uniformly to all patches:
    the mean distance between two patch centres of the grid, the reference line of Fig. 7 and
    Fig. 11 plots.

    Args:
        model: a ``ViTImageClassifier``, a ``ViTBackbone`` or a ``ViTConfig``.
        image_size: int or (height, width); by default the model's own.

    Example:
    >>> from keras_vit import ViTConfig
    >>> config = ViTConfig.from_keywords(image_size=8, patch_size=4, hidden_size=8,
    ...                                  num_layers=1, num_heads=2, mlp_dim=16)
    >>> round(float(uniform_attention_distance(config)), 4)  # 2 x 2 grid, centres 4 px apart
    3.4142
    """
    centres = patch_centres(model, image_size)
    return float(np.linalg.norm(centres[:, None] - centres[None], axis=-1).mean())


def rollout_object_share(rollout, images, background=-1.0, tolerance=0.1):
    """How much of each rollout map falls on the object, for images on a flat background.

    A patch belongs to the object when its mean pixel differs from ``background`` by more than
    ``tolerance`` (Fashion-MNIST: black, -1 after scaling to [-1, 1]). A map that ignores the
    image gives each patch the same share, so its object share equals the object's share of
    the patches; a map that follows the object gives more.

    Args:
        rollout: (batch, rows, cols) maps from ``attention_rollout``.
        images: (batch, height, width, channels) images the maps were computed on; height and
            width must be multiples of rows and cols.
        background, tolerance: the background value and how far a patch may be from it.

    Returns:
        (on_object, object_patches): two float64 arrays (batch,), the share of each map on
        object patches and the fraction of the grid those patches cover.

    Example:
    >>> import numpy as np
    >>> images = np.full((1, 4, 4, 1), -1.0); images[0, :2, :2] = 1.0  # object: top-left patch
    >>> on_object, patches = rollout_object_share(np.array([[[0.4, 0.2], [0.2, 0.2]]]), images)
    >>> float(on_object[0]), float(patches[0])
    (0.4, 0.25)
    """
    maps = np.asarray(rollout, dtype=np.float64)
    images = np.asarray(images, dtype=np.float64)
    if maps.ndim != 3 or images.ndim != 4 or len(maps) != len(images):
        raise ValueError(
            f"Expected rollout maps (batch, rows, cols) and images (batch, height, width, "
            f"channels) of the same batch, got {maps.shape} and {images.shape}."
        )
    batch, rows, cols = maps.shape
    height, width = images.shape[1:3]
    if height % rows or width % cols:
        raise ValueError(
            f"The images ({height} x {width}) must split into the maps' {rows} x {cols} grid."
        )
    patches = images.reshape(batch, rows, height // rows, cols, width // cols, -1)
    on = np.abs(patches.mean(axis=(2, 4, 5)) - background) > tolerance
    share = (maps * on).sum(axis=(1, 2)) / maps.sum(axis=(1, 2))
    return share, on.mean(axis=(1, 2))
