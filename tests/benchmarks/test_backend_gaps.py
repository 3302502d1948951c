"""benchmarks/backend_gaps.py compares the same arithmetic in each framework."""

import importlib.util
import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import backend_gaps  # noqa: E402


def test_the_block_is_the_same_function_in_every_framework():
    """The timings mean something only if each framework computes the same block."""
    installed = [m for m in ("jax", "torch", "tensorflow") if importlib.util.find_spec(m)]
    if len(installed) < 2:
        pytest.skip("needs two of jax, torch, tensorflow")
    losses = {name: float(np.asarray(run())) for name, run in backend_gaps.block_cases().items()
              if name.endswith(", forward")}
    assert len(losses) >= len(installed), losses
    values = np.array(list(losses.values()))
    assert np.ptp(values) < 1e-5 * np.abs(values).max(), losses
