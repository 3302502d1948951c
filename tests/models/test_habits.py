"""keras-hub's habits on keras_vit's models: presets, the classifier's
preprocessor, compile defaults, ``backbone.enable_lora``."""

import json
import os

import keras
import numpy as np
import pytest

from conftest import fixture_path, installed
from keras_vit.models import habits, presets
from keras_vit.models.preprocessor import ImagePreprocessor
from keras_vit.models.resnet_v2 import ResNetImageClassifier
from keras_vit.models.vit import ViTBackbone, ViTImageClassifier
from tests import mirror

TINY = dict(image_size=8, patch_size=4, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32)


def _filled(model, seed=0):
    """The model with every weight random (the zero head would hide a head that did not load)."""
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        weight.assign(rng.normal(0, 0.1, weight.shape).astype(weight.dtype))
    return model


def _images(n=2, side=8, seed=1):
    return np.random.default_rng(seed).uniform(-1, 1, (n, side, side, 3)).astype("float32")


def _logits(model, images):
    return np.asarray(keras.Model.predict(model, images, verbose=0))


@pytest.fixture
def classifier():
    return _filled(ViTImageClassifier(num_classes=3, representation_size=8, **TINY,
                                      preprocessor=ImagePreprocessor(8)))


def test_classifier_preset_round_trip_is_exact(classifier, tmp_path):
    folder = tmp_path / "fine_tuned"
    classifier.save_to_preset(folder)
    assert sorted(os.listdir(folder)) == ["config.json", "metadata.json", "model.weights.h5",
                                          "task.json", "task.weights.h5"]
    config = json.loads((folder / "config.json").read_text())
    assert config["registered_name"] == "keras_vit>ViTBackbone"
    assert "compile_config" not in config and "build_config" not in config
    metadata = json.loads((folder / "metadata.json").read_text())
    assert metadata["parameter_count"] == classifier.backbone.count_params()
    again = ViTImageClassifier.from_preset(str(folder))
    np.testing.assert_array_equal(_logits(again, _images()), _logits(classifier, _images()))
    assert again.preprocessor.get_config() == classifier.preprocessor.get_config()
    backbone = ViTBackbone.from_preset(folder)  # the classifier's backbone alone
    np.testing.assert_array_equal(backbone.predict(_images(), verbose=0)["pooled"],
                                  classifier.backbone.predict(_images(), verbose=0)["pooled"])


def test_a_new_head_on_a_preset(classifier, tmp_path):
    classifier.save_to_preset(tmp_path / "p")
    task = ViTImageClassifier.from_preset(tmp_path / "p", num_classes=5)
    assert task.output.shape == (None, 5)
    assert not np.any(task.get_layer("head").kernel.numpy())  # zero-initialised (Sec. 3.2)
    assert isinstance(task.preprocessor, ImagePreprocessor)  # attached by default
    bare = ViTImageClassifier.from_preset(tmp_path / "p", num_classes=5, preprocessor=None)
    assert bare.preprocessor is None


def test_saving_replaces_a_preset_and_fails_cleanly(classifier, tmp_path, monkeypatch):
    folder = tmp_path / "p"
    classifier.save_to_preset(folder)
    before = {name: (folder / name).read_bytes() for name in os.listdir(folder)}

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(presets.saving_lib, "save_weights_only", broken)
    with pytest.raises(OSError, match="disk full"):
        _filled(classifier, seed=3).save_to_preset(folder)
    assert {name: (folder / name).read_bytes() for name in os.listdir(folder)} == before
    assert sorted(os.listdir(tmp_path)) == ["p"]  # no staging folder left behind
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(FileExistsError, match="holds files but no preset"):
        classifier.save_to_preset(tmp_path / "mine")


def test_broken_presets_are_refused_with_the_fix(classifier, tmp_path):
    folder = tmp_path / "p"
    classifier.save_to_preset(folder)
    os.remove(folder / "model.weights.h5")
    with pytest.raises(FileNotFoundError, match=f"{folder} has no model.weights.h5.*save_to_pr"):
        ViTImageClassifier.from_preset(folder)
    other = ViTImageClassifier(num_classes=3, representation_size=8,
                               **{**TINY, "hidden_size": 8})
    other.backbone.save_weights(str(folder / "model.weights.h5"))  # another width
    with pytest.raises(ValueError, match="model.weights.h5 in .* does not fit"):
        ViTImageClassifier.from_preset(folder)
    assert ViTImageClassifier.from_preset(folder, load_weights=False).count_params() == \
        classifier.count_params()


def test_a_preset_of_another_model_type_is_refused(tmp_path):
    resnet = ResNetImageClassifier(block_units=[1, 1, 1, 1], width_factor=1, image_size=32,
                                   num_classes=3)
    folder = tmp_path / "resnet"
    os.makedirs(folder)
    presets._write_json(str(folder), "config.json", presets._serialized(resnet))
    with pytest.raises(ValueError, match="holds a ResNetImageClassifier .*not a ViTBackbone"):
        ViTImageClassifier.from_preset(folder)
    hub = {"registered_name": "keras_hub>ViTBackbone", "class_name": "ViTBackbone", "config": {}}
    presets._write_json(str(folder), "config.json", hub)
    with pytest.raises(ValueError, match="keras-hub preset.*keras_vit.from_keras_hub"):
        ViTBackbone.from_preset(folder)
    with pytest.raises(FileNotFoundError, match="no config.json"):
        ViTBackbone.from_preset(tmp_path)


def test_paper_names_and_published_checkpoints(download_mirror):
    backbone = ViTBackbone.from_preset("ViT-Ti/4", load_weights=False, image_size=8)
    assert isinstance(backbone, ViTBackbone) and backbone.config.encoder.num_layers == 12
    with pytest.raises(ValueError, match="load_weights=False"):
        ViTImageClassifier.from_preset("ViT-Ti/4")
    root, _ = download_mirror
    name = "imagenet21k/ViT-preset-test"
    mirror.put(root, mirror.checkpoint_url(name), fixture_path("vit_tiny_token_rep16.npz"))
    model = ViTImageClassifier.from_preset(name)
    io = np.load(fixture_path("vit_tiny_token_rep16_io.npz"))
    np.testing.assert_allclose(_logits(model, io["images"]), io["logits"], atol=1e-4)
    raw = np.round((io["images"] + 1) * 127.5).astype("uint8")  # the same images, raw
    assert model.predict(raw, verbose=0).shape == io["logits"].shape
    features = ViTBackbone.from_preset(name)
    assert isinstance(features, ViTBackbone)


@pytest.mark.skipif(not installed("keras_hub"), reason="keras-hub not installed")
def test_hub_handles_go_through_keras_hub(classifier, tmp_path, monkeypatch):
    from keras_hub.src.utils import preset_utils

    classifier.save_to_preset(tmp_path / "p")
    seen, get_file = [], preset_utils.get_file

    def local(preset, path):  # what hf:// would download, from a local folder
        seen.append(preset)
        return get_file(str(tmp_path / "p"), path)

    monkeypatch.setattr(preset_utils, "get_file", local)
    again = ViTImageClassifier.from_preset("hf://someone/tiny-vit")
    np.testing.assert_array_equal(_logits(again, _images()), _logits(classifier, _images()))
    assert set(seen) == {"hf://someone/tiny-vit"}


def test_the_preprocessor_is_the_official_one(classifier):
    raw = np.random.default_rng(4).integers(0, 256, (3, 20, 12, 3)).astype("uint8")
    from keras_vit.data import preprocessing

    expected = _logits(classifier, preprocessing.to_unit_range(preprocessing.resize(raw, 8)))
    np.testing.assert_allclose(classifier.predict(raw, verbose=0), expected, atol=1e-6)
    np.testing.assert_allclose(classifier.predict(raw.astype("float32"), verbose=0), expected,
                               atol=1e-6)
    # a list of images of several sizes
    mixed = [raw[0], np.zeros((5, 7, 3), "uint8")]
    assert classifier.predict(mixed, verbose=0).shape == (2, 3)


def test_the_preprocessor_refuses_what_it_cannot_mean(classifier):
    with pytest.raises(ValueError, match=r"\(N, H, W, 3\).*got shape \(2, 8, 8, 1\)"):
        classifier.predict(np.zeros((2, 8, 8, 1), "uint8"), verbose=0)
    with pytest.raises(ValueError, match="already in \\[-1, 1\\].*preprocessor = None"):
        classifier.predict(_images(), verbose=0)
    classifier.preprocessor = None  # inputs already preprocessed: the model's own input
    assert classifier.predict(_images(), verbose=0).shape == (2, 3)


def test_the_preprocessor_is_saved_with_the_model(classifier, tmp_path):
    path = str(tmp_path / "m.keras")
    classifier.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.preprocessor.get_config() == {"image_size": 8, "num_channels": 3}
    plain = ViTImageClassifier(num_classes=3, **TINY)
    assert "preprocessor" not in plain.get_config()  # configs without one are unchanged


def test_fit_and_evaluate_on_raw_images(classifier):
    raw = np.random.default_rng(5).integers(0, 256, (6, 16, 16, 3)).astype("uint8")
    labels = np.arange(6) % 3
    classifier.compile()
    history = classifier.fit(raw, labels, batch_size=4, epochs=2, verbose=0,
                             validation_data=(raw, labels))
    assert len(history.history["val_loss"]) == 2
    assert set(classifier.evaluate(raw, labels, verbose=0, return_dict=True)) == \
        {"accuracy", "loss"}


def test_compile_defaults_are_the_papers_fine_tuning(classifier):
    classifier.compile()
    optimizer = classifier.optimizer
    assert isinstance(optimizer, keras.optimizers.SGD)
    assert (optimizer.momentum, optimizer.global_clipnorm) == (0.9, 1.0)
    schedule = habits.fine_tuning_schedule()
    assert float(schedule(500)) == pytest.approx(0.03)
    assert float(schedule(10_000)) == pytest.approx(0.0, abs=1e-9)
    classifier.compile(optimizer="adam", metrics=[])  # given arguments replace the defaults
    assert isinstance(classifier.optimizer, keras.optimizers.Adam)
    assert isinstance(classifier.loss, keras.losses.SparseCategoricalCrossentropy)


def test_backbone_enable_lora(classifier):
    backbone = classifier.backbone
    backbone.enable_lora(2)
    lora = {id(w) for w in backbone.trainable_weights}
    assert len(lora) == 4 and all("lora" in w.path for w in backbone.trainable_weights)
    head = {id(w) for w in classifier.get_layer("head").weights}
    assert head <= {id(w) for w in classifier.trainable_weights}  # the new task's head trains
    with pytest.raises(ValueError, match="already enabled"):
        backbone.enable_lora(2)


@pytest.mark.parametrize("family", ["bit", "axial"])
def test_resnet_presets_round_trip_exactly(family, tmp_path):
    """The ResNets have the ViT's habits: a fine-tuned classifier is a preset folder that loads
    back exactly, with its preprocessor; its backbone loads alone."""
    import keras_vit

    settings = dict(block_units=(1,), width_factor=0.5, num_classes=3, image_size=16)
    if family == "bit":
        model = keras_vit.ResNetImageClassifier(**settings)
    else:
        model = keras_vit.AxialResNetImageClassifier(**settings, num_heads=2)
    model = _filled(model)
    model.preprocessor = ImagePreprocessor(16)
    model.save_to_preset(tmp_path / "p")
    again = type(model).from_preset(tmp_path / "p")
    images = _images(side=16)
    np.testing.assert_array_equal(_logits(again, images), _logits(model, images))
    assert again.config == model.config and again.preprocessor.image_size == 16
    backbone = type(model.backbone).from_preset(tmp_path / "p")
    np.testing.assert_array_equal(backbone.predict(images, verbose=0)["pooled"],
                                  model.backbone.predict(images, verbose=0)["pooled"])
    with pytest.raises(ValueError, match="not a ViTBackbone"):
        ViTImageClassifier.from_preset(tmp_path / "p")


def test_a_bit_checkpoint_is_a_preset():
    import keras_vit

    model = keras_vit.ResNetImageClassifier.from_preset(fixture_path("bit_tiny_r2-1_w32.npz"))
    io = np.load(fixture_path("bit_tiny_r2-1_w32_io.npz"))
    np.testing.assert_allclose(_logits(model, io["images"]), io["logits"], atol=1e-4)
    backbone = keras_vit.ResNetBackbone.from_preset(fixture_path("bit_tiny_r2-1_w32.npz"))
    assert backbone.config == model.config.backbone()
    assert keras_vit.ResNetBackbone.from_preset("BiT-R26x1", load_weights=False,
                                                image_size=32).config.stages.block_units == (
        2, 2, 2, 2)
