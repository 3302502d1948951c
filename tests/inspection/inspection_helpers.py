"""Tiny models and helpers shared by the inspection tests."""

import keras
import numpy as np

from keras_vit import ViTImageClassifier


def build_vit(classifier="token", image_size=16, patch_size=4, num_layers=3, num_channels=3,
              hidden_size=16, num_heads=2, **kwargs):
    keras.utils.set_random_seed(0)
    return ViTImageClassifier(
        image_size=image_size, patch_size=patch_size, hidden_size=hidden_size,
        num_layers=num_layers, num_heads=num_heads, mlp_dim=32, num_classes=5,
        classifier=classifier, num_channels=num_channels,
        head_kernel_initializer="glorot_uniform", **kwargs,
    )


def zero_query_key(model):
    """Zero query/key kernels and biases: every attention map becomes uniform."""
    for i in range(model.config.encoder.num_layers):
        attention = model.get_layer(f"encoderblock_{i}").MultiHeadDotProductAttention_1
        for variable in (attention.query.kernel, attention.query.bias, attention.key.kernel,
                         attention.key.bias):
            variable.assign(np.zeros(variable.shape, "float32"))
    return model


def to_numpy(x):
    return np.asarray(keras.ops.convert_to_numpy(x))
