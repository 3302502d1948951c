"""Named datasets and the tf.data input pipeline (usable by every Keras backend).

``load("cifar10", "train", image_size=384, batch_size=512)`` gives batches of float32 images in
[-1, 1] with the official train or eval preprocessing and one-hot float32 labels (soft labels
with mixup). Keras' ``fit`` takes such a ``tf.data.Dataset`` under jax, tensorflow and torch.

The generic split names ``"train"`` and ``"test"`` map to each dataset's own splits (ImageNet's
test split is ``validation``); any other split string (``"train[:98%]"``) goes to tfds unchanged.
"""

import dataclasses

import numpy as np
import tensorflow as tf

from keras_vit.data import offline
from keras_vit.data.preprocessing import bit_resolution, mixup, per_image, preprocess
from keras_vit.distribution import check_batch_size


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
    """What the pipeline needs to know about a named dataset."""

    name: str
    num_classes: int
    splits: dict  # generic split name ("train", "test") -> the source's split
    image_size: int  # typical side, used by the BiT resolution rule
    channels: int
    source: str  # "offline" or "tfds"
    tfds_name: str = ""


def _tfds(name, num_classes, image_size, train="train", test="test", tfds_name=None):
    splits = {"test": test} if train is None else {"train": train, "test": test}
    return DatasetInfo(name, num_classes, splits, image_size, 3, "tfds", tfds_name or name)


DATASETS = {
    "fashion_mnist": DatasetInfo("fashion_mnist", 10, {"train": "train", "test": "test"}, 28, 1,
                                 "offline"),
    "digits": DatasetInfo("digits", 10, {"train": "train", "test": "test"}, 8, 1, "offline"),
    "cifar10": _tfds("cifar10", 10, 32),
    "cifar100": _tfds("cifar100", 100, 32),
    "oxford_iiit_pet": _tfds("oxford_iiit_pet", 37, 500),
    "oxford_flowers102": _tfds("oxford_flowers102", 102, 500),
    "imagenet2012": _tfds("imagenet2012", 1000, 400, test="validation"),
    "imagenet_v2": _tfds("imagenet_v2", 1000, 400, train=None),
    "imagenette": _tfds("imagenette", 10, 160, test="validation", tfds_name="imagenette/160px-v2"),
    "food101": _tfds("food101", 101, 512, test="validation"),
}


def dataset_info(name):
    """The ``DatasetInfo`` of a dataset name, or a ValueError listing the valid names.

    Example:
    >>> dataset_info("cifar100").num_classes
    100
    """
    if name not in DATASETS:
        raise ValueError(
            f"Unknown dataset {name!r}. Valid datasets: {', '.join(DATASETS)} "
            "(fashion_mnist and digits work offline; the others come from tensorflow-datasets)."
        )
    return DATASETS[name]


def _split_name(info, split):
    if split in info.splits:
        return info.splits[split]
    if split == "train":
        raise ValueError(f"{info.name} has no training split (only {sorted(info.splits)}); "
                         "it is an evaluation-only dataset.")
    if info.source == "offline":
        raise ValueError(f"Unknown split {split!r} for {info.name}; use 'train' or 'test'.")
    return split


def load_examples(name, split="train", *, data_dir=None, max_examples=None, shuffle_files=False):
    """Raw ``(uint8 image (H, W, C), int64 label)`` examples of a named dataset (tf.data).

    Args:
        name: a key of ``DATASETS``.
        split: ``"train"``, ``"test"`` or (tfds datasets) any tfds split string.
        data_dir: Fashion-MNIST folder, or the tfds data directory.
        max_examples: keep only the first examples.
        shuffle_files: shuffle the tfds files (training).
    """
    info = dataset_info(name)
    real_split = _split_name(info, split)
    if info.source == "offline":
        if name == "fashion_mnist":
            count = {"train": (max_examples, 0), "test": (0, max_examples)}[real_split]
            loaded = offline.load_fashion_mnist(data_dir, num_train=count[0], num_test=count[1])
        else:
            loaded = offline.load_digits()
        images, labels = loaded[0] if real_split == "train" else loaded[1]
        return from_arrays(images[:max_examples], labels[:max_examples])
    import tensorflow_datasets as tfds

    dataset = tfds.load(info.tfds_name, split=real_split, as_supervised=True, data_dir=data_dir,
                        shuffle_files=shuffle_files)
    channels = info.channels
    dataset = dataset.map(lambda x, y: (tf.ensure_shape(x, [None, None, channels]), y))
    return dataset if max_examples is None else dataset.take(max_examples)


def from_arrays(images, labels):
    """Examples from numpy arrays: images (N, H, W[, C]) uint8 in 0..255, labels (N,) ints."""
    images, labels = np.asarray(images), np.asarray(labels)
    if images.ndim == 3:
        images = images[..., None]
    if images.ndim != 4 or len(images) != len(labels):
        raise ValueError(
            f"Expected images (N, H, W[, C]) and labels (N,), got {images.shape} and "
            f"{labels.shape}."
        )
    return tf.data.Dataset.from_tensor_slices((images, labels.astype(np.int64)))


def take_per_class(examples, examples_per_class, num_classes, *, seed=0, buffer_size=10_000):
    """The first ``examples_per_class`` examples of every class after a seeded shuffle (k-shot).

    Example:
    >>> ds = from_arrays(np.zeros((30, 2, 2, 1), np.uint8), np.arange(30) % 3)
    >>> sorted(int(y) for _, y in take_per_class(ds, 2, 3))
    [0, 0, 1, 1, 2, 2]
    """
    k, total = int(examples_per_class), int(examples_per_class) * int(num_classes)
    if k < 1:
        raise ValueError(
            f"examples_per_class must be a positive integer, got {examples_per_class!r}.")

    def count(counts, example):
        label = example[1]
        keep = counts[label] < k
        counts = tf.tensor_scatter_nd_add(counts, [[label]], [tf.cast(keep, tf.int64)])
        return counts, (example, keep)

    shuffled = examples.shuffle(buffer_size, seed=seed, reshuffle_each_iteration=False)
    kept = shuffled.scan(tf.zeros([num_classes], tf.int64), count).filter(lambda e, keep: keep)
    return kept.map(lambda example, keep: example).take(total)


def pipeline(examples, *, batch_size, image_size, num_classes, training, augmentation="resize_crop",
             resize_size=None, flip=True, channels=None, mixup_alpha=0.0, shuffle_buffer=10_000,
             repeat=False, cache=False, seed=0, replicas=None):
    """Batches of preprocessed images and one-hot labels from raw examples.

    Args:
        examples: a tf.data.Dataset of (uint8 image, int label), e.g. from ``load_examples``.
        batch_size: global batch size; must divide by the replicas (``check_batch_size``).
        image_size: output side (crop size).
        num_classes: size of the one-hot labels.
        training: shuffle, augment (``augmentation``, ``flip``), drop the last partial batch,
            optional ``mixup_alpha``. Otherwise: resize only, keep every example, in order.
        augmentation, resize_size, flip, channels: see ``keras_vit.data.preprocessing.preprocess``.
        mixup_alpha: BiT mixup when > 0 (training only).
        repeat: repeat forever (step-based training).
        cache: cache the raw examples in memory (small datasets).
        seed: shuffle / augmentation seed.
        replicas: number of replicas for the batch-size check; None asks the current strategy.

    Example:
    >>> ds = from_arrays(np.zeros((10, 28, 28, 1), np.uint8), np.arange(10))
    >>> x, y = next(iter(pipeline(ds, batch_size=4, image_size=28, num_classes=10,
    ...                           training=True)))
    >>> x.shape, y.shape
    (TensorShape([4, 28, 28, 1]), TensorShape([4, 10]))
    """
    check_batch_size(batch_size, replicas)
    if cache:
        examples = examples.cache()
    if training:
        examples = examples.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        examples = examples.repeat()

    def prepare(image, label):
        image = preprocess(image, image_size=image_size, training=training,
                           augmentation=augmentation, resize_size=resize_size, flip=flip,
                           channels=channels)
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
    return dataset.prefetch(tf.data.AUTOTUNE)


def resolution(name, image_size=None):
    """``(image_size, resize_size)`` for a dataset: the given size, else its own size for the
    offline datasets and BiT's rule (``bit_resolution``) for the tfds ones.

    Example:
    >>> resolution("cifar10"), resolution("fashion_mnist"), resolution("cifar10", 384)
    ((128, 160), (28, None), (384, None))
    """
    info = dataset_info(name)
    if image_size is not None:
        return int(image_size), None
    if info.source == "offline":
        return info.image_size, None
    resize_size, crop = bit_resolution(info.image_size, info.image_size)
    return crop, resize_size


def load(name, split="train", *, batch_size, image_size=None, training=None, data_dir=None,
         max_examples=None, examples_per_class=None, seed=0, **pipeline_args):
    """A named dataset as batches ready for ``model.fit`` / ``evaluate``.

    Args:
        name: ``fashion_mnist``, ``digits`` (offline) or a tfds dataset of ``DATASETS``.
        split: ``"train"``, ``"test"`` or a tfds split string.
        batch_size: global batch size.
        image_size: model resolution; None: the dataset's own side (offline) or BiT's rule (tfds).
        training: augmentation and shuffling; defaults to ``split == "train"``.
        data_dir: Fashion-MNIST folder or tfds data directory.
        max_examples: use only the first examples (quick runs).
        examples_per_class: a seeded k-shot subset of the split.
        **pipeline_args: passed to ``pipeline`` (augmentation, mixup_alpha, channels, repeat...).

    Example:
    >>> ds = load("digits", "test", batch_size=8, image_size=16)
    >>> next(iter(ds))[0].shape
    TensorShape([8, 16, 16, 1])
    """
    info = dataset_info(name)
    training = split == "train" if training is None else bool(training)
    image_size, resize_size = resolution(name, image_size)
    pipeline_args.setdefault("resize_size", resize_size)
    examples = load_examples(name, split, data_dir=data_dir, max_examples=max_examples,
                             shuffle_files=training)
    if examples_per_class is not None:
        examples = take_per_class(examples, examples_per_class, info.num_classes, seed=seed)
        pipeline_args.setdefault("cache", True)
    return pipeline(examples, batch_size=batch_size, image_size=image_size,
                    num_classes=info.num_classes, training=training, seed=seed, **pipeline_args)


def as_arrays(dataset):
    """Concatenate a (images, one-hot labels) dataset into numpy ``(images, int labels)``.

    Example:
    >>> x, y = as_arrays(load("digits", "test", batch_size=512, image_size=8))
    >>> x.shape, y.shape, bool(x.min() >= -1 and x.max() <= 1)
    ((899, 8, 8, 1), (899,), True)
    """
    images, labels = [], []
    for x, y in dataset:
        images.append(np.asarray(x))
        labels.append(np.argmax(np.asarray(y), axis=-1))
    return np.concatenate(images), np.concatenate(labels)
