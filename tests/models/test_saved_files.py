"""``.keras`` files load and compute the logits they were saved with; files of the earlier layout
(attention projections as raw weights) give an error naming the fix, and convert exactly."""

import os
import zipfile

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.models import axial, upgrade, vit  # noqa: F401  (the classes the files name)

FOLDER = os.path.join(os.path.dirname(__file__), "..", "fixtures", "keras")
OLD = os.path.join(FOLDER, "raw_attention")
NAMES = ["vit_token_learned_1d", "hybrid_gap_learned_2d", "axial_vit_token"]
# An old file and the images and logits it was saved with.
OLD_FILES = [(os.path.join(OLD, f"{name}.keras"), os.path.join(FOLDER, f"{name}_io.npz"))
             for name in NAMES] + [(os.path.join(OLD, "axial_resnet.keras"),
                                   os.path.join(OLD, "axial_resnet_io.npz"))]


def _logits(model, io_path):
    io = np.load(io_path)
    return keras.ops.convert_to_numpy(model(io["images"])), io["outputs"]


@pytest.mark.parametrize("name", NAMES)
def test_saved_file_loads_with_the_same_outputs(name):
    model = keras.saving.load_model(os.path.join(FOLDER, f"{name}.keras"))
    outputs, expected = _logits(model, os.path.join(FOLDER, f"{name}_io.npz"))
    np.testing.assert_allclose(outputs, expected, atol=1e-5)


@pytest.mark.parametrize("old, io", OLD_FILES, ids=lambda p: os.path.basename(p))
def test_a_file_of_the_raw_weight_layout_names_the_conversion(old, io):
    with pytest.raises(ValueError, match=r"raw weights.*upgrade_keras_file\('old.keras'"):
        keras.saving.load_model(old)


@pytest.mark.parametrize("old, io", OLD_FILES, ids=lambda p: os.path.basename(p))
def test_a_file_of_the_raw_weight_layout_converts_with_the_same_outputs(old, io, tmp_path):
    target = str(tmp_path / "new.keras")
    converted = upgrade.upgrade_keras_file(old, target)
    np.testing.assert_allclose(*_logits(converted, io), atol=1e-5)
    np.testing.assert_allclose(*_logits(keras.saving.load_model(target), io), atol=1e-5)


def test_old_weights_files_load_through_load_legacy_weights(tmp_path):
    old, io = OLD_FILES[0]
    with zipfile.ZipFile(old) as archive:  # a .keras file's weights are a .weights.h5 file
        archive.extract("model.weights.h5", tmp_path)
    weights = str(tmp_path / "old.weights.h5")
    os.rename(tmp_path / "model.weights.h5", weights)
    model = keras.saving.load_model(os.path.join(FOLDER, f"{NAMES[0]}.keras"))
    for variable in model.weights:
        variable.assign(np.zeros(variable.shape, variable.dtype))
    with pytest.raises(ValueError, match="load_legacy_weights"):
        model.load_weights(weights)
    upgrade.load_legacy_weights(model, weights)
    np.testing.assert_allclose(*_logits(model, io), atol=1e-5)


def test_conversion_refuses_a_file_of_another_model(tmp_path):
    old, _ = OLD_FILES[0]
    model = keras_vit.VisionTransformer(image_size=8, patch_size=4, hidden_size=8, num_layers=2,
                                        num_heads=2, mlp_dim=16, num_classes=3)
    with zipfile.ZipFile(old) as archive:
        archive.extract("model.weights.h5", tmp_path)
    with pytest.raises(ValueError, match="no weight for layers"):
        upgrade.load_legacy_weights(model, str(tmp_path / "model.weights.h5"))
    with pytest.raises(ValueError, match="new name"):
        upgrade.upgrade_keras_file(old, old)
