"""The official input preprocessing on numpy arrays (no TensorFlow; feeds every Keras backend).

- train (vit_jax / big_vision): an Inception crop (a random window covering 5%-100% of the
  image, aspect ratio 3/4-4/3, as ``tf.image.sample_distorted_bounding_box`` draws it) resized to
  the crop size, or a square resize followed by a random crop (BiT, big_vision
  ``resize|random_crop``); then a random horizontal flip.
- eval, two official pipelines (``evaluation=``):

  - ``"resize"`` (vit_jax ``input_pipeline``): a plain bilinear resize to the crop size;
    values ``(x - 127.5) / 127.5``.
  - ``"central_crop"`` (big_vision ``resize_small(resize_size)|central_crop(image_size)|
    value_range(-1, 1)``, the AugReg transfers' 448 -> 384): the short side resized to
    ``resize_size`` with TensorFlow's "area" method (``tf.image.resize(method="area")``, which
    has no antialias option), the result clipped and truncated back to uint8 as big_vision
    does, then the centre ``image_size`` square; values ``x / 255 * 2 - 1``.

- BiT's resolution rule: images smaller than 96x96 are resized to 160 and cropped to 128, larger
  ones to 512 / 480.
- RandAugment (AugReg, big_vision ``...|flip_lr|randaug(N, M)|value_range(-1, 1)``): after the
  crop and the flip the image is cast to uint8 as big_vision's resize does (clipped to 0..255,
  truncated: 254.9 -> 254), ``keras_vit.data.randaugment`` applied with the image's own key,
  then scaled to [-1, 1] (``to_unit_range``). Zero layers leave the float crop as it is.
- mixup (BiT): one Beta(alpha, alpha) sample per batch, every image mixed with the reversed batch.
- mixup (big_vision, AugReg's ``p``): one ``a = max(lam, 1 - lam)``, ``lam ~ Beta(p, p)``, per
  batch, every image mixed with the one before it (``mixup_big_vision``).

Each image's random draws (its crop, its flip) come from its own 64-bit key (``keys``,
``keras_vit.data.keys``): the
training pipeline makes the key of a function of (seed, epoch, the example's index), so an
example is augmented alike however the batch is split over devices and processes.

For tiny images (Fashion-MNIST's 28x28) a random translation suits better than a crop that also
rescales: ``pad_crop`` zero-pads to ``resize_size`` and crops back (the classic CIFAR
augmentation); it is not part of the official recipes.

The bilinear resize is TensorFlow's ``tf.image.resize(method="bilinear", antialias=False)``
(half-pixel centres) and the area resize TensorFlow's "area" kernel, both in float32 operation
for operation, so these arrays equal the tf.data pipeline's (``keras_vit.data.tfdata``) and the
official pipelines' to the last bit (``docs/training.md``, "The official evaluation
pipelines"). Functions take one image (H, W, C) or a batch (N, H, W, C) and a
``numpy.random.Generator`` for the random parts.
"""

import numbers

import numpy as np

from keras_vit.data.keys import example_keys as example_keys  # the pipeline's keys, here too
from keras_vit.data.keys import generator_keys, uniform
from keras_vit.data.randaugment import check as check_policy
from keras_vit.data.randaugment import randaugment as distort

CROPS = ("inception_crop", "resize_crop", "pad_crop")
TRAIN_AUGMENTATIONS = (*CROPS, "resize")
EVALUATIONS = ("resize", "central_crop")  # vit_jax's, big_vision's (AugReg)
PER_IMAGE = ("inception_crop",)  # crops of a size drawn per image: no batch form


def to_unit_range(images):
    """Map 0..255 pixel values to [-1, 1] as float32.

    Example:
    >>> to_unit_range(np.array([0, 255], np.uint8)).tolist()
    [-1.0, 1.0]
    """
    return (np.asarray(images, np.float32) - np.float32(127.5)) / np.float32(127.5)


def to_unit_range_big_vision(images):
    """big_vision's ``value_range(-1, 1)``: ``x / 255 * 2 - 1`` in float32 (it can differ from
    ``to_unit_range`` in the last bit).

    Example:
    >>> to_unit_range_big_vision(np.array([0, 255], np.uint8)).tolist()
    [-1.0, 1.0]
    """
    return np.asarray(images, np.float32) / np.float32(255) * np.float32(2) - np.float32(1)


def bit_resolution(height, width):
    """BiT's rule (bit_hyperrule): ``(resize, crop)`` is (160, 128) below 96x96, else (512, 480).

    Example:
    >>> bit_resolution(32, 32), bit_resolution(500, 375)
    ((160, 128), (512, 480))
    """
    return (160, 128) if height * width < 96 * 96 else (512, 480)


def _axis_weights(size_in, size_out):
    """Source indices and weights of a half-pixel-centre bilinear resize along one axis, in
    float32 as TensorFlow's kernel computes them (so that the results agree to the last bit)."""
    scale = np.float32(size_in) / np.float32(size_out)
    centre = (np.arange(size_out, dtype=np.float32) + np.float32(0.5)) * scale - np.float32(0.5)
    floored = np.floor(centre)
    low = np.maximum(floored, 0).astype(np.int64)
    high = np.minimum(np.ceil(centre), size_in - 1).astype(np.int64)
    return low, high, centre - floored


def resize(images, size):
    """Bilinear resize of (H, W, C) or (N, H, W, C) to ``size`` x ``size``, float32, in the
    order of TensorFlow's kernel: along the upper and the lower source row, then between them.

    Example:
    >>> resize(np.arange(4, dtype=np.float32).reshape(2, 2, 1), 4)[..., 0].tolist()[0]
    [0.0, 0.25, 0.75, 1.0]
    """
    images = np.asarray(images, np.float32)
    height, width = images.shape[-3], images.shape[-2]
    if (height, width) == (size, size):
        return images
    low, high, weight = _axis_weights(width, size)

    def along_row(rows):
        left, right = rows[..., low, :], rows[..., high, :]
        return left + (right - left) * weight[:, None]

    low_row, high_row, row_weight = _axis_weights(height, size)
    upper, lower = along_row(images[..., low_row, :, :]), along_row(images[..., high_row, :, :])
    return upper + (lower - upper) * row_weight[:, None, None]


def _area_weights(size_in, size_out):
    """Source indices (N, K) and float32 weights of TensorFlow's area resize along one axis:
    output cell ``i`` covers ``[i * scale, (i + 1) * scale)`` of the input, each input cell
    weighted by its overlap (a weight-0 index pads rows with fewer cells)."""
    scale = np.float32(size_in) / np.float32(size_out)
    start = np.arange(size_out, dtype=np.float32) * scale
    end = np.arange(1, size_out + 1, dtype=np.float32) * scale
    first, last = np.floor(start).astype(np.int64), np.ceil(end).astype(np.int64)
    cells = first[:, None] + np.arange((last - first).max())  # (N, K)
    after = (cells + 1).astype(np.float32)
    weight = np.where(cells < start[:, None],
                      np.where(after > end[:, None], scale, after - start[:, None]),
                      np.where(after > end[:, None], end[:, None] - cells.astype(np.float32),
                               np.float32(1)))
    weight = np.where(cells < last[:, None], weight, 0).astype(np.float32)
    return np.clip(cells, 0, size_in - 1), weight, scale


def resize_area(images, height, width):
    """TensorFlow's area resize (``tf.image.resize(method="area")``) of (H, W, C) or
    (N, H, W, C) to ``height`` x ``width``, float32, summed in TensorFlow's order so that the
    result is the same to the last bit: per output pixel, along each source row the weighted
    columns, then the rows weighted, then the product times ``1 / (scale_y * scale_x)``."""
    images = np.asarray(images, np.float32)
    rows, row_weight, scale_y = _area_weights(images.shape[-3], height)
    columns, column_weight, scale_x = _area_weights(images.shape[-2], width)
    total = None
    for k in range(rows.shape[1]):
        source = images[..., rows[:, k], :, :]  # (..., height, W, C)
        across = None
        for j in range(columns.shape[1]):
            term = source[..., columns[:, j], :] * column_weight[:, j, None]
            across = term if across is None else across + term
        term = across * row_weight[:, k, None, None]
        total = term if total is None else total + term
    return total * np.float32(1.0 / np.float64(scale_y * scale_x))


def resize_small(images, size):
    """big_vision's ``resize_small(size)``: the short side to ``size`` (the long one scaled and
    rounded in float32), TensorFlow's area resize, then clipped and truncated back to uint8.

    Example:
    >>> resize_small(np.zeros((30, 45, 3), np.uint8), 20).shape
    (20, 30, 3)
    """
    images = np.asarray(images)
    height, width = images.shape[-3], images.shape[-2]
    factor = np.float32(size) / np.float32(min(height, width))
    new = [int(np.round(np.float32(side) * factor)) for side in (height, width)]
    resized = resize_area(images, *new)
    if np.issubdtype(images.dtype, np.integer):  # big_vision casts back to the input type
        limits = np.iinfo(images.dtype)
        resized = np.clip(resized, limits.min, limits.max).astype(images.dtype)
    return resized


def central_crop(images, size):
    """The centre ``size`` x ``size`` window (big_vision's ``central_crop``: offsets rounded down).

    Example:
    >>> central_crop(np.arange(25).reshape(5, 5, 1), 2)[..., 0].tolist()
    [[6, 7], [11, 12]]
    """
    top = (images.shape[-3] - size) // 2
    left = (images.shape[-2] - size) // 2
    return images[..., top:top + size, left:left + size, :]


# The draws of one image: its crop's offsets, its flip, the seed of its Inception window.
_TOP, _LEFT, _FLIP, _WINDOW = range(4)


def random_crop(images, size, keys):
    """A random ``size`` x ``size`` window of each image of a batch (N, H, W, C)."""
    count, height, width = images.shape[:3]
    top = np.floor(uniform(keys, _TOP) * (height - size + 1)).astype(np.int64)
    left = np.floor(uniform(keys, _LEFT) * (width - size + 1)).astype(np.int64)
    rows = (top[:, None] + np.arange(size))[:, :, None]  # (N, size, 1)
    columns = (left[:, None] + np.arange(size))[:, None, :]  # (N, 1, size)
    return images[np.arange(count)[:, None, None], rows, columns]


def pad_random_crop(images, padded_size, size, keys):
    """Resize to ``size`` if needed, zero-pad (centred) to ``padded_size``, random-crop ``size``."""
    images = resize(images, size)
    before = (padded_size - size) // 2
    after = padded_size - size - before
    padded = np.pad(images, ((0, 0), (before, after), (before, after), (0, 0)))
    return random_crop(padded, size, keys)


def inception_window(height, width, rng, area_range=(0.05, 1.0), ratio_range=(3 / 4, 4 / 3),
                     attempts=100):
    """``(top, left, h, w)`` of a random window as TensorFlow's sample_distorted_bounding_box
    draws it: area fraction and aspect ratio uniform; the whole image after 100 misses."""
    for _ in range(attempts):
        area = rng.uniform(*area_range) * height * width
        ratio = rng.uniform(*ratio_range)
        h, w = int(round(np.sqrt(area / ratio))), int(round(np.sqrt(area * ratio)))
        if 0 < h <= height and 0 < w <= width:
            return int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1)), h, w
    return 0, 0, height, width


def inception_crop(image, size, rng):
    """A random window of one (H, W, C) image (``inception_window``) resized to ``size``."""
    top, left, h, w = inception_window(image.shape[0], image.shape[1], rng)
    return resize(image[top:top + h, left:left + w], size)


def random_flip(images, keys):
    """Flip each image of a batch left-right with probability 1/2."""
    flip = uniform(keys, _FLIP) < 0.5
    return np.where(flip[:, None, None, None], images[:, :, ::-1], images)


def convert_channels(images, channels):
    """Grey <-> RGB so the images match the model's input channels (1 or 3); ITU-R 601 luma
    weights for RGB -> grey, as ``tf.image.rgb_to_grayscale``."""
    have = images.shape[-1]
    if channels is None or have == channels:
        return images
    if have == 1 and channels == 3:
        return np.repeat(images, 3, axis=-1)
    if have == 3 and channels == 1:
        return images @ np.array([[0.2989], [0.5870], [0.1140]], images.dtype)
    raise ValueError(f"Cannot convert images with {have} channels to {channels} channels.")


def per_image(training, augmentation):
    """Whether the augmentation takes one image at a time (the Inception crop, whose size is
    drawn per image); the others work on whole batches of equal-sized images."""
    return bool(training) and augmentation in PER_IMAGE


def check_augmentation(augmentation, image_size, resize_size, evaluation="resize"):
    """The ``resize_size`` a crop uses (default ``image_size * 8 / 7``), or a ValueError."""
    if augmentation not in TRAIN_AUGMENTATIONS:
        raise ValueError(
            f"Unknown augmentation {augmentation!r}; use one of {TRAIN_AUGMENTATIONS}."
        )
    if evaluation not in EVALUATIONS:
        raise ValueError(f"Unknown evaluation {evaluation!r}; use one of {EVALUATIONS} (vit_jax's "
                         "plain resize, big_vision's short-side resize and centre crop).")
    if resize_size is None:
        resize_size = int(round(image_size * 8 / 7))
    if (augmentation in ("resize_crop", "pad_crop") or evaluation == "central_crop") \
            and resize_size < image_size:
        raise ValueError(
            f"resize_size ({resize_size}) must be at least the crop size ({image_size})."
        )
    return resize_size


def to_uint8(images):
    """big_vision's cast of a resized crop back to uint8: clipped to 0..255, then truncated.

    Example:
    >>> to_uint8(np.array([-3.0, 12.99, 254.9, 300.0], np.float32)).tolist()
    [0, 12, 254, 255]
    """
    return np.clip(np.asarray(images, np.float32), np.float32(0), np.float32(255)).astype(np.uint8)


def check_randaugment(randaugment):
    """``randaugment`` as ``(num_layers, magnitude)`` or ``(num_layers, magnitude,
    pixel_scale)`` (``keras_vit.data.randaugment.parameter``), or None; a ValueError for
    anything else.

    Example:
    >>> check_randaugment([2, 15]), check_randaugment((2, 15, 0.125)), check_randaugment(None)
    ((2, 15), (2, 15, 0.125), None)
    """
    if randaugment is None:
        return None
    if isinstance(randaugment, (str, bytes)) or not hasattr(randaugment, "__len__") or len(
            randaugment) not in (2, 3):
        raise ValueError("randaugment must be None, (num_layers, magnitude) or (num_layers, "
                         f"magnitude, pixel_scale), got {randaugment!r}.")
    check_policy(*randaugment)
    return tuple(randaugment)


def check_mixup(mixup_alpha=0.0, mixup_p=0.0):
    """Refuse a ``mixup_p`` that is not a number >= 0, and both mixups at once.

    Example:
    >>> check_mixup(0.0, 0.5)
    """
    if isinstance(mixup_p, bool) or not isinstance(mixup_p, numbers.Real) or not mixup_p >= 0:
        raise ValueError(f"mixup_p must be a number >= 0 (0: no mixup), got {mixup_p!r}.")
    if mixup_alpha > 0 and mixup_p > 0:
        raise ValueError(f"mixup_alpha ({mixup_alpha}, BiT's mixup) and mixup_p ({mixup_p}, "
                         "big_vision's mixup) are two rules: give at most one of them > 0.")


def evaluation_preprocess(images, image_size, evaluation, resize_size):
    """uint8 (N, H, W, C) -> float32 in [-1, 1], by one of the official evaluation pipelines
    (``EVALUATIONS``, see the module docstring)."""
    if evaluation == "central_crop":
        return to_unit_range_big_vision(
            central_crop(resize_small(images, resize_size), image_size))
    return to_unit_range(resize(images, image_size))


def augment(images, image_size, augmentation, resize_size, flip, keys, randaugment=None):
    """The random training crop (``augmentation``), flip and (``randaugment``, ``(num_layers,
    magnitude)``) RandAugment of a uint8 batch (N, H, W, C), each image's drawn from its key
    (``keys``, one per image): float32 in 0..255."""
    if augmentation == "inception_crop":
        seeds = (uniform(keys, _WINDOW) * 2.0 ** 53).astype(np.uint64)
        images = np.stack([inception_crop(image, image_size, np.random.default_rng(int(seed)))
                           for image, seed in zip(images, seeds)])
    elif augmentation == "resize_crop":
        images = random_crop(resize(images, resize_size), image_size, keys)
    elif augmentation == "pad_crop":
        images = pad_random_crop(images, resize_size, image_size, keys)
    else:
        images = resize(images, image_size)
    images = random_flip(images, keys) if flip else images
    if randaugment is not None and randaugment[0] > 0:
        layers, magnitude, *pixel_scale = randaugment
        images = distort(to_uint8(images), layers, magnitude, keys, *pixel_scale)
    return images


def preprocess(images, *, image_size, training, augmentation="inception_crop", resize_size=None,
               flip=True, channels=None, evaluation="resize", randaugment=None, rng=None,
               keys=None):
    """uint8 images (N, H, W, C) or one (H, W[, C]) -> float32 in [-1, 1] at ``image_size``.

    Args:
        image_size: output side (the crop size).
        training: random augmentation when True, the ``evaluation`` pipeline when False.
        augmentation: ``"inception_crop"``, ``"resize_crop"`` (resize to ``resize_size`` then a
            random crop), ``"pad_crop"`` (zero-pad to ``resize_size`` then a random crop) or
            ``"resize"`` (no crop).
        resize_size: side before the random crop, or (``evaluation="central_crop"``) the short
            side before the centre crop; None uses ``image_size * 8 / 7`` (32 for 28, 256 for
            224; the AugReg transfers use 448 for 384).
        flip: random horizontal flip when training.
        channels: convert to this many channels (1 or 3); None keeps the image's.
        evaluation: ``"resize"`` (vit_jax: bilinear resize to ``image_size``) or
            ``"central_crop"`` (big_vision / AugReg: short side to ``resize_size``, centre crop).
        randaugment: None, or ``(num_layers, magnitude[, pixel_scale])``: big_vision's
            RandAugment after the crop and the flip, on the crop cast to uint8 (``to_uint8``),
            when training; ``pixel_scale`` (``randaugment.parameter``) fits its shifts and
            Cutout to images other than 224 pixels.
        rng: a ``numpy.random.Generator`` (default: a fresh unseeded one) that draws the keys.
        keys: instead of ``rng``, the key of every image's random draws (``example_keys``).

    Example:
    >>> image = np.full((28, 28, 1), 255, np.uint8)
    >>> out = preprocess(image, image_size=32, training=False, channels=3)
    >>> out.shape, float(out.min())
    ((32, 32, 3), 1.0)
    >>> preprocess(np.zeros((300, 451, 3), np.uint8), image_size=384, resize_size=448,
    ...            training=False, evaluation="central_crop").shape
    (384, 384, 3)
    """
    resize_size = check_augmentation(augmentation, image_size, resize_size, evaluation)
    randaugment = check_randaugment(randaugment)
    images = np.asarray(images)
    single = images.ndim <= 3
    if images.ndim == 2:
        images = images[..., None]
    if single:
        images = images[None]
    if training:
        if keys is None:
            keys = generator_keys(np.random.default_rng() if rng is None else rng, len(images))
        images = to_unit_range(augment(images, image_size, augmentation, resize_size, flip, keys,
                                       randaugment))
    else:
        images = evaluation_preprocess(images, image_size, evaluation, resize_size)
    images = convert_channels(images, channels)
    return images[0] if single else images


def mixup(images, labels, alpha, rng=None):
    """BiT mixup of a batch: ``lam * x + (1 - lam) * reversed(x)``, one ``lam ~ Beta(a, a)``.

    ``labels`` are one-hot (or already soft) and are mixed the same way.

    Example:
    >>> x = np.stack([np.zeros((2, 2, 1)), np.ones((2, 2, 1))]).astype("float32")
    >>> mx, my = mixup(x, np.eye(2, dtype="float32"), alpha=0.1)
    >>> bool(np.allclose(mx[:, 0, 0, 0], my[:, 1]))
    True
    """
    if alpha <= 0:
        return images, labels
    lam = np.float32((np.random.default_rng() if rng is None else rng).beta(alpha, alpha))
    return lam * images + (1 - lam) * images[::-1], lam * labels + (1 - lam) * labels[::-1]


def mixup_share(p, rng):
    """big_vision's mixup weight: its Dirichlet([p, p]) draw sorted in decreasing order, i.e.
    ``max(lam, 1 - lam)`` for ``lam ~ Beta(p, p)`` (so each image keeps the larger share), float32.

    Example:
    >>> float(mixup_share(0.5, np.random.default_rng(0))) >= 0.5
    True
    """
    lam = rng.beta(p, p)
    return np.float32(max(lam, 1.0 - lam))


def mixup_big_vision(images, labels, p, rng=None):
    """big_vision's mixup (AugReg's ``p``) of a batch: ``a * x + (1 - a) * roll(x, 1)``, one
    ``a = mixup_share(p)`` >= 0.5; unlike BiT's ``mixup`` each image keeps the larger share and
    is mixed with the image before it (the first with the last), not with the reversed batch.

    Example:
    >>> x = np.arange(3, dtype="float32").reshape(3, 1, 1, 1)
    >>> mx, my = mixup_big_vision(x, np.eye(3, dtype="float32"), p=0.5)
    >>> bool(np.allclose(mx.ravel(), my @ np.arange(3)))
    True
    """
    if p <= 0:
        return images, labels
    share = mixup_share(p, np.random.default_rng() if rng is None else rng)
    return (share * images + (1 - share) * np.roll(images, 1, axis=0),
            share * labels + (1 - share) * np.roll(labels, 1, axis=0))
