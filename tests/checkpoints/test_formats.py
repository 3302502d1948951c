"""Every checkpoint format keeps one interface (``capabilities.Format``): a format is one module
and one line in ``formats.FORMATS``, and nothing else dispatches on its name."""

import inspect
import os
import pathlib

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.checkpoints import convert, formats
from keras_vit.checkpoints.formats import FORMATS, detect_format, load_checkpoint, save_checkpoint

PACKAGE = pathlib.Path(keras_vit.__file__).parent
# timm knows the heads from the width (192: 3); keras-hub has only the exact GELU.
TINY = dict(image_size=8, patch_size=4, hidden_size=192, num_layers=1, num_heads=3, mlp_dim=16,
            num_classes=3, approximate_gelu=False)
OPTIONS = ("image_size", "num_classes", "drop_pre_logits")


def _need(found):
    if found.name == "keras_hub":
        pytest.importorskip("keras_hub")  # an optional package: the dev and hub extras


def _logits(model, images):
    return keras.ops.convert_to_numpy(model(images))  # torch's carry gradients: not np.asarray


def _target(found, tmp_path):
    return str(tmp_path / ("model" + (found.suffixes[0] if found.suffixes else "")))


def test_every_format_is_listed_once_with_the_shared_interface():
    assert len(formats.NAMES) == len(set(formats.NAMES)) == len(FORMATS)
    assert formats.NAMES[-1] == "official"  # it takes any file name: last
    for found in FORMATS:
        load = inspect.signature(found.load).parameters
        assert list(load)[0] == "path" and all(o in load for o in OPTIONS), found.name
        assert any(p.kind is p.VAR_KEYWORD for p in load.values()), found.name
        assert list(inspect.signature(found.save).parameters)[:2] == ["model", "path"]
        assert found.name in convert.CONVERT_FORMATS and found.holds.name and found.what


@pytest.mark.parametrize("found", FORMATS, ids=lambda f: f.name)
def test_each_format_writes_what_it_reads_and_claims_it(found, tmp_path):
    _need(found)
    model = keras_vit.ViTImageClassifier(**TINY)
    images = np.random.default_rng(0).uniform(-1, 1, (2, 8, 8, 3)).astype("float32")
    path = _target(found, tmp_path)
    save_checkpoint(model, path, format=found.name)
    assert detect_format(path) == found.name
    if found.suffixes:
        assert convert.target_format(path) == found.name
    loaded = load_checkpoint(path)
    np.testing.assert_allclose(_logits(loaded, images), _logits(model, images), atol=1e-6)
    resized = load_checkpoint(path, image_size=16, num_classes=5)
    assert resized.config.image_size == (16, 16) and resized.config.head.num_classes == 5
    assert type(load_checkpoint(path, num_classes=0)).__name__ == "ViTBackbone"


@pytest.mark.parametrize("found", FORMATS, ids=lambda f: f.name)
def test_each_format_refuses_an_axial_model_before_writing(found, tmp_path):
    _need(found)
    path = _target(found, tmp_path)
    with pytest.raises(ValueError, match=f"no {found.holds.name} layout"):
        save_checkpoint(keras_vit.ViTImageClassifier(**TINY, axial=True), path,
                        format=found.name)
    assert not os.path.exists(path) and os.listdir(tmp_path) == []


def test_a_folder_no_format_reads_lists_the_folder_formats(tmp_path):
    with pytest.raises(ValueError, match="a folder that no checkpoint format reads "
                                         r"\(transformers: a Hugging Face ViT folder .*; "
                                         "keras_hub: a keras-hub preset folder"):
        load_checkpoint(tmp_path)
    with pytest.raises(ValueError, match="Unknown checkpoint format 'onnx'; use one of"):
        save_checkpoint(keras_vit.ViTImageClassifier(**TINY), tmp_path / "m.onnx",
                        format="onnx")


def test_no_module_outside_a_format_names_one():
    """The names appear in their own module, in their docs, and in the module that lists them."""
    names = [f'"{name}"' for name in formats.NAMES]
    allowed = {f"checkpoints/{module}.py" for module in
               ("official", "timm", "transformers", "keras_hub", "formats")}
    found = sorted(
        f"{path.relative_to(PACKAGE)}: {name}" for path in PACKAGE.rglob("*.py")
        if str(path.relative_to(PACKAGE)) not in allowed
        for name in names if f"== {name}" in path.read_text() or f"({name})" in path.read_text())
    assert not found, found


def test_a_keras_hub_preset_folder_is_read_by_from_preset_too(tmp_path):
    keras_hub = pytest.importorskip("keras_hub")
    model = keras_vit.ViTImageClassifier(**TINY)
    to_hub = keras_vit.to_keras_hub(model)
    to_hub.save_to_preset(str(tmp_path / "hub"))
    model.save_to_preset(str(tmp_path / "ours"))  # keras_vit's own preset: not keras-hub's
    assert detect_format(tmp_path / "hub") == "keras_hub"
    with pytest.raises(ValueError, match="read by the model class's from_preset"):
        detect_format(tmp_path / "ours")
    again = keras_vit.ViTImageClassifier.from_preset(str(tmp_path / "hub"))
    images = np.random.default_rng(1).uniform(-1, 1, (2, 8, 8, 3)).astype("float32")
    np.testing.assert_allclose(_logits(again, images), _logits(model, images), atol=1e-6)
    assert isinstance(keras_hub.models.ImageClassifier.from_preset(str(tmp_path / "hub")),
                      keras_hub.models.ViTImageClassifier)
