"""Any image size at call time: equal to ``resize_model`` at every size."""

import keras
import numpy as np
import pytest

import keras_vit
from tests.conftest import fixture_path
from tests.tolerances import assert_same_function

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
        stem=dict(num_layers=[1], width_factor=0.5),
    ),
    dict(
        classifier="gap",
        position_embedding="learned_2d",
        stem=dict(num_layers=[1], width_factor=0.5),
    ),
]


def _np(x):
    return np.asarray(keras.ops.convert_to_numpy(x))


def _model(grid=(4, 4), **kwargs):
    hybrid = "stem" in kwargs
    stride = 4  # patch 4, or patch 1 on the hybrid's /4 map
    model = keras_vit.ViTImageClassifier(
        image_size=(grid[0] * stride, grid[1] * stride),
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


def _images(size, count=2, seed=1):
    height, width = (size, size) if np.isscalar(size) else size
    return np.random.default_rng(seed).uniform(-1, 1, (count, height, width, 3)).astype("float32")


def _non_square_grids(seed, count=2):
    """Random (rows, cols) grids with rows != cols, drawn with ``seed``."""
    rng, grids = np.random.default_rng(seed), []
    while len(grids) < count:
        rows, cols = (int(v) for v in rng.integers(2, 10, size=2))
        if rows != cols:
            grids.append((rows, cols))
    return grids


def worst_error(model, grids):
    """Max |dynamic model - resize_model| over ``grids``, the dynamic one from ``model``."""
    anysize = keras_vit.resize_model(model, None)
    assert anysize.config.image_size is None
    assert anysize.config.position_embedding_grid == model.config.grid
    worst = 0.0
    for rows, cols in grids:
        size = (rows * model.config.stride, cols * model.config.stride)
        expected = _np(keras_vit.resize_model(model, size)(_images(size)))
        got = _np(anysize(_images(size)))
        assert got.shape == expected.shape == (2, 5)
        worst = max(worst, float(np.abs(got - expected).max()))
    return worst


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: "-".join(map(str, v.values())))
def test_any_size_equals_resize_model(variant, record_property):
    grids = [(4, 4), (6, 6), *_non_square_grids(len(VARIANTS) + VARIANTS.index(variant), 1)]
    worst = worst_error(_model(**variant), grids)
    record_property("max_abs_error", worst)  # the numbers docs/any-size-and-compute.md reports
    assert worst < 1e-5, worst


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: "-".join(map(str, v.values())))
def test_any_size_from_a_non_square_model_equals_resize_model(variant, record_property):
    start, *grids = _non_square_grids(VARIANTS.index(variant), count=3)
    worst = worst_error(_model(grid=start, **variant), grids)
    record_property("max_abs_error", worst)
    assert worst < 1e-5, worst


def test_learned_grid_is_bit_exact_and_non_square_grids_run():
    model = _model()
    anysize = keras_vit.resize_model(model, None)
    assert anysize.config.position_embedding_grid == (4, 4)
    np.testing.assert_array_equal(_np(anysize(_images(16))), _np(model(_images(16))))
    wide = np.random.default_rng(2).uniform(-1, 1, (2, 12, 28, 3)).astype("float32")
    assert anysize.predict(wide, verbose=0).shape == (2, 5)
    # a non-square input equals a static model built for it with the same learned table
    static = keras_vit.ViTImageClassifier(config=anysize.config.replace(image_size=(12, 28)))
    static.set_weights(anysize.get_weights())
    assert_same_function(_np(static(wide)), _np(anysize(wide)),
                         depth=anysize.config.encoder.num_layers + 2)


def test_fit_on_one_size_predict_on_another_and_keras_file(tmp_path):
    model = keras_vit.ViTImageClassifier(
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
    assert back.config.position_embedding_grid is None and back.config.grid == (12, 12)
    np.testing.assert_allclose(_np(back(images)), expected, atol=1e-6)


def test_bad_sizes_are_clear_errors():
    anysize = keras_vit.resize_model(_model(), None)
    with pytest.raises(ValueError, match="not a multiple of the patch size"):
        anysize(_images(18))
    with pytest.raises(ValueError, match="needs position_embedding_grid"):
        keras_vit.ViTImageClassifier(
            image_size=None, patch_size=4, hidden_size=8, num_layers=1, num_heads=2, mlp_dim=8
        )
    with pytest.raises(ValueError, match="need a fixed"):
        keras_vit.resize_model(_model(position_embedding="relative"), None)
