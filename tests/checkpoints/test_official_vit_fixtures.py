"""Official checkpoints keep the default position options, and inspecting them changes nothing."""

import keras
import numpy as np
import pytest

import keras_vit
from conftest import LOGIT_ATOL, fixture_path

CASES = ["vit_tiny_token_rep16", "vit_tiny_token_norep", "vit_tiny_gap_norep"]


@pytest.mark.parametrize("name", CASES)
def test_fixture_defaults_and_attention(name):
    model = keras_vit.load_checkpoint(fixture_path(f"{name}.npz"))
    encoder = model.config.encoder
    assert (encoder.position_embedding, encoder.position_embedding_placement) == (
        "learned_1d", "stem")
    io = np.load(fixture_path(f"{name}_io.npz"))
    logits = keras.ops.convert_to_numpy(model(io["images"]))
    weights = [keras.ops.convert_to_numpy(w)
               for w in model.backbone.attention_model()(io["images"])]
    tokens = 65 if "token" in name else 64
    assert [w.shape for w in weights] == [(2, 4, tokens, tokens)] * 2
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(model(io["images"])), logits)
    np.testing.assert_allclose(logits, io["logits"], atol=LOGIT_ATOL, rtol=0)
