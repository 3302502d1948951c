"""Any image size at call time (issue 16): equal to ``resize_model`` at every size."""

import keras
import numpy as np
import pytest

import keras_vit
from tests.conftest import fixture_path

HYBRID = dict(num_layers=[1], width_factor=0.5)  # stride 4: patch 1 on a /4 map
VARIANTS = [
    dict(classifier="token", position_embedding="learned_1d"),
    dict(classifier="gap", position_embedding="learned_1d"),
    dict(classifier="token", position_embedding="learned_2d"),
    dict(classifier="gap", position_embedding="learned_2d"),
    dict(
        classifier="token",
        position_embedding="learned_1d",
        position_embedding_placement="every_layer",
    ),
    dict(
        classifier="token",
        position_embedding="learned_1d",
        resnet=dict(num_layers=[1], width_factor=0.5),
    ),
    dict(
        classifier="gap",
        position_embedding="learned_2d",
        resnet=dict(num_layers=[1], width_factor=0.5),
    ),
]


def _np(x):
    return np.asarray(keras.ops.convert_to_numpy(x))


def _model(image_size=16, **kwargs):
    hybrid = "resnet" in kwargs
    model = keras_vit.VisionTransformer(
        image_size=image_size,
        patch_size=1 if hybrid else 4,
        hidden_size=16,
        num_layers=2,
        num_heads=2,
        mlp_dim=32,
        num_classes=5,
        head_kernel_initializer="glorot_uniform",
        **kwargs,
    )
    rng = np.random.default_rng(0)
    for v in model.weights:
        v.assign(rng.normal(size=v.shape).astype("float32") * 0.2 + _np(v))
    return model


def _images(side, count=2, seed=1):
    return np.random.default_rng(seed).uniform(-1, 1, (count, side, side, 3)).astype("float32")


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: "-".join(map(str, v.values())))
def test_any_size_equals_resize_model(variant):
    model = _model(**variant)
    anysize = keras_vit.resize_model(model, None)
    assert anysize.image_size is None and anysize.position_embedding_grid == (4, 4)
    scale = model.stride
    worst = 0.0
    for grid in (4, 6, 3, 9):
        side = grid * scale
        expected = _np(keras_vit.resize_model(model, side)(_images(side)))
        got = _np(anysize(_images(side)))
        worst = max(worst, float(np.abs(got - expected).max()))
    assert worst < 1e-5, worst


def test_learned_grid_is_bit_exact_and_non_square_grids_run():
    model = _model()
    anysize = keras_vit.resize_model(model, None)
    np.testing.assert_array_equal(_np(anysize(_images(16))), _np(model(_images(16))))
    wide = np.random.default_rng(2).uniform(-1, 1, (2, 12, 28, 3)).astype("float32")
    assert anysize.predict(wide, verbose=0).shape == (2, 5)
    # a non-square input equals a static model built for it with the same learned table
    static = keras_vit.VisionTransformer(**{**anysize.get_config(), "image_size": (12, 28)})
    static.set_weights(anysize.get_weights())
    np.testing.assert_allclose(_np(static(wide)), _np(anysize(wide)), atol=1e-6)


def test_fit_on_one_size_predict_on_another_and_keras_file(tmp_path):
    model = keras_vit.VisionTransformer(
        image_size=None,
        position_embedding_grid=(4, 4),
        patch_size=4,
        hidden_size=16,
        num_layers=1,
        num_heads=2,
        mlp_dim=32,
        num_classes=3,
        num_channels=3,
    )
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(True))
    history = model.fit(_images(16, count=8), np.arange(8) % 3, epochs=2, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    big = _images(32, count=3)
    before = model.predict(big, verbose=0)
    path = str(tmp_path / "anysize.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, compile=False)
    assert loaded.get_config() == model.get_config()
    np.testing.assert_array_equal(loaded.predict(big, verbose=0), before)


def test_official_checkpoint_at_any_size():
    model = keras_vit.load_checkpoint(fixture_path("vit_tiny_token_rep16.npz"))
    anysize = keras_vit.resize_model(model, None)
    images = _images(48)
    expected = _np(keras_vit.resize_model(model, 48)(images))
    np.testing.assert_allclose(_np(anysize(images)), expected, atol=1e-5)
    back = keras_vit.resize_model(anysize, 48)
    assert back.position_embedding_grid is None and back.grid_size == (12, 12)
    np.testing.assert_allclose(_np(back(images)), expected, atol=1e-6)


def test_bad_sizes_are_clear_errors():
    anysize = keras_vit.resize_model(_model(), None)
    with pytest.raises(ValueError, match="not a multiple of the patch size"):
        anysize(_images(18))
    with pytest.raises(ValueError, match="needs position_embedding_grid"):
        keras_vit.VisionTransformer(
            image_size=None, patch_size=4, hidden_size=8, num_layers=1, num_heads=2, mlp_dim=8
        )
    with pytest.raises(ValueError, match="need a fixed"):
        keras_vit.resize_model(_model(position_embedding="relative"), None)
