"""BiT ResNetV2 as a backbone and a classifier: sizes, names, the description, a new head on the
same backbone, training, bad input."""

import keras
import numpy as np
import pytest

import keras_vit
from conftest import shapes_only
from keras_vit import ResNetBackbone, ResNetConfig, ResNetImageClassifier, create_model


def _numpy(x):
    return keras.ops.convert_to_numpy(x)


def _tiny(**kwargs):
    config = dict(block_units=(1, 1), width_factor=0.5, num_classes=5, image_size=32)
    config.update(kwargs)
    return ResNetImageClassifier(**config)


def test_any_image_size_and_named_outputs():
    backbone = ResNetBackbone(block_units=(1, 1), width_factor=0.5, image_size=None)
    for shape in ((2, 32, 32, 3), (1, 45, 61, 3)):
        outputs = backbone.predict(np.zeros(shape, "float32"), verbose=0)
        assert outputs["pooled"].shape == (shape[0], 256)
        # the root's 4 then the second stage's 2: sides over 8, rounded up (bit_jax pads)
        assert outputs["feature_maps"].shape == (shape[0], -(-shape[1] // 8), -(-shape[2] // 8),
                                                 256)
    assert backbone.get_config()["config"]["image_size"] is None


def test_pooled_output_is_the_classifier_features(images):
    model = _tiny()
    pooled = model.backbone.predict(images, verbose=0)["pooled"]
    np.testing.assert_allclose(pooled, model.feature_extractor().predict(images, verbose=0),
                               atol=1e-6)


def test_a_new_task_is_a_zero_head_on_the_same_backbone(images):
    """The same two lines as a ViT's (paper Sec. 3.2: the head replaced by a zero-initialised
    one)."""
    model = _tiny()
    digits = ResNetImageClassifier(model.backbone, num_classes=3)
    assert digits.backbone is model.backbone
    np.testing.assert_array_equal(_numpy(digits.get_layer("head").kernel), 0)
    assert digits.predict(images, verbose=0).shape == (len(images), 3)
    assert digits.config == model.config.replace(num_classes=3)


def test_create_model_without_classes_gives_the_backbone():
    backbone = create_model("BiT-R26x1", image_size=64, num_classes=None)
    assert type(backbone) is ResNetBackbone
    assert backbone.config == keras_vit.models.registry.model_config("BiT-R26x1").replace(
        image_size=64, head=None)


def test_the_description_round_trips_through_a_keras_file(tmp_path, images):
    model = _tiny(head_bias_init=-1.0)
    assert isinstance(model.config, ResNetConfig)
    assert ResNetConfig.from_dict(model.config.to_dict()) == model.config
    path = str(tmp_path / "bit.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert type(loaded) is ResNetImageClassifier and loaded.config == model.config
    np.testing.assert_allclose(loaded.predict(images, verbose=0),
                               model.predict(images, verbose=0), atol=1e-6)


def test_a_head_of_the_pre_logits_layer_alone(images):
    model = ResNetImageClassifier(_tiny().backbone, num_classes=None, representation_size=16)
    assert model.predict(images, verbose=0).shape == (len(images), 16)
    assert [layer.name for layer in model.layers[-1:]] == ["pre_logits"]


@pytest.mark.parametrize("name,units,width", [
    ("BiT-R101x3", (3, 4, 23, 3), 3), ("BiT-R152x4", (3, 8, 36, 3), 4),
    ("BiT-R200x3", (3, 24, 36, 3), 3), ("BiT-M-R50x2", (3, 4, 6, 3), 2),
])
def test_bit_names(name, units, width):
    with shapes_only():
        model = create_model(name, image_size=384, num_classes=10)
    stages = model.config.stages
    assert (stages.block_units, stages.width_factor, model.config.image_size) == (
        units, width, (384, 384))
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


def test_the_earlier_class_name_says_what_replaced_it():
    with pytest.raises(AttributeError, match="ResNetV2 is now keras_vit.ResNetImageClassifier"):
        keras_vit.ResNetV2  # noqa: B018


@pytest.mark.parametrize("width_factor", [0.25, 0.75, 0])
def test_group_norm_incompatible_widths(width_factor):
    with pytest.raises(ValueError, match="GroupNormalization with 32 groups"):
        _tiny(width_factor=width_factor)


@pytest.mark.parametrize("block_units", [[], [2, 0], 3, [1.5]])
def test_bad_block_units(block_units):
    with pytest.raises(ValueError, match="block_units"):
        _tiny(block_units=block_units)


def test_a_head_on_a_backbone_of_another_family():
    vit = keras_vit.ViTBackbone(image_size=32, patch_size=8, hidden_size=16, num_layers=1,
                                num_heads=2, mlp_dim=32)
    with pytest.raises(TypeError, match="goes on a ResNetBackbone, got a ViTBackbone.*"
                                        r"ViTImageClassifier\(backbone, num_classes=K\)"):
        ResNetImageClassifier(vit, num_classes=3)
    with pytest.raises(TypeError, match="goes on a ViTBackbone, got a ResNetBackbone"):
        keras_vit.ViTImageClassifier(_tiny().backbone, num_classes=3)


def test_a_head_described_for_another_width():
    wider = _tiny(width_factor=1).config
    with pytest.raises(ValueError, match="another backbone.*width_factor 1 against 0.5"):
        ResNetImageClassifier(_tiny().backbone, config=wider)
    with pytest.raises(TypeError, match="block_units describe the backbone"):
        ResNetImageClassifier(_tiny().backbone, block_units=(2,), num_classes=3)


def test_an_axial_description_is_not_a_bit_backbone():
    config = ResNetConfig.from_keywords(block_units=(1,), width_factor=0.5, num_heads=2,
                                        image_size=8)
    with pytest.raises(ValueError, match="describes a model of AxialResNetBackbone"):
        ResNetBackbone(config)


@pytest.mark.parametrize("setting", ["hidden_size", "patch_size"])
def test_settings_of_another_family_are_named(setting):
    with pytest.raises(TypeError, match=f"A ResNet has no setting '{setting}'; its settings "
                                        "are stages, image_size, num_channels"):
        _tiny(**{setting: 8})


@pytest.mark.parametrize("name", ["BiT-R34x1", "BiT-R50x0", "BiT-R50"])
def test_unknown_bit_names(name):
    with pytest.raises(ValueError, match="Unknown model name"):
        create_model(name)
