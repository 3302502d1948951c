"""ResNetV2 (BiT): sizes, names and parameter counts, training, bad input."""

import keras
import numpy as np
import pytest

import keras_vit
from conftest import shapes_only
from keras_vit import ResNetV2, create_model


def _numpy(x):
    return keras.ops.convert_to_numpy(x)


def _tiny(**kwargs):
    config = dict(block_units=(1, 1), width_factor=0.5, num_classes=5, image_size=32)
    config.update(kwargs)
    return ResNetV2(**config)


def test_any_image_size_and_features():
    model = _tiny(image_size=None, num_classes=None)
    for shape in ((2, 32, 32, 3), (1, 45, 61, 3)):
        assert model.predict(np.zeros(shape, "float32"), verbose=0).shape == (shape[0], 256)
    assert model.get_config()["image_size"] is None


def test_headless_model_equals_feature_extractor(images):
    model = _tiny()
    headless = _tiny(num_classes=None)
    headless.set_weights(model.get_weights()[:-2])
    np.testing.assert_allclose(headless.predict(images, verbose=0),
                               model.feature_extractor().predict(images, verbose=0), atol=1e-6)


@pytest.mark.parametrize("name,units,width", [
    ("BiT-R101x3", [3, 4, 23, 3], 3), ("BiT-R152x4", [3, 8, 36, 3], 4),
    ("BiT-R200x3", [3, 24, 36, 3], 3), ("BiT-M-R50x2", [3, 4, 6, 3], 2),
])
def test_bit_names(name, units, width):
    with shapes_only():
        model = create_model(name, image_size=384, num_classes=10)
    assert (model.block_units, model.width_factor, model.image_size) == (units, width, (384, 384))
    assert model.output_shape == (None, 10)


def test_bit_fit_one_step():
    model = _tiny(image_size=64, head_kernel_initializer="glorot_uniform")
    model.compile(optimizer=keras.optimizers.SGD(0.1),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = np.random.default_rng(0).uniform(-1, 1, (2, 64, 64, 3)).astype("float32")
    before = _numpy(model.get_layer("root_block").conv_root.kernel).copy()
    history = model.fit(x, np.array([0, 3]), epochs=1, batch_size=2, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    after = _numpy(model.get_layer("root_block").conv_root.kernel)
    assert np.abs(after - before).max() > 0  # gradients reach the root through every unit


def test_exported_from_package():
    assert keras_vit.ResNetV2 is ResNetV2


@pytest.mark.parametrize("width_factor", [0.25, 0.75, 0])
def test_group_norm_incompatible_widths(width_factor):
    with pytest.raises(ValueError, match="GroupNormalization with 32 groups"):
        _tiny(width_factor=width_factor)


@pytest.mark.parametrize("block_units", [[], [2, 0], 3, [1.5]])
def test_bad_block_units(block_units):
    with pytest.raises(ValueError, match="block_units"):
        _tiny(block_units=block_units)


@pytest.mark.parametrize("name", ["BiT-R34x1", "BiT-R50x0", "BiT-R50"])
def test_unknown_bit_names(name):
    with pytest.raises(ValueError, match="Unknown model name"):
        create_model(name)
