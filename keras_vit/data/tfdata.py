"""The official input preprocessing (tf.data ops; the pipelines feed every Keras backend).

- train (vit_jax / big_vision): an Inception crop (``tf.image.sample_distorted_bounding_box``,
  area 5%-100%, default aspect ratios) resized to the crop size, or a square resize followed by a
  random crop (BiT, big_vision ``resize|random_crop``); then a random horizontal flip.
- eval: a plain bilinear resize to the crop size (no centre crop).
- values: ``(x - 127.5) / 127.5``, i.e. [-1, 1].
- BiT's resolution rule: images smaller than 96x96 are resized to 160 and cropped to 128, larger
  ones to 512 / 480.
- mixup (BiT): one Beta(alpha, alpha) sample per batch, every image mixed with the reversed batch.

For tiny images (Fashion-MNIST's 28x28) a random translation suits better than a crop that also
rescales: ``pad_crop`` zero-pads to ``resize_size`` and crops back (the classic CIFAR
augmentation); it is not part of the official recipes.
"""

import tensorflow as tf

CROPS = ("inception_crop", "resize_crop", "pad_crop")
TRAIN_AUGMENTATIONS = (*CROPS, "resize")
PER_IMAGE = ("inception_crop",)  # crops of a size drawn per image: no batch form


def to_unit_range(images):
    """Map 0..255 pixel values to [-1, 1] as float32.

    Example:
    >>> import numpy as np
    >>> to_unit_range(np.array([0, 255], np.uint8)).numpy().tolist()
    [-1.0, 1.0]
    """
    return (tf.cast(images, tf.float32) - 127.5) / 127.5


def bit_resolution(height, width):
    """BiT's rule (bit_hyperrule): ``(resize, crop)`` is (160, 128) below 96x96, else (512, 480).

    Example:
    >>> bit_resolution(32, 32), bit_resolution(500, 375)
    ((160, 128), (512, 480))
    """
    return (160, 128) if height * width < 96 * 96 else (512, 480)


def resize(image, size):
    """Bilinear resize to ``size`` x ``size``, no antialiasing (``tf.image.resize``), float32."""
    return tf.image.resize(image, (size, size), method="bilinear", antialias=False)


def inception_crop(image, size, area_range=(0.05, 1.0), seed=None):
    """A random crop covering ``area_range`` of the image, resized to ``size`` (vit_jax train)."""
    begin, crop_size, _ = tf.image.sample_distorted_bounding_box(
        tf.shape(image),
        bounding_boxes=tf.zeros([1, 0, 4], tf.float32),
        min_object_covered=0.0,
        area_range=area_range,
        use_image_if_no_bounding_boxes=True,
        seed=seed or 0,
    )
    crop = tf.slice(image, begin, crop_size)
    crop.set_shape([None, None, image.shape[-1]])  # the slice loses the static channel count
    return resize(crop, size)


def random_crop(image, size, seed=None):
    """A random ``size`` x ``size`` window of one (H, W, C) image, or of each image of a batch
    (N, H, W, C) at its own offset."""
    if image.shape.rank == 3:
        return tf.image.random_crop(image, (size, size, tf.shape(image)[-1]), seed=seed)
    shape = tf.shape(image)
    offsets = [tf.random.uniform((shape[0], 1), 0, shape[axis] - size + 1, tf.int32, seed=seed)
               for axis in (1, 2)]
    rows, columns = (offset + tf.range(size)[None] for offset in offsets)
    image = tf.gather(image, rows, axis=1, batch_dims=1)  # (N, size, W, C)
    return tf.gather(image, columns, axis=2, batch_dims=1)  # (N, size, size, C)


def resize_random_crop(image, resize_size, size, seed=None):
    """A square resize to ``resize_size`` then a random ``size`` x ``size`` crop (BiT train)."""
    return random_crop(resize(image, resize_size), size, seed=seed)


def pad_random_crop(image, padded_size, size, seed=None):
    """Resize to ``size`` if needed, zero-pad (centred) to ``padded_size``, random-crop ``size``."""
    if image.shape[-3] != size or image.shape[-2] != size:
        image = resize(image, size)
    offset = (padded_size - size) // 2
    image = tf.image.pad_to_bounding_box(image, offset, offset, padded_size, padded_size)
    return random_crop(image, size, seed=seed)


def convert_channels(image, channels):
    """Grey <-> RGB so the images match the model's input channels (1 or 3)."""
    have = image.shape[-1]
    if channels is None or have == channels:
        return image
    if have == 1 and channels == 3:
        return tf.image.grayscale_to_rgb(image)
    if have == 3 and channels == 1:
        return tf.image.rgb_to_grayscale(image)
    raise ValueError(f"Cannot convert images with {have} channels to {channels} channels.")


def per_image(training, augmentation):
    """Whether ``preprocess`` takes only one image at a time (the Inception crop, whose size is
    drawn per image); otherwise it also takes a whole batch (N, H, W, C) of equal-sized images,
    which the pipelines use because it is cheaper."""
    return bool(training) and augmentation in PER_IMAGE


def preprocess(image, *, image_size, training, augmentation="inception_crop", resize_size=None,
               flip=True, channels=None, seed=None):
    """One uint8 (H, W, C) image -> float32 (image_size, image_size, channels) in [-1, 1].

    Except for the Inception crop, a batch (N, H, W, C) works too, each image cropped and flipped
    independently.

    Args:
        image_size: output side (the crop size).
        training: random augmentation when True, a plain resize when False.
        augmentation: ``"inception_crop"``, ``"resize_crop"`` (resize to ``resize_size`` then a
            random crop), ``"pad_crop"`` (zero-pad to ``resize_size`` then a random crop) or
            ``"resize"`` (no crop).
        resize_size: side before the random crop; None uses ``image_size * 8 / 7`` (32 for 28).
        flip: random horizontal flip when training.
        channels: convert to this many channels (1 or 3); None keeps the image's.

    Example:
    >>> import numpy as np
    >>> image = np.full((28, 28, 1), 255, np.uint8)
    >>> out = preprocess(image, image_size=32, training=False, channels=3)
    >>> out.shape, float(out.numpy().min())
    (TensorShape([32, 32, 3]), 1.0)
    """
    if augmentation not in TRAIN_AUGMENTATIONS:
        raise ValueError(
            f"Unknown augmentation {augmentation!r}; use one of {TRAIN_AUGMENTATIONS}."
        )
    image = tf.convert_to_tensor(image)
    if image.shape.rank == 2:
        image = image[..., None]
    if image.shape.rank == 4 and per_image(training, augmentation):
        raise ValueError(f"The {augmentation!r} crop takes one (H, W, C) image at a time, got a "
                         f"batch of shape {image.shape}; map preprocess over the examples.")
    if training and augmentation == "inception_crop":
        image = inception_crop(image, image_size, seed=seed)
    elif training and augmentation in ("resize_crop", "pad_crop"):
        if resize_size is None:
            resize_size = int(round(image_size * 8 / 7))
        if resize_size < image_size:
            raise ValueError(
                f"resize_size ({resize_size}) must be at least the crop size ({image_size})."
            )
        crop = resize_random_crop if augmentation == "resize_crop" else pad_random_crop
        image = crop(image, resize_size, image_size, seed=seed)
    elif image.shape[-3] != image_size or image.shape[-2] != image_size:
        image = resize(image, image_size)
    if training and flip:
        image = tf.image.random_flip_left_right(image, seed=seed)
    return convert_channels(to_unit_range(image), channels)


def mixup(images, labels, alpha, seed=None):
    """BiT mixup of a batch: ``lam * x + (1 - lam) * reversed(x)``, one ``lam ~ Beta(a, a)``.

    ``labels`` are one-hot (or already soft) and are mixed the same way.

    Example:
    >>> import numpy as np
    >>> x = np.stack([np.zeros((2, 2, 1)), np.ones((2, 2, 1))]).astype("float32")
    >>> y = np.eye(2, dtype="float32")
    >>> mx, my = mixup(x, y, alpha=0.1)
    >>> bool(np.allclose(mx.numpy()[:, 0, 0, 0], my.numpy()[:, 1]))
    True
    """
    if alpha <= 0:
        return images, labels
    g1 = tf.random.gamma([], alpha, seed=seed)
    g2 = tf.random.gamma([], alpha, seed=None if seed is None else seed + 1)
    lam = tf.math.divide_no_nan(g1, g1 + g2)  # both draws can underflow to 0 for small alpha
    images = lam * images + (1.0 - lam) * tf.reverse(images, axis=[0])
    labels = lam * labels + (1.0 - lam) * tf.reverse(labels, axis=[0])
    return images, labels
