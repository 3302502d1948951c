import os
import sys
import types

import pytest

from keras_vit.app import runtime


@pytest.fixture
def bare(monkeypatch):
    for name in (*runtime.KAGGLE_VARIABLES, "COLAB_RELEASE_TAG", "KERAS_VIT_ONLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    return monkeypatch


def test_colab_kaggle_and_elsewhere(bare):
    assert runtime.hosted() is None and not runtime.online()
    bare.setenv("KERAS_VIT_ONLINE", "1")
    assert runtime.hosted() is None and runtime.online()
    bare.delenv("KERAS_VIT_ONLINE")
    bare.setenv("KAGGLE_KERNEL_RUN_TYPE", "Interactive")
    assert runtime.hosted() == "kaggle" and runtime.online()
    bare.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    assert runtime.hosted() == "colab"


@pytest.mark.backend_dependent  # TensorFlow's devices come from a tf.distribute strategy
def test_distribute_on_one_cpu(bare, capsys):
    replicas, scope = runtime.distribute()
    assert replicas == 1
    with scope:
        pass
    import keras

    # away from Colab and Kaggle the line starts with the backend: no "local"
    assert capsys.readouterr().out.startswith(f"{keras.backend.backend()}: 1 device(s) (")


@pytest.mark.backend_dependent
def test_setup_reads_small_mode_and_seeds(bare, capsys):
    import numpy as np

    bare.setenv("KERAS_VIT_SMALL", "1")
    first = runtime.setup(seed=3)
    draw = np.random.rand()
    assert first.small and first.replicas == 1
    assert "small mode on" in capsys.readouterr().out
    bare.delenv("KERAS_VIT_SMALL")
    assert not runtime.setup(seed=3).small
    assert np.random.rand() == draw  # the same seed, the same draws


@pytest.mark.backend_dependent
def test_setup_names_the_processor_only_where_a_notebook_times_cells(bare, capsys):
    runtime.setup(seed=0)
    untimed = capsys.readouterr().out
    runtime.setup(seed=0, timed=True)
    timed = capsys.readouterr().out
    assert "processor" not in untimed and len(untimed.splitlines()) == 2, untimed
    processor = [line for line in timed.splitlines() if line.startswith("processor: ")]
    assert processor == [f"processor: {runtime.processor()} (the times below were measured on it)"]
    for out in (untimed, timed):  # no load average (it changes by the second), no "local"
        assert "load" not in out and "local" not in out, out
    assert runtime.processor().endswith((" core", " cores"))


def test_setup_keeps_tensorflow_start_up_lines_out_of_the_notebook(tmp_path):
    """What a kernel captures from fd 2 during the set-up cell: nothing (TensorFlow's C++ lines
    bypass Python's sys.stderr)."""
    import importlib.util
    import subprocess

    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("TensorFlow is not installed: it cannot print start-up lines")
    code = ("from keras_vit.app import runtime; runtime.setup(seed=0); import sys; "
            "assert 'tensorflow' in sys.modules")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(runtime.__file__))))
    env = {**os.environ, "KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "0",
           "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                            cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "absl" not in result.stderr and "I0000" not in result.stderr, result.stderr
