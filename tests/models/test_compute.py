"""``keras_vit.flops``: by formula, against the published figure and XLA's cost analysis."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.models.compute import flops

TINY = dict(hidden_size=64, num_layers=2, num_heads=4, mlp_dim=128, num_classes=10)


def test_vit_b16_is_17_6_gmacs_and_the_parts_add_up():
    count = flops(keras_vit.create_model("ViT-B/16"))
    assert round(count / 2e9, 1) == 17.6
    assert sum(count.parts.values()) == count and count.parts["stem"] == 0
    tokens, dim, layers = 197, 768, 12
    assert count.parts["attention_matrix"] == layers * 4 * tokens**2 * dim
    assert count.parts["mlp"] == layers * 4 * tokens * dim * 3072
    assert count.parts["patch_embedding"] == 2 * 196 * 16 * 16 * 3 * dim
    assert count.parts["head"] == 2 * dim * 1000


def test_image_size_argument_and_quadratic_attention():
    model = keras_vit.VisionTransformer(image_size=None, position_embedding_grid=(4, 4),
                                        patch_size=8, classifier="gap", **TINY)
    small, large = flops(model, 32), flops(model, 64)
    assert large.parts["attention_matrix"] == 16 * small.parts["attention_matrix"]
    assert large.parts["mlp"] == 4 * small.parts["mlp"]
    assert flops(keras_vit.resize_model(model, 64)) == large


def _xla_flops(model):
    import jax

    x = np.zeros((1, *model.input.shape[1:]), "float32")
    fn = jax.jit(lambda values, x: model.stateless_call(values, [], x)[0])
    cost = fn.lower([v.value for v in model.trainable_variables], x).compile().cost_analysis()
    return (cost[0] if isinstance(cost, list) else cost)["flops"]


@pytest.mark.skipif(keras.backend.backend() != "jax", reason="XLA's cost analysis of a jax jit")
@pytest.mark.parametrize("build", [
    lambda: keras_vit.VisionTransformer(image_size=48, patch_size=8, **TINY),
    lambda: keras_vit.VisionTransformer(image_size=32, patch_size=4, classifier="gap", **TINY),
    lambda: keras_vit.VisionTransformer(image_size=64, patch_size=2, **TINY,
                                        resnet=dict(num_layers=[1, 1], width_factor=0.5)),
    lambda: keras_vit.ResNetV2(block_units=[1, 2], width_factor=0.5, num_classes=10,
                               image_size=64),
])
def test_formula_agrees_with_xla(build):
    """XLA counts the same products plus the element-wise work (norms, softmax, GELU, adds)."""
    model = build()
    ratio = _xla_flops(model) / flops(model)
    assert 1.0 <= ratio < 1.06, ratio


def test_bad_input():
    model = keras_vit.VisionTransformer(image_size=32, patch_size=8, **TINY)
    with pytest.raises(ValueError, match="not a multiple"):
        flops(model, 36)
    with pytest.raises(ValueError, match="smaller than one patch"):
        flops(model, 4)
    with pytest.raises(TypeError, match="counts keras_vit VisionTransformer and ResNetV2"):
        flops(keras.Sequential([keras.layers.Dense(2)]))
    anysize = keras_vit.resize_model(model, None)
    with pytest.raises(ValueError, match="pass flops"):
        flops(anysize)
