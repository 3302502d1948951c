"""Official BiT (big_transfer) checkpoints: bit-exact loading, layout round trip, bad files."""

import os

import keras
import numpy as np
import pytest

from conftest import LOGIT_ATOL, fixture_path, shapes_only
from keras_vit import ResNetImageClassifier, create_model, load_checkpoint, save_checkpoint
from keras_vit.checkpoints.official import read_checkpoint

BIT = "bit_tiny_r2-1_w32"


def _io(name):
    return dict(np.load(fixture_path(f"{name}_io.npz")))


@pytest.fixture(scope="module")
def bit_model():
    return load_checkpoint(fixture_path(f"{BIT}.npz"))


def _numpy(x):
    return keras.ops.convert_to_numpy(x)


def _assert_rel(actual, expected, rel=1e-5):
    actual, expected = _numpy(actual), np.asarray(expected)
    assert actual.shape == expected.shape
    error = np.abs(actual - expected).max() / np.abs(expected).max()
    assert error < rel, error


def test_bit_fixture_logits_and_features(bit_model):
    io, model = _io(BIT), bit_model
    assert isinstance(model, ResNetImageClassifier)
    stages = model.config.stages
    assert (stages.block_units, stages.width_factor, model.config.head.num_classes) == (
        (2, 1), 0.5, 10)
    np.testing.assert_allclose(model.predict(io["images"], verbose=0), io["logits"],
                               atol=LOGIT_ATOL, rtol=0)
    features = model.feature_extractor().predict(io["images"], verbose=0)
    np.testing.assert_allclose(features, io["pre_logits"], atol=1e-5, rtol=1e-5)


def test_bit_fixture_intermediates(bit_model):
    io, model = _io(BIT), bit_model
    root = model.get_layer("root_block")
    x = keras.ops.convert_to_tensor(io["images"])
    _assert_rel(root.conv_root(root.pad_conv(x)), io["act/root_block/conv_root"])
    x = root(x)
    _assert_rel(x, io["act/root_block"])
    block1 = model.get_layer("block1")
    y = block1.units[0](x)
    _assert_rel(y, io["act/block1/unit01"])
    _assert_rel(block1.units[1](y), io["act/block1/unit02"])
    x = block1(x)
    _assert_rel(x, io["act/block1"])
    x = model.get_layer("block2")(x)
    _assert_rel(x, io["act/block2"])
    _assert_rel(model.get_layer("norm-pre-head")(x), io["act/norm-pre-head"])


def test_bit_save_load_round_trip_is_exact(tmp_path, bit_model):
    original = read_checkpoint(fixture_path(f"{BIT}.npz"))
    model = bit_model
    path = tmp_path / "bit.npz"
    save_checkpoint(model, path)
    saved = read_checkpoint(path)
    assert sorted(saved) == sorted(original)
    for key, value in original.items():
        assert saved[key].shape == value.shape, key
        np.testing.assert_array_equal(saved[key], value, err_msg=key)
    images = _io(BIT)["images"]
    np.testing.assert_array_equal(load_checkpoint(path).predict(images, verbose=0),
                                  model.predict(images, verbose=0))


def test_bit_numbered_conv_names_load(tmp_path):
    with np.load(fixture_path(f"{BIT}.npz")) as archive:
        tensors = {k.replace("standardized_conv2d", "standardized_conv2d_7"): archive[k]
                   for k in archive.files}
    np.savez(tmp_path / "numbered.npz", **tensors)
    io = _io(BIT)
    model = load_checkpoint(tmp_path / "numbered.npz")
    np.testing.assert_allclose(model.predict(io["images"], verbose=0), io["logits"],
                               atol=LOGIT_ATOL, rtol=0)


def test_bit_new_head_and_resolution(bit_model):
    original = bit_model
    assert original.config.image_size is None  # BiT files do not record a resolution
    model = load_checkpoint(fixture_path(f"{BIT}.npz"), num_classes=3, image_size=48)
    assert model.config.image_size == (48, 48) and model.config.head.num_classes == 3
    np.testing.assert_array_equal(_numpy(model.get_layer("head").kernel), 0.0)
    x = np.random.default_rng(2).uniform(-1, 1, (2, 48, 48, 3)).astype("float32")
    np.testing.assert_allclose(model.feature_extractor().predict(x, verbose=0),
                               original.feature_extractor().predict(x, verbose=0), atol=1e-6)


def test_keras_file_round_trip(tmp_path, images, bit_model):
    model = bit_model
    path = os.path.join(tmp_path, "bit.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, ResNetImageClassifier) and loaded.get_config() == model.get_config()
    np.testing.assert_array_equal(loaded.predict(images, verbose=0),
                                  model.predict(images, verbose=0))


def test_bit_file_into_vit_builder():
    message = "hold a BiT ResNetV2 checkpoint, but 'ViT-Ti/16' is a ViT"
    with pytest.raises(ValueError, match=message):
        create_model("ViT-Ti/16", image_size=32, weights=fixture_path(f"{BIT}.npz"))


def test_other_files_into_bit_builder():
    with shapes_only():
        with pytest.raises(ValueError, match="hold a hybrid ResNet\\+ViT checkpoint"):
            create_model("BiT-R50x1", weights=fixture_path("hybrid_tiny_r2-1_token.npz"))
        with pytest.raises(ValueError, match="do not hold a BiT-R50x1 model"):
            create_model("BiT-R50x1", weights=fixture_path(f"{BIT}.npz"))


def test_incomplete_bit_files(tmp_path):
    tensors = read_checkpoint(fixture_path(f"{BIT}.npz"))
    without_root = {k: v for k, v in tensors.items() if "root_block" not in k}
    np.savez(tmp_path / "no_root.npz", **without_root)
    with pytest.raises(ValueError, match="not a complete BiT"):
        load_checkpoint(tmp_path / "no_root.npz")
    without_gn = {k: v for k, v in tensors.items() if "unit02/b/group_norm/gamma" not in k}
    np.savez(tmp_path / "no_gn.npz", **without_gn)
    with pytest.raises(ValueError, match="1 missing"):
        load_checkpoint(tmp_path / "no_gn.npz")
