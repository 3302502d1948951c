"""benchmarks/train_step.py refuses clearly when what it compares is not installed (issue 19)."""

import importlib.util
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import train_step  # noqa: E402


def without(monkeypatch, *modules):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in modules else real(name, *a))


def run_main(monkeypatch, *argv):
    monkeypatch.setattr(sys, "argv", ["train_step.py", *argv])
    train_step.main()


def test_nothing_importable_names_every_package_and_its_install(monkeypatch, capsys):
    without(monkeypatch, "jax", "tensorflow", "torch", "timm")
    with pytest.raises(SystemExit):
        run_main(monkeypatch)
    error = capsys.readouterr().err
    for text in ("cannot import jax, tensorflow, torch, timm, timm-compile", "pip install jax",
                 "pip install tensorflow-cpu", "pip install --no-deps timm"):
        assert text in error


def test_a_missing_package_asked_for_by_name_is_an_error(monkeypatch, capsys):
    without(monkeypatch, "timm")
    with pytest.raises(SystemExit):
        run_main(monkeypatch, "--impl", "jax", "timm")
    error = capsys.readouterr().err
    assert "cannot import timm;" in error and "pip install --no-deps timm" in error


def test_a_missing_package_in_the_default_list_is_skipped_with_a_note(monkeypatch, capsys):
    pytest.importorskip("jax")  # the one left (the core install's backend)
    without(monkeypatch, "tensorflow", "torch", "timm")
    parser = train_step.argparse.ArgumentParser()
    kept = train_step.check_installed(parser, list(train_step.IMPLEMENTATIONS), explicit=False)
    assert kept == ["jax"]
    assert "skipping tensorflow, torch, timm, timm-compile" in capsys.readouterr().err


def test_table_ratios_are_per_round(capsys):
    class W:
        def __init__(self, impl, seconds, ops=None):
            self.impl, self.seconds, self.cpu_seconds, self.ops = impl, seconds, seconds, ops

    args = train_step.argparse.Namespace(model="default", batch=256, device="cpu", ops=True)
    text = train_step.table([W("torch", [0.04, 0.08], 3790), W("timm", [0.02, 0.08], 2746)],
                            args)
    assert "| keras_vit, torch backend | 60.0 (40.0-80.0) |" in text
    assert "| 3,790 | 0.83 (0.50-1.00) |" in text
