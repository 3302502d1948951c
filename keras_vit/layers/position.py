"""Position embeddings (paper Sec. 3.1, Eq. 1; Sec. 3.2 and Appendix D.4) and their resize.

The default is the learned 1-D embedding ``E_pos`` of shape (1, N, D), added to every token after
the class token has been prepended (row 0 belongs to the class token). When fine-tuning at a
higher resolution, the paper performs a 2-D interpolation of the pre-trained grid
(Sec. 3.2); ``resize_position_embedding`` is the official code's version of that.
"""

import math

import keras
import numpy as np
import scipy.ndimage


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

    def call(self, inputs):
        return inputs + keras.ops.cast(self.pos_embedding, inputs.dtype)

    def get_config(self):
        config = super().get_config()
        config.update(initializer_stddev=self.initializer_stddev)
        return config


def _square_side(count, what):
    side = int(math.isqrt(count))
    if side * side != count:
        raise ValueError(
            f"{what} has {count} grid positions, which is not a square grid. The official "
            "checkpoint format and its resize only express square grids of patches."
        )
    return side


def resize_position_embedding(posemb, new_grid, has_class_token):
    """Resize a (1, N, D) position embedding to a new square grid, as the official code does.

    This is ``vit_jax.checkpoint.interpolate_posembed``: the class-token row (when present) is kept
    unchanged; the grid is resampled with ``scipy.ndimage.zoom(order=1)``, i.e. separable bilinear
    interpolation with aligned corners and no antialiasing, computed in float64 and cast back.

    Args:
        posemb: numpy array (1, N, D), N = g*g (+1 with a class token).
        new_grid: the new side g' as an int, or a (rows, cols) pair with rows == cols.
        has_class_token: whether row 0 is the class token's embedding.

    Returns:
        numpy array (1, g'*g' (+1), D) with the input's dtype.

    Example:
    >>> import numpy as np
    >>> resize_position_embedding(np.zeros((1, 17, 8), "float32"), 6, True).shape
    (1, 37, 8)
    """
    posemb = np.asarray(posemb)
    if posemb.ndim != 3 or posemb.shape[0] != 1:
        raise ValueError(f"Expected a position embedding of shape (1, N, D), got {posemb.shape}.")
    if isinstance(new_grid, (tuple, list)):
        if len(new_grid) != 2:
            raise ValueError(f"new_grid must be an int or a (rows, cols) pair, got {new_grid!r}.")
        rows, cols = (int(v) for v in new_grid)
        if rows != cols:
            raise ValueError(
                f"Cannot resize to a non-square {rows}x{cols} grid: the official "
                "position-embedding format and its resize only express square grids. Use a "
                f"square image size (e.g. {max(rows, cols)}x{max(rows, cols)} patches)."
            )
        new_side = rows
    else:
        new_side = int(new_grid)
    if new_side < 1:
        raise ValueError(f"new_grid must be at least 1, got {new_side}.")
    if has_class_token:
        token, grid = posemb[:, :1], posemb[0, 1:]
    else:
        token, grid = posemb[:, :0], posemb[0]
    old_side = _square_side(len(grid), "The position embedding")
    if old_side == new_side:
        return posemb.copy()
    grid = grid.reshape(old_side, old_side, -1).astype(np.float64)
    zoom = (new_side / old_side, new_side / old_side, 1)
    grid = scipy.ndimage.zoom(grid, zoom, order=1)
    grid = grid.reshape(1, new_side * new_side, -1).astype(posemb.dtype)
    return np.concatenate([token, grid], axis=1)
