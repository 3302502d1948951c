"""Axial-ViT and AxialResNet (paper Appendix D.6, Fig. 13): counts, FLOPs, options, errors."""

import keras
import numpy as np
import pytest

import keras_vit
from conftest import shapes_only
from keras_vit.costs.compute import flops
from keras_vit.evaluation.fewshot import fewshot_linear
from keras_vit.models.registry import BIT_DEPTHS, VIT_SIZES, parse
from keras_vit.training.recipes import prepare_finetuning

TINY = dict(patch_size=4, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32, num_classes=5)
# Axial-DeepLab's reference AxialResNets (csrhddlam/axial-deeplab, lib/models/axialnet.py),
# counted with torch from that code (224 px, 1000 classes); its README prints 5.9M for 26-S.
# Their units expand 2x (ours 4x, as scenic's and BiT's) and use BatchNorm, so only the
# attention layer is compared below.
REFERENCE_COUNTS = {"axial26s": 5_944_936, "axial50s": 11_586_216, "axial50m": 25_179_400,
                    "axial50l": 43_973_480}


def _tiny_axial_vit(**kwargs):
    return keras_vit.ViTImageClassifier(**dict(dict(TINY, image_size=16, axial=True), **kwargs))


def _tiny_axial_resnet(**kwargs):
    return keras_vit.AxialResNetImageClassifier(**dict(dict(
        block_units=(1, 1), width_factor=0.5, num_heads=2, num_classes=5, image_size=32),
        **kwargs))


def axial_vit_formula(size, patch, image_size=224, classes=1000):
    """The ViT of the paper's Eqs. 1-4 with two blocks (row and column) per layer."""
    d, layers, mlp = (VIT_SIZES[size][k] for k in ("hidden_size", "num_layers", "mlp_dim"))
    tokens = (image_size // patch) ** 2 + 1  # the position table keeps the class row 0
    block = 2 * 2 * d + 4 * (d * d + d) + (d * mlp + mlp) + (mlp * d + d)
    embedding = patch * patch * 3 * d + d + d + tokens * d
    return embedding + 2 * layers * block + 2 * d + d * classes + classes


def attention_formula(channels, heads, length):
    """PositionSensitiveAxialAttention: 1x1 projection to 2C, the (2C/h, 2L-1) relative table
    of Axial-DeepLab's AxialAttention, GroupNorm of 2C and of C channels."""
    return channels * 2 * channels + 2 * channels // heads * (2 * length - 1) + 4 * channels \
        + 2 * channels


def axial_resnet_formula(depth, width_factor=1, heads=8, image_size=224, classes=1000):
    width = 64 * width_factor
    total = 7 * 7 * 3 * width + 2 * width  # root conv and GroupNorm
    side, channels = image_size // 4, width
    for stage, units in enumerate(BIT_DEPTHS[depth]):
        features = width * 2**stage
        for unit in range(units):
            total += channels * features + 2 * features  # conv1, gn1
            total += 2 * attention_formula(features, heads, side)  # on the unit's input map
            total += features * 4 * features + 2 * 4 * features  # conv3, gn3
            if unit == 0:
                total += channels * 4 * features + 2 * 4 * features  # projection
                side //= 2 if stage > 0 else 1
            channels = 4 * features
    return total + channels * classes + classes


def _count(name):
    with shapes_only():
        return keras_vit.create_model(name).count_params()


@pytest.mark.parametrize("name, expected", [
    ("Axial-ViT-B/16", 171_622_120), ("Axial-ViT-B/32", 173_278_696),
    ("AxialResNet50", 19_373_640),
])
def test_parameter_counts_follow_the_closed_forms(name, expected):
    assert _count(name) == expected
    if name.startswith("Axial-ViT"):
        assert expected == axial_vit_formula("B", int(name[-2:]))
    else:
        assert expected == axial_resnet_formula(50)


def test_attention_layer_count_against_axial_deeplab():
    """Axial-DeepLab's AxialAttention(C, C, groups=8, kernel_size=L) holds a (C, 2C) 1x1 conv,
    the (2C/8, 2L-1) table, BatchNorms of 2C, 3*8 and 2C channels (2 parameters each): ours
    differs only in the norms (GroupNorm of 2C and C channels)."""
    layer = keras_vit.layers.axial.PositionSensitiveAxialAttention(8, axis=1)
    layer.build((None, 56, 56, 64))
    reference = 64 * 128 + 128 // 8 * 111 + 2 * 128 + 2 * 24 + 2 * 128
    assert layer.count_params() == attention_formula(64, 8, 56)
    assert layer.count_params() == reference - 2 * 24 - 2 * 64
    assert REFERENCE_COUNTS["axial26s"] // 10**5 == 59  # the README's 5.9M


def test_names_families_and_published_weights():
    assert parse("Axial-ViT-S/8")[0] == "Axial-ViT"
    family, cls, config = parse("AxialResNet101x2")
    assert (family, cls, config.stages.width_factor, config.axial.num_heads) == (
        "AxialResNet", keras_vit.AxialResNetImageClassifier, 2, 8)
    with pytest.raises(ValueError, match="No weights exist for 'AxialResNet50'"):
        keras_vit.create_model("AxialResNet50", weights="imagenet21k/ViT-B_16")


def test_flops_of_names_and_built_models():
    count = flops("Axial-ViT-B/16")
    vit = flops("ViT-B/16")
    assert count.parts["mlp"] == 2 * 2 * 2 * 15 * 14 * 768 * 3072 * 12
    assert count.parts["attention_matrix"] < vit.parts["attention_matrix"] / 6
    with shapes_only():
        model = keras_vit.create_model("Axial-ViT-Ti/4", image_size=None, num_classes=5,
                                       position_embedding_grid=(4, 4))
    assert flops(model, 16) == flops("Axial-ViT-Ti/4", 16, num_classes=5)
    with shapes_only():
        resnet = keras_vit.create_model("AxialResNet26", image_size=32, num_classes=5)
    assert flops(resnet) == flops("AxialResNet26", 32, num_classes=5)
    assert abs(flops("AxialResNet50") / flops("BiT-R50x1") - 1) < 0.02  # Fig. 13: alike


@pytest.mark.skipif(keras.backend.backend() != "jax", reason="XLA's cost analysis of a jax jit")
@pytest.mark.parametrize("build", [_tiny_axial_vit, _tiny_axial_resnet])
def test_formula_agrees_with_xla(build):
    import jax

    model = build()
    x = np.zeros((1, *model.input.shape[1:]), "float32")
    fn = jax.jit(lambda values, x: model.stateless_call(values, [], x)[0])
    cost = fn.lower([v.value for v in model.trainable_variables], x).compile().cost_analysis()
    ratio = (cost[0] if isinstance(cost, list) else cost)["flops"] / flops(model)
    assert 1.0 <= ratio < 1.25, ratio


def test_any_size_equals_the_fixed_model_and_keeps_the_grid_2d():
    model = _tiny_axial_vit(position_embedding="learned_2d")
    anysize = keras_vit.resize_model(model, None)
    x = np.random.default_rng(0).uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    np.testing.assert_allclose(anysize.predict(x, verbose=0), model.predict(x, verbose=0),
                               atol=1e-5)
    assert anysize.predict(np.zeros((1, 24, 12, 3), "float32"), verbose=0).shape == (1, 5)
    probs = model.backbone.attention_model().predict(x, verbose=0)
    assert [p.shape for p in probs] == [(2, 5, 2, 4, 4), (2, 4, 2, 5, 5)]


def test_bad_input():
    with pytest.raises(ValueError, match="not a multiple of the patch size"):
        _tiny_axial_vit(image_size=18)
    with pytest.raises(ValueError, match="fixed image_size"):
        _tiny_axial_resnet(image_size=None)
    for model in (_tiny_axial_vit(), _tiny_axial_resnet()):
        for format in ("official", "timm", "transformers"):
            with pytest.raises(ValueError, match="no official, timm or transformers checkpoints"):
                keras_vit.save_checkpoint(model, "/nonexistent/x.npz", format=format)
        with pytest.raises(ValueError, match="keras-hub layout"):
            keras_vit.to_keras_hub(model)


def test_finetuning_and_fewshot():
    model = _tiny_axial_vit(representation_size=8)
    tuned = prepare_finetuning(model, 3, image_size=24)
    head = tuned.config.head
    assert (head.num_classes, head.representation_size, tuned.config.image_size) == (
        3, None, (24, 24))
    assert type(tuned) is keras_vit.ViTImageClassifier and tuned.config.encoder.axial
    resnet = prepare_finetuning(_tiny_axial_resnet(), 3)
    assert resnet.config.head.num_classes == 3
    assert type(resnet) is keras_vit.AxialResNetImageClassifier
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (12, 32, 32, 3)).astype("float32")
    y = np.arange(12) % 3
    accuracy = fewshot_linear(resnet, x, y, x, y, shots=(2,), seeds=(0,))
    assert set(accuracy) == {2}
