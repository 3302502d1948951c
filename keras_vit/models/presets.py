"""Presets, keras-hub's way of sharing a model: ``from_preset(name_or_folder)`` and
``save_to_preset(folder)`` on every backbone and classifier.

A preset folder has keras-hub's layout (``keras_hub/src/utils/preset_utils.py``), so a fine-tuned
model is shared as a folder and loads back exactly:

- ``config.json``: the backbone, as ``keras.saving.serialize_keras_object`` writes it (its
  ``registered_name`` names the class, ``keras_vit>ViTBackbone``);
- ``model.weights.h5``: the backbone's weights;
- ``metadata.json``: the Keras and keras_vit versions, the parameter count, the date;
- for a classifier also ``task.json`` (the whole classifier, its preprocessor included) and
  ``task.weights.h5`` (the weights outside the backbone: the head).

``from_preset`` takes such a folder; ``hf://`` and ``kaggle://`` handles, whose files keras-hub's
loader downloads (keras-hub installed); and names: a named preset (``cls.presets``: the paper
name ``"ViT-B/16"`` is its ImageNet-21k checkpoint), a published checkpoint
(``"imagenet21k+imagenet2012/ViT-B_16"``, ``"augreg/ViT-S/16:cifar100"``), a paper name with
``load_weights=False`` (the randomly initialised model of the registry), a checkpoint file, a
transformers folder. Names and foreign files are read by the checkpoint readers, a layer above
the models (docs/architecture.md): this module calls them through a hook that layer fills
(``keras_vit._hooks.NAMED_PRESETS``, served by ``keras_vit.pretrained``) and imports nothing
from above.

Saving writes into a fresh folder beside the target and renames it into place, so a failed save
leaves no half-written preset. Example (a backbone round trip):
>>> import os, tempfile
>>> import numpy as np
>>> from keras_vit.models.vit import ViTBackbone
>>> backbone = ViTBackbone(image_size=8, patch_size=4, hidden_size=16, num_layers=1,
...                        num_heads=2, mlp_dim=32)
>>> folder = os.path.join(tempfile.mkdtemp(), "tiny")
>>> backbone.save_to_preset(folder)
>>> sorted(os.listdir(folder))
['config.json', 'metadata.json', 'model.weights.h5']
>>> again = ViTBackbone.from_preset(folder)
>>> images = np.zeros((1, 8, 8, 3), "float32")
>>> bool(np.array_equal(again.predict(images, verbose=0)["pooled"],
...                     backbone.predict(images, verbose=0)["pooled"]))
True
"""

import datetime
import json
import os
import shutil
import tempfile

import keras

# keras-hub's own way to save and load the weights outside the backbone (task.weights.h5):
# Keras' weights-only file with the backbone's objects skipped.
from keras.src.saving import saving_lib

from keras_vit import _hooks, _optional
from keras_vit._version import __version__
from keras_vit.checks import read_json

CONFIG_FILE = "config.json"
MODEL_WEIGHTS_FILE = "model.weights.h5"
METADATA_FILE = "metadata.json"
TASK_CONFIG_FILE = "task.json"
TASK_WEIGHTS_FILE = "task.weights.h5"
HUB_SCHEMES = ("hf://", "kaggle://")


class _ClassProperty:
    """A read-only attribute of the class (keras-hub's ``classproperty``)."""

    def __init__(self, getter):
        self.getter = getter
        self.__doc__ = getter.__doc__

    def __get__(self, instance, owner):
        return self.getter(owner)


class PresetMixin:
    """``from_preset`` and ``save_to_preset`` for a keras_vit backbone or classifier.

    A classifier class sets ``backbone_cls`` (keras-hub's name) to its backbone's class; a
    backbone leaves it None.
    """

    backbone_cls = None

    @_ClassProperty
    def presets(cls):
        """``{name: preset}`` of the named presets this class builds (keras-hub's
        ``presets``): each with its checkpoint, resolution, classes, parameter count,
        description and source (``keras_vit.pretrained.Preset``)."""
        return _hooks.get(_hooks.NAMED_PRESETS).presets_for(cls)

    @classmethod
    def from_preset(cls, preset, *, load_weights=True, **kwargs):
        """The model a preset holds: a preset folder, an ``hf://``/``kaggle://`` handle, a
        published checkpoint name, a paper name, or a transformers/timm folder.

        Args:
            preset: where the preset is (see the module docstring); an unknown name is
                refused with the nearest names.
            load_weights: False builds the architecture, randomly initialised.
            **kwargs: for a classifier, head settings (``num_classes=K``: the preset's backbone
                with a new zero-initialised head), ``preprocessor`` (None: none); for a name
                also ``image_size`` and other settings ``keras_vit.create_model`` takes.
        """
        folder = _local(preset)
        if folder is None:
            named = _hooks.get(_hooks.NAMED_PRESETS)
            return named.load(preset, cls, load_weights=load_weights, **kwargs)
        return _load_folder(cls, folder, preset, load_weights, kwargs)

    def save_to_preset(self, preset_dir):
        """Write this model into the folder ``preset_dir`` (keras-hub's layout), replacing a
        preset there; on any failure the folder is left as it was."""
        preset_dir = os.path.abspath(os.fspath(preset_dir))
        if os.path.exists(preset_dir) and not os.path.isdir(preset_dir):
            raise FileExistsError(f"{preset_dir} is a file; a preset is a folder.")
        if os.path.isdir(preset_dir) and os.listdir(preset_dir) and \
                not os.path.exists(os.path.join(preset_dir, CONFIG_FILE)):
            raise FileExistsError(
                f"{preset_dir} holds files but no preset ({CONFIG_FILE}); save to a new or "
                "empty folder, so nothing of yours is replaced.")
        parent = os.path.dirname(preset_dir)
        os.makedirs(parent, exist_ok=True)
        staging = tempfile.mkdtemp(prefix=".preset-", dir=parent)
        try:
            self._write_preset(staging)
            _replace(staging, preset_dir)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _write_preset(self, folder):
        backbone = self if self.backbone_cls is None else self.backbone
        _write_json(folder, CONFIG_FILE, _serialized(backbone))
        backbone.save_weights(os.path.join(folder, MODEL_WEIGHTS_FILE))
        _write_json(folder, METADATA_FILE, _metadata(backbone))
        if backbone is not self:
            _write_json(folder, TASK_CONFIG_FILE, _serialized(self))
            saving_lib.save_weights_only(
                self, os.path.join(folder, TASK_WEIGHTS_FILE), objects_to_skip=[backbone])


def _serialized(model):
    """keras-hub's config file: the serialized object without compile or build config."""
    config = keras.saving.serialize_keras_object(model)
    for key in ("compile_config", "build_config"):
        config.pop(key, None)
    return config


def _metadata(model):
    return {"keras_version": keras.version(), "keras_vit_version": __version__,
            "parameter_count": int(model.count_params()),
            "date_saved": datetime.datetime.now().strftime("%Y-%m-%d@%H:%M:%S")}


def _write_json(folder, name, value):
    with open(os.path.join(folder, name), "w", encoding="utf-8") as file:
        json.dump(value, file, indent=4)


def _replace(staging, target):
    """Move the finished ``staging`` folder to ``target``, the old preset out of the way first
    so that a failure between the two renames can be undone."""
    old = None
    if os.path.exists(target):
        old = tempfile.mkdtemp(prefix=".preset-old-", dir=os.path.dirname(target))
        os.rmdir(old)
        os.rename(target, old)
    try:
        os.rename(staging, target)
    except OSError:
        if old is not None:
            os.rename(old, target)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _local(preset):
    """The files of a preset folder or hub handle; None for a name (or a missing folder, which
    the reader of names refuses)."""
    preset = os.fspath(preset)
    if preset.startswith(HUB_SCHEMES):
        return _HubFolder(preset)
    return _Folder(preset) if os.path.isdir(preset) else None


class _Folder:
    """The files of a local preset folder."""

    def __init__(self, path):
        self.path, self.name = path, path

    def file(self, name):
        path = os.path.join(self.path, name)
        return path if os.path.exists(path) else None

    def json(self, name):
        path = self.file(name)
        if path is None:
            return None
        return read_json(path, "save the model to the folder again (model.save_to_preset)")


class _HubFolder(_Folder):
    """The files of an ``hf://`` or ``kaggle://`` preset, downloaded by keras-hub's loader."""

    def __init__(self, handle):
        self.path, self.name = None, handle

    def file(self, name):
        preset_utils = _optional.need("keras_hub.src.utils.preset_utils",
                                      f"to download the preset {self.name}")
        try:
            return preset_utils.get_file(self.name, name)
        except FileNotFoundError:
            return None


def _load_folder(cls, folder, preset, load_weights, kwargs):
    """A model of ``cls`` from a preset folder (or a foreign folder, read as a checkpoint)."""
    config = folder.json(CONFIG_FILE)
    if config is None:
        raise FileNotFoundError(
            f"{folder.name} has no {CONFIG_FILE}: it is not a preset. Save one with "
            "model.save_to_preset(folder).")
    if _foreign(folder, config):
        named = _hooks.get(_hooks.NAMED_PRESETS)
        return named.load(folder.path, cls, load_weights=load_weights, **kwargs)
    backbone_cls = cls.backbone_cls or cls
    _check_class(folder, CONFIG_FILE, config, backbone_cls)
    task = folder.json(TASK_CONFIG_FILE) if cls.backbone_cls is not None else None
    head_keywords = {k for k in kwargs if k not in ("preprocessor", "dtype")}
    if task is not None and not head_keywords:
        _check_class(folder, TASK_CONFIG_FILE, task, cls)
        return _load_task(cls, folder, config, task, load_weights, kwargs)
    backbone = _deserialized(config, kwargs.get("dtype"))
    if load_weights:
        _load_weights(folder, backbone, MODEL_WEIGHTS_FILE)
    if cls.backbone_cls is None:
        return backbone
    if "preprocessor" not in kwargs:
        kwargs["preprocessor"] = _default_preprocessor(backbone)
    kwargs.pop("dtype", None)
    return cls(backbone, **kwargs)


def _foreign(folder, config):
    """Whether a folder is read by the checkpoint readers: a transformers folder, or a local
    keras-hub preset (its metadata names keras-hub's version)."""
    if "registered_name" not in config:
        return True
    if folder.path is None or not config["registered_name"].startswith("keras_hub>"):
        return False
    return "keras_hub_version" in (folder.json(METADATA_FILE) or {})


def _load_task(cls, folder, config, task, load_weights, kwargs):
    """The classifier saved whole: ``task.json``, its backbone's and its own weights."""
    model = _deserialized(task, kwargs.get("dtype"))
    if _plain(_serialized(model.backbone)["config"]) != _plain(config["config"]):
        raise ValueError(
            f"{folder.name}: {TASK_CONFIG_FILE} and {CONFIG_FILE} describe different backbones; "
            "the folder mixes two presets. Save the model to a new folder "
            "(model.save_to_preset).")
    if "preprocessor" in kwargs:
        model.preprocessor = kwargs["preprocessor"]
    if load_weights:
        _load_weights(folder, model.backbone, MODEL_WEIGHTS_FILE)
        _load_weights(folder, model, TASK_WEIGHTS_FILE, skip=model.backbone)
    return model


def _plain(value):
    """A config as JSON reads it back (tuples as lists)."""
    return json.loads(json.dumps(value))


def _deserialized(config, dtype=None):
    config = json.loads(json.dumps(config))
    if dtype is not None:
        config["config"]["dtype"] = dtype
    return keras.saving.deserialize_keras_object(config)


def _check_class(folder, name, config, expected):
    """Refuse a preset of another model type, naming the class that reads it."""
    registered = config.get("registered_name", "")
    found = keras.saving.get_registered_object(registered)
    if isinstance(found, type) and issubclass(found, expected):
        return
    kind = registered.split(">")[-1] or config.get("class_name", "?")
    if registered.startswith("keras_hub>"):
        fix = (f"it is a keras-hub preset: load it with keras_hub.models.{kind}.from_preset and "
               "convert it with keras_vit.from_keras_hub")
    else:
        fix = f"load it with {kind}.from_preset"
    raise ValueError(f"{folder.name} holds a {kind} ({name}), not a {expected.__name__}: {fix}.")


def _load_weights(folder, model, name, skip=None):
    """Load a preset's weights file strictly, or say which folder is broken and how to mend it."""
    path = folder.file(name)
    fix = ("save the model to the folder again (model.save_to_preset), or pass "
           "load_weights=False for the architecture alone")
    if path is None:
        raise FileNotFoundError(f"{folder.name} has no {name}: {fix}.")
    try:
        if skip is None:
            model.load_weights(path)
        else:
            saving_lib.load_weights_only(model, path, objects_to_skip=[skip])
    except (ValueError, KeyError, OSError) as error:
        raise ValueError(f"{name} in {folder.name} does not fit the model its config describes "
                         f"({str(error).splitlines()[0]}): {fix}.") from None


def _default_preprocessor(backbone):
    from keras_vit.models.preprocessor import ImagePreprocessor

    return ImagePreprocessor.for_model(backbone)
