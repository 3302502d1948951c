"""Shared pieces of the timm / transformers / export tests: random weights, images, errors."""

import importlib.util
import json
import os

import keras
import numpy as np
import pytest

ATOL = 1e-5


def need(*modules):
    """Skip the test where one of ``modules`` is not installed (the dev extra installs them).

    Found without importing: timm's torchvision may not load (tests/timm_import.py stands in),
    and an installed package that fails to import is a failure, not a skip.
    """
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)}, which is not installed (the dev extra)")


def numpy(x):
    return keras.ops.convert_to_numpy(x)


def images(size=32, channels=3, batch=2):
    return np.random.default_rng(1).uniform(-1, 1, (batch, size, size, channels)).astype("float32")


def nchw(x):
    import torch

    return torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))


def randomise_torch(module, seed=0, std=0.2):
    """Every parameter N(0, std): zero-initialised heads and biases would hide mapping errors."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * std)
    return module.eval()


def randomise_keras(model, seed=0, std=0.2):
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        variable.assign((std * rng.normal(size=variable.shape)).astype(variable.dtype))
    return model


def assert_close(actual, expected, what, atol=ATOL):
    """Compare, and log the largest error per case when KERAS_VIT_ERROR_LOG names a file."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    error = float(np.max(np.abs(actual - expected)))
    log = os.environ.get("KERAS_VIT_ERROR_LOG")
    if log:
        with open(log, "a") as handle:
            handle.write(json.dumps({"case": what, "backend": keras.backend.backend(),
                                     "max_abs_error": error}) + "\n")
    assert error <= atol, f"{what}: largest logit error {error:.3g} > {atol:g}"
