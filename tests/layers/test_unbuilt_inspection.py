"""The inspection methods of the attention and the encoder build a layer not yet called."""

import numpy as np

from keras_vit.layers.attention import AxialAttention, MultiHeadSelfAttention
from keras_vit.layers.encoder import Encoder, EncoderConfig


def test_probabilities_and_the_recorded_forward_of_unbuilt_layers():
    sequence, grid = np.ones((2, 5, 32), "float32"), np.ones((2, 3, 4, 8), "float32")
    assert tuple(MultiHeadSelfAttention(4).probabilities(sequence).shape) == (2, 4, 5, 5)
    assert tuple(AxialAttention(2, axis=1).probabilities(grid).shape) == (2, 4, 2, 3, 3)
    encoder = Encoder(EncoderConfig(num_layers=2, num_heads=4, mlp_dim=8),
                      position_embedding_grid=(3, 3))
    seen = {}
    tokens = encoder.encode(np.ones((2, 3, 3, 32), "float32"), out=seen)
    assert tuple(tokens.shape) == tuple(seen["embedded"].shape) == (2, 10, 32)
    assert [tuple(p.shape) for p in seen["attention"]] == [(2, 4, 10, 10)] * 2
    assert len(seen["blocks"]) == 2
