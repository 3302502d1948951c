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
- Outputs: a ``ViTBackbone`` returns the whole normalised token sequence; the keras_vit model
  made from it (``num_classes=None``) returns the pooled features ``backbone(x)[:, 0]`` (or the
  token mean with ``use_class_token=False``). The sequence is
  ``model.get_layer("encoder_norm").output``.
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

import math
import warnings

import keras
import numpy as np

from keras_vit.layers.encoder import LAYER_NORM_EPSILON
from keras_vit.models.axial import refuse_checkpoint_format
from keras_vit.models.vit import VisionTransformer


def _keras_hub():
    try:
        import keras_hub
    except ImportError as error:
        raise ImportError(
            "keras-hub interop needs the keras-hub package: pip install 'keras-vit-paper[hub]' "
            "(or pip install keras-hub)."
        ) from error
    return keras_hub


# keras_vit constructor argument <-> keras-hub ViTBackbone argument, the same value both ways.
_CONFIG = (
    ("hidden_size", "hidden_dim"),
    ("num_layers", "num_layers"),
    ("num_heads", "num_heads"),
    ("mlp_dim", "mlp_dim"),
    ("dropout_rate", "dropout_rate"),
    ("attention_dropout_rate", "attention_dropout"),
)


def _block_pairs(block, hub):
    """(keras_vit variable, keras-hub variable) for one encoder block."""
    mlp, attention = block.MlpBlock_3, block.MultiHeadDotProductAttention_1
    pairs = [
        (block.LayerNorm_0.gamma, hub.layer_norm_1.gamma),
        (block.LayerNorm_0.beta, hub.layer_norm_1.beta),
        (block.LayerNorm_2.gamma, hub.layer_norm_2.gamma),
        (block.LayerNorm_2.beta, hub.layer_norm_2.beta),
        (mlp.Dense_0.kernel, hub.mlp.dense_1.kernel),
        (mlp.Dense_0.bias, hub.mlp.dense_1.bias),
        (mlp.Dense_1.kernel, hub.mlp.dense_2.kernel),
        (mlp.Dense_1.bias, hub.mlp.dense_2.bias),
    ]
    for ours, theirs in (("query", hub.mha.query_dense), ("key", hub.mha.key_dense),
                         ("value", hub.mha.value_dense), ("out", hub.mha.output_dense)):
        pairs.append((getattr(attention, f"{ours}_kernel"), theirs.kernel))
        pairs.append((getattr(attention, f"{ours}_bias"), theirs.bias))
    return pairs


def _head_pairs(vit, classifier):
    """(keras_vit variable, keras-hub variable) for pre_logits (if any) and the head."""
    pairs = []
    if vit.representation_size is not None:
        pre_logits = vit.get_layer("pre_logits")
        pairs += [(pre_logits.kernel, classifier.intermediate_layer.kernel),
                  (pre_logits.bias, classifier.intermediate_layer.bias)]
    head = vit.get_layer("head")
    return pairs + [(head.kernel, classifier.output_dense.kernel),
                    (head.bias, classifier.output_dense.bias)]


def _pairs(vit, backbone, classifier=None):
    """(keras_vit variable, keras-hub variable or None) for every keras_vit weight."""
    embed = backbone.get_layer("vit_patching_and_embedding")
    encoder = backbone.get_layer("vit_encoder")
    pairs = [
        (vit.get_layer("embedding").conv.kernel, embed.patch_embedding.kernel),
        (vit.get_layer("embedding").conv.bias, embed.patch_embedding.bias),
        (vit.get_layer("posembed_input").pos_embedding, embed.position_embedding.embeddings),
    ]
    if vit.classifier == "token":
        pairs.append((vit.get_layer("cls").cls, embed.class_token))
    for i, hub in enumerate(encoder.encoder_layers):
        pairs += _block_pairs(vit.get_layer(f"encoderblock_{i}"), hub)
    norm = vit.get_layer("encoder_norm")
    pairs += [(norm.gamma, encoder.layer_norm.gamma), (norm.beta, encoder.layer_norm.beta)]
    if classifier is not None:
        pairs += _head_pairs(vit, classifier)
    return pairs


def _copy(source, target):
    value = keras.ops.convert_to_numpy(source)
    target.assign(np.reshape(value, target.shape).astype(target.dtype))


def from_keras_hub(model):
    """A keras_vit ``VisionTransformer`` with the weights and outputs of a keras-hub ViT.

    Args:
        model: a ``keras_hub.models.ViTImageClassifier`` (gives a classifier with the same
            logits) or ``keras_hub.models.ViTBackbone`` (gives ``num_classes=None``: the pooled
            features). See the module docstring for what differs.

    Returns:
        A ``VisionTransformer`` with ``approximate_gelu=False`` (keras-hub's exact GELU).

    Example:
    >>> import keras_hub
    >>> backbone = keras_hub.models.ViTBackbone(image_shape=(8, 8, 3), patch_size=4,
    ...     num_layers=1, num_heads=2, hidden_dim=8, mlp_dim=16)
    >>> vit = from_keras_hub(keras_hub.models.ViTImageClassifier(backbone, num_classes=3))
    >>> vit.num_classes, vit.approximate_gelu
    (3, False)
    """
    backbone, classifier = _split_hub_model(model, _keras_hub())
    _check_hub_backbone(backbone)
    if classifier is not None:
        _check_hub_classifier(classifier, backbone)
    vit = VisionTransformer(**_vit_config(backbone, classifier))
    for ours, theirs in _pairs(vit, backbone, classifier):
        if theirs is None:  # a bias-free keras-hub variant
            ours.assign(np.zeros(ours.shape, ours.dtype))
        else:
            _copy(theirs, ours)
    return vit


def _split_hub_model(model, keras_hub):
    """(backbone, classifier or None) of a keras-hub ViTImageClassifier or ViTBackbone."""
    classifier = None
    if isinstance(model, keras_hub.models.ViTImageClassifier):
        classifier, backbone = model, model.backbone
    else:
        backbone = model
    if not isinstance(backbone, keras_hub.models.ViTBackbone):
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


def _vit_config(backbone, classifier):
    """``VisionTransformer`` arguments equivalent to a keras-hub backbone (and classifier)."""
    height, width, channels = backbone.image_shape
    return dict(
        image_size=(height, width),
        patch_size=backbone.patch_size[0],
        **{ours: getattr(backbone, theirs) for ours, theirs in _CONFIG},
        num_classes=None if classifier is None else classifier.num_classes,
        classifier=_classifier_type(backbone),
        representation_size=None if classifier is None else classifier.intermediate_dim,
        approximate_gelu=False,
        num_channels=channels,
        dtype=backbone.dtype_policy.name,
    )


def to_keras_hub(model, *, strict=True):
    """The keras-hub ViT equivalent to a keras_vit ``VisionTransformer``.

    Args:
        model: a plain (non-hybrid) ``VisionTransformer`` with the default learned 1-D position
            embedding added once after the patch embedding.
        strict: keras-hub only has the exact GELU. With ``strict=True`` (default) a model using
            the tanh approximation (``approximate_gelu=True``, e.g. every official checkpoint) is
            refused; with ``strict=False`` it is converted anyway and its logits move slightly
            (about 1e-4 on the official fixtures).

    Returns:
        A ``keras_hub.models.ViTImageClassifier`` (no preprocessor, ``activation=None``: logits)
        when the model has a head, else a ``keras_hub.models.ViTBackbone`` (whose output is the
        token sequence; see the module docstring).

    Example:
    >>> vit = VisionTransformer(image_size=8, patch_size=4, hidden_size=8, num_layers=1,
    ...                         num_heads=2, mlp_dim=16, num_classes=3, approximate_gelu=False)
    >>> type(to_keras_hub(vit)).__name__
    'ViTImageClassifier'
    """
    keras_hub = _keras_hub()
    _check_expressible(model, strict)
    backbone = keras_hub.models.ViTBackbone(**_hub_backbone_config(model))
    classifier = None
    if model.num_classes is not None:
        classifier = keras_hub.models.ViTImageClassifier(
            backbone,
            num_classes=model.num_classes,
            pooling=model.classifier,
            intermediate_dim=model.representation_size,
            activation=None,
        )
    for ours, theirs in _pairs(model, backbone, classifier):
        _copy(ours, theirs)
    return backbone if classifier is None else classifier


def _check_expressible(model, strict):
    """Refuses a keras_vit model that keras-hub's ViT cannot reproduce."""
    refuse_checkpoint_format(model, "keras-hub")
    if not isinstance(model, VisionTransformer):
        raise TypeError(
            f"to_keras_hub expects a keras_vit VisionTransformer, got {type(model).__name__}; "
            "keras-hub has no BiT ResNetV2 with this layout."
        )
    if model.resnet is not None:
        raise ValueError(
            "keras-hub's ViT has no ResNet stem, so a hybrid ResNet+ViT cannot be expressed; "
            "keep it as a keras_vit model."
        )
    placement = (model.position_embedding, model.position_embedding_placement)
    if placement != ("learned_1d", "stem"):
        raise ValueError(
            "keras-hub's ViT adds one learned 1-D position embedding after the patch embedding; "
            f"position_embedding={placement[0]!r} with placement {placement[1]!r} cannot be "
            "expressed."
        )
    if model.approximate_gelu and strict:
        raise ValueError(
            "The model uses the tanh-approximated GELU (as the official checkpoints do) and "
            "keras-hub only has the exact one, so the outputs would change (about 1e-4). Pass "
            "strict=False to convert anyway."
        )
    if model.layer_norm_epsilon != LAYER_NORM_EPSILON:
        raise ValueError(
            f"keras-hub's ViT uses LayerNorm epsilon {LAYER_NORM_EPSILON}; this model uses "
            f"{model.layer_norm_epsilon} (e.g. loaded from Hugging Face) and cannot be "
            "expressed exactly. Save it with save_checkpoint(..., format='transformers') instead."
        )
    if model.num_classes is None and model.representation_size is not None:
        raise ValueError(
            "A headless model with a pre_logits layer cannot be expressed: a keras-hub "
            "ViTBackbone has no representation layer. Build the model with a head, or with "
            "representation_size=None."
        )


def _hub_backbone_config(model):
    """keras-hub ``ViTBackbone`` arguments equivalent to a keras_vit model's encoder."""
    height, width = model.image_size
    return dict(
        image_shape=(height, width, model.num_channels),
        patch_size=model.patch_size,
        **{theirs: getattr(model, ours) for ours, theirs in _CONFIG},
        layer_norm_epsilon=LAYER_NORM_EPSILON,
        use_class_token=model.classifier == "token",
        dtype=model.dtype_policy.name,
    )
