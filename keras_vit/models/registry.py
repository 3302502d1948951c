"""Paper model names -> configurations, and ``create_model``.

Names follow the paper (Table 1 and Sec. 4.1): ``"ViT-B/16"`` is the Base model with 16x16
patches. Any size works with any patch size (``"ViT-Ti/4"`` for 28x28 images). Published file
names with an underscore (``"ViT-B_16"``) are accepted too. Other families register themselves
with ``register_family``.
"""

import re

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
