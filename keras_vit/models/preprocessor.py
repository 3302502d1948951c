"""The classifier's preprocessor: raw images to the model's input, as the official code feeds it.

A keras_vit model takes float images in [-1, 1] at its own size. ``ImagePreprocessor`` turns raw
images (uint8, or float in [0, 255], any size) into that input with the official evaluation
pipeline of vit_jax (``keras_vit.data.preprocessing``: a bilinear resize to the model's side,
then ``(x - 127.5) / 127.5``), so ``predict`` on raw images is right instead of silently wrong
when the scaling is forgotten.

The rule, keras-hub's: a classifier with ``preprocessor=None`` (the constructor's default) takes
inputs that are already preprocessed; one with a preprocessor (``from_preset`` attaches one by
default) runs it on the images given to ``predict``, ``fit`` and ``evaluate``, never inside
``model(x)``. The preprocessor is part of the classifier's config, so ``.keras`` files and
presets keep it. It refuses what it cannot mean: images of another channel count, values outside
[0, 255], and negative floats (images that look preprocessed already).

Example:
>>> import numpy as np
>>> preprocessor = ImagePreprocessor(image_size=4, num_channels=3)
>>> out = preprocessor(np.full((2, 8, 6, 3), 255, np.uint8))
>>> out.shape, float(out.min()), float(out.max())
((2, 4, 4, 3), 1.0, 1.0)
"""

import math

import keras
import numpy as np

from keras_vit.data import preprocessing


@keras.saving.register_keras_serializable(package="keras_vit")
class ImagePreprocessor:
    """Raw images (N, H, W, C) or one (H, W, C), uint8 or float in [0, 255] -> float32 in
    [-1, 1] at ``image_size`` (vit_jax's evaluation pipeline, ``evaluation="resize"``).

    Args:
        image_size: the model's side (an int, or a square pair); None keeps each batch's size
            (a model of any size), which then only scales.
        num_channels: the channels the model takes; other images are refused.
    """

    def __init__(self, image_size=None, num_channels=3):
        if isinstance(image_size, (tuple, list)):
            if len(set(image_size)) != 1:
                raise ValueError(
                    f"ImagePreprocessor resizes to a square side, as the official pipeline "
                    f"does; got image_size={tuple(image_size)}. Resize the images yourself and "
                    "give the model preprocessor=None.")
            image_size = image_size[0]
        self.image_size = None if image_size is None else int(image_size)
        self.num_channels = int(num_channels)

    @classmethod
    def for_model(cls, model):
        """The preprocessor of a keras_vit model's input (its size and channels)."""
        shape = model.input.shape
        sides = tuple(shape[1:3])
        return cls(None if None in sides else sides, num_channels=shape[-1])

    def __call__(self, images):
        if isinstance(images, (list, tuple)):  # images of several sizes: one at a time
            return np.concatenate([self(np.asarray(image)[None]) for image in images])
        images = np.asarray(images)
        if images.ndim == 3:
            return self(images[None])[0]
        images = self._checked(images)
        if self.image_size is None:
            return preprocessing.to_unit_range(images)
        return preprocessing.evaluation_preprocess(images, self.image_size, "resize", None)

    def check(self, images):
        """Refuse images this preprocessor cannot mean, before any batch is made (an error
        raised while Keras iterates would leave a jax model without its weights' values)."""
        if isinstance(images, (list, tuple)):
            for image in images:
                self._checked(np.asarray(image)[None])
        else:
            images = np.asarray(images)
            self._checked(images[None] if images.ndim == 3 else images)

    def _checked(self, images):
        """A batch of the right channels and range, or a clear error."""
        if images.ndim != 4 or images.shape[-1] != self.num_channels:
            raise ValueError(
                f"The preprocessor takes raw images (N, H, W, {self.num_channels}) or one "
                f"(H, W, {self.num_channels}); got shape {images.shape}. Convert the images to "
                f"{self.num_channels} channel(s) first (keras_vit.data.preprocessing."
                "convert_channels).")
        if images.dtype.kind == "f" and images.size:
            low, high = float(np.min(images)), float(np.max(images))
            if low < 0 or high > 255 or math.isnan(low + high):
                raise ValueError(
                    f"The preprocessor takes raw pixel values in [0, 255], got values in "
                    f"[{low:g}, {high:g}]. Images already in [-1, 1] are the model's own input: "
                    "set model.preprocessor = None (or build it with preprocessor=None).")
        elif images.dtype.kind not in "uif":
            raise TypeError(f"Images must be numbers, got dtype {images.dtype}.")
        return images

    def get_config(self):
        return {"image_size": self.image_size, "num_channels": self.num_channels}

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def __repr__(self):
        return (f"ImagePreprocessor(image_size={self.image_size}, "
                f"num_channels={self.num_channels})")


class PreprocessedBatches(keras.utils.PyDataset):
    """Batches of raw images, preprocessed one batch at a time as ``fit``/``predict`` ask for
    them (the whole array is never converted at once), with their labels and weights."""

    def __init__(self, preprocessor, x, y=None, sample_weight=None, *, batch_size=None,
                 shuffle=False):
        super().__init__()
        preprocessor.check(x)
        self.preprocessor, self.x = preprocessor, x
        self.rest = [a for a in (y, sample_weight) if a is not None]
        self.batch_size = int(batch_size or 32)
        self.shuffle = bool(shuffle)
        self.order = np.arange(len(x))
        self.on_epoch_end()

    def __len__(self):
        return math.ceil(len(self.x) / self.batch_size)

    def __getitem__(self, index):
        rows = self.order[index * self.batch_size:(index + 1) * self.batch_size]
        if isinstance(self.x, (list, tuple)):
            images = self.preprocessor([self.x[i] for i in rows])
        else:
            images = self.preprocessor(np.asarray(self.x)[rows])
        if not self.rest:
            return (images,)
        return (images, *(np.asarray(a)[rows] for a in self.rest))

    def on_epoch_end(self):
        if self.shuffle:
            np.random.shuffle(self.order)


def batches(preprocessor, x, y=None, sample_weight=None, *, batch_size=None, shuffle=False):
    """``x`` (and its labels) as preprocessed batches, or ``x`` itself when there is nothing to
    preprocess here (no preprocessor, no data, or batches made already)."""
    if preprocessor is None or x is None or isinstance(x, PreprocessedBatches):
        return x
    if isinstance(x, (np.ndarray, list, tuple)) or hasattr(x, "__array__"):
        return PreprocessedBatches(preprocessor, x, y, sample_weight, batch_size=batch_size,
                                   shuffle=shuffle)
    raise TypeError(
        f"A model with a preprocessor takes raw images as arrays (or a list of arrays of any "
        f"size); got a {type(x).__name__}. Preprocess a pipeline's images in the pipeline "
        "(keras_vit.data.preprocessing / keras_vit.data.tfdata) and give them to a model with "
        "model.preprocessor = None.")
