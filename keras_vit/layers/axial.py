"""Axial attention (paper Appendix D.6, Fig. 13): the blocks of Axial-ViT and AxialResNet.

Axial-ViT replaces each Transformer block by two axial blocks, self-attention + MLP within each
row of the patch grid, then within each column (``AxialEncoderBlock``); ``AxialEncoder`` is the
``Encoder`` with these pairs on a 2-D grid. A class token becomes a class row: the token (with
its position embedding) is copied above every column, so each copy attends within its column
and the copies then attend to each other within their row; the pooled token is the first copy.

AxialResNet (after Wang et al. 2020, Axial-DeepLab) replaces every 3x3 convolution of a ResNet
by a column then a row ``PositionSensitiveAxialAttention``: attention along one axis whose
queries, keys and values each have learned relative position embeddings (``AxialUnit``).
"""

import math

import keras
from keras import ops

from keras_vit.layers.attention import check_axis, refuse_legacy_weights
from keras_vit.layers.encoder import Encoder, EncoderBlock, block_rate, encoder_config
from keras_vit.layers.resnet import group_norm, standardized_conv


@keras.saving.register_keras_serializable(package="keras_vit")
class AxialEncoderBlock(keras.layers.Layer):
    """Two axial Transformer blocks on a (batch, H, W, D) grid: ``row`` then ``column``.

    ``row`` is an ``EncoderBlock`` whose attention runs within each row (``attention_axis=2``),
    ``column`` one within each column (``attention_axis=1``), both of the same ``EncoderConfig``;
    a ``"relative"`` position embedding gives each attention 1-D relative logits along its axis.
    Both take the pair's ``stochastic_depth_rate``: the pair is one of the config's L blocks.
    ``attention_probabilities(x)`` gives ``[row_probs, column_probs]``, of shapes
    (batch, H, heads, W, W) and (batch, W, heads, H, H).

    Example:
    >>> import numpy as np
    >>> from keras_vit.layers.encoder import EncoderConfig
    >>> block = AxialEncoderBlock(EncoderConfig(num_layers=1, num_heads=2, mlp_dim=16))
    >>> tuple(block(np.ones((2, 3, 4, 8), "float32")).shape)
    (2, 3, 4, 8)
    """

    def __init__(self, config, stochastic_depth_rate=None, **kwargs):
        super().__init__(**kwargs)
        self.config = encoder_config("AxialEncoderBlock", config)
        self.num_heads = self.config.num_heads
        self.stochastic_depth_rate = block_rate(self.config, stochastic_depth_rate)
        pair = dict(stochastic_depth_rate=self.stochastic_depth_rate, dtype=self.dtype_policy)
        self.row = EncoderBlock(self.config, attention_axis=2, name="row", **pair)
        self.column = EncoderBlock(self.config, attention_axis=1, name="column", **pair)

    def build(self, input_shape):
        self.row.build(input_shape)
        self.column.build(input_shape)

    def call(self, inputs, training=None):
        return self.column(self.row(inputs, training=training), training=training)

    def attention_probabilities(self, inputs):
        """``[row probabilities, column probabilities]`` for the pair's input ``inputs``."""
        after_row = self.row(inputs)
        return [*self.row.attention_probabilities(inputs),
                *self.column.attention_probabilities(after_row)]

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), "config": self.config.to_dict(),
                "stochastic_depth_rate": self.stochastic_depth_rate}


def _class_row(tokens, grid, has_class_token):
    """(batch, N, D) tokens (class token first, if any) -> the (batch, H(+1), W, D) grid.

    The class token is copied above every column as a class row.
    """
    rows, cols = grid
    patches = tokens[:, 1:] if has_class_token else tokens
    patches = ops.reshape(patches, (ops.shape(tokens)[0], rows, cols, ops.shape(tokens)[-1]))
    if not has_class_token:
        return patches
    cls = ops.expand_dims(tokens[:, :1], 1)  # (batch, 1, 1, D), broadcast over the columns
    return ops.concatenate([cls + ops.zeros_like(patches[:, :1]), patches], axis=1)


@keras.saving.register_keras_serializable(package="keras_vit")
class AxialEncoder(Encoder):
    """The ``Encoder`` of Axial-ViT: ``encoderblock_{i}`` are ``AxialEncoderBlock`` pairs.

    Same arguments, weights and position options as ``Encoder`` (learned 1-D/2-D tables with
    their placements and any-size interpolation, 1-D relative logits along each axis, none).
    The tokens stay a 2-D grid through the blocks; with ``classifier="token"`` the class token
    is a class row on top of it. Output: the grid flattened row-major, (batch, (H(+1)) * W, D),
    class row first, so ``TokenPooling`` takes the first class-row token or the mean.

    Example:
    >>> import numpy as np
    >>> from keras_vit.layers.encoder import EncoderConfig
    >>> config = EncoderConfig(num_layers=1, num_heads=2, mlp_dim=16)
    >>> encoder = AxialEncoder(config, position_embedding_grid=(3, 4))
    >>> tuple(encoder(np.ones((2, 3, 4, 8), "float32")).shape)  # class row: (3 + 1) * 4
    (2, 16, 8)
    """

    block_class = AxialEncoderBlock

    def _grid_shape(self, rows, cols):
        return (None if rows is None else rows + (self.cls is not None)), cols

    def build(self, input_shape):
        batch, rows, cols, dim = input_shape
        if self.config.relative_position and None in (rows, cols):
            raise ValueError(
                "Relative position embeddings are sized by the grid and need a fixed image "
                "size; give the model an image_size, or use a 'learned_1d' or 'learned_2d' "
                "embedding for any size at call time."
            )
        if self.cls is not None:
            self.cls.build((batch, None, dim))
        learned = (batch, self._num_tokens(*self.position_embedding_grid), dim)
        for layer in self.position_layers:
            layer.build(learned)
        grid = (batch, *self._grid_shape(rows, cols), dim)
        for block in self.blocks:
            block.build(grid)
        self.encoder_norm.build(grid)

    def compute_output_shape(self, input_shape):
        batch, rows, cols, dim = input_shape
        rows, cols = self._grid_shape(rows, cols)
        return (batch, None if None in (rows, cols) else rows * cols, dim)

    def _to_blocks(self, tokens, grid):
        return _class_row(tokens, grid, self.cls is not None)

    def _from_blocks(self, x):
        return ops.reshape(x, (ops.shape(x)[0], -1, ops.shape(x)[-1]))

    def _add_block_position(self, layer, x, grid):
        table = _class_row(self._position_table(layer, grid), grid, self.cls is not None)
        return x + ops.cast(table, x.dtype)


@keras.saving.register_keras_serializable(package="keras_vit")
class PositionSensitiveAxialAttention(keras.layers.Layer):
    """Axial-DeepLab's position-sensitive self-attention along one axis of an NHWC map.

    For the positions o (query) and p (key) of one row (``axis=2``) or column (``axis=1``),
    as Wang et al. (2020, Eq. 4) define it, with relative embeddings for queries, keys and
    values (indexed by the offset p - o):

        y_o = sum_p softmax_p(q_o.k_p + q_o.r^q_{p-o} + k_p.r^k_{p-o}) (v_p + r^v_{p-o})

    per head. q, k, v come from one bias-free 1x1 projection to 2C channels followed by
    GroupNorm (``gn_qkv``); per head, queries and keys have half the width of the values, as in
    the reference; the output is GroupNorm'd (``gn_out``). Logits are not scaled (the norms set
    their range), as in the reference implementations.

    Weights: the projection ``qkv``, a bias-free ``Dense`` of kernel (C, 2C) (what
    ``model.quantize`` and ``enable_lora`` reach), and ``relative_embedding``
    (2C / heads, 2L - 1), one table shared by the heads, L the length of the axis (fixed at
    build: the model needs a fixed image size); rows [0, C/(2h)) hold r^q, then r^k, then r^v.

    Example:
    >>> import numpy as np
    >>> layer = PositionSensitiveAxialAttention(num_heads=2, axis=1)
    >>> tuple(layer(np.ones((2, 5, 3, 32), "float32")).shape)
    (2, 5, 3, 32)
    >>> tuple(layer.relative_embedding.shape)
    (32, 9)
    """

    def __init__(self, num_heads, axis=2, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = int(num_heads)
        self.axis = check_axis(axis)
        self.gn_qkv = group_norm("gn_qkv", style="hybrid", dtype=self.dtype_policy)
        self.gn_out = group_norm("gn_out", style="hybrid", dtype=self.dtype_policy)

    def build(self, input_shape):
        channels, length = input_shape[-1], input_shape[self.axis]
        if channels % (2 * self.num_heads):
            raise ValueError(
                f"The channels ({channels}) must be divisible by 2 * num_heads "
                f"({2 * self.num_heads}): queries and keys take half of each head's width."
            )
        if length is None:
            raise ValueError(
                "PositionSensitiveAxialAttention sizes its relative embeddings by the feature "
                "map; build the model with a fixed image_size."
            )
        self.length = int(length)
        head = channels // self.num_heads
        self.qkv = keras.layers.Dense(
            2 * channels, use_bias=False, dtype=self.dtype_policy, name="qkv",
            kernel_initializer=keras.initializers.RandomNormal(stddev=math.sqrt(1.0 / channels)))
        self.qkv.build(input_shape)
        self.relative_embedding = self.add_weight(
            name="relative_embedding", shape=(2 * head, 2 * self.length - 1),
            initializer=keras.initializers.RandomNormal(stddev=math.sqrt(1.0 / head)))
        self.gn_qkv.build((None, None, None, 2 * channels))
        self.gn_out.build((None, None, None, channels))

    def load_own_variables(self, store):
        # qkv_kernel, then the relative embeddings
        refuse_legacy_weights(self, store, 2, kind="position-sensitive attention")
        super().load_own_variables(store)

    def relative_embeddings(self):
        """r^q, r^k, r^v of shape (width, L, L): entry [:, o, p] is the embedding of p - o."""
        length, head = self.length, self.relative_embedding.shape[0] // 2
        index = [p - o + length - 1 for o in range(length) for p in range(length)]
        table = ops.take(self.relative_embedding, index, axis=1)
        table = ops.reshape(table, (2 * head, length, length))
        return table[: head // 2], table[head // 2 : head], table[head:]

    def call(self, inputs):
        channels, head = inputs.shape[-1], inputs.shape[-1] // self.num_heads
        qkv = self._heads_first(fast_group_norm(self.gn_qkv, self.qkv(inputs)))
        q, k, v = qkv[..., : head // 2], qkv[..., head // 2 : head], qkv[..., head:]
        y = self._attend(q, k, v, ops.cast(self.relative_embedding, inputs.dtype))
        return fast_group_norm(self.gn_out, self._heads_last(y, ops.shape(inputs), channels))

    def _heads_first(self, qkv):
        """(batch, H, W, 2C) -> (batch * other * heads, L, 2C / heads) in one transpose: every
        product of the attention is then a plain batched matmul."""
        batch, height, width = ops.shape(qkv)[:3]
        qkv = ops.reshape(qkv, (batch, height, width, self.num_heads, -1))
        qkv = ops.transpose(qkv, (0, 1, 3, 2, 4) if self.axis == 2 else (0, 2, 3, 1, 4))
        return ops.reshape(qkv, (-1, self.length, qkv.shape[-1]))

    def _heads_last(self, y, shape, channels):
        batch, height, width = shape[:3]
        other = height if self.axis == 2 else width
        y = ops.reshape(y, (batch, other, self.num_heads, self.length, -1))
        y = ops.transpose(y, (0, 1, 3, 2, 4) if self.axis == 2 else (0, 3, 1, 2, 4))
        return ops.reshape(y, (batch, height, width, channels))

    def _attend(self, q, k, v, table):
        """Eq. 4 on (lines, L, width) queries, keys and values; ``table`` the raw (2C / heads,
        2L - 1) embeddings."""
        logits = ops.matmul(q, ops.swapaxes(k, -1, -2)) + self._relative_logits(q, k, table)
        probs = ops.cast(ops.softmax(ops.cast(logits, "float32"), axis=-1), q.dtype)
        y = ops.matmul(probs, v)
        if keras.config.backend() == "jax":
            rv = ops.cast(self.relative_embeddings()[2], q.dtype)
            return y + ops.einsum("nop,dop->nod", probs, rv)
        rv = table[2 * q.shape[-1] :]
        return y + ops.matmul(positions_to_offsets(probs, self.length), ops.transpose(rv))

    def _relative_logits(self, q, k, table):
        """q_o.r^q_{p-o} + k_p.r^k_{p-o}, (lines, L, L), in the form each backend runs fastest
        on the CPU (benchmarks/axial.py has the timings)."""
        half, length = q.shape[-1], self.length
        if keras.config.backend() != "jax":
            # Eager torch and TensorFlow (no XLA on the CPU) materialise every op: matmuls
            # against the raw table, shifted into place; seen from the key, its term is the
            # query term of the reversed table.
            rq, rk = table[:half], ops.flip(table[half : 2 * half], axis=1)
            key_term = offsets_to_positions(ops.matmul(k, rk), length)
            return (offsets_to_positions(ops.matmul(q, rq), length)
                    + ops.swapaxes(key_term, -1, -2))
        rq, rk, _ = (ops.cast(r, q.dtype) for r in self.relative_embeddings())
        if half <= 4:
            # XLA fuses these few broadcast products into one loop over the logits.
            terms = [q[..., d, None] * rq[d] + k[..., None, :, d] * rk[d] for d in range(half)]
            return sum(terms[1:], terms[0])
        # Wider, that sum ran 3-4x slower than matmuls batched over the position.
        by_query = ops.matmul(ops.transpose(q, (1, 0, 2)), ops.transpose(rq, (1, 0, 2)))
        by_key = ops.matmul(ops.transpose(k, (1, 0, 2)), ops.transpose(rk, (2, 0, 1)))
        return ops.transpose(by_query, (1, 0, 2)) + ops.transpose(by_key, (1, 2, 0))

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(num_heads=self.num_heads, axis=self.axis)
        return config


def offsets_to_positions(x, length):
    """(n, L, 2L - 1) -> (n, L, L): ``out[:, o, p] = x[:, o, p - o + L - 1]``.

    Row o starts L - 1 - o entries into its own row of x: in the flat array, L - 1 + o (2L - 2),
    so a slice read with rows of 2L - 2 entries picks every row's window without a gather.
    """
    if length == 1:  # rows of no entries
        return x
    n = ops.shape(x)[0]
    flat = ops.reshape(x, (n, length * (2 * length - 1)))
    flat = flat[:, length - 1 : length - 1 + length * (2 * length - 2)]
    return ops.reshape(flat, (n, length, 2 * length - 2))[..., :length]


def positions_to_offsets(x, length):
    """(n, L, L) -> (n, L, 2L - 1), the inverse shift: ``out[:, o, p - o + L - 1] = x[:, o, p]``
    and zero where no key has that offset (rows of 2L - 1 read back with rows of 2L)."""
    n = ops.shape(x)[0]
    flat = ops.reshape(ops.pad(x, ((0, 0), (0, 0), (0, length - 1))),
                       (n, length * (2 * length - 1)))
    flat = ops.pad(flat, ((0, 0), (length - 1, 1)))
    return ops.reshape(flat, (n, length, 2 * length))[..., : 2 * length - 1]


def fast_group_norm(norm, x):
    """``norm`` (a ``GroupNormalization`` over the last axis) applied to an NHWC map.

    The same statistics (group mean, then the mean squared deviation), reduced over the
    positions per channel first: reducing each group's (positions, channels-in-group) block at
    once, as the Keras layer does, runs several times slower on the CPU for groups of 2-4
    channels.
    """
    channels = x.shape[-1]
    size = channels // norm.groups
    x32 = ops.cast(x, "float32")

    def group_mean(t):
        t = ops.reshape(ops.mean(t, axis=(1, 2)), (-1, norm.groups, size))
        t = ops.repeat(ops.mean(t, axis=-1, keepdims=True), size, axis=-1)
        return ops.reshape(t, (-1, 1, 1, channels))

    mean = group_mean(x32)
    scale = ops.rsqrt(group_mean(ops.square(x32 - mean)) + norm.epsilon)
    scale = scale * ops.cast(norm.gamma, "float32")
    out = x32 * scale + (ops.cast(norm.beta, "float32") - mean * scale)
    return ops.cast(out, norm.compute_dtype)


@keras.saving.register_keras_serializable(package="keras_vit")
class AxialUnit(keras.layers.Layer):
    """AxialResNet bottleneck: the ResNet unit with its 3x3 convolution made axial attention.

    ``y = relu(gn1(conv1(x)))`` (1x1 to ``features``), then ``column`` and ``row``
    ``PositionSensitiveAxialAttention`` (along the height, then the width), a 2x2 average pool
    when ``strides=2``, ReLU, ``y = gn3(conv3(y))`` (1x1 to ``4 * features``, zero-initialised
    scale), shortcut ``gn_proj(conv_proj(x))`` when the shape changes, output
    ``relu(shortcut + y)``: the post-activation unit with weight-standardised convolutions and
    GroupNorm of the hybrid stem (``PostActivationUnit``), as scenic's AxialResNet has it.

    Example:
    >>> import numpy as np
    >>> unit = AxialUnit(features=32, strides=2, num_heads=2)
    >>> tuple(unit(np.ones((1, 6, 6, 64), "float32")).shape)
    (1, 3, 3, 128)
    """

    def __init__(self, features, strides=1, num_heads=8, **kwargs):
        super().__init__(**kwargs)
        self.features = int(features)
        self.strides = int(strides)
        self.num_heads = int(num_heads)
        if self.strides not in (1, 2):
            raise ValueError(f"strides must be 1 or 2, got {strides}.")
        conv = dict(style="hybrid", dtype=self.dtype_policy)
        self.conv1 = standardized_conv(self.features, 1, name="conv1", **conv)
        self.gn1 = group_norm("gn1", **conv)
        attention = dict(num_heads=self.num_heads, dtype=self.dtype_policy)
        self.column = PositionSensitiveAxialAttention(axis=1, name="column", **attention)
        self.row = PositionSensitiveAxialAttention(axis=2, name="row", **attention)
        self.pool = keras.layers.AveragePooling2D(2, padding="same", dtype=self.dtype_policy,
                                                  name="pool")
        self.conv3 = standardized_conv(4 * self.features, 1, name="conv3", **conv)
        self.gn3 = group_norm("gn3", zero_scale=True, **conv)
        self.conv_proj = self.gn_proj = None

    def build(self, input_shape):
        batch, height, width, channels = input_shape
        out = 4 * self.features
        if channels != out or self.strides != 1:
            conv = dict(style="hybrid", dtype=self.dtype_policy)
            self.conv_proj = standardized_conv(out, 1, strides=self.strides, name="conv_proj",
                                               **conv)
            self.gn_proj = group_norm("gn_proj", **conv)
            self.conv_proj.build(input_shape)
            self.gn_proj.build((None, None, None, out))
        self.conv1.build(input_shape)
        self.gn1.build((None, None, None, self.features))
        inner = (batch, height, width, self.features)
        self.column.build(inner)
        self.row.build(inner)
        self.conv3.build(inner)
        self.gn3.build((None, None, None, out))

    def call(self, inputs):
        y = ops.relu(self.gn1(self.conv1(inputs)))
        y = self.row(self.column(y))
        if self.strides == 2:
            y = self.pool(y)
        y = self.gn3(self.conv3(ops.relu(y)))
        shortcut = inputs if self.conv_proj is None else self.gn_proj(self.conv_proj(inputs))
        return ops.relu(shortcut + y)

    def compute_output_shape(self, input_shape):
        batch, height, width, _ = input_shape
        sides = [None if n is None else -(-n // self.strides) for n in (height, width)]
        return (batch, *sides, 4 * self.features)

    def get_config(self):
        config = super().get_config()
        config.update(features=self.features, strides=self.strides, num_heads=self.num_heads)
        return config
