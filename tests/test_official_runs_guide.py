"""docs/official-runs.md: its code blocks run as printed, against a local mirror that serves a
tiny official-format checkpoint under the published name (nothing is downloaded)."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.backend_independent

ROOT = pathlib.Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "official-runs.md"
TINY = ROOT / "tests" / "fixtures" / "official" / "vit_tiny_token_norep.npz"
# What a notebook cell has that a script lacks.
NOTEBOOK = "def display(value):\n    pass\n\n"


def code_blocks():
    return re.findall(r"```python\n(.*?)```", GUIDE.read_text(encoding="utf-8"), re.DOTALL)


def test_the_guide_has_the_fine_tune_and_the_inspection():
    blocks = code_blocks()
    assert len(blocks) == 2
    assert 'recipe("vit_jax-colab-b32-cifar10")' in blocks[0]
    assert 'CHECKPOINT = "imagenet21k+imagenet2012/ViT-B_16"' in blocks[1]


def _run(code, tmp_path, mirror_url):
    env = dict(os.environ, PYTHONPATH=str(ROOT), KERAS_BACKEND="jax", MPLBACKEND="Agg",
               KERAS_HOME=str(tmp_path / "keras_home"), KERAS_VIT_MIRROR=mirror_url)
    env.pop("KERAS_VIT_ONLINE", None)
    return subprocess.run([sys.executable, "-c", NOTEBOOK + code], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=600)


@pytest.fixture
def mirror(tmp_path):
    sys.path.insert(0, str(ROOT / "tests"))
    import mirror as local_mirror

    root = local_mirror.build(tmp_path / "mirror", checkpoints=[
        ("imagenet21k+imagenet2012/ViT-B_16", TINY)])
    url, server = local_mirror.serve(root)
    yield url
    server.shutdown()


def test_the_inspection_block_runs_on_a_published_name(tmp_path, mirror):
    done = _run(code_blocks()[1], tmp_path, mirror)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()  # Keras' download lines among them
    assert [line.split(":")[0] for line in lines if " GiB" in line] == [
        "ViT-B/16", "ViT-L/32", "ViT-L/16"]
    photos = ("astronaut", "chelsea", "coffee", "rocket")
    tops = [line for line in lines if line.split(" ", 1)[0] in photos]
    assert [line.split()[0] for line in tops] == list(photos)
    assert all(line.count(",") == 4 for line in tops)  # five classes each
    assert any(line.startswith("random ") for line in lines)  # the perturbation curves


def test_the_fine_tune_block_says_it_needs_an_accelerator_on_a_cpu(tmp_path, mirror):
    done = _run(code_blocks()[0], tmp_path, mirror)
    assert done.returncode == 1
    assert "No GPU or TPU here" in done.stderr
