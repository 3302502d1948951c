"""Official vit_jax checkpoints: bit-exact loading, inference of the architecture, round trips."""

import os
import zipfile

import keras
import numpy as np
import pytest

import keras_vit
from conftest import LOGIT_ATOL, fixture_path
from keras_vit.checkpoints import official
from keras_vit.models.description import Head

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
    encoder = model.backbone.encoder
    tokens, _ = encoder.embed(grid)  # after the position embedding (dropout is off)
    probes = {
        "act/embedding": grid,
        "act/Transformer/posembed_input": tokens,
        "act/Transformer/encoderblock_0": model.get_layer("encoderblock_0")(tokens),
        "act/Transformer": encoder(grid),
    }
    outputs = probes.values()
    for key, value in zip(probes, outputs):
        expected = io[key]
        got = _np(value).reshape(expected.shape)  # the official embedding is the NHWC grid
        error = np.abs(got - expected).max() / np.abs(expected).max()
        assert error < 1e-5, (key, error)


def test_inferred_architecture(vit_models):
    model = vit_models["vit_tiny_token_rep16"]
    assert isinstance(model, keras_vit.ViTImageClassifier)
    config = model.config
    assert (config.image_size, config.patches.patch_size, config.encoder.hidden_size) == (
        (32, 32), 4, 32)
    encoder = config.encoder
    assert (encoder.num_layers, encoder.num_heads, encoder.mlp_dim) == (2, 4, 64)
    assert (encoder.classifier, config.head.representation_size, config.head.num_classes) == (
        "token", 16, 10)
    assert config.stem is None and config.patches.num_channels == 3
    gap = vit_models["vit_tiny_gap_norep"].config
    assert (gap.encoder.classifier, gap.head.representation_size) == ("gap", None)
    assert official.infer_vit_config(dict(np.load(fixture_path(
        "vit_tiny_token_rep16.npz")))) == config


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
    old = int(np.sqrt(source.shape[1] - has_token))
    # bit-identical to the official function on square grids, however the grids are given
    for new_grid, old_grid in ((side, None), ((side, side), None), ((side, side), (old, old))):
        got = keras_vit.resize_position_embedding(source, new_grid, has_token, old_grid)
        assert got.dtype == source.dtype
        np.testing.assert_array_equal(got, expected)


def _linear_resize_reference(grid, rows, cols):
    """Separable corner-aligned linear interpolation with np.interp, axis by axis."""
    def axis(values, length):
        old = values.shape[0]
        points = np.arange(length) * ((old - 1) / (length - 1) if length > 1 else 0.0)
        return np.stack([np.interp(points, np.arange(old), column) for column in values.T], 1)

    by_rows = np.stack([axis(grid[:, c], rows) for c in range(grid.shape[1])], 1)
    return np.stack([axis(by_rows[r], cols) for r in range(rows)], 0)


@pytest.mark.parametrize("has_token", [True, False])
def test_resize_position_embedding_any_grid(has_token):
    rng = np.random.default_rng(26)
    for old_grid, new_grid in (((3, 5), (7, 4)), ((4, 4), (2, 9)), ((6, 2), (6, 2)),
                               ((2, 7), (1, 3)), ((1, 4), (5, 4))):
        count = old_grid[0] * old_grid[1]
        posemb = rng.normal(size=(1, count + has_token, 6)).astype("float32")
        got = keras_vit.resize_position_embedding(posemb, new_grid, has_token, old_grid=old_grid)
        grid = posemb[0, has_token:].reshape(*old_grid, 6).astype(np.float64)
        expected = _linear_resize_reference(grid, *new_grid).reshape(1, -1, 6)
        np.testing.assert_array_equal(got[:, :has_token], posemb[:, :has_token])
        np.testing.assert_allclose(got[:, has_token:], expected, rtol=1e-6, atol=1e-6)


def test_a_bare_non_square_table_needs_its_grid():
    posemb = np.zeros((1, 16, 8), "float32")  # 15 grid rows and a class token: 3x5 or 5x3?
    with pytest.raises(ValueError, match=r"not a square grid.*pass old_grid=\(rows, cols\)"):
        keras_vit.resize_position_embedding(posemb, (4, 6), True)
    with pytest.raises(ValueError, match="old_grid=.4, 4. has 16 positions.* 15 grid rows"):
        keras_vit.resize_position_embedding(posemb, (4, 6), True, old_grid=(4, 4))
    with pytest.raises(ValueError, match="new_grid must be an int or a .rows, cols. pair"):
        keras_vit.resize_position_embedding(posemb, (4, 6, 1), True, old_grid=(3, 5))
    assert keras_vit.resize_position_embedding(posemb, (4, 6), True, (5, 3)).shape == (1, 25, 8)


def test_load_at_higher_resolution_resizes_position_embedding():
    path = fixture_path("vit_tiny_token_norep.npz")
    model = keras_vit.load_checkpoint(path, image_size=48)
    assert model.config.grid == (12, 12)
    posemb = np.load(path)[official.POSEMB]
    expected = keras_vit.resize_position_embedding(posemb, 12, has_class_token=True)
    got = _np(model.get_layer("posembed_input").pos_embedding)
    np.testing.assert_array_equal(got, expected)
    assert model(np.zeros((1, 48, 48, 3), "float32")).shape == (1, 10)


def test_load_at_a_non_square_resolution(tmp_path):
    path = fixture_path("vit_tiny_token_norep.npz")
    model = keras_vit.load_checkpoint(path, image_size=(32, 48))
    assert model.config.grid == (8, 12)
    expected = keras_vit.resize_position_embedding(np.load(path)[official.POSEMB], (8, 12), True)
    np.testing.assert_array_equal(_np(model.get_layer("posembed_input").pos_embedding), expected)
    # an official file does not record its grid: a non-square one must be told it
    wide = str(tmp_path / "wide.npz")
    keras_vit.save_checkpoint(model, wide)
    with pytest.raises(ValueError, match=r"not a square grid.*pass posemb_grid=\(rows, cols\)"):
        keras_vit.load_checkpoint(wide)
    back = keras_vit.load_checkpoint(wide, posemb_grid=(8, 12))
    assert back.config.image_size == (32, 48)
    for a, b in zip(back.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(a, b)
    tall = keras_vit.load_checkpoint(wide, posemb_grid=(8, 12), image_size=(40, 24))
    np.testing.assert_array_equal(
        _np(tall.get_layer("posembed_input").pos_embedding),
        keras_vit.resize_position_embedding(expected, (10, 6), True, old_grid=(8, 12)))


def test_fine_tuning_head_and_pre_logits():
    path = fixture_path("vit_tiny_token_rep16.npz")
    model = keras_vit.load_checkpoint(path, num_classes=3, drop_pre_logits=True)
    assert model.config.head == Head(3)  # the paper's fine-tuning head: zeros, no pre-logits
    assert not np.any(_np(model.get_layer("head").kernel))
    assert not np.any(_np(model.get_layer("head").bias))
    reference = keras_vit.load_checkpoint(path)
    np.testing.assert_array_equal(
        _np(model.get_layer("encoder_norm").gamma), _np(reference.get_layer("encoder_norm").gamma)
    )
    kept = keras_vit.load_checkpoint(path, num_classes=3)
    assert kept.config.head == Head(3, representation_size=16)
    io = _io("vit_tiny_token_rep16")
    np.testing.assert_allclose(_np(kept.feature_extractor()(io["images"])), io["pre_logits"],
                               atol=ATOL, rtol=ATOL)


def test_no_head_gives_the_backbone(tmp_path):
    """num_classes=0: the ViTBackbone, its tokens the official encoder output; written back, the
    file is the original without its head (and pre-logits) tensors."""
    path = fixture_path("vit_tiny_token_rep16.npz")
    backbone = keras_vit.load_checkpoint(path, num_classes=0)
    assert isinstance(backbone, keras_vit.ViTBackbone) and backbone.config.head is None
    io = _io("vit_tiny_token_rep16")
    outputs = backbone(io["images"])
    expected = io["act/Transformer"]
    error = np.abs(_np(outputs["tokens"]) - expected).max() / np.abs(expected).max()
    assert error < 1e-5, error
    np.testing.assert_array_equal(_np(outputs["pooled"]), _np(outputs["tokens"])[:, 0])
    keras_vit.save_checkpoint(backbone, tmp_path / "backbone.npz")
    source, saved = np.load(path), np.load(tmp_path / "backbone.npz")
    headless = [k for k in source.files if not k.startswith(("head/", "pre_logits/"))]
    assert sorted(saved.files) == sorted(headless)
    for key in headless:
        np.testing.assert_array_equal(saved[key], source[key])
    again = keras_vit.load_checkpoint(tmp_path / "backbone.npz")  # a file without a head
    assert isinstance(again, keras_vit.ViTBackbone) and again.config == backbone.config
    np.testing.assert_array_equal(_np(again(io["images"])["tokens"]), _np(outputs["tokens"]))


def test_the_classifier_and_its_backbone_write_the_same_encoder(tmp_path, vit_models):
    model = vit_models["vit_tiny_token_norep"]
    keras_vit.save_checkpoint(model.backbone, tmp_path / "backbone.npz")
    keras_vit.save_checkpoint(model, tmp_path / "model.npz")
    whole, part = np.load(tmp_path / "model.npz"), np.load(tmp_path / "backbone.npz")
    assert sorted(set(whole.files) - set(part.files)) == ["head/bias", "head/kernel"]
    for key in part.files:
        np.testing.assert_array_equal(part[key], whole[key])


def test_load_options_reach_the_description():
    path = fixture_path("vit_tiny_token_norep.npz")
    model = keras_vit.load_checkpoint(path, dropout_rate=0.1, head_bias_init=-10.0)
    assert model.config.encoder.dropout_rate == 0.1 and model.config.head.bias_init == -10.0
    with pytest.raises(ValueError, match="describe a head, and this model has none"):
        keras_vit.load_checkpoint(path, num_classes=0, head_bias_init=-10.0)


def test_a_pre_logits_layer_without_a_head_is_a_head_of_its_own(tmp_path):
    """An official file with pre_logits and no head loads as a classifier whose head is the
    pre-logits layer alone, and is written back as the same keys."""
    tensors = dict(np.load(fixture_path("vit_tiny_token_rep16.npz")))
    del tensors["head/kernel"], tensors["head/bias"]
    np.savez(tmp_path / "pooler.npz", **tensors)
    features = keras_vit.load_checkpoint(tmp_path / "pooler.npz")
    assert features.config.head == Head(None, representation_size=16)
    keras_vit.save_checkpoint(features, tmp_path / "again.npz")
    again = np.load(tmp_path / "again.npz")
    assert sorted(again.files) == sorted(tensors)
    for key, value in tensors.items():
        np.testing.assert_array_equal(again[key], value, err_msg=key)
    with_head = keras_vit.load_checkpoint(tmp_path / "pooler.npz", num_classes=2)
    assert with_head.config.head == Head(2, representation_size=16)
    np.testing.assert_array_equal(_np(with_head.get_layer("pre_logits").kernel),
                                  tensors["pre_logits/kernel"])
    for options in (dict(num_classes=0), dict(drop_pre_logits=True)):
        assert isinstance(keras_vit.load_checkpoint(tmp_path / "pooler.npz", **options),
                          keras_vit.ViTBackbone)


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
    assert model.config.encoder.hidden_size == 32


def test_create_model_with_weights_checks_the_architecture():
    path = fixture_path("vit_tiny_token_norep.npz")
    with pytest.raises(ValueError, match="do not hold a ViT-B/16"):
        keras_vit.create_model("ViT-B/16", image_size=32, num_classes=10, weights=path)


def test_fixture_files_are_in_the_repository():
    assert os.path.getsize(fixture_path("vit_tiny_token_rep16.npz")) > 0
