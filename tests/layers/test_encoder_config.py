"""The encoder's settings: one frozen ``EncoderConfig``, checked once, serialised once."""

import dataclasses
import json

import pytest

import keras_vit
from keras_vit.layers.encoder import Encoder, EncoderBlock, EncoderConfig


@pytest.mark.parametrize("settings, message", [
    (dict(num_heads=0), "num_heads must be a positive integer"),
    (dict(mlp_dim=2.5), "mlp_dim must be a positive integer"),
    (dict(hidden_size=30), r"hidden_size \(30\) must be divisible by num_heads \(4\)"),
    (dict(dropout_rate=1.0), r"dropout_rate must be in \[0, 1\)"),
    (dict(layer_norm_epsilon=0), "layer_norm_epsilon must be positive"),
    (dict(classifier="mean"), "Unknown classifier 'mean'"),
    (dict(position_embedding="sinusoid"), "Unknown position_embedding 'sinusoid'"),
    (dict(position_embedding="none", position_embedding_placement="every_layer"),
     "places a learned absolute embedding"),
    (dict(position_embedding="learned_2d", hidden_size=9, num_heads=3), "must be even"),
    (dict(remat=True, attention_dropout_rate=0.1), "remat=True needs dropout_rate=0"),
])
def test_each_setting_is_checked_with_a_clear_error(settings, message):
    with pytest.raises(ValueError, match=message):
        EncoderConfig(**dict(dict(num_layers=2, num_heads=4, mlp_dim=64), **settings))


def test_the_model_checks_through_the_same_object():
    with pytest.raises(ValueError, match="must be divisible by num_heads"):
        keras_vit.ViTImageClassifier(image_size=8, patch_size=4, hidden_size=10, num_layers=1,
                                     num_heads=3, mlp_dim=16)


def test_frozen_and_round_trips_through_json():
    config = EncoderConfig(num_layers=2, num_heads=4, mlp_dim=64, hidden_size=32,
                           position_embedding="relative", layer_norm_epsilon=1e-12)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.num_layers = 3
    assert EncoderConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    assert config.relative_position and config.replace(position_embedding="none") != config
    with pytest.raises(TypeError, match="no setting num_blocks"):
        EncoderConfig.from_dict(dict(config.to_dict(), num_blocks=2))


def test_model_hands_one_object_to_the_encoder_and_its_blocks():
    model = keras_vit.ViTImageClassifier(image_size=8, patch_size=4, hidden_size=8,
                                         num_layers=2, num_heads=2, mlp_dim=16,
                                         layer_norm_epsilon=1e-5)
    encoder = model.backbone.encoder
    assert encoder.config is model.config.encoder
    assert all(block.config is encoder.config for block in encoder.blocks)
    assert encoder.config.layer_norm_epsilon == 1e-5
    assert encoder.get_config()["config"] == encoder.config.to_dict()
    assert Encoder.from_config(encoder.get_config()).config == encoder.config


def test_the_layers_take_the_object_only():
    from keras_vit.layers.axial import AxialEncoderBlock

    config = EncoderConfig(num_layers=1, num_heads=4, mlp_dim=64)
    for layer in (EncoderBlock(config), AxialEncoderBlock(config),
                  Encoder(config, position_embedding_grid=(2, 2))):
        assert type(layer).from_config(layer.get_config()).config == config
    with pytest.raises(TypeError, match="takes an EncoderConfig"):
        EncoderBlock(4, 64)
    with pytest.raises(TypeError, match="takes an EncoderConfig"):
        AxialEncoderBlock(None)
    with pytest.raises(ValueError, match="Unrecognized keyword arguments"):  # one by one: no
        EncoderBlock(config, num_heads=4)
    with pytest.raises(TypeError, match="no setting num_blocks"):
        Encoder(dict(config.to_dict(), num_blocks=2), position_embedding_grid=(2, 2))
