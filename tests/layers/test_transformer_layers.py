"""Configs of the Transformer layers round-trip, with every constructor argument kept."""

import json

from keras_vit.layers.attention import MultiHeadSelfAttention
from keras_vit.layers.encoder import EncoderBlock, MlpBlock


def test_transformer_layer_configs_round_trip():
    for layer in (MlpBlock(64, dropout_rate=0.1, approximate_gelu=False),
                  MultiHeadSelfAttention(4, attention_dropout_rate=0.2, relative_position=True),
                  EncoderBlock(4, 64, dropout_rate=0.1, attention_dropout_rate=0.1,
                               approximate_gelu=False, relative_position=True)):
        config = layer.get_config()
        json.dumps(config)
        assert type(layer).from_config(config).get_config() == config
    assert MlpBlock(64, approximate_gelu=False).get_config()["approximate_gelu"] is False
