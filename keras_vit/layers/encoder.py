"""The Transformer encoder block (paper Sec. 3.1, Eq. 2-3).

    z'_l = MSA(LN(z_{l-1})) + z_{l-1}
    z_l  = MLP(LN(z'_l)) + z'_l

LayerNorm epsilon is 1e-6 and the GELU is the tanh approximation, both as in the official
checkpoints (Keras defaults, 1e-3 and exact GELU, move logits by up to 1e-3). Under mixed
precision, ``keras.ops.layer_normalization`` computes the statistics in float32 whatever the
input dtype; only the normalised output is cast back to the compute dtype.
Sub-layer names follow the official (pre-Linen) module paths, so the checkpoint map is a table.
"""

import keras
from keras import ops

from keras_vit.layers.attention import MultiHeadSelfAttention

LAYER_NORM_EPSILON = 1e-6


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
        x = ops.gelu(x, approximate=self.approximate_gelu)
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
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
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
        self.MultiHeadDotProductAttention_1 = MultiHeadSelfAttention(
            self.num_heads,
            attention_dropout_rate=self.attention_dropout_rate,
            relative_position=self.relative_position,
            dtype=self.dtype_policy,
            name="MultiHeadDotProductAttention_1",
        )
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
        )
        return config
