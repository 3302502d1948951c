"""Official ``.npz`` checkpoints (vit_jax / big_transfer layouts) <-> Keras models.

The file layout and numerics are specified in ``docs/official-checkpoints.md``. A checkpoint is a
flat ``np.savez`` archive whose keys are module paths (``Transformer/encoderblock_0/...``). Each
family has one table from those keys to the model's variables; loading is strict: any missing,
unexpected or mis-shaped tensor is reported in one error.
"""

import functools
import os
import re
import zipfile

import numpy as np

from keras_vit.checkpoints import augreg, resnet
from keras_vit.checkpoints.base import (
    Entry,
    assign,
    export,
    prepare_config,
    resize_posemb_tensor,
    write_atomically,
)
from keras_vit.checkpoints.capabilities import Capabilities, Format, check_expressible
from keras_vit.layers.encoder import EncoderConfig
from keras_vit.layers.position import table_grid
from keras_vit.models.description import Head, Patches, Stem, ViTConfig, model_keywords
from keras_vit.models.registry import BIT, HYBRID, VIT, build

VIT_URL = "https://storage.googleapis.com/vit_models/{name}.npz"
BIT_URL = "https://storage.googleapis.com/bit_models/{name}.npz"
_VIT_PUBLISHED = re.compile(r"(imagenet21k|imagenet21k\+imagenet2012|augreg|sam|gsam)/[\w\-.+=,]+")
_BIT_PUBLISHED = re.compile(r"BiT-[MS]-R\d+x\d+(-ILSVRC2012)?")
HOLDS = Capabilities("official .npz", ("patches", "hybrid", "bit"))
POSEMB = "Transformer/posembed_input/pos_embedding"
HEAD_KEYS = ("head/kernel", "head/bias", "resnet/head/conv2d/kernel", "resnet/head/conv2d/bias")
PRE_LOGITS_KEYS = ("pre_logits/kernel", "pre_logits/bias")

# Linen block names (vit_jax after checkpoint.load) -> the published pre-Linen names.
_LINEN_BLOCK_NAMES = {
    "LayerNorm_0": "LayerNorm_0",
    "MultiHeadDotProductAttention_0": "MultiHeadDotProductAttention_1",
    "LayerNorm_1": "LayerNorm_2",
    "MlpBlock_0": "MlpBlock_3",
}


# ----------------------------------------------------------------------------- files


def is_published(name):
    """Whether ``resolve`` downloads ``name``: a URL, a ``gs://`` path, a published name or an
    AugReg short name (nothing is downloaded to tell).

    Example:
    >>> is_published("imagenet21k/ViT-B_16"), is_published("BiT-S-R50x1"), is_published("B_16")
    (True, True, False)
    """
    name = os.fspath(name)
    if name.startswith(("http://", "https://", "gs://")):
        return True
    name = name[:-4] if name.endswith(".npz") else name
    return augreg.is_short_name(name) or bool(
        _VIT_PUBLISHED.fullmatch(name) or _BIT_PUBLISHED.fullmatch(name))


def resolve(path):
    """A local file path for ``path``: a file, a URL, or a published name (downloaded).

    AugReg short names (``"augreg/ViT-B/16"``, ``"augreg/ViT-B/16:cifar100@384"``) are looked
    up in the AugReg index first (``keras_vit.checkpoints.augreg``).
    """
    path = os.fspath(path)
    if os.path.exists(path):
        return path
    url = None
    if path.startswith(("http://", "https://")):
        url = path
    elif path.startswith("gs://"):
        url = "https://storage.googleapis.com/" + path[len("gs://"):]
    else:
        name = path[:-4] if path.endswith(".npz") else path
        if augreg.is_short_name(name):
            name = augreg.checkpoint_name(name)
        if _VIT_PUBLISHED.fullmatch(name):
            url = VIT_URL.format(name=name)
        elif _BIT_PUBLISHED.fullmatch(name):
            url = BIT_URL.format(name=name)
    if url is None:
        raise FileNotFoundError(
            f"No checkpoint file at {path!r}. Pass the path of an official .npz file, a URL, or a "
            "published name such as 'imagenet21k/ViT-B_16', 'augreg/ViT-B/16' or 'BiT-M-R50x1'."
        )
    from keras_vit.downloads import check_zip, download

    subdir = os.path.join("keras_vit", *url.split("/")[-2:-1])
    return download(url, cache_subdir=subdir, check=check_zip)


def read_checkpoint(path):
    """Read an official ``.npz`` into a dict of numpy arrays with normalised key names.

    Accepts the published layout, an ``opt/target/`` (or ``params/``) prefix, and Linen-numbered
    encoder-block names.
    """
    path = resolve(path)
    try:
        archive = np.load(path, allow_pickle=False)
        if not isinstance(archive, np.lib.npyio.NpzFile):
            raise ValueError("it holds a single .npy array, not an archive of named tensors")
        with archive:
            tensors = {key: archive[key] for key in archive.files}
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, KeyError, TypeError) as error:
        raise ValueError(
            f"{path!r} is not a readable official .npz checkpoint ({error}). The file may be "
            "truncated or corrupt (download it again) or of another format (export the weights "
            "with np.savez in the official key layout, or use keras_vit.save_checkpoint)."
        ) from None
    if not tensors:
        raise ValueError(f"{path!r} holds no tensors; it is not an official checkpoint.")
    for prefix in ("opt/target/", "params/"):
        if all(key.startswith(prefix) for key in tensors):
            tensors = {key[len(prefix):]: value for key, value in tensors.items()}
    return {_normalise_key(key): value for key, value in tensors.items()}


def _normalise_key(key):
    if key.startswith("resnet/"):
        # Some BiT files number their convs (standardized_conv2d_3), as big_vision notes.
        return re.sub(r"/standardized_conv2d_\d+/", "/standardized_conv2d/", key)
    parts = key.split("/")
    if len(parts) > 2 and parts[0] == "Transformer" and parts[1].startswith("encoderblock_"):
        parts[2] = _LINEN_BLOCK_NAMES.get(parts[2], parts[2])
    return "/".join(parts)


# ----------------------------------------------------------------------------- ViT tables


def _dense(prefix, layer, kernel_shape=None):
    return {
        f"{prefix}/kernel": Entry(layer.kernel, kernel_shape),
        f"{prefix}/bias": Entry(layer.bias),
    }


def _layer_norm(prefix, layer):
    return {f"{prefix}/scale": Entry(layer.gamma), f"{prefix}/bias": Entry(layer.beta)}


def _attention_projection(key, name, attention):
    """A flat ``Dense`` projection of ``attention`` as its official (D, H, hd) / (H, hd, D)
    kernel and (H, hd) / (D,) bias."""
    layer, heads = getattr(attention, name), (attention.num_heads, attention.head_dim)
    width = layer.kernel.shape[0]
    if name == "out":
        return {f"{key}/kernel": Entry(layer.kernel, (*heads, width)),
                f"{key}/bias": Entry(layer.bias)}
    return {f"{key}/kernel": Entry(layer.kernel, (width, *heads)),
            f"{key}/bias": Entry(layer.bias, heads)}


def vit_table(model):
    """Official key -> Entry for a ``ViTImageClassifier`` or a ``ViTBackbone`` (no head keys);
    a hybrid's ResNet stem is ``hybrid_table``'s.

    Only the default position embedding ('learned_1d' at the 'stem') has an official layout; other
    variants raise a ``ValueError`` naming the ``.keras`` format as the way to save them.
    """
    check_expressible(model, HOLDS)
    config, table = model.config, {}
    table.update(_dense("embedding", model.get_layer("embedding").conv))
    if config.encoder.classifier == "token":
        table["cls"] = Entry(model.get_layer("cls").cls)
    table[POSEMB] = Entry(model.get_layer("posembed_input").pos_embedding)
    for i in range(config.encoder.num_layers):
        block = model.get_layer(f"encoderblock_{i}")
        prefix = f"Transformer/encoderblock_{i}"
        table.update(_layer_norm(f"{prefix}/LayerNorm_0", block.LayerNorm_0))
        attention = block.MultiHeadDotProductAttention_1
        for name in ("query", "key", "value", "out"):
            key = f"{prefix}/MultiHeadDotProductAttention_1/{name}"
            table.update(_attention_projection(key, name, attention))
        table.update(_layer_norm(f"{prefix}/LayerNorm_2", block.LayerNorm_2))
        table.update(_dense(f"{prefix}/MlpBlock_3/Dense_0", block.MlpBlock_3.Dense_0))
        table.update(_dense(f"{prefix}/MlpBlock_3/Dense_1", block.MlpBlock_3.Dense_1))
    table.update(_layer_norm("Transformer/encoder_norm", model.get_layer("encoder_norm")))
    return {**table, **head_table(model)}


def hybrid_table(model):
    """Official key -> Entry for a hybrid: its ResNet stem's, then the ViT's."""
    return {**resnet.hybrid_stem_table(model.get_layer("resnet")), **vit_table(model)}


def head_table(model):
    """Official key -> Entry for a classifier's head (``pre_logits``, ``head``); empty for a
    backbone."""
    head, table = model.config.head, {}
    if head is not None and head.representation_size is not None:
        table.update(_dense("pre_logits", model.get_layer("pre_logits")))
    if head is not None and head.num_classes is not None:
        table.update(_dense("head", model.get_layer("head")))
    return table


def _require(tensors, key, what):
    if key not in tensors:
        raise ValueError(
            f"The checkpoint has no {key!r} ({what}); it is not a complete official ViT checkpoint."
        )
    return tensors[key]


def infer_vit_config(tensors, posemb_grid=None):
    """The ``ViTConfig`` of an official file's tensors (its head None when the file has none).

    The file does not record its grid: a square position table is read as a square grid, any
    other needs ``posemb_grid=(rows, cols)``.
    """
    kernel = _require(tensors, "embedding/kernel", "patch embedding")
    patch_size, _, in_channels, hidden_size = kernel.shape
    num_layers = 0
    while f"Transformer/encoderblock_{num_layers}/LayerNorm_0/scale" in tensors:
        num_layers += 1
    if num_layers == 0:
        raise ValueError("The checkpoint has no Transformer/encoderblock_0; it is not a ViT file.")
    block = "Transformer/encoderblock_0"
    query = _require(tensors, f"{block}/MultiHeadDotProductAttention_1/query/kernel", "attention")
    mlp = _require(tensors, f"{block}/MlpBlock_3/Dense_0/kernel", "MLP")
    posemb = _require(tensors, POSEMB, "position embedding")
    classifier = "token" if "cls" in tensors else "gap"
    rows, cols = table_grid(posemb.shape[1] - (classifier == "token"), posemb_grid,
                            "posemb_grid")
    encoder = EncoderConfig(num_layers, int(query.shape[1]), int(mlp.shape[1]),
                            hidden_size=int(hidden_size), classifier=classifier)
    stem = None
    if "conv_root/kernel" in tensors:
        stem = Stem(**resnet.hybrid_stem_config(tensors)[0])
        in_channels = tensors["conv_root/kernel"].shape[2]
    head = None
    if "head/kernel" in tensors:
        head = Head(int(tensors["head/kernel"].shape[-1]),
                    representation_size=representation_size(tensors))
    stride = int(patch_size) * (1 if stem is None else stem.stride)
    return ViTConfig(Patches(int(patch_size), int(in_channels)), encoder,
                     image_size=(rows * stride, cols * stride), stem=stem, head=head)


def representation_size(tensors):
    """The width of the file's ``pre_logits`` layer, or None."""
    kernel = tensors.get("pre_logits/kernel")
    return None if kernel is None else int(kernel.shape[1])


# ----------------------------------------------------------------------------- families


def _infer(tensors):
    """The function that reads the description of the official file ``tensors``."""
    if any(key.startswith("resnet/") for key in tensors):
        return resnet.bit_config
    if "embedding/kernel" in tensors:
        return infer_vit_config
    sample = ", ".join(sorted(tensors)[:5])
    raise ValueError(
        "Not an official ViT, hybrid or BiT checkpoint: it has neither 'embedding/kernel' nor "
        f"'resnet/...' keys (first keys: {sample})."
    )


# Family (``keras_vit.models.family.Family``) with published weights -> its official key table.
TABLES = {VIT: vit_table, HYBRID: hybrid_table, BIT: resnet.bit_table}


def table_for(model):
    """The official key table of a keras_vit model."""
    check_expressible(model, HOLDS)
    return TABLES[model.config.family](model)


def load(path, *, image_size=None, num_classes=None, drop_pre_logits=False, posemb_grid=None,
         **overrides):
    """Build the model an official ``.npz`` describes and load every tensor into it (the
    official format of ``keras_vit.load_checkpoint``).

    The architecture (family, patch size, width, depth, heads, MLP size, classifier,
    representation size, classes, ResNet stem, image size) is read from the file. A ViT file
    gives a ``ViTImageClassifier`` (a ``ViTBackbone`` when it has no head, or with
    ``num_classes=0``); a BiT file a ``ResNetImageClassifier`` (``ResNetBackbone``).

    Args:
        path: a local ``.npz``, a URL, or a published name (``"imagenet21k/ViT-B_16"``,
            ``"BiT-M-R50x1"``; AugReg short names such as ``"augreg/ViT-B/16"``, see
            ``keras_vit.checkpoints.augreg``), downloaded with ``keras.utils.get_file``.
        image_size: build at this resolution; the position embeddings are resized as the
            official fine-tuning code does (2-D bilinear, aligned corners, class row kept).
        num_classes: a head of this size. If it differs from the file's, the head is replaced by a
            zero-initialised one (official fine-tuning). ``0`` builds no head: a ViT's
            backbone (its features; the head's ``pre_logits`` layer is left out too).
        drop_pre_logits: drop the ``pre_logits`` layer (as fine-tuning with
            ``representation_size=None`` does).
        posemb_grid: the (rows, cols) patch grid the file's position embedding was trained at.
            The format does not record it; a square table is read as a square grid, so this is
            needed only for a non-square one (a file saved from a non-square model).
        **overrides: other settings, e.g. ``dropout_rate=0.1`` (the description's
            ``from_keywords`` names).

    Example (a tiny ViT written in the official layout, then read back; the file says the
    architecture):
    >>> import os, tempfile
    >>> from keras_vit import create_model
    >>> path = os.path.join(tempfile.mkdtemp(), "vit.npz")
    >>> save(create_model("ViT-Ti/4", image_size=8, num_layers=2, num_classes=3), path)
    >>> model = load(path)
    >>> model.config.patches.patch_size, model.config.encoder.num_layers
    (4, 2)
    >>> type(load(path, num_classes=0)).__name__
    'ViTBackbone'
    """
    return from_tensors(read_checkpoint(path), image_size=image_size, num_classes=num_classes,
                        drop_pre_logits=drop_pre_logits, posemb_grid=posemb_grid, **overrides)


def from_tensors(tensors, *, image_size=None, num_classes=None, drop_pre_logits=False,
                 posemb_grid=None, **overrides):
    """``load`` of the tensors of an official file, read already (official key -> array)."""
    infer = _infer(tensors)
    if posemb_grid is not None:
        if infer is resnet.bit_config:
            raise ValueError("posemb_grid is the grid of a ViT's position embedding; this BiT "
                             "file has none: leave posemb_grid out.")
        infer = functools.partial(infer, posemb_grid=posemb_grid)
    options = model_keywords(overrides)
    config, skip = prepare_config(
        infer(tensors), tensors, HEAD_KEYS, PRE_LOGITS_KEYS, num_classes=num_classes,
        drop_pre_logits=drop_pre_logits, image_size=image_size, overrides=overrides,
        representation_size=representation_size(tensors),
    )
    model = build(config, **options)
    tensors = resize_posemb_tensor(tensors, POSEMB, config, posemb_grid)
    assign(table_for(model), tensors, skip)
    return model


def save(model, path):
    """Write a keras_vit model in the official ``.npz`` layout (``load`` reads it back; the
    official format of ``keras_vit.save_checkpoint``): a ``ViTImageClassifier``, a
    ``ViTBackbone`` (no head keys), a ``ResNetImageClassifier`` or a ``ResNetBackbone``.

    A ViT built with another position embedding than the default ('learned_1d' at the 'stem',
    paper Appendix D.4) has no official layout: this raises a ``ValueError`` before writing
    anything; save it with ``model.save("model.keras")``.

    Example:
    >>> import os, tempfile
    >>> from keras_vit import create_model
    >>> model = create_model("ViT-Ti/4", image_size=8, num_layers=2, num_classes=3)
    >>> save(model, os.path.join(tempfile.mkdtemp(), "vit.npz"))
    """
    arrays = export(table_for(model))
    write_atomically(path, lambda tmp: _savez(tmp, arrays))


def _savez(path, arrays):
    with open(path, "wb") as handle:  # a handle keeps np.savez from appending ".npz"
        np.savez(handle, **arrays)


def _claims(path):
    # Any file name: a .npz, a URL or a published name; the reader explains any other file.
    return not os.path.isdir(os.fspath(path))


FORMAT = Format("official", HOLDS, (".npz",), _claims, load, save,
                "an official .npz, its URL or a published name")
