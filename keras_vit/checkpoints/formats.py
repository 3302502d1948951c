"""``load_checkpoint`` / ``save_checkpoint`` for every format keras_vit reads and writes.

- ``"official"``: the vit_jax / big_transfer ``.npz`` (``checkpoints/official.py``);
- ``"timm"``: a timm state dict, ``.safetensors`` or ``.pth``/``.bin`` (``checkpoints/timm.py``);
- ``"transformers"``: a Hugging Face ViT folder, ``config.json`` + weights
  (``checkpoints/transformers.py``).

The format is taken from the path (a folder with ``config.json``, ``.npz``, a state dict
extension, or a published official name) unless ``format=`` names it.
"""

import os

from keras_vit.checkpoints import official, timm, transformers

FORMATS = ("official", "timm", "transformers")


def detect_format(path):
    """The format of ``path`` from its form: a folder, a state dict extension, else official."""
    path = os.fspath(path)
    if os.path.isdir(path):
        if transformers.is_folder(path):
            return "transformers"
        raise ValueError(
            f"{path!r} is a folder without config.json; a transformers ViT folder holds "
            "config.json and model.safetensors (or pytorch_model.bin)."
        )
    if path.endswith(timm.EXTENSIONS):
        return "timm"
    # .npz, a URL, a published name; the official reader explains any other file.
    return "official"


def _check_format(format):
    if format not in FORMATS:
        raise ValueError(f"Unknown checkpoint format {format!r}; use one of {FORMATS}.")


def load_checkpoint(path, *, format=None, image_size=None, num_classes=None,
                    drop_pre_logits=False, **overrides):
    """Build the model a checkpoint describes and load every tensor into it, strictly.

    The architecture is read from the file (and from ``config.json`` for transformers). A ViT
    comes back as a ``ViTImageClassifier``, or as its ``ViTBackbone`` when the file has no head
    or ``num_classes=0``; a BiT file as a ``ResNetImageClassifier`` (or its ``ResNetBackbone``).

    Args:
        path: an official ``.npz`` (or URL, or published name such as
            ``"imagenet21k/ViT-B_16"``, or AugReg short name such as ``"augreg/ViT-B/16"``,
            ``"augreg/ViT-B/16:cifar100@384"``: ``keras_vit.checkpoints.augreg``), a timm
            ``.safetensors``/``.pth``/``.bin`` state dict, or a transformers ViT folder.
        format: ``"official"``, ``"timm"`` or ``"transformers"``; inferred when None.
        image_size: build at this resolution; the position embeddings are resized as the
            official fine-tuning code does (2-D bilinear, aligned corners, class row kept).
        num_classes: a head of this size; a size other than the file's gives a fresh
            zero-initialised head (official fine-tuning); ``0`` builds none (a ViT's
            ``ViTBackbone``, without the head's pre-logits layer).
        drop_pre_logits: drop the pre-logits layer (official ``pre_logits``, transformers'
            pooler), as fine-tuning with ``representation_size=None`` does.
        **overrides: other settings, e.g. ``dropout_rate=0.1`` (a ViT takes the
            ``ViTConfig.from_keywords`` names, a ResNet its constructor's); for timm also
            ``num_heads`` when the width is not one of timm's named ViTs; for official and timm
            files ``posemb_grid``, the (rows, cols) grid of a non-square position embedding.

    Example (the paper's ViT, Sec. 3.1, through an official file):
    >>> import os, tempfile
    >>> from keras_vit import create_model
    >>> path = os.path.join(tempfile.mkdtemp(), "vit.npz")
    >>> save_checkpoint(create_model("ViT-Ti/4", image_size=8, num_layers=2, num_classes=3), path)
    >>> model = load_checkpoint(path)
    >>> model.config.patches.patch_size, model.config.encoder.num_layers
    (4, 2)
    >>> features = load_checkpoint(path, num_classes=0)  # the ViTBackbone
    >>> sorted(features.output)
    ['pooled', 'tokens']
    """
    format = format or detect_format(path)
    _check_format(format)
    options = dict(image_size=image_size, num_classes=num_classes, **overrides)
    if format == "timm":
        return timm.load(path, **options)  # timm's ViT has no pre-logits layer to drop
    load = official.load if format == "official" else transformers.load
    return load(path, drop_pre_logits=drop_pre_logits, **options)


def save_checkpoint(model, path, format="official"):
    """Write ``model`` as an official ``.npz``, a timm state dict or a transformers folder.

    ``model`` is a ``ViTImageClassifier``, a ``ViTBackbone`` (written without head tensors), a
    ``ResNetImageClassifier`` or a ``ResNetBackbone``. Nothing is written when the format cannot
    express the model (a ``ValueError`` says why and which format can); files are written to a
    temporary name and moved in place.

    Example (the paper's ViT, Sec. 3.1, round trip through timm's layout):
    >>> import os, tempfile
    >>> from keras_vit import create_model
    >>> model = create_model("ViT-Ti/4", image_size=8, num_layers=2, num_classes=3)
    >>> path = os.path.join(tempfile.mkdtemp(), "vit.safetensors")
    >>> save_checkpoint(model, path, format="timm")
    >>> heads = model.config.encoder.num_heads
    >>> load_checkpoint(path, num_heads=heads).count_params() == model.count_params()
    True
    """
    _check_format(format)
    if format == "official":
        official.save(model, path)
    elif format == "timm":
        timm.save(model, path)
    else:
        transformers.save(model, path)
