"""The official input preprocessing on numpy arrays (no TensorFlow; feeds every Keras backend).

- train (vit_jax / big_vision): an Inception crop (a random window covering 5%-100% of the
  image, aspect ratio 3/4-4/3, as ``tf.image.sample_distorted_bounding_box`` draws it) resized to
  the crop size, or a square resize followed by a random crop (BiT, big_vision
  ``resize|random_crop``); then a random horizontal flip.
- eval: a plain bilinear resize to the crop size (no centre crop).
- values: ``(x - 127.5) / 127.5``, i.e. [-1, 1].
- BiT's resolution rule: images smaller than 96x96 are resized to 160 and cropped to 128, larger
  ones to 512 / 480.
- mixup (BiT): one Beta(alpha, alpha) sample per batch, every image mixed with the reversed batch.

For tiny images (Fashion-MNIST's 28x28) a random translation suits better than a crop that also
rescales: ``pad_crop`` zero-pads to ``resize_size`` and crops back (the classic CIFAR
augmentation); it is not part of the official recipes.

The resize is TensorFlow's ``tf.image.resize(method="bilinear", antialias=False)`` (half-pixel
centres), so these arrays equal the tf.data pipeline's (``keras_vit.data.tfdata``) to float
rounding. Functions take one image (H, W, C) or a batch (N, H, W, C) and a
``numpy.random.Generator`` for the random parts.
"""

import numpy as np

CROPS = ("inception_crop", "resize_crop", "pad_crop")
TRAIN_AUGMENTATIONS = (*CROPS, "resize")
PER_IMAGE = ("inception_crop",)  # crops of a size drawn per image: no batch form


def to_unit_range(images):
    """Map 0..255 pixel values to [-1, 1] as float32.

    Example:
    >>> to_unit_range(np.array([0, 255], np.uint8)).tolist()
    [-1.0, 1.0]
    """
    return (np.asarray(images, np.float32) - np.float32(127.5)) / np.float32(127.5)


def bit_resolution(height, width):
    """BiT's rule (bit_hyperrule): ``(resize, crop)`` is (160, 128) below 96x96, else (512, 480).

    Example:
    >>> bit_resolution(32, 32), bit_resolution(500, 375)
    ((160, 128), (512, 480))
    """
    return (160, 128) if height * width < 96 * 96 else (512, 480)


def _axis_weights(size_in, size_out):
    """Source indices and weights of a half-pixel-centre bilinear resize along one axis."""
    centre = (np.arange(size_out, dtype=np.float64) + 0.5) * (size_in / size_out) - 0.5
    centre = np.clip(centre, 0.0, size_in - 1)
    low = np.floor(centre).astype(np.int64)
    high = np.minimum(low + 1, size_in - 1)
    return low, high, (centre - low).astype(np.float32)


def resize(images, size):
    """Bilinear resize of (H, W, C) or (N, H, W, C) to ``size`` x ``size``, float32.

    Example:
    >>> resize(np.arange(4, dtype=np.float32).reshape(2, 2, 1), 4)[..., 0].tolist()[0]
    [0.0, 0.25, 0.75, 1.0]
    """
    images = np.asarray(images, np.float32)
    height, width = images.shape[-3], images.shape[-2]
    if (height, width) == (size, size):
        return images
    low, high, weight = _axis_weights(height, size)
    rows = images[..., low, :, :] * (1 - weight)[:, None, None] \
        + images[..., high, :, :] * weight[:, None, None]
    low, high, weight = _axis_weights(width, size)
    return rows[..., low, :] * (1 - weight)[:, None] + rows[..., high, :] * weight[:, None]


def random_crop(images, size, rng):
    """A random ``size`` x ``size`` window of each image of a batch (N, H, W, C)."""
    count, height, width = images.shape[:3]
    top = rng.integers(0, height - size + 1, count)
    left = rng.integers(0, width - size + 1, count)
    rows = (top[:, None] + np.arange(size))[:, :, None]  # (N, size, 1)
    columns = (left[:, None] + np.arange(size))[:, None, :]  # (N, 1, size)
    return images[np.arange(count)[:, None, None], rows, columns]


def pad_random_crop(images, padded_size, size, rng):
    """Resize to ``size`` if needed, zero-pad (centred) to ``padded_size``, random-crop ``size``."""
    images = resize(images, size)
    before = (padded_size - size) // 2
    after = padded_size - size - before
    padded = np.pad(images, ((0, 0), (before, after), (before, after), (0, 0)))
    return random_crop(padded, size, rng)


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


def random_flip(images, rng):
    """Flip each image of a batch left-right with probability 1/2."""
    flip = rng.random(len(images)) < 0.5
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


def check_augmentation(augmentation, image_size, resize_size):
    """The ``resize_size`` a crop uses (default ``image_size * 8 / 7``), or a ValueError."""
    if augmentation not in TRAIN_AUGMENTATIONS:
        raise ValueError(
            f"Unknown augmentation {augmentation!r}; use one of {TRAIN_AUGMENTATIONS}."
        )
    if resize_size is None:
        resize_size = int(round(image_size * 8 / 7))
    if augmentation in ("resize_crop", "pad_crop") and resize_size < image_size:
        raise ValueError(
            f"resize_size ({resize_size}) must be at least the crop size ({image_size})."
        )
    return resize_size


def preprocess(images, *, image_size, training, augmentation="inception_crop", resize_size=None,
               flip=True, channels=None, rng=None):
    """uint8 images (N, H, W, C) or one (H, W[, C]) -> float32 in [-1, 1] at ``image_size``.

    Args:
        image_size: output side (the crop size).
        training: random augmentation when True, a plain resize when False.
        augmentation: ``"inception_crop"``, ``"resize_crop"`` (resize to ``resize_size`` then a
            random crop), ``"pad_crop"`` (zero-pad to ``resize_size`` then a random crop) or
            ``"resize"`` (no crop).
        resize_size: side before the random crop; None uses ``image_size * 8 / 7`` (32 for 28).
        flip: random horizontal flip when training.
        channels: convert to this many channels (1 or 3); None keeps the image's.
        rng: a ``numpy.random.Generator`` (default: a fresh unseeded one).

    Example:
    >>> image = np.full((28, 28, 1), 255, np.uint8)
    >>> out = preprocess(image, image_size=32, training=False, channels=3)
    >>> out.shape, float(out.min())
    ((32, 32, 3), 1.0)
    """
    resize_size = check_augmentation(augmentation, image_size, resize_size)
    rng = np.random.default_rng() if rng is None else rng
    images = np.asarray(images)
    single = images.ndim <= 3
    if images.ndim == 2:
        images = images[..., None]
    if single:
        images = images[None]
    if training and augmentation == "inception_crop":
        images = np.stack([inception_crop(image, image_size, rng) for image in images])
    elif training and augmentation == "resize_crop":
        images = random_crop(resize(images, resize_size), image_size, rng)
    elif training and augmentation == "pad_crop":
        images = pad_random_crop(images, resize_size, image_size, rng)
    else:
        images = resize(images, image_size)
    if training and flip:
        images = random_flip(images, rng)
    images = convert_channels(to_unit_range(images), channels)
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
