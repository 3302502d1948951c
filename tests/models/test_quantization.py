"""``model.quantize(mode)`` reaches every projection of every model family, keeps the logits near
float32, and a quantized model saves to and loads from ``.keras``."""

import gc
import os
import warnings

import keras
import numpy as np
import pytest

import keras_vit
from conftest import fixture_path
from keras_vit.layers.tree import sublayers
from keras_vit.models import axial, quantization, resnet_v2, vit  # noqa: F401  (load_model)

TINY = dict(hidden_size=16, num_layers=2, num_heads=2, mlp_dim=32, num_classes=3,
            head_kernel_initializer="glorot_uniform")
FAMILIES = {
    "vit": lambda: keras_vit.ViTImageClassifier(image_size=8, patch_size=4,
                                                representation_size=8, **TINY),
    "hybrid": lambda: keras_vit.ViTImageClassifier(
        image_size=16, patch_size=1, stem=dict(num_layers=[1], width_factor=0.5), **TINY),
    "axial_vit": lambda: keras_vit.ViTImageClassifier(image_size=8, patch_size=4, axial=True,
                                                      **TINY),
    "axial_resnet": lambda: keras_vit.AxialResNetImageClassifier(
        block_units=(1,), width_factor=0.5, num_heads=2, num_classes=3, image_size=8,
        head_kernel_initializer="glorot_uniform"),
    "bit": lambda: keras_vit.ResNetImageClassifier(block_units=(1,), width_factor=1, num_classes=3,
                                      image_size=8, head_kernel_initializer="glorot_uniform"),
}
# Dense layers per family: 4 attention projections and 2 MLP layers a block (Axial-ViT: two
# blocks a layer), pre-logits, head; AxialResNet: one qkv per axial attention, two a unit.
PROJECTIONS = {"vit": 2 * 6 + 2, "hybrid": 2 * 6 + 1, "axial_vit": 2 * 2 * 6 + 1,
               "axial_resnet": 2 + 1, "bit": 1}


def _images(model, batch=2):
    shape = model.input_shape[1:]
    return np.random.default_rng(0).uniform(-1, 1, (batch, *shape)).astype("float32")


def _quantize(model, mode):
    """Quantize, and return the warnings that name a layer Keras skipped."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.quantize(mode)
    return [str(w.message) for w in caught if "quantize" in str(w.message)]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_int8_reaches_every_projection_without_warnings(family):
    model = FAMILIES[family]()
    assert _quantize(model, "int8") == []
    layers = list(sublayers(model))
    projections = [layer for layer in layers if quantization.is_quantizable(layer)]
    assert len(projections) == PROJECTIONS[family]
    assert all(layer.quantization_mode == "int8" for layer in projections)
    if family in ("vit", "hybrid", "axial_vit"):
        names = {layer.path.rsplit("/", 1)[-1] for layer in projections}
        assert {"query", "key", "value", "out", "Dense_0", "Dense_1", "head"} <= names
    # Keras 3.15 quantizes no convolution: they keep their float kernels.
    convolutions = [layer for layer in layers if isinstance(layer, keras.layers.Conv2D)]
    assert convolutions and all(layer.quantization_mode is None for layer in convolutions)


# Largest |logit - float32 logit| over the largest |float32 logit| on the official fixtures
# (random weights). Measured 2026-11-26, the same to 4 digits on jax, tensorflow and torch:
# int8 0.018 (ViT) and 0.0085 (hybrid), int4 0.116 and 0.103.
TOLERANCE = {"int8": 0.04, "int4": 0.25}


@pytest.mark.parametrize("mode", sorted(TOLERANCE))
@pytest.mark.parametrize("name", ["vit_tiny_token_rep16", "hybrid_tiny_r2-1_token"])
def test_quantized_logits_stay_near_float32(name, mode):
    io = np.load(fixture_path(f"{name}_io.npz"))
    model = keras_vit.load_checkpoint(fixture_path(f"{name}.npz"))
    expected = keras.ops.convert_to_numpy(model(io["images"]))
    model.quantize(mode)
    logits = keras.ops.convert_to_numpy(model(io["images"]))
    error = np.abs(logits - expected).max() / np.abs(expected).max()
    assert 0 < error < TOLERANCE[mode], error


@pytest.mark.parametrize("mode", ["int8", "int4", "float8"])
def test_a_quantized_model_saves_and_loads(mode, tmp_path):
    model = FAMILIES["vit"]()
    model.quantize(mode)
    images = _images(model)
    path = str(tmp_path / "quantized.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    modes = {layer.quantization_mode for layer in sublayers(loaded, include_self=True)
             if quantization.is_quantizable(layer)}
    assert modes == {mode}
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(loaded(images)),
                                  keras.ops.convert_to_numpy(model(images)))
    # a loaded quantized model saves again (each layer holds its own policy of the map)
    again = str(tmp_path / "again.keras")
    loaded.save(again)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(keras.saving.load_model(again)(images)),
                                  keras.ops.convert_to_numpy(model(images)))


def test_a_mixed_precision_model_quantizes_and_keeps_float32_logits(tmp_path):
    model = keras_vit.ViTImageClassifier(image_size=8, patch_size=4, dtype="mixed_bfloat16",
                                         **TINY)
    model.quantize("int8")
    path = str(tmp_path / "mixed.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.get_layer("head").quantization_mode == "int8"
    assert loaded.get_layer("head").compute_dtype == "float32"
    logits = loaded(_images(model))
    assert keras.backend.standardize_dtype(logits.dtype) == "float32"
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(logits),
                                  keras.ops.convert_to_numpy(model(_images(model))))


def test_quantizing_passes_over_the_whole_heap_once():
    """Keras collects after each kernel it drops: those passes run with the older objects frozen,
    and one full pass ends the call, with nothing left frozen."""
    frozen = []

    def record(phase, info):
        if phase == "start" and info["generation"] == 2:
            frozen.append(gc.get_freeze_count())

    model = FAMILIES["vit"]()
    gc.callbacks.append(record)
    try:
        model.quantize("int8")
    finally:
        gc.callbacks.remove(record)
    assert frozen[-1] == 0 and all(count > 0 for count in frozen[:-1]), frozen
    assert gc.get_freeze_count() == 0


@pytest.mark.parametrize("mode", ["gptq", "awq"])
def test_calibrated_modes_are_refused_with_the_reason(mode):
    with pytest.raises(ValueError, match="token ids.*Use one of"):
        FAMILIES["vit"]().quantize(mode)


def test_bad_quantization_requests_name_the_fix():
    model = FAMILIES["vit"]()
    with pytest.raises(ValueError, match="Unknown quantization mode 'int2'.*'int8'"):
        model.quantize("int2")
    model.quantize("int8")
    with pytest.raises(ValueError, match="already quantized.*float model"):
        model.quantize("int4")
    with pytest.raises(ValueError, match="holds float weights only.*model.save"):
        keras_vit.save_checkpoint(model, os.devnull + ".npz")
    half = keras_vit.ViTImageClassifier(image_size=8, patch_size=4, dtype="float16", **TINY)
    with pytest.raises(ValueError, match="float16"):
        half.quantize("int8")


def test_filters_narrow_the_quantized_layers():
    model = FAMILIES["vit"]()
    model.quantize("int8", filters=["query", "value"])
    quantized = {layer.name for layer in sublayers(model) if layer.quantization_mode}
    assert quantized == {"query", "value"}
