"""Hybrid ResNet+ViT (paper Sec. 3.1): names and parameter counts, training, bad input."""

import keras
import numpy as np
import pytest

from conftest import shapes_only
from keras_vit import ViTImageClassifier, create_model
from keras_vit.models.description import Stem
from keras_vit.models.registry import model_config


def test_r50_b16_param_count():
    with shapes_only():
        model = create_model("R50+ViT-B/16")
        assert model.count_params() == 98_659_112
        larger = create_model("R50+ViT-B/16", image_size=384)
        assert larger.count_params() == 98_659_112 + (577 - 197) * 768
    assert larger.config.grid == (24, 24) and model.config.encoder.dropout_rate == 0.1


@pytest.mark.parametrize("name,num_layers,patch,hidden", [
    ("R50+ViT-B/16", [3, 4, 9], 1, 768),
    ("R50+ViT-B/32", [3, 4, 6, 3], 1, 768),
    ("R50+ViT-L/16", [3, 4, 9], 1, 1024),
    ("R50+ViT-L/32", [3, 4, 6, 3], 1, 1024),
    ("R26+ViT-S/32", [2, 2, 2, 2], 1, 384),
    ("R+ViT-Ti/16", [], 8, 192),
    ("R26_S_32", [2, 2, 2, 2], 1, 384),
])
def test_hybrid_names(name, num_layers, patch, hidden):
    config = model_config(name)
    assert config.stem == Stem(num_layers=tuple(num_layers), width_factor=1)
    assert (config.patches.patch_size, config.encoder.hidden_size) == (patch, hidden)
    with shapes_only():
        model = create_model(name, image_size=384, num_classes=7)
    assert model.output_shape == (None, 7)
    assert model.config.stride * model.config.grid[0] == 384
    if name == "R+ViT-Ti/16":  # the published R_Ti_16 layout: (8, 8, 64, 192) patch kernel
        assert tuple(model.get_layer("embedding").conv.kernel.shape) == (8, 8, 64, 192)


def _tiny(**kwargs):
    config = dict(image_size=32, patch_size=1, hidden_size=32, num_layers=1, num_heads=2,
                  mlp_dim=32, num_classes=5, head_kernel_initializer="glorot_uniform",
                  stem=dict(num_layers=[1, 1], width_factor=0.5))
    config.update(kwargs)
    return ViTImageClassifier(**config)


@pytest.mark.parametrize("stem,patch", [(dict(num_layers=[1, 1], width_factor=0.5), 2),
                                        (dict(num_layers=[], width_factor=0.5), 8)])
def test_fit_one_step(stem, patch):
    model = _tiny(image_size=64, patch_size=patch, stem=stem)
    stride = model.config.stride
    assert model.config.grid == (64 // stride, 64 // stride)
    model.compile(optimizer=keras.optimizers.SGD(0.1),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = np.random.default_rng(0).uniform(-1, 1, (2, 64, 64, 3)).astype("float32")
    before = keras.ops.convert_to_numpy(model.get_layer("resnet").conv_root.kernel).copy()
    history = model.fit(x, np.array([1, 4]), epochs=1, batch_size=2, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    after = keras.ops.convert_to_numpy(model.get_layer("resnet").conv_root.kernel)
    assert np.abs(after - before).max() > 0


@pytest.mark.parametrize("width_factor", [0.25, 1.25, "wide"])
def test_group_norm_incompatible_width(width_factor):
    with pytest.raises(ValueError, match="width_factor"):
        _tiny(stem=dict(num_layers=[1], width_factor=width_factor))


@pytest.mark.parametrize("name,match", [
    ("R50+ViT-B/8", "official hybrids are"),
    ("R26+ViT-S/16", "official hybrids are"),
    ("R101+ViT-B/16", "Unknown model name"),
    ("R50+ViT-X/16", "Unknown model name"),
])
def test_unknown_hybrid_names(name, match):
    with pytest.raises(ValueError, match=match):
        create_model(name)


def test_image_not_a_multiple_of_the_stem_stride():
    with pytest.raises(ValueError, match="patch size times the ResNet stem stride"):
        _tiny(image_size=36)
