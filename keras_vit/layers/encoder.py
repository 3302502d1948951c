"""The Transformer encoder (paper Sec. 3.1, Eq. 1-4) and its block (Eq. 2-3).

    z'_l = MSA(LN(z_{l-1})) + z_{l-1}
    z_l  = MLP(LN(z'_l)) + z'_l

``Encoder`` is everything between the patch embedding and the pooling: class token, position
embedding (with its placement), dropout, the L blocks and the final LayerNorm, like the official
``Encoder`` module (which a ``ViTBackbone`` names ``Transformer``, its official path).

LayerNorm epsilon is 1e-6 and the GELU is the tanh approximation, both as in the official
checkpoints (Keras defaults, 1e-3 and exact GELU, move logits by up to 1e-3). Under mixed
precision, ``keras.ops.layer_normalization`` computes the statistics in float32 whatever the
input dtype; only the normalised output is cast back to the compute dtype.
Sub-layer names follow the official (pre-Linen) module paths, so the checkpoint map is a table.
"""

import contextlib
import dataclasses
import math

import keras
import numpy as np
from keras import ops

from keras_vit.checks import positive_int
from keras_vit.layers.attention import (
    AxialAttention,
    MultiHeadSelfAttention,
    check_attention_implementation,
)
from keras_vit.layers.position import (
    PLACEMENTS,
    POSITION_EMBEDDINGS,
    absolute_position_layer,
    interpolate_position_embedding,
)
from keras_vit.layers.settings import Settings
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


@dataclasses.dataclass(frozen=True)
class EncoderConfig(Settings):
    """The settings of the Transformer encoder, checked once (vit_jax's ``transformer`` config).

    One frozen object, built by the model and handed unchanged to the ``Encoder`` and each of
    its blocks, which serialise it once (``to_dict``). Names are the paper's:

    Args:
        num_layers: the number of blocks L.
        num_heads: attention heads; must divide ``hidden_size``.
        mlp_dim: hidden width of the MLP blocks.
        hidden_size: token width D; None takes it from the input (a lone block or encoder).
        dropout_rate: dropout after the position embedding, in the MLP and after attention.
        attention_dropout_rate: dropout on the attention probabilities.
        stochastic_depth_rate: the rate at which the last block drops each residual branch
            per example (``StochasticDepth``); block i of L drops at ``rate * i / (L - 1)``.
        approximate_gelu: tanh-approximated GELU (the official checkpoints) or exact.
        layer_norm_epsilon: epsilon of every LayerNorm (1e-6 as the official checkpoints).
        remat: rematerialise each block in the backward pass; needs dropout and stochastic
            depth rates of 0.
        classifier: ``"token"`` prepends a class token; ``"gap"`` does not.
        position_embedding, position_embedding_placement: paper Appendix D.4
            (``keras_vit.layers.position``).
        attention_implementation: the attention kernel: ``"auto"`` (the fastest exact one for
            the backend and device), ``"xla"`` or ``"flash"``
            (``keras_vit.layers.attention.flash_attention_argument``; docs/runtimes.md).
        axial: every block is a pair of axial blocks, within each row then each column of the
            patch grid (Axial-ViT, paper Appendix D.6; ``keras_vit.layers.axial``).

    Example:
    >>> config = EncoderConfig(num_layers=2, num_heads=4, mlp_dim=64)
    >>> EncoderConfig.from_dict(config.to_dict()) == config
    True
    """

    num_layers: int
    num_heads: int
    mlp_dim: int
    hidden_size: int | None = None
    dropout_rate: float = 0.0
    attention_dropout_rate: float = 0.0
    stochastic_depth_rate: float = 0.0
    approximate_gelu: bool = True
    layer_norm_epsilon: float = LAYER_NORM_EPSILON
    remat: bool = False
    classifier: str = "token"
    position_embedding: str = "learned_1d"
    position_embedding_placement: str = "stem"
    attention_implementation: str = "auto"
    axial: bool = False

    def __post_init__(self):
        for name in ("num_layers", "num_heads", "mlp_dim", "hidden_size"):
            object.__setattr__(self, name, positive_int(
                name, getattr(self, name), optional=name == "hidden_size"))
        for name in ("dropout_rate", "attention_dropout_rate", "stochastic_depth_rate"):
            object.__setattr__(self, name, check_rate(name, getattr(self, name)))
        epsilon = float(self.layer_norm_epsilon)
        if not epsilon > 0:
            raise ValueError(f"layer_norm_epsilon must be positive, got {epsilon!r}.")
        object.__setattr__(self, "layer_norm_epsilon", epsilon)
        object.__setattr__(self, "approximate_gelu", bool(self.approximate_gelu))
        object.__setattr__(self, "remat", bool(self.remat))
        object.__setattr__(self, "axial", bool(self.axial))
        self._check_combinations()

    def _check_combinations(self):
        if self.hidden_size is not None and self.hidden_size % self.num_heads:
            divisors = [h for h in range(1, min(self.hidden_size, 64) + 1)
                        if self.hidden_size % h == 0]
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be divisible by num_heads "
                f"({self.num_heads}); valid head counts for this width include {divisors}."
            )
        if self.classifier not in CLASSIFIERS:
            raise ValueError(f"Unknown classifier {self.classifier!r}; use one of {CLASSIFIERS}.")
        check_position_options(self.position_embedding, self.position_embedding_placement,
                               self.hidden_size)
        check_attention_implementation(self.attention_implementation)
        check_remat(self.remat, self.dropout_rate, self.attention_dropout_rate,
                    self.stochastic_depth_rate)

    @property
    def relative_position(self):
        """Whether every attention learns 1-D relative position logits (Appendix D.4)."""
        return self.position_embedding == "relative"

    @property
    def stochastic_depth_rates(self):
        """The rate of each block, linear from 0 at the first to ``stochastic_depth_rate`` at
        the last (timm's ``calculate_drop_path_rates``; a single block gets 0, as there).

        Huang et al. (2016) decay the survival probability linearly with depth, so that the
        early blocks, whose features every later block reads, are kept. The official ViT code
        and big_vision's ``models/vit.py`` have no stochastic depth; timm, which also runs the
        AugReg checkpoints (``sd_`` in their names), spreads its ``drop_path_rate`` this way,
        so one rate gives each block the same rate in both.

        >>> EncoderConfig(num_layers=3, num_heads=1, mlp_dim=4,
        ...               stochastic_depth_rate=0.1).stochastic_depth_rates
        (0.0, 0.05, 0.1)
        """
        last = self.num_layers - 1
        return tuple(self.stochastic_depth_rate * i / last if last else 0.0
                     for i in range(self.num_layers))


def check_rate(name, rate):
    """``rate`` as a float in [0, 1), or a ValueError naming ``name``."""
    if not 0.0 <= float(rate) < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {rate!r}: it is the probability of "
                         f"dropping, and 1 would drop everything. Use a rate such as 0.1.")
    return float(rate)


def check_remat(remat, *rates):
    """Refuse remat with a random mask: the recomputed forward pass would draw another one."""
    if remat and any(rates):
        raise ValueError(
            "remat=True needs dropout_rate=0, attention_dropout_rate=0 and "
            "stochastic_depth_rate=0: the recomputed forward pass would draw new random masks. "
            "Set the rates to 0 or remat=False."
        )


def encoder_config(owner, config):
    """The ``EncoderConfig`` a layer was given: the object itself, or its ``to_dict`` (what a
    saved layer's config holds)."""
    if not isinstance(config, (EncoderConfig, dict)):
        raise TypeError(f"{owner} takes an EncoderConfig (keras_vit.layers.encoder."
                        f"EncoderConfig(num_layers=..., num_heads=..., mlp_dim=...)) as its "
                        f"first argument, got {config!r}.")
    return EncoderConfig.from_dict(config)


@keras.saving.register_keras_serializable(package="keras_vit")
class StochasticDepth(keras.layers.Layer):
    """Drop a residual branch for whole examples at ``rate`` (Huang et al., "Deep Networks
    with Stochastic Depth", ECCV 2016; timm's ``DropPath``), in training only.

    A kept branch is scaled by 1 / (1 - rate), so its expected value is the branch itself and
    inference (the identity) needs no rescaling. This is ``keras.random.dropout`` with one
    draw per example; like ``keras.layers.Dropout`` it owns a ``SeedGenerator`` only at a
    nonzero rate, so a rate of 0 adds no variable to the model.

    Example:
    >>> import numpy as np
    >>> layer = StochasticDepth(0.5, seed=0)
    >>> out = np.asarray(layer(np.ones((4, 3, 2), "float32"), training=True))
    >>> sorted({float(v) for v in out.reshape(4, -1).max(axis=1)} - {0.0, 2.0})
    []
    >>> bool(np.all(np.asarray(layer(np.ones((4, 3, 2), "float32"))) == 1))
    True
    """

    def __init__(self, rate=0.0, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.rate = check_rate("stochastic_depth_rate", rate)
        self.seed = seed
        if self.rate > 0:
            self.seed_generator = keras.random.SeedGenerator(seed)
        self.built = True

    def call(self, inputs, training=False):
        if not training or self.rate == 0:
            return inputs
        noise_shape = (None,) + (1,) * (len(inputs.shape) - 1)  # one draw per example
        return keras.random.dropout(inputs, self.rate, noise_shape=noise_shape,
                                    seed=self.seed_generator)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), "rate": self.rate, "seed": self.seed}


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

    ``attention_probabilities(x)`` gives the attention probabilities the block computes for its
    input ``x`` (inspection; the call stays on the fast path), and ``block(x, gate=g)``
    multiplies them by ``g`` (``MultiHeadSelfAttention``). ``config`` is the ``EncoderConfig``
    (heads, MLP width, rates, GELU, epsilon, remat); a ``"relative"`` position embedding gives
    the attention learned 1-D relative position logits (paper Appendix D.4). ``attention_axis``
    (1 or 2) makes the attention run along one axis of a (batch, H, W, D) grid (Axial-ViT).

    With ``config.remat`` the block's forward pass runs under ``keras.remat`` (gradient
    checkpointing): only its input is kept for the backward pass, where the block is recomputed.
    ``keras.RematScope`` cannot be used here: it passes the ``training`` flag through the
    rematerialised function, which jax and tf.function reject. Dropout and stochastic depth
    must then be 0, because the recomputation would draw new masks.

    ``stochastic_depth_rate`` is this block's rate of dropping each residual branch (attention,
    MLP) per example; the ``Encoder`` gives block i ``config.stochastic_depth_rates[i]``, and a
    lone block (None) takes ``config.stochastic_depth_rate``.

    Example:
    >>> import numpy as np
    >>> block = EncoderBlock(EncoderConfig(num_layers=1, num_heads=4, mlp_dim=64))
    >>> tuple(block(np.ones((2, 5, 32), "float32")).shape)
    (2, 5, 32)
    """

    def __init__(self, config, attention_axis=None, stochastic_depth_rate=None, **kwargs):
        super().__init__(**kwargs)
        self.config = encoder_config("EncoderBlock", config)
        self.attention_axis = None if attention_axis is None else int(attention_axis)
        config = self.config
        dtype = self.dtype_policy
        self.stochastic_depth_rate = block_rate(config, stochastic_depth_rate)
        self.stochastic_depth = StochasticDepth(self.stochastic_depth_rate, dtype=dtype,
                                                name="stochastic_depth")
        self.LayerNorm_0 = layer_norm("LayerNorm_0", dtype, config.layer_norm_epsilon)
        attention = dict(attention_dropout_rate=config.attention_dropout_rate,
                         relative_position=config.relative_position,
                         attention_implementation=config.attention_implementation, dtype=dtype,
                         name="MultiHeadDotProductAttention_1")
        if self.attention_axis is None:
            self.MultiHeadDotProductAttention_1 = MultiHeadSelfAttention(
                config.num_heads, **attention)
        else:
            self.MultiHeadDotProductAttention_1 = AxialAttention(
                config.num_heads, axis=self.attention_axis, **attention)
        self.dropout = keras.layers.Dropout(config.dropout_rate, dtype=dtype)
        self.LayerNorm_2 = layer_norm("LayerNorm_2", dtype, config.layer_norm_epsilon)
        self.MlpBlock_3 = MlpBlock(config.mlp_dim, dropout_rate=config.dropout_rate,
                                   approximate_gelu=config.approximate_gelu, dtype=dtype,
                                   name="MlpBlock_3")

    def build(self, input_shape):
        for layer in (
            self.LayerNorm_0,
            self.MultiHeadDotProductAttention_1,
            self.LayerNorm_2,
            self.MlpBlock_3,
        ):
            layer.build(input_shape)

    def call(self, inputs, training=None, gate=None):
        if self.config.remat and gate is None:  # a gate is for inspection, which keeps no memory
            return keras.remat(lambda x: self._forward(x, training))(inputs)
        return self._forward(inputs, training, gate)

    def _forward(self, inputs, training, gate=None):
        attention = self.MultiHeadDotProductAttention_1
        if gate is None:  # the axial layers take no gate
            x = attention(self.LayerNorm_0(inputs), training=training)
        else:
            x = attention(self.LayerNorm_0(inputs), training=training, gate=gate)
        x = inputs + self.stochastic_depth(self.dropout(x, training=training), training=training)
        y = self.MlpBlock_3(self.LayerNorm_2(x), training=training)
        return x + self.stochastic_depth(y, training=training)

    def attention_probabilities(self, inputs):
        """The block's attention probabilities for its input ``inputs`` (a list of one array:
        (batch, heads, N, N), or (batch, other, heads, length, length) along an axis)."""
        return [self.MultiHeadDotProductAttention_1.probabilities(self.LayerNorm_0(inputs))]

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), "config": self.config.to_dict(),
                "attention_axis": self.attention_axis,
                "stochastic_depth_rate": self.stochastic_depth_rate}


def block_rate(config, rate):
    """A block's stochastic depth rate: ``rate``, or the config's for a lone block (None)."""
    if rate is None:
        return config.stochastic_depth_rate
    rate = check_rate("stochastic_depth_rate", rate)
    check_remat(config.remat, rate)
    return rate


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
        config: the ``EncoderConfig`` (L blocks, heads, MLP width, rates, GELU, LayerNorm
            epsilon, also the final norm's, remat, classifier, position embedding and placement).
        position_embedding_grid: (rows, cols) the position tables are learned at.

    Example:
    >>> import numpy as np
    >>> config = EncoderConfig(num_layers=2, num_heads=4, mlp_dim=64)
    >>> encoder = Encoder(config, position_embedding_grid=(3, 3))
    >>> tuple(encoder(np.ones((2, 3, 3, 32), "float32")).shape)
    (2, 10, 32)
    >>> tuple(encoder(np.ones((2, 5, 4, 32), "float32")).shape)  # another grid: interpolated
    (2, 21, 32)
    """

    block_class = EncoderBlock  # the block type; AxialEncoder uses axial pairs

    def __init__(self, config, position_embedding_grid=None, **kwargs):
        config = encoder_config(type(self).__name__, config)
        if position_embedding_grid is None:
            raise TypeError(f"{type(self).__name__} needs position_embedding_grid, the (rows, "
                            f"cols) patch grid its position embeddings are made for.")
        super().__init__(**kwargs)
        self.config = config
        self.position_embedding_grid = tuple(int(v) for v in position_embedding_grid)
        dtype = self.dtype_policy
        self.cls = ClassToken(dtype=dtype, name="cls") if config.classifier == "token" else None
        self._make_position_layers()
        self.dropout = keras.layers.Dropout(config.dropout_rate, dtype=dtype, name="dropout")
        self.blocks = [self.block_class(config, stochastic_depth_rate=rate, dtype=dtype,
                                        name=f"encoderblock_{i}")
                       for i, rate in enumerate(config.stochastic_depth_rates)]
        self.encoder_norm = layer_norm("encoder_norm", dtype, config.layer_norm_epsilon)

    def _make_position_layers(self):
        """The absolute position layers, and which one the stem and each block add."""
        kind = self.config.position_embedding
        stem_name, block_names = _position_names(self.config.position_embedding_placement,
                                                 self.config.num_layers)
        if not kind.startswith("learned"):
            stem_name = None
        names = [n for n in dict.fromkeys([stem_name, *block_names]) if n is not None]
        self.position_layers = [
            absolute_position_layer(kind, self.position_embedding_grid, n, self.dtype_policy)
            for n in names
        ]
        by_name = {layer.name: layer for layer in self.position_layers}
        self._stem_position = by_name.get(stem_name)
        self._block_positions = [by_name.get(n) for n in block_names]

    def _num_tokens(self, rows, cols):
        if rows is None or cols is None:
            return None
        return rows * cols + (self.cls is not None)

    def build(self, input_shape):
        batch, rows, cols, dim = input_shape
        tokens = self._num_tokens(rows, cols)
        if self.config.relative_position and tokens is None:
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

    def call(self, inputs, training=None):
        return self.encode(inputs, training)

    def encode(self, inputs, training=None, gates=None, out=None):
        """The encoder's one pass (Eq. 1-4): the call is this pass, and inspection reads it.

        Args:
            inputs: the patch-token grid (batch, rows, cols, D).
            training: dropout on or off, as in the call.
            gates: None, or one array per block (batch, heads, N, N) multiplying that block's
                attention probabilities (the explicit path): at gates of ones the output is
                the call's, and the gradient with respect to a gate is grad A * A (gradient
                relevancy, Chefer et al., 2021). An Axial-ViT's blocks take none.
            out: None, or a dict that receives ``"embedded"`` (z_0, the sequence entering
                block 0), ``"blocks"`` (each block's output) and ``"attention"`` (each
                attention's probabilities, the explicit float32 softmax; without gates the
                blocks keep their fused kernel); paper Sec. 4.5, Fig. 6-7.

        Returns:
            The output sequence (batch, N, D).
        """
        self._check_gates(gates)
        if not self.built:  # inspection calls this method, and Keras builds only on __call__
            self.build(tuple(inputs.shape))
        x, grid = self.embed(inputs, training=training)
        if out is not None:
            out.update(embedded=x, blocks=[], attention=[])
        x = self._to_blocks(x, grid)
        for i, (block, position) in enumerate(zip(self.blocks, self._block_positions)):
            if position is not None:
                x = self._add_block_position(position, x, grid)
            if out is not None:
                out["attention"].extend(block.attention_probabilities(x))
            gate = {} if gates is None else {"gate": gates[i]}
            x = block(x, training=training, **gate)
            if out is not None:
                out["blocks"].append(x)
        return self._from_blocks(self.encoder_norm(x))

    def _check_gates(self, gates):
        if gates is None:
            return
        if self.block_class is not EncoderBlock:
            raise ValueError(
                "An Axial-ViT's blocks attend within rows and within columns and take no "
                "gate; gradient relevancy needs one token-to-token attention per block.")
        if len(gates) != len(self.blocks):
            raise ValueError(f"Expected one gate per block ({len(self.blocks)}), got "
                             f"{len(gates)}.")

    def _to_blocks(self, tokens, grid):
        """The sequence in the form the blocks take (the tokens; a grid for axial blocks)."""
        return tokens

    def _from_blocks(self, x):
        return x

    def _add_block_position(self, layer, x, grid):
        return self._add_position(layer, x, grid)

    def compute_output_shape(self, input_shape):
        batch, rows, cols, dim = input_shape
        return (batch, self._num_tokens(rows, cols), dim)

    def get_config(self):
        return {**super().get_config(), "config": self.config.to_dict(),
                "position_embedding_grid": list(self.position_embedding_grid)}
