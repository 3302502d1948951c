"""The models of published weights: ``create_model`` (a paper name, randomly initialised or
filled from a checkpoint) and the named presets (``PRESETS``), which ``from_preset`` loads.

It stands on the models, the checkpoint readers and the costs (a preset's parameter count), so
that the models import nothing from either: their ``from_preset`` and ``presets`` reach this
module through the hook it fills (``keras_vit._hooks.NAMED_PRESETS``).

A preset is a row of data, keras-hub's habit (``keras_hub/src/models/vit/vit_presets.py``): its
name, the paper model it is, the checkpoint ``load_checkpoint`` reads, the file's resolution and
classes, its parameter count (counted from its description, ``keras_vit.costs.parameters``), a
one-line description and the published files. A paper name (``"ViT-B/16"``, ``"BiT-R50x1"``)
is the preset of its ImageNet-21k pre-training, the checkpoint a fine-tuning starts from.

Example:
>>> preset = PRESETS["ViT-B/16"]
>>> preset.checkpoint, preset.image_size, preset.num_classes, preset.parameters
('imagenet21k/ViT-B_16', 224, 21843, 103186515)
>>> from keras_vit.models.resnet_v2 import ResNetBackbone
>>> sorted(ResNetBackbone.presets)[:2]
['BiT-R101x1', 'BiT-R101x3']
"""

import dataclasses
import difflib
import os
import types

from keras_vit import _hooks
from keras_vit.checkpoints import official
from keras_vit.checkpoints.formats import load_checkpoint
from keras_vit.costs.parameters import count_parameters
from keras_vit.models import registry
from keras_vit.models.base import MODEL_KEYWORDS

# Settings a fine-tuning or a file may change without changing the architecture.
_FREE = (*MODEL_KEYWORDS, "num_classes", "representation_size", "dropout_rate",
         "attention_dropout_rate")
IMAGENET21K_CLASSES = 21_843  # the published ImageNet-21k heads


@dataclasses.dataclass(frozen=True)
class Preset:
    """A named preset: a published checkpoint of a paper model.

    ``name`` is what ``from_preset`` takes, ``model`` the paper name of its architecture
    (``keras_vit.models.registry``), ``checkpoint`` the name ``keras_vit.load_checkpoint``
    reads; ``image_size`` and ``num_classes`` are the file's, ``pre_logits`` whether it keeps
    the pre-training head's pre-logits layer (width D, paper Appendix D.3); ``source`` names the
    published files.
    """

    name: str
    model: str
    checkpoint: str
    image_size: int
    num_classes: int
    pre_logits: bool
    description: str
    source: str

    @property
    def config(self):
        """The description of the checkpoint's model."""
        config = registry.model_config(self.model)
        head = {"num_classes": self.num_classes}
        if self.pre_logits:
            head["representation_size"] = config.encoder.hidden_size
        return config.replace(image_size=self.image_size, **head)

    @property
    def parameters(self):
        """The weights of the checkpoint's model, counted from its description."""
        return count_parameters(self.config, self.image_size, self.image_size)

    @property
    def classes(self):
        """``(classifier class, backbone class)`` that build it."""
        classifier = registry.parse(self.model)[1]
        return classifier, classifier.backbone_cls


_VIT_JAX = "vit_jax: gs://vit_models/imagenet21k/"
_BIT = "big_transfer: gs://bit_models/"
_AUGREG = "AugReg: gs://vit_models/augreg/, index.csv's best ImageNet-21k upstream file"
_I21K = IMAGENET21K_CLASSES
_FROM_I21K = "pre-trained on ImageNet-21k (paper Sec. 4.1)"
_BY_AUGREG = "pre-trained on ImageNet-21k with AugReg's recipe (Steiner et al. 2021)"
# The named presets: name, paper model, checkpoint, resolution, classes, pre-logits layer,
# description, source.
PRESETS = {preset.name: preset for preset in (
    Preset("ViT-B/16", "ViT-B/16", "imagenet21k/ViT-B_16", 224, _I21K, True,
           f"ViT-Base, 16x16 patches, {_FROM_I21K}", _VIT_JAX + "ViT-B_16.npz"),
    Preset("ViT-B/32", "ViT-B/32", "imagenet21k/ViT-B_32", 224, _I21K, True,
           f"ViT-Base, 32x32 patches, {_FROM_I21K}", _VIT_JAX + "ViT-B_32.npz"),
    Preset("ViT-L/16", "ViT-L/16", "imagenet21k/ViT-L_16", 224, _I21K, True,
           f"ViT-Large, 16x16 patches, {_FROM_I21K}", _VIT_JAX + "ViT-L_16.npz"),
    Preset("ViT-L/32", "ViT-L/32", "imagenet21k/ViT-L_32", 224, _I21K, True,
           f"ViT-Large, 32x32 patches, {_FROM_I21K}", _VIT_JAX + "ViT-L_32.npz"),
    Preset("ViT-H/14", "ViT-H/14", "imagenet21k/ViT-H_14", 224, _I21K, True,
           f"ViT-Huge, 14x14 patches, {_FROM_I21K}", _VIT_JAX + "ViT-H_14.npz"),
    Preset("R50+ViT-B/16", "R50+ViT-B/16", "imagenet21k/R50+ViT-B_16", 224, _I21K, True,
           f"hybrid: ViT-Base on ResNet-50 features (Sec. 3.1), {_FROM_I21K}",
           _VIT_JAX + "R50+ViT-B_16.npz"),
    Preset("augreg/ViT-Ti/16", "ViT-Ti/16", "augreg/ViT-Ti/16", 224, _I21K, False,
           f"ViT-Tiny, 16x16 patches, {_BY_AUGREG}", _AUGREG),
    Preset("augreg/ViT-S/16", "ViT-S/16", "augreg/ViT-S/16", 224, _I21K, False,
           f"ViT-Small, 16x16 patches, {_BY_AUGREG}", _AUGREG),
    Preset("augreg/ViT-B/16", "ViT-B/16", "augreg/ViT-B/16", 224, _I21K, False,
           f"ViT-Base, 16x16 patches, {_BY_AUGREG}", _AUGREG),
    Preset("BiT-R50x1", "BiT-R50x1", "BiT-M-R50x1", 224, _I21K, False,
           "BiT-M ResNet-50x1 (the paper's ResNet baseline), pre-trained on ImageNet-21k",
           _BIT + "BiT-M-R50x1.npz"),
    Preset("BiT-R50x3", "BiT-R50x3", "BiT-M-R50x3", 224, _I21K, False,
           "BiT-M ResNet-50x3, pre-trained on ImageNet-21k", _BIT + "BiT-M-R50x3.npz"),
    Preset("BiT-R101x1", "BiT-R101x1", "BiT-M-R101x1", 224, _I21K, False,
           "BiT-M ResNet-101x1, pre-trained on ImageNet-21k", _BIT + "BiT-M-R101x1.npz"),
    Preset("BiT-R101x3", "BiT-R101x3", "BiT-M-R101x3", 224, _I21K, False,
           "BiT-M ResNet-101x3, pre-trained on ImageNet-21k", _BIT + "BiT-M-R101x3.npz"),
    Preset("BiT-R152x2", "BiT-R152x2", "BiT-M-R152x2", 224, _I21K, False,
           "BiT-M ResNet-152x2, pre-trained on ImageNet-21k", _BIT + "BiT-M-R152x2.npz"),
    Preset("BiT-R152x4", "BiT-R152x4", "BiT-M-R152x4", 224, _I21K, False,
           "BiT-M ResNet-152x4, pre-trained on ImageNet-21k", _BIT + "BiT-M-R152x4.npz"),
)}


def presets_for(cls):
    """``{name: Preset}`` of the presets that the model class ``cls`` builds (a family's
    classifier or backbone)."""
    return {name: preset for name, preset in PRESETS.items() if issubclass(cls, preset.classes)}


def nearest(name, names, count=3):
    """The names of ``names`` closest to ``name``, case aside (difflib).

    Example:
    >>> nearest("vit-b/16", PRESETS)
    ['ViT-B/16', 'ViT-L/16', 'R50+ViT-B/16']
    """
    spelled = {str(known).lower(): known for known in names}
    return [spelled[close] for close in
            difflib.get_close_matches(str(name).lower(), spelled, n=count, cutoff=0.6)]


def describe(presets=None):
    """The presets (default: all) as a table to read, the ``keras-vit presets`` listing: a
    row each, its description and its source beneath."""
    presets = list((PRESETS if presets is None else presets).values())
    rows = [("name", "model", "checkpoint", "size", "classes", "parameters")] + [
        (p.name, p.classes[0].__name__, p.checkpoint, f"{p.image_size} px", f"{p.num_classes:,}",
         f"{p.parameters:,}") for p in presets]
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    lines = []
    for row, preset in zip(rows, [None, *presets]):
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
        if preset is not None:
            lines += [f"    {preset.description}", f"    {preset.source}"]
    return "\n".join(lines)


def load_preset(preset, cls, *, load_weights=True, preprocessor="default", **kwargs):
    """The model of class ``cls`` that a preset name, a published checkpoint, a checkpoint
    file or a foreign folder holds: the models' ``from_preset`` for anything but a preset
    folder (``keras_vit.models.presets``, which documents the arguments)."""
    backbone = cls.backbone_cls is None
    model = _named_model(os.fspath(preset), cls, load_weights, kwargs)
    if not isinstance(model, cls):
        raise ValueError(f"The preset {preset!r} holds a {type(model).__name__}, not a "
                         f"{cls.__name__}: load it with {type(model).__name__}.from_preset.")
    if not backbone:
        if preprocessor == "default":
            from keras_vit.models.preprocessor import ImagePreprocessor

            preprocessor = ImagePreprocessor.for_model(model)
        model.preprocessor = preprocessor
    return model


def _named_model(preset, cls, load_weights, kwargs):
    """A table preset's model; a paper name's at random; any checkpoint ``load_checkpoint``
    reads; else the names nearest to ``preset``."""
    backbone = cls.backbone_cls is None
    if preset in PRESETS:
        return _table_model(PRESETS[preset], cls, load_weights, kwargs)
    paper_name = _is_paper_name(preset)
    if not load_weights and paper_name:
        kwargs.setdefault("num_classes", None if backbone else 1000)
        return create_model(preset, **kwargs)
    if not load_weights:
        raise ValueError(f"load_weights=False builds a named preset's or a paper name's model "
                         f"(e.g. 'ViT-B/16'); {preset!r} is neither: a checkpoint's "
                         "architecture is its file's.")
    if os.path.exists(preset) or official.is_published(preset):
        if backbone:
            kwargs["num_classes"] = 0
        return load_checkpoint(preset, **kwargs)
    if paper_name:
        raise ValueError(
            f"No published pre-training of {preset!r} is a preset"
            f"{_nearest(preset, presets_for(cls))} Pass "
            "load_weights=False for the randomly initialised model, or a published "
            f"checkpoint name ('augreg/ViT-S/16:cifar100', ...); {cls.__name__}.presets lists "
            "the named ones.")
    raise ValueError(
        f"No preset, checkpoint or folder is called {preset!r}"
        f"{_nearest(preset, [*presets_for(cls), *registry.model_names()])} "
        f"{cls.__name__}.from_preset takes a name of {cls.__name__}.presets, a paper name "
        "with load_weights=False (keras_vit.model_names()), a published checkpoint name "
        "('imagenet21k+imagenet2012/ViT-B_16', 'augreg/ViT-S/16', 'BiT-S-R50x1'), a preset "
        "folder, an hf:// or kaggle:// handle, a checkpoint file or a transformers folder.")


def _nearest(preset, names):
    """``'. Nearest: ...'`` among ``names``, or ``'.'``."""
    found = nearest(preset, names)
    return f". Nearest: {', '.join(found)}." if found else "."


def _table_model(preset, cls, load_weights, kwargs):
    """The model of a row of ``PRESETS``: its checkpoint, or its paper model at random."""
    if not issubclass(cls, preset.classes):
        raise ValueError(
            f"The preset {preset.name!r} is a {preset.classes[0].__name__}, not a "
            f"{cls.__name__}: load it with {preset.classes[0].__name__}.from_preset (or "
            f"{preset.classes[1].__name__}.from_preset for its backbone).")
    backbone = cls.backbone_cls is None
    if not load_weights:
        kwargs.setdefault("num_classes", None if backbone else 1000)
        return create_model(preset.model, **kwargs)
    kwargs.setdefault("num_classes", None if backbone else preset.num_classes)
    kwargs.setdefault("image_size", preset.image_size)
    return create_model(preset.model, weights=preset.checkpoint, **kwargs)


def _is_paper_name(name):
    try:
        registry.parse(name)
    except ValueError:
        return False
    return True


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
    expected = registry.model_config(name)
    family = expected.family
    if not family.weights:
        raise ValueError(
            f"No weights exist for {name!r}: {family.name} models were never "
            "published in the official, timm or transformers formats. Build it with "
            "weights=None and train or fine-tune it, or load a .keras file with "
            "keras.saving.load_model."
        )
    # load_checkpoint's num_classes=None keeps the file's head; 0 leaves it out (a ViTBackbone)
    model = load_checkpoint(weights, image_size=image_size,
                            num_classes=0 if num_classes is None else num_classes, **overrides)
    found = model.config.family
    if found is not family:
        raise ValueError(
            f"The weights {weights!r} hold a {found.name} checkpoint, but {name!r} is a "
            f"{family.name}. Use create_model with a {found.name} name, or "
            "load_checkpoint(weights) to build whatever the file holds."
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


_hooks.fill(_hooks.NAMED_PRESETS, types.SimpleNamespace(load=load_preset,
                                                        presets_for=presets_for))
