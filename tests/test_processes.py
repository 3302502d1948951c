"""Past one machine: two jax processes of two host devices each train as one process of four.

Each test starts its processes as separate programs (``tests/processes_worker.py``) that join on
127.0.0.1 with Keras' variables, as the hosts of a TPU pod slice or of a GPU cluster do; JAX's CPU
collectives (gloo) carry what would go over the accelerators' links.
"""

import json
import os
import re
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from keras_vit.distribution import JOB_ADDRESSES, NUM_PROCESSES, PROCESS_ID, cluster

pytest.importorskip("jax", reason="several processes train together on the jax backend")

# Started by themselves, whatever the suite's backend: run once, in CI's jax suite.
pytestmark = pytest.mark.backend_independent

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER = os.path.join(ROOT, "tests", "processes_worker.py")
LIMIT = 400  # seconds a launch may take on a slow, busy 2-core machine


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _environment(processes, index, devices, port, **extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KERAS_DISTRIBUTION_", "XLA_FLAGS"))}
    env.update(KERAS_BACKEND="jax", XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
               PYTHONPATH=ROOT + os.pathsep + env.get("PYTHONPATH", ""),
               KERAS_VIT_HEARTBEAT_TIMEOUT="20", KERAS_VIT_JOIN_TIMEOUT="120")
    env.update(extra)
    if processes > 1:
        env.update({JOB_ADDRESSES: f"127.0.0.1:{port}", NUM_PROCESSES: str(processes),
                    PROCESS_ID: str(index)})
    return env


def _launch(out, *args, processes=2, devices=2, **extra):
    """Start the worker once per process; returns ``[(returncode, output, seconds)]``."""
    os.makedirs(out, exist_ok=True)
    port, started = _free_port(), time.monotonic()
    running = [subprocess.Popen([sys.executable, WORKER, args[0], out, *args[1:]], cwd=ROOT,
                                env=_environment(processes, i, devices, port, **extra),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
               for i in range(processes)]
    results = []
    for process in running:
        try:
            output, _ = process.communicate(timeout=LIMIT)
        except subprocess.TimeoutExpired:
            for other in running:
                other.kill()
            raise AssertionError(f"a process did not end within {LIMIT} s") from None
        results.append((process.returncode, output, time.monotonic() - started))
    return results


def _ok(results):
    for code, output, _ in results:
        assert code == 0, output[-3000:]


def _loaded(out, process=0):
    with np.load(os.path.join(out, f"process{process}.npz")) as found:
        return dict(found)


def _weights(results, prefix):
    return [results[k] for k in sorted((k for k in results if k.startswith(prefix)),
                                       key=lambda k: int(k.rsplit("_", 1)[1]))]


@pytest.fixture(scope="module")
def library_runs(tmp_path_factory):
    """The ``library`` scenario on 1 process x 4 devices and on 2 processes x 2 devices."""
    one, two = (str(tmp_path_factory.mktemp(name)) for name in ("one", "two"))
    _ok(_launch(one, "library", processes=1, devices=4))
    _ok(_launch(two, "library"))
    return _loaded(one), _loaded(two, 0), _loaded(two, 1)


@pytest.mark.parametrize("layout", ["dp", "mp"])
def test_two_processes_fit_as_one(library_runs, layout):
    """``model.fit`` fed by keras_vit.data (each process its rows, mixup partners included):
    the losses of every step and the final weights of one process of four devices, under
    ``DataParallel`` and under ``ModelParallel`` with ``layout_map`` on a (2, 2) mesh."""
    one, first, second = library_runs
    np.testing.assert_allclose(first[f"{layout}_losses"], one[f"{layout}_losses"], atol=1e-5)
    assert len(one[f"{layout}_losses"]) == 6
    assert one[f"{layout}_losses"][-1] < one[f"{layout}_losses"][0]  # it trained
    for a, b, c in zip(_weights(one, f"{layout}_weights_"), _weights(first, f"{layout}_weights_"),
                       _weights(second, f"{layout}_weights_"), strict=True):
        np.testing.assert_allclose(b, a, atol=1e-5)
        np.testing.assert_array_equal(b, c)  # and the two processes hold the same model


def test_evaluation_counts_every_example_once_in_every_process(library_runs):
    """``evaluate`` (a pipeline's batches, arrays, a tf.data pipeline), ``predict`` and few-shot
    linear evaluation: one process's numbers, in both processes."""
    one, first, second = library_runs
    tfdata = ["dp_evaluate_tfdata"] if "dp_evaluate_tfdata" in one else []  # with TensorFlow
    for key in ("dp_evaluate", "dp_evaluate_arrays", "dp_predict", "dp_fewshot", *tfdata):
        np.testing.assert_allclose(first[key], one[key], atol=1e-5)
        np.testing.assert_array_equal(first[key], second[key])
    assert first["dp_predict"].shape == (101, 10)  # 101 examples: the padding left out
    np.testing.assert_allclose(first["dp_evaluate"], first["dp_evaluate_arrays"], atol=1e-6)


def test_a_failing_process_stops_the_others_saying_why(tmp_path):
    results = _launch(str(tmp_path), "fails")
    (code, output, seconds), (failed_code, failed, _) = results
    assert code == 1 and failed_code != 0
    assert "keras_vit: process 1 of 2 stopped: RuntimeError: a failure in process 1; " \
           "process 0 stops too." in output, output[-3000:]
    assert "RuntimeError: a failure in process 1" in failed
    assert seconds < LIMIT


def test_a_terminated_process_stops_the_others_saying_so(tmp_path):
    (code, output, _), (terminated, mine, _) = _launch(str(tmp_path), "terminated")
    assert code == 1 and terminated != 0, output[-3000:]
    assert "keras_vit: process 1 of 2 stopped: SystemExit: ended by SIGTERM from outside; " \
           "process 0 stops too." in output, output[-3000:]
    assert "stopping the others" in mine


def test_a_killed_process_is_named_by_the_others(tmp_path):
    """Killed where its partner waits outside a collective: its connection from the roll call
    closes and process 0 names it (JAX's heartbeat, 20 s here, would stop it in JAX's words)."""
    (code, output, seconds), (killed, _, _) = _launch(str(tmp_path), "vanishes", VANISHING="1")
    assert killed == -9 and code == 1, output[-3000:]
    assert "keras_vit: process 1 of 2 ended without a word (its connection to process 0 closed: " \
           "killed, out of memory, or its host went down); process 0 stops too." in output, \
           output[-3000:]
    assert seconds < LIMIT


def test_a_killed_coordinator_is_named_by_the_others(tmp_path):
    """Process 0 killed: the roll call's connection or JAX's own poll of the coordination
    service, whichever comes first, stops process 1 naming process 0 (JAX's words: "the leader
    task")."""
    (killed, _, _), (code, output, seconds) = _launch(str(tmp_path), "vanishes", VANISHING="0")
    assert killed == -9 and code != 0, output[-3000:]
    ours = re.search(r"keras_vit: process 0 \(the coordinator at 127\.0\.0\.1:\d+\) ended "
                     r"without a word .*; process 1 stops too\.", output)
    assert ours or "the leader task was preempted/died" in output, output[-3000:]
    assert seconds < LIMIT


def test_a_process_killed_in_a_collective_stops_the_others(tmp_path):
    """Process 1 ends without a word at its second step: process 0 stops too, at once. On the
    CPU, gloo's transport can fail first and abort the process in C++ with its own words (2 of 6
    runs here); otherwise, and where the transport waits (accelerators), the roll call's
    connection names process 1."""
    (code, output, seconds), (killed, _, _) = _launch(str(tmp_path), "dies")
    assert killed == 3
    assert "process 0 step 1" in output
    named = "keras_vit: process 1 of 2 ended without a word" in output
    assert (code == 1 and named) or (code == -6 and "gloo" in output), output[-3000:]
    assert seconds < LIMIT


def _cli(out, folder, *options, **extra):
    return _launch(out, "cli", "train", "--epochs", "2", "--train-examples", "512",
                   "--test-examples", "200", "--batch-size", "64", "--model", "small-vit",
                   "--set", "patch_size=7", "--set", "hidden_size=16", "--set", "num_layers=1",
                   "--set", "num_heads=2", "--set", "mlp_dim=32", "--warmup-steps", "2",
                   "--augreg", "medium2",  # RandAugment and mixup, drawn per example and step
                   "--verbose", "2", "--output", folder, *options, **extra)


def _run_results(folder):
    import keras

    from keras_vit.app import run_files

    with open(os.path.join(folder, run_files.METRICS)) as f:
        metrics = json.load(f)
    model = keras.saving.load_model(os.path.join(folder, run_files.MODEL), compile=False)
    return metrics, [keras.ops.convert_to_numpy(w) for w in model.weights]


@pytest.mark.fashion_mnist
def test_keras_vit_train_in_two_processes_interrupted_and_resumed(tmp_path):
    """``keras-vit train`` in 2 processes with AugReg's RandAugment and mixup, stopped after
    its first epoch's backup and started again, ends with the test accuracy, history and
    weights of an uninterrupted run of one process on 4 devices; only process 0 wrote into
    the run folder."""
    alone, together = str(tmp_path / "alone"), str(tmp_path / "together")
    _ok(_cli(str(tmp_path / "out1"), alone, processes=1, devices=4))
    first = _cli(str(tmp_path / "out2"), together, STOP_AFTER_EPOCH="1")
    _ok(first)
    assert "keras-vit: process 0 of 2, 4 devices in all (2 here)" in first[0][1]
    resumed = _cli(str(tmp_path / "out3"), together)
    _ok(resumed)
    assert "Resuming the interrupted run" in resumed[0][1]
    expected, expected_weights = _run_results(alone)
    metrics, weights = _run_results(together)
    assert metrics["resumed_from_epoch"] == 1
    assert metrics["test_accuracy"] == pytest.approx(expected["test_accuracy"], abs=1e-9)
    assert [sorted(r) for r in metrics["history"]] == [sorted(r) for r in expected["history"]]
    for key in ("loss", "accuracy", "val_loss", "val_accuracy"):
        np.testing.assert_allclose([r.get(key, 0) for r in metrics["history"]],
                                   [r.get(key, 0) for r in expected["history"]], atol=2e-5)
    for a, b in zip(expected_weights, weights, strict=True):
        np.testing.assert_allclose(b, a, atol=2e-5)
    for out in ("out2", "out3"):
        with open(tmp_path / out / "writes1.json") as f:
            assert json.load(f) == []  # process 1
        with open(tmp_path / out / "writes0.json") as f:
            assert json.load(f)  # process 0 did write


def _alone(tmp_path, index, **extra):
    """Process ``index`` of 2 started without the other: ``keras-vit train``'s output."""
    env = _environment(2, index, 2, _free_port(), KERAS_VIT_JOIN_TIMEOUT="3", **extra)
    env.pop("KERAS_BACKEND")  # the command chooses jax by itself
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "keras_vit", "train", "--output",
                           str(tmp_path / "run")], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=LIMIT)
    return done.returncode, done.stdout + done.stderr, time.monotonic() - started


def test_a_process_whose_coordinator_never_answers_stops_with_the_address(tmp_path):
    code, output, _ = _alone(tmp_path, 1)
    assert code == 1, output[-3000:]
    assert "Process 0 of 2 did not answer at 127.0.0.1:" in output
    assert "within 3 s (KERAS_VIT_JOIN_TIMEOUT)" in output
    assert not (tmp_path / "run").exists()


def test_a_coordinator_whose_processes_never_join_names_them(tmp_path):
    code, output, seconds = _alone(tmp_path, 0)
    assert code == 1, output[-3000:]
    assert "process 0 of 2: joining at 127.0.0.1:" in output
    assert "Process 1 of 2 did not join at port " in output
    assert "within 3 s (KERAS_VIT_JOIN_TIMEOUT): start each with KERAS_DISTRIBUTION_PROCESS_ID" \
        in output, output[-3000:]
    assert seconds < LIMIT
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("variables, fix", [
    ({PROCESS_ID: "2"}, f"{PROCESS_ID}=2 is not below {NUM_PROCESSES}=2"),
    ({NUM_PROCESSES: "two"}, f"{NUM_PROCESSES}='two' is not a whole number"),
    ({JOB_ADDRESSES: "127.0.0.1"}, "needs a host and a free port"),
    ({JOB_ADDRESSES: "a:1,b:2,c:3"}, "lists 3 addresses for"),
    ({PROCESS_ID: ""}, f"{PROCESS_ID} not set"),
    ({"KERAS_VIT_JOIN_TIMEOUT": "0"}, "KERAS_VIT_JOIN_TIMEOUT='0' is not a whole number of at"),
])
def test_wrong_variables_are_refused_naming_the_variable(variables, fix):
    environ = {JOB_ADDRESSES: "127.0.0.1:8476", NUM_PROCESSES: "2", PROCESS_ID: "0", **variables}
    with pytest.raises(ValueError, match=re.escape(fix)):
        cluster(environ=environ)


def test_one_process_joins_nothing():
    assert cluster(environ={}) is None
    assert cluster(environ={"TPU_WORKER_HOSTNAMES": "a,b"}).coordinator is None  # JAX finds it


def test_the_command_refuses_wrong_variables_before_training(tmp_path):
    """On the torch backend (and with a wrong id): the command's one-line error, nothing run."""
    for variables, fix in (({"KERAS_BACKEND": "torch"}, "on the jax backend only (this is "
                            "torch)"), ({PROCESS_ID: "5"}, f"{PROCESS_ID}=5 is not below")):
        env = _environment(2, 0, 2, _free_port())
        env.pop("KERAS_BACKEND")
        env.update(variables)
        done = subprocess.run([sys.executable, "-m", "keras_vit", "train", "--output",
                               str(tmp_path / "run")], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=LIMIT)
        assert done.returncode == 1, done.stderr[-3000:]
        assert "keras-vit train: error: " in done.stderr and fix in done.stderr, \
            done.stderr[-2000:]
        assert not (tmp_path / "run").exists()
