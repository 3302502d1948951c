"""``.keras`` files load and compute the logits they were saved with; files of the two earlier
layouts (a flat ``VisionTransformer`` config; attention projections as raw weights) give an
error naming the fix, and convert exactly."""

import json
import os
import zipfile

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.layers.tree import sublayers
from keras_vit.models import upgrade

FOLDER = os.path.join(os.path.dirname(__file__), "..", "fixtures", "keras")
NAMES = ["vit_token_learned_1d", "hybrid_gap_learned_2d", "axial_vit_token"]
# A file of an earlier layout and the images and logits it was saved with.
OLD_FILES = [(os.path.join(FOLDER, layout, f"{name}.keras"),
              os.path.join(FOLDER, f"{name}_io.npz"))
             for layout in ("flat_config", "raw_attention") for name in NAMES]
AXIAL_RESNET = (os.path.join(FOLDER, "raw_attention", "axial_resnet.keras"),
                os.path.join(FOLDER, "raw_attention", "axial_resnet_io.npz"))
# The ResNets of the flat layout (ResNetV2, AxialResNet with Dense projections).
RESNETS = [(os.path.join(FOLDER, "flat_config", f"{name}.keras"),
            os.path.join(FOLDER, "flat_config", f"{name}_io.npz"))
           for name in ("resnet_v2", "axial_resnet")]
INT8 = (os.path.join(FOLDER, "flat_config", "vit_int8.keras"),
        os.path.join(FOLDER, "flat_config", "vit_int8_io.npz"))


def _logits(model, io_path):
    io = np.load(io_path)
    return keras.ops.convert_to_numpy(model(io["images"])), io["outputs"]


def _id(path):
    return "/".join(path.split(os.sep)[-2:]) if isinstance(path, str) else None


@pytest.mark.parametrize("name", NAMES)
def test_saved_file_loads_with_the_same_outputs(name):
    model = keras.saving.load_model(os.path.join(FOLDER, f"{name}.keras"))
    assert isinstance(model, keras_vit.ViTImageClassifier)
    assert model.config.encoder.axial == (name == "axial_vit_token")
    outputs, expected = _logits(model, os.path.join(FOLDER, f"{name}_io.npz"))
    np.testing.assert_allclose(outputs, expected, atol=1e-5)


@pytest.mark.parametrize("old, io", [*OLD_FILES, INT8], ids=_id)
def test_a_vit_file_of_an_earlier_layout_names_the_conversion(old, io):
    with pytest.raises(ValueError, match=r"earlier layout.*keras_vit.models.upgrade."
                                         r"upgrade_keras_file\('old.keras'"):
        keras.saving.load_model(old)


@pytest.mark.parametrize("old, io", [AXIAL_RESNET, *RESNETS], ids=_id)
def test_a_resnet_file_of_an_earlier_layout_names_the_conversion(old, io):
    name = "ResNetV2" if "resnet_v2" in old else "AxialResNet"
    with pytest.raises(ValueError, match=f"{name} of an earlier layout.*"
                                         r"upgrade_keras_file\('old.keras'"):
        keras.saving.load_model(old)


@pytest.mark.parametrize("old, io", [*OLD_FILES, AXIAL_RESNET, *RESNETS], ids=_id)
def test_a_file_of_an_earlier_layout_converts_with_the_same_outputs(old, io, tmp_path):
    target = str(tmp_path / "new.keras")
    converted = upgrade.upgrade_keras_file(old, target)
    np.testing.assert_allclose(*_logits(converted, io), atol=1e-5)
    loaded = keras.saving.load_model(target)
    np.testing.assert_allclose(*_logits(loaded, io), atol=1e-5)
    if "resnet" in old:  # today's ResNet classifiers, on their backbones
        assert type(loaded).__name__ == ("ResNetImageClassifier" if "resnet_v2" in old else
                                         "AxialResNetImageClassifier")
        assert loaded.config.head.num_classes == 3 and loaded.backbone.config.head is None
    elif "int8" not in old:  # today's classifier, same settings
        today = keras.saving.load_model(os.path.join(FOLDER, os.path.basename(old)))
        assert type(loaded) is keras_vit.ViTImageClassifier
        assert loaded.config == today.config and loaded.name == today.name


def test_a_quantized_file_of_the_flat_layout_converts_exactly_and_stays_quantized(tmp_path):
    converted = upgrade.upgrade_keras_file(INT8[0], str(tmp_path / "int8.keras"))
    np.testing.assert_allclose(*_logits(converted, INT8[1]), atol=1e-5)
    loaded = keras.saving.load_model(str(tmp_path / "int8.keras"))
    modes = {layer.name: layer.quantization_mode for layer in sublayers(loaded, include_self=True)
             if layer.name in ("query", "Dense_0", "pre_logits", "head")}
    assert modes == dict.fromkeys(("query", "Dense_0", "pre_logits", "head"), "int8")
    np.testing.assert_allclose(*_logits(loaded, INT8[1]), atol=1e-5)


def test_the_flat_config_maps_onto_a_vit_config():
    flat = dict(num_layers=1, num_heads=2, mlp_dim=16, hidden_size=8, classifier="gap",
                image_size=[16, 16], patch_size=2, num_classes=3, representation_size=None,
                head_kernel_initializer="zeros", head_bias_init=-10.0, num_channels=1,
                resnet={"num_layers": [], "width_factor": 0.5}, position_embedding_grid=None,
                name="vit", trainable=True, dtype="float32")
    config = upgrade.flat_config("VisionTransformer", flat)
    assert config.stem == keras_vit.models.description.Stem((), 0.5)
    assert (config.head.num_classes, config.head.bias_init) == (3, -10.0)
    assert config.patches.num_channels == 1 and not config.encoder.axial
    assert upgrade.flat_config("AxialVisionTransformer", flat).encoder.axial
    assert upgrade.flat_config("VisionTransformer", dict(flat, num_classes=None)).head is None
    # a feature extractor ending in its pre-logits layer: a head of that layer alone
    features = upgrade.flat_config("VisionTransformer", dict(flat, num_classes=None,
                                                             representation_size=4)).head
    assert (features.num_classes, features.representation_size) == (None, 4)


def test_the_flat_resnet_configs_map_onto_resnet_configs():
    flat = dict(block_units=[3, 4], width_factor=2, num_classes=None, image_size=[64, 64],
                num_channels=1, head_kernel_initializer="zeros", head_bias_init=0.0, name="r",
                trainable=True, dtype="float32")
    bit = upgrade.flat_config("ResNetV2", flat)
    assert (bit.stages.block_units, bit.stages.width_factor, bit.axial, bit.head) == (
        (3, 4), 2, None, None)
    axial = upgrade.flat_config("AxialResNet", dict(flat, num_heads=4, num_classes=5))
    assert (axial.axial.num_heads, axial.head.num_classes) == (4, 5)
    with pytest.raises(TypeError, match="ResNetV2 is an earlier layout's class; today's is "
                                        "keras_vit.ResNetImageClassifier"):
        upgrade.ResNetV2(block_units=[1], width_factor=1)


def _flat_feature_extractor(tmp_path):
    """The flat-layout file of a feature extractor (``num_classes=None``): the flat ViT file
    with its config's head settings cleared and its head's weights left out, as the earlier
    ``VisionTransformer`` wrote it."""
    import h5py

    source, target = OLD_FILES[0][0], str(tmp_path / "features.keras")
    with zipfile.ZipFile(source) as archive, zipfile.ZipFile(target, "w") as out:
        config = json.loads(archive.read("config.json"))
        config["config"].update(num_classes=None, representation_size=None)
        out.writestr("config.json", json.dumps(config))
        out.writestr("metadata.json", archive.read("metadata.json"))
        archive.extract("model.weights.h5", tmp_path)
        with h5py.File(tmp_path / "model.weights.h5", "r+") as h5:
            for name in ("dense", "dense_1"):
                del h5["layers"][name]
        out.write(tmp_path / "model.weights.h5", "model.weights.h5")
    return target


def test_a_feature_extractor_of_the_flat_layout_becomes_a_backbone(tmp_path):
    old = _flat_feature_extractor(tmp_path)
    with pytest.raises(ValueError, match="upgrade_keras_file"):
        keras.saving.load_model(old)
    backbone = upgrade.upgrade_keras_file(old, str(tmp_path / "backbone.keras"))
    assert type(backbone) is keras_vit.ViTBackbone
    classifier = keras.saving.load_model(os.path.join(FOLDER, f"{NAMES[0]}.keras"))
    assert backbone.config == classifier.config.replace(head=None)
    images = np.load(OLD_FILES[0][1])["images"]
    np.testing.assert_array_equal(backbone.predict(images, verbose=0)["pooled"],
                                  classifier.backbone.predict(images, verbose=0)["pooled"])


def _old_weights(old, tmp_path):
    with zipfile.ZipFile(old) as archive:  # a .keras file's weights are a .weights.h5 file
        archive.extract("model.weights.h5", tmp_path)
    weights = str(tmp_path / "old.weights.h5")
    os.rename(tmp_path / "model.weights.h5", weights)
    return weights


@pytest.mark.parametrize("old, io", [OLD_FILES[0], OLD_FILES[3]], ids=_id)
def test_old_weights_files_load_through_load_legacy_weights(old, io, tmp_path):
    weights = _old_weights(old, tmp_path)
    model = keras.saving.load_model(os.path.join(FOLDER, f"{NAMES[0]}.keras"))
    for variable in model.weights:
        variable.assign(np.zeros(variable.shape, variable.dtype))
    with pytest.raises(ValueError, match=r"earlier layout.*load_legacy_weights\(model"):
        model.load_weights(weights)
    upgrade.load_legacy_weights(model, weights)
    np.testing.assert_allclose(*_logits(model, io), atol=1e-5)


def test_conversion_refuses_a_file_of_another_model(tmp_path):
    old, _ = OLD_FILES[0]
    model = keras_vit.ViTImageClassifier(image_size=8, patch_size=4, hidden_size=8,
                                         num_layers=2, num_heads=2, mlp_dim=16, num_classes=3)
    weights = _old_weights(old, tmp_path)
    with pytest.raises(ValueError, match="no weight for layers"):
        upgrade.load_legacy_weights(model, weights)
    with pytest.raises(ValueError, match="could not be loaded"):  # Keras' own error stands
        model.load_weights(weights)
    with pytest.raises(ValueError, match="new name"):
        upgrade.upgrade_keras_file(old, old)


def test_conversion_names_a_file_that_is_no_keras_file(tmp_path):
    weights = str(tmp_path / "model.weights.h5")
    keras_vit.ViTBackbone(image_size=8, patch_size=4, hidden_size=8, num_layers=1, num_heads=2,
                          mlp_dim=16).save_weights(weights)
    text = tmp_path / "notes.keras"
    text.write_text("not a zip archive")
    for path in (weights, str(text)):
        with pytest.raises(ValueError,
                           match=rf"{path} is not a \.keras file .*load_legacy_weights"):
            upgrade.upgrade_keras_file(path, str(tmp_path / "new.keras"))
