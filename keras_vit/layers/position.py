"""Position embeddings (paper Sec. 3.1, Eq. 1; Sec. 3.2 and Appendix D.4) and their resize.

The default is the learned 1-D embedding ``E_pos`` of shape (1, N, D), added to every token after
the class token has been prepended (row 0 belongs to the class token). When fine-tuning at a
higher resolution, the paper performs a 2-D interpolation of the pre-trained grid
(Sec. 3.2); ``resize_position_embedding`` is the official code's version of that.

Appendix D.4 (Table 8) compares other ways of giving the model spatial information; they are
``position_embedding=...`` options of the encoder (``EncoderConfig``) built from the layers here:

- ``"learned_1d"``: ``AddPositionEmbedding`` (the default; the only one official files hold);
- ``"learned_2d"``: ``AddPositionEmbedding2D``, an X and a Y embedding of size D/2 each,
  concatenated per patch;
- ``"relative"``: ``RelativePositionLogits``, 1-D relative attention whose logits are added as a
  bias before the softmax of every attention layer;
- ``"none"``: no position information at all.

The absolute (1-D and 2-D) embeddings can be added once after the stem (``"stem"``, the default),
before every block with a separate embedding each (``"every_layer"``), or before every block with
one shared embedding (``"every_layer_shared"``): ``position_embedding_placement=`` of the
encoder (``EncoderConfig``).
"""

import math

import keras
import numpy as np
import scipy.ndimage
from keras import ops

from keras_vit.checks import pair

POSITION_EMBEDDINGS = ("learned_1d", "learned_2d", "relative", "none")
PLACEMENTS = ("stem", "every_layer", "every_layer_shared")


@keras.saving.register_keras_serializable(package="keras_vit")
class AddPositionEmbedding(keras.layers.Layer):
    """Add a learned 1-D position embedding ``pos_embedding`` of shape (1, N, D).

    Initialised from N(0, 0.02) like the official ``posembed_input`` module.

    Example:
    >>> import numpy as np
    >>> tuple(AddPositionEmbedding()(np.zeros((2, 17, 8), "float32")).shape)
    (2, 17, 8)
    """

    def __init__(self, initializer_stddev=0.02, **kwargs):
        super().__init__(**kwargs)
        self.initializer_stddev = float(initializer_stddev)

    def build(self, input_shape):
        if input_shape[1] is None:
            raise ValueError(
                "AddPositionEmbedding needs a known number of tokens; build the model with a fixed "
                "image size."
            )
        self.pos_embedding = self.add_weight(
            name="pos_embedding",
            shape=(1, input_shape[1], input_shape[2]),
            initializer=keras.initializers.RandomNormal(stddev=self.initializer_stddev),
        )

    def position_embeddings(self):
        """The (1, N, D) table added to the tokens (row 0 is the class token's, if any)."""
        return self.pos_embedding

    def call(self, inputs):
        return inputs + keras.ops.cast(self.pos_embedding, inputs.dtype)

    def get_config(self):
        config = super().get_config()
        config.update(initializer_stddev=self.initializer_stddev)
        return config


def _grid_shape(grid, name="grid_size"):
    return pair(name, grid, sides=("rows", "cols"))


@keras.saving.register_keras_serializable(package="keras_vit")
class AddPositionEmbedding2D(keras.layers.Layer):
    """Add a learned 2-D position embedding (paper Appendix D.4, "2-dimensional").

    Two tables are learned: ``col_embedding`` (cols, D/2), the X embedding, and
    ``row_embedding`` (rows, D/2), the Y embedding. The patch at (row r, column c) of the
    row-major grid gets ``concat(col_embedding[c], row_embedding[r])``. When the sequence has one
    more token than the grid (a class token at index 0), that token gets its own learned
    ``cls_embedding`` (1, D). Tables start from N(0, 0.02), like the 1-D embedding.

    Args:
        grid_size: (rows, cols) of the patch grid, or an int for a square grid.
        initializer_stddev: standard deviation of the initial values.

    Example:
    >>> import numpy as np
    >>> layer = AddPositionEmbedding2D(grid_size=(2, 3))
    >>> tuple(layer(np.zeros((4, 7, 8), "float32")).shape)
    (4, 7, 8)
    >>> [tuple(w.shape) for w in layer.weights]
    [(3, 4), (2, 4), (1, 8)]
    """

    def __init__(self, grid_size, initializer_stddev=0.02, **kwargs):
        super().__init__(**kwargs)
        self.grid_size = _grid_shape(grid_size)
        self.initializer_stddev = float(initializer_stddev)

    def build(self, input_shape):
        rows, cols = self.grid_size
        tokens, dim = input_shape[1], input_shape[2]
        if dim % 2:
            raise ValueError(
                f"A 2-D position embedding splits the width into X and Y halves, so hidden_size "
                f"must be even; got {dim}. Use an even hidden_size or position_embedding="
                "'learned_1d'."
            )
        if tokens not in (rows * cols, rows * cols + 1):
            raise ValueError(
                f"AddPositionEmbedding2D for a {rows}x{cols} grid expects {rows * cols} tokens "
                f"(or {rows * cols + 1} with a class token), got {tokens}. Pass the grid_size of "
                "the patch grid the tokens come from."
            )
        self.has_class_token = tokens == rows * cols + 1
        init = keras.initializers.RandomNormal(stddev=self.initializer_stddev)
        self.col_embedding = self.add_weight(
            name="col_embedding", shape=(cols, dim // 2), initializer=init
        )
        self.row_embedding = self.add_weight(
            name="row_embedding", shape=(rows, dim // 2), initializer=init
        )
        self.cls_embedding = None
        if self.has_class_token:
            self.cls_embedding = self.add_weight(
                name="cls_embedding", shape=(1, dim), initializer=init
            )

    def position_embeddings(self):
        """The (1, N, D) table added to the tokens (row 0 is the class token's, if any)."""
        rows, cols = self.grid_size
        half = self.col_embedding.shape[-1]
        x = ops.broadcast_to(self.col_embedding[None, :, :], (rows, cols, half))
        y = ops.broadcast_to(self.row_embedding[:, None, :], (rows, cols, half))
        grid = ops.reshape(ops.concatenate([x, y], axis=-1), (1, rows * cols, 2 * half))
        if self.cls_embedding is None:
            return grid
        return ops.concatenate([self.cls_embedding[None], grid], axis=1)

    def call(self, inputs):
        return inputs + ops.cast(self.position_embeddings(), inputs.dtype)

    def get_config(self):
        config = super().get_config()
        config.update(grid_size=list(self.grid_size), initializer_stddev=self.initializer_stddev)
        return config


@keras.saving.register_keras_serializable(package="keras_vit")
class RelativePositionLogits(keras.layers.Layer):
    """1-D relative attention logits (paper Appendix D.4, "Relative positional embeddings").

    Every offset ``i - j`` between a query token i and a key token j of the N-token sequence
    (the class token, when present, is simply token 0) has a learned embedding. The layer runs the
    extra attention the paper describes: the original queries against these embeddings used as
    keys, giving logits ``b[h, i, j] = q[i, h] . r[i - j, h]`` that the attention layer adds to its
    content logits before the softmax.

    Weight: ``embedding`` of shape (2N - 1, heads, head_dim), one table per attention layer with
    separate embeddings per head (row ``i - j + N - 1`` holds offset ``i - j``), from N(0, 0.02).

    Input: queries (batch, N, heads, head_dim), already scaled by 1/sqrt(head_dim) as the content
    logits are; output: (batch, heads, N, N).

    Example:
    >>> import numpy as np
    >>> layer = RelativePositionLogits()
    >>> tuple(layer(np.ones((2, 5, 4, 8), "float32")).shape)
    (2, 4, 5, 5)
    >>> tuple(layer.embedding.shape)
    (9, 4, 8)
    """

    def __init__(self, initializer_stddev=0.02, **kwargs):
        super().__init__(**kwargs)
        self.initializer_stddev = float(initializer_stddev)

    def build(self, query_shape):
        if len(query_shape) != 4:
            raise ValueError(
                "RelativePositionLogits expects queries of shape (batch, tokens, heads, head_dim), "
                f"got {tuple(query_shape)}."
            )
        tokens, heads, head_dim = query_shape[1:]
        if tokens is None:
            raise ValueError(
                "Relative position embeddings need a known number of tokens; build the model with "
                "a fixed image size."
            )
        self.num_tokens = int(tokens)
        self.embedding = self.add_weight(
            name="embedding",
            shape=(2 * tokens - 1, heads, head_dim),
            initializer=keras.initializers.RandomNormal(stddev=self.initializer_stddev),
        )
        # Row i of the (N, 2N-1) logits of query i holds offsets i-j at column i - j + N - 1;
        # flattening (i, column) lets one gather pick every (i, j) pair.
        i = np.arange(tokens)[:, None]
        j = np.arange(tokens)[None, :]
        self._gather_index = (i * (2 * tokens - 1) + i - j + tokens - 1).reshape(-1)

    def call(self, query):
        tokens = self.num_tokens
        heads = self.embedding.shape[1]
        logits = ops.einsum("bqhd,rhd->bhqr", query, ops.cast(self.embedding, query.dtype))
        logits = ops.reshape(logits, (-1, heads, tokens * (2 * tokens - 1)))
        logits = ops.take(logits, self._gather_index, axis=-1)
        return ops.reshape(logits, (-1, heads, tokens, tokens))

    def compute_output_shape(self, query_shape):
        batch, tokens, heads, _ = query_shape
        return (batch, heads, tokens, tokens)

    def get_config(self):
        config = super().get_config()
        config.update(initializer_stddev=self.initializer_stddev)
        return config


def absolute_position_layer(kind, grid_size, name, dtype=None):
    """The layer adding an absolute position embedding of ``kind`` ('learned_1d', 'learned_2d')."""
    if kind == "learned_1d":
        return AddPositionEmbedding(dtype=dtype, name=name)
    if kind == "learned_2d":
        return AddPositionEmbedding2D(grid_size, dtype=dtype, name=name)
    raise ValueError(
        f"{kind!r} is not an absolute position embedding; use 'learned_1d' or 'learned_2d'."
    )


def table_grid(count, grid=None, argument="old_grid"):
    """The (rows, cols) grid of a table with ``count`` grid rows: ``grid`` when stated, else square.

    A bare table cannot say its shape: only a square count is read without ``grid``; any other
    count is refused with an error that names ``argument``, the caller's way to state it.
    """
    if grid is not None:
        rows, cols = _grid_shape(grid, argument)
        if rows * cols != count:
            raise ValueError(
                f"{argument}={grid!r} has {rows * cols} positions but the position embedding "
                f"has {count} grid rows; pass the (rows, cols) grid it was learned at."
            )
        return rows, cols
    side = math.isqrt(count)
    if side * side != count:
        raise ValueError(
            f"The position embedding has {count} grid rows, which is not a square grid, and a "
            f"bare table does not record its grid: pass {argument}=(rows, cols), the grid it was "
            f"learned at (rows * cols = {count})."
        )
    return side, side


def resize_position_embedding(posemb, new_grid, has_class_token, old_grid=None):
    """Resize a (1, N, D) position embedding to another grid, as the official code does.

    This is ``vit_jax.checkpoint.interpolate_posembed`` per axis: the class-token row (when
    present) is kept unchanged; the grid is resampled with ``scipy.ndimage.zoom(order=1)`` and the
    factors (new rows / old rows, new cols / old cols), i.e. separable bilinear interpolation with
    aligned corners and no antialiasing, computed in float64 and cast back. For square grids this
    is exactly the official function.

    Args:
        posemb: numpy array (1, N, D), N = rows*cols (+1 with a class token).
        new_grid: the new (rows, cols), or an int for a square grid.
        has_class_token: whether row 0 is the class token's embedding.
        old_grid: the (rows, cols) grid of ``posemb``; needed only when it is not square (a
            table does not record its grid).

    Returns:
        numpy array ``(1, rows' * cols' (+1), D)`` with the input's dtype.

    Example:
    >>> import numpy as np
    >>> resize_position_embedding(np.zeros((1, 17, 8), "float32"), 6, True).shape
    (1, 37, 8)
    >>> resize_position_embedding(np.zeros((1, 12, 8), "float32"), (3, 5), False,
    ...                           old_grid=(2, 6)).shape
    (1, 15, 8)
    """
    posemb = np.asarray(posemb)
    if posemb.ndim != 3 or posemb.shape[0] != 1:
        raise ValueError(f"Expected a position embedding of shape (1, N, D), got {posemb.shape}.")
    new_rows, new_cols = _grid_shape(new_grid, "new_grid")
    if has_class_token:
        token, grid = posemb[:, :1], posemb[0, 1:]
    else:
        token, grid = posemb[:, :0], posemb[0]
    old_rows, old_cols = table_grid(len(grid), old_grid)
    if (old_rows, old_cols) == (new_rows, new_cols):
        return posemb.copy()
    grid = grid.reshape(old_rows, old_cols, -1).astype(np.float64)
    zoom = (new_rows / old_rows, new_cols / old_cols, 1)
    grid = scipy.ndimage.zoom(grid, zoom, order=1)
    grid = grid.reshape(1, new_rows * new_cols, -1).astype(posemb.dtype)
    return np.concatenate([token, grid], axis=1)


def _linear_resize_matrix(new_length, old_length):
    """(new, old) weights of a corner-aligned linear resize, the 1-D step of ``zoom(order=1)``.

    Output row i samples the old axis at i * (old - 1) / (new - 1) (row 0 when new is 1, as
    scipy does); ``new_length`` may be a tensor (a dynamic image size under tf.function).
    """
    position = ops.arange(new_length, dtype="float32")
    step = ops.cast(old_length - 1, "float32") / ops.cast(
        ops.maximum(new_length - 1, 1), "float32"
    )
    source = position * step
    low = ops.minimum(ops.floor(source), old_length - 1)
    frac = (source - low)[:, None]
    low = ops.cast(low, "int32")
    high = ops.minimum(low + 1, old_length - 1)
    return ops.one_hot(low, old_length) * (1 - frac) + ops.one_hot(high, old_length) * frac


def interpolate_position_embedding(table, old_grid, new_grid, has_class_token):
    """``resize_position_embedding`` in ``keras.ops``, for a grid known only at call time.

    The same math (class-token row kept, separable bilinear interpolation with aligned corners),
    written as two small matrix products so that it runs inside a model's call on every backend,
    also for non-square grids and for sizes that are tensors. Computed in float32.

    Args:
        table: (1, N, D) tensor, N = rows*cols (+1 with a class token).
        old_grid: (rows, cols) of ``table``, ints.
        new_grid: (rows', cols'), ints or scalar tensors.
        has_class_token: whether row 0 is the class token's embedding.

    Example:
    >>> import numpy as np
    >>> table = np.random.default_rng(0).normal(size=(1, 17, 8)).astype("float32")
    >>> ours = interpolate_position_embedding(table, (4, 4), (6, 6), True)
    >>> reference = resize_position_embedding(table, 6, True)
    >>> bool(np.abs(keras.ops.convert_to_numpy(ours) - reference).max() < 1e-5)
    True
    """
    old_rows, old_cols = (int(v) for v in old_grid)
    new_rows, new_cols = new_grid
    dtype = table.dtype
    table = ops.cast(table, "float32")
    token, grid = (table[:, :1], table[:, 1:]) if has_class_token else (None, table)
    grid = ops.reshape(grid, (old_rows, old_cols, -1))
    rows = _linear_resize_matrix(new_rows, old_rows)
    cols = _linear_resize_matrix(new_cols, old_cols)
    grid = ops.einsum("ri,ijd,cj->rcd", rows, grid, cols)
    grid = ops.reshape(grid, (1, -1, ops.shape(table)[-1]))
    if has_class_token:
        grid = ops.concatenate([token, grid], axis=1)
    return ops.cast(grid, dtype)
