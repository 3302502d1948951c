"""Where Keras' backend is not installed, keras_vit's first use of Keras says which backend Keras
was set to, where, which are installed and what to set (the README's quick start after
``pip install "keras-vit-paper[torch]"``, which leaves TensorFlow, Keras' default, out)."""

import os

import pytest

from keras_vit import _backends
from tests.blocked_imports import ROOT, run_without

pytestmark = pytest.mark.backend_independent  # fresh interpreters and environment dicts

QUICK_START = """
import os
import numpy as np
import keras_vit
for attempt in range(2):  # the same clear error each time, not a half-imported Keras
    try:
        keras_vit.create_model("ViT-Ti/4", image_size=28, num_classes=10, num_channels=1)
    except ModuleNotFoundError as error:
        print("ERROR", error)
os.environ["KERAS_BACKEND"] = "jax"  # as the error says; the next call imports Keras afresh
model = keras_vit.create_model("ViT-Ti/4", image_size=28, num_classes=10, num_channels=1)
print("LOGITS", model.predict(np.zeros((2, 28, 28, 1), "float32"), verbose=0).shape)
"""


def _fastest_but_tensorflow():
    return next(b for b in _backends.FASTEST[_backends.accelerator()]
                if b != "tensorflow" and _backends.installed(b))


def test_a_missing_default_backend_is_named_with_the_fix(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("KERAS_BACKEND", "KERAS_HOME")}
    env.update(PYTHONPATH=ROOT, HOME=str(tmp_path))
    result = run_without({"tensorflow"}, QUICK_START, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    errors = [line for line in result.stdout.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 2 and errors[0] == errors[1]
    keras_json = os.path.join(tmp_path, ".keras", "keras.json")
    choice = _fastest_but_tensorflow()
    assert errors[0].startswith(f"ERROR Keras is set to the tensorflow backend (in {keras_json}, "
                                "which Keras writes with its default when there is none), which "
                                "is not installed (No module named 'tensorflow'). Installed here: ")
    assert f'os.environ["KERAS_BACKEND"] = "{choice}"' in errors[0]
    assert f"KERAS_BACKEND={choice} python" in errors[0]
    assert 'pip install "keras-vit-paper[tensorflow]"' in errors[0]
    assert "LOGITS (2, 10)" in result.stdout


def test_the_source_of_the_setting_is_named(tmp_path):
    error = ModuleNotFoundError("No module named 'torch'", name="torch")
    explained = _backends.explain(error, {"KERAS_BACKEND": "torch"})
    assert "set to the torch backend (by KERAS_BACKEND)" in str(explained)
    assert explained.name == "torch"
    (tmp_path / "keras.json").write_text('{"backend": "jax"}')
    jaxlib = ModuleNotFoundError("No module named 'jaxlib'", name="jaxlib")
    explained = _backends.explain(jaxlib, {"KERAS_HOME": str(tmp_path)})
    assert f"set to the jax backend (in {tmp_path / 'keras.json'}), which" in str(explained)
    empty = {"KERAS_HOME": str(tmp_path / "none")}
    assert "(by default: neither KERAS_BACKEND nor keras.json names one)" in str(
        _backends.explain(ModuleNotFoundError("x", name="tensorflow"), empty))


def test_other_import_errors_are_not_ours_to_explain():
    assert _backends.explain(ModuleNotFoundError("x", name="optree"), {"KERAS_BACKEND": "jax"}) \
        is None
    # the backend is installed but something it needs is missing: raised as it is
    assert _backends.explain(ModuleNotFoundError("x", name="tensorflow"),
                             {"KERAS_BACKEND": "jax"}) is None


def test_no_backend_installed_says_how_to_install_one(monkeypatch):
    monkeypatch.setattr(_backends, "installed", lambda backend: False)
    explained = _backends.explain(ModuleNotFoundError("x", name="tensorflow"),
                                  {"KERAS_BACKEND": "tensorflow"})
    assert 'No backend is installed here: pip install "keras-vit-paper[jax]"' in str(explained)
