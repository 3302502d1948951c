"""ResNet building blocks of BiT (paper Sec. 4.1 "ResNet (BiT)") and of the hybrid stem (Sec. 3.1).

Both ResNets use GroupNorm (32 groups) and weight-standardised convolutions, but with different
numerics, unit layouts and padding (``docs/official-checkpoints.md`` Sec. 3):

============  =====================================  ==========================================
              hybrid stem (vit_jax)                  BiT ResNetV2 (big_transfer)
============  =====================================  ==========================================
unit          post-activation: conv -> GN -> ReLU,   pre-activation: GN -> ReLU -> conv,
              ReLU after the residual add            plain residual add
WS formula    (w - mean) / (std + 1e-5)              (w - mean) / sqrt(var + 1e-10)
GN epsilon    1e-6                                   1e-5
padding       TF 'SAME' (Keras ``padding="same"``)   symmetric zero padding, then 'valid'
root          conv 7x7/2, GN, ReLU, max-pool 'SAME'  pad 3, conv 7x7/2, zero-pad 1, max-pool
============  =====================================  ==========================================

The two styles share ``StandardizedConv2D``, the GroupNorm factory, the bottleneck skeleton
(``conv1`` 1x1, ``conv2`` 3x3 carrying the stride, ``conv3`` 1x1 to 4x the width, projection
shortcut ``conv_proj`` when the shape changes) and ``ResNetStage``; they differ only in ``call``.
Sub-layer names follow the official module paths (``conv_root``, ``gn_root``, ``block1``,
``unit1``, ``conv1``, ``gn1``...).
"""

import numbers

import keras
from keras import ops

GROUPS = 32
ROOT_WIDTH = 64
ROOT_KERNEL = 7  # the root convolution, 7x7 with stride 2, then a 3x3/2 max-pool
EXPANSION = 4  # a bottleneck unit's output (conv3) is 4x its width
# The hybrid's ResNet: R50 without its fourth stage, whose 3 units join the third (6 + 3), so
# that the stem downsamples 16x with as many units (paper Sec. 4.1, option (ii)).
HYBRID_STAGES = (3, 4, 9)

# Numerics of each style (docs/official-checkpoints.md Sec. 3).
STYLES = {
    "hybrid": dict(epsilon=1e-5, epsilon_in_sqrt=False, gn_epsilon=1e-6),
    "bit": dict(epsilon=1e-10, epsilon_in_sqrt=True, gn_epsilon=1e-5),
}


def _check_style(style):
    if style not in STYLES:
        raise ValueError(
            f"Unknown ResNet style {style!r}; use 'hybrid' (vit_jax stem) or 'bit' (BiT ResNetV2)."
        )
    return style


def root_width(width_factor):
    """Channels of the root convolution, ``int(64 * width_factor)``, checked against GroupNorm.

    Every GroupNorm of the network normalises ``root_width * 2**k`` channels in 32 groups, so the
    root width must be a positive multiple of 32 (``width_factor`` a multiple of 0.5).

    Example:
    >>> root_width(0.5), root_width(3)
    (32, 192)
    """
    try:
        width = int(ROOT_WIDTH * float(width_factor))
    except (TypeError, ValueError):
        raise ValueError(f"width_factor must be a number, got {width_factor!r}.") from None
    if width < GROUPS or width % GROUPS:
        raise ValueError(
            f"width_factor={width_factor!r} gives a root width of {width} channels, which "
            f"GroupNormalization with {GROUPS} groups cannot split evenly. Use a width_factor "
            "that is a positive multiple of 0.5 (root width a multiple of 32), e.g. 0.5, 1 or 2."
        )
    return width


def plain_number(value):
    """A float, or an int when it is integral (keeps configs like ``width_factor=1`` readable)."""
    value = float(value)
    return int(value) if value.is_integer() else value


def check_units(units, what, allow_empty):
    """Validate a sequence of per-stage unit counts and return it as a list of ints."""
    if isinstance(units, int) or not hasattr(units, "__iter__"):
        raise ValueError(f"{what} must be a list of unit counts per stage, e.g. [3, 4, 6, 3]; "
                         f"got {units!r}.")
    units = list(units)
    if not units and not allow_empty:
        raise ValueError(f"{what} must list at least one stage, e.g. [3, 4, 6, 3].")
    for count in units:
        if isinstance(count, bool) or not isinstance(count, numbers.Integral) or count < 1:
            raise ValueError(
                f"{what} must hold positive integers (units per stage), got {units!r}."
            )
    return [int(count) for count in units]


def group_norm(name, style, dtype=None, zero_scale=False):
    """``keras.layers.GroupNormalization`` with 32 groups and the style's epsilon."""
    return keras.layers.GroupNormalization(
        groups=GROUPS,
        epsilon=STYLES[_check_style(style)]["gn_epsilon"],
        gamma_initializer="zeros" if zero_scale else "ones",
        dtype=dtype,
        name=name,
    )


@keras.saving.register_keras_serializable(package="keras_vit")
class StandardizedConv2D(keras.layers.Conv2D):
    """A ``Conv2D`` whose kernel is standardised over (H, W, C_in) in every forward pass.

    ``w_hat = (w - mean(w)) / (std(w) + epsilon)`` when ``epsilon_in_sqrt`` is False (hybrid
    stem, epsilon 1e-5), ``w_hat = (w - mean(w)) / sqrt(var(w) + epsilon)`` when True (BiT,
    epsilon 1e-10). The stored ``kernel`` stays the raw parameter, so fine-tuning updates it
    exactly as the official code does (standardisation is a re-parametrisation, not a one-off
    transform). It is computed in float32 under mixed precision. Defaults: no bias, lecun-normal
    init (flax's default).

    Example:
    >>> import numpy as np
    >>> conv = StandardizedConv2D(8, 3, padding="same")
    >>> tuple(conv(np.ones((1, 5, 5, 4), "float32")).shape)
    (1, 5, 5, 8)
    >>> w = keras.ops.convert_to_numpy(conv.standardized_kernel())
    >>> bool(np.allclose(w.mean(axis=(0, 1, 2)), 0, atol=1e-6))
    True
    """

    def __init__(self, filters, kernel_size, strides=1, padding="valid", epsilon=1e-10,
                 epsilon_in_sqrt=True, use_bias=False, kernel_initializer="lecun_normal",
                 **kwargs):
        super().__init__(filters, kernel_size, strides=strides, padding=padding,
                         use_bias=use_bias, kernel_initializer=kernel_initializer, **kwargs)
        self.epsilon = float(epsilon)
        self.epsilon_in_sqrt = bool(epsilon_in_sqrt)

    def standardized_kernel(self, kernel=None):
        """The kernel after weight standardisation (float32)."""
        kernel = ops.cast(self.kernel if kernel is None else kernel, "float32")
        mean = ops.mean(kernel, axis=(0, 1, 2), keepdims=True)
        centred = kernel - mean
        variance = ops.mean(ops.square(centred), axis=(0, 1, 2), keepdims=True)
        if self.epsilon_in_sqrt:
            return centred / ops.sqrt(variance + self.epsilon)
        return centred / (ops.sqrt(variance) + self.epsilon)

    def convolution_op(self, inputs, kernel):
        kernel = ops.cast(self.standardized_kernel(kernel), inputs.dtype)
        return super().convolution_op(inputs, kernel)

    def get_config(self):
        config = super().get_config()
        config.update(epsilon=self.epsilon, epsilon_in_sqrt=self.epsilon_in_sqrt)
        return config


def standardized_conv(filters, kernel_size, style, strides=1, padding="valid", dtype=None,
                      name=None):
    """A ``StandardizedConv2D`` with the style's standardisation formula."""
    ws = STYLES[_check_style(style)]
    return StandardizedConv2D(
        filters, kernel_size, strides=strides, padding=padding, epsilon=ws["epsilon"],
        epsilon_in_sqrt=ws["epsilon_in_sqrt"], dtype=dtype, name=name,
    )


class _Bottleneck(keras.layers.Layer):
    """The shared bottleneck skeleton: 1x1 -> 3x3 (stride) -> 1x1 to ``4 * features``.

    Subclasses set ``style`` and implement ``call``. The projection shortcut ``conv_proj``
    exists when the input width differs from ``4 * features`` or the stride is not 1, decided in
    ``build`` from the input shape (the official rule).
    """

    style = None
    projection_norm = False  # the hybrid normalises the projection (gn_proj); BiT does not

    def __init__(self, features, strides=1, **kwargs):
        super().__init__(**kwargs)
        self.features = int(features)
        self.strides = int(strides)
        if self.features < 1 or self.strides < 1:
            raise ValueError(f"features and strides must be positive, got {features}, {strides}.")
        out = EXPANSION * self.features
        # The 3x3 conv is 'same' (TF SAME) in the hybrid; BiT pads 1 explicitly, then 'valid'.
        padding = "same" if self.style == "hybrid" else "valid"
        conv = dict(style=self.style, dtype=self.dtype_policy)
        self.conv1 = standardized_conv(self.features, 1, name="conv1", **conv)
        self.conv2 = standardized_conv(self.features, 3, strides=self.strides, padding=padding,
                                       name="conv2", **conv)
        self.conv3 = standardized_conv(out, 1, name="conv3", **conv)
        self.conv_proj = None
        self.gn_proj = None

    def build(self, input_shape):
        in_channels = input_shape[-1]
        if in_channels is None:
            raise ValueError("A ResNet unit needs a known number of input channels.")
        out = EXPANSION * self.features
        self.has_projection = in_channels != out or self.strides != 1
        if self.has_projection:
            self.conv_proj = standardized_conv(out, 1, strides=self.strides, style=self.style,
                                               dtype=self.dtype_policy, name="conv_proj")
            self.conv_proj.build(_channels(in_channels))
            if self.projection_norm:
                self.gn_proj = group_norm("gn_proj", style=self.style, dtype=self.dtype_policy)
                self.gn_proj.build(_channels(out))
        self.conv1.build(_channels(in_channels))
        self.conv2.build(_channels(self.features))
        self.conv3.build(_channels(self.features))
        for norm, width in self._norms(in_channels):
            norm.build(_channels(width))

    def compute_output_shape(self, input_shape):
        batch, height, width, _ = input_shape
        side = self._output_side
        return (batch, side(height), side(width), EXPANSION * self.features)

    def get_config(self):
        config = super().get_config()
        config.update(features=self.features, strides=self.strides)
        return config


def _channels(count):
    return (None, None, None, count)


def _ceil_div(size, stride):
    return None if size is None else -(-size // stride)


@keras.saving.register_keras_serializable(package="keras_vit")
class PostActivationUnit(_Bottleneck):
    """Hybrid-stem bottleneck (vit_jax ``ResidualUnit``, ResNet v1.5 style, post-activation).

    ``y = relu(gn1(conv1(x)))``, ``y = relu(gn2(conv2(y)))`` (3x3, stride, TF 'SAME'),
    ``y = gn3(conv3(y))``, shortcut ``gn_proj(conv_proj(x))`` when the shape changes, output
    ``relu(shortcut + y)``. ``gn3`` starts with a zero scale, as in the official code.

    Example:
    >>> import numpy as np
    >>> unit = PostActivationUnit(features=32, strides=2)
    >>> tuple(unit(np.ones((1, 8, 8, 64), "float32")).shape)
    (1, 4, 4, 128)
    """

    style = "hybrid"
    projection_norm = True

    def __init__(self, features, strides=1, **kwargs):
        super().__init__(features, strides, **kwargs)
        norm = dict(style=self.style, dtype=self.dtype_policy)
        self.gn1 = group_norm("gn1", **norm)
        self.gn2 = group_norm("gn2", **norm)
        self.gn3 = group_norm("gn3", zero_scale=True, **norm)

    def _norms(self, in_channels):
        return [(self.gn1, self.features), (self.gn2, self.features),
                (self.gn3, EXPANSION * self.features)]

    def _output_side(self, size):
        return _ceil_div(size, self.strides)

    def call(self, inputs):
        y = ops.relu(self.gn1(self.conv1(inputs)))
        y = ops.relu(self.gn2(self.conv2(y)))
        y = self.gn3(self.conv3(y))
        shortcut = inputs
        if self.has_projection:
            shortcut = self.gn_proj(self.conv_proj(inputs))
        return ops.relu(shortcut + y)


@keras.saving.register_keras_serializable(package="keras_vit")
class PreActivationUnit(_Bottleneck):
    """BiT ResNetV2 bottleneck (big_transfer ``ResidualUnit``, pre-activation).

    ``a = relu(gn1(x))``; shortcut ``conv_proj(a)`` (from the pre-activated input) when the shape
    changes, else ``x``; ``y = conv1(a)``; ``y = conv2(pad1(relu(gn2(y))))`` (3x3, stride,
    symmetric zero padding 1 then 'valid'); ``y = conv3(relu(gn3(y)))``; output ``y + shortcut``
    with no activation after the add.

    Example:
    >>> import numpy as np
    >>> unit = PreActivationUnit(features=32, strides=2)
    >>> tuple(unit(np.ones((1, 8, 8, 64), "float32")).shape)
    (1, 4, 4, 128)
    """

    style = "bit"

    def __init__(self, features, strides=1, **kwargs):
        super().__init__(features, strides, **kwargs)
        norm = dict(style=self.style, dtype=self.dtype_policy)
        self.gn1 = group_norm("gn1", **norm)
        self.gn2 = group_norm("gn2", **norm)
        self.gn3 = group_norm("gn3", **norm)
        self.pad = keras.layers.ZeroPadding2D(1, dtype=self.dtype_policy, name="pad")

    def _norms(self, in_channels):
        return [(self.gn1, in_channels), (self.gn2, self.features), (self.gn3, self.features)]

    def _output_side(self, size):
        return None if size is None else (size - 1) // self.strides + 1

    def call(self, inputs):
        a = ops.relu(self.gn1(inputs))
        shortcut = self.conv_proj(a) if self.has_projection else inputs
        y = self.conv1(a)
        y = self.conv2(self.pad(ops.relu(self.gn2(y))))
        y = self.conv3(ops.relu(self.gn3(y)))
        return y + shortcut


UNITS = {"hybrid": PostActivationUnit, "bit": PreActivationUnit}


def max_pool_3x3_stride_2(x):
    """3x3/2 'valid' max-pool of NHWC ``x``: the backend's pooling, on jax the maximum of nine
    strided slices.

    The numbers are the same (a maximum is exact). jax's pooling primitive becomes a 4-D ONNX
    ``MaxPool`` under jax2onnx, which onnxruntime rejects, so jax takes the slices, which export
    to every format. The other backends pool: on torch the slices' backward is a comparison and
    masked fills per slice, far more work than one pooling's. On torch the pooling is handed
    the NCHW view of ``x``: Keras' channels-last pooling copies its input into NCHW order (and
    the gradient back), while torch pools the view as it lies in memory and returns a result
    whose NHWC view is contiguous.
    """
    backend = keras.backend.backend()
    if backend == "torch":
        nchw = ops.transpose(x, (0, 3, 1, 2))
        pooled = ops.max_pool(nchw, 3, strides=2, padding="valid", data_format="channels_first")
        return ops.transpose(pooled, (0, 2, 3, 1))
    if backend != "jax":
        return ops.max_pool(x, 3, strides=2, padding="valid")
    out = None
    for i in range(3):
        rows = x[:, i : (i - 2) or None : 2]  # ends -2, -1, None: floor((n - 1) / 2) outputs
        for j in range(3):
            window = rows[:, :, j : (j - 2) or None : 2]
            out = window if out is None else ops.maximum(out, window)
    return out


def _same_padding_3x3_stride_2(size):
    """TF 'SAME' padding (before, after) of a 3x3/2 window over ``size`` pixels."""
    total = max((-(-size // 2) - 1) * 2 + 3 - size, 0)
    return total // 2, total - total // 2


@keras.saving.register_keras_serializable(package="keras_vit")
class ResNetStage(keras.layers.Layer):
    """``num_units`` bottleneck units of width ``features``; the first carries the stride.

    Units are named as in the official files: ``unit1, unit2...`` for the hybrid stem and
    ``unit01, unit02...`` for BiT.

    Example:
    >>> import numpy as np
    >>> stage = ResNetStage(2, features=32, strides=2, style="bit")
    >>> tuple(stage(np.ones((1, 8, 8, 64), "float32")).shape), [u.name for u in stage.units]
    ((1, 4, 4, 128), ['unit01', 'unit02'])
    """

    def __init__(self, num_units, features, strides=1, style="bit", **kwargs):
        super().__init__(**kwargs)
        self.num_units = int(num_units)
        self.features = int(features)
        self.strides = int(strides)
        self.style = _check_style(style)
        digits = 2 if style == "bit" else 1
        self.units = [
            UNITS[style](self.features, self.strides if i == 0 else 1,
                         dtype=self.dtype_policy, name=f"unit{i + 1:0{digits}d}")
            for i in range(self.num_units)
        ]

    def build(self, input_shape):
        shape = tuple(input_shape)
        for unit in self.units:
            unit.build(shape)
            shape = unit.compute_output_shape(shape)

    def call(self, inputs):
        x = inputs
        for unit in self.units:
            x = unit(x)
        return x

    def compute_output_shape(self, input_shape):
        shape = tuple(input_shape)
        for unit in self.units:
            shape = unit.compute_output_shape(shape)
        return shape

    def get_config(self):
        config = super().get_config()
        config.update(num_units=self.num_units, features=self.features, strides=self.strides,
                      style=self.style)
        return config


def stage_strides(num_stages):
    """Stride of each stage: 1 for the first, 2 for the others (official ResNet layout)."""
    return [1] + [2] * (num_stages - 1)


def hybrid_stride(num_layers):
    """Total downsampling of a ``HybridStem``: 4 for the root and max-pool, x2 per later stage."""
    return 4 * 2 ** max(len(num_layers) - 1, 0)


@keras.saving.register_keras_serializable(package="keras_vit")
class HybridStem(keras.layers.Layer):
    """The ResNet that turns images into the feature map of a hybrid ViT (paper Sec. 3.1).

    vit_jax layout: ``conv_root`` (7x7/2 standardised conv, TF 'SAME'), ``gn_root``, ReLU,
    3x3/2 max-pool 'SAME', then stages ``block1, block2...`` of post-activation units, stage ``s``
    with width ``64 * width_factor * 2**(s-1)`` (output 4x that) and stride 2 from the second
    stage on. ``num_layers=()`` keeps only the root (the AugReg ``R_Ti_16`` family).

    Args:
        num_layers: units per stage, e.g. ``(3, 4, 9)`` for R50+ViT-B/16 or ``()``.
        width_factor: root width multiplier (root width ``int(64 * width_factor)``, a multiple
            of 32 for GroupNorm).

    Attributes:
        stride: total downsampling, 4 for the root alone, ``4 * 2**(len(num_layers) - 1)``
            otherwise. ``out_channels``: channels of the output feature map.

    Example:
    >>> import numpy as np
    >>> stem = HybridStem(num_layers=[2, 1], width_factor=0.5)
    >>> stem.stride, tuple(stem(np.ones((1, 32, 32, 3), "float32")).shape)
    (8, (1, 4, 4, 256))
    """

    def __init__(self, num_layers=HYBRID_STAGES, width_factor=1, **kwargs):
        super().__init__(**kwargs)
        self.num_layers = check_units(num_layers, "num_layers", allow_empty=True)
        self.width = root_width(width_factor)
        self.width_factor = plain_number(width_factor)
        self.stride = hybrid_stride(self.num_layers)
        conv = dict(style="hybrid", dtype=self.dtype_policy)
        self.conv_root = standardized_conv(self.width, ROOT_KERNEL, strides=2, padding="same",
                                           name="conv_root", **conv)
        self.gn_root = group_norm("gn_root", **conv)
        self.pool = keras.layers.MaxPooling2D(3, strides=2, padding="same",
                                              dtype=self.dtype_policy, name="pool")
        self.stages = [
            ResNetStage(units, self.width * 2**i, strides, style="hybrid",
                        dtype=self.dtype_policy, name=f"block{i + 1}")
            for i, (units, strides) in enumerate(
                zip(self.num_layers, stage_strides(len(self.num_layers)))
            )
        ]
        self.out_channels = 4 * self.stages[-1].features if self.stages else self.width

    def build(self, input_shape):
        self.conv_root.build(input_shape)
        self.gn_root.build(_channels(self.width))
        shape = self._root_shape(input_shape)
        for stage in self.stages:
            stage.build(shape)
            shape = stage.compute_output_shape(shape)

    def _root_shape(self, input_shape):
        batch, height, width, _ = input_shape
        return (batch, _ceil_div(height, 4), _ceil_div(width, 4), self.width)

    def call(self, inputs):
        x = ops.relu(self.gn_root(self.conv_root(inputs)))
        if None in tuple(x.shape[1:3]):
            x = self.pool(x)
        else:  # zero padding equals the pool's -inf padding here: x >= 0 after the ReLU
            pads = [(0, 0)] + [_same_padding_3x3_stride_2(n) for n in x.shape[1:3]] + [(0, 0)]
            x = max_pool_3x3_stride_2(ops.pad(x, pads))
        for stage in self.stages:
            x = stage(x)
        return x

    def compute_output_shape(self, input_shape):
        shape = self._root_shape(input_shape)
        for stage in self.stages:
            shape = stage.compute_output_shape(shape)
        return shape

    def get_config(self):
        config = super().get_config()
        config.update(num_layers=list(self.num_layers), width_factor=self.width_factor)
        return config


@keras.saving.register_keras_serializable(package="keras_vit")
class BiTRoot(keras.layers.Layer):
    """BiT root block: zero-pad 3, ``conv_root`` 7x7/2 'valid', zero-pad 1, 3x3/2 max-pool 'valid'.

    There is no norm or activation in the root (pre-activation network). The max-pool pads with
    zeros, not -inf, as bit_jax does (``padding="same"`` would differ).

    Example:
    >>> import numpy as np
    >>> tuple(BiTRoot(width=32)(np.ones((1, 32, 32, 3), "float32")).shape)
    (1, 8, 8, 32)
    """

    def __init__(self, width, **kwargs):
        super().__init__(**kwargs)
        self.width = int(width)
        self.pad_conv = keras.layers.ZeroPadding2D(3, dtype=self.dtype_policy, name="pad_conv")
        self.conv_root = standardized_conv(self.width, ROOT_KERNEL, strides=2, style="bit",
                                           dtype=self.dtype_policy, name="conv_root")
        self.pad_pool = keras.layers.ZeroPadding2D(1, dtype=self.dtype_policy, name="pad_pool")

    def build(self, input_shape):
        self.conv_root.build(input_shape)

    def call(self, inputs):
        x = self.conv_root(self.pad_conv(inputs))
        return max_pool_3x3_stride_2(self.pad_pool(x))

    def compute_output_shape(self, input_shape):
        batch, height, width, _ = input_shape

        def side(size):
            if size is None:
                return None
            size = (size + 6 - 7) // 2 + 1
            return (size + 2 - 3) // 2 + 1

        return (batch, side(height), side(width), self.width)

    def get_config(self):
        config = super().get_config()
        config.update(width=self.width)
        return config
