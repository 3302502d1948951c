"""Inspection runs the model's own forward: the function the graph is traced from.

Relevancy's gated logits and every block's attention come from ``ViTImageClassifier.record``
and ``ViTBackbone.record``; if that forward and the model's call drifted apart (a layer added
to the graph and not to the record, or the reverse), the explanations would describe another
model. These tests hold the two together for every family relevancy explains, a hybrid
included, and keep the inspection modules off layer look-ups by name.
"""

import ast
import pathlib

import keras
import numpy as np
import pytest

import keras_vit.inspection
from keras_vit import ViTBackbone, ViTImageClassifier
from keras_vit.inspection import attention_weights, relevancy

TINY = dict(patch_size=4, hidden_size=8, num_layers=2, num_heads=2, mlp_dim=16, num_classes=3)
FAMILIES = {  # every model relevancy explains: a ViT of each option that changes the forward
    "token": dict(image_size=12),
    "gap_every_layer": dict(image_size=12, classifier="gap",
                            position_embedding_placement="every_layer"),
    "pre_logits_2d": dict(image_size=12, representation_size=6,
                          position_embedding="learned_2d"),
    "relative": dict(image_size=12, position_embedding="relative"),
    "any_size": dict(image_size=None, position_embedding_grid=(3, 3)),
    "hybrid": dict(image_size=32, patch_size=2, num_layers=1, stem_num_layers=(1,),
                   stem_width_factor=0.5),
}


def build(settings):
    keras.utils.set_random_seed(0)
    model = ViTImageClassifier(**{**TINY, **settings}, head_kernel_initializer="glorot_uniform")
    rng = np.random.default_rng(0)
    for variable in model.weights:  # soft, varied attention and a head that is not zero
        variable.assign(rng.normal(scale=0.3, size=variable.shape).astype(variable.dtype))
    return model


def numpy(x):
    return np.asarray(keras.ops.convert_to_numpy(x))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_gated_forward_at_ones_is_the_call_and_records_every_step(family):
    model = build(FAMILIES[family])
    config = model.config
    size = config.image_size or (16, 16)
    x = np.random.default_rng(1).uniform(-1, 1, (2, *size, 3)).astype("float32")
    rows, cols = (side // config.stride for side in size)
    tokens = rows * cols + (config.encoder.classifier == "token")
    gates = [keras.ops.ones((2, 2, tokens, tokens))] * config.encoder.num_layers
    logits, out = model.record(x, gates=gates)
    np.testing.assert_allclose(numpy(logits), numpy(model(x)), atol=1e-5)
    np.testing.assert_allclose(numpy(out["logits"]), numpy(logits))
    called = model.backbone(x)
    for name in ("tokens", "pooled"):
        np.testing.assert_allclose(numpy(out[name]), numpy(called[name]), atol=1e-5)
    shapes = {name: tuple(value.shape) for name, value in out.items()
              if name not in ("blocks", "attention")}
    assert shapes["patches"] == (2, rows, cols, 8)
    assert shapes["embedded"] == shapes["tokens"] == (2, tokens, 8)
    assert shapes["pooled"] == (2, 8) and shapes["logits"] == (2, 3)
    assert ("stem" in out) == (config.stem is not None)
    assert ("pre_logits" in out) == (config.head.representation_size is not None)
    assert [tuple(b.shape) for b in out["blocks"]] == [(2, tokens, 8)] * config.encoder.num_layers
    assert [tuple(a.shape) for a in out["attention"]] == [(2, 2, tokens, tokens)] * len(gates)
    np.testing.assert_allclose(numpy(out["blocks"][-1]).shape, shapes["tokens"])


def test_the_forward_without_gates_and_the_intermediates_model_agree():
    model = build(FAMILIES["hybrid"])
    x = np.random.default_rng(2).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    out = model.backbone.record(x)
    recorded = model.backbone.intermediates()(x)
    assert set(recorded) == set(out) == {"stem", "patches", "embedded", "blocks", "attention",
                                         "tokens", "pooled"}
    np.testing.assert_allclose(numpy(recorded["tokens"]), numpy(out["tokens"]), atol=1e-6)
    np.testing.assert_allclose(numpy(recorded["attention"][0]), numpy(out["attention"][0]),
                               atol=1e-6)
    np.testing.assert_allclose(numpy(out["tokens"]), numpy(model.backbone(x)["tokens"]),
                               atol=1e-5)


def test_gates_on_an_axial_vit_are_refused_by_its_encoder():
    backbone = ViTBackbone(image_size=8, patch_size=4, hidden_size=8, num_layers=1, num_heads=2,
                           mlp_dim=16, axial=True)
    x = np.zeros((1, 8, 8, 3), "float32")
    assert len(backbone.record(x)["attention"]) == 2  # a row and a column map
    with pytest.raises(ValueError, match="no gate"):
        backbone.record(x, gates=[np.ones((1, 2, 5, 5), "float32")])


def _get_layer_calls(path):
    """(line, text) of every ``get_layer``/``graph_layer`` call in a module's source."""
    tree = ast.parse(path.read_text())
    return [(node.lineno, ast.unparse(node)) for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("get_layer", "graph_layer")]


def test_inspection_looks_up_no_layer_by_name():
    package = pathlib.Path(keras_vit.inspection.__file__).parent
    found = {path.name: calls for path in sorted(package.rglob("*.py"))
             if (calls := _get_layer_calls(path))}
    assert found == {}


def test_relevancy_and_attention_run_with_lookups_by_name_broken(monkeypatch):
    model = build(FAMILIES["hybrid"])
    x = np.random.default_rng(3).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    expected = relevancy(model, x, class_index=1), attention_weights(model, x)

    def refuse(self, *args, **kwargs):
        raise AssertionError("inspection looked a layer up by name")

    for cls in (ViTBackbone, ViTImageClassifier, keras.Model):
        monkeypatch.setattr(cls, "get_layer", refuse)
        monkeypatch.setattr(cls, "graph_layer", refuse, raising=False)
    np.testing.assert_array_equal(relevancy(model, x, class_index=1), expected[0])
    for got, want in zip(attention_weights(model, x), expected[1]):
        np.testing.assert_array_equal(got, want)
