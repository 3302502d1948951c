"""The attention's projections are Keras Dense layers initialised as the official code does."""

import keras
import numpy as np
import pytest

from keras_vit.layers.attention import FlatGlorotUniform, MultiHeadSelfAttention


def test_projections_are_dense_sublayers_holding_the_official_tensors():
    layer = MultiHeadSelfAttention(num_heads=4)
    layer.build((None, 5, 32))
    for name in ("query", "key", "value", "out"):
        projection = getattr(layer, name)
        assert type(projection) is keras.layers.Dense and projection.name == name
        assert tuple(projection.kernel.shape) == (32, 32) and tuple(projection.bias.shape) == (32,)
    # no raw weights of its own: every weight belongs to a projection
    assert {v.path.rsplit("/", 2)[-2] for v in layer.weights} == {"query", "key", "value", "out"}


def test_flat_glorot_draws_with_the_flattened_fans_and_round_trips():
    initializer = FlatGlorotUniform(64, 192)
    values = keras.ops.convert_to_numpy(initializer((64, 4, 48)))
    limit = np.sqrt(6 / (64 + 192))
    assert np.abs(values).max() <= limit and np.abs(values).max() > 0.95 * limit
    config = keras.saving.serialize_keras_object(initializer)
    assert config["registered_name"] == "keras_vit>FlatGlorotUniform"
    assert keras.saving.deserialize_keras_object(config).get_config() == {"fan_in": 64,
                                                                          "fan_out": 192}


def test_raw_projection_weights_of_a_saved_file_are_refused_with_the_fix():
    layer = MultiHeadSelfAttention(num_heads=2)
    layer.build((None, 5, 8))
    old = {str(i): np.zeros(1) for i in range(8)}  # query_kernel, query_bias, ..., out_bias
    with pytest.raises(ValueError, match="raw weights.*upgrade_keras_file"):
        layer.load_own_variables(old)
    layer.load_own_variables({})  # today's layout: nothing of its own
