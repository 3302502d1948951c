"""Official vit_jax checkpoints: bit-exact loading, inference of the architecture, round trips."""

import os
import zipfile

import keras
import numpy as np
import pytest

import keras_vit
from conftest import LOGIT_ATOL, fixture_path
from keras_vit.checkpoints import official

VIT_FIXTURES = ["vit_tiny_token_rep16", "vit_tiny_token_norep", "vit_tiny_gap_norep"]
ATOL = 1e-5


def _np(x):
    return keras.ops.convert_to_numpy(x)


def _io(name):
    return np.load(fixture_path(f"{name}_io.npz"))


@pytest.fixture(scope="module")
def vit_models():
    """The official fixtures, loaded once for the tests that only read them."""
    return {name: keras_vit.load_checkpoint(fixture_path(f"{name}.npz")) for name in VIT_FIXTURES}


@pytest.mark.parametrize("name", VIT_FIXTURES)
def test_fixture_logits_and_pre_logits(name, vit_models):
    model = vit_models[name]
    io = _io(name)
    np.testing.assert_allclose(_np(model(io["images"])), io["logits"], atol=LOGIT_ATOL, rtol=0)
    features = _np(model.feature_extractor()(io["images"]))
    np.testing.assert_allclose(features, io["pre_logits"], atol=ATOL, rtol=ATOL)


@pytest.mark.parametrize("name", VIT_FIXTURES)
def test_fixture_intermediates(name, vit_models):
    model = vit_models[name]
    io = _io(name)
    grid = model.get_layer("embedding")(io["images"])
    tokens, _ = model.encoder.embed(grid)  # after the position embedding (dropout is off)
    probes = {
        "act/embedding": grid,
        "act/Transformer/posembed_input": tokens,
        "act/Transformer/encoderblock_0": model.get_layer("encoderblock_0")(tokens),
        "act/Transformer": model.encoder(grid),
    }
    outputs = probes.values()
    for key, value in zip(probes, outputs):
        expected = io[key]
        got = _np(value).reshape(expected.shape)  # the official embedding is the NHWC grid
        error = np.abs(got - expected).max() / np.abs(expected).max()
        assert error < 1e-5, (key, error)


def test_inferred_architecture(vit_models):
    model = vit_models["vit_tiny_token_rep16"]
    assert (model.image_size, model.patch_size, model.hidden_size) == ((32, 32), 4, 32)
    assert (model.num_layers, model.num_heads, model.mlp_dim) == (2, 4, 64)
    assert (model.classifier, model.representation_size, model.num_classes) == ("token", 16, 10)
    gap = vit_models["vit_tiny_gap_norep"]
    assert (gap.classifier, gap.representation_size) == ("gap", None)


def test_exact_gelu_is_measurably_different():
    """The official models use the tanh GELU; the exact one moves logits by ~1e-4."""
    name = "vit_tiny_token_norep"
    model = keras_vit.load_checkpoint(fixture_path(f"{name}.npz"), approximate_gelu=False)
    io = _io(name)
    error = np.abs(_np(model(io["images"])) - io["logits"]).max()
    assert 2e-5 < error < 1e-2


@pytest.mark.parametrize("case", ["token_4to6", "gap_4to6", "token_6to4"])
def test_resize_position_embedding_matches_official(case):
    data = np.load(fixture_path("posemb_resize.npz"))
    source, expected = data[f"{case}_in"], data[f"{case}_out"]
    has_token = case.startswith("token")
    side = int(np.sqrt(expected.shape[1] - has_token))
    got = keras_vit.resize_position_embedding(source, side, has_token)
    assert got.dtype == source.dtype
    np.testing.assert_allclose(got, expected, atol=1e-5)
    np.testing.assert_allclose(keras_vit.resize_position_embedding(source, (side, side), has_token),
                               expected, atol=1e-5)


def test_resize_position_embedding_rejects_non_square():
    posemb = np.zeros((1, 17, 8), "float32")
    with pytest.raises(ValueError, match="non-square"):
        keras_vit.resize_position_embedding(posemb, (4, 6), True)
    with pytest.raises(ValueError, match="not a square grid"):
        keras_vit.resize_position_embedding(np.zeros((1, 13, 8), "float32"), 4, True)


def test_load_at_higher_resolution_resizes_position_embedding():
    path = fixture_path("vit_tiny_token_norep.npz")
    model = keras_vit.load_checkpoint(path, image_size=48)
    assert model.grid_size == (12, 12)
    posemb = np.load(path)[official.POSEMB]
    expected = keras_vit.resize_position_embedding(posemb, 12, has_class_token=True)
    got = _np(model.get_layer("posembed_input").pos_embedding)
    np.testing.assert_array_equal(got, expected)
    assert model(np.zeros((1, 48, 48, 3), "float32")).shape == (1, 10)


def test_load_non_square_resolution_is_a_clear_error():
    with pytest.raises(ValueError, match="non-square"):
        keras_vit.load_checkpoint(fixture_path("vit_tiny_token_norep.npz"), image_size=(32, 48))


def test_fine_tuning_head_and_pre_logits():
    path = fixture_path("vit_tiny_token_rep16.npz")
    model = keras_vit.load_checkpoint(path, num_classes=3, drop_pre_logits=True)
    assert model.num_classes == 3 and model.representation_size is None
    assert not np.any(_np(model.get_layer("head").kernel))
    assert not np.any(_np(model.get_layer("head").bias))
    reference = keras_vit.load_checkpoint(path)
    np.testing.assert_array_equal(
        _np(model.get_layer("encoder_norm").gamma), _np(reference.get_layer("encoder_norm").gamma)
    )
    features = keras_vit.load_checkpoint(path, num_classes=0)
    assert features.num_classes is None
    io = _io("vit_tiny_token_rep16")
    np.testing.assert_allclose(_np(features(io["images"])), io["pre_logits"], atol=ATOL)


@pytest.mark.parametrize("name", VIT_FIXTURES)
def test_save_load_round_trip_is_exact(tmp_path, name):
    source = np.load(fixture_path(f"{name}.npz"))
    model = keras_vit.load_checkpoint(fixture_path(f"{name}.npz"))
    path = tmp_path / "copy.npz"
    keras_vit.save_checkpoint(model, path)
    saved = np.load(path)
    assert sorted(saved.files) == sorted(source.files)
    for key in source.files:
        assert saved[key].shape == source[key].shape, key
        np.testing.assert_array_equal(saved[key], source[key])


def _rewrite(tmp_path, name, transform):
    tensors = dict(np.load(fixture_path(f"{name}.npz")))
    path = tmp_path / "variant.npz"
    np.savez(path, **transform(tensors))
    return path


def test_linen_names_and_prefix_are_accepted(tmp_path):
    linen = {"MultiHeadDotProductAttention_1": "MultiHeadDotProductAttention_0",
             "LayerNorm_2": "LayerNorm_1", "MlpBlock_3": "MlpBlock_0"}

    def to_linen(tensors):
        out = {}
        for key, value in tensors.items():
            for old, new in linen.items():
                key = key.replace(f"/{old}/", f"/{new}/")
            out["opt/target/" + key] = value
        return out

    name = "vit_tiny_token_norep"
    model = keras_vit.load_checkpoint(_rewrite(tmp_path, name, to_linen))
    io = _io(name)
    np.testing.assert_allclose(_np(model(io["images"])), io["logits"], atol=LOGIT_ATOL, rtol=0)


def test_strict_loading_lists_missing_unexpected_and_misshaped(tmp_path):
    def corrupt(tensors):
        del tensors["Transformer/encoderblock_1/LayerNorm_2/bias"]
        tensors["extra/kernel"] = np.zeros(3, "float32")
        tensors["Transformer/encoder_norm/scale"] = np.zeros(31, "float32")
        return tensors

    with pytest.raises(ValueError) as info:
        keras_vit.load_checkpoint(_rewrite(tmp_path, "vit_tiny_token_norep", corrupt))
    message = str(info.value)
    assert "1 missing" in message and "encoderblock_1/LayerNorm_2/bias" in message
    assert "1 unexpected" in message and "extra/kernel" in message
    assert "1 mis-shaped" in message and "encoder_norm/scale: file (31,), model (32,)" in message


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="No checkpoint file"):
        keras_vit.load_checkpoint(tmp_path / "nope.npz")


def test_truncated_file_is_a_clear_error(tmp_path):
    data = open(fixture_path("vit_tiny_token_norep.npz"), "rb").read()
    path = tmp_path / "truncated.npz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="truncated or corrupt"):
        keras_vit.load_checkpoint(path)


def test_not_an_npz_is_a_clear_error(tmp_path):
    text = tmp_path / "weights.npz"
    text.write_text("not a checkpoint")
    with pytest.raises(ValueError, match="not a readable official .npz"):
        keras_vit.load_checkpoint(text)
    array = tmp_path / "array.npy"
    np.save(array, np.zeros(3))
    with pytest.raises(ValueError, match="single .npy array"):
        keras_vit.load_checkpoint(array)
    other = tmp_path / "other.npz"
    np.savez(other, foo=np.zeros(2))
    with pytest.raises(ValueError, match="Not an official ViT"):
        keras_vit.load_checkpoint(other)
    assert zipfile.is_zipfile(other)


def test_published_names_resolve_to_urls(monkeypatch):
    seen = []

    def offline(fname, origin, cache_subdir, **kwargs):
        seen.append((fname, origin, cache_subdir))
        raise OSError("network unreachable")

    monkeypatch.setattr(keras.utils, "get_file", offline)
    monkeypatch.delenv("KERAS_VIT_MIRROR", raising=False)  # the test session's download mirror
    with pytest.raises(ConnectionError, match="pass its local path"):
        keras_vit.load_checkpoint("imagenet21k/ViT-B_16")
    with pytest.raises(ConnectionError):
        keras_vit.load_checkpoint("gs://vit_models/augreg/Ti_16.npz")
    assert seen[0][1] == "https://storage.googleapis.com/vit_models/imagenet21k/ViT-B_16.npz"
    assert seen[1][1] == "https://storage.googleapis.com/vit_models/augreg/Ti_16.npz"


def test_published_name_loads_through_get_file(monkeypatch):
    monkeypatch.setattr(
        keras.utils, "get_file", lambda fname, origin, cache_subdir, **kwargs: fixture_path(
            "vit_tiny_token_norep.npz")
    )
    model = keras_vit.load_checkpoint("imagenet21k+imagenet2012/ViT-B_16")
    assert model.hidden_size == 32


def test_create_model_with_weights_checks_the_architecture():
    path = fixture_path("vit_tiny_token_norep.npz")
    with pytest.raises(ValueError, match="do not hold a ViT-B/16"):
        keras_vit.create_model("ViT-B/16", image_size=32, num_classes=10, weights=path)


def test_fixture_files_are_in_the_repository():
    assert os.path.getsize(fixture_path("vit_tiny_token_rep16.npz")) > 0
