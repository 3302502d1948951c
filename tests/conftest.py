import contextlib
import importlib.util
import os

import keras
import numpy as np
import pytest

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "official")
# README.md: logits of the official checkpoints agree with the original JAX code within 2e-6
# (measured on the fixtures, 2026-11-24: at most 1.1e-6 under tensorflow, 9.5e-7 jax and torch).
LOGIT_ATOL = 2e-6


# Tests whose result cannot depend on the backend of the suite that runs them: a fresh
# interpreter that sets its own backend or none (the console script, an import probe), the command
# line's parsing and run files, numpy and scikit-learn alone, downloads, the costs' arithmetic,
# documentation checks. They carry the mark `backend_independent`: every test of the folders below
# gets it, any other test by `@pytest.mark.backend_independent` (or a module's `pytestmark`), and
# a test of these folders that does reach backend code opts out with
# `@pytest.mark.backend_dependent`. A plain `python -m pytest` runs them under whatever backend;
# CI runs them in its jax suite only (`-m "not backend_independent"` for tensorflow and torch).
BACKEND_INDEPENDENT_FOLDERS = ("app", "benchmarks", "costs", "data", "evaluation")
TESTS = os.path.dirname(os.path.abspath(__file__))


def pytest_collection_modifyitems(items):
    for item in items:
        folder = os.path.relpath(str(item.path), TESTS).split(os.sep)[0]
        if folder in BACKEND_INDEPENDENT_FOLDERS and not item.get_closest_marker(
                "backend_dependent"):
            item.add_marker(pytest.mark.backend_independent)


def installed(*modules):
    """Whether every module named is installed. Tests of an optional package's path skip where
    it is not (Colab's TPU runtime has no TensorFlow); where it is, a failing import fails them."""
    return all(importlib.util.find_spec(module) is not None for module in modules)


def fixture_path(name):
    return os.path.join(FIXTURES, name)


@pytest.fixture
def images():
    return np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")


@contextlib.contextmanager
def shapes_only():
    """Build (large) models without initialising their weights: enough for count_params.

    Variables created in a ``keras.StatelessScope`` defer their initialisers. They are dropped
    afterwards so that no later scope initialises them.
    """
    from keras.src.backend.common import global_state

    try:
        with keras.StatelessScope(initialize_variables=False):
            yield
    finally:
        global_state.set_global_attribute("uninitialized_variables", [])
