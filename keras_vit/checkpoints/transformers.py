"""Hugging Face transformers ViT folders (``config.json`` + weights) <-> keras_vit models.

A folder written by ``ViTModel.save_pretrained`` or ``ViTForImageClassification.save_pretrained``
holds ``config.json`` and ``model.safetensors`` (or ``pytorch_model.bin``) in the published key
layout ``vit.encoder.layer.N.attention.attention.{query,key,value}``, ... The encoder is the
paper's (pre-LN blocks, class token first, learned 1-D position embedding); what the config
adds is honoured:

- ``layer_norm_eps`` (1e-12 in the converted Google models) -> ``layer_norm_epsilon``;
- ``hidden_act``: ``"gelu"`` (exact) -> ``approximate_gelu=False``; ``"gelu_pytorch_tanh"`` /
  ``"gelu_new"`` (the tanh form of the official code) -> ``True``; others are refused;
- ``qkv_bias=False`` -> zero biases (exact);
- ``ViTForImageClassification`` (a ``classifier`` head on the class token) is a
  ``ViTImageClassifier``; ``ViTModel`` without a pooler is a ``ViTBackbone``
  (``last_hidden_state`` is its ``"tokens"``). ``ViTModel``'s pooler (Dense + tanh on the class
  token, ``pooler_act="tanh"``) is the paper's pre-logits layer, a classifier's head in keras_vit
  (``representation_size = pooler_output_size``): a ``ViTModel`` folder with a pooler (the
  shape of ``google/vit-base-patch16-224-in21k``) loads by default as a ``ViTImageClassifier``
  whose head is that layer alone (``num_classes=None``; its output is ``pooler_output``, its
  backbone's ``"tokens"`` the ``last_hidden_state``), and is written back as the same folder;
  ``num_classes=K`` keeps the pooler under a new zero class layer, ``num_classes=0`` gives the
  backbone without it.

Transformers has no GAP ViT and no pre-logits layer before a classification head: such models
are refused when saving; a ``ViTBackbone`` is written as a ``ViTModel`` without pooler. The
kernels are PyTorch ``Linear`` weights (out, in); attention kernels are the official (D, H, hd)
ones flattened.
"""

import json
import os

import numpy as np

from keras_vit import _optional
from keras_vit.checkpoints.base import (
    Entry,
    assign,
    export,
    prepare_config,
    resize_posemb_tensor,
    torch_conv_kernel,
    torch_dense_kernel,
    write_atomically,
)
from keras_vit.checkpoints.capabilities import (
    Capabilities,
    Format,
    check_expressible,
    check_position,
    fixed_image_size,
)
from keras_vit.checkpoints.timm import read_state_dict
from keras_vit.checks import read_json
from keras_vit.layers.encoder import EncoderConfig
from keras_vit.models.base import model_keywords
from keras_vit.models.description import Head, Patches, ViTConfig
from keras_vit.models.registry import build

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
# ViTModel's pooler is a pre-logits layer without classes: a head of that layer alone
HOLDS = Capabilities("transformers", ("patches",), classifiers=("token",), pre_logits=(
    "The transformers ViTForImageClassification puts its classifier straight on the class "
    "token, with no pre-logits layer"), pooler=True)
ACTIVATIONS = {"gelu": False, "gelu_pytorch_tanh": True, "gelu_new": True}
# In-memory names of newer transformers releases -> the published file layout.
_NEW_NAMES = (
    ("layers.", "encoder.layer."),
    (".attention.q_proj.", ".attention.attention.query."),
    (".attention.k_proj.", ".attention.attention.key."),
    (".attention.v_proj.", ".attention.attention.value."),
    (".attention.o_proj.", ".attention.output.dense."),
    (".mlp.fc1.", ".intermediate.dense."),
    (".mlp.fc2.", ".output.dense."),
)


def is_folder(path):
    """A folder of ``config.json`` that is not a keras-hub preset (which has ``metadata.json``
    beside it)."""
    path = os.fspath(path)
    return (os.path.isdir(path) and os.path.isfile(os.path.join(path, "config.json"))
            and not os.path.isfile(os.path.join(path, "metadata.json")))


def read_folder(path):
    """``(config dict, {key: numpy array})`` of a transformers folder."""
    path = os.fspath(path)
    config = read_json(os.path.join(path, "config.json"),
                       "save the model to the folder again (save_pretrained)")
    if config.get("model_type") != "vit":
        raise ValueError(
            f"{path!r} holds a transformers {config.get('model_type')!r} model; only 'vit' "
            "(ViTModel, ViTForImageClassification) is supported."
        )
    for name in WEIGHT_FILES:
        if os.path.isfile(os.path.join(path, name)):
            tensors = read_state_dict(os.path.join(path, name))
            break
    else:
        raise ValueError(
            f"{path!r} has config.json but none of {WEIGHT_FILES} (sharded checkpoints are not "
            "supported: save with a larger max_shard_size)."
        )
    return config, {_published(key): value for key, value in tensors.items()}


def _published(key):
    for new, old in _NEW_NAMES:
        key = key.replace(new, old)
    return key


def _prefix(tensors):
    return "vit." if any(k.startswith("vit.") for k in tensors) else ""


def infer_config(hf, tensors):
    """The ``ViTConfig`` of a transformers ViT config and its tensors (its head None for a
    ``ViTModel``)."""
    act = hf.get("hidden_act", "gelu")
    if act not in ACTIVATIONS:
        raise ValueError(
            f"hidden_act={act!r} is not a GELU keras_vit has; supported: {sorted(ACTIVATIONS)}."
        )
    if hf.get("pooler_act", "tanh") != "tanh":
        raise ValueError(f"pooler_act={hf['pooler_act']!r} is not supported; only 'tanh' (the "
                         "paper's pre-logits layer).")
    encoder = EncoderConfig(
        int(hf["num_hidden_layers"]), int(hf["num_attention_heads"]), int(hf["intermediate_size"]),
        hidden_size=int(hf["hidden_size"]), classifier="token", approximate_gelu=ACTIVATIONS[act],
        layer_norm_epsilon=float(hf.get("layer_norm_eps", 1e-12)))
    head = None
    if "classifier.weight" in tensors:
        head = Head(int(tensors["classifier.weight"].shape[0]))
    return ViTConfig(Patches(int(hf.get("patch_size", 16)), int(hf.get("num_channels", 3))),
                     encoder, image_size=hf.get("image_size", 224), head=head)


def pooler_size(tensors):
    """The width of a ``ViTModel``'s pooler (the pre-logits layer), or None."""
    pooler = tensors.get(f"{_prefix(tensors)}pooler.dense.weight")
    return None if pooler is None else int(pooler.shape[0])


def table(model):
    """transformers key -> Entry for a class-token ``ViTImageClassifier`` (the
    ``ViTForImageClassification`` layout: ``vit.`` prefix, ``classifier``), a classifier whose
    head is a pre-logits layer alone (``ViTModel`` with its ``pooler``) or a ``ViTBackbone``
    (``ViTModel``: no prefix, no pooler)."""
    check_expressible(model, HOLDS)
    return layout(model, "vit." if _classes(model) else "")


def _classes(model):
    """The model's classes, or None (a backbone, or a head of the pre-logits layer alone)."""
    head = model.config.head
    return None if head is None else head.num_classes


def layout(model, prefix):
    """The keys of ``model`` under ``prefix`` (a ViTModel folder loaded with a new head too; a
    pre-logits layer is the ViTModel's ``pooler``)."""
    embedding = model.get_layer("embedding").conv
    t = {
        f"{prefix}embeddings.cls_token": Entry(model.get_layer("cls").cls),
        f"{prefix}embeddings.position_embeddings":
            Entry(model.get_layer("posembed_input").pos_embedding),
        f"{prefix}embeddings.patch_embeddings.projection.weight":
            torch_conv_kernel(embedding.kernel),
        f"{prefix}embeddings.patch_embeddings.projection.bias": Entry(embedding.bias),
    }
    for i in range(model.config.encoder.num_layers):
        block = model.get_layer(f"encoderblock_{i}")
        attention = block.MultiHeadDotProductAttention_1
        layer = f"{prefix}encoder.layer.{i}"
        for name in ("query", "key", "value"):
            projection = getattr(attention, name)
            t[f"{layer}.attention.attention.{name}.weight"] = torch_dense_kernel(
                projection.kernel)
            t[f"{layer}.attention.attention.{name}.bias"] = Entry(projection.bias)
        t[f"{layer}.attention.output.dense.weight"] = torch_dense_kernel(attention.out.kernel)
        t[f"{layer}.attention.output.dense.bias"] = Entry(attention.out.bias)
        for ours, theirs in (("LayerNorm_0", "layernorm_before"),
                             ("LayerNorm_2", "layernorm_after")):
            norm = getattr(block, ours)
            t[f"{layer}.{theirs}.weight"] = Entry(norm.gamma)
            t[f"{layer}.{theirs}.bias"] = Entry(norm.beta)
        for ours, theirs in (("Dense_0", "intermediate"), ("Dense_1", "output")):
            dense = getattr(block.MlpBlock_3, ours)
            t[f"{layer}.{theirs}.dense.weight"] = torch_dense_kernel(dense.kernel)
            t[f"{layer}.{theirs}.dense.bias"] = Entry(dense.bias)
    norm = model.get_layer("encoder_norm")
    t[f"{prefix}layernorm.weight"] = Entry(norm.gamma)
    t[f"{prefix}layernorm.bias"] = Entry(norm.beta)
    head = model.config.head
    if head is not None and head.representation_size is not None:
        pre_logits = model.get_layer("pre_logits")
        t[f"{prefix}pooler.dense.weight"] = torch_dense_kernel(pre_logits.kernel)
        t[f"{prefix}pooler.dense.bias"] = Entry(pre_logits.bias)
    if _classes(model):
        head = model.get_layer("head")
        t["classifier.weight"] = torch_dense_kernel(head.kernel)
        t["classifier.bias"] = Entry(head.bias)
    return t


def hf_config(model):
    """The ``config.json`` transformers needs to rebuild ``model``."""
    config = model.config
    encoder, head = config.encoder, config.head
    height, width = fixed_image_size(config, "transformers")
    if height != width:
        raise ValueError("transformers' ViTConfig has one image_size; this model is "
                         f"{height}x{width}.")
    classes = _classes(model)
    pooler = head.representation_size if head is not None and not classes else None
    hf = dict(
        model_type="vit",
        architectures=["ViTForImageClassification" if classes else "ViTModel"],
        hidden_size=encoder.hidden_size, num_hidden_layers=encoder.num_layers,
        num_attention_heads=encoder.num_heads, intermediate_size=encoder.mlp_dim,
        hidden_act="gelu_pytorch_tanh" if encoder.approximate_gelu else "gelu",
        hidden_dropout_prob=encoder.dropout_rate,
        attention_probs_dropout_prob=encoder.attention_dropout_rate,
        layer_norm_eps=encoder.layer_norm_epsilon, image_size=height,
        patch_size=config.patches.patch_size, num_channels=config.patches.num_channels,
        qkv_bias=True, pooler_output_size=pooler or encoder.hidden_size, pooler_act="tanh",
    )
    if classes:
        hf["id2label"] = {str(i): f"LABEL_{i}" for i in range(classes)}
        hf["label2id"] = {f"LABEL_{i}": i for i in range(classes)}
    return hf


def load(path, *, image_size=None, num_classes=None, drop_pre_logits=False, **overrides):
    """Build the model a transformers ViT folder describes and load it (see
    ``load_checkpoint``): a ``ViTImageClassifier``, or for a ``ViTModel`` a ``ViTBackbone``
    (a classifier whose head is the pooler alone when the folder has one: the module's
    docstring)."""
    hf, tensors = read_folder(path)
    config = infer_config(hf, tensors)
    # config.json states the size, so the table's grid is known even when it is not square
    file_grid = config.grid
    prefix = _prefix(tensors)
    if not hf.get("qkv_bias", True):
        tensors = dict(tensors)
        for i in range(config.encoder.num_layers):
            for name in ("query", "key", "value"):
                key = f"{prefix}encoder.layer.{i}.attention.attention.{name}.bias"
                tensors.setdefault(key, np.zeros(config.encoder.hidden_size, "float32"))
    head = {"classifier.weight", "classifier.bias"}
    pooler = {f"{prefix}pooler.dense.weight", f"{prefix}pooler.dense.bias"}
    options = model_keywords(overrides)
    config, skip = prepare_config(config, tensors, head, pooler, num_classes=num_classes,
                                  drop_pre_logits=drop_pre_logits, image_size=image_size,
                                  overrides=overrides, representation_size=pooler_size(tensors))
    model = build(config, **options)
    check_position(model, HOLDS)
    key = f"{prefix}embeddings.position_embeddings"
    assign(layout(model, prefix), resize_posemb_tensor(tensors, key, config, file_grid), skip,
           "transformers checkpoint")
    return model


def save(model, path):
    """Write ``model`` as a transformers folder (``config.json`` + ``model.safetensors``)."""
    arrays = export(table(model))  # refuses what transformers cannot hold, before the import
    config = hf_config(model)
    save_file = _optional.need("safetensors.numpy", "Writing a transformers folder").save_file

    def write(folder):
        os.makedirs(folder)
        with open(os.path.join(folder, "config.json"), "w") as handle:
            json.dump(config, handle, indent=2)
        save_file(arrays, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})

    write_atomically(path, write)


FORMAT = Format("transformers", HOLDS, (), is_folder, load, save,
                "a Hugging Face ViT folder (config.json and model.safetensors or "
                "pytorch_model.bin)")
