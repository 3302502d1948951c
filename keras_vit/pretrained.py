"""``create_model`` with weights: a registered name (models) filled from an official file
(checkpoints). It lives above both, so that models import nothing from checkpoints."""

from keras_vit.checkpoints.formats import load_checkpoint
from keras_vit.models import registry
from keras_vit.models.base import MODEL_KEYWORDS

# Settings a fine-tuning or a file may change without changing the architecture.
_FREE = (*MODEL_KEYWORDS, "num_classes", "representation_size", "dropout_rate",
         "attention_dropout_rate")


def create_model(name, *, image_size=224, num_classes=1000, weights=None, **overrides):
    """Build a model from its paper name, randomly initialised or with weights.

    Args:
        name: e.g. ``"ViT-B/16"``, ``"ViT-Ti/4"``, ``"R50+ViT-B/16"``, ``"BiT-R50x1"``
            (``keras_vit.models.registry``).
        image_size: input side (or (height, width)); ``None`` with ``position_embedding_grid``
            for a ViT of any size at call time.
        num_classes: head size, or None for a feature extractor.
        weights: None for random initialisation, or any checkpoint ``load_checkpoint`` reads
            (an official ``.npz`` path, URL or published name such as
            ``"imagenet21k/ViT-B_16"``, a timm file, a transformers folder); the file must hold
            the named architecture (checked against the name's configuration).
        **overrides: any constructor argument (``dropout_rate``, ``classifier``, ...).

    Example:
    >>> model = create_model("ViT-Ti/4", image_size=28, num_classes=10, num_channels=1)
    >>> model.count_params()
    5353738
    """
    if weights is None:
        return registry.build_model(name, image_size=image_size, num_classes=num_classes,
                                    **overrides)
    family, model_class, expected = registry.parse(name)
    if family in registry.UNPUBLISHED:
        raise ValueError(
            f"No weights exist for {name!r}: {family} models (paper Appendix D.6) were never "
            "published in the official, timm or transformers formats. Build it with "
            "weights=None and train or fine-tune it, or load a .keras file with "
            "keras.saving.load_model."
        )
    # load_checkpoint's num_classes=None keeps the file's head; 0 leaves it out (a ViTBackbone)
    model = load_checkpoint(weights, image_size=image_size,
                            num_classes=0 if num_classes is None else num_classes, **overrides)
    found = registry.family_of(model)
    if found != family:
        raise ValueError(
            f"The weights {weights!r} hold a {found} checkpoint, but {name!r} is a {family}. "
            f"Use create_model with a {found} name, or load_checkpoint(weights) to build whatever "
            "the file holds."
        )
    different = _differences(model.config, expected, overrides)
    if different:
        raise ValueError(
            f"The weights {weights!r} do not hold a {name} model; differing settings "
            f"(file, name): {different}. Use create_model with the matching name, or "
            "load_checkpoint to build whatever the file holds."
        )
    return model


# What a file's model may differ in from its name's: the head, the size, the dropout rates.
_FREE_FIELDS = ("head", "image_size", "position_embedding_grid", "dropout_rate",
                "attention_dropout_rate")


def _differences(found, expected, overrides):
    """``{setting: (file, name)}`` where the loaded model's description differs from the
    name's (with ``overrides``), the settings of ``_FREE_FIELDS`` aside."""
    expected = expected.replace(**{k: v for k, v in overrides.items() if k not in _FREE})
    file, named = found.flat(_FREE_FIELDS), expected.flat(_FREE_FIELDS)
    return {key: (file.get(key), named.get(key)) for key in {**file, **named}
            if file.get(key) != named.get(key)}
