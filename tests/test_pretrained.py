"""The named presets (``keras_vit.pretrained.PRESETS``): a table of data, listed per class, the
``keras-vit presets`` command, and ``from_preset``'s way with names; the hook by which the models
reach them."""

import os
import subprocess
import sys

import pytest

import keras_vit
from conftest import shapes_only
from keras_vit import _hooks, pretrained
from keras_vit.app import cli
from keras_vit.checkpoints import official
from keras_vit.models import registry
from keras_vit.pretrained import PRESETS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLASSES = {
    keras_vit.ViTBackbone: "ViT", keras_vit.ViTImageClassifier: "ViT",
    keras_vit.ResNetBackbone: "BiT", keras_vit.ResNetImageClassifier: "BiT",
    keras_vit.AxialResNetBackbone: None, keras_vit.AxialResNetImageClassifier: None,
}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_a_presets_parameter_count_is_its_built_models(name):
    preset = PRESETS[name]
    with shapes_only():
        built = registry.build(preset.config)
    assert preset.parameters == built.count_params()
    assert preset.config.head.num_classes == preset.num_classes == 21_843
    assert official.is_published(preset.checkpoint)


@pytest.mark.parametrize("name", ["augreg/ViT-Ti/16", "augreg/ViT-S/16"])
def test_small_presets_count_as_built_and_initialised(name):
    preset = PRESETS[name]
    model = keras_vit.ViTImageClassifier.from_preset(name, load_weights=False,
                                                     num_classes=preset.num_classes)
    assert model.count_params() == preset.parameters  # no pre-logits layer: the same model


def test_each_class_lists_the_presets_it_builds():
    listed = {cls: cls.presets for cls in CLASSES}
    for cls, family in CLASSES.items():
        expected = {name for name, preset in PRESETS.items()
                    if family and preset.classes[0].__name__.startswith(
                        "ViT" if family == "ViT" else "ResNet")}
        assert set(listed[cls]) == expected, cls.__name__
    assert set(listed[keras_vit.ViTBackbone]) | set(listed[keras_vit.ResNetBackbone]) == \
        set(PRESETS)
    assert "ViT-B/16" in keras_vit.ViTImageClassifier.presets
    assert keras_vit.ViTBackbone.presets["ViT-B/16"].checkpoint == "imagenet21k/ViT-B_16"
    assert "BiT-R50x1" in keras_vit.ResNetBackbone.presets


def test_the_presets_command_prints_the_table(capsys):
    assert cli.main(["presets"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["name", "model", "checkpoint", "size", "classes",
                                           "parameters"]
    for preset in PRESETS.values():
        assert f"{preset.parameters:,}" in out and preset.source in out


def test_an_unknown_name_is_refused_with_the_nearest():
    with pytest.raises(ValueError, match=r"'vit-b/16'. Nearest: ViT-B/16, .*\.presets"):
        keras_vit.ViTBackbone.from_preset("vit-b/16")
    with pytest.raises(ValueError, match=r"called 'no/such/folder'.*ResNetBackbone\.from_preset "
                                         r"takes .* a preset folder"):
        keras_vit.ResNetBackbone.from_preset("no/such/folder")
    with pytest.raises(ValueError, match=r"No published pre-training of 'ViT-B/8'.*Nearest: "
                                         r"ViT-B/32, ViT-B/16.*load_weights=False"):
        keras_vit.ViTImageClassifier.from_preset("ViT-B/8")


def test_a_preset_of_another_class_is_refused_before_any_download():
    with pytest.raises(ValueError, match="'BiT-R50x1' is a ResNetImageClassifier, not a "
                                         "ViTBackbone: load it with ResNetImageClassifier"):
        keras_vit.ViTBackbone.from_preset("BiT-R50x1")


def test_a_table_preset_loads_its_checkpoint(monkeypatch):
    calls = []

    def create_model(name, **kwargs):
        calls.append((name, kwargs))
        return registry.build_model("ViT-Ti/4", image_size=8, num_classes=kwargs["num_classes"])

    monkeypatch.setattr(pretrained, "create_model", create_model)
    keras_vit.ViTImageClassifier.from_preset("augreg/ViT-S/16")
    keras_vit.ViTBackbone.from_preset("ViT-B/16", image_size=384)
    assert calls == [
        ("ViT-S/16", dict(weights="augreg/ViT-S/16", num_classes=21_843, image_size=224)),
        ("ViT-B/16", dict(weights="imagenet21k/ViT-B_16", num_classes=None, image_size=384))]


def test_other_published_names_are_read_as_checkpoints(monkeypatch):
    read = []

    def load_checkpoint(path, **kwargs):
        read.append((path, kwargs))
        return registry.build_model("BiT-R26x1", image_size=32, num_classes=None)

    monkeypatch.setattr(pretrained, "load_checkpoint", load_checkpoint)
    keras_vit.ResNetBackbone.from_preset("BiT-S-R50x1")  # BiT-S, not the BiT-M preset
    assert read == [("BiT-S-R50x1", {"num_classes": 0})]


def test_a_preset_without_weights_is_its_paper_model():
    model = keras_vit.ViTBackbone.from_preset("augreg/ViT-Ti/16", load_weights=False,
                                              image_size=32)
    assert model.config == registry.model_config("ViT-Ti/16").replace(
        image_size=32, num_classes=None)


def test_the_hook_names_what_is_missing(monkeypatch):
    with pytest.raises(LookupError, match="No module provides the hook 'nothing'"):
        _hooks.get("nothing")
    monkeypatch.setitem(_hooks._PROVIDERS, "unfilled", "keras_vit.checks")
    with pytest.raises(LookupError, match="keras_vit.checks is named for the hook 'unfilled' "
                                          "but does not fill it"):
        _hooks.get("unfilled")


def test_the_models_reach_the_presets_through_the_hook_alone():
    # A fresh process: the models import nothing above them; the first use imports the module
    # that the package root names for the hook.
    probe = ("import sys\nfrom keras_vit.models.vit import ViTBackbone\n"
             "assert 'keras_vit.pretrained' not in sys.modules\n"
             "assert not any(m.startswith('keras_vit.checkpoints') for m in sys.modules)\n"
             "print(sorted(ViTBackbone.presets)[0], 'keras_vit.pretrained' in sys.modules)\n")
    environ = dict(os.environ, PYTHONPATH=ROOT)
    done = subprocess.run([sys.executable, "-c", probe], env=environ, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["R50+ViT-B/16", "True"]
