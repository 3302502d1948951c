"""LoRA on keras_vit models: which projections it reaches, what trains, and merging the factors
back so that every checkpoint format takes the model."""

import keras
import numpy as np
import pytest

import keras_vit
from conftest import installed
from keras_vit.layers.tree import sublayers
from keras_vit.models import axial, lora, resnet_v2, vit  # noqa: F401  (load_model)

TINY = dict(image_size=8, patch_size=4, hidden_size=16, num_layers=2, num_heads=2, mlp_dim=32,
            num_classes=3, head_kernel_initializer="glorot_uniform")


def _images(model, batch=4):
    shape = model.input_shape[1:]
    return np.random.default_rng(0).uniform(-1, 1, (batch, *shape)).astype("float32")


def _numpy(x):
    return keras.ops.convert_to_numpy(x)


def _adapted(model):
    return sorted(layer.path for layer in sublayers(model, include_self=True) if
                  getattr(layer, "lora_enabled", False))


def _train(model, steps=3):
    model.compile(keras.optimizers.SGD(0.5), keras.losses.SparseCategoricalCrossentropy(True))
    x = _images(model, 8)
    model.fit(x, np.arange(8) % 3, batch_size=4, epochs=steps, verbose=0)


@pytest.mark.parametrize("targets, names", [("qv", {"query", "value"}),
                                            ("all", {"query", "key", "value", "out"})])
def test_enable_lora_reaches_the_attention_projections(targets, names):
    model = keras_vit.ViTImageClassifier(**TINY)
    before = _numpy(model(_images(model)))
    lora.enable_lora(model, rank=4, targets=targets)
    adapted = _adapted(model)
    assert len(adapted) == 2 * len(names) and {p.rsplit("/", 1)[1] for p in adapted} == names
    # B starts at zero: the adapted model computes the pre-trained function
    np.testing.assert_allclose(_numpy(model(_images(model))), before, atol=1e-6)
    rank_4 = 4 * (16 + 16)  # a (16 x 4) and a (4 x 16) factor per projection
    assert lora.trainable_parameters(model) == 2 * len(names) * rank_4 + 16 * 3 + 3
    assert {v.path.rsplit("/", 1)[1] for v in model.trainable_weights} == {
        "lora_kernel_a", "lora_kernel_b", "kernel", "bias"}  # the head's kernel and bias
    assert all(v.path.startswith("head/") or "lora" in v.path for v in model.trainable_weights)


def test_layer_enable_lora_reaches_every_projection():
    model = keras_vit.ViTImageClassifier(**TINY)
    attention = model.get_layer("encoderblock_0").MultiHeadDotProductAttention_1
    for projection in (attention.query, attention.key, attention.value, attention.out):
        projection.enable_lora(2)
        assert projection.lora_kernel_a.shape == (16, 2)


def test_training_moves_only_the_factors_and_the_head():
    model = lora.enable_lora(keras_vit.ViTImageClassifier(**TINY), rank=2)
    frozen = {v.path: _numpy(v) for v in model.weights if not v.trainable}
    head = _numpy(model.get_layer("head").kernel)
    _train(model)
    for variable in model.weights:
        if variable.path in frozen:
            np.testing.assert_array_equal(_numpy(variable), frozen[variable.path])
    assert not np.allclose(_numpy(model.get_layer("head").kernel), head)
    value = model.get_layer("encoderblock_1").MultiHeadDotProductAttention_1.value
    assert np.abs(_numpy(value.lora_kernel_b)).max() > 0


def _trained_lora_model(**overrides):
    model = lora.enable_lora(keras_vit.ViTImageClassifier(**dict(TINY, **overrides)), rank=2,
                             targets="all")
    _train(model)
    return model


def test_merge_lora_gives_a_plain_model_with_the_same_outputs(tmp_path):
    model = _trained_lora_model()
    images = _images(model)
    merged = lora.merge_lora(model)
    assert _adapted(merged) == [] and merged.count_params() == model.count_params() - 8 * 64
    assert lora.trainable_parameters(merged) == merged.count_params()
    np.testing.assert_allclose(_numpy(merged(images)), _numpy(model(images)), atol=1e-5)
    path = str(tmp_path / "merged.keras")
    merged.save(path)
    np.testing.assert_allclose(_numpy(keras.saving.load_model(path)(images)),
                               _numpy(model(images)), atol=1e-5)


CHECKPOINTS = [("official", "vit.npz", {}),
               ("timm", "vit.safetensors", {"representation_size": None}),
               ("transformers", "hf", {"representation_size": None})]


@pytest.mark.parametrize("format, name, overrides", CHECKPOINTS, ids=[c[0] for c in CHECKPOINTS])
def test_a_merged_model_saves_to_every_checkpoint_format(format, name, overrides, tmp_path):
    if format != "official" and not installed("safetensors", "torch"):
        pytest.skip("timm and transformers files need safetensors and torch")
    model = _trained_lora_model(**overrides)
    path = str(tmp_path / name)
    with pytest.raises(ValueError, match=r"LoRA factors.*merge_lora\(model\)"):
        keras_vit.save_checkpoint(model, path, format=format)
    merged = lora.merge_lora(model)
    keras_vit.save_checkpoint(merged, path, format=format)
    # a timm file records neither the head count nor the (tanh) GELU
    options = {"num_heads": 2, "approximate_gelu": True} if format == "timm" else {}
    loaded = keras_vit.load_checkpoint(path, format=format, **options)
    images = _images(model)
    np.testing.assert_allclose(_numpy(loaded(images)), _numpy(model(images)), atol=1e-5)


@pytest.mark.skipif(not installed("keras_hub"), reason="keras-hub is not installed")
def test_a_merged_model_goes_to_keras_hub_and_back():
    model = _trained_lora_model(approximate_gelu=False)
    merged = lora.merge_lora(model)
    hub = keras_vit.to_keras_hub(merged)
    images = _images(model)
    np.testing.assert_allclose(_numpy(hub(images)), _numpy(model(images)), atol=1e-5)
    np.testing.assert_allclose(_numpy(keras_vit.from_keras_hub(hub)(images)),
                               _numpy(model(images)), atol=1e-5)


def test_axial_models_take_lora():
    model = keras_vit.ViTImageClassifier(**TINY, axial=True)
    assert len(_adapted(lora.enable_lora(model, 2))) == 2 * 2 * 2  # row and column blocks
    resnet = keras_vit.AxialResNetImageClassifier(block_units=(1,), width_factor=0.5, num_heads=2,
                                   num_classes=3, image_size=8)
    assert [p.rsplit("/", 1)[1] for p in _adapted(lora.enable_lora(resnet, 2, "all"))] == [
        "qkv", "qkv"]


def test_lora_on_a_quantized_model_is_refused_with_the_order_that_works(tmp_path):
    model = keras_vit.ViTImageClassifier(**TINY)
    model.quantize("int8")
    with pytest.raises(ValueError, match=r"quantized \(int8\).*merge_lora\(model\); "
                                         r"model.quantize\('int8'\)"):
        lora.enable_lora(model, rank=2)
    assert _adapted(model) == []
    # the order that works: LoRA on the float model, merge, quantize, save
    model = _trained_lora_model()
    merged = lora.merge_lora(model)
    merged.quantize("int8")
    path = str(tmp_path / "int8.keras")
    merged.save(path)
    images = _images(model)
    np.testing.assert_allclose(_numpy(keras.saving.load_model(path)(images)),
                               _numpy(merged(images)), atol=1e-6)


def test_lora_errors_name_the_fix():
    model = keras_vit.ViTImageClassifier(**TINY)
    with pytest.raises(ValueError, match="positive integer"):
        lora.enable_lora(model, 0)
    with pytest.raises(ValueError, match="Unknown LoRA targets 'mlp'.*'qv'"):
        lora.enable_lora(model, 2, targets="mlp")
    lora.enable_lora(model, 2)
    with pytest.raises(ValueError, match="already enabled.*merge_lora"):
        lora.enable_lora(model, 2)
    with pytest.raises(ValueError, match="merge them into the kernels before quantizing"):
        model.quantize("int8")
    bit = keras_vit.ResNetImageClassifier(block_units=(1,), width_factor=1, num_classes=3,
                                          image_size=8)
    with pytest.raises(ValueError, match="no query/value projections.*convolutions"):
        lora.enable_lora(bit, 2)
    resnet = keras_vit.AxialResNetImageClassifier(block_units=(1,), width_factor=0.5, num_heads=2,
                                   num_classes=3, image_size=8)
    with pytest.raises(ValueError, match="fused qkv projection: use targets='all'"):
        lora.enable_lora(resnet, 2)
