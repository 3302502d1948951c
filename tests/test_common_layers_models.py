"""One check for every public (Keras-serialisable) layer and model class of keras_vit.

For each class registered under the ``keras_vit`` package: its config keeps every constructor
argument, is JSON and round-trips through ``from_config``; ``keras.saving`` serialisation
restores the class by its registered name; a ``.keras`` file round-trips the outputs exactly;
and under ``mixed_bfloat16`` the variables stay float32 while the computation runs in bfloat16
(classifiers return float32 logits). A class registered without a case here fails
``test_every_registered_class_has_a_case``: add its case to ``CASES``.
"""

import importlib
import inspect
import json

import keras
import numpy as np
import pytest
from keras.backend import standardize_dtype

import keras_vit
from keras_vit import _registration
from keras_vit.layers import attention, axial, encoder, patching, position, resnet, tokens
from keras_vit.models import preprocessor, upgrade
from keras_vit.training import mpp, optimizers, schedules

TINY_VIT = dict(image_size=8, patch_size=4, hidden_size=8, num_layers=1, num_heads=2, mlp_dim=16,
                num_classes=3)


def _vit(**kwargs):
    return keras_vit.ViTImageClassifier(**dict(TINY_VIT, **kwargs))


# class name -> (factory(dtype) -> instance with non-default arguments, input shape, output dtype
# under mixed_bfloat16: one, or {output name: dtype} for a dict of outputs).
CASES = {
    "AddPositionEmbedding": (
        lambda dtype: position.AddPositionEmbedding(initializer_stddev=0.5, dtype=dtype),
        (2, 5, 8), "bfloat16"),
    "AddPositionEmbedding2D": (
        lambda dtype: position.AddPositionEmbedding2D(grid_size=(2, 2), initializer_stddev=0.5,
                                                      dtype=dtype),
        (2, 5, 8), "bfloat16"),
    "RelativePositionLogits": (
        lambda dtype: position.RelativePositionLogits(initializer_stddev=0.5, dtype=dtype),
        (2, 5, 2, 4), "bfloat16"),
    "MultiHeadSelfAttention": (
        lambda dtype: attention.MultiHeadSelfAttention(2, attention_dropout_rate=0.1,
                                                       relative_position=True, dtype=dtype),
        (2, 5, 8), "bfloat16"),
    "AxialAttention": (
        lambda dtype: attention.AxialAttention(2, axis=1, attention_dropout_rate=0.1,
                                               relative_position=True, dtype=dtype),
        (2, 3, 4, 8), "bfloat16"),
    "AxialEncoderBlock": (
        lambda dtype: axial.AxialEncoderBlock(
            encoder.EncoderConfig(1, 2, 16, dropout_rate=0.1, approximate_gelu=False,
                                  position_embedding="relative", layer_norm_epsilon=1e-5),
            stochastic_depth_rate=0.1, dtype=dtype),
        (2, 3, 4, 8), "bfloat16"),
    "AxialEncoder": (
        lambda dtype: axial.AxialEncoder(
            encoder.EncoderConfig(1, 2, 16, position_embedding="learned_2d",
                                  position_embedding_placement="every_layer"),
            (2, 3), dtype=dtype),
        (2, 2, 3, 8), "bfloat16"),
    "PositionSensitiveAxialAttention": (
        lambda dtype: axial.PositionSensitiveAxialAttention(2, axis=1, dtype=dtype),
        (2, 3, 4, 32), "bfloat16"),
    "AxialUnit": (lambda dtype: axial.AxialUnit(32, strides=2, num_heads=2, dtype=dtype),
                  (2, 4, 6, 32), "bfloat16"),
    "ViTBackbone": (  # Axial-ViT's encoder, relative positions
        lambda dtype: keras_vit.ViTBackbone(**dict(
            TINY_VIT, num_classes=None, classifier="token", position_embedding="relative",
            axial=True), dtype=dtype),
        (2, 8, 8, 3), {"tokens": "bfloat16", "pooled": "bfloat16"}),
    "AxialResNetImageClassifier": (
        lambda dtype: keras_vit.AxialResNetImageClassifier(
            block_units=(1, 1), width_factor=0.5, num_heads=2, num_classes=3, image_size=16,
            num_channels=1, head_kernel_initializer="glorot_uniform", head_bias_init=-1.0,
            dtype=dtype),
        (2, 16, 16, 1), "float32"),
    "AxialResNetBackbone": (
        lambda dtype: keras_vit.AxialResNetBackbone(
            block_units=(1,), width_factor=0.5, num_heads=4, image_size=8, dtype=dtype),
        (2, 8, 8, 3), {"feature_maps": "bfloat16", "pooled": "bfloat16"}),
    "MlpBlock": (
        lambda dtype: encoder.MlpBlock(16, dropout_rate=0.1, approximate_gelu=False, dtype=dtype),
        (2, 5, 8), "bfloat16"),
    "EncoderBlock": (
        lambda dtype: encoder.EncoderBlock(
            encoder.EncoderConfig(1, 2, 16, dropout_rate=0.1, attention_dropout_rate=0.1,
                                  approximate_gelu=False, position_embedding="relative"),
            attention_axis=None, stochastic_depth_rate=0.1, dtype=dtype),
        (2, 5, 8), "bfloat16"),
    "StochasticDepth": (
        lambda dtype: encoder.StochasticDepth(0.1, seed=3, dtype=dtype),
        (2, 5, 8), "bfloat16"),
    "Encoder": (
        lambda dtype: encoder.Encoder(
            encoder.EncoderConfig(1, 2, 16, classifier="gap", dropout_rate=0.1,
                                  approximate_gelu=False, position_embedding="learned_2d",
                                  position_embedding_placement="every_layer_shared",
                                  layer_norm_epsilon=1e-5),
            (2, 3), dtype=dtype),
        (2, 2, 3, 8), "bfloat16"),
    "PatchEmbedding": (
        lambda dtype: patching.PatchEmbedding(4, 8, kernel_initializer="glorot_uniform",
                                              dtype=dtype),
        (2, 8, 8, 3), "bfloat16"),
    "ClassToken": (lambda dtype: tokens.ClassToken(dtype=dtype), (2, 4, 8), "bfloat16"),
    "TokenPooling": (lambda dtype: tokens.TokenPooling("gap", dtype=dtype), (2, 5, 8),
                     "bfloat16"),
    "StandardizedConv2D": (
        lambda dtype: resnet.StandardizedConv2D(4, 3, epsilon=1e-5, epsilon_in_sqrt=False,
                                                dtype=dtype),
        (2, 8, 8, 3), "bfloat16"),
    "PostActivationUnit": (lambda dtype: resnet.PostActivationUnit(32, strides=2, dtype=dtype),
                           (2, 8, 8, 32), "bfloat16"),
    "PreActivationUnit": (lambda dtype: resnet.PreActivationUnit(32, strides=2, dtype=dtype),
                          (2, 8, 8, 32), "bfloat16"),
    "ResNetStage": (lambda dtype: resnet.ResNetStage(2, 32, 2, style="hybrid", dtype=dtype),
                    (2, 8, 8, 32), "bfloat16"),
    "BiTRoot": (lambda dtype: resnet.BiTRoot(32, dtype=dtype), (2, 16, 16, 3), "bfloat16"),
    "HybridStem": (lambda dtype: resnet.HybridStem(num_layers=(2, 1), width_factor=0.5,
                                                   dtype=dtype),
                   (2, 32, 32, 3), "bfloat16"),
    "ViTImageClassifier": (
        lambda dtype: _vit(classifier="gap", representation_size=4, approximate_gelu=False,
                           dropout_rate=0.1, head_kernel_initializer="glorot_uniform",
                           head_bias_init=-1.0, num_channels=1, position_embedding="learned_2d",
                           position_embedding_placement="every_layer", layer_norm_epsilon=1e-5,
                           dtype=dtype),
        (2, 8, 8, 1), "float32"),
    "ResNetImageClassifier": (  # a pre-logits layer alone: the features of a headless file
        lambda dtype: keras_vit.ResNetImageClassifier(
            block_units=(1, 1), width_factor=0.5, num_classes=None, representation_size=8,
            image_size=16, num_channels=1, dtype=dtype),
        (2, 16, 16, 1), "bfloat16"),
    "ResNetBackbone": (
        lambda dtype: keras_vit.ResNetBackbone(block_units=(1, 2), width_factor=1,
                                               image_size=None, dtype=dtype),
        (2, 24, 40, 3), {"feature_maps": "bfloat16", "pooled": "bfloat16"}),
    "MaskedPatchPrediction": (
        lambda dtype: mpp.MaskedPatchPrediction(
            _vit(stem=dict(num_layers=(), width_factor=0.5), patch_size=1, image_size=16,
                 dtype=dtype),
            target="color_3bit_4x4", corrupt_rate=0.75, mask_fraction=0.5, random_fraction=0.25,
            seed=3),
        (2, 16, 16, 3), {"predictions": "float32"}),
}
# Constructor arguments that are no settings: a classifier's backbone is built again from the
# ViTConfig of its config.
NOT_SETTINGS = dict.fromkeys(("ViTImageClassifier", "ResNetImageClassifier",
                              "AxialResNetImageClassifier"), {"backbone"})
# Registered objects that are not layers or models, checked by their own tests.
NOT_LAYERS = {attention.FlatGlorotUniform: "tests/layers/test_attention_projections.py",
              schedules.WarmupDecay: "tests/training/test_training_recipes.py",
              schedules.WarmupLinearDecay: "tests/training/test_training_recipes.py",
              schedules.AdjustableWarmupDecay: "tests/training/test_training_recipes.py",
              optimizers.AdjustableAdamW: "tests/training/test_training_recipes.py",
              optimizers.TraceSGD: "tests/training/test_training_recipes.py",
              optimizers.AccumulatingSGD: "tests/training/test_training_recipes.py",
              preprocessor.ImagePreprocessor: "tests/models/test_habits.py",
              **dict.fromkeys(upgrade._FlatLayout.__subclasses__(),
                              "tests/models/test_saved_files.py")}


def _registered():
    """The classes registered under keras_vit, each module imported (no stand-in left)."""
    for module in _registration.classes():
        importlib.import_module(module)
    return {name.split(">", 1)[1]: cls for name, cls in keras.saving.get_custom_objects().items()
            if name.startswith("keras_vit>")}


def _inputs(shape):
    return np.random.default_rng(0).uniform(-1, 1, shape).astype("float32")


def _outputs(obj, x):
    out = obj(x) if isinstance(obj, keras.Model) else obj(keras.ops.convert_to_tensor(x))
    if isinstance(out, dict):  # MaskedPatchPrediction: its draws come from its seed
        return {k: keras.ops.convert_to_numpy(v) for k, v in out.items()}
    return keras.ops.convert_to_numpy(out)


def _assert_same(a, b):
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    else:
        np.testing.assert_array_equal(a, b)


def test_every_registered_class_has_a_case():
    registered = {name for name, cls in _registered().items() if cls not in NOT_LAYERS}
    missing = sorted(registered - CASES.keys())
    assert not missing, f"add a case for {missing} to CASES in {__file__}"
    assert not CASES.keys() - registered, "CASES names a class that is no longer registered"


@pytest.mark.parametrize("name", sorted(CASES))
def test_config_keeps_every_argument_and_round_trips(name):
    factory, shape, _ = CASES[name]
    obj = factory(None)
    obj(_inputs(shape))
    config = obj.get_config()
    json.dumps(config)
    arguments = [p.name for p in inspect.signature(type(obj).__init__).parameters.values()
                 if p.kind is p.POSITIONAL_OR_KEYWORD and p.name != "self"
                 and p.name not in NOT_SETTINGS.get(name, ())]
    assert not [a for a in arguments if a not in config], "arguments missing from get_config"
    clone = type(obj).from_config(config)
    assert type(clone) is type(obj)
    assert clone.get_config() == config
    # keras.saving finds the class by its registered name alone
    serialized = json.loads(json.dumps(keras.saving.serialize_keras_object(obj)))
    assert serialized["registered_name"] == f"keras_vit>{name}"
    restored = keras.saving.deserialize_keras_object(serialized)
    assert type(restored) is type(obj) and restored.get_config() == config


def _as_model(obj, shape):
    if isinstance(obj, keras.Model):
        return obj
    inputs = keras.Input(shape[1:], batch_size=shape[0])
    return keras.Model(inputs, obj(inputs))


@pytest.mark.parametrize("name", sorted(CASES))
def test_keras_file_round_trip(name, tmp_path):
    factory, shape, _ = CASES[name]
    model = _as_model(factory(None), shape)
    x = _inputs(shape)
    # random non-zero weights, so that a weight the file drops or misplaces changes the outputs
    rng = np.random.default_rng(1)
    for variable in model.weights:
        variable.assign(rng.normal(0, 0.5, variable.shape).astype(variable.dtype))
    expected = _outputs(model, x)
    path = str(tmp_path / f"{name}.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert type(loaded) is type(model)
    assert [w.path for w in loaded.weights] == [w.path for w in model.weights]
    _assert_same(_outputs(loaded, x), expected)


@pytest.mark.parametrize("name", sorted(CASES))
def test_mixed_precision_dtypes(name):
    factory, shape, output_dtype = CASES[name]
    obj = factory("mixed_bfloat16")
    out = obj(_inputs(shape))
    assert all(standardize_dtype(w.dtype) == "float32" for w in obj.weights)
    if isinstance(output_dtype, dict):
        assert {key: standardize_dtype(out[key].dtype) for key in output_dtype} == output_dtype
    else:
        assert standardize_dtype(out.dtype) == output_dtype
    clone = type(obj).from_config(obj.get_config())
    inner = clone.encoder if name == "MaskedPatchPrediction" else clone
    assert inner.dtype_policy.name == "mixed_bfloat16"
