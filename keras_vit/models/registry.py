"""Paper model names -> configurations, and ``build_model`` (what ``keras_vit.create_model``
builds without weights).

Names follow the paper (Table 1 and Sec. 4.1): ``"ViT-B/16"`` is the Base model with 16x16
patches. Any size works with any patch size (``"ViT-Ti/4"`` for 28x28 images). Published file
names with an underscore (``"ViT-B_16"``) are accepted too. One tuple, ``FAMILIES``, holds every
family's record (``keras_vit.models.family.Family``): its name pattern, the function from the
parsed name to the model's description, the published names (``PUBLISHED``), its classes, its
stem and what it refuses:

- ``"BiT-R50x1"`` ... ``"BiT-R200x3"``: BiT ResNetV2 of depth 26/50/101/152/200 and width factor
  x1, x2... (paper Table 6; the published ``"BiT-M-R50x1"`` spelling works too).
- ``"R50+ViT-B/16"`` ...: hybrids (paper Sec. 3.1, Table 6), where the number after the slash is
  the total downsampling: R50/16 is stages (3, 4, 9) (option (ii) of Sec. 4.1), R50/32 is
  (3, 4, 6, 3) (option (i)), R26/32 is (2, 2, 2, 2), all with patch size 1 on the feature map.
  ``"R+ViT-Ti/16"`` is the AugReg ``R_Ti_16`` model: the ResNet root alone (/4) with 8x8 patches
  on its output, as the official config has it (its total downsampling is therefore 32; the
  name is the published one). AugReg spellings (``"R26_S_32"``) are accepted too.
- ``"Axial-ViT-B/16"``, ``"Axial-ViT-B/32"`` (any size and patch): the ViT with axial blocks,
  and ``"AxialResNet50"`` (any BiT depth, width ``x2``...): paper Appendix D.6, Fig. 13. No
  weights are published for them (``keras_vit.models.axial``).

Loading weights by name is ``keras_vit.create_model(name, weights=...)`` (``keras_vit.pretrained``):
models import nothing from checkpoints.
"""

from keras_vit import _hooks
from keras_vit.layers.encoder import EncoderConfig
from keras_vit.models.axial import AxialResNetBackbone, AxialResNetImageClassifier
from keras_vit.models.description import (
    Axial,
    Patches,
    ResNetConfig,
    Stages,
    Stem,
    ViTConfig,
    model_keywords,
)
from keras_vit.models.family import Family
from keras_vit.models.resnet_v2 import ResNetBackbone, ResNetImageClassifier
from keras_vit.models.vit import ViTBackbone, ViTImageClassifier

# Paper Table 1 (+ Ti and S from the DeiT/AugReg follow-ups that the official code ships).
VIT_SIZES = {
    "Ti": dict(hidden_size=192, num_layers=12, num_heads=3, mlp_dim=768),
    "S": dict(hidden_size=384, num_layers=12, num_heads=6, mlp_dim=1536),
    "B": dict(hidden_size=768, num_layers=12, num_heads=12, mlp_dim=3072),
    "L": dict(hidden_size=1024, num_layers=24, num_heads=16, mlp_dim=4096),
    "H": dict(hidden_size=1280, num_layers=32, num_heads=16, mlp_dim=5120),
}
# The official configs use dropout 0.1 for the large models and 0 otherwise.
VIT_DROPOUT = {"Ti": 0.0, "S": 0.0, "B": 0.0, "L": 0.1, "H": 0.1}

# BiT depths -> units per stage (paper Table 6 family; BiT paper Sec. 3.1).
BIT_DEPTHS = {26: [2, 2, 2, 2], 50: [3, 4, 6, 3], 101: [3, 4, 23, 3], 152: [3, 8, 36, 3],
              200: [3, 24, 36, 3]}

# (ResNet, total downsampling) -> (units per stage, patch size on the feature map).
HYBRIDS = {
    ("R50", 16): ([3, 4, 9], 1),
    ("R50", 32): ([3, 4, 6, 3], 1),
    ("R26", 32): ([2, 2, 2, 2], 1),
    ("R", 16): ([], 8),
}


def _vit(size, patch, stem=None, dropout=None, axial=False):
    encoder = EncoderConfig(**VIT_SIZES[size], axial=axial,
                            dropout_rate=VIT_DROPOUT[size] if dropout is None else dropout)
    return ViTConfig(Patches(int(patch)), encoder, stem=stem)


def _hybrid(resnet, size, total):
    if (resnet, int(total)) not in HYBRIDS:
        valid = ", ".join(f"{r}+ViT-*/{t}" for r, t in HYBRIDS)
        raise ValueError(
            f"No hybrid {resnet}+ViT-{size}/{total}: the official hybrids are {valid}."
        )
    num_layers, patch = HYBRIDS[resnet, int(total)]
    dropout = 0.1 if (resnet, size, int(total)) == ("R50", "B", 16) else None
    return _vit(size, patch, Stem(num_layers, width_factor=1), dropout)


def _bit(depth, width):
    return ResNetConfig(Stages(BIT_DEPTHS[int(depth)], int(width)))


def _axial_vit(size, patch):
    return _vit(size, patch, axial=True)


def _axial_resnet(depth, width):
    stages = Stages(BIT_DEPTHS[int(depth)], int(width or 1))
    return ResNetConfig(stages, axial=Axial())


# Why a family refuses what needs patch tokens or token-to-token attention (``Family``).
_NO_TOKENS = ("{} has no patch tokens: its blocks are ResNet units over feature maps, with no "
              "token attention")
_AXIAL_ATTENTION = ("an Axial-ViT attends within rows and within columns instead of token to "
                    "token")
_VIT_CLASSES = dict(description=ViTConfig, backbone=ViTBackbone, classifier=ViTImageClassifier)


def _resnet_refusals(model):
    return dict.fromkeys(("token_attention", "masked_patches", "patch_resizing"),
                         _NO_TOKENS.format(model))


# Every family, one record each (``keras_vit.models.family.Family``); the packages above key their
# tables by these.
VIT = Family(
    "ViT", r"ViT-(Ti|S|B|L|H)[/_](\d+)", _vit,
    ["ViT-Ti/16", "ViT-S/16", "ViT-S/32", "ViT-B/8", "ViT-B/16", "ViT-B/32", "ViT-L/16",
     "ViT-L/32", "ViT-H/14"],
    **_VIT_CLASSES, stem="patches", weights=True)
HYBRID = Family(
    "hybrid ResNet+ViT", r"(R50|R26|R)(?:\+ViT-|_)(Ti|S|B|L|H)[/_](\d+)", _hybrid,
    ["R50+ViT-B/16", "R50+ViT-B/32", "R50+ViT-L/16", "R50+ViT-L/32", "R26+ViT-S/32",
     "R+ViT-Ti/16"],
    **_VIT_CLASSES, stem="hybrid", weights=True)
BIT = Family(
    "BiT ResNetV2", r"BiT(?:-[MS])?-R(26|50|101|152|200)x([1-9]\d*)", _bit,
    ["BiT-R50x1", "BiT-R50x2", "BiT-R50x3", "BiT-R101x1", "BiT-R101x3", "BiT-R152x1",
     "BiT-R152x2", "BiT-R152x4", "BiT-R200x3"],
    description=ResNetConfig, backbone=ResNetBackbone, classifier=ResNetImageClassifier,
    stem="bit", weights=True, **_resnet_refusals("a BiT ResNet"))
AXIAL_VIT = Family(
    "Axial-ViT", r"Axial-ViT-(Ti|S|B|L|H)[/_](\d+)", _axial_vit,
    ["Axial-ViT-B/16", "Axial-ViT-B/32"],
    **_VIT_CLASSES, stem="patches", weights=False, token_attention=_AXIAL_ATTENTION)
AXIAL_RESNET = Family(
    "AxialResNet", r"AxialResNet(26|50|101|152|200)(?:x([1-9]\d*))?", _axial_resnet,
    ["AxialResNet50"],
    description=ResNetConfig, backbone=AxialResNetBackbone,
    classifier=AxialResNetImageClassifier, stem="axial", weights=False,
    **_resnet_refusals("an AxialResNet"))
FAMILIES = (VIT, HYBRID, BIT, AXIAL_VIT, AXIAL_RESNET)
BY_NAME = {family.name: family for family in FAMILIES}
_hooks.fill(_hooks.FAMILIES, BY_NAME)
# Every family's classifier class and its backbone class.
MODEL_CLASSES = tuple(dict.fromkeys(
    cls for family in FAMILIES for cls in (family.classifier, family.backbone)))
# Families without published weights: create_model(..., weights=...) refuses them.
UNPUBLISHED = tuple(family.name for family in FAMILIES if not family.weights)
PUBLISHED = [name for family in FAMILIES for name in family.published]
_HINTS = ["ViT-Ti/4 (any ViT size with any patch size)", "BiT-R26x1 (any depth 26/50/101/152/200, "
          "any width)"]


def parse(name):
    """``(family, classifier class, description)`` of a registered name: a ``ViTConfig`` for
    the ViT families, a ``ResNetConfig`` for the ResNets (224 px, 1,000 classes).

    Example:
    >>> family, cls, config = parse("R26+ViT-S/32")
    >>> family, cls.__name__, config.stem
    ('hybrid ResNet+ViT', 'ViTImageClassifier', Stem(num_layers=(2, 2, 2, 2), width_factor=1))
    """
    for family in FAMILIES:
        config = family.parse(name)
        if config is not None:
            return family.name, family.classifier, config
    valid = "\n  ".join(model_names() + _HINTS)
    raise ValueError(f"Unknown model name {name!r}. Valid names:\n  {valid}")


def model_config(name):
    """The description of the model a paper name stands for: a ``ViTConfig`` for a ViT, hybrid
    or Axial-ViT (``"ViT-B/16"``), a ``ResNetConfig`` for a BiT ResNet or AxialResNet.

    Example:
    >>> model_config("R26+ViT-S/32").stem.num_layers
    (2, 2, 2, 2)
    """
    return parse(name)[2]


def family_of(model_or_config):
    """The family name (a ``Family``'s ``name``) of a model or its description.

    Example:
    >>> family_of(model_config("AxialResNet50")), family_of(model_config("R50+ViT-B/16"))
    ('AxialResNet', 'hybrid ResNet+ViT')
    """
    return getattr(model_or_config, "config", model_or_config).family.name


def model_class(config):
    """The class that builds a description: the family's classifier, or its backbone for a
    description without a head."""
    return config.family.model_class(config)


def model_names():
    """The published model names of every family (any ViT size takes any patch size too)."""
    return list(PUBLISHED)


def build_model(name, *, image_size=224, num_classes=1000, **overrides):
    """The model a paper name stands for, randomly initialised: ``keras_vit.create_model``
    with ``weights=None`` (``keras_vit.pretrained``, which documents the arguments). With
    ``num_classes=None`` it is the family's backbone.

    Example:
    >>> build_model("ViT-Ti/4", image_size=28, num_classes=10, num_channels=1).count_params()
    5353738
    """
    _, _, config = parse(name)
    model = model_keywords(overrides)
    config = config.replace(image_size=image_size, num_classes=num_classes, **overrides)
    return build(config, **model)


def build(config, **model):
    """The model of a description (``model_class``), with the model's own keywords ``model``
    (``name``, ``dtype``, ``trainable``)."""
    return model_class(config)(config=config, **model)
