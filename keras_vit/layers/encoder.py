"""The Transformer encoder (paper Sec. 3.1, Eq. 1-4) and its block (Eq. 2-3).

    z'_l = MSA(LN(z_{l-1})) + z_{l-1}
    z_l  = MLP(LN(z'_l)) + z'_l

``Encoder`` is everything between the patch embedding and the pooling: class token, position
embedding (with its placement), dropout, the L blocks and the final LayerNorm, like the official
``Encoder`` module (which a ``VisionTransformer`` names ``Transformer``, its official path).

LayerNorm epsilon is 1e-6 and the GELU is the tanh approximation, both as in the official
checkpoints (Keras defaults, 1e-3 and exact GELU, move logits by up to 1e-3). Under mixed
precision, ``keras.ops.layer_normalization`` computes the statistics in float32 whatever the
input dtype; only the normalised output is cast back to the compute dtype.
Sub-layer names follow the official (pre-Linen) module paths, so the checkpoint map is a table.
"""

import contextlib
import math

import keras
import numpy as np
from keras import ops

from keras_vit.layers.attention import AxialAttention, MultiHeadSelfAttention
from keras_vit.layers.position import (
    PLACEMENTS,
    POSITION_EMBEDDINGS,
    absolute_position_layer,
    interpolate_position_embedding,
)
from keras_vit.layers.tokens import CLASSIFIERS, ClassToken

LAYER_NORM_EPSILON = 1e-6
_erf_gelu = False  # True inside gelu_through_erf(), while an exporter traces the model


@contextlib.contextmanager
def gelu_through_erf():
    """Trace the exact GELU as ``0.5 x (1 + erf(x / sqrt 2))`` inside this block.

    TensorFlow writes the exact GELU with ``Erfc``, which tf2onnx cannot convert (ONNX has no
    Erfc); ``Erf`` converts everywhere. The two agree to float32 rounding. The choice is made
    when a function is traced, so models traced outside the block (training, inference) keep
    the backend's own GELU.
    """
    global _erf_gelu
    previous, _erf_gelu = _erf_gelu, True
    try:
        yield
    finally:
        _erf_gelu = previous


def gelu(x, approximate):
    """``keras.ops.gelu``, or its erf form for the exact GELU inside ``gelu_through_erf()``."""
    if approximate or not _erf_gelu:
        return ops.gelu(x, approximate=approximate)
    return 0.5 * x * (1.0 + ops.erf(x / math.sqrt(2.0)))


def layer_norm(name, dtype=None, epsilon=LAYER_NORM_EPSILON):
    """A LayerNorm with the official epsilon (1e-6) unless told otherwise."""
    return keras.layers.LayerNormalization(epsilon=epsilon, dtype=dtype, name=name)


@keras.saving.register_keras_serializable(package="keras_vit")
class MlpBlock(keras.layers.Layer):
    """Dense(mlp_dim) -> GELU -> dropout -> Dense(D) -> dropout (paper Eq. 3, Appendix B).

    Kernels are xavier-uniform and biases N(0, 1e-6), as the official ``MlpBlock``.

    Example:
    >>> import numpy as np
    >>> tuple(MlpBlock(mlp_dim=64)(np.ones((2, 5, 32), "float32")).shape)
    (2, 5, 32)
    """

    def __init__(self, mlp_dim, dropout_rate=0.0, approximate_gelu=True, **kwargs):
        super().__init__(**kwargs)
        self.mlp_dim = int(mlp_dim)
        self.dropout_rate = float(dropout_rate)
        self.approximate_gelu = bool(approximate_gelu)
        self.dropout = keras.layers.Dropout(self.dropout_rate, dtype=self.dtype_policy)

    def build(self, input_shape):
        dense = dict(
            kernel_initializer="glorot_uniform",
            bias_initializer=keras.initializers.RandomNormal(stddev=1e-6),
            dtype=self.dtype_policy,
        )
        self.Dense_0 = keras.layers.Dense(self.mlp_dim, name="Dense_0", **dense)
        self.Dense_1 = keras.layers.Dense(input_shape[-1], name="Dense_1", **dense)
        self.Dense_0.build(input_shape)
        self.Dense_1.build(tuple(input_shape[:-1]) + (self.mlp_dim,))

    def call(self, inputs, training=None):
        x = self.Dense_0(inputs)
        x = gelu(x, self.approximate_gelu)
        x = self.dropout(x, training=training)
        x = self.Dense_1(x)
        return self.dropout(x, training=training)

    def get_config(self):
        config = super().get_config()
        config.update(
            mlp_dim=self.mlp_dim,
            dropout_rate=self.dropout_rate,
            approximate_gelu=self.approximate_gelu,
        )
        return config


@keras.saving.register_keras_serializable(package="keras_vit")
class EncoderBlock(keras.layers.Layer):
    """One pre-LN Transformer block (the official ``Encoder1DBlock``).

    Call with ``return_attention_scores=True`` to also get the (batch, heads, N, N) attention
    probabilities; the block output is the same either way. ``relative_position=True`` gives the
    attention learned 1-D relative position logits (paper Appendix D.4).

    With ``remat=True`` the block's forward pass runs under ``keras.remat`` (gradient
    checkpointing): only its input is kept for the backward pass, where the block is recomputed.
    ``keras.RematScope`` cannot be used here: it passes the ``training`` flag through the
    rematerialised function, which jax and tf.function reject. Dropout must then be 0, because
    the recomputation would draw new masks.

    Example:
    >>> import numpy as np
    >>> block = EncoderBlock(num_heads=4, mlp_dim=64)
    >>> tuple(block(np.ones((2, 5, 32), "float32")).shape)
    (2, 5, 32)
    """

    def __init__(
        self,
        num_heads,
        mlp_dim,
        dropout_rate=0.0,
        attention_dropout_rate=0.0,
        approximate_gelu=True,
        relative_position=False,
        remat=False,
        layer_norm_epsilon=LAYER_NORM_EPSILON,
        attention_axis=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.attention_axis = None if attention_axis is None else int(attention_axis)
        self.num_heads = int(num_heads)
        self.mlp_dim = int(mlp_dim)
        self.dropout_rate = float(dropout_rate)
        self.attention_dropout_rate = float(attention_dropout_rate)
        self.approximate_gelu = bool(approximate_gelu)
        self.relative_position = bool(relative_position)
        self.remat = bool(remat)
        if self.remat and (self.dropout_rate or self.attention_dropout_rate):
            raise ValueError(
                "remat=True needs dropout_rate=0 and attention_dropout_rate=0: the recomputed "
                "forward pass would draw new dropout masks. Set the rates to 0 or remat=False."
            )
        self.LayerNorm_0 = layer_norm("LayerNorm_0", self.dtype_policy, self.layer_norm_epsilon)
        attention = dict(attention_dropout_rate=self.attention_dropout_rate,
                         relative_position=self.relative_position, dtype=self.dtype_policy,
                         name="MultiHeadDotProductAttention_1")
        if self.attention_axis is None:
            self.MultiHeadDotProductAttention_1 = MultiHeadSelfAttention(
                self.num_heads, **attention)
        else:
            self.MultiHeadDotProductAttention_1 = AxialAttention(
                self.num_heads, axis=self.attention_axis, **attention)
        self.dropout = keras.layers.Dropout(self.dropout_rate, dtype=self.dtype_policy)
        self.LayerNorm_2 = layer_norm("LayerNorm_2", self.dtype_policy, self.layer_norm_epsilon)
        self.MlpBlock_3 = MlpBlock(
            self.mlp_dim,
            dropout_rate=self.dropout_rate,
            approximate_gelu=self.approximate_gelu,
            dtype=self.dtype_policy,
            name="MlpBlock_3",
        )

    def build(self, input_shape):
        for layer in (
            self.LayerNorm_0,
            self.MultiHeadDotProductAttention_1,
            self.LayerNorm_2,
            self.MlpBlock_3,
        ):
            layer.build(input_shape)

    def call(self, inputs, training=None, return_attention_scores=False):
        if self.remat and not return_attention_scores:
            return keras.remat(lambda x: self._forward(x, training, False))(inputs)
        return self._forward(inputs, training, return_attention_scores)

    def _forward(self, inputs, training, return_attention_scores):
        x = self.LayerNorm_0(inputs)
        if return_attention_scores:
            x, probs = self.MultiHeadDotProductAttention_1(
                x, training=training, return_attention_scores=True
            )
        else:
            x = self.MultiHeadDotProductAttention_1(x, training=training)
        x = inputs + self.dropout(x, training=training)
        y = self.MlpBlock_3(self.LayerNorm_2(x), training=training)
        outputs = x + y
        if return_attention_scores:
            return outputs, probs
        return outputs

    def compute_output_spec(self, inputs, training=None, return_attention_scores=False):
        return self.MultiHeadDotProductAttention_1.compute_output_spec(
            inputs, return_attention_scores=return_attention_scores
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            num_heads=self.num_heads,
            mlp_dim=self.mlp_dim,
            dropout_rate=self.dropout_rate,
            attention_dropout_rate=self.attention_dropout_rate,
            approximate_gelu=self.approximate_gelu,
            relative_position=self.relative_position,
            remat=self.remat,
            layer_norm_epsilon=self.layer_norm_epsilon,
            attention_axis=self.attention_axis,
        )
        return config


def check_position_options(kind, placement, hidden_size=None):
    """Validate a position embedding kind and placement (paper Appendix D.4)."""
    if kind not in POSITION_EMBEDDINGS:
        raise ValueError(
            f"Unknown position_embedding {kind!r}; use one of {POSITION_EMBEDDINGS} "
            "(paper Appendix D.4)."
        )
    if placement not in PLACEMENTS:
        raise ValueError(
            f"Unknown position_embedding_placement {placement!r}; use one of {PLACEMENTS}."
        )
    if placement != "stem" and not kind.startswith("learned"):
        raise ValueError(
            f"position_embedding_placement={placement!r} places a learned absolute embedding, "
            f"but position_embedding={kind!r} has none to place. Use placement 'stem' with "
            "'relative' or 'none', or a 'learned_1d'/'learned_2d' embedding."
        )
    if kind == "learned_2d" and hidden_size is not None and hidden_size % 2:
        raise ValueError(
            f"position_embedding='learned_2d' splits the width into X and Y halves, so "
            f"hidden_size must be even; got {hidden_size}."
        )


def _position_names(placement, num_layers):
    """The name of the position layer before each block (None: none), and of the stem's."""
    if placement == "every_layer":
        return None, [f"posembed_{i}" for i in range(num_layers)]
    if placement == "every_layer_shared":
        return None, ["posembed_shared"] * num_layers
    return "posembed_input", [None] * num_layers


@keras.saving.register_keras_serializable(package="keras_vit")
class Encoder(keras.layers.Layer):
    """The token grid to the encoded sequence (paper Eq. 1-4, the official ``Encoder``).

    Input: the patch-token grid (batch, rows, cols, D) of ``PatchEmbedding(flatten=False)``.
    The grid is flattened row-major, the class token ``cls`` is prepended (classifier
    ``"token"``), the position embedding is added (``posembed_input`` after the stem, or
    ``posembed_{i}``/``posembed_shared`` before every block), then ``dropout``, the blocks
    ``encoderblock_0..L-1`` and the final LayerNorm ``encoder_norm``. Output (batch, N, D).

    The absolute position tables are learned on ``position_embedding_grid``. A grid of another
    size at call time gets the tables interpolated to it inside the call, with the official math
    (``keras_vit.resize_position_embedding``: bilinear, aligned corners, class row kept), so any
    image size works; on the learned grid nothing is interpolated.

    Args:
        num_layers, num_heads, mlp_dim, dropout_rate, attention_dropout_rate,
        approximate_gelu, remat, layer_norm_epsilon: as ``EncoderBlock`` (and L, the number
        of blocks); the epsilon is also the final LayerNorm's.
        position_embedding_grid: (rows, cols) the position tables are learned at.
        classifier: ``"token"`` prepends a class token; ``"gap"`` does not.
        position_embedding, position_embedding_placement: see ``VisionTransformer``.

    Example:
    >>> import numpy as np
    >>> encoder = Encoder(num_layers=2, num_heads=4, mlp_dim=64, position_embedding_grid=(3, 3))
    >>> tuple(encoder(np.ones((2, 3, 3, 32), "float32")).shape)
    (2, 10, 32)
    >>> tuple(encoder(np.ones((2, 5, 4, 32), "float32")).shape)  # another grid: interpolated
    (2, 21, 32)
    """

    block_class = EncoderBlock  # the block type; AxialEncoder uses axial pairs

    def __init__(
        self,
        num_layers,
        num_heads,
        mlp_dim,
        position_embedding_grid,
        classifier="token",
        dropout_rate=0.0,
        attention_dropout_rate=0.0,
        approximate_gelu=True,
        position_embedding="learned_1d",
        position_embedding_placement="stem",
        remat=False,
        layer_norm_epsilon=LAYER_NORM_EPSILON,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if classifier not in CLASSIFIERS:
            raise ValueError(f"Unknown classifier {classifier!r}; use one of {CLASSIFIERS}.")
        check_position_options(position_embedding, position_embedding_placement)
        self.num_layers = int(num_layers)
        self.num_heads = int(num_heads)
        self.mlp_dim = int(mlp_dim)
        self.position_embedding_grid = tuple(int(v) for v in position_embedding_grid)
        self.classifier = classifier
        self.dropout_rate = float(dropout_rate)
        self.attention_dropout_rate = float(attention_dropout_rate)
        self.approximate_gelu = bool(approximate_gelu)
        self.position_embedding = position_embedding
        self.position_embedding_placement = position_embedding_placement
        self.remat = bool(remat)
        self.layer_norm_epsilon = float(layer_norm_epsilon)

        dtype = self.dtype_policy
        self.cls = ClassToken(dtype=dtype, name="cls") if classifier == "token" else None
        stem_name, block_names = _position_names(position_embedding_placement, self.num_layers)
        if not position_embedding.startswith("learned"):
            stem_name = None
        names = [n for n in dict.fromkeys([stem_name, *block_names]) if n is not None]
        self.position_layers = [
            absolute_position_layer(position_embedding, self.position_embedding_grid, n, dtype)
            for n in names
        ]
        by_name = {layer.name: layer for layer in self.position_layers}
        self._stem_position = by_name.get(stem_name)
        self._block_positions = [by_name.get(n) for n in block_names]
        self.dropout = keras.layers.Dropout(self.dropout_rate, dtype=dtype, name="dropout")
        self.blocks = [
            self.block_class(
                self.num_heads,
                self.mlp_dim,
                dropout_rate=self.dropout_rate,
                attention_dropout_rate=self.attention_dropout_rate,
                approximate_gelu=self.approximate_gelu,
                relative_position=position_embedding == "relative",
                remat=self.remat,
                layer_norm_epsilon=self.layer_norm_epsilon,
                dtype=dtype,
                name=f"encoderblock_{i}",
            )
            for i in range(self.num_layers)
        ]
        self.encoder_norm = layer_norm("encoder_norm", dtype, self.layer_norm_epsilon)

    def _num_tokens(self, rows, cols):
        if rows is None or cols is None:
            return None
        return rows * cols + (self.cls is not None)

    def build(self, input_shape):
        batch, rows, cols, dim = input_shape
        tokens = self._num_tokens(rows, cols)
        if self.position_embedding == "relative" and tokens is None:
            raise ValueError(
                "Relative position embeddings are sized by the number of tokens and need a "
                "fixed image size; give the model an image_size, or use a 'learned_1d' or "
                "'learned_2d' embedding for any size at call time."
            )
        if self.cls is not None:
            self.cls.build((batch, None, dim))
        learned = (batch, self._num_tokens(*self.position_embedding_grid), dim)
        for layer in self.position_layers:
            layer.build(learned)
        for block in self.blocks:
            block.build((batch, tokens, dim))
        self.encoder_norm.build((batch, tokens, dim))

    def sublayer(self, name):
        """The sublayer with this official name (``encoderblock_3``, ``posembed_input``...)."""
        for layer in (self.cls, *self.position_layers, self.dropout, *self.blocks,
                      self.encoder_norm):
            if layer is not None and layer.name == name:
                return layer
        return None

    def position_embedding_layer(self, block=0):
        """The absolute position layer whose table block ``block`` sees (None without one)."""
        return self._stem_position or self._block_positions[int(block)]

    def _add_position(self, layer, tokens, grid):
        return tokens + ops.cast(self._position_table(layer, grid), tokens.dtype)

    def _position_table(self, layer, grid):
        """The layer's (1, N, D) table on ``grid``, interpolated when not the learned grid."""
        table = layer.position_embeddings()
        # A grid known only in the graph (a tensor) is interpolated: for the learned size that is
        # an exact identity, as the interpolation weights are then exactly 0 and 1.
        static = all(isinstance(v, (int, np.integer)) for v in grid)
        if not static or tuple(grid) != self.position_embedding_grid:
            table = interpolate_position_embedding(
                table, self.position_embedding_grid, grid, self.cls is not None
            )
        return table

    def embed(self, grid_tokens, training=None):
        """The sequence entering block 0: flattened grid, class token, stem position, dropout."""
        shape = ops.shape(grid_tokens)
        grid = (shape[1], shape[2])
        x = ops.reshape(grid_tokens, (shape[0], -1, shape[3]))
        if self.cls is not None:
            x = self.cls(x)
        if self._stem_position is not None:
            x = self._add_position(self._stem_position, x, grid)
        return self.dropout(x, training=training), grid

    def call(self, inputs, training=None, return_attention_scores=False):
        x, grid = self.embed(inputs, training=training)
        probs = []
        for block, position in zip(self.blocks, self._block_positions):
            if position is not None:
                x = self._add_position(position, x, grid)
            if return_attention_scores:
                x, p = block(x, training=training, return_attention_scores=True)
                probs.append(p)
            else:
                x = block(x, training=training)
        x = self.encoder_norm(x)
        return (x, probs) if return_attention_scores else x

    def compute_output_shape(self, input_shape):
        batch, rows, cols, dim = input_shape
        return (batch, self._num_tokens(rows, cols), dim)

    def compute_output_spec(self, inputs, training=None, return_attention_scores=False):
        shape = self.compute_output_shape(inputs.shape)
        outputs = keras.KerasTensor(shape, dtype=self.compute_dtype)
        if not return_attention_scores:
            return outputs
        scores = (shape[0], self.num_heads, shape[1], shape[1])
        return outputs, [keras.KerasTensor(scores, dtype="float32") for _ in self.blocks]

    def get_config(self):
        config = super().get_config()
        config.update(
            num_layers=self.num_layers,
            num_heads=self.num_heads,
            mlp_dim=self.mlp_dim,
            position_embedding_grid=list(self.position_embedding_grid),
            classifier=self.classifier,
            dropout_rate=self.dropout_rate,
            attention_dropout_rate=self.attention_dropout_rate,
            approximate_gelu=self.approximate_gelu,
            position_embedding=self.position_embedding,
            position_embedding_placement=self.position_embedding_placement,
            remat=self.remat,
            layer_norm_epsilon=self.layer_norm_epsilon,
        )
        return config
