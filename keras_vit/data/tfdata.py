"""The tf.data path, for tensorflow-datasets: loading, the official preprocessing as TensorFlow ops,
batching. Imported only when a tfds dataset (or a ``tf.data.Dataset``) is used; in-memory data
goes through ``keras_vit.data.arrays`` and needs no TensorFlow.

The preprocessing is that of ``keras_vit.data.preprocessing`` (see there), written with
``tf.image`` so that it runs inside ``Dataset.map``; the Inception crop is
``tf.image.sample_distorted_bounding_box`` itself, and the two evaluation pipelines are the ops
of vit_jax's ``input_pipeline`` and big_vision's ``resize_small|central_crop|value_range``.
RandAugment is ``keras_vit.data.randaugment`` (numpy) through ``tf.numpy_function``, each image
with a fresh unseeded key, as the rest of this pipeline's augmentation is unseeded.
"""

import numpy as np

from keras_vit import _optional, distribution
from keras_vit.checks import positive_int
from keras_vit.data.preprocessing import (
    check_augmentation,
    check_mixup,
    check_randaugment,
    generator_keys,
    per_image,
)
from keras_vit.data.randaugment import randaugment as distort

# Missing e.g. on a Colab TPU runtime, which has no TensorFlow.
tf = _optional.need("tensorflow", "The tf.data path (the tensorflow-datasets datasets; "
                    "Fashion-MNIST, digits and in-memory arrays need no TensorFlow)", extra="tfds")


def to_unit_range(images):
    """Map 0..255 pixel values to [-1, 1] as float32.

    Example:
    >>> import numpy as np
    >>> to_unit_range(np.array([0, 255], np.uint8)).numpy().tolist()
    [-1.0, 1.0]
    """
    return (tf.cast(images, tf.float32) - 127.5) / 127.5


def resize(image, size):
    """Bilinear resize to ``size`` x ``size``, no antialiasing (``tf.image.resize``), float32."""
    return tf.image.resize(image, (size, size), method="bilinear", antialias=False)


def to_unit_range_big_vision(images):
    """big_vision's ``value_range(-1, 1)``: ``x / 255 * 2 - 1`` in float32."""
    return tf.cast(images, tf.float32) / 255.0 * 2.0 - 1.0


def resize_small(image, size):
    """big_vision's ``resize_small(size)`` of (H, W, C) or (N, H, W, C): the short side to
    ``size`` with the "area" method, clipped and cast back to the input type (uint8 truncates)."""
    shape = tf.shape(image)[-3:-1]
    factor = tf.cast(size, tf.float32) / tf.cast(tf.reduce_min(shape), tf.float32)
    new_shape = tf.cast(tf.round(tf.cast(shape, tf.float32) * factor), tf.int32)
    resized = tf.image.resize(image, new_shape, method="area")
    if not image.dtype.is_integer:
        return resized
    return tf.cast(tf.clip_by_value(resized, image.dtype.min, image.dtype.max), image.dtype)


def central_crop(image, size):
    """The centre ``size`` x ``size`` window (offsets rounded down), as big_vision's."""
    shape = tf.shape(image)
    top, left = (shape[-3] - size) // 2, (shape[-2] - size) // 2
    return tf.image.crop_to_bounding_box(image, top, left, size, size)


def evaluation_preprocess(image, image_size, evaluation, resize_size):
    """uint8 image(s) -> float32 in [-1, 1] by one of the official evaluation pipelines
    (``keras_vit.data.preprocessing.EVALUATIONS``)."""
    if evaluation == "central_crop":
        return to_unit_range_big_vision(central_crop(resize_small(image, resize_size), image_size))
    if image.shape[-3] != image_size or image.shape[-2] != image_size:
        image = resize(image, image_size)
    return to_unit_range(image)


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


def random_augment(image, randaugment):
    """big_vision's RandAugment (``randaugment``: ``(num_layers, magnitude[, pixel_scale])``)
    of a float32 image (H, W, C) or batch (N, H, W, C) in 0..255, cast to uint8 first as
    big_vision's resize does (clipped, truncated); each image draws a fresh key. uint8 out.

    Example:
    >>> import numpy as np
    >>> out = random_augment(tf.fill([2, 8, 8, 3], 100.7), (2, 10))
    >>> out.dtype.name, out.shape.as_list()
    ('uint8', [2, 8, 8, 3])
    """
    image = tf.cast(tf.clip_by_value(image, 0.0, 255.0), tf.uint8)

    def apply(images):
        batch = images if images.ndim == 4 else images[None]
        keys = generator_keys(np.random.default_rng(), len(batch))
        layers, magnitude, *pixel_scale = randaugment
        out = distort(batch, layers, magnitude, keys, *pixel_scale)
        return out if images.ndim == 4 else out[0]

    out = tf.numpy_function(apply, [image], tf.uint8, stateful=True)
    out.set_shape(image.shape)
    return out


def augment(image, image_size, augmentation, resize_size, flip, seed, randaugment=None):
    """The random training crop (``augmentation``) and flip, then (``randaugment``) RandAugment
    on the crop cast to uint8."""
    if augmentation == "inception_crop":
        image = inception_crop(image, image_size, seed=seed)
    elif augmentation in ("resize_crop", "pad_crop"):
        crop = resize_random_crop if augmentation == "resize_crop" else pad_random_crop
        image = crop(image, resize_size, image_size, seed=seed)
    elif image.shape[-3] != image_size or image.shape[-2] != image_size:
        image = resize(image, image_size)
    image = tf.image.random_flip_left_right(image, seed=seed) if flip else image
    if randaugment is not None and randaugment[0] > 0:
        image = random_augment(image, randaugment)
    return image


def preprocess(image, *, image_size, training, augmentation="inception_crop", resize_size=None,
               flip=True, channels=None, evaluation="resize", randaugment=None, seed=None):
    """One uint8 (H, W, C) image -> float32 (image_size, image_size, channels) in [-1, 1].

    Except for the Inception crop, a batch (N, H, W, C) works too, each image cropped and flipped
    independently.

    Args:
        image_size: output side (the crop size).
        training: random augmentation when True, the ``evaluation`` pipeline when False.
        augmentation: ``"inception_crop"``, ``"resize_crop"`` (resize to ``resize_size`` then a
            random crop), ``"pad_crop"`` (zero-pad to ``resize_size`` then a random crop) or
            ``"resize"`` (no crop).
        resize_size: side before the random crop, or (``evaluation="central_crop"``) the short
            side before the centre crop; None uses ``image_size * 8 / 7`` (32 for 28).
        flip: random horizontal flip when training.
        channels: convert to this many channels (1 or 3); None keeps the image's.
        evaluation: ``"resize"`` (vit_jax) or ``"central_crop"`` (big_vision / AugReg), see
            ``keras_vit.data.preprocessing.preprocess``.
        randaugment: None, or ``(num_layers, magnitude[, pixel_scale])``: big_vision's
            RandAugment after the crop and the flip, when training (``random_augment``).

    Example:
    >>> import numpy as np
    >>> image = np.full((28, 28, 1), 255, np.uint8)
    >>> out = preprocess(image, image_size=32, training=False, channels=3)
    >>> out.shape, float(out.numpy().min())
    (TensorShape([32, 32, 3]), 1.0)
    """
    resize_size = check_augmentation(augmentation, image_size, resize_size, evaluation)
    randaugment = check_randaugment(randaugment)
    image = tf.convert_to_tensor(image)
    if image.shape.rank == 2:
        image = image[..., None]
    if image.shape.rank == 4 and per_image(training, augmentation):
        raise ValueError(f"The {augmentation!r} crop takes one (H, W, C) image at a time, got a "
                         f"batch of shape {image.shape}; map preprocess over the examples.")
    if training:
        image = to_unit_range(augment(image, image_size, augmentation, resize_size, flip, seed,
                                      randaugment))
    else:
        image = evaluation_preprocess(image, image_size, evaluation, resize_size)
    return convert_channels(image, channels)


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


def mixup_big_vision(images, labels, p, seed=None):
    """big_vision's mixup (AugReg's ``p``) of a batch: ``a * x + (1 - a) * roll(x, 1)`` with
    one ``a = max(lam, 1 - lam)``, ``lam ~ Beta(p, p)``
    (``keras_vit.data.preprocessing.mixup_big_vision``).

    Example:
    >>> import numpy as np
    >>> x = np.arange(3, dtype="float32").reshape(3, 1, 1, 1)
    >>> mx, my = mixup_big_vision(x, np.eye(3, dtype="float32"), p=0.5)
    >>> bool(np.allclose(mx.numpy().ravel(), my.numpy() @ np.arange(3)))
    True
    """
    if p <= 0:
        return images, labels
    g1 = tf.random.gamma([], p, seed=seed)
    g2 = tf.random.gamma([], p, seed=None if seed is None else seed + 1)
    lam = tf.math.divide_no_nan(g1, g1 + g2)
    share = tf.maximum(lam, 1.0 - lam)
    return (share * images + (1.0 - share) * tf.roll(images, 1, axis=0),
            share * labels + (1.0 - share) * tf.roll(labels, 1, axis=0))


def load_tfds(tfds_name, split, *, channels, data_dir=None, shuffle_files=False):
    """Raw ``(uint8 image, int64 label)`` examples of a tensorflow-datasets dataset."""
    tfds = _optional.need("tensorflow_datasets", f"The dataset {tfds_name!r}")
    dataset = tfds.load(tfds_name, split=split, as_supervised=True, data_dir=data_dir,
                        shuffle_files=shuffle_files)
    return dataset.map(lambda x, y: (tf.ensure_shape(x, [None, None, channels]), y))


def take_per_class(examples, examples_per_class, num_classes, *, seed=0, buffer_size=10_000):
    """The first ``examples_per_class`` examples of every class after a seeded shuffle (k-shot)."""
    k = positive_int("examples_per_class", examples_per_class)
    total = k * int(num_classes)

    def count(counts, example):
        label = example[1]
        keep = counts[label] < k
        counts = tf.tensor_scatter_nd_add(counts, [[label]], [tf.cast(keep, tf.int64)])
        return counts, (example, keep)

    shuffled = examples.shuffle(buffer_size, seed=seed, reshuffle_each_iteration=False)
    kept = shuffled.scan(tf.zeros([num_classes], tf.int64), count).filter(lambda e, keep: keep)
    return kept.map(lambda example, keep: example).take(total)


def pipeline(examples, *, batch_size, image_size, num_classes, training, augmentation="resize_crop",
             resize_size=None, flip=True, channels=None, evaluation="resize", mixup_alpha=0.0,
             shuffle_buffer=10_000, repeat=False, cache=False, seed=0, pad_to=1,
             randaugment=None, mixup_p=0.0):
    """``keras_vit.data.pipeline`` for a ``tf.data.Dataset`` of raw examples (same arguments)."""
    check_mixup(mixup_alpha, mixup_p)
    if cache:
        examples = examples.cache()
    if training:
        examples = examples.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        examples = examples.repeat()

    def prepare(image, label):
        image = preprocess(image, image_size=image_size, training=training,
                           augmentation=augmentation, resize_size=resize_size, flip=flip,
                           channels=channels, evaluation=evaluation, randaugment=randaugment)
        return image, tf.one_hot(label, num_classes, dtype=tf.float32)

    same_size = examples.element_spec[0].shape.is_fully_defined()
    if per_image(training, augmentation) or not same_size:  # per image: map, then batch
        dataset = examples.map(prepare, num_parallel_calls=tf.data.AUTOTUNE,
                               deterministic=not training)
        dataset = dataset.batch(batch_size, drop_remainder=training)
    else:  # equal-sized images: resize / crop / flip / scale whole batches (far fewer ops)
        dataset = examples.batch(batch_size, drop_remainder=training)
        dataset = dataset.map(prepare, num_parallel_calls=tf.data.AUTOTUNE,
                              deterministic=not training)
    if training and mixup_alpha > 0:
        dataset = dataset.map(lambda x, y: mixup(x, y, mixup_alpha))
    if training and mixup_p > 0:
        dataset = dataset.map(lambda x, y: mixup_big_vision(x, y, mixup_p))
    if not training and pad_to > 1:
        dataset = dataset.map(lambda x, y: _pad(x, y, pad_to))
    if distribution.process_count() > 1:
        dataset = dataset.map(_process_block(batch_size))
    return dataset.prefetch(tf.data.AUTOTUNE)


def _process_block(batch_size):
    """This process's rows of every batch, the block ``distribution.process_rows`` names.

    Every process prepares whole batches and keeps its block (as Keras' own sharding of a
    tf.data dataset does). The training pipeline's parallel, unseeded augmentation differs
    between processes, so n processes see other crops than one would; in-memory examples
    (``keras_vit.data.arrays``) are the same on any number of processes.
    """
    count, index = distribution.process_count(), distribution.process_index()
    rows = distribution.process_rows(batch_size)
    block = batch_size // count
    if len(rows) != block or rows[0] != index * block or rows[-1] != rows[0] + block - 1:
        raise ValueError(
            f"This process's rows of a batch of {batch_size} ({len(rows)} from row {rows[0]}) "
            f"are not block {index} of {count}: a tf.data pipeline gives each process a "
            "contiguous block. Lay the devices out process by process (DataParallel over "
            "keras.distribution.list_devices() does), or use in-memory examples.")

    def take(*batch):
        size = tf.shape(batch[0])[0] // count
        return tuple(part[index * size:(index + 1) * size] for part in batch)

    return take


def _pad(images, labels, multiple):
    """Pad a batch to a multiple of ``multiple`` with blank, weight-0 examples."""
    count = tf.shape(images)[0]
    missing = -count % multiple
    weights = tf.pad(tf.ones([count], tf.float32), [[0, missing]])
    images = tf.pad(images, [[0, missing], [0, 0], [0, 0], [0, 0]])
    labels = tf.concat([labels, tf.repeat(labels[-1:], missing, axis=0)], 0)  # finite losses
    return images, labels, weights
