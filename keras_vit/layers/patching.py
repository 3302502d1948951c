"""Images to patch tokens (paper Sec. 3.1, Eq. 1).

The paper reshapes an image ``x`` of shape (H, W, C) into a sequence of N = HW/P^2 flattened
patches ``x_p`` of size P^2*C and maps them linearly to D dimensions with a matrix ``E``.
A P x P convolution with stride P and 'valid' padding computes exactly that product, which is
how the official code (and this layer) does it. ``patchify`` is the plain reshape, kept for
teaching and for the test that proves the two are the same.
"""

import keras
from keras import ops

from keras_vit.checks import check_multiple


def patchify(images, patch_size):
    """Split NHWC images into flattened, non-overlapping patches.

    Returns an array of shape (batch, N, P*P*C) with N = (H/P)*(W/P); patches are ordered
    row-major over the grid and each is flattened in (row, column, channel) order, the same order
    as a reshaped (P, P, C, D) convolution kernel.

    Example:
    >>> import numpy as np
    >>> tuple(patchify(np.zeros((2, 32, 32, 3), "float32"), 4).shape)
    (2, 64, 48)
    """
    images = ops.convert_to_tensor(images)
    if len(images.shape) != 4:
        raise ValueError(f"patchify expects NHWC images of rank 4, got shape {images.shape}.")
    _, height, width, channels = images.shape
    check_multiple((height, width), patch_size, unit="patch size")
    rows, cols = height // patch_size, width // patch_size
    x = ops.reshape(images, (-1, rows, patch_size, cols, patch_size, channels))
    x = ops.transpose(x, (0, 1, 3, 2, 4, 5))
    return ops.reshape(x, (-1, rows * cols, patch_size * patch_size * channels))


@keras.saving.register_keras_serializable(package="keras_vit")
class PatchEmbedding(keras.layers.Layer):
    """Linear projection of flattened P x P patches, written as a stride-P convolution.

    Input (batch, H, W, C); output (batch, H/P * W/P, hidden_size), grid row-major (the official
    ``embedding`` module followed by its reshape), or with ``flatten=False`` the token grid
    (batch, H/P, W/P, hidden_size), which keeps the grid's shape for an image size known only at
    call time (``keras_vit.layers.encoder.Encoder`` takes it). Weights: ``kernel`` (P, P, C, D)
    and ``bias`` (D,), the layout of ``embedding/kernel`` in the official files.

    Example:
    >>> import numpy as np
    >>> layer = PatchEmbedding(patch_size=4, hidden_size=32)
    >>> tuple(layer(np.zeros((1, 28, 28, 1), "float32")).shape)
    (1, 49, 32)
    """

    def __init__(self, patch_size, hidden_size, kernel_initializer="lecun_normal", flatten=True,
                 **kwargs):
        super().__init__(**kwargs)
        self.patch_size = int(patch_size)
        self.hidden_size = int(hidden_size)
        self.flatten = bool(flatten)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.conv = keras.layers.Conv2D(
            self.hidden_size,
            self.patch_size,
            strides=self.patch_size,
            padding="valid",
            data_format="channels_last",
            kernel_initializer=self.kernel_initializer,
            dtype=self.dtype_policy,
            name="conv",
        )

    def build(self, input_shape):
        if len(input_shape) != 4:
            raise ValueError(
                f"PatchEmbedding expects NHWC inputs of rank 4, got shape {tuple(input_shape)}."
            )
        check_multiple(input_shape[1:3], self.patch_size, what="input", unit="patch size")
        self.conv.build(input_shape)

    def call(self, inputs):
        expected = self.conv.kernel.shape[2]
        if inputs.shape[-1] is not None and inputs.shape[-1] != expected:
            raise ValueError(
                f"Expected NHWC images with {expected} channel(s), got shape "
                f"{tuple(inputs.shape)}. Convert the images (e.g. grayscale to RGB with "
                "np.repeat(x, 3, axis=-1)) or build "
                f"the model with num_channels={inputs.shape[-1]}."
            )
        x = self.conv(inputs)
        if not self.flatten:
            return x
        return ops.reshape(x, (ops.shape(x)[0], -1, self.hidden_size))

    def compute_output_shape(self, input_shape):
        batch, height, width, _ = input_shape
        rows = None if height is None else height // self.patch_size
        cols = None if width is None else width // self.patch_size
        if not self.flatten:
            return (batch, rows, cols, self.hidden_size)
        return (batch, None if None in (rows, cols) else rows * cols, self.hidden_size)

    def get_config(self):
        config = super().get_config()
        config.update(
            patch_size=self.patch_size,
            hidden_size=self.hidden_size,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            flatten=self.flatten,
        )
        return config
