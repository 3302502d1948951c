"""Convert a model between ``.keras``, the checkpoint formats and the export formats (what
``keras-vit convert`` runs).

Sources: ``.keras`` and every checkpoint format (``formats.FORMATS``: official ``.npz`` or a
published name, timm ``.safetensors``/``.pth``/``.bin``, a transformers folder, a keras-hub
preset folder). Targets: those, plus the export formats (``.onnx``, a SavedModel folder,
``.tflite``). The formats come from the paths unless named.
"""

import os

import keras

from keras_vit.checkpoints import export, formats

CONVERT_FORMATS = ("keras", *formats.NAMES, *export.FORMATS)
_FOLDERS = tuple(f.name for f in formats.FORMATS if not f.suffixes) + ("saved_model",)


def target_format(target, format=None):
    """The format to write ``target`` in: ``format`` if given, else the one its name says."""
    if format:
        return format
    if target.endswith(".keras"):
        return "keras"
    if not os.path.splitext(target)[1] and "://" not in target:
        raise ValueError(
            f"The target {target!r} is a folder name: say which kind with --format, one of "
            f"{', '.join(_FOLDERS)}."
        )
    for found in formats.FORMATS:
        if found.suffixes and target.endswith(found.suffixes):
            return found.name
    return export.detect_format(target)


def load_model(source, source_format=None, *, num_heads=None, tanh_gelu=False):
    """The model of ``source``: a ``.keras`` file, or any checkpoint ``load_checkpoint`` reads.

    ``num_heads`` and ``tanh_gelu`` describe a timm ViT its state dict does not (a width other
    than timm's named sizes; ``act_layer='gelu_tanh'``).
    """
    source = os.fspath(source)
    if source.endswith(".keras") and source_format in (None, "keras"):
        if not os.path.exists(source):
            raise FileNotFoundError(f"No model file at {source!r}.")
        return keras.saving.load_model(source, compile=False)
    extra = {"num_heads": num_heads} if num_heads else {}
    if tanh_gelu:
        extra["approximate_gelu"] = True
    return formats.load_checkpoint(source, format=source_format, **extra)


def convert(source, target, *, format=None, source_format=None, num_heads=None,
            tanh_gelu=False, batch_size=None):
    """Write the model of ``source`` to ``target`` in ``format`` (default: from the name).

    ``batch_size`` fixes the batch of an export (default: any). Returns ``source``, ``target``,
    ``format`` and ``num_params``.
    """
    source, target = os.fspath(source), os.fspath(target)
    format = target_format(target, format)
    if format not in CONVERT_FORMATS:
        raise ValueError(f"Unknown target format {format!r}; use one of {CONVERT_FORMATS}.")
    if os.path.abspath(source) == os.path.abspath(target):
        raise ValueError("The source and the target are the same file.")
    model = load_model(source, source_format, num_heads=num_heads, tanh_gelu=tanh_gelu)
    if format == "keras":
        model.save(target)
    elif format in ("onnx", "saved_model", "tflite"):
        export.export_model(model, target, format=format, batch_size=batch_size)
    else:
        formats.save_checkpoint(model, target, format=format)
    return {"source": source, "target": target, "format": format,
            "num_params": int(model.count_params())}
