"""ViTImageClassifier and ViTBackbone: architecture, names, init, attention paths, serialisation,
bad input, a new head on the same backbone."""

import math

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.layers.attention import MultiHeadSelfAttention
from keras_vit.layers.encoder import EncoderBlock, EncoderConfig
from keras_vit.layers.patching import PatchEmbedding


def _np(x):
    return keras.ops.convert_to_numpy(x)


def tiny(**kwargs):
    config = dict(image_size=32, patch_size=4, hidden_size=32, num_layers=2, num_heads=4,
                  mlp_dim=64, num_classes=10)
    config.update(kwargs)
    return keras_vit.ViTImageClassifier(**config)


@pytest.mark.parametrize("name", ["ViT-S/32", "ViT-B/8", "ViT-B/32", "ViT-L/32", "ViT-B_16"])
def test_paper_names_parse(name):
    config = keras_vit.models.registry.model_config(name)
    assert config.patches.patch_size == int(name.split("/")[-1].split("_")[-1])


def test_any_size_any_patch():
    model = keras_vit.create_model("ViT-Ti/4", image_size=28, num_classes=10, num_channels=1)
    assert model.config.grid == (7, 7)
    assert model.config.encoder.hidden_size == 192 and model.config.encoder.num_layers == 12
    assert model(np.zeros((2, 28, 28, 1), "float32")).shape == (2, 10)


def test_unknown_name_lists_valid_names():
    with pytest.raises(ValueError) as info:
        keras_vit.create_model("ViT-XL/16")
    assert "Unknown model name 'ViT-XL/16'" in str(info.value)
    assert "ViT-B/16" in str(info.value) and "ViT-H/14" in str(info.value)


def test_large_models_use_official_dropout():
    assert keras_vit.models.registry.model_config("ViT-L/16").encoder.dropout_rate == 0.1
    assert keras_vit.models.registry.model_config("ViT-B/16").encoder.dropout_rate == 0.0


def test_patchify_equals_patch_embedding():
    """Paper Eq. 1: a stride-P convolution is the linear projection E of flattened patches."""
    rng = np.random.default_rng(0)
    images = rng.uniform(-1, 1, (2, 12, 8, 3)).astype("float32")
    layer = PatchEmbedding(patch_size=4, hidden_size=5)
    tokens = _np(layer(images))
    kernel, bias = _np(layer.conv.kernel), _np(layer.conv.bias)
    flat = _np(keras_vit.patchify(images, 4))
    assert flat.shape == (2, 6, 48)
    np.testing.assert_allclose(tokens, flat @ kernel.reshape(48, 5) + bias, atol=1e-5)
    # Patch (row 1, col 0) is pixels [4:8, 0:4], flattened row, column, channel.
    np.testing.assert_array_equal(flat[0, 2], images[0, 4:8, 0:4].reshape(-1))


def test_patchify_rejects_bad_input():
    with pytest.raises(ValueError, match="not a multiple of the patch size"):
        keras_vit.patchify(np.zeros((1, 10, 8, 3), "float32"), 4)
    with pytest.raises(ValueError, match="rank 4"):
        keras_vit.patchify(np.zeros((10, 8, 3), "float32"), 4)


def test_image_size_not_divisible_is_a_clear_error():
    with pytest.raises(ValueError, match=r"image height \(30\) is not a multiple of the patch"):
        tiny(image_size=30)


def test_rectangular_images():
    model = tiny(image_size=(32, 16))
    assert model.config.grid == (8, 4)
    assert model(np.zeros((1, 32, 16, 3), "float32")).shape == (1, 10)


def test_heads_must_divide_hidden_size():
    with pytest.raises(ValueError, match=r"\(32\) must be divisible by num_heads \(5\)"):
        tiny(num_heads=5)


def test_wrong_channel_count_is_a_clear_error():
    model = tiny()
    with pytest.raises(ValueError, match="3 channel"):
        model(np.zeros((1, 32, 32, 1), "float32"))


def test_bad_classifier_and_sizes():
    with pytest.raises(ValueError, match="Unknown classifier"):
        tiny(classifier="map")
    with pytest.raises(ValueError, match="num_layers must be a positive integer"):
        tiny(num_layers=0)


def test_token_and_gap_structure():
    token, gap = tiny(), tiny(classifier="gap")
    assert token.get_layer("posembed_input").pos_embedding.shape == (1, 65, 32)
    assert gap.get_layer("posembed_input").pos_embedding.shape == (1, 64, 32)
    assert gap.backbone.encoder.sublayer("cls") is None
    assert gap.count_params() == token.count_params() - 32 - 32


def test_feature_extractor_and_representation():
    model = tiny(representation_size=16)
    images = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    features = _np(model.feature_extractor()(images))
    assert features.shape == (2, 16)
    assert np.all(np.abs(features) <= 1.0)  # tanh pre-logits
    pooled = _np(model.backbone(images)["pooled"])
    pre_logits = model.get_layer("pre_logits")
    np.testing.assert_allclose(features, np.tanh(pooled @ _np(pre_logits.kernel)
                                                 + _np(pre_logits.bias)), atol=1e-5)
    plain = tiny()  # without pre_logits the features are the backbone's pooled token
    np.testing.assert_allclose(_np(plain.feature_extractor()(images)),
                               _np(plain.backbone(images)["pooled"]), atol=1e-6)


def test_the_backbone_gives_tokens_and_pooled():
    backbone = keras_vit.ViTBackbone(image_size=32, patch_size=4, hidden_size=32, num_layers=2,
                                     num_heads=4, mlp_dim=64, classifier="gap")
    assert backbone.config.head is None
    images = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    outputs = backbone(images)
    tokens, pooled = _np(outputs["tokens"]), _np(outputs["pooled"])
    assert tokens.shape == (2, 64, 32)
    np.testing.assert_allclose(pooled, tokens.mean(axis=1), atol=1e-5)  # GAP (Eq. 4's y)
    # flat keywords with num_classes=None build it too
    same = keras_vit.create_model("ViT-Ti/4", image_size=28, num_classes=None, num_channels=1)
    assert isinstance(same, keras_vit.ViTBackbone)


def test_a_new_task_is_the_same_backbone_with_a_zero_head():
    model = tiny(head_kernel_initializer="glorot_uniform", head_bias_init=-10.0)
    task = keras_vit.ViTImageClassifier(model.backbone, num_classes=3)
    assert task.backbone is model.backbone and task.config.head.num_classes == 3
    images = np.random.default_rng(1).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    np.testing.assert_array_equal(_np(task(images)), np.zeros((2, 3)))
    with pytest.raises(TypeError, match="only head settings"):
        keras_vit.ViTImageClassifier(model.backbone, num_classes=3, hidden_size=64)


def test_initialisation_follows_the_official_code():
    model = tiny(hidden_size=64, mlp_dim=256, num_heads=4)
    posemb = _np(model.get_layer("posembed_input").pos_embedding)
    assert abs(posemb.std() - 0.02) < 0.003
    assert not np.any(_np(model.get_layer("cls").cls))
    assert not np.any(_np(model.get_layer("head").kernel))
    block = model.get_layer("encoderblock_0")
    query = _np(block.MultiHeadDotProductAttention_1.query.kernel)
    limit = math.sqrt(6 / (64 + 64))  # xavier on the flattened (D, H*hd) shape
    assert query.shape == (64, 64) and np.abs(query).max() <= limit
    assert np.abs(query).max() > 0.9 * limit
    mlp_bias = _np(block.MlpBlock_3.Dense_0.bias)
    assert 0 < np.abs(mlp_bias).max() < 1e-5
    head = tiny(head_bias_init=-10.0)
    np.testing.assert_array_equal(_np(head.get_layer("head").bias), -10.0)


def test_attention_paths_agree_and_probabilities_are_valid():
    layer = MultiHeadSelfAttention(num_heads=4)
    x = np.random.default_rng(1).normal(size=(2, 7, 32)).astype("float32")
    fast = _np(layer(x))
    probs = _np(layer.probabilities(x))
    v = _np(layer.value(x)).reshape(2, 7, 4, 8)
    context = np.einsum("bhqk,bkhd->bqhd", probs, v).reshape(2, 7, 32)
    np.testing.assert_allclose(_np(layer.out(context)), fast, atol=1e-5)
    assert probs.shape == (2, 4, 7, 7)
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-5)


def test_attention_model_shares_weights_and_leaves_outputs_unchanged():
    model = tiny()
    images = np.random.default_rng(2).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    before = _np(model(images))
    probs = model.backbone.attention_model()(images)
    assert len(probs) == 2 and probs[0].shape == (2, 4, 65, 65)
    np.testing.assert_array_equal(_np(model(images)), before)
    # no head, shared blocks
    assert len(model.backbone.attention_model().weights) < len(model.weights)


def test_dropout_only_in_training():
    block = EncoderBlock(EncoderConfig(num_layers=1, num_heads=4, mlp_dim=64, dropout_rate=0.5,
                                       attention_dropout_rate=0.5))
    x = np.random.default_rng(3).normal(size=(2, 5, 32)).astype("float32")
    np.testing.assert_array_equal(_np(block(x)), _np(block(x)))
    assert not np.allclose(_np(block(x, training=True)), _np(block(x)))


def test_keras_file_round_trip(tmp_path):
    model = tiny(classifier="gap", representation_size=8, approximate_gelu=False,
                 dropout_rate=0.1, head_kernel_initializer="glorot_uniform", num_channels=1)
    images = np.random.default_rng(4).uniform(-1, 1, (2, 32, 32, 1)).astype("float32")
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, keras_vit.ViTImageClassifier)
    assert loaded.get_config() == model.get_config() and loaded.config == model.config
    np.testing.assert_array_equal(_np(loaded(images)), _np(model(images)))


def test_fit_one_step():
    model = tiny(dropout_rate=0.1, attention_dropout_rate=0.1)
    model.compile(optimizer="adam",
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    images = np.random.default_rng(5).uniform(-1, 1, (4, 32, 32, 3)).astype("float32")
    before = _np(model.get_layer("head").kernel).copy()
    history = model.fit(images, np.arange(4) % 10, epochs=1, batch_size=4, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    assert not np.array_equal(before, _np(model.get_layer("head").kernel))
