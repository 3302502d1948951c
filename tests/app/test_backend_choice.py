"""The backend of the `keras-vit` command: the fastest installed one unless the user chose."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from keras_vit.app import backend_choice

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = ["train", "--train-examples", "128", "--test-examples", "64", "--batch-size", "64",
        "--set", "hidden_size=16", "--set", "num_layers=1", "--set", "num_heads=2",
        "--set", "mlp_dim=32", "--epochs", "1", "--no-validate", "--verbose", "0"]


def _expected():
    return next(b for b in backend_choice.FASTEST[backend_choice.accelerator()]
                if backend_choice.installed(b))


def _keras_json(folder, backend):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "keras.json"), "w") as file:
        json.dump({"backend": backend, "floatx": "float32"}, file)


def _command(home, *args, **env):
    """Run the console script in a clean environment with ``home`` as HOME."""
    script = os.path.join(os.path.dirname(sys.executable), "keras-vit")
    script = script if os.path.exists(script) else shutil.which("keras-vit")
    assert script, "the keras-vit console script is not installed (pip install -e .)"
    environ = {"PATH": os.environ["PATH"], "HOME": str(home), "PYTHONPATH": ROOT, **env}
    return subprocess.run([script, *args], capture_output=True, text=True, env=environ,
                           cwd=str(home), timeout=600)


def _backend_of_run(home, output):
    with open(os.path.join(home, output, "metrics.json")) as file:
        return json.load(file)["backend"]


@pytest.mark.fashion_mnist
def test_no_choice_runs_on_the_fastest_installed_backend_and_says_so(tmp_path):
    done = _command(tmp_path, *TINY, "--output", "run")
    assert done.returncode == 0, done.stderr
    expected = _expected()
    assert _backend_of_run(tmp_path, "run") == expected
    assert f"keras-vit: running on the {expected} backend" in done.stderr
    assert "choose another with KERAS_BACKEND=" in done.stderr
    # TensorFlow's start-up notices (tf.data is used for the pipeline) are gone
    for noise in ("oneDNN", "cuda drivers", "absl::InitializeLog", "cpu_feature_guard"):
        assert noise not in done.stderr, done.stderr
    # Keras' own keras.json (written with its default) is no choice either: the next run
    # chooses again
    done = _command(tmp_path, *TINY, "--output", "again")
    assert done.returncode == 0 and _backend_of_run(tmp_path, "again") == expected


@pytest.mark.fashion_mnist
def test_a_keras_json_choice_is_kept(tmp_path):
    chosen = next((b for b in ("jax", "torch") if b != _expected() and backend_choice.installed(b)),
                  None)
    if chosen is None:
        pytest.skip("needs a second installed backend to choose")
    _keras_json(tmp_path / ".keras", chosen)
    done = _command(tmp_path, *TINY, "--output", "run")
    assert done.returncode == 0, done.stderr
    assert _backend_of_run(tmp_path, "run") == chosen
    assert "keras-vit: running on" not in done.stderr


def test_an_explicit_keras_backend_is_kept_and_errors_still_show(tmp_path):
    explicit = next(b for b in ("tensorflow", "torch", "jax") if backend_choice.installed(b))
    done = _command(tmp_path, "evaluate", "missing.keras", KERAS_BACKEND=explicit)
    assert done.returncode == 1
    assert "keras-vit: running on" not in done.stderr
    assert "No model file at 'missing.keras'" in done.stderr


@pytest.mark.parametrize("environ, keras_json, expected", [
    ({"KERAS_BACKEND": "tensorflow"}, None, "tensorflow"),
    ({"KERAS_BACKEND": "jax"}, "torch", "jax"),
    ({}, "torch", "torch"),
    ({}, "tensorflow", None),  # Keras' default, which Keras writes itself
    ({}, None, None),
    ({}, "{not json", None),
])
def test_user_backend(tmp_path, environ, keras_json, expected):
    environ = dict(environ, KERAS_HOME=str(tmp_path))
    if keras_json == "{not json":
        (tmp_path / "keras.json").write_text(keras_json)
    elif keras_json:
        _keras_json(tmp_path, keras_json)
    assert backend_choice.user_backend(environ) == expected


def test_choose_backend_sets_only_an_unset_choice(tmp_path):
    environ = {"KERAS_HOME": str(tmp_path)}
    assert backend_choice.choose_backend(environ) == _expected()
    assert environ["KERAS_BACKEND"] == _expected()
    environ = {"KERAS_HOME": str(tmp_path), "KERAS_BACKEND": "tensorflow"}
    assert backend_choice.choose_backend(environ) is None
    assert environ["KERAS_BACKEND"] == "tensorflow"


def test_quiet_startup_keeps_the_users_settings():
    environ = {"TF_CPP_MIN_LOG_LEVEL": "0"}
    backend_choice.quiet_startup(environ)
    assert environ["TF_CPP_MIN_LOG_LEVEL"] == "0" and environ["GRPC_VERBOSITY"] == "ERROR"


@pytest.mark.parametrize("environ, expected", [
    ({"KERAS_BACKEND": "torch"}, "PASSIVE"),
    ({"KERAS_BACKEND": "torch", "OMP_WAIT_POLICY": "ACTIVE"}, "ACTIVE"),  # the user's setting
    ({"KERAS_BACKEND": "tensorflow"}, None),
    ({"KERAS_BACKEND": "jax"}, None),
])
def test_torch_threads_sleep_while_they_wait(tmp_path, environ, expected):
    environ = dict(environ, KERAS_HOME=str(tmp_path))
    backend_choice.passive_threads(environ)
    assert environ.get("OMP_WAIT_POLICY") == expected


def test_torch_threads_sleep_when_torch_is_chosen_for_the_user(tmp_path):
    environ = {"KERAS_HOME": str(tmp_path)}
    chosen = backend_choice.choose_backend(environ)
    backend_choice.passive_threads(environ)
    assert (environ.get("OMP_WAIT_POLICY") == "PASSIVE") == (chosen == "torch")


def test_the_command_sets_the_policy_before_torch_starts(tmp_path):
    """The entry point's preparation, in a fresh interpreter with no Keras imported yet."""
    code = ("from keras_vit.app import backend_choice\n"
            "backend_choice.prepare_command_line()\n"
            "import os, sys\n"
            "print(os.environ.get('OMP_WAIT_POLICY'), 'torch' in sys.modules)")
    environ = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONPATH": ROOT,
               "KERAS_BACKEND": "torch"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=environ, timeout=120)
    assert done.stdout.split() == ["PASSIVE", "False"], done.stderr


def test_filtered_stderr_drops_only_the_noise(capfd):
    noise = ("I0000 00:00:1795502845.250373   19794 port.cc:153] oneDNN custom operations are "
             "on. You may see slightly different numerical results.\n"
             "E0000 00:00:1795637084.155057   27102 cuda_platform.cc:52] failed call to cuInit: "
             "INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)\n")
    with backend_choice.FilteredStderr():
        os.write(2, noise.encode() + b"a real warning\n")
        os.write(2, b"Traceback (most recent call last):\n")
        os.write(2, b" 50%|#####     |\r 60%")  # a progress bar: no newline
    err = capfd.readouterr().err
    assert err == "a real warning\nTraceback (most recent call last):\n 50%|#####     |\r 60%"
