"""ViTConfig, the one description of a ViT, and the classifier's refusals of a mismatched head."""

import keras
import numpy as np
import pytest

from keras_vit.models.description import Head, Patches, Stem, ViTConfig
from keras_vit.models.registry import model_config
from keras_vit.models.vit import ViTBackbone, ViTImageClassifier

TINY = dict(image_size=28, patch_size=4, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64,
            num_channels=1)


def test_flat_keywords_land_in_their_sections():
    config = ViTConfig.from_keywords(**{**TINY, "image_size": 32}, num_classes=10,
                                     head_bias_init=-10.0,
                                     stem=dict(num_layers=[1], width_factor=0.5))
    assert config.patches == Patches(patch_size=4, num_channels=1)
    assert (config.encoder.hidden_size, config.encoder.num_layers) == (32, 2)
    assert config.head == Head(num_classes=10, bias_init=-10.0)
    assert config.stem == Stem(num_layers=(1,), width_factor=0.5)
    assert config.stride == 4 * 4  # the stem's root alone downsamples by 4
    assert ViTConfig.from_dict(config.to_dict()) == config


def test_replace_changes_one_field_and_checks_again():
    config = model_config("ViT-B/16")
    smaller = config.replace(image_size=384, num_classes=10)
    assert smaller.grid == (24, 24) and smaller.head.num_classes == 10
    assert smaller.encoder == config.encoder
    assert config.replace(num_classes=None).head is None
    with pytest.raises(ValueError, match="multiple of the patch size"):
        config.replace(image_size=100)


def test_unknown_and_misplaced_settings_are_named():
    with pytest.raises(TypeError, match="no setting 'hiden_size'"):
        ViTConfig.from_keywords(**TINY, hiden_size=3)
    with pytest.raises(TypeError, match="Head has no setting"):
        ViTConfig.from_keywords(**TINY, head=dict(classes=3))
    with pytest.raises(ValueError, match="position_embedding_grid"):
        ViTConfig.from_keywords(**{**TINY, "image_size": None})


def test_the_model_config_is_the_description():
    model = ViTImageClassifier(**TINY, num_classes=3)
    assert model.get_config()["config"] == model.config.to_dict()
    assert ViTImageClassifier.from_config(model.get_config()).config == model.config
    assert model.backbone.config == model.config.replace(head=None)


def test_a_head_of_another_width_or_backbone_settings_are_refused():
    backbone = ViTBackbone(**TINY)
    wider = ViTConfig.from_keywords(**{**TINY, "hidden_size": 64}, num_classes=3)
    with pytest.raises(ValueError, match="another backbone than the one given "
                                         ".hidden_size 64 against 32"):
        ViTImageClassifier(backbone, config=wider)
    with pytest.raises(TypeError, match="hidden_size describe the backbone"):
        ViTImageClassifier(backbone, hidden_size=64, num_classes=3)
    with pytest.raises(TypeError, match="goes on a ViTBackbone"):
        ViTImageClassifier(ViTImageClassifier(**TINY, num_classes=3), num_classes=2)


def test_a_classifier_shares_its_backbone():
    backbone = ViTBackbone(**TINY)
    first = ViTImageClassifier(backbone, num_classes=3)
    second = ViTImageClassifier(backbone, num_classes=5, representation_size=8)
    images = np.random.default_rng(0).uniform(-1, 1, (2, 28, 28, 1)).astype("float32")
    pooled = keras.ops.convert_to_numpy(backbone(images)["pooled"])
    features = keras.ops.convert_to_numpy(first.feature_extractor()(images))
    np.testing.assert_allclose(features, pooled, atol=1e-6)
    assert second.get_layer("pre_logits").units == 8
    assert len(second.trainable_weights) == len(backbone.trainable_weights) + 4


def test_a_head_may_be_the_pre_logits_layer_alone():
    """A checkpoint saved without classes (transformers' ViTModel pooler) keeps its pre-logits
    layer as a head of its own; without one, no classes means no head."""
    config = ViTConfig.from_keywords(**TINY, num_classes=3, representation_size=8)
    pooler = config.replace(num_classes=None)
    assert (pooler.head.num_classes, pooler.head.representation_size) == (None, 8)
    assert ViTConfig.from_keywords(**TINY, num_classes=None).head is None
    assert config.replace(num_classes=None, representation_size=None).head is None
    model = ViTImageClassifier(config=pooler)
    assert model.output_shape == (None, 8)
    with pytest.raises(ValueError, match="num_classes must be a positive integer, got None"):
        Head(num_classes=None)


@pytest.mark.parametrize("name, capable", [
    ("ViT-B/16", True), ("R50+ViT-B/16", True), ("Axial-ViT-B/16", False), ("BiT-M-R50x1", False),
    ("AxialResNet50", False)])
def test_every_description_says_whether_a_flash_kernel_fits(name, capable):
    assert model_config(name).flash_capable is capable
    relative = model_config("ViT-B/16").replace(position_embedding="relative")
    assert not relative.flash_capable
