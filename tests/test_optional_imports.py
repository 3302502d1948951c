"""Every optional package is imported after the checks that can refuse the input: with the
package missing, bad input still gets its own clear error, and good input an error that names
the ``keras-vit-paper`` extra to install (keras_vit/_optional.py).

A package is hidden as if it were not installed (``sys.modules[name] = None``), so the cases run
in every environment, the package installed or not.
"""

import os
import sys
import types

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit import _optional, data
from keras_vit.checkpoints import export, timm

TINY = dict(image_size=8, patch_size=4, hidden_size=8, num_layers=1, num_heads=2, mlp_dim=16,
            num_classes=3)


def _vit(**kwargs):
    return keras_vit.ViTImageClassifier(**dict(TINY, **kwargs))


@pytest.fixture
def hide(monkeypatch):
    """``hide("safetensors")``: the package and its modules cannot be imported in this test."""

    def hide(*names):
        for name in names:
            for loaded in [m for m in sys.modules if m.startswith(f"{name}.")]:
                monkeypatch.setitem(sys.modules, loaded, None)
            monkeypatch.setitem(sys.modules, name, None)

    return hide


def _install_hint(extra):
    return pytest.raises(ModuleNotFoundError, match=rf'pip install "keras-vit-paper\[{extra}\]"')


def test_the_table_knows_the_extras():
    with open(os.path.join(os.path.dirname(os.path.dirname(__file__)), "pyproject.toml")) as handle:
        pyproject = handle.read()
    for package, extra in _optional.PACKAGES.values():
        assert f'\n{extra} = [' in pyproject, extra
        section = pyproject.split(f"\n{extra} = [", 1)[1].split("]", 1)[0]
        assert f'"{package}"' in section, (package, extra)


def test_need_names_the_extra_and_lets_other_errors_through(hide, monkeypatch):
    hide("safetensors")
    with _install_hint("interop") as info:
        _optional.need("safetensors.numpy", "Writing")
    assert str(info.value).startswith("Writing needs safetensors: ")
    assert info.value.name == "safetensors"

    def broken(name):  # an installed package missing one of its own dependencies
        raise ModuleNotFoundError("No module named 'torchvision'", name="torchvision")

    monkeypatch.setattr(_optional, "importlib", types.SimpleNamespace(import_module=broken))
    with pytest.raises(ModuleNotFoundError, match="'torchvision'"):
        _optional.need("timm", "timm")


@pytest.mark.parametrize("format, refused", [
    ("transformers", "no pre-logits layer"),
    ("timm", "no pre-logits"),
])
def test_safetensors_checkpoints(format, refused, hide, tmp_path):
    bad, good = _vit(representation_size=4), _vit()
    path = tmp_path / ("hf" if format == "transformers" else "vit.safetensors")
    hide("safetensors")
    with pytest.raises(ValueError, match=refused):
        keras_vit.save_checkpoint(bad, path, format=format)
    with _install_hint("interop"):
        keras_vit.save_checkpoint(good, path, format=format)
    assert not list(tmp_path.iterdir())


def test_axial_models_are_refused_without_safetensors(hide):
    model = keras_vit.ViTImageClassifier(**TINY, axial=True)
    hide("safetensors", "keras_hub")
    for format in ("official", "timm", "transformers"):
        with pytest.raises(ValueError, match="no official, timm or transformers checkpoints"):
            keras_vit.save_checkpoint(model, "/nonexistent/x.npz", format=format)
    with pytest.raises(ValueError, match="keras-hub layout"):
        keras_vit.to_keras_hub(model)


@pytest.mark.parametrize("suffix, module, extra", [
    (".safetensors", "safetensors", "interop"),
    (".pth", "torch", "torch"),
])
def test_state_dict_files(suffix, module, extra, hide, tmp_path):
    path, bad = tmp_path / f"vit{suffix}", _vit(representation_size=4)
    hide(module)
    with pytest.raises(FileNotFoundError, match="No checkpoint file"):
        keras_vit.load_checkpoint(path)
    with pytest.raises(ValueError, match="no pre-logits"):
        keras_vit.save_checkpoint(bad, path, format="timm")
    with _install_hint(extra):
        timm.write_state_dict(path, {"x": np.zeros(2, "float32")})
    path.write_bytes(b"not read")
    with _install_hint(extra):
        keras_vit.load_checkpoint(path)


def test_keras_hub(hide):
    tanh, exact = _vit(), _vit(approximate_gelu=False)
    hide("keras_hub")
    with pytest.raises(TypeError, match="expects a keras_hub.models.ViTBackbone"):
        keras_vit.from_keras_hub(exact)  # no keras-hub model can exist without keras-hub
    with pytest.raises(ValueError, match="GELU"):
        keras_vit.to_keras_hub(tanh)
    with _install_hint("hub"):
        keras_vit.to_keras_hub(exact)


@pytest.mark.parametrize("name, module, extra", [
    ("vit.onnx", "onnx", "interop"),
    ("saved_model", "tensorflow", "tensorflow"),
    ("vit.tflite", "tensorflow", "tensorflow"),
])
def test_exports(name, module, extra, hide, tmp_path):
    model, mixed = _vit(), _vit(dtype="mixed_bfloat16")
    if module == "tensorflow" and keras.backend.backend() == "torch":
        pytest.skip("the torch backend refuses SavedModels first (test_export.py)")
    hide(module)
    with pytest.raises(ValueError, match="float32"):
        keras_vit.export_model(mixed, tmp_path / name)
    with pytest.raises(ValueError, match="Unknown export format"):
        keras_vit.export_model(model, tmp_path / name, format="coreml")
    with _install_hint(extra):
        export.export_model(model, tmp_path / name)
    assert not list(tmp_path.iterdir())


@pytest.fixture
def fresh_tfdata(monkeypatch):
    """``keras_vit.data.tfdata`` imported anew, as in a process that has not imported it."""
    monkeypatch.delitem(sys.modules, "keras_vit.data.tfdata", raising=False)
    monkeypatch.delitem(vars(data), "tfdata", raising=False)  # getattr would import it


def test_tensorflow_datasets_without_tensorflow(hide, fresh_tfdata):
    if keras.backend.backend() == "tensorflow":
        pytest.skip("TensorFlow is the backend here")
    hide("tensorflow", "tensorflow_datasets")
    with pytest.raises(TypeError, match="or a tf.data.Dataset, got list"):
        data.pipeline([1, 2], batch_size=2, image_size=8, num_classes=2, training=False)
    with pytest.raises(ValueError, match="Unknown augmentation 'bogus'"):
        data.load("cifar10", batch_size=8, augmentation="bogus")
    with pytest.raises(ValueError, match="Unknown dataset"):
        data.load("cifar11", batch_size=8)
    with _install_hint("tfds"):
        data.load("cifar10", batch_size=8)


def test_tensorflow_datasets_without_tfds(hide, fresh_tfdata):
    pytest.importorskip("tensorflow")  # the tf.data path is there, the datasets package is not
    hide("tensorflow_datasets")
    with pytest.raises(ValueError, match="has no training split"):
        data.load_examples("imagenet_v2", "train")
    with _install_hint("tfds") as info:
        data.load_examples("cifar10")
    assert "The dataset 'cifar10' needs tensorflow-datasets" in str(info.value)


def test_scikit_learn(hide):
    from keras_vit.data import offline
    from keras_vit.evaluation import pixel_baseline

    hide("sklearn")
    with pytest.raises(ValueError, match="test_fraction"):
        offline.load_digits(test_fraction=2)
    with _install_hint("train"):
        offline.load_digits()
    x = np.zeros((4, 2))
    with pytest.raises(ValueError, match="l2_reg must be positive"):
        pixel_baseline(x, [0, 0, 1, 1], x, [0, 0, 1, 1], l2_reg=0)
    with _install_hint("train"):
        pixel_baseline(x, [0, 0, 1, 1], x, [0, 0, 1, 1])


def test_matplotlib(hide):
    from keras_vit import inspection

    hide("matplotlib")
    with pytest.raises(ValueError, match="at least one similarity array"):
        inspection.plot_position_embedding_similarity({})
    with pytest.raises(ValueError, match="limit must be a factor above 1"):
        inspection.plot_attention_maps(np.zeros((8, 8, 1)), np.full((2, 3, 2, 2), 0.25), limit=1)
    with _install_hint("inspection"):
        inspection.plot_attention_maps(np.zeros((8, 8, 1)), np.full((2, 3, 2, 2), 0.25))
    with _install_hint("inspection"):
        inspection.plot_position_embedding_similarity(np.zeros((2, 2, 2, 2)))
