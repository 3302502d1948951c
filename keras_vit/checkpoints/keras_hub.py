"""Interop with keras-hub's ViT (``keras_hub.models.ViTBackbone`` / ``ViTImageClassifier``).

Both implement the same encoder (pre-LN blocks, LayerNorm epsilon 1e-6, class token concatenated
first and then the position embedding added to every token, Keras ``MultiHeadAttention`` whose
kernels have the official (D, H, hd) / (H, hd, D) layout), so the conversion is a weight copy.
Differences, and how they are handled:

- GELU: keras-hub uses the exact (erf) GELU; the official checkpoints and keras_vit's default use
  the tanh approximation. ``from_keras_hub`` builds ``approximate_gelu=False``; ``to_keras_hub``
  refuses a tanh-GELU model unless ``strict=False`` (its logits then move by about 1e-4).
- Pooling: keras-hub's ``pooling="gap"`` averages *every* token, the class token included, while
  keras_vit's ``classifier="gap"`` has no class token. The two agree only for a keras-hub model
  built with ``use_class_token=False``; the other combinations are refused.
- Parts: keras-hub's ``ViTBackbone`` is keras_vit's ``ViTBackbone`` and its
  ``ViTImageClassifier`` is keras_vit's ``ViTImageClassifier`` (each classifier's ``backbone``
  the other's). keras-hub's backbone returns the normalised token sequence, which is keras_vit's
  ``backbone(x)["tokens"]``; ``"pooled"`` adds the class token (or, with
  ``use_class_token=False``, the token mean).
- Input: keras_vit models take NHWC float images already in [-1, 1] (the official
  ``(x - 127.5) / 127.5``). keras-hub models take whatever their preprocessor produces; the
  preprocessor runs in ``predict``/``fit`` only, never in ``model(x)``, and is not converted.
  ``to_keras_hub`` returns a classifier without a preprocessor; attach
  ``keras_hub.models.ViTImageClassifierPreprocessor(keras_hub.layers.ViTImageConverter(
  image_size=..., scale=1 / 127.5, offset=-1))`` to feed it uint8 images.
- Bias-free keras-hub variants (``use_mha_bias``/``use_mlp_bias``/``use_patch_bias=False``)
  become zero biases. The classifier's ``dropout`` before the head (training only) and a head
  ``activation`` have no keras_vit counterpart: a warning says so, and the converted model
  returns the logits.
"""

import json
import math
import os
import sys
import warnings

import keras
import numpy as np

from keras_vit import _optional
from keras_vit.checkpoints import official
from keras_vit.checkpoints.base import assign, export, write_atomically
from keras_vit.checkpoints.capabilities import (
    Capabilities,
    Format,
    check_expressible,
    fixed_image_size,
)
from keras_vit.checks import read_json
from keras_vit.layers.encoder import LAYER_NORM_EPSILON, EncoderConfig
from keras_vit.models.description import Patches, ViTConfig
from keras_vit.models.vit import ViTBackbone, ViTImageClassifier

HOLDS = Capabilities("keras-hub", ("patches",), exact_gelu_only=True,
                     layer_norm_epsilon=LAYER_NORM_EPSILON)
# A preset folder (``save_to_preset``): these two files, and ``task.json`` for a classifier.
PRESET_FILES = ("config.json", "metadata.json")

# keras_vit encoder setting <-> keras-hub ViTBackbone argument, the same value both ways.
_CONFIG = (
    ("hidden_size", "hidden_dim"),
    ("num_layers", "num_layers"),
    ("num_heads", "num_heads"),
    ("mlp_dim", "mlp_dim"),
    ("dropout_rate", "dropout_rate"),
    ("attention_dropout_rate", "attention_dropout"),
)


def _block_variables(prefix, hub):
    """Official key -> keras-hub variable for one encoder block."""
    found = {
        f"{prefix}/LayerNorm_0/scale": hub.layer_norm_1.gamma,
        f"{prefix}/LayerNorm_0/bias": hub.layer_norm_1.beta,
        f"{prefix}/LayerNorm_2/scale": hub.layer_norm_2.gamma,
        f"{prefix}/LayerNorm_2/bias": hub.layer_norm_2.beta,
    }
    for name, dense in (("Dense_0", hub.mlp.dense_1), ("Dense_1", hub.mlp.dense_2)):
        found[f"{prefix}/MlpBlock_3/{name}/kernel"] = dense.kernel
        found[f"{prefix}/MlpBlock_3/{name}/bias"] = dense.bias
    for name, dense in (("query", hub.mha.query_dense), ("key", hub.mha.key_dense),
                        ("value", hub.mha.value_dense), ("out", hub.mha.output_dense)):
        found[f"{prefix}/MultiHeadDotProductAttention_1/{name}/kernel"] = dense.kernel
        found[f"{prefix}/MultiHeadDotProductAttention_1/{name}/bias"] = dense.bias
    return found


def hub_variables(backbone, classifier=None):
    """Official checkpoint key -> the keras-hub variable that holds that tensor.

    keras-hub's ViT is the official model, so its variables are the official tensors (up to a
    reshape); the keras_vit side is the shared official table (``official.vit_table``). A
    bias-free keras-hub variant maps its biases to None.
    """
    embed = backbone.get_layer("vit_patching_and_embedding")
    encoder = backbone.get_layer("vit_encoder")
    found = {"embedding/kernel": embed.patch_embedding.kernel,
             "embedding/bias": embed.patch_embedding.bias,
             official.POSEMB: embed.position_embedding.embeddings}
    if backbone.use_class_token:
        found["cls"] = embed.class_token
    for i, hub in enumerate(encoder.encoder_layers):
        found.update(_block_variables(f"Transformer/encoderblock_{i}", hub))
    found["Transformer/encoder_norm/scale"] = encoder.layer_norm.gamma
    found["Transformer/encoder_norm/bias"] = encoder.layer_norm.beta
    if classifier is not None:
        layers = (("head", classifier.output_dense),)
        if classifier.intermediate_dim is not None:
            layers = (("pre_logits", classifier.intermediate_layer), *layers)
        for key, dense in layers:
            found.update({f"{key}/kernel": dense.kernel, f"{key}/bias": dense.bias})
    return found


def from_keras_hub(model):
    """The keras_vit ViT with the weights and outputs of a keras-hub ViT.

    Args:
        model: a ``keras_hub.models.ViTImageClassifier`` (gives a ``ViTImageClassifier`` with the
            same logits, on the backbone converted from its own) or ``keras_hub.models.
            ViTBackbone`` (gives a ``ViTBackbone`` whose ``"tokens"`` are its outputs). See the
            module docstring for what differs.

    Returns:
        A ``ViTImageClassifier`` or ``ViTBackbone`` with ``approximate_gelu=False`` (keras-hub's
        exact GELU).

    Example:
    >>> import keras_hub
    >>> backbone = keras_hub.models.ViTBackbone(image_shape=(8, 8, 3), patch_size=4,
    ...     num_layers=1, num_heads=2, hidden_dim=8, mlp_dim=16)
    >>> vit = from_keras_hub(keras_hub.models.ViTImageClassifier(backbone, num_classes=3))
    >>> type(vit).__name__, vit.config.head.num_classes, vit.config.encoder.approximate_gelu
    ('ViTImageClassifier', 3, False)
    """
    backbone, classifier = _split_hub_model(model)
    _check_hub_backbone(backbone)
    if classifier is not None:
        _check_hub_classifier(classifier, backbone)
    dtype = backbone.dtype_policy.name
    vit = ViTBackbone(_vit_config(backbone), dtype=dtype)
    if classifier is not None:
        vit = ViTImageClassifier(vit, num_classes=classifier.num_classes,
                                 representation_size=classifier.intermediate_dim, dtype=dtype)
    table = official.vit_table(vit)
    tensors = {}
    for key, variable in hub_variables(backbone, classifier).items():
        shape = table[key].file_shape if key in table else variable.shape
        tensors[key] = (np.zeros(shape, "float32") if variable is None  # a bias-free variant
                        else np.reshape(keras.ops.convert_to_numpy(variable), shape))
    assign(table, tensors, what="keras-hub model")
    return vit


def _split_hub_model(model):
    """(backbone, classifier or None) of a keras-hub ViTImageClassifier or ViTBackbone.

    keras-hub is not imported: a keras-hub model exists only where keras-hub is imported.
    """
    keras_hub = sys.modules.get("keras_hub")
    classifier = None
    if keras_hub is not None and isinstance(model, keras_hub.models.ViTImageClassifier):
        classifier, backbone = model, model.backbone
    else:
        backbone = model
    if keras_hub is None or not isinstance(backbone, keras_hub.models.ViTBackbone):
        raise TypeError(
            f"from_keras_hub expects a keras_hub.models.ViTBackbone or ViTImageClassifier (with a "
            f"ViTBackbone), got {type(backbone).__name__}."
        )
    return backbone, classifier


def _check_hub_backbone(backbone):
    if backbone.data_format != "channels_last":
        raise ValueError(
            "The keras-hub model is channels_first; keras_vit models take channels_last (NHWC) "
            "images. Rebuild the keras-hub model with data_format='channels_last' (the weights "
            "are the same) and convert that."
        )
    patch_h, patch_w = backbone.patch_size
    if patch_h != patch_w:
        raise ValueError(
            f"keras_vit uses square patches; the keras-hub model has {patch_h}x{patch_w} patches."
        )
    if not math.isclose(backbone.layer_norm_epsilon, LAYER_NORM_EPSILON, rel_tol=1e-6):
        raise ValueError(
            f"The keras-hub model uses LayerNorm epsilon {backbone.layer_norm_epsilon}; keras_vit "
            f"uses the official {LAYER_NORM_EPSILON} and could not reproduce its outputs."
        )


def _check_hub_classifier(classifier, backbone):
    """Refuses a pooling keras_vit lacks; warns of what the conversion drops."""
    if classifier.pooling != _classifier_type(backbone):
        raise ValueError(
            f"keras-hub pooling={classifier.pooling!r} with use_class_token="
            f"{backbone.use_class_token} has no keras_vit equivalent: keras_vit pools the "
            "class token ('token', with a class token) or the mean of the patch tokens "
            "('gap', without one)."
        )
    # stacklevel=3: the warnings name the caller of from_keras_hub.
    if classifier.activation not in (None, "linear"):
        warnings.warn(
            f"The keras-hub classifier applies activation={classifier.activation!r} to its "
            "outputs; the converted keras_vit model returns the logits before it.",
            stacklevel=3,
        )
    if classifier.dropout:
        warnings.warn(
            f"The keras-hub classifier's dropout ({classifier.dropout}) before the head has "
            "no keras_vit counterpart; inference is identical, training differs.",
            stacklevel=3,
        )


def _classifier_type(backbone):
    return "token" if backbone.use_class_token else "gap"


def _vit_config(backbone):
    """The ``ViTConfig`` (no head) equivalent to a keras-hub backbone."""
    height, width, channels = backbone.image_shape
    encoder = EncoderConfig(**{ours: getattr(backbone, theirs) for ours, theirs in _CONFIG},
                            classifier=_classifier_type(backbone), approximate_gelu=False)
    return ViTConfig(Patches(backbone.patch_size[0], channels), encoder,
                     image_size=(height, width), head=None)


def to_keras_hub(model, *, strict=True):
    """The keras-hub ViT equivalent to a keras_vit ViT, part for part.

    Args:
        model: a plain (non-hybrid) ``ViTImageClassifier`` or ``ViTBackbone`` with the default
            learned 1-D position embedding added once after the patch embedding.
        strict: keras-hub only has the exact GELU. With ``strict=True`` (default) a model using
            the tanh approximation (``approximate_gelu=True``, e.g. every official checkpoint) is
            refused; with ``strict=False`` it is converted anyway and its logits move slightly
            (about 1e-4 on the official fixtures).

    Returns:
        For a ``ViTImageClassifier``, a ``keras_hub.models.ViTImageClassifier`` (no
        preprocessor, ``activation=None``: logits) on the keras-hub backbone of its
        ``backbone``; for a ``ViTBackbone``, a ``keras_hub.models.ViTBackbone`` (whose output is
        the token sequence, ``"tokens"``).

    Example:
    >>> vit = ViTImageClassifier(image_size=8, patch_size=4, hidden_size=8, num_layers=1,
    ...                          num_heads=2, mlp_dim=16, num_classes=3, approximate_gelu=False)
    >>> type(to_keras_hub(vit)).__name__, type(to_keras_hub(vit.backbone)).__name__
    ('ViTImageClassifier', 'ViTBackbone')
    """
    check_expressible(model, HOLDS, strict)
    keras_hub = _optional.need("keras_hub", "to_keras_hub")
    head = model.config.head
    backbone = keras_hub.models.ViTBackbone(**_hub_backbone_config(model))
    classifier = None
    if head is not None:
        classifier = keras_hub.models.ViTImageClassifier(
            backbone,
            num_classes=head.num_classes,
            pooling=model.config.encoder.classifier,
            intermediate_dim=head.representation_size,
            activation=None,
        )
    arrays = export(official.vit_table(model))
    for key, variable in hub_variables(backbone, classifier).items():
        variable.assign(np.reshape(arrays[key], variable.shape).astype(variable.dtype))
    return backbone if classifier is None else classifier


def _hub_backbone_config(model):
    """keras-hub ``ViTBackbone`` arguments equivalent to a keras_vit model's encoder."""
    config = model.config
    height, width = fixed_image_size(config, "keras-hub")
    return dict(
        image_shape=(height, width, config.patches.num_channels),
        patch_size=config.patches.patch_size,
        **{theirs: getattr(config.encoder, ours) for ours, theirs in _CONFIG},
        layer_norm_epsilon=LAYER_NORM_EPSILON,
        use_class_token=config.encoder.classifier == "token",
        dtype=model.dtype_policy.name,
    )


def is_preset(path):
    """Whether ``path`` is a keras-hub preset folder (``save_to_preset``'s files, its metadata
    naming keras-hub's version: keras_vit's own presets name keras_vit's)."""
    path = os.fspath(path)
    if not all(os.path.isfile(os.path.join(path, name)) for name in PRESET_FILES):
        return False
    try:
        with open(os.path.join(path, "metadata.json"), encoding="utf-8") as file:
            return "keras_hub_version" in json.load(file)
    except (OSError, ValueError):
        return False


def load(path, *, image_size=None, num_classes=None, drop_pre_logits=False, **overrides):
    """The keras_vit ViT of a keras-hub preset folder (a ``ViTImageClassifier``'s or a
    ``ViTBackbone``'s ``save_to_preset``), with ``load_checkpoint``'s options: through the
    official layout, which ``from_keras_hub`` shares, with keras-hub's exact GELU."""
    task = os.path.isfile(os.path.join(os.fspath(path), "task.json"))
    for name in (*PRESET_FILES, *(("task.json",) if task else ())):  # keras-hub names none
        read_json(os.path.join(os.fspath(path), name),
                  "save the model to the folder again (save_to_preset)")
    keras_hub = _optional.need("keras_hub", "Reading a keras-hub preset folder")
    hub = (keras_hub.models.ImageClassifier if task else keras_hub.models.Backbone).from_preset(
        os.fspath(path))
    model = from_keras_hub(hub)
    overrides.setdefault("approximate_gelu", False)
    return official.from_tensors(
        export(official.vit_table(model)), image_size=image_size, num_classes=num_classes,
        drop_pre_logits=drop_pre_logits, **overrides)


def save(model, path):
    """Write ``model`` as a keras-hub preset folder (``to_keras_hub`` then ``save_to_preset``),
    which ``keras_hub.models.ImageClassifier.from_preset`` (or ``Backbone``'s) reads."""
    hub = to_keras_hub(model)  # refuses what keras-hub cannot hold, before anything is written
    write_atomically(path, hub.save_to_preset)


FORMAT = Format("keras_hub", HOLDS, (), is_preset, load, save,
                "a keras-hub preset folder (config.json and metadata.json)")
