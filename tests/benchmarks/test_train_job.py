"""benchmarks/train_job.py and benchmarks/throughput.py: the settings they compare are read and
refused clearly."""

import os
import sys

import keras
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import throughput  # noqa: E402
import train_job  # noqa: E402


def test_a_backend_carries_its_environment():
    assert train_job.parse_backend("torch") == ("torch", {})
    assert train_job.parse_backend("torch:OMP_WAIT_POLICY=ACTIVE,GOMP_SPINCOUNT=0") == (
        "torch", {"OMP_WAIT_POLICY": "ACTIVE", "GOMP_SPINCOUNT": "0"})
    with pytest.raises(SystemExit, match="Unknown backend 'numpy'"):
        train_job.parse_backend("numpy:A=1")
    with pytest.raises(SystemExit, match="'GOMP_SPINCOUNT' in 'torch:GOMP_SPINCOUNT' is not "
                                         "NAME=VALUE"):
        train_job.parse_backend("torch:GOMP_SPINCOUNT")


def test_busy_processes_run_for_the_benchmark_and_end_with_it(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["train_job.py", "--backends", "torch:A=1", "--rounds", "0",
                                      "--busy", "1"])
    started = []
    real = train_job.multiprocessing.Process

    def process(**kwargs):
        started.append(real(**kwargs))
        return started[-1]

    monkeypatch.setattr(train_job.multiprocessing, "Process", process)
    train_job.main()
    out = capsys.readouterr().out
    assert "busy=1" in out and "| backend |" in out
    assert len(started) == 1
    started[0].join(timeout=10)
    assert not started[0].is_alive()


def test_the_flax_comparison_is_refused_before_any_model_is_built(monkeypatch, capsys,
                                                                  tmp_path):
    monkeypatch.setattr(sys, "argv", ["throughput.py", "--vit-jax", str(tmp_path)])
    with pytest.raises(SystemExit):
        throughput.main()
    err = capsys.readouterr().err
    if keras.backend.backend() == "jax":
        assert "holds no vit_jax/models_vit.py: git clone" in err
    else:
        assert "--vit-jax compares on the jax backend: run with KERAS_BACKEND=jax" in err
