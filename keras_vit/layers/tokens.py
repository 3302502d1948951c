"""The learnable class token (paper Sec. 3.1, Eq. 1: z_0^0 = x_class)."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_vit")
class ClassToken(keras.layers.Layer):
    """Prepend a learned ``[class]`` embedding to a token sequence.

    Input (batch, N, D); output (batch, N + 1, D) with the class token at index 0. The weight
    ``cls`` has shape (1, 1, D) and starts at zero, as in the official code.

    Example:
    >>> import numpy as np
    >>> tuple(ClassToken()(np.ones((2, 4, 8), "float32")).shape)
    (2, 5, 8)
    """

    def build(self, input_shape):
        self.cls = self.add_weight(
            name="cls", shape=(1, 1, input_shape[-1]), initializer="zeros", trainable=True
        )

    def call(self, inputs):
        batch = ops.shape(inputs)[0]
        cls = ops.broadcast_to(ops.cast(self.cls, inputs.dtype), (batch, 1, inputs.shape[-1]))
        return ops.concatenate([cls, inputs], axis=1)

    def compute_output_shape(self, input_shape):
        batch, tokens, dim = input_shape
        return (batch, None if tokens is None else tokens + 1, dim)


CLASSIFIERS = ("token", "gap")


@keras.saving.register_keras_serializable(package="keras_vit")
class TokenPooling(keras.layers.Layer):
    """Pool the encoder output into one vector: the class token, or the mean of all tokens.

    ``classifier="token"`` takes z_L^0 (paper Eq. 4); ``classifier="gap"`` averages every token
    (the paper's global-average-pooling head, Appendix D.3, used without a class token).

    Example:
    >>> import numpy as np
    >>> tuple(TokenPooling("gap")(np.ones((2, 5, 8), "float32")).shape)
    (2, 8)
    """

    def __init__(self, classifier="token", **kwargs):
        super().__init__(**kwargs)
        if classifier not in CLASSIFIERS:
            raise ValueError(
                f"Unknown classifier {classifier!r}; use one of {CLASSIFIERS} "
                "('token' for the class token, 'gap' for global average pooling)."
            )
        self.classifier = classifier

    def call(self, inputs):
        if self.classifier == "token":
            return inputs[:, 0]
        return ops.mean(inputs, axis=1)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[2])

    def get_config(self):
        config = super().get_config()
        config.update(classifier=self.classifier)
        return config
