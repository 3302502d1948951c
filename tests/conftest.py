import os

import keras
import numpy as np
import pytest

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "official")


def fixture_path(name):
    return os.path.join(FIXTURES, name)


@pytest.fixture(autouse=True)
def _seed():
    keras.utils.set_random_seed(0)
    yield


@pytest.fixture
def images():
    return np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
