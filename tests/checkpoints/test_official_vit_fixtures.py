"""The official ViT fixtures still load and match after the position-embedding options."""

import os

import keras
import numpy as np
import pytest

import keras_vit
from conftest import fixture_path
from keras_vit.inspection import attention_weights

CASES = ["vit_tiny_token_rep16", "vit_tiny_token_norep", "vit_tiny_gap_norep"]


@pytest.mark.parametrize("name", CASES)
def test_fixture_logits_and_attention(name, tmp_path):
    model = keras_vit.load_checkpoint(fixture_path(f"{name}.npz"))
    assert (model.position_embedding, model.position_embedding_placement) == ("learned_1d", "stem")
    io = np.load(fixture_path(f"{name}_io.npz"))
    logits = keras.ops.convert_to_numpy(model(io["images"]))
    np.testing.assert_allclose(logits, io["logits"], atol=1e-5, rtol=1e-5)
    features = keras.ops.convert_to_numpy(model.feature_extractor()(io["images"]))
    np.testing.assert_allclose(features, io["pre_logits"], atol=1e-5, rtol=1e-5)

    weights = attention_weights(model, io["images"])
    tokens = 65 if "token" in name else 64
    assert [w.shape for w in weights] == [(2, 4, tokens, tokens)] * 2
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(model(io["images"])), logits)

    path = os.path.join(tmp_path, "copy.npz")
    keras_vit.save_checkpoint(model, path)
    with np.load(path) as saved, np.load(fixture_path(f"{name}.npz")) as original:
        assert sorted(saved.files) == sorted(original.files)
        for key in original.files:
            np.testing.assert_array_equal(saved[key], original[key])
