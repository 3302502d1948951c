"""Run first by ``import keras_vit``, before Keras is imported."""

import importlib.util
import json
import os
import sys


def _configured_backend():
    home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    try:
        with open(os.path.join(home, "keras.json")) as f:
            return json.load(f).get("backend", "tensorflow")
    except (OSError, ValueError):
        return "tensorflow"


def _installed(name):
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _pick_backend():
    """Keras defaults to TensorFlow (and writes that into keras.json). Where no backend was
    chosen with $KERAS_BACKEND and the configured one is not installed (TensorFlow on a Colab
    TPU runtime), use jax or torch rather than fail at ``import keras``."""
    if "keras" in sys.modules or os.environ.get("KERAS_BACKEND"):
        return
    if _installed(_configured_backend()):
        return
    for name in ("jax", "torch"):
        if _installed(name):
            os.environ["KERAS_BACKEND"] = name
            return


_pick_backend()
