"""`import keras_vit` only defines the library: no environment variable, file descriptor,
thread or exit hook changes, no Keras until a name is used (that the library never imports the
application: tests/test_layering.py)."""

import json
import os
import subprocess
import sys

import pytest

import keras_vit
from keras_vit.app import cli, commands

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Records what the import changes, from a fresh interpreter. argv[0] is the console script's
# name: the library used to choose a backend when it thought it was the command.
_PROBE = """
import atexit, json, os, sys, threading
sys.argv[0] = "keras-vit"
environ, threads, callbacks = dict(os.environ), threading.active_count(), atexit._ncallbacks()
stderr = os.fstat(2)
import keras_vit, keras_vit.app
after = os.fstat(2)
print(json.dumps({
    "environ": os.environ == environ, "threads": threading.active_count() - threads,
    "atexit": atexit._ncallbacks() - callbacks, "keras": "keras" in sys.modules,
    "stderr": (stderr.st_ino, stderr.st_dev) == (after.st_ino, after.st_dev)}))
"""


def _python(code, **env):
    environ = {k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"}
    environ.update(PYTHONPATH=ROOT, **env)
    done = subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.mark.parametrize("env", [{}, {"KERAS_BACKEND": "jax"}])
def test_import_has_no_side_effects(env):
    effects = json.loads(_python(_PROBE, **env).stdout.splitlines()[-1])
    assert effects == {"environ": True, "threads": 0, "atexit": 0, "keras": False,
                       "stderr": True}


def test_public_names_load_on_use():
    for name in keras_vit.__all__:
        assert getattr(keras_vit, name) is not None
        assert name in dir(keras_vit)
    assert keras_vit.ViTImageClassifier.__module__ == "keras_vit.models.vit"
    assert keras_vit.distribution.__name__ == "keras_vit.distribution"
    assert keras_vit.__version__
    with pytest.raises(AttributeError, match="no attribute 'missing'"):
        keras_vit.missing  # noqa: B018


def test_the_command_reports_user_errors_and_lets_bugs_through(monkeypatch, capsys):
    def broken(config):
        raise TypeError("a bug")

    monkeypatch.setattr(commands, "run", broken)
    with pytest.raises(TypeError, match="a bug"):
        cli.main(["evaluate", "model.keras"])

    def refused(config):
        raise ValueError("say what to do instead")

    monkeypatch.setattr(commands, "run", refused)
    assert cli.main(["evaluate", "model.keras"]) == 1
    assert "keras-vit evaluate: error: say what to do instead" in capsys.readouterr().err
