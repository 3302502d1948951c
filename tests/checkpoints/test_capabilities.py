"""Each format says what it holds (its ``Format.holds``); every writer refuses the rest, by name."""

import keras
import pytest

import keras_vit
from keras_vit.checkpoints.capabilities import check_expressible, check_position
from keras_vit.checkpoints.formats import FORMATS

HOLDS = {f.name: f.holds for f in FORMATS}

TINY = dict(image_size=8, patch_size=4, hidden_size=8, num_layers=1, num_heads=2, mlp_dim=16,
            num_classes=3)


def _vit(**kwargs):
    return keras_vit.ViTImageClassifier(**dict(TINY, **kwargs))


def test_the_default_vit_and_its_backbone_fit_every_format():
    model = _vit(approximate_gelu=False)
    for holds in HOLDS.values():
        check_expressible(model, holds)
        check_expressible(model.backbone, holds)
    # the head's pre-logits layer does not reach the backbone: timm can write it
    check_expressible(_vit(representation_size=4).backbone, HOLDS["timm"])


@pytest.mark.parametrize("format, kwargs, error, words", [
    ("official", dict(position_embedding="learned_2d"), ValueError, "official .npz format holds"),
    ("timm", dict(position_embedding_placement="every_layer"), ValueError, "placement 'every"),
    ("timm", dict(representation_size=4), ValueError, "no pre-logits"),
    ("transformers", dict(classifier="gap"), ValueError, "pools the class token"),
    ("transformers", dict(representation_size=4), ValueError, "ViTForImageClassification"),
    ("transformers", dict(stem=dict(num_layers=[], width_factor=0.5), image_size=16),
     ValueError, "no ResNet stem"),
    ("keras_hub", dict(), ValueError, "strict=False"),
    ("keras_hub", dict(approximate_gelu=False, layer_norm_epsilon=1e-12), ValueError,
     "epsilon"),
])
def test_each_format_refuses_what_it_cannot_hold(format, kwargs, error, words):
    with pytest.raises(error, match=words):
        check_expressible(_vit(**kwargs), HOLDS[format])


def test_bit_and_axial_models():
    bit = keras_vit.ResNetImageClassifier(block_units=(1,), width_factor=0.5, num_classes=3,
                                          image_size=16)
    for model in (bit, bit.backbone):
        check_expressible(model, HOLDS["official"])
        check_expressible(model, HOLDS["timm"])
    for format in ("transformers", "keras_hub"):
        with pytest.raises(TypeError, match="no BiT ResNetV2"):
            check_expressible(bit, HOLDS[format])
    axial = _vit(axial=True)
    for holds in HOLDS.values():
        for model in (axial, axial.backbone):
            with pytest.raises(ValueError, match=f"Axial-ViT .* no {holds.name} layout"):
                check_expressible(model, holds)
    resnet = keras_vit.AxialResNetImageClassifier(block_units=(1,), width_factor=0.5,
                                                  num_heads=2, num_classes=3, image_size=16)
    with pytest.raises(ValueError, match="AxialResNet .* no official .npz layout"):
        check_expressible(resnet, HOLDS["official"])
    other = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    with pytest.raises(TypeError, match="expected a keras_vit ViT .plain or hybrid. or BiT ResNet"):
        check_expressible(other, HOLDS["official"])


def test_readers_check_only_the_position_of_what_they_build():
    check_position(_vit(representation_size=4), HOLDS["transformers"])  # a new head on a ViTModel
    with pytest.raises(ValueError, match="position_embedding='relative'"):
        check_position(_vit(position_embedding="relative"), HOLDS["transformers"])
