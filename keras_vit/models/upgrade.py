"""Read ``.keras`` and ``.weights.h5`` files whose attention projections are raw weights.

Earlier keras_vit versions kept the attention's projections as raw weights of the attention
layer: ``query_kernel`` (D, H, hd), ``query_bias`` (H, hd), the same for ``key`` and ``value``,
``out_kernel`` (H, hd, D) and ``out_bias`` (D,) in ``MultiHeadSelfAttention`` (and so in
``AxialAttention``), and ``qkv_kernel`` (C, 2C) before ``relative_embedding`` in Axial-DeepLab's
``PositionSensitiveAxialAttention``. Today they are ``Dense`` sublayers (``query``, ``key``,
``value``, ``out``; ``qkv``), which ``model.quantize`` and LoRA reach. Loading an old file the
usual way raises an error that names this module; converting it once keeps every number:

    keras_vit.models.upgrade.upgrade_keras_file("old.keras", "new.keras")  # once, then load
    model = keras_vit.models.upgrade.load_legacy_model("old.keras")   # without writing a file
    keras_vit.models.upgrade.load_legacy_weights(model, "old.weights.h5")  # a weights file

Only the model's weights are read: an optimizer state saved with the old file is left out
(compile the model again to train on).
"""

import json
import os
import tempfile
import zipfile

import numpy as np

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
                "model's architecture in keras_vit's earlier layout (raw query_kernel ... "
                "weights). Load it with keras.saving.load_model if it was saved today.")
        values[path] = np.reshape(old[source], shape)
        used.add(source)
    unused = sorted(p for p in old if p not in used and not p.startswith("optimizer/"))
    if unused:
        raise ValueError(f"The file holds weights this model has no place for: {unused[:5]}.")
    return values


def load_legacy_weights(model, path):
    """Load an old-layout ``.weights.h5`` file (``model.save_weights`` of earlier versions) into
    ``model``, built by today's code with the same arguments."""
    import h5py

    with h5py.File(path, "r") as f:
        old = _datasets(f)
    _assign(model, old)
    return model


def _assign(model, old):
    import h5py

    with tempfile.TemporaryDirectory() as folder:
        template = os.path.join(folder, "template.weights.h5")
        model.save_weights(template)
        with h5py.File(template, "r+") as f:
            new = {p: v.shape for p, v in _datasets(f).items()}
            for p, value in legacy_weights(old, new).items():
                f[p][...] = value
        model.load_weights(template)


def load_legacy_model(path):
    """The model of an old-layout ``.keras`` file, in today's layout (not compiled)."""
    import h5py
    import keras

    from keras_vit.models import axial, resnet_v2, vit  # noqa: F401  (the classes files name)

    with zipfile.ZipFile(path) as archive:
        config = json.loads(archive.read("config.json"))
        with tempfile.TemporaryDirectory() as folder:
            weights = archive.extract("model.weights.h5", folder)
            with h5py.File(weights, "r") as f:
                old = _datasets(f)
    config.pop("compile_config", None)
    model = keras.saving.deserialize_keras_object(config)
    _assign(model, old)
    return model


def upgrade_keras_file(source, target):
    """Write the old-layout ``.keras`` file ``source`` again in today's layout as ``target``;
    returns the model. Its outputs are the old file's (only the layout of the weights changes).
    """
    if os.path.abspath(source) == os.path.abspath(target):
        raise ValueError("Write the converted file under a new name: the source is read while "
                         "the target is written.")
    model = load_legacy_model(source)
    model.save(target)
    return model
