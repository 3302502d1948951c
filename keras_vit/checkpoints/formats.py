"""``load_checkpoint`` / ``save_checkpoint`` for every format keras_vit reads and writes.

Each format is one module that ends with its ``FORMAT`` (``capabilities.Format``: its name, what
it can hold, which paths are its own, its reader and writer), listed once in ``FORMATS``:

- ``"official"``: the vit_jax / big_transfer ``.npz`` (``checkpoints/official.py``);
- ``"timm"``: a timm state dict, ``.safetensors`` or ``.pth``/``.bin`` (``checkpoints/timm.py``);
- ``"transformers"``: a Hugging Face ViT folder, ``config.json`` + weights
  (``checkpoints/transformers.py``);
- ``"keras_hub"``: a keras-hub preset folder, ``save_to_preset``'s (``checkpoints/keras_hub.py``).

The format is taken from the path (the first format in ``FORMATS`` that claims it) unless
``format=`` names it. A new format is a module with its ``FORMAT`` and one line here.
"""

import os

from keras_vit.checkpoints import keras_hub, official, timm, transformers

# The first that claims a path reads it: official last, as it takes any file name (a URL, a
# published name) and explains a wrong one.
FORMATS = (transformers.FORMAT, keras_hub.FORMAT, timm.FORMAT, official.FORMAT)
NAMES = tuple(f.name for f in FORMATS)


def format_named(name):
    """The ``Format`` called ``name``, or a ``ValueError`` listing them."""
    for found in FORMATS:
        if found.name == name:
            return found
    raise ValueError(f"Unknown checkpoint format {name!r}; use one of {NAMES}.")


def detect_format(path):
    """The name of the format of ``path``, from its form (``Format.claims``)."""
    for found in FORMATS:
        if found.claims(path):
            return found.name
    kinds = "; ".join(f"{f.name}: {f.what}" for f in FORMATS if not f.suffixes)
    raise ValueError(f"{os.fspath(path)!r} is a folder that no checkpoint format reads ({kinds}); "
                     "a keras_vit preset folder (save_to_preset) is read by the model class's "
                     "from_preset.")


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
            ``.safetensors``/``.pth``/``.bin`` state dict, a transformers ViT folder or a
            keras-hub preset folder.
        format: one of ``NAMES`` (``"official"``, ``"timm"``, ``"transformers"``,
            ``"keras_hub"``); inferred from the path when None.
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
    found = format_named(format or detect_format(path))
    return found.load(path, image_size=image_size, num_classes=num_classes,
                      drop_pre_logits=drop_pre_logits, **overrides)


def save_checkpoint(model, path, format="official"):
    """Write ``model`` in a checkpoint format (``NAMES``): an official ``.npz``, a timm state
    dict, a transformers folder or a keras-hub preset folder.

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
    format_named(format).save(model, path)
