"""Paper model names -> configurations, and ``create_model``.

Names follow the paper (Table 1 and Sec. 4.1): ``"ViT-B/16"`` is the Base model with 16x16
patches. Any size works with any patch size (``"ViT-Ti/4"`` for 28x28 images). Published file
names with an underscore (``"ViT-B_16"``) are accepted too. Other families register themselves
with ``register_family``; this module registers ViT, the hybrids and BiT:

- ``"BiT-R50x1"`` ... ``"BiT-R200x3"``: BiT ResNetV2 of depth 26/50/101/152/200 and width factor
  x1, x2... (paper Table 6; the published ``"BiT-M-R50x1"`` spelling works too).
- ``"R50+ViT-B/16"`` ...: hybrids (paper Sec. 3.1, Table 6), where the number after the slash is
  the total downsampling: R50/16 is stages (3, 4, 9) (option (ii) of Sec. 4.1), R50/32 is
  (3, 4, 6, 3) (option (i)), R26/32 is (2, 2, 2, 2), all with patch size 1 on the feature map.
  ``"R+ViT-Ti/16"`` is the AugReg ``R_Ti_16`` model: the ResNet root alone (/4) with 8x8 patches
  on its output, as the official config has it (its total downsampling is therefore 32; the
  name is the published one). AugReg spellings (``"R26_S_32"``) are accepted too.
"""

import re

from keras_vit.models.resnet_v2 import ResNetV2
from keras_vit.models.vit import VisionTransformer

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

_FAMILIES = []


def register_family(pattern, builder, examples):
    """Register a model family.

    Args:
        pattern: regular expression matched against the whole name.
        builder: ``builder(match, image_size=..., num_classes=..., **overrides) -> keras.Model``.
        examples: names shown in the error message for unknown names.
    """
    _FAMILIES.append((re.compile(pattern), builder, tuple(examples)))


def vit_config(name):
    """The keyword arguments of ``VisionTransformer`` for a paper name like ``"ViT-B/16"``."""
    match = re.fullmatch(r"ViT-(Ti|S|B|L|H)[/_](\d+)", name)
    if match is None:
        raise ValueError(f"{name!r} is not a ViT name of the form 'ViT-B/16'.")
    size, patch = match.group(1), int(match.group(2))
    return dict(VIT_SIZES[size], patch_size=patch, dropout_rate=VIT_DROPOUT[size])


def _build_vit(match, image_size, num_classes, **overrides):
    config = vit_config(match.group(0))
    config.update(overrides)
    return VisionTransformer(image_size=image_size, num_classes=num_classes, **config)


register_family(
    r"ViT-(Ti|S|B|L|H)[/_](\d+)",
    _build_vit,
    ["ViT-Ti/16", "ViT-S/16", "ViT-S/32", "ViT-B/8", "ViT-B/16", "ViT-B/32", "ViT-L/16",
     "ViT-L/32", "ViT-H/14", "ViT-Ti/4 (any size with any patch size)"],
)


# BiT depths -> units per stage (paper Table 6 family; BiT paper Sec. 3.1).
BIT_DEPTHS = {26: [2, 2, 2, 2], 50: [3, 4, 6, 3], 101: [3, 4, 23, 3], 152: [3, 8, 36, 3],
              200: [3, 24, 36, 3]}


def _build_bit(match, image_size, num_classes, **overrides):
    config = dict(block_units=BIT_DEPTHS[int(match.group(2))], width_factor=int(match.group(3)))
    config.update(overrides)
    return ResNetV2(image_size=image_size, num_classes=num_classes, **config)


register_family(
    r"BiT(-[MS])?-R(26|50|101|152|200)x([1-9]\d*)",
    _build_bit,
    ["BiT-R50x1", "BiT-R50x2", "BiT-R50x3", "BiT-R101x1", "BiT-R101x3", "BiT-R152x1",
     "BiT-R152x2", "BiT-R152x4", "BiT-R200x3", "BiT-R26x1 (any depth 26/50/101/152/200, any x)"],
)

# (ResNet, total downsampling) -> (units per stage, patch size on the feature map).
HYBRIDS = {
    ("R50", 16): ([3, 4, 9], 1),
    ("R50", 32): ([3, 4, 6, 3], 1),
    ("R26", 32): ([2, 2, 2, 2], 1),
    ("R", 16): ([], 8),
}


def hybrid_config(name):
    """The ``VisionTransformer`` arguments of a hybrid name like ``"R50+ViT-B/16"``.

    Example:
    >>> hybrid_config("R26+ViT-S/32")["resnet"]
    {'num_layers': [2, 2, 2, 2], 'width_factor': 1}
    """
    match = re.fullmatch(r"(R50|R26|R)(?:\+ViT-|_)(Ti|S|B|L|H)[/_](\d+)", name)
    if match is None:
        raise ValueError(f"{name!r} is not a hybrid name of the form 'R50+ViT-B/16'.")
    resnet, size, total = match.group(1), match.group(2), int(match.group(3))
    if (resnet, total) not in HYBRIDS:
        valid = ", ".join(f"{r}+ViT-*/{t}" for r, t in HYBRIDS)
        raise ValueError(f"No hybrid {name!r}: the official hybrids are {valid}.")
    num_layers, patch = HYBRIDS[resnet, total]
    dropout = 0.1 if (resnet, size, total) == ("R50", "B", 16) else VIT_DROPOUT[size]
    return dict(VIT_SIZES[size], patch_size=patch, dropout_rate=dropout,
                resnet=dict(num_layers=list(num_layers), width_factor=1))


def _build_hybrid(match, image_size, num_classes, **overrides):
    config = hybrid_config(match.group(0))
    config.update(overrides)
    return VisionTransformer(image_size=image_size, num_classes=num_classes, **config)


register_family(
    r"(R50|R26|R)(?:\+ViT-|_)(Ti|S|B|L|H)[/_](\d+)",
    _build_hybrid,
    ["R50+ViT-B/16", "R50+ViT-B/32", "R50+ViT-L/16", "R50+ViT-L/32", "R26+ViT-S/32",
     "R+ViT-Ti/16"],
)


def model_names():
    """Example names of every registered family."""
    return [name for _, _, examples in _FAMILIES for name in examples]


def create_model(name, *, image_size=224, num_classes=1000, weights=None, **overrides):
    """Build a model from its paper name.

    Args:
        name: e.g. ``"ViT-B/16"``, ``"ViT-Ti/4"``.
        image_size: input side (or (height, width)).
        num_classes: head size, or None for a feature extractor.
        weights: None for random initialisation, or an official ``.npz`` path, URL or published
            name (``"imagenet21k/ViT-B_16"``), loaded with ``load_checkpoint``; the file must hold
            the named architecture.
        **overrides: any constructor argument (``dropout_rate``, ``classifier``, ...).

    Example:
    >>> model = create_model("ViT-Ti/4", image_size=28, num_classes=10, num_channels=1)
    >>> model.count_params()
    5353738
    """
    for pattern, builder, _ in _FAMILIES:
        match = pattern.fullmatch(name)
        if match is None:
            continue
        if weights is None:
            return builder(match, image_size=image_size, num_classes=num_classes, **overrides)
        return _with_weights(name, builder, match, weights, image_size, num_classes, overrides)
    valid = "\n  ".join(model_names())
    raise ValueError(f"Unknown model name {name!r}. Valid names:\n  {valid}")


def _with_weights(name, builder, match, weights, image_size, num_classes, overrides):
    from keras_vit.checkpoints.official import load_checkpoint

    model = load_checkpoint(weights, image_size=image_size, num_classes=num_classes, **overrides)
    reference = builder(match, image_size=image_size, num_classes=num_classes, **overrides)
    if _family_name(model) != _family_name(reference):
        raise ValueError(
            f"The weights {weights!r} hold a {_family_name(model)} checkpoint, but {name!r} is a "
            f"{_family_name(reference)}. Use create_model with a {_family_name(model)} name, or "
            "load_checkpoint(weights) to build whatever the file holds."
        )
    config, expected = model.get_config(), reference.get_config()
    keys = [k for k in expected if k not in ("name", "dtype", "num_classes", "representation_size",
                                             "dropout_rate", "attention_dropout_rate")]
    different = {k: (config.get(k), expected[k]) for k in keys if config.get(k) != expected[k]}
    if type(model) is not type(reference) or different:
        raise ValueError(
            f"The weights {weights!r} do not hold a {name} model; differing settings "
            f"(file, name): {different or type(model).__name__}. Use create_model with the "
            "matching name, or load_checkpoint to build whatever the file holds."
        )
    return model


def _family_name(model):
    if isinstance(model, ResNetV2):
        return "BiT ResNetV2"
    if getattr(model, "resnet", None) is not None:
        return "hybrid ResNet+ViT"
    return "ViT"
