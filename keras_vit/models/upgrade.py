"""Read ``.keras`` and ``.weights.h5`` files of keras_vit's two earlier layouts.

- The flat layout: a ViT was one ``VisionTransformer`` (or ``AxialVisionTransformer``) whose
  config was one flat dict (``num_layers``, ``hidden_size``, ..., ``resnet``, ``num_classes``,
  ``head_kernel_initializer``, ``head_bias_init``) and whose weights all sat at the top of the
  file (``layers/encoder/...``). Today a ViT is a ``ViTBackbone`` with a ``ViTImageClassifier``
  head on it, described by one ``ViTConfig``: the backbone's weights sit under
  ``layers/vi_t_backbone/`` and the head's (``pre_logits``, ``head``) stay at the top. The
  flat config maps onto the ``ViTConfig`` (``resnet`` is the ``stem``, the axial class is
  ``axial=True``, ``num_classes=None`` a ``ViTBackbone``). The ResNets were flat too: a
  ``ResNetV2`` (BiT) or ``AxialResNet`` of constructor arguments (``block_units``,
  ``width_factor``, ``num_heads``, ``num_classes``...), today a ``ResNetImageClassifier`` or
  ``AxialResNetImageClassifier`` on its backbone, described by one ``ResNetConfig``.
- The raw-weight layout (older still, flat too): the attention's projections were raw weights
  of the attention layer: ``query_kernel`` (D, H, hd), ``query_bias`` (H, hd), the same for
  ``key`` and ``value``, ``out_kernel`` (H, hd, D) and ``out_bias`` (D,) in
  ``MultiHeadSelfAttention`` (and so in ``AxialAttention``), and ``qkv_kernel`` (C, 2C) before
  ``relative_embedding`` in Axial-DeepLab's ``PositionSensitiveAxialAttention`` (AxialResNet
  files too). Today they are ``Dense`` sublayers (``query``, ``key``, ``value``, ``out``;
  ``qkv``), which ``model.quantize`` and LoRA reach.

Loading a file of either layout the usual way raises an error that names this module;
converting it once keeps every number:

    keras_vit.models.upgrade.upgrade_keras_file("old.keras", "new.keras")  # once, then load
    model = keras_vit.models.upgrade.load_legacy_model("old.keras")   # without writing a file
    keras_vit.models.upgrade.load_legacy_weights(model, "old.weights.h5")  # a weights file

Only the model's weights are read: an optimizer state saved with the old file is left out
(compile the model again to train on).
"""

import os
import tempfile
import zipfile

import keras
import numpy as np

from keras_vit.checks import read_json
from keras_vit.models.description import MODEL_KEYWORDS, ResNetConfig, ViTConfig

# The flat layout's classes -> (the description they map onto, today's classifier and backbone,
# their module).
FLAT_CLASSES = {
    "VisionTransformer": (ViTConfig, "ViTImageClassifier", "ViTBackbone", "vit"),
    "AxialVisionTransformer": (ViTConfig, "ViTImageClassifier", "ViTBackbone", "vit"),
    "ResNetV2": (ResNetConfig, "ResNetImageClassifier", "ResNetBackbone", "resnet_v2"),
    "AxialResNet": (ResNetConfig, "AxialResNetImageClassifier", "AxialResNetBackbone", "axial"),
}
_ATTENTION = {"query": 0, "key": 2, "value": 4, "out": 6}  # first of (kernel, bias) in the old


def _datasets(h5):
    """``{path: numpy array}`` of every dataset of an open h5py file or group."""
    import h5py  # a dependency of Keras

    found = {}
    h5.visititems(lambda name, obj: found.__setitem__(name, obj[()])
                  if isinstance(obj, h5py.Dataset) else None)
    return found


def _split(path):
    """``".../owner/vars/3"`` -> (``".../owner"``, 3)."""
    owner, _, index = path.rpartition("/vars/")
    return owner, int(index)


def _legacy_source(path, old, new):
    """The path in the old file of the value that ``path`` of the new layout holds, or None."""
    owner, index = _split(path)
    parent, _, name = owner.rpartition("/")
    if name in _ATTENTION and f"{parent}/vars/7" in old and f"{parent}/vars/8" not in old:
        return f"{parent}/vars/{_ATTENTION[name] + index}"
    if name == "qkv" and f"{parent}/vars/1" in old and f"{parent}/vars/2" not in old:
        return f"{parent}/vars/0"  # qkv_kernel, then the relative_embedding table
    if f"{owner}/qkv/vars/0" in new and f"{owner}/vars/1" in old:
        return f"{owner}/vars/{index + 1}"
    return None


def legacy_weights(old, new):
    """The arrays of the new layout (``{path: shape}``) taken from the old file's ``old``.

    Every value of the new layout must come from the old file, and every model weight of the
    old file must be used; a ``ValueError`` says what does not match otherwise.
    """
    values, used = {}, set()
    for path, shape in new.items():
        source = path if path in old and np.shape(old[path]) == tuple(shape) else \
            _legacy_source(path, old, new)
        if source is None or source not in old or np.size(old[source]) != np.prod(shape):
            raise ValueError(
                f"The file has no weight for {path} {tuple(shape)}: it was not saved by this "
                "model's architecture in one of keras_vit's earlier layouts (module "
                "keras_vit.models.upgrade). Load it with keras.saving.load_model if it was saved "
                "today.")
        values[path] = np.reshape(old[source], shape)
        used.add(source)
    unused = sorted(p for p in old if p not in used and not p.startswith("optimizer/"))
    if unused:
        raise ValueError(f"The file holds weights this model has no place for: {unused[:5]}.")
    return values


def nested_paths(old, new):
    """The old file's ``{path: array}`` with the paths of the new layout's nesting.

    A classifier of the flat layout held its backbone's layers at the top of the file
    (``layers/encoder/...``); today they sit under the backbone (``layers/vi_t_backbone/layers/
    encoder/...``) while the head's stay at the top (``layers/dense...``). Paths of ``new`` (the
    new layout, ``{path: shape}``) tell where the backbone is; a file that has it already, or a
    model without one (a ``ViTBackbone``, a ResNet), keeps its paths.
    """
    backbones = {p.split("/")[1] for p in new if p.count("/") > 2 and p.split("/")[2] == "layers"}
    if len(backbones) != 1:
        return old
    (backbone,) = backbones
    if any(p.startswith(f"layers/{backbone}/") for p in old):
        return old
    tops = {p.split("/")[1] for p in new}
    return {(f"layers/{backbone}/{p}" if p.startswith("layers/") and p.split("/")[1] not in tops
             else p): value for p, value in old.items()}


def load_legacy_weights(model, path):
    """Load a ``.weights.h5`` file of an earlier layout (``model.save_weights`` of earlier
    versions) into ``model``, built by today's code with the same settings (for a flat
    ``VisionTransformer``: the ``ViTImageClassifier`` of ``flat_config``)."""
    import h5py

    with h5py.File(path, "r") as f:
        old = _datasets(f)
    _assign(model, old)
    return model


def check_earlier_layout(model, path):
    """Raise a ``ValueError`` naming ``load_legacy_weights`` when the ``.weights.h5`` file
    ``path`` holds ``model``'s weights in an earlier layout; return quietly otherwise (Keras'
    own error then stands)."""
    import h5py

    try:
        with h5py.File(path, "r") as f:
            old = _datasets(f)
        new = _layout(model)
        if {p for p in old if not p.startswith("optimizer/")} == set(new):
            return  # today's layout
        legacy_weights(nested_paths(old, new), new)
    except (OSError, ValueError):
        return
    raise ValueError(
        f"The file {path} holds this model's weights in an earlier layout of keras_vit (module "
        "keras_vit.models.upgrade); load them with keras_vit.models.upgrade.load_legacy_weights("
        "model, 'old.weights.h5'), then save_weights again.")


def _layout(model):
    """``{path: shape}`` of the weights ``model.save_weights`` writes."""
    import h5py

    with tempfile.TemporaryDirectory() as folder:
        template = os.path.join(folder, "template.weights.h5")
        model.save_weights(template)
        with h5py.File(template, "r") as f:
            return {p: v.shape for p, v in _datasets(f).items()}


def _assign(model, old):
    import h5py

    with tempfile.TemporaryDirectory() as folder:
        template = os.path.join(folder, "template.weights.h5")
        model.save_weights(template)
        with h5py.File(template, "r+") as f:
            new = {p: v.shape for p, v in _datasets(f).items()}
            for p, value in legacy_weights(nested_paths(old, new), new).items():
                f[p][...] = value
        model.load_weights(template)


def flat_config(class_name, config):
    """The description of a flat-layout class's config (its ``get_config``; ``name``,
    ``trainable`` and ``dtype`` are the model's own): a ``ViTConfig`` of a ``VisionTransformer``
    or ``AxialVisionTransformer``, a ``ResNetConfig`` of a ``ResNetV2`` or ``AxialResNet``."""
    if class_name not in FLAT_CLASSES:
        raise ValueError(f"{class_name!r} is not a class of the flat layout "
                         f"({', '.join(FLAT_CLASSES)}).")
    flat = {k: v for k, v in config.items() if k not in MODEL_KEYWORDS}
    if class_name.endswith("VisionTransformer"):
        flat["stem"] = flat.pop("resnet", None)
        flat["axial"] = class_name == "AxialVisionTransformer"
    elif class_name == "AxialResNet":
        flat["axial"] = {"num_heads": flat.pop("num_heads", 8)}
    return FLAT_CLASSES[class_name][0].from_keywords(**flat)


def today_config(config):
    """A file's ``config.json`` in today's layout: a flat class's becomes the description of
    today's classifier (its backbone without classes); any other is kept. Keras then builds it
    by its registered name, as it does a file of today."""
    config = {k: v for k, v in config.items() if k != "compile_config"}
    if config["class_name"] not in FLAT_CLASSES:
        return config
    settings = config["config"]
    description = flat_config(config["class_name"], settings)
    _, classifier, backbone, module = FLAT_CLASSES[config["class_name"]]
    class_name = backbone if description.head is None else classifier
    own = {k: settings[k] for k in MODEL_KEYWORDS if k in settings}
    return {"module": f"keras_vit.models.{module}", "class_name": class_name,
            "registered_name": f"keras_vit>{class_name}",
            "config": {**own, "config": description.to_dict()}}


def _read_keras_file(path):
    """``(config.json, {path: array} of model.weights.h5)`` of a ``.keras`` file, or a
    ``ValueError`` naming the file when it is none."""
    import h5py

    try:
        with zipfile.ZipFile(path) as archive:
            config = read_json(f"{os.fspath(path)} (its config.json)",
                               "save the model again (model.save), or restore the file from a "
                               "copy", text=archive.read("config.json"))
            with tempfile.TemporaryDirectory() as folder:
                weights = archive.extract("model.weights.h5", folder)
                with h5py.File(weights, "r") as f:
                    return config, _datasets(f)
    except (zipfile.BadZipFile, KeyError) as error:
        raise ValueError(
            f"{path} is not a .keras file (the zip archive model.save writes, holding "
            "config.json and model.weights.h5), which is what keras_vit.models.upgrade "
            "converts. For a .weights.h5 file build the model and call "
            "keras_vit.models.upgrade.load_legacy_weights(model, path).") from error


def load_legacy_model(path):
    """The model of a ``.keras`` file of an earlier layout, in today's layout (not compiled)."""
    config, old = _read_keras_file(path)
    model = keras.saving.deserialize_keras_object(today_config(config))
    _assign(model, old)
    return model


def upgrade_keras_file(source, target):
    """Write the ``.keras`` file ``source`` of an earlier layout again in today's layout as
    ``target``; returns the model. Its outputs are the old file's (only the layout changes).
    """
    if os.path.abspath(source) == os.path.abspath(target):
        raise ValueError("Write the converted file under a new name: the source is read while "
                         "the target is written.")
    model = load_legacy_model(source)
    model.save(target)
    return model


class _FlatLayout:
    """Stands, under its registered name, for a class of the flat layout: loading a file that
    names it raises an error naming the conversion, instead of Keras' "Could not locate
    class"; building one names today's class."""

    def __init__(self, *args, **kwargs):
        _, classifier, backbone, _ = FLAT_CLASSES[type(self).__name__]
        raise TypeError(f"{type(self).__name__} is an earlier layout's class; today's is "
                        f"keras_vit.{classifier} (keras_vit.{backbone} without classes), with "
                        "the same keyword arguments.")

    @classmethod
    def from_config(cls, config):
        _, classifier, backbone, _ = FLAT_CLASSES[cls.__name__]
        raise ValueError(
            f"The file holds a keras_vit {cls.__name__} of an earlier layout (one flat config, "
            f"before {backbone} and {classifier} split it). Convert it once with "
            "keras_vit.models.upgrade.upgrade_keras_file('old.keras', 'new.keras') and load the "
            "new file (keras_vit.models.upgrade.load_legacy_model('old.keras') converts without "
            "writing one).")

    def get_config(self):  # Keras registers classes that have one; none is ever made
        raise TypeError(f"{type(self).__name__} is an earlier layout's class, never built.")


@keras.saving.register_keras_serializable(package="keras_vit")
class VisionTransformer(_FlatLayout):
    """The flat layout's ViT (plain or hybrid): refused with the name of the conversion."""


@keras.saving.register_keras_serializable(package="keras_vit")
class AxialVisionTransformer(_FlatLayout):
    """The flat layout's Axial-ViT: refused with the name of the conversion."""


@keras.saving.register_keras_serializable(package="keras_vit")
class ResNetV2(_FlatLayout):
    """The flat layout's BiT ResNet: refused with the name of the conversion."""


@keras.saving.register_keras_serializable(package="keras_vit")
class AxialResNet(_FlatLayout):
    """The flat layout's AxialResNet: refused with the name of the conversion."""
