"""The README's Python quick start runs as printed, in a fresh interpreter with no backend chosen
(after the first command, which installs torch but not TensorFlow, Keras' default).
Its one download, an official checkpoint, comes from a local mirror that serves a tiny
official-format file under the published name."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

from tests import mirror
from tests.conftest import fixture_path, installed

pytestmark = pytest.mark.backend_independent  # a fresh interpreter that sets its own backend

ROOT = pathlib.Path(__file__).resolve().parent.parent


def quick_start():
    """The first Python block under the README's "Quick start" heading."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Quick start\n", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)


def test_the_quick_start_names_the_backend_before_keras_loads():
    code = quick_start()
    assert code.index('os.environ.setdefault("KERAS_BACKEND", "torch")') < code.index(
        "import keras_vit")


@pytest.mark.skipif(not installed("torch"), reason="the quick start chooses torch")
def test_the_quick_start_runs_as_printed(tmp_path):
    served = tmp_path / "mirror"
    mirror.put(served, mirror.checkpoint_url("imagenet21k/ViT-B_16"),
               fixture_path("vit_tiny_token_rep16.npz"))
    env = {k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"}
    env.update(PYTHONPATH=str(ROOT), HOME=str(tmp_path), KERAS_HOME=str(tmp_path / "keras"),
               KERAS_VIT_MIRROR=served.as_uri())
    code = quick_start() + "\nimport keras\nprint('BACKEND', keras.backend.backend(), logits.shape)"
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "BACKEND torch (2, 10)" in done.stdout
    assert (tmp_path / "mine.npz").is_file()
