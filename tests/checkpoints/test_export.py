"""ONNX, SavedModel and TFLite exports reproduce the Keras logits (onnxruntime, TF, TFLite).

ONNX for both GELU forms on every backend, and for models loaded from timm and Hugging Face
files (the exact GELU, which TensorFlow writes with an op ONNX lacks).
"""

import keras
import numpy as np
import pytest
from interop_helpers import assert_close, images, need, numpy, randomise_keras, randomise_torch

from keras_vit import ResNetImageClassifier, ViTImageClassifier, load_checkpoint
from keras_vit.checkpoints.export import export_model
from keras_vit.layers.encoder import gelu, gelu_through_erf

try:  # imported before tests/timm_import.py's torchvision stand-in, which trips transformers' ViT
    from transformers import ViTConfig, ViTForImageClassification
except ImportError:
    ViTConfig = None

ATOL = 1e-4
BACKEND = keras.backend.backend()


def _model(kind):
    if kind == "bit":
        model = ResNetImageClassifier(block_units=[1, 1], width_factor=1, num_classes=5,
                                      image_size=32)
    else:
        stem = dict(num_layers=[1, 1], width_factor=1) if kind == "hybrid" else None
        model = ViTImageClassifier(image_size=32, patch_size=1 if stem else 8, hidden_size=32,
                                   num_layers=1, num_heads=4, mlp_dim=64, num_classes=5,
                                   stem=stem, approximate_gelu=kind != "vit_exact_gelu")
    return randomise_keras(model)


def _run_onnx(path, x):
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(str(path))
    return session.run(None, {session.get_inputs()[0].name: x})[0]


def _onnx_ops(path):
    import onnx

    return {node.op_type for node in onnx.load(str(path)).graph.node}


def _export_and_compare(model, x, path, what):
    """Export (a fixed batch on torch) and compare onnxruntime with the Keras model."""
    need("onnx", "onnxruntime")
    batch = len(x) if BACKEND == "torch" else None  # torch's exporter fixes the batch
    export_model(model, path, batch_size=batch)
    assert_close(_run_onnx(path, x), numpy(model(x)), what, ATOL)
    if batch is None:  # any batch size
        assert _run_onnx(path, x[:1]).shape == (1,) + tuple(model.output_shape[1:])


def _run_tflite(path, x):
    import tensorflow as tf

    interpreter = tf.lite.Interpreter(model_path=str(path))
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    return interpreter.get_tensor(interpreter.get_output_details()[0]["index"])


def _run_saved_model(path, x):
    import tensorflow as tf

    loaded = tf.saved_model.load(str(path))
    return loaded.serve(x).numpy()


@pytest.mark.parametrize("kind", ["vit", "vit_exact_gelu", "hybrid", "bit"])
def test_onnx_matches(kind, tmp_path):
    _export_and_compare(_model(kind), images(), tmp_path / "model.onnx", f"onnx {kind}")
    if kind == "vit_exact_gelu":
        import onnx

        ops = _onnx_ops(tmp_path / "model.onnx")
        assert all(onnx.defs.has(op) for op in ops), sorted(ops)
        assert "Erfc" not in ops and ops & {"Erf", "Gelu"}, sorted(ops)


def test_onnx_of_a_backbone(tmp_path):
    """A ViTBackbone's two outputs, in the order Keras flattens a dict: by name."""
    need("onnx", "onnxruntime")
    import onnxruntime

    backbone, x = _model("vit").backbone, images()
    export_model(backbone, tmp_path / "backbone.onnx",
                 batch_size=len(x) if BACKEND == "torch" else None)
    session = onnxruntime.InferenceSession(str(tmp_path / "backbone.onnx"))
    pooled, tokens = session.run(None, {session.get_inputs()[0].name: x})
    expected = backbone(x)
    assert_close(pooled, numpy(expected["pooled"]), "onnx backbone pooled", ATOL)
    assert_close(tokens, numpy(expected["tokens"]), "onnx backbone tokens", ATOL)


# Each float32 GELU, the backend's fused kernel and the export's erf form, is within
# (k + 2.5) u |x| of the true GELU: u = 2^-24 is float32's unit roundoff, k the error in ulps of the
# backend's erf or erfc. For 0.5 x (1 + erf(t)), t = x / sqrt 2, the error is at most 0.5 |x| times
# (k u from erf, whose ulp is at most u below 1; 2 u |t| max erf'(t) <= 0.97 u from rounding t;
# 2 u from rounding 1 + erf) plus u |x| for the product: (k / 2 + 2.49) u |x|. TensorFlow's
# 0.5 x erfc(-t) has no 1 + erf, but erfc's ulp is up to 2 u: (k + 1.49) u |x|.
# k = 4 bounds the erf and erfc of XLA, Eigen and Sleef (no processor's kernels enter).
GELU_ULPS_OF_ERF = 4
GELU_BOUND = (GELU_ULPS_OF_ERF + 2.5) * 2.0**-24


def test_erf_gelu_is_the_exact_gelu():
    from scipy.special import erfc

    x = keras.ops.convert_to_tensor(np.linspace(-12, 12, 20001, dtype="float32"))
    exact = numpy(keras.ops.gelu(x, approximate=False))
    np.testing.assert_array_equal(numpy(gelu(x, False)), exact)  # outside export: untouched
    with gelu_through_erf():
        erf_form, tanh_form = numpy(gelu(x, False)), numpy(gelu(x, True))
    np.testing.assert_array_equal(tanh_form, numpy(keras.ops.gelu(x, approximate=True)))
    x64 = numpy(x).astype("float64")
    truth = 0.5 * x64 * erfc(-x64 / np.sqrt(2.0))
    for name, form in (("the backend's GELU", exact), ("the erf form", erf_form)):
        error = np.abs(form - truth) / np.maximum(np.abs(x64), np.finfo("float32").tiny)
        assert error.max() <= GELU_BOUND, (name, error.max() / 2.0**-24, x64[error.argmax()])
    np.testing.assert_array_equal(numpy(gelu(x, False)), exact)  # the block restores


def _timm_file(path):
    need("torch", "safetensors", "timm")
    import torch
    from safetensors.torch import save_file
    from timm_import import import_timm

    import_timm()
    from timm.models.vision_transformer import VisionTransformer as TimmViT

    vit = randomise_torch(TimmViT(img_size=32, patch_size=8, embed_dim=32, depth=1, num_heads=4,
                                  mlp_ratio=2.0, num_classes=5))  # timm's exact GELU
    act = vit.blocks[0].mlp.act
    assert isinstance(act, torch.nn.GELU) and act.approximate == "none"
    save_file({k: v.contiguous() for k, v in vit.state_dict().items()}, path / "vit.safetensors")
    return load_checkpoint(path / "vit.safetensors", num_heads=4)


def _transformers_folder(path):
    if ViTConfig is None:
        pytest.skip("transformers is not installed (the dev extra installs it)")
    config = ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=1,
                       num_attention_heads=4, intermediate_size=64, num_labels=5)  # exact GELU
    randomise_torch(ViTForImageClassification(config)).save_pretrained(path / "hf")
    return load_checkpoint(path / "hf")


@pytest.mark.parametrize("source", ["timm", "transformers"])
def test_onnx_of_timm_and_transformers_files(source, tmp_path):
    model = _timm_file(tmp_path) if source == "timm" else _transformers_folder(tmp_path)
    assert not model.config.encoder.approximate_gelu
    _export_and_compare(model, images(), tmp_path / "model.onnx", f"onnx {source}")


def test_undefined_onnx_ops_are_refused(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from keras_vit.checkpoints.export import _check_onnx_ops

    value = helper.make_tensor_value_info
    graph = helper.make_graph([helper.make_node("Erfc", ["x"], ["y"])], "erfc",
                              [value("x", TensorProto.FLOAT, [2])],
                              [value("y", TensorProto.FLOAT, [2])])
    onnx.save(helper.make_model(graph), tmp_path / "erfc.onnx")
    with pytest.raises(ValueError, match=r"does not define: \['Erfc'\]"):
        _check_onnx_ops(str(tmp_path / "erfc.onnx"))


@pytest.mark.skipif(BACKEND == "torch", reason="Keras exports SavedModels from jax and "
                    "tensorflow only; test_torch_refuses_saved_model covers torch")
@pytest.mark.parametrize("kind", ["vit", "hybrid", "bit"])
def test_saved_model_and_tflite_match(kind, tmp_path):
    need("tensorflow")
    model, x = _model(kind), images()
    export_model(model, tmp_path / "saved_model")
    assert_close(_run_saved_model(tmp_path / "saved_model", x), numpy(model(x)),
                 f"saved_model {kind}", ATOL)
    export_model(model, tmp_path / "model.tflite", batch_size=2)
    assert_close(_run_tflite(tmp_path / "model.tflite", x), numpy(model(x)), f"tflite {kind}",
                 ATOL)


@pytest.mark.skipif(BACKEND != "torch", reason="the torch backend's refusal")
def test_torch_refuses_saved_model(tmp_path):
    with pytest.raises(ValueError, match="KERAS_BACKEND=jax"):
        export_model(_model("vit"), tmp_path / "saved_model")
    assert not list(tmp_path.iterdir())


def test_bad_requests_are_clear(tmp_path):
    with pytest.raises(ValueError, match="Cannot tell the export format"):
        export_model(_model("vit"), tmp_path / "model.pb")
    with pytest.raises(ValueError, match="Unknown export format"):
        export_model(_model("vit"), tmp_path / "model.onnx", format="coreml")
    mixed = ViTImageClassifier(image_size=32, patch_size=8, hidden_size=32, num_layers=1,
                               num_heads=4, mlp_dim=64, num_classes=5, dtype="mixed_bfloat16")
    with pytest.raises(ValueError, match="float32"):
        export_model(mixed, tmp_path / "model.onnx")
    assert not list(tmp_path.iterdir())
    assert np.isfinite(numpy(mixed(images()))).all()
