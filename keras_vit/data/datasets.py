"""Named datasets and the input pipeline (usable by every Keras backend).

``load("cifar10", "train", image_size=384, batch_size=512)`` gives batches of float32 images in
[-1, 1] with the official train or eval preprocessing and one-hot float32 labels (soft labels
with mixup), ready for Keras' ``fit`` under jax, tensorflow and torch. In-memory data
(Fashion-MNIST, digits, ``from_arrays``) goes through numpy (``keras_vit.data.arrays``) and needs
no TensorFlow; the tensorflow-datasets datasets go through tf.data (``keras_vit.data.tfdata``).

The generic split names ``"train"`` and ``"test"`` map to each dataset's own splits (ImageNet's
test split is ``validation``); any other split string (``"train[:98%]"``) goes to tfds unchanged.
"""

import dataclasses
import sys

import numpy as np

from keras_vit import distribution
from keras_vit.data import arrays, offline
from keras_vit.data.arrays import Examples, from_arrays
from keras_vit.data.preprocessing import (
    bit_resolution,
    check_augmentation,
    check_mixup,
    check_randaugment,
)
from keras_vit.distribution import check_batch_size, num_replicas


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
    """Raw examples of a named dataset: ``Examples`` (uint8 images (N, H, W, C), int64 labels)
    for the in-memory datasets, a ``tf.data.Dataset`` of such pairs for the tfds ones.

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
        return from_arrays(*loaded[0 if real_split == "train" else 1]).take(max_examples)
    from keras_vit.data import tfdata

    dataset = tfdata.load_tfds(info.tfds_name, real_split, channels=info.channels,
                               data_dir=data_dir, shuffle_files=shuffle_files)
    return dataset if max_examples is None else dataset.take(max_examples)


def take_per_class(examples, examples_per_class, num_classes, *, seed=0):
    """The first ``examples_per_class`` examples of every class after a seeded shuffle (k-shot),
    of ``Examples`` or a ``tf.data.Dataset``.

    Example:
    >>> ds = from_arrays(np.zeros((30, 2, 2, 1), np.uint8), np.arange(30) % 3)
    >>> sorted(take_per_class(ds, 2, 3).labels.tolist())
    [0, 0, 1, 1, 2, 2]
    """
    if isinstance(examples, Examples):
        return arrays.take_per_class(examples, examples_per_class, num_classes, seed=seed)
    tfdata = _tfdata(examples, "take_per_class")
    return tfdata.take_per_class(examples, examples_per_class, num_classes, seed=seed)


def pipeline(examples, *, batch_size, image_size, num_classes, training, augmentation="resize_crop",
             resize_size=None, flip=True, channels=None, evaluation="resize", mixup_alpha=0.0,
             repeat=False, cache=False, seed=0, replicas=None, start_epoch=0, randaugment=None,
             mixup_p=0.0, **tf_options):
    """Batches of preprocessed images and one-hot labels from raw examples.

    ``Examples`` give a ``keras.utils.PyDataset`` of numpy batches (``arrays.Batches``), a
    ``tf.data.Dataset`` gives a ``tf.data.Dataset`` (``tfdata.pipeline``).

    Args:
        examples: raw examples, e.g. from ``load_examples`` or ``from_arrays``.
        batch_size: global batch size; for training it must divide by the replicas
            (``check_batch_size``), for evaluation it is rounded up to a multiple of them.
        image_size: output side (crop size).
        num_classes: size of the one-hot labels.
        training: shuffle, augment (``augmentation``, ``flip``), drop the last partial batch,
            optional ``mixup_alpha``. Otherwise: the ``evaluation`` pipeline only, every
            example kept, in order (vit_jax's own evaluation drops the last partial batch); on
            several replicas the last batch is padded with weight-0 blanks to divide evenly
            (batches are then ``(images, labels, sample_weights)``).
        augmentation, resize_size, flip, channels, evaluation: see
            ``keras_vit.data.preprocessing.preprocess``; ``evaluation="central_crop"`` with
            ``resize_size=448, image_size=384`` is the AugReg (big_vision) evaluation.
        mixup_alpha: BiT mixup when > 0 (training only).
        mixup_p: big_vision's mixup when > 0 (training only, not with ``mixup_alpha``; see
            ``preprocessing.mixup_big_vision``).
        randaugment: None or ``(num_layers, magnitude[, pixel_scale])``: RandAugment (training
            only; see ``preprocessing.preprocess``).
        repeat: repeat forever (step-based training).
        cache: cache the raw examples in memory (tf.data; in-memory examples are in memory).
        seed: shuffle / augmentation seed.
        replicas: number of replicas the batches split over; None asks the current distribution.
        start_epoch: the pass over the examples the first batch belongs to (in-memory examples;
            a tf.data pipeline takes no such start and begins its shuffle afresh):
            a run resumed after ``e`` epochs passes ``e`` to train on the batches it would
            have had without the interruption.
        **tf_options: ``shuffle_buffer`` for a tf.data pipeline.

    Example:
    >>> ds = from_arrays(np.zeros((10, 28, 28, 1), np.uint8), np.arange(10))
    >>> x, y = pipeline(ds, batch_size=4, image_size=28, num_classes=10, training=True)[0]
    >>> x.shape, y.shape
    ((4, 28, 28, 1), (4, 10))
    """
    replicas = num_replicas() if replicas is None else int(replicas)
    options = dict(batch_size=batch_size, image_size=image_size, num_classes=num_classes,
                   training=training, augmentation=augmentation, resize_size=resize_size,
                   flip=flip, channels=channels, evaluation=evaluation, mixup_alpha=mixup_alpha,
                   repeat=repeat, seed=seed, pad_to=replicas, randaugment=randaugment,
                   mixup_p=mixup_p)
    _check_pipeline(replicas=replicas, **options)
    if not training:
        options["batch_size"] = distribution.evaluation_batch_size(batch_size, replicas)
    if isinstance(examples, Examples):
        if tf_options:
            raise TypeError(f"Unexpected options for in-memory examples: {sorted(tf_options)}.")
        return arrays.Batches(examples, start_epoch=start_epoch, **options)
    return _tfdata(examples, "pipeline").pipeline(examples, cache=cache, **options, **tf_options)


def _check_pipeline(*, batch_size, image_size, augmentation="resize_crop", resize_size=None,
                    evaluation="resize", replicas=None, training=True, randaugment=None,
                    mixup_alpha=0.0, mixup_p=0.0, **_):
    """Refuse options ``pipeline`` would refuse (its defaults), before any data is loaded: a
    training batch must split over the replicas; an evaluation batch is rounded up instead."""
    replicas = num_replicas() if replicas is None else int(replicas)
    check_batch_size(batch_size, replicas if training else 1)
    check_augmentation(augmentation, image_size, resize_size, evaluation)
    check_randaugment(randaugment)
    check_mixup(mixup_alpha, mixup_p)


def _tfdata(examples, what):
    """``keras_vit.data.tfdata`` for a ``tf.data.Dataset``; anything else is refused without
    importing TensorFlow (a dataset exists only where TensorFlow is imported)."""
    tf = sys.modules.get("tensorflow")
    if tf is None or not isinstance(examples, tf.data.Dataset):
        raise TypeError(f"{what} takes Examples (from_arrays, load_examples) or a "
                        f"tf.data.Dataset, got {type(examples).__name__}.")
    from keras_vit.data import tfdata

    return tfdata


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
        **pipeline_args: passed to ``pipeline`` (augmentation, evaluation, resize_size,
            mixup_alpha, mixup_p, randaugment, channels, repeat...).

    Example:
    >>> ds = load("digits", "test", batch_size=8, image_size=16)
    >>> ds[0][0].shape
    (8, 16, 16, 1)
    """
    info = dataset_info(name)
    training = split == "train" if training is None else bool(training)
    image_size, resize_size = resolution(name, image_size)
    pipeline_args.setdefault("resize_size", resize_size)
    options = dict(batch_size=batch_size, image_size=image_size, num_classes=info.num_classes,
                   training=training, seed=seed, **pipeline_args)
    _check_pipeline(**options)  # before the data, and TensorFlow for a tfds dataset, is loaded
    examples = load_examples(name, split, data_dir=data_dir, max_examples=max_examples,
                             shuffle_files=training)
    if examples_per_class is not None:
        examples = take_per_class(examples, examples_per_class, info.num_classes, seed=seed)
        options.setdefault("cache", True)
    return pipeline(examples, **options)


def as_arrays(dataset):
    """Concatenate the batches of a pipeline into numpy ``(images, int labels)``, leaving out the
    weight-0 padding of an evaluation pipeline on several replicas.

    Example:
    >>> x, y = as_arrays(load("digits", "test", batch_size=512, image_size=8))
    >>> x.shape, y.shape, bool(x.min() >= -1 and x.max() <= 1)
    ((899, 8, 8, 1), (899,), True)
    """
    images, labels = [], []
    for batch_images, batch_labels in distribution.unpadded_batches(dataset):
        images.append(batch_images)
        labels.append(np.argmax(batch_labels, axis=-1))
    return np.concatenate(images), np.concatenate(labels)
