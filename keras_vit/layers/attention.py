"""Multi-head self-attention (paper Appendix A, Eq. 5-8).

The four projections are Keras ``Dense`` sublayers of width D: ``query``, ``key``, ``value``
(kernels (D, H * hd), their columns head by head) and ``out`` (kernel (H * hd, D)). They hold
the official ``MultiHeadDotProductAttention`` tensors flattened: its (D, H, hd) kernels, (H, hd)
biases and (H, hd, D) output kernel are these reshaped (the checkpoint tables reshape). Being
plain Keras layers, they are what ``model.quantize(mode)`` quantizes, and ``enable_lora(rank)``
gives each the LoRA paper's rank-r update of the whole D x D matrix
(``keras_vit.models.lora``).

Two code paths give the same numbers:
- the fast path projects q, k and v straight into (batch, N, H, hd) and calls
  ``keras.ops.dot_product_attention`` with the kernel that ``attention_implementation`` picks
  (see ``flash_attention_argument``; a flash kernel trains an odd token count on one masked
  token more, ``even_token_attention``);
- the explicit path (attention dropout while training, and ``probabilities`` for inspection)
  forms the softmax probabilities A = softmax(q k^T / sqrt(hd)).

Both paths accept an additive ``bias`` on the logits (broadcastable to (batch, H, N, N)), added
before the softmax: A = softmax(q k^T / sqrt(hd) + bias). With ``relative_position=True`` the
layer adds the logits of 1-D relative attention (paper Appendix D.4) this way.

Under mixed precision both paths take the softmax in float32: the backends' fused attention
upcasts the logits (jax, tensorflow) or accumulates in float32 (torch), and the explicit path
casts q and k to float32, so the returned probabilities are float32.
"""

import math
import weakref

import keras
from keras import ops

from keras_vit.layers.position import RelativePositionLogits

ATTENTION_IMPLEMENTATIONS = ("auto", "xla", "flash")
_HALF_PRECISION = ("float16", "bfloat16")


def check_attention_implementation(implementation):
    """``implementation`` if it names one of ``ATTENTION_IMPLEMENTATIONS``, else a clear error."""
    if implementation not in ATTENTION_IMPLEMENTATIONS:
        raise ValueError(
            f"Unknown attention_implementation {implementation!r}; use 'auto' (the fastest "
            "correct kernel for this backend and device), 'xla' (the backend's plain attention, "
            "never a flash kernel) or 'flash' (a flash kernel, or an error where there is none)."
        )
    if implementation == "flash" and keras.backend.backend() == "tensorflow":
        raise ValueError(_no_flash("tensorflow", "Keras has no flash attention there"))
    return implementation


_WHERE = {"tensorflow": "Keras' TensorFlow backend", "cpu": "a CPU", "tpu": "a TPU",
          "gpu": "this GPU"}


def _no_flash(where, reason):
    where = _WHERE.get(where, where)
    return (f"attention_implementation='flash' is not available on {where}: {reason}. Use "
            "'auto', which picks a flash kernel wherever one is correct and otherwise the plain "
            "attention, or 'xla' (docs/runtimes.md lists what each runtime gets).")


def _device(query):
    """(platform, compute capability or None) of the device that runs ``query``."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax  # the backend in use: installed

        device = jax.devices()[0]  # what Keras' jax backend asks too
        return device.platform, getattr(device, "compute_capability", None)
    if backend == "torch":
        import torch

        device = getattr(query, "device", None)
        if device is None or device.type != "cuda":
            return getattr(device, "type", "cpu"), None
        return "gpu", "{}.{}".format(*torch.cuda.get_device_capability(device))
    return backend, None


def _flash_unavailable(platform, capability, query, has_bias, training):
    """Why no flash kernel computes this attention correctly here; None when one does."""
    if platform == "tpu":
        return ("Keras' TPU flash path (the Pallas Splash kernel) computes causal, unscaled "
                "attention without the bias for a call like this one")
    if platform != "gpu":
        return f"Keras has no flash attention kernel for the {platform} platform"
    if capability is None:
        return "flash attention needs an NVIDIA GPU (cuDNN), and this GPU reports no CUDA version"
    if tuple(int(v) for v in str(capability).split(".")[:2]) < (8, 0):
        return (f"flash attention needs compute capability 8.0 or above (Ampere and later); "
                f"this GPU has {capability} (a T4 has 7.5)")
    return _flash_refuses(query, has_bias, training)


def _flash_refuses(query, has_bias, training):
    """What in the call itself the flash kernels of a capable GPU refuse; None if nothing."""
    dtype = keras.backend.standardize_dtype(query.dtype)
    tokens, head_dim = query.shape[1], query.shape[-1]
    if dtype not in _HALF_PRECISION:
        return (f"flash kernels compute in float16 or bfloat16 and this model computes in "
                f"{dtype} (build it with dtype='mixed_bfloat16')")
    if head_dim % 8 or head_dim > 128:
        return f"flash kernels take head dimensions of multiples of 8 up to 128, not {head_dim}"
    if has_bias:
        return ("the flash kernels take no additive logits bias, which relative position "
                "embeddings add (Appendix D.4)")
    if training and keras.backend.backend() == "jax" and tokens is None:
        return ("cuDNN's flash attention trains on a known token count, and this call's is "
                "unknown (build the model for one image size)")
    return None


def pads_for_flash(query, flash_attention, training):
    """Whether this call runs on one token more (``even_token_attention``): jax, training, an
    odd token count (a class token makes 197 at 224 px) and a flash kernel not ruled out.
    cuDNN's flash backward refused 197 tokens on an H100 (docs/runtimes.md); jax's rule for it
    is an even count wherever a mask or bias is added, as the padding's mask is."""
    tokens = query.shape[1]
    return (flash_attention is not False and bool(training) and tokens is not None
            and tokens % 2 == 1 and keras.backend.backend() == "jax")


def even_token_attention(query, key, value, flash_attention=None):
    """``ops.dot_product_attention`` of (batch, N, H, hd) inputs with N odd, computed on N + 1
    tokens: the extra token is all zeros, masked out as a key (no query attends to it) and its
    own output row is dropped, so the result and its gradients are the unpadded ones exactly.

    Example:
    >>> import numpy as np
    >>> q, k, v = np.random.default_rng(0).normal(size=(3, 1, 5, 2, 8)).astype("float32")
    >>> padded = even_token_attention(q, k, v, flash_attention=False)
    >>> plain = keras.ops.dot_product_attention(q, k, v)
    >>> tuple(padded.shape), bool(np.allclose(padded, plain, atol=1e-6))
    ((1, 5, 2, 8), True)
    """
    tokens = query.shape[1]
    padding = [[0, 0], [0, 1], [0, 0], [0, 0]]
    query, key, value = (ops.pad(t, padding) for t in (query, key, value))
    # (1, 1, N + 1, N + 1), not (N + 1,): cuDNN takes a mask as a bias of the full logits shape
    keys = ops.arange(tokens + 1) < tokens
    mask = ops.broadcast_to(keys[None, None, None, :], (1, 1, tokens + 1, tokens + 1))
    out = ops.dot_product_attention(query, key, value, mask=mask,
                                    flash_attention=flash_attention)
    return out[:, :tokens]


def flash_attention_argument(implementation, query, bias=None, training=False):
    """The ``flash_attention`` argument of ``keras.ops.dot_product_attention`` for this call.

    ``query`` is (batch, tokens, heads, head_dim), ``training`` whether gradients will be
    taken. ``"xla"`` gives ``False`` everywhere.
    ``"flash"`` gives ``True`` where a flash kernel computes this attention exactly, and raises
    a ``ValueError`` saying why not elsewhere. ``"auto"`` gives:

    - jax: ``None`` on a GPU where flash is correct (Keras confirms it and runs cuDNN), else
      ``False``. Never Keras' TPU path: for a call without mask and ``is_causal=False`` it builds
      a causal mask, passes no bias and leaves q.k unscaled.
    - torch: ``None``; Keras then forces torch's flash kernel where it accepts the inputs and
      otherwise lets ``scaled_dot_product_attention`` pick among its kernels, all exact.
    - tensorflow: ``False`` (Keras has no flash attention there).

    Example:
    >>> import numpy as np
    >>> flash_attention_argument("xla", np.zeros((1, 5, 2, 8), "float32"))
    False
    """
    check_attention_implementation(implementation)
    backend = keras.backend.backend()
    if implementation == "xla" or (implementation == "auto" and backend == "tensorflow"):
        return False
    if implementation == "auto" and backend == "torch":
        return None
    platform, capability = _device(query)
    reason = _flash_unavailable(platform, capability, query, bias is not None, training)
    if implementation == "flash":
        if reason is not None:
            raise ValueError(_no_flash(platform, reason))
        return True
    return None if reason is None else False


@keras.saving.register_keras_serializable(package="keras_vit")
class FlatGlorotUniform(keras.initializers.Initializer):
    """Xavier-uniform with the fans of the official flattened (D, H*hd) kernel, any shape.

    Keras computes the fans of a 3-D kernel such as (D, H, hd) from its last two axes; the
    official code draws on the flattened shape, which this reproduces whatever the layout.

    Example:
    >>> import numpy as np
    >>> w = keras.ops.convert_to_numpy(FlatGlorotUniform(64, 64)((64, 4, 16)))
    >>> bool(np.abs(w).max() <= np.sqrt(6 / 128))
    True
    """

    def __init__(self, fan_in, fan_out):
        self.fan_in, self.fan_out = int(fan_in), int(fan_out)

    def __call__(self, shape, dtype=None):
        limit = math.sqrt(6.0 / (self.fan_in + self.fan_out))
        return keras.random.uniform(shape, minval=-limit, maxval=limit, dtype=dtype)

    def get_config(self):
        return {"fan_in": self.fan_in, "fan_out": self.fan_out}


PROJECTIONS = ("query", "key", "value", "out")


def refuse_legacy_weights(layer, store, legacy_count, kind="attention"):
    """Raise a clear error when ``store`` (what Keras loads into ``layer``'s own variables)
    holds the ``legacy_count`` raw projection weights of earlier versions.

    After a failure Keras loads the layer again under another attribute path, where the file has
    nothing: an empty store of the same load raises the same error, so that it is the one
    reported rather than a generic one (or none).
    """
    found = len(store.keys())
    seen = getattr(layer, "_legacy_store", None)
    if found == legacy_count or (found == 0 and seen is not None and seen() is store):
        try:
            layer._legacy_store = weakref.ref(store)
        except TypeError:  # a plain dict: no later visit to recognise
            pass
        raise ValueError(
            f"The file holds {legacy_count} weights for the {kind} layer '{layer.path}': it was "
            "saved by a keras_vit version whose attention projections were raw weights "
            "(query_kernel, ...), before they became Dense sublayers. Convert it once with "
            "keras_vit.models.upgrade.upgrade_keras_file('old.keras', 'new.keras') (for a "
            ".weights.h5 file: keras_vit.models.upgrade.load_legacy_weights(model, "
            "'old.weights.h5')) and load the converted file."
        )


@keras.saving.register_keras_serializable(package="keras_vit")
class MultiHeadSelfAttention(keras.layers.Layer):
    """Multi-head self-attention whose projections ``query``, ``key``, ``value`` and ``out`` are
    Keras ``Dense`` layers holding the official (D, H, hd) / (H, hd, D) tensors flattened.

    Args:
        num_heads: number of heads H; the input width D must be divisible by it.
        attention_dropout_rate: dropout on the attention probabilities (training only).
        relative_position: add learned 1-D relative position logits (a ``RelativePositionLogits``
            sublayer named ``relative_position``, one (2N-1, H, hd) table) before the softmax.
        attention_implementation: the kernel of the fast path: ``"auto"``, ``"xla"`` or
            ``"flash"`` (``flash_attention_argument``). The explicit path is always its own.

    ``layer.probabilities(x)`` gives the (batch, H, N, N) probabilities (the call itself returns
    only the output, on the fastest kernel), and ``layer(x, bias=b)`` adds logits ``b``
    (broadcastable to (batch, H, N, N)), e.g. a large negative number on keys to ignore.
    ``layer(x, gate=g)`` multiplies the probabilities by ``g`` (broadcastable to
    (batch, H, N, N)) on the explicit path: at g = 1 the output is unchanged, and the gradient
    with respect to g is grad A * A, what gradient relevancy reads (Chefer et al., 2021).

    Example:
    >>> import numpy as np
    >>> layer = MultiHeadSelfAttention(num_heads=4)
    >>> x = np.ones((2, 5, 32), "float32")
    >>> y, probs = layer(x), layer.probabilities(x)
    >>> tuple(y.shape), tuple(probs.shape)
    ((2, 5, 32), (2, 4, 5, 5))
    """

    def __init__(self, num_heads, attention_dropout_rate=0.0, relative_position=False,
                 attention_implementation="auto", **kwargs):
        super().__init__(**kwargs)
        self.num_heads = int(num_heads)
        self.attention_dropout_rate = float(attention_dropout_rate)
        self.relative_position = bool(relative_position)
        self.attention_implementation = check_attention_implementation(attention_implementation)
        self.attention_dropout = keras.layers.Dropout(
            self.attention_dropout_rate, dtype=self.dtype_policy, name="attention_dropout"
        )
        self.relative_logits = None
        if self.relative_position:
            self.relative_logits = RelativePositionLogits(
                dtype=self.dtype_policy, name="relative_position"
            )

    def build(self, input_shape):
        dim = input_shape[-1]
        if dim % self.num_heads:
            raise ValueError(
                f"The hidden size ({dim}) must be divisible by the number of heads "
                f"({self.num_heads}); choose num_heads among the divisors of {dim}."
            )
        self.hidden_size = dim
        self.head_dim = dim // self.num_heads
        for name in PROJECTIONS:
            layer = keras.layers.Dense(dim, kernel_initializer=FlatGlorotUniform(dim, dim),
                                       dtype=self.dtype_policy, name=name)
            setattr(self, name, layer)
            layer.build(input_shape)
        if self.relative_logits is not None:
            self.relative_logits.build((None, input_shape[1], self.num_heads, self.head_dim))

    def _heads(self, x):
        """(batch, N, H * hd) -> (batch, N, H, hd); the token count may be dynamic."""
        return ops.reshape(x, (ops.shape(x)[0], -1, self.num_heads, self.head_dim))

    def _output(self, context):
        return self.out(ops.reshape(context, (ops.shape(context)[0], -1, self.hidden_size)))

    def load_own_variables(self, store):
        refuse_legacy_weights(self, store, 8)  # query_kernel, query_bias, ..., out_bias
        super().load_own_variables(store)

    def _project(self, inputs, bias):
        """Queries, keys and values in heads, and the logit bias (relative logits added)."""
        q, k, v = (self._heads(layer(inputs)) for layer in (self.query, self.key, self.value))
        if self.relative_logits is not None:
            relative = self.relative_logits(q * ops.cast(1.0 / math.sqrt(self.head_dim), q.dtype))
            bias = relative if bias is None else relative + ops.cast(bias, relative.dtype)
        return q, k, v, bias

    def _softmax(self, q, k, bias):
        """softmax(q k^T / sqrt(hd) + bias), in float32 also under mixed precision."""
        q, k = ops.cast(q, "float32"), ops.cast(k, "float32")
        logits = ops.einsum("bqhd,bkhd->bhqk", q * (1.0 / math.sqrt(self.head_dim)), k)
        if bias is not None:
            logits = logits + ops.cast(bias, "float32")
        return ops.softmax(logits, axis=-1)

    def call(self, inputs, training=None, bias=None, gate=None):
        q, k, v, bias = self._project(inputs, bias)
        dropout = training and self.attention_dropout_rate > 0
        if dropout or gate is not None:  # both need the probabilities themselves
            probs = self._softmax(q, k, bias)
            if gate is not None:
                probs = probs * ops.cast(gate, probs.dtype)
            probs = self.attention_dropout(ops.cast(probs, v.dtype), training=training)
            return self._output(ops.einsum("bhqk,bkhd->bqhd", probs, v))
        bias = None if bias is None else ops.cast(bias, q.dtype)
        flash = flash_attention_argument(self.attention_implementation, q, bias,
                                         training=bool(training))
        if bias is None and pads_for_flash(q, flash, training):
            return self._output(even_token_attention(q, k, v, flash_attention=flash))
        return self._output(ops.dot_product_attention(q, k, v, bias=bias, flash_attention=flash))

    def probabilities(self, inputs, bias=None):
        """The (batch, H, N, N) attention probabilities the layer computes for ``inputs``
        (float32; what inspection reads, paper Sec. 4.5 and Appendix D.8)."""
        if not self.built:  # a method, not a call: Keras builds only on __call__
            self.build(tuple(inputs.shape))
        q, k, _, bias = self._project(inputs, bias)
        return self._softmax(q, k, bias)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            num_heads=self.num_heads,
            attention_dropout_rate=self.attention_dropout_rate,
            relative_position=self.relative_position,
            attention_implementation=self.attention_implementation,
        )
        return config


def fold_axis(x, axis):
    """(batch, H, W, D) -> (batch * other, length, D): the sequences along ``axis`` (1 or 2)."""
    if axis == 1:
        x = ops.transpose(x, (0, 2, 1, 3))
    shape = ops.shape(x)
    return ops.reshape(x, (-1, shape[2], shape[3]))


def unfold_axis(x, axis, grid_shape):
    """The inverse of ``fold_axis`` for a grid of shape ``grid_shape`` (batch, H, W, D)."""
    batch, rows, cols = grid_shape[0], grid_shape[1], grid_shape[2]
    if axis == 2:
        return ops.reshape(x, (batch, rows, cols, -1))
    return ops.transpose(ops.reshape(x, (batch, cols, rows, -1)), (0, 2, 1, 3))


def check_axis(axis):
    if axis not in (1, 2):
        raise ValueError(
            f"axis must be 1 (attend along the height: within each column) or 2 (along the "
            f"width: within each row) of a (batch, height, width, channels) grid; got {axis!r}."
        )
    return int(axis)


@keras.saving.register_keras_serializable(package="keras_vit")
class AxialAttention(MultiHeadSelfAttention):
    """Multi-head self-attention along one axis of a (batch, H, W, D) grid (paper Appendix D.6).

    ``axis=2`` attends within each row (along the width), ``axis=1`` within each column (along
    the height); the other axis is folded into the batch, so every row (column) is one
    sequence for ``MultiHeadSelfAttention``, whose weights, fast path and
    ``probabilities`` this layer keeps. The probabilities come back as
    (batch, other, heads, length, length): row r (or column c) of the grid, then the usual
    (heads, query, key). ``relative_position=True`` learns 1-D relative logits along the axis.

    Example:
    >>> import numpy as np
    >>> layer = AxialAttention(num_heads=2, axis=1)
    >>> x = np.ones((2, 3, 4, 8), "float32")
    >>> y, probs = layer(x), layer.probabilities(x)
    >>> tuple(y.shape), tuple(probs.shape)
    ((2, 3, 4, 8), (2, 4, 2, 3, 3))
    """

    def __init__(self, num_heads, axis=2, attention_dropout_rate=0.0, relative_position=False,
                 attention_implementation="auto", **kwargs):
        super().__init__(num_heads, attention_dropout_rate, relative_position,
                         attention_implementation, **kwargs)
        self.axis = check_axis(axis)

    def build(self, input_shape):
        if len(input_shape) != 4:
            raise ValueError(
                f"AxialAttention takes a (batch, height, width, channels) grid, got shape "
                f"{tuple(input_shape)}; use MultiHeadSelfAttention for a 1-D sequence."
            )
        super().build((None, input_shape[self.axis], input_shape[-1]))

    def call(self, inputs, training=None, bias=None):
        out = super().call(fold_axis(inputs, self.axis), training=training, bias=bias)
        return unfold_axis(out, self.axis, ops.shape(inputs))

    def probabilities(self, inputs, bias=None):
        """(batch, other, H, length, length): each row's (or column's) probabilities."""
        if not self.built:
            self.build(tuple(inputs.shape))
        shape = ops.shape(inputs)
        probs = super().probabilities(fold_axis(inputs, self.axis), bias=bias)
        length, other = shape[self.axis], shape[3 - self.axis]
        return ops.reshape(probs, (shape[0], other, self.num_heads, length, length))

    def get_config(self):
        config = super().get_config()
        config.update(axis=self.axis)
        return config
