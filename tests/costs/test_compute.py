"""``keras_vit.flops``: by formula, against the published figure and XLA's cost analysis."""

import time

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit import ViTBackbone, ViTConfig, ViTImageClassifier
from keras_vit.costs.compute import flops, pretraining_flops
from keras_vit.costs.table_6 import TABLE_6
from keras_vit.models.registry import build_model, model_config

TINY = dict(hidden_size=64, num_layers=2, num_heads=4, mlp_dim=128, num_classes=10)


def test_vit_b16_is_17_6_gmacs_and_the_parts_add_up():
    count = flops(build_model("ViT-B/16"))
    assert round(count / 2e9, 1) == 17.6
    assert sum(count.parts.values()) == count and count.parts["stem"] == 0
    tokens, dim, layers = 197, 768, 12
    assert count.parts["attention_matrix"] == layers * 4 * tokens**2 * dim
    assert count.parts["mlp"] == layers * 4 * tokens * dim * 3072
    assert count.parts["patch_embedding"] == 2 * 196 * 16 * 16 * 3 * dim
    assert count.parts["head"] == 2 * dim * 1000


def test_image_size_argument_and_quadratic_attention():
    model = ViTImageClassifier(image_size=None, position_embedding_grid=(4, 4), patch_size=8,
                               classifier="gap", **TINY)
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
    lambda: ViTImageClassifier(image_size=48, patch_size=8, **TINY),
    lambda: ViTImageClassifier(image_size=32, patch_size=4, classifier="gap", **TINY),
    lambda: ViTImageClassifier(image_size=64, patch_size=2, **TINY,
                               stem=dict(num_layers=[1, 1], width_factor=0.5)),
    lambda: keras_vit.ResNetImageClassifier(block_units=[1, 2], width_factor=0.5, num_classes=10,
                               image_size=64),
])
def test_formula_agrees_with_xla(build):
    """XLA counts the same products plus the element-wise work (norms, softmax, GELU, adds)."""
    model = build()
    ratio = _xla_flops(model) / flops(model)
    assert 1.0 <= ratio < 1.06, ratio


def test_bad_input():
    model = ViTImageClassifier(image_size=32, patch_size=8, **TINY)
    with pytest.raises(ValueError, match="not a multiple"):
        flops(model, 36)
    with pytest.raises(ValueError, match=r"height \(4\) is not a multiple of the patch size"):
        flops(model, 4)
    with pytest.raises(TypeError, match="counts keras_vit models .a backbone or classifier of "
                                        "any family.*XLA's cost analysis"):
        flops(keras.Sequential([keras.layers.Dense(2)]))
    anysize = ViTImageClassifier(image_size=None, position_embedding_grid=(4, 4), patch_size=8,
                                 **TINY)
    with pytest.raises(ValueError, match="pass flops"):
        flops(anysize)
    with pytest.raises(ValueError, match="pass flops"):
        flops(anysize.config)


def test_a_backbone_a_classifier_and_their_configs_count_alike():
    """The head is the only difference; a ViTConfig counts what the model it describes does."""
    backbone = ViTBackbone(image_size=32, patch_size=8, **{k: v for k, v in TINY.items()
                                                            if k != "num_classes"})
    classifier = ViTImageClassifier(backbone, num_classes=10)
    assert flops(classifier) == flops(classifier.config) == flops(classifier.backbone) + (
        2 * 64 * 10)
    assert flops(backbone).parts["head"] == 0 and flops(backbone.config) == flops(backbone)
    assert flops(classifier.config, 64) == flops(backbone.config, 64, num_classes=10)
    assert flops(model_config("ViT-B/16")) == flops("ViT-B/16")


@pytest.mark.parametrize("name, image_size, overrides", [
    ("ViT-Ti/4", 28, dict(num_classes=10, num_channels=1)),
    ("ViT-S/16", 96, dict(classifier="gap", representation_size=128, num_classes=None)),
    ("ViT-B/16", 224, {}),
    ("R+ViT-Ti/16", 64, {}),
    ("R26+ViT-S/32", 64, dict(num_classes=5)),
    ("BiT-R26x1", 64, {}),
    ("BiT-R50x1", (96, 128), dict(num_classes=None)),
])
def test_a_name_counts_what_the_built_model_counts(name, image_size, overrides):
    built = flops(build_model(name, image_size=image_size, **overrides))
    by_name = flops(name, image_size, **overrides)
    assert by_name == built and by_name.parts == built.parts


def test_a_name_builds_nothing(monkeypatch):
    """ViT-H/14 and BiT-R200x3 are counted without one layer or weight being made."""

    def refuse(*args, **kwargs):
        raise AssertionError("flops of a name must not build layers")

    monkeypatch.setattr(keras.layers.Layer, "__init__", refuse)
    assert round(flops("ViT-H/14") / 1e9) == 335  # 334.6 GFLOPs at 224 px, 1000 classes
    assert flops("BiT-R200x3", 448, num_classes=None).parts["head"] == 0
    start = time.perf_counter()
    for row in TABLE_6:
        pretraining_flops(row.model, row.epochs)
    assert time.perf_counter() - start < 1.0


def test_table_6_against_the_paper():
    """Ours within 2.5 % for ViTs and hybrids, but for one row; the BiT ResNets 3-5 % high."""
    assert len(TABLE_6) == 18 and len({(r.model, r.epochs) for r in TABLE_6}) == 18
    for row in TABLE_6:
        ratio = pretraining_flops(row.model, row.epochs) / 1e18 / row.exaflops
        if row.model.startswith("BiT"):
            assert 1.03 < ratio < 1.055, row
        elif (row.model, row.epochs) == ("R50+ViT-L/16", 7):
            assert 0.96 < ratio < 0.98, row  # the paper's 859 is not half its own 1668
        else:
            assert abs(ratio - 1) < 0.025, row  # ViT-B/32: 56.3 against 55


def test_bad_names_and_arguments():
    with pytest.raises(ValueError, match="Unknown model name 'ViT-X/16'"):
        flops("ViT-X/16")
    with pytest.raises(ValueError, match="not a multiple"):
        flops("ViT-B/16", 200)
    with pytest.raises(TypeError, match="takes the arguments of create_model.*'hidden_sise'"):
        flops("ViT-B/16", hidden_sise=512)
    with pytest.raises(TypeError, match=r"flops\('BiT-R50x1', ...\) takes the arguments of "
                                        "create_model: A ResNet has no setting 'stem'"):
        flops("BiT-R50x1", stem=dict(num_layers=(3, 4, 9)))
    with pytest.raises(TypeError, match="only with a model name"):
        flops(ViTImageClassifier(image_size=32, patch_size=8, **TINY), num_classes=3)
    with pytest.raises(TypeError, match="has no setting .hidden_sise."):
        flops(ViTConfig.from_keywords(patch_size=8, **TINY), hidden_sise=3)


def test_a_name_takes_what_create_model_takes():
    """The model's name, its dtype policy and Keras' trainable flag change no count; the stem
    of a hybrid and the head are described by name too."""
    vit = flops("ViT-B/16")
    assert flops("ViT-B/16", name="mine", dtype="mixed_bfloat16", trainable=False) == vit
    assert flops("BiT-R50x1", trainable=False, dtype="bfloat16") == flops("BiT-R50x1")
    assert flops("ViT-B/16", stem=dict(num_layers=(3, 4, 9)), patch_size=1) == flops(
        "R50+ViT-B/16")
    assert flops("ViT-B/16", num_classes=None) == vit - 2 * 768 * 1000
