"""The hook by which the models reach the presets by name (``keras_vit.pretrained``)."""

import os
import subprocess
import sys

import pytest

from keras_vit import _hooks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_hook_names_what_is_missing(monkeypatch):
    with pytest.raises(LookupError, match="No module provides the hook 'nothing'"):
        _hooks.get("nothing")
    monkeypatch.setitem(_hooks._PROVIDERS, "unfilled", "keras_vit.checks")
    with pytest.raises(LookupError, match="keras_vit.checks is named for the hook 'unfilled' "
                                          "but does not fill it"):
        _hooks.get("unfilled")


def test_the_models_reach_the_presets_through_the_hook_alone():
    # A fresh process: the models import nothing above them; the first use imports the module
    # that the package root names for the hook.
    probe = ("import sys\nfrom keras_vit.models.vit import ViTBackbone\n"
             "assert 'keras_vit.pretrained' not in sys.modules\n"
             "assert not any(m.startswith('keras_vit.checkpoints') for m in sys.modules)\n"
             "model = ViTBackbone.from_preset('ViT-Ti/4', load_weights=False, image_size=8)\n"
             "print(type(model).__name__, 'keras_vit.pretrained' in sys.modules)\n")
    environ = dict(os.environ, PYTHONPATH=ROOT)
    done = subprocess.run([sys.executable, "-c", probe], env=environ, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["ViTBackbone", "True"]
