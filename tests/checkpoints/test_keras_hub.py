"""keras-hub ViT <-> keras_vit, numerically, on small randomly initialised models (no downloads)."""

import keras
import numpy as np
import pytest

keras_hub = pytest.importorskip("keras_hub")  # in the dev and hub extras

from conftest import fixture_path  # noqa: E402
from keras_vit import (  # noqa: E402
    ViTBackbone,
    ViTImageClassifier,
    from_keras_hub,
    load_checkpoint,
    to_keras_hub,
)

keras_hub = pytest.importorskip("keras_hub")  # in the dev extra; not on Colab's TPU runtime

SMALL = dict(patch_size=4, num_layers=2, num_heads=2, hidden_dim=8, mlp_dim=16)


def _randomise(model, seed=0):
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        variable.assign((0.5 * rng.normal(size=variable.shape)).astype(variable.dtype))
    return model


def _images(height=16, width=16, channels=3):
    rng = np.random.default_rng(1)
    return rng.uniform(-1, 1, (2, height, width, channels)).astype("float32")


def _numpy(x):
    return keras.ops.convert_to_numpy(x)


def _backbone(image_shape=(16, 16, 3), **kwargs):
    return keras_hub.models.ViTBackbone(image_shape=image_shape, **dict(SMALL, **kwargs))


def _vit(**kwargs):
    config = dict(image_size=16, patch_size=4, hidden_size=8, num_layers=2, num_heads=2,
                  mlp_dim=16, num_classes=5, approximate_gelu=False)
    config.update(kwargs)
    return _randomise(ViTImageClassifier(**config))


@pytest.mark.parametrize("pooling,class_token,intermediate_dim", [
    ("token", True, None), ("token", True, 6), ("gap", False, None),
])
def test_classifier_both_directions(pooling, class_token, intermediate_dim):
    hub = _randomise(keras_hub.models.ViTImageClassifier(
        _backbone(use_class_token=class_token), num_classes=5, pooling=pooling,
        intermediate_dim=intermediate_dim))
    x = _images()
    vit = from_keras_hub(hub)
    assert isinstance(vit, ViTImageClassifier) and isinstance(vit.backbone, ViTBackbone)
    encoder = vit.config.encoder
    assert (encoder.classifier, vit.config.head.representation_size, encoder.approximate_gelu) == (
        "token" if class_token else "gap", intermediate_dim, False)
    expected = _numpy(hub(x))
    np.testing.assert_allclose(_numpy(vit(x)), expected, atol=1e-5, rtol=1e-5)
    # the two parts map onto the two parts: the backbones give the same token sequence
    sequence = _numpy(hub.backbone(x))
    np.testing.assert_allclose(_numpy(vit.backbone(x)["tokens"]), sequence, atol=1e-5, rtol=1e-5)
    back = to_keras_hub(vit)
    assert isinstance(back, keras_hub.models.ViTImageClassifier)
    np.testing.assert_allclose(_numpy(back(x)), expected, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(_numpy(back.backbone(x)), sequence, atol=1e-5, rtol=1e-5)


def test_backbone_to_backbone():
    x = _images(16, 24)
    for class_token in (True, False):
        backbone = _randomise(_backbone((16, 24, 3), use_class_token=class_token))
        vit = from_keras_hub(backbone)
        assert isinstance(vit, ViTBackbone) and vit.config.grid == (4, 6)
        sequence = _numpy(backbone(x))
        pooled = sequence[:, 0] if class_token else sequence.mean(axis=1)
        outputs = vit(x)
        np.testing.assert_allclose(_numpy(outputs["tokens"]), sequence, atol=1e-5, rtol=1e-5)
        np.testing.assert_allclose(_numpy(outputs["pooled"]), pooled, atol=1e-5, rtol=1e-5)
        back = to_keras_hub(vit)
        assert isinstance(back, keras_hub.models.ViTBackbone)
        np.testing.assert_allclose(_numpy(back(x)), sequence, atol=1e-5, rtol=1e-5)


def test_a_classifier_s_backbone_converts_alone():
    vit = _vit(representation_size=4)
    hub = to_keras_hub(vit.backbone)
    assert isinstance(hub, keras_hub.models.ViTBackbone)
    x = _images()
    np.testing.assert_allclose(_numpy(hub(x)), _numpy(vit.backbone(x)["tokens"]), atol=1e-5,
                               rtol=1e-5)
    again = from_keras_hub(to_keras_hub(vit))
    assert again.config == vit.config
    for a, b in zip(again.weights, vit.weights):
        np.testing.assert_array_equal(_numpy(a), _numpy(b))


def test_bias_free_variants_become_zero_biases():
    backbone = _backbone(use_mha_bias=False, use_mlp_bias=False, use_patch_bias=False)
    hub = _randomise(keras_hub.models.ViTImageClassifier(backbone, num_classes=3))
    vit = from_keras_hub(hub)
    x = _images()
    np.testing.assert_allclose(_numpy(vit(x)), _numpy(hub(x)), atol=1e-5, rtol=1e-5)
    np.testing.assert_array_equal(_numpy(vit.get_layer("embedding").conv.bias), 0.0)


def test_vit_to_keras_hub_and_back():
    vit = _vit(num_channels=1, image_size=(12, 16), representation_size=4, dropout_rate=0.1)
    x = _images(12, 16, 1)
    hub = to_keras_hub(vit)
    assert hub.backbone.dropout_rate == 0.1
    np.testing.assert_allclose(_numpy(hub(x)), _numpy(vit(x)), atol=1e-5, rtol=1e-5)
    again = from_keras_hub(hub)
    assert again.config.image_size == (12, 16) and again.config.encoder.dropout_rate == 0.1
    np.testing.assert_allclose(_numpy(again(x)), _numpy(vit(x)), atol=1e-5, rtol=1e-5)


def test_official_checkpoint_needs_strict_false():
    vit = load_checkpoint(fixture_path("vit_tiny_token_norep.npz"))
    with pytest.raises(ValueError, match="tanh-approximated GELU"):
        to_keras_hub(vit)
    hub = to_keras_hub(vit, strict=False)
    io = np.load(fixture_path("vit_tiny_token_norep_io.npz"))
    difference = np.abs(_numpy(hub(io["images"])) - io["logits"]).max()
    assert 1e-6 < difference < 1e-2  # exact GELU moves the logits a little, as documented


def test_head_activation_and_dropout_warn():
    hub = _randomise(keras_hub.models.ViTImageClassifier(
        _backbone(), num_classes=3, activation="softmax", dropout=0.2))
    with pytest.warns(UserWarning) as record:
        vit = from_keras_hub(hub)
    messages = " ".join(str(w.message) for w in record)
    assert "activation='softmax'" in messages and "dropout" in messages
    x = _images()
    np.testing.assert_allclose(_numpy(keras.ops.softmax(vit(x))), _numpy(hub(x)), atol=1e-5)


# ----------------------------------------------------------------------------- errors


def test_from_keras_hub_rejects_other_models():
    with pytest.raises(TypeError, match="ViTBackbone or ViTImageClassifier"):
        from_keras_hub(_vit())


@pytest.mark.parametrize("kwargs,pooling,match", [
    (dict(use_class_token=True), "gap", "no keras_vit equivalent"),
    (dict(use_class_token=False), "token", "no keras_vit equivalent"),
    (dict(layer_norm_epsilon=1e-12), "token", "LayerNorm epsilon"),
    (dict(patch_size=(4, 2)), "token", "square patches"),
])
def test_from_keras_hub_inexpressible(kwargs, pooling, match):
    hub = keras_hub.models.ViTImageClassifier(_backbone(**kwargs), num_classes=3, pooling=pooling)
    with pytest.raises(ValueError, match=match):
        from_keras_hub(hub)


def test_from_keras_hub_rejects_channels_first():
    backbone = keras_hub.models.ViTBackbone(image_shape=(3, 16, 16), data_format="channels_first",
                                            **SMALL)
    with pytest.raises(ValueError, match="channels_first"):
        from_keras_hub(backbone)


def test_to_keras_hub_inexpressible():
    with pytest.raises(ValueError, match="no ResNet stem"):
        to_keras_hub(load_checkpoint(fixture_path("hybrid_tiny_stemonly_token.npz")),
                     strict=False)
    with pytest.raises(ValueError, match="position_embedding='learned_2d'"):
        to_keras_hub(_vit(position_embedding="learned_2d"))
    with pytest.raises(ValueError, match="placement 'every_layer'"):
        to_keras_hub(_vit(position_embedding_placement="every_layer"))
    with pytest.raises(ValueError, match="any size .image_size=None.*resize_model"):
        to_keras_hub(_vit(image_size=None, position_embedding_grid=(4, 4)))
    with pytest.raises(TypeError, match="keras_vit ViT; it has no BiT ResNetV2"):
        to_keras_hub(load_checkpoint(fixture_path("bit_tiny_r2-1_w32.npz")))
