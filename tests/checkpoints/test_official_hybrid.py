"""Official hybrid (vit_jax R+ViT) checkpoints: bit-exact loading, layout round trip, families."""

import os

import keras
import numpy as np
import pytest

from conftest import LOGIT_ATOL, fixture_path
from keras_vit import create_model, load_checkpoint, save_checkpoint
from keras_vit.checkpoints.official import read_checkpoint

FIXTURES = ["hybrid_tiny_r2-1_token", "hybrid_tiny_stemonly_token"]


def _io(name):
    return dict(np.load(fixture_path(f"{name}_io.npz")))


@pytest.fixture(scope="module")
def hybrids():
    return {name: load_checkpoint(fixture_path(f"{name}.npz")) for name in FIXTURES}


def _assert_rel(actual, expected, rel=1e-5):
    actual, expected = keras.ops.convert_to_numpy(actual), np.asarray(expected)
    assert actual.shape == expected.shape
    error = np.abs(actual - expected).max() / np.abs(expected).max()
    assert error < rel, error


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_logits_and_pre_logits(name, hybrids):
    io, model = _io(name), hybrids[name]
    assert model.config.stem.width_factor == 0.5
    np.testing.assert_allclose(model.predict(io["images"], verbose=0), io["logits"],
                               atol=LOGIT_ATOL, rtol=0)
    features = model.feature_extractor().predict(io["images"], verbose=0)
    np.testing.assert_allclose(features, io["pre_logits"], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_intermediates(name, hybrids):
    io, model = _io(name), hybrids[name]
    stem = model.get_layer("resnet")
    x = stem.conv_root(keras.ops.convert_to_tensor(io["images"]))
    _assert_rel(x, io["act/conv_root"])
    x = stem.gn_root(x)
    _assert_rel(x, io["act/gn_root"])
    x = stem.pool(keras.ops.relu(x))
    for s, stage in enumerate(stem.stages, 1):
        x = stage(x)
        _assert_rel(x, io[f"act/block{s}"])
    grid = io["act/embedding"]
    _assert_rel(model.get_layer("embedding")(x), grid)  # the token grid, as the official one


@pytest.mark.parametrize("name", FIXTURES)
def test_save_load_round_trip_is_exact(name, tmp_path, hybrids):
    original = read_checkpoint(fixture_path(f"{name}.npz"))
    model = hybrids[name]
    path = tmp_path / "copy.npz"
    save_checkpoint(model, path)
    saved = read_checkpoint(path)
    assert sorted(saved) == sorted(original)
    for key, value in original.items():
        assert saved[key].shape == value.shape, key  # GroupNorm stays (1, 1, 1, C)
        np.testing.assert_array_equal(saved[key], value, err_msg=key)


def test_linen_group_norm_shapes_load(tmp_path):
    name = FIXTURES[0]
    tensors = read_checkpoint(fixture_path(f"{name}.npz"))
    flat = {k: (v.reshape(-1) if "/gn" in k or k.startswith("gn_") else v)
            for k, v in tensors.items()}
    assert flat["gn_root/scale"].shape == (32,)
    np.savez(tmp_path / "linen.npz", **flat)
    io = _io(name)
    model = load_checkpoint(tmp_path / "linen.npz")
    np.testing.assert_allclose(model.predict(io["images"], verbose=0), io["logits"],
                               atol=LOGIT_ATOL, rtol=0)


def test_resized_hybrid_checkpoint():
    model = load_checkpoint(fixture_path(f"{FIXTURES[0]}.npz"), image_size=64, num_classes=4)
    assert model.config.grid == (8, 8) and model.config.stride == 8
    assert model.predict(np.zeros((1, 64, 64, 3), "float32"), verbose=0).shape == (1, 4)


def test_keras_file_round_trip(tmp_path, hybrids):
    io, model = _io(FIXTURES[0]), hybrids[FIXTURES[0]]
    path = os.path.join(tmp_path, "hybrid.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.get_config() == model.get_config()
    np.testing.assert_array_equal(loaded.predict(io["images"], verbose=0),
                                  model.predict(io["images"], verbose=0))


def test_named_hybrid_accepts_its_own_checkpoint(tmp_path, images):
    small = dict(image_size=32, num_classes=3, num_layers=1)  # R+ViT-Ti/16 cut to one block
    model = create_model("R+ViT-Ti/16", head_kernel_initializer="glorot_uniform", **small)
    save_checkpoint(model, tmp_path / "r_ti.npz")
    loaded = create_model("R+ViT-Ti/16", weights=tmp_path / "r_ti.npz", **small)
    np.testing.assert_array_equal(loaded.predict(images, verbose=0),
                                  model.predict(images, verbose=0))


def test_wrong_family_checkpoints():
    with pytest.raises(ValueError, match="hold a ViT checkpoint, but 'R\\+ViT-Ti/16' is a hybrid"):
        create_model("R+ViT-Ti/16", image_size=32, weights=fixture_path("vit_tiny_token_norep.npz"))
    with pytest.raises(ValueError, match="hold a hybrid ResNet\\+ViT checkpoint, but 'ViT-Ti/8'"):
        create_model("ViT-Ti/8", image_size=32, weights=fixture_path(f"{FIXTURES[0]}.npz"))
    with pytest.raises(ValueError, match="do not hold a R\\+ViT-Ti/16 model"):
        create_model("R+ViT-Ti/16", image_size=32, weights=fixture_path(f"{FIXTURES[1]}.npz"))
