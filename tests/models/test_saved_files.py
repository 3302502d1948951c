"""``.keras`` files saved by earlier versions still load and compute the same logits."""

import os

import keras
import numpy as np
import pytest

from keras_vit.models import axial, vit  # noqa: F401  (registers the classes the files name)

FOLDER = os.path.join(os.path.dirname(__file__), "..", "fixtures", "keras")
NAMES = ["vit_token_learned_1d", "hybrid_gap_learned_2d", "axial_vit_token"]


@pytest.mark.parametrize("name", NAMES)
def test_saved_file_loads_with_the_same_outputs(name):
    model = keras.saving.load_model(os.path.join(FOLDER, f"{name}.keras"))
    io = np.load(os.path.join(FOLDER, f"{name}_io.npz"))
    outputs = keras.ops.convert_to_numpy(model(io["images"]))
    np.testing.assert_allclose(outputs, io["outputs"], atol=1e-5)
