"""ONNX, SavedModel and TFLite exports reproduce the Keras logits (onnxruntime, TF, TFLite)."""

import keras
import numpy as np
import pytest
from interop_helpers import assert_close, images, numpy, randomise_keras

from keras_vit import ResNetV2, VisionTransformer
from keras_vit.checkpoints.export import export_model

ATOL = 1e-4
BACKEND = keras.backend.backend()


def _model(kind):
    if kind == "bit":
        model = ResNetV2(block_units=[1, 1], width_factor=1, num_classes=5, image_size=32)
    else:
        resnet = dict(num_layers=[1, 1], width_factor=1) if kind == "hybrid" else None
        model = VisionTransformer(image_size=32, patch_size=1 if resnet else 8, hidden_size=32,
                                  num_layers=1, num_heads=4, mlp_dim=64, num_classes=5,
                                  resnet=resnet)
    return randomise_keras(model)


def _run_onnx(path, x):
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(str(path))
    return session.run(None, {session.get_inputs()[0].name: x})[0]


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


@pytest.mark.parametrize("kind", ["vit", "hybrid", "bit"])
def test_onnx_matches(kind, tmp_path):
    model, x = _model(kind), images()
    batch = 2 if BACKEND == "torch" else None  # torch's exporter fixes the batch
    export_model(model, tmp_path / "model.onnx", batch_size=batch)
    assert_close(_run_onnx(tmp_path / "model.onnx", x), numpy(model(x)), f"onnx {kind}", ATOL)
    if batch is None:  # any batch size
        assert _run_onnx(tmp_path / "model.onnx", x[:1]).shape == (1, 5)


@pytest.mark.skipif(BACKEND == "torch", reason="Keras exports SavedModels from jax and "
                    "tensorflow only; test_torch_refuses_saved_model covers torch")
@pytest.mark.parametrize("kind", ["vit", "hybrid", "bit"])
def test_saved_model_and_tflite_match(kind, tmp_path):
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
    mixed = VisionTransformer(image_size=32, patch_size=8, hidden_size=32, num_layers=1,
                              num_heads=4, mlp_dim=64, num_classes=5, dtype="mixed_bfloat16")
    with pytest.raises(ValueError, match="float32"):
        export_model(mixed, tmp_path / "model.onnx")
    assert not list(tmp_path.iterdir())
    assert np.isfinite(numpy(mixed(images()))).all()
