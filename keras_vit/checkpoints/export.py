"""Export a keras_vit model for serving: ONNX, TensorFlow SavedModel and TFLite.

Every route goes through Keras' own ``model.export``; TFLite is converted from the SavedModel
with TensorFlow's ``TFLiteConverter``. The exported graph takes float32 NHWC images in [-1, 1]
(as the model does) and returns its logits; a ``ViTBackbone``'s graph returns its two outputs
in the order Keras flattens a dict, by name: ``pooled`` (batch, D), then ``tokens`` (batch, N, D).

Routes per backend (what Keras supports):

=============== ======================== ============================ ==========================
route           jax                      tensorflow                   torch
=============== ======================== ============================ ==========================
ONNX            jax2onnx, any batch      tf2onnx, any batch           torch.onnx, fixed batch
SavedModel      jax2tf                   native                       not available (torch_xla)
TFLite          from the SavedModel      from the SavedModel          not available
=============== ======================== ============================ ==========================

ONNX has no ``Erfc``, the op TensorFlow writes the exact GELU with, and tf2onnx cannot convert
it: on the tensorflow backend the exact GELU is traced as ``0.5 x (1 + erf(x / sqrt 2))``
for the ONNX export (``keras_vit.layers.encoder.gelu_through_erf``; equal to float32
rounding). jax2onnx and torch write ONNX's own ``Gelu``. Every written ONNX graph is checked
for ops ONNX does not define, so a converter's gap is an error here, not in onnxruntime.

Mixed-precision models are refused: Keras' ONNX export needs a float32 policy, and a float32
export of a float32 model is what reproduces the logits. Rebuild (``model.get_config()`` with
``dtype="float32"``, then ``set_weights``) to export a mixed-precision model.
"""

import os
import shutil
import tempfile
from contextlib import nullcontext

import keras

from keras_vit import _optional
from keras_vit.checkpoints.base import write_atomically
from keras_vit.layers.encoder import gelu_through_erf

FORMATS = ("onnx", "saved_model", "tflite")


def detect_format(path):
    path = os.fspath(path)
    if path.endswith(".onnx"):
        return "onnx"
    if path.endswith(".tflite"):
        return "tflite"
    if not os.path.splitext(path)[1] or path.endswith(("_saved_model", ".savedmodel")):
        return "saved_model"
    raise ValueError(
        f"Cannot tell the export format of {path!r}: use a .onnx or .tflite file, or a folder "
        f"name without extension for a SavedModel, or pass format= one of {FORMATS}."
    )


def _signature(model, batch_size):
    shape = (batch_size,) + tuple(model.input_shape[1:])
    return [keras.InputSpec(shape=shape, dtype="float32")]


def _check(model, format):
    if format not in FORMATS:
        raise ValueError(f"Unknown export format {format!r}; use one of {FORMATS}.")
    policy = model.dtype_policy
    if policy.compute_dtype != "float32" or policy.variable_dtype != "float32":
        raise ValueError(
            f"The model uses the dtype policy {policy.name!r}; export needs float32 (Keras' ONNX "
            "export requires it). Rebuild the model with dtype='float32' and copy the weights."
        )
    if format != "onnx" and keras.backend.backend() == "torch":
        raise ValueError(
            f"Keras exports a {format} from the torch backend only through torch_xla, which "
            "keras_vit does not use. The weights do not depend on the backend: save the model "
            "(model.save('model.keras')) and export it under KERAS_BACKEND=jax or tensorflow, "
            "e.g. KERAS_BACKEND=jax keras-vit convert model.keras model.tflite."
        )


def export_model(model, path, format=None, batch_size=None):
    """Write ``model`` as ONNX (``.onnx``), a SavedModel (a folder) or TFLite (``.tflite``).

    Args:
        model: a keras_vit (or any single-input Keras) model in float32.
        path: the target; its form names the format unless ``format`` is given.
        format: ``"onnx"``, ``"saved_model"`` or ``"tflite"``.
        batch_size: a fixed batch size, or None for any batch. The torch backend's ONNX
            exporter needs a fixed one (1 unless given).

    Example (the paper's ViT, Sec. 3.1; ONNX needs jax2onnx, tf2onnx or torch's exporter):
    >>> import os, tempfile
    >>> from keras_vit import ViTImageClassifier
    >>> model = ViTImageClassifier(image_size=32, patch_size=8, hidden_size=32, num_layers=1,
    ...                            num_heads=4, mlp_dim=64, num_classes=5)
    >>> path = os.path.join(tempfile.mkdtemp(), "vit.onnx")
    >>> export_model(model, path)
    >>> os.path.getsize(path) > 0
    True
    """
    format = format or detect_format(path)
    _check(model, format)
    _need_packages(format)
    if format == "onnx":
        if batch_size is None and keras.backend.backend() == "torch":
            batch_size = 1
        write_atomically(path, lambda tmp: _write_onnx(model, tmp, batch_size))
    elif format == "saved_model":
        signature = _signature(model, batch_size)
        write_atomically(path, lambda tmp: model.export(
            tmp, format="tf_saved_model", input_signature=signature, verbose=False))
    else:
        write_atomically(path, lambda tmp: _write_tflite(model, tmp, batch_size))


def _need_packages(format):
    """Refuse an export whose packages are missing before anything is traced or written."""
    if format == "onnx":
        _optional.need("onnx", "ONNX export")  # to check the written graph
    else:  # Keras writes a SavedModel with TensorFlow under every backend
        _optional.need("tensorflow", f"{format} export")


def _write_onnx(model, path, batch_size):
    signature = _signature(model, batch_size)
    # tf2onnx has no Erfc (TensorFlow's exact GELU); the erf form converts.
    erf_gelu = gelu_through_erf() if keras.backend.backend() == "tensorflow" else nullcontext()
    try:
        with erf_gelu:
            model.export(path, format="onnx", input_signature=signature, verbose=False)
    except ImportError as error:  # the converter Keras uses (its version and backend decide)
        raise ModuleNotFoundError(
            f"ONNX export under {keras.backend.backend()} needs a converter that is missing "
            f'({error}): pip install "keras-vit-paper[interop]".', name=error.name) from error
    _check_onnx_ops(path)


def _check_onnx_ops(path):
    """Refuse a graph with ops ONNX does not define (a converter writes them when it has no map)."""
    import onnx

    graph = onnx.load(path, load_external_data=False)
    local = {(function.domain, function.name) for function in graph.functions}
    unknown = sorted({
        node.op_type for node in graph.graph.node
        if node.domain in ("", "ai.onnx") and (node.domain, node.op_type) not in local
        and not onnx.defs.has(node.op_type)
    })
    if unknown:
        raise ValueError(
            f"The {keras.backend.backend()} backend's ONNX converter wrote ops that ONNX does not "
            f"define: {unknown}; onnxruntime cannot load the graph. Export under another "
            "backend (KERAS_BACKEND=jax), after model.save('model.keras')."
        )


def _write_tflite(model, path, batch_size):
    import tensorflow as tf  # there: _need_packages

    workdir = tempfile.mkdtemp(prefix="keras_vit-savedmodel-")
    try:
        saved = os.path.join(workdir, "saved_model")
        model.export(saved, format="tf_saved_model",
                     input_signature=_signature(model, batch_size or 1), verbose=False)
        converter = tf.lite.TFLiteConverter.from_saved_model(saved)
        with open(path, "wb") as handle:
            handle.write(converter.convert())
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
