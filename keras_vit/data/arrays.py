"""The input pipeline for in-memory data: numpy batches for ``fit`` / ``evaluate`` on any backend.

``Examples`` holds uint8 images (N, H, W, C) and int labels; ``Batches`` (a
``keras.utils.PyDataset``) serves them preprocessed (``keras_vit.data.preprocessing``) with
one-hot labels: shuffled and augmented for training, in order for evaluation. Every batch is a
pure function of ``(seed, index)``, so runs repeat exactly and an endless training pipeline
reshuffles at every pass without a new iterator; every example's augmentation is a function of
``(seed, epoch, example)``, so it does not depend on where in the batch the example lands.

Under several processes (``keras_vit.distribution.join``) each process reads and prepares only
its own rows of every global batch (``keras_vit.distribution.process_rows``), which Keras puts
together into the global batch: n processes train on the batches of one.

On several devices (``keras.distribution.DataParallel``) an evaluation batch must split evenly:
the last, partial batch is padded to a multiple of the replicas with blank images of weight 0.
Keras applies sample weights to ``weighted_metrics`` (not to ``metrics``): compile with
``weighted_metrics=["accuracy"]`` and the accuracy over the dataset is what one device gives.
"""

import dataclasses
import math

import keras
import numpy as np

from keras_vit import distribution
from keras_vit.checks import positive_int
from keras_vit.data import preprocessing


@dataclasses.dataclass(frozen=True)
class Examples:
    """Raw examples in memory: ``images`` uint8 (N, H, W, C), ``labels`` int64 (N,)."""

    images: np.ndarray
    labels: np.ndarray

    def __len__(self):
        return len(self.labels)

    def take(self, count):
        """The first ``count`` examples (all when None)."""
        return Examples(self.images[:count], self.labels[:count])


def from_arrays(images, labels):
    """Examples from numpy arrays: images (N, H, W[, C]) uint8 in 0..255, labels (N,) ints.

    Example:
    >>> len(from_arrays(np.zeros((5, 8, 8), np.uint8), np.arange(5)))
    5
    """
    images, labels = np.asarray(images), np.asarray(labels)
    if images.ndim == 3:
        images = images[..., None]
    if images.ndim != 4 or labels.ndim != 1 or len(images) != len(labels):
        raise ValueError(
            f"Expected images (N, H, W[, C]) and labels (N,), got {images.shape} and "
            f"{labels.shape}."
        )
    return Examples(images, labels.astype(np.int64))


def take_per_class(examples, examples_per_class, num_classes, *, seed=0):
    """The first ``examples_per_class`` examples of every class after a seeded shuffle (k-shot),
    in the shuffled order.

    Example:
    >>> ds = from_arrays(np.zeros((30, 2, 2, 1), np.uint8), np.arange(30) % 3)
    >>> sorted(take_per_class(ds, 2, 3).labels.tolist())
    [0, 0, 1, 1, 2, 2]
    """
    k = positive_int("examples_per_class", examples_per_class)
    order = np.random.default_rng(seed).permutation(len(examples))
    labels = examples.labels[order]
    rank = np.zeros(len(order), np.int64)  # how many earlier examples share the label
    for label in range(int(num_classes)):
        where = labels == label
        rank[where] = np.arange(where.sum())
    keep = order[rank < k]
    return Examples(examples.images[keep], examples.labels[keep])


def shared_images(first, second):
    """How many images of ``first`` also occur in ``second``, compared pixel for pixel.

    Each image is compared by its content (a set of its bytes: a hash, then the bytes
    themselves), not by a summary such as the sum of its pixels, which different images share.
    An image that occurs several times in ``first`` counts each time.

    Example (equal pixel sums are not equal images):
    >>> images = np.array([[[1, 2]], [[2, 1]], [[3, 0]]], np.uint8)  # three images, sum 3 each
    >>> shared_images(from_arrays(images[:2], [0, 0]), from_arrays(images[1:], [0, 0]))
    1
    """
    def key(image):
        return image.dtype.str, image.shape, image.tobytes()

    seen = {key(image) for image in np.ascontiguousarray(second.images)}
    return sum(key(image) in seen for image in np.ascontiguousarray(first.images))


class Batches(keras.utils.PyDataset):
    """Preprocessed batches of ``Examples`` (see ``keras_vit.data.pipeline`` for the arguments).

    Training batches are shuffled (a new permutation every pass), augmented and full (the last
    partial batch is dropped); with ``repeat`` the dataset is endless. Evaluation batches keep
    every example in order; with ``pad_to`` > 1 the last batch is padded to a multiple of it
    and every batch carries sample weights (1, and 0 for the padding). ``start_epoch`` is the
    pass the first batch belongs to: a run resumed after ``e`` epochs gives ``e`` and gets the
    batches an uninterrupted run would train on next.
    """

    def __init__(self, examples, *, batch_size, image_size, num_classes, training,
                 augmentation="resize_crop", resize_size=None, flip=True, channels=None,
                 evaluation="resize", mixup_alpha=0.0, repeat=False, seed=0, pad_to=1,
                 start_epoch=0, randaugment=None, mixup_p=0.0):
        super().__init__()
        self.examples, self.batch_size = examples, int(batch_size)
        self.preprocess = dict(image_size=image_size, training=training, flip=flip,
                               augmentation=augmentation, resize_size=resize_size,
                               channels=channels, evaluation=evaluation,
                               randaugment=preprocessing.check_randaugment(randaugment))
        preprocessing.check_augmentation(augmentation, image_size, resize_size, evaluation)
        preprocessing.check_mixup(mixup_alpha, mixup_p)
        self.mixup_p = float(mixup_p)
        self.num_classes, self.training = int(num_classes), bool(training)
        self.mixup_alpha, self.repeat, self.seed = float(mixup_alpha), bool(repeat), int(seed)
        self.pad_to = int(pad_to)
        count = len(examples)
        self.per_pass = count // self.batch_size if training else math.ceil(count / self.batch_size)
        if self.per_pass < 1:
            raise ValueError(f"The batch size {self.batch_size} is larger than the {count} "
                             "training examples; use a smaller batch size or more examples.")
        self.start_epoch = int(start_epoch)
        if self.start_epoch < 0:
            raise ValueError(f"start_epoch must be at least 0, got {start_epoch}.")
        self.passes = 0  # passes finished here (non-repeating training shuffles anew each pass)
        self._process_rows = {}

    @property
    def num_batches(self):
        return None if self.repeat else self.per_pass

    def on_epoch_end(self):
        self.passes += 1

    def __len__(self):
        if self.repeat:
            raise TypeError("An endless (repeat=True) pipeline has no length.")
        return self.per_pass

    def _order(self, epoch):
        if not self.training:
            return np.arange(len(self.examples))
        return np.random.default_rng([self.seed, epoch]).permutation(len(self.examples))

    def __getitem__(self, index):
        epoch, step = divmod(int(index), self.per_pass)
        # An endless pipeline's index runs on across passes; a finite one's restarts every pass.
        epoch += self.start_epoch + (0 if self.repeat else self.passes)
        chosen = self._order(epoch)[step * self.batch_size:(step + 1) * self.batch_size]
        if not self.training:
            return self._evaluation_batch(chosen)
        rows = self._rows(len(chosen))
        if self.mixup_alpha > 0:  # BiT: row i with row N-1-i of the global batch
            partners = len(chosen) - 1 - rows
            share = np.random.default_rng([self.seed, epoch, step, 2]).beta(
                self.mixup_alpha, self.mixup_alpha)
        elif self.mixup_p > 0:  # big_vision: row i with row i-1, row 0 with the last
            partners = (rows - 1) % len(chosen)
            share = preprocessing.mixup_share(
                self.mixup_p, np.random.default_rng([self.seed, epoch, step, 3]))
        else:
            return self._prepared(chosen[rows], epoch)
        return self._mixed(chosen, rows, partners, epoch, np.float32(share))

    def _mixed(self, chosen, rows, partners, epoch, share):
        """``share * row + (1 - share) * partner`` for this process's ``rows`` of the global
        batch ``chosen``: the partners, which may be another process's rows, are prepared here
        too (their draws are theirs alone)."""
        needed = np.union1d(rows, partners)
        images, labels = self._prepared(chosen[needed], epoch)
        own, other = np.searchsorted(needed, rows), np.searchsorted(needed, partners)
        return (share * images[own] + (1 - share) * images[other],
                share * labels[own] + (1 - share) * labels[other])

    def _rows(self, size):
        """This process's rows of a global batch of ``size`` (all of them in one process)."""
        if size not in self._process_rows:
            self._process_rows[size] = distribution.process_rows(size)
        return self._process_rows[size]

    def _prepared(self, chosen, epoch):
        """The preprocessed images and one-hot labels of the examples ``chosen``."""
        images = self.examples.images[chosen]
        keys = preprocessing.example_keys(self.seed, epoch, chosen) if self.training else None
        images = preprocessing.preprocess(images, keys=keys, **self.preprocess)
        return images, np.eye(self.num_classes, dtype=np.float32)[self.examples.labels[chosen]]

    def _evaluation_batch(self, chosen):
        """This process's rows of an evaluation batch padded to a multiple of ``pad_to`` with
        blank examples of weight 0 (and of the last example's label: a finite loss)."""
        count = len(chosen)
        rows = self._rows(count + -count % max(self.pad_to, 1))
        real = rows < count
        images, labels = self._prepared(chosen[np.minimum(rows, count - 1)], epoch=0)
        if self.pad_to <= 1:
            return images, labels
        images = np.where(real[:, None, None, None], images, np.float32(0))
        return images, labels, real.astype(np.float32)
