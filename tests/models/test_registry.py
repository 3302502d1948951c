"""The registry: one table of names, parsed once; models import nothing from checkpoints."""

import ast
import pathlib

import pytest

import keras_vit
from keras_vit.models import registry


def test_every_listed_name_parses_to_its_family():
    names = keras_vit.model_names()
    assert names == registry.PUBLISHED and len(names) == len(set(names))
    for family in registry.FAMILIES:
        for name in family.published:
            found, model_class, config = registry.parse(name)
            assert found == family.name == registry.family_of(config)
            assert config.family is family and model_class is family.classifier
            assert registry.model_class(config) is model_class
            assert registry.model_class(config.backbone()) is model_class.backbone_cls


@pytest.mark.parametrize("spelling, name", [
    ("ViT-B_16", "ViT-B/16"), ("R26_S_32", "R26+ViT-S/32"), ("BiT-M-R50x1", "BiT-R50x1"),
])
def test_published_file_spellings_are_the_same_models(spelling, name):
    assert registry.parse(spelling) == registry.parse(name)


def test_models_import_nothing_from_checkpoints():
    root = pathlib.Path(keras_vit.__file__).parent / "models"
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert not (node.module or "").startswith("keras_vit.checkpoints"), path


@pytest.mark.parametrize("num_classes", [3, None])
def test_build_model_gives_a_vit_its_dtype_policy(num_classes):
    model = registry.build_model("ViT-Ti/4", image_size=8, num_classes=num_classes,
                                 num_layers=1, dtype="mixed_bfloat16")
    assert model.dtype_policy.name == "mixed_bfloat16"
    assert model.get_layer("encoderblock_0").compute_dtype == "bfloat16"
    assert type(model) is (keras_vit.ViTBackbone if num_classes is None
                           else keras_vit.ViTImageClassifier)
