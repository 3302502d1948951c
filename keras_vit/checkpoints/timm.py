"""timm state dicts (``.safetensors``, ``.pth``/``.bin``) <-> keras_vit models.

Covers the paper's family as timm writes it: ``VisionTransformer`` with a class token or global
average pooling (``global_pool="avg", fc_norm=False``, the official GAP: norm, then mean), with
or without qkv bias; the hybrids ``vit_*_r*`` (``patch_embed.backbone`` is the ResNetV2 stem) and
the BiT ``resnetv2_*_bit`` models. The table below is built from the official table of the same
model (``checkpoints/official.py``, ``docs/official-checkpoints.md``): each official key has one
timm key, and PyTorch stores kernels transposed (Linear (out, in), Conv2d OIHW). The only tensor
that is not one-to-one is timm's fused ``attn.qkv``, the three official query/key/value kernels
stacked.

What a state dict does not record, and what this module assumes:

- the GELU: timm's ``VisionTransformer`` uses the exact GELU (``nn.GELU``), so loaded models get
  ``approximate_gelu=False``; a model saved with the tanh GELU needs
  ``timm.create_model(..., act_layer="gelu_tanh")`` to give the same logits.
- the number of heads: inferred from the width as timm's named models have it (head size 64;
  ViT-H 16 heads of 80); pass ``num_heads=`` for any other model.
- the pooling: a class-token model pooled by averaging with ``fc_norm=False`` has the same keys
  as a class-token model; it is loaded as a class-token model.

The numerics differ slightly in timm's ResNets: standardized convs divide by
``sqrt(var + 1e-8)`` (official hybrid: ``std + 1e-5``, BiT: ``sqrt(var + 1e-10)``) and the
hybrid's GroupNorm epsilon is 1e-5 (official 1e-6). keras_vit keeps the official numerics;
on small models the logits agree with timm's to about 1e-6 (see the tests).
"""

import os
import re

import numpy as np

from keras_vit import _optional
from keras_vit.checkpoints import resnet
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
from keras_vit.checkpoints.capabilities import Capabilities, Format, check_expressible
from keras_vit.layers.encoder import EncoderConfig
from keras_vit.layers.position import table_grid
from keras_vit.layers.resnet import ROOT_WIDTH, plain_number
from keras_vit.models.base import model_keywords
from keras_vit.models.description import Head, Patches, ResNetConfig, Stages, Stem, ViTConfig
from keras_vit.models.registry import BIT, HYBRID, VIT, build

EXTENSIONS = (".safetensors", ".pth", ".bin", ".pt")
HOLDS = Capabilities("timm", ("patches", "hybrid", "bit"), pre_logits=(
    "The timm VisionTransformer has no pre-logits (representation) layer, so this model cannot "
    "be written for timm"))

# Keys of timm variants outside the paper's family -> what they are. Loading them approximately
# would give wrong logits, so they are refused.
REFUSED = {
    r"(^|\.)reg_token$": "register tokens (reg_tokens > 0)",
    r"\.ls[12]\.gamma$": "layer scale (init_values)",
    r"\.attn\.(q|k)_norm\.": "qk-norm (qk_norm=True)",
    r"^fc_norm\.": "a norm after pooling (fc_norm=True, timm's GAP default; the official GAP "
                   "normalises before pooling: build timm with fc_norm=False)",
    r"^norm_pre\.": "a norm before the blocks (pre_norm=True, CLIP style)",
    r"^attn_pool\.": "attention pooling (global_pool='map')",
    r"\.attn\.norm\.|\.mlp\.norm\.": "a norm inside attention or MLP (scale_attn_norm, "
                                   "scale_mlp_norm)",
    r"\.mlp\.fc1_[gx]\.": "a gated MLP (SwiGLU)",
}
# Width -> heads of timm's named ViTs (head size 64, except ViT-H: 16 heads of 80).
HEADS = {192: 3, 384: 6, 768: 12, 1024: 16, 1280: 16, 1408: 16, 1664: 16}


# ----------------------------------------------------------------------------- files


def read_state_dict(path):
    """A timm state dict file as ``{key: numpy array}`` (float32 for bfloat16 tensors)."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"No checkpoint file at {path!r}.")
    try:
        if path.endswith(".safetensors"):
            return _read_safetensors(path)
        return _read_torch(path)
    except ImportError:
        raise
    except Exception as error:  # the readers raise many types for a damaged file
        raise ValueError(
            f"{path!r} is not a readable state dict ({type(error).__name__}: {error}). The file "
            "may be truncated or corrupt (write it again), or of another format."
        ) from None


def _read_safetensors(path):
    load_file = _optional.need("safetensors.numpy", "Reading .safetensors").load_file
    try:
        return load_file(path)
    except TypeError:  # bfloat16 has no numpy dtype: go through torch
        _optional.need("torch", "Reading bfloat16 tensors from .safetensors")
        from safetensors.torch import load_file as load_torch

        return {k: _torch_to_numpy(v) for k, v in load_torch(path).items()}


def _read_torch(path):
    torch = _optional.need("torch", "Reading a .pth/.bin state dict (or one saved as .safetensors)")
    state = torch.load(path, map_location="cpu", weights_only=True)
    for wrapper in ("state_dict", "model", "state_dict_ema"):
        if isinstance(state, dict) and isinstance(state.get(wrapper), dict):
            state = state[wrapper]
            break
    if not isinstance(state, dict) or not all(hasattr(v, "shape") for v in state.values()):
        raise ValueError("it does not hold a dict of named tensors")
    return {k: _torch_to_numpy(v) for k, v in state.items()}


def _torch_to_numpy(tensor):
    import torch

    if tensor.dtype == torch.bfloat16:
        tensor = tensor.float()
    return tensor.detach().cpu().numpy()


def write_state_dict(path, arrays):
    """Write ``arrays`` as ``.safetensors`` or, for ``.pth``/``.bin``/``.pt``, ``torch.save``."""
    path = os.fspath(path)
    if path.endswith(".safetensors"):
        save_file = _optional.need("safetensors.numpy", "Writing .safetensors").save_file
        write_atomically(path, lambda tmp: save_file(arrays, tmp, metadata={"format": "pt"}))
    elif path.endswith((".pth", ".bin", ".pt")):
        torch = _optional.need("torch", "Writing a .pth/.bin/.pt state dict")
        tensors = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in arrays.items()}
        write_atomically(path, lambda tmp: torch.save(tensors, tmp))
    else:
        raise ValueError(f"A state dict file ends with one of {EXTENSIONS}; got {path!r}.")


def strip_prefix(tensors):
    """Drop a ``module.`` (DataParallel) or ``model.`` prefix that every key carries."""
    for prefix in ("module.", "model."):
        if tensors and all(key.startswith(prefix) for key in tensors):
            tensors = {key[len(prefix):]: value for key, value in tensors.items()}
    return tensors


def is_timm(tensors):
    return any(k.startswith(("patch_embed.", "blocks.0.", "stem.conv.")) for k in tensors)


# ----------------------------------------------------------------------------- tables


def _qkv(attention, part):
    variables = tuple(getattr(getattr(attention, name), part) for name in ("query", "key", "value"))
    if part == "kernel":
        width = int(variables[0].shape[0])
        per = int(np.prod(variables[0].shape[1:]))
        return Entry(
            variables,
            (3 * per, width),
            lambda *k: np.concatenate([x.reshape(width, -1).T for x in k]),
            lambda w: tuple(x.T for x in np.split(w, 3)),
        )
    d = int(np.prod(variables[0].shape))
    return Entry(variables, (3 * d,), lambda *b: np.concatenate([x.ravel() for x in b]),
                 lambda b: tuple(np.split(b, 3)))


def _norm(prefix, layer):
    return {f"{prefix}.weight": Entry(layer.gamma), f"{prefix}.bias": Entry(layer.beta)}


def _linear(prefix, layer):
    return {f"{prefix}.weight": torch_dense_kernel(layer.kernel),
            f"{prefix}.bias": Entry(layer.bias)}


def hybrid_table(model):
    """timm key -> Entry for a hybrid: its ResNet stem's (``patch_embed.backbone``), then the
    ViT's."""
    stem = resnet.hybrid_stem_table(model.get_layer("resnet"))
    return {**{f"patch_embed.backbone.{_timm_resnet_key(k)}": _torch_entry(k, e)
               for k, e in stem.items()}, **vit_table(model)}


def vit_table(model):
    """timm key -> Entry for a ``ViTImageClassifier`` or ``ViTBackbone`` (a hybrid's stem is
    ``hybrid_table``'s; a backbone has no ``head`` keys: timm's ``num_classes=0``)."""
    check_expressible(model, HOLDS)
    config, table = model.config, {}
    embedding = model.get_layer("embedding").conv
    table["patch_embed.proj.weight"] = torch_conv_kernel(embedding.kernel)
    table["patch_embed.proj.bias"] = Entry(embedding.bias)
    if config.encoder.classifier == "token":
        table["cls_token"] = Entry(model.get_layer("cls").cls)
    table["pos_embed"] = Entry(model.get_layer("posembed_input").pos_embedding)
    for i in range(config.encoder.num_layers):
        block = model.get_layer(f"encoderblock_{i}")
        attention = block.MultiHeadDotProductAttention_1
        table.update(_norm(f"blocks.{i}.norm1", block.LayerNorm_0))
        table[f"blocks.{i}.attn.qkv.weight"] = _qkv(attention, "kernel")
        table[f"blocks.{i}.attn.qkv.bias"] = _qkv(attention, "bias")
        table[f"blocks.{i}.attn.proj.weight"] = torch_dense_kernel(attention.out.kernel)
        table[f"blocks.{i}.attn.proj.bias"] = Entry(attention.out.bias)
        table.update(_norm(f"blocks.{i}.norm2", block.LayerNorm_2))
        table.update(_linear(f"blocks.{i}.mlp.fc1", block.MlpBlock_3.Dense_0))
        table.update(_linear(f"blocks.{i}.mlp.fc2", block.MlpBlock_3.Dense_1))
    table.update(_norm("norm", model.get_layer("encoder_norm")))
    if config.head is not None:
        table.update(_linear("head", model.get_layer("head")))
    return table


# Official hybrid / BiT sub-module -> timm's.
_RESNET_NAMES = {
    "conv_root": "stem.conv", "gn_root": "stem.norm",
    "conv_proj": "downsample.conv", "gn_proj": "downsample.norm",
    "gn1": "norm1", "gn2": "norm2", "gn3": "norm3",
    "a/group_norm": "norm1", "a/standardized_conv2d": "conv1", "a/proj/standardized_conv2d":
    "downsample.conv", "b/group_norm": "norm2", "b/standardized_conv2d": "conv2",
    "c/group_norm": "norm3", "c/standardized_conv2d": "conv3",
    "root_block/standardized_conv2d": "stem.conv", "group_norm": "norm",
}
_PARAM = {"kernel": "weight", "scale": "weight", "gamma": "weight", "bias": "bias", "beta": "bias"}


def _timm_resnet_key(key):
    """``block2/unit1/gn1/scale`` -> ``stages.1.blocks.0.norm1.weight`` (hybrid and BiT keys)."""
    key = key.removeprefix("resnet/")
    match = re.fullmatch(r"block(\d+)/unit0?(\d+)/(.+)/(\w+)", key)
    if match:
        stage, unit, module, param = match.groups()
        return (f"stages.{int(stage) - 1}.blocks.{int(unit) - 1}."
                f"{_RESNET_NAMES.get(module, module)}.{_PARAM[param]}")
    module, param = key.rsplit("/", 1)
    return f"{_RESNET_NAMES[module]}.{_PARAM[param]}"


def _torch_entry(key, entry):
    if key.endswith("kernel"):
        return torch_conv_kernel(entry.variable)
    return Entry(entry.variable)


def bit_table(model):
    """timm key -> Entry for a BiT ResNet (timm's ``resnetv2_*_bit``)."""
    table = {}
    for key, entry in resnet.bit_table(model).items():
        if key.startswith("resnet/head/"):
            continue
        table[_timm_resnet_key(key)] = _torch_entry(key, entry)
    if model.config.head is not None:  # BiT's head has no pre-logits layer (capabilities)
        head = model.get_layer("head")
        k, c = head.kernel.shape[1], head.kernel.shape[0]
        table["head.fc.weight"] = Entry(head.kernel, (k, c, 1, 1), lambda w: w.T[:, :, None, None],
                                        lambda w: w[:, :, 0, 0].T)
        table["head.fc.bias"] = Entry(head.bias)
    return table


# Family (``keras_vit.models.family.Family``) with published weights -> its timm key table.
TABLES = {VIT: vit_table, HYBRID: hybrid_table, BIT: bit_table}


def table_for(model):
    check_expressible(model, HOLDS)
    return TABLES[model.config.family](model)


# ----------------------------------------------------------------------------- inference


def refuse_variants(tensors):
    found = sorted({what for key in tensors for pattern, what in REFUSED.items()
                    if re.search(pattern, key)})
    if found:
        raise ValueError(
            "This timm model is outside the paper's ViT family and cannot be loaded exactly: it "
            f"has {'; '.join(found)}. keras_vit refuses it rather than load it approximately."
        )


def _count(tensors, template):
    count = 0
    while template.format(count) in tensors:
        count += 1
    return count


def infer_vit_config(tensors, num_heads=None, posemb_grid=None):
    """The ``ViTConfig`` of a timm ViT state dict (its head None when the file has none; a
    non-square ``pos_embed`` needs its ``posemb_grid=(rows, cols)``: the state dict does not
    record it)."""
    refuse_variants(tensors)
    proj = tensors["patch_embed.proj.weight"]
    hidden, channels, patch, patch_w = proj.shape
    if patch != patch_w:
        raise ValueError(f"Non-square patches ({patch}x{patch_w}) are not supported.")
    num_layers = _count(tensors, "blocks.{}.norm1.weight")
    if num_layers == 0:
        raise ValueError("The state dict has patch_embed but no blocks.0: not a timm ViT.")
    if num_heads is None:
        if hidden not in HEADS:
            raise ValueError(
                f"A timm state dict does not record the number of heads, and width {hidden} is "
                "not one of timm's named ViTs; pass num_heads=..."
            )
        num_heads = HEADS[hidden]
    classifier = "token" if "cls_token" in tensors else "gap"
    if "pos_embed" not in tensors:
        raise ValueError("The state dict has no 'pos_embed' (pos_embed='none' is not supported).")
    encoder = EncoderConfig(num_layers, num_heads, int(tensors["blocks.0.mlp.fc1.weight"].shape[0]),
                            hidden_size=int(hidden), classifier=classifier,
                            approximate_gelu=False)  # timm's nn.GELU
    head = Head(int(tensors["head.weight"].shape[0])) if "head.weight" in tensors else None
    stem, channels = _hybrid_stem(tensors, channels)
    stride = int(patch) * (1 if stem is None else stem.stride)
    try:
        rows, cols = table_grid(tensors["pos_embed"].shape[1] - (classifier == "token"),
                                posemb_grid, "posemb_grid")
    except ValueError as error:
        hint = (" A pos_embed without the class token's row (timm's no_embed_class=True) is not "
                "supported." if classifier == "token" else "")
        raise ValueError(f"pos_embed: {error}{hint}") from None
    return ViTConfig(Patches(int(patch), int(channels)), encoder,
                     image_size=(rows * stride, cols * stride), stem=stem, head=head)


def _hybrid_stem(tensors, channels):
    """``(Stem or None, input channels)``: a hybrid's ``patch_embed.backbone``."""
    if "patch_embed.backbone.stem.conv.weight" in tensors:
        root = tensors["patch_embed.backbone.stem.conv.weight"]
        num_stages = _count(tensors, "patch_embed.backbone.stages.{}.blocks.0.conv1.weight")
        layers = [_count(tensors, f"patch_embed.backbone.stages.{s}.blocks.{{}}.conv1.weight")
                  for s in range(num_stages)]
        stem = Stem(layers, width_factor=plain_number(root.shape[0] / ROOT_WIDTH))
        return stem, int(root.shape[1])
    if any(k.startswith("patch_embed.backbone.") for k in tensors):
        raise ValueError("This hybrid's backbone is not a ResNetV2 with a stem and stages (e.g. "
                         "timm's R+ViT-Ti without stages); it is not supported.")
    return None, channels


def infer_bit_config(tensors):
    """The ``ResNetConfig`` of a timm BiT (``resnetv2_*_bit``) state dict."""
    refuse_variants(tensors)
    root = tensors["stem.conv.weight"]
    if root.shape[2:] != (7, 7):
        raise ValueError("Only the BiT stem (one 7x7 conv, timm stem_type='fixed') is supported.")
    num_stages = _count(tensors, "stages.{}.blocks.0.conv1.weight")
    if "stages.0.blocks.0.downsample.norm.weight" in tensors or "stem.norm.weight" in tensors:
        raise ValueError("This is a post-activation timm ResNetV2 (preact=False); only the "
                         "pre-activation BiT models (resnetv2_*_bit) are supported.")
    head = tensors.get("head.fc.weight")
    units = [_count(tensors, f"stages.{s}.blocks.{{}}.conv1.weight") for s in range(num_stages)]
    return ResNetConfig(Stages(units, plain_number(root.shape[0] / ROOT_WIDTH)),
                        image_size=None, num_channels=int(root.shape[1]),
                        head=None if head is None else Head(int(head.shape[0])))


def _fill_optional_biases(tensors, config):
    """qkv_bias=False: the official layout always has biases, which are then zero (exact)."""
    tensors = dict(tensors)
    d = config.encoder.hidden_size
    for i in range(config.encoder.num_layers):
        tensors.setdefault(f"blocks.{i}.attn.qkv.bias", np.zeros(3 * d, "float32"))
    return tensors


# ----------------------------------------------------------------------------- load and save


def load(path, *, image_size=None, num_classes=None, drop_pre_logits=False, num_heads=None,
         posemb_grid=None, **overrides):
    """Build the model a timm state dict describes and load it (see ``load_checkpoint``): a
    ``ViTImageClassifier``, a ``ViTBackbone`` (no head in the file, or ``num_classes=0``) or
    a BiT ``ResNetImageClassifier`` (``ResNetBackbone``); ``posemb_grid=(rows, cols)`` states
    the grid of a non-square ``pos_embed``. timm's ViT has no pre-logits layer: with
    ``drop_pre_logits`` there is nothing to drop."""
    tensors = strip_prefix(read_state_dict(path))
    if "stem.conv.weight" in tensors:
        if posemb_grid is not None:
            raise ValueError("posemb_grid is the grid of a ViT's position embedding; a BiT state "
                             "dict has none: leave posemb_grid out.")
        config, head_keys = infer_bit_config(tensors), {"head.fc.weight", "head.fc.bias"}
    elif "patch_embed.proj.weight" in tensors:
        config = infer_vit_config(tensors, num_heads, posemb_grid)
        tensors = _fill_optional_biases(tensors, config)
        head_keys = {"head.weight", "head.bias"}
    else:
        sample = ", ".join(sorted(tensors)[:5])
        raise ValueError(
            "Not a timm ViT, hybrid or BiT state dict: it has neither 'patch_embed.proj.weight' "
            f"nor 'stem.conv.weight' (first keys: {sample})."
        )
    options = model_keywords(overrides)
    config, skip = prepare_config(config, tensors, head_keys, (), num_classes=num_classes,
                                  image_size=image_size, overrides=overrides)
    model = build(config, **options)
    tensors = resize_posemb_tensor(tensors, "pos_embed", config, posemb_grid)
    assign(table_for(model), tensors, skip, "timm state dict")
    return model


def save(model, path):
    """Write ``model`` as a timm state dict (``.safetensors`` or ``.pth``/``.bin``)."""
    write_state_dict(path, export(table_for(model)))


def _claims(path):
    return os.fspath(path).endswith(EXTENSIONS)


FORMAT = Format("timm", HOLDS, EXTENSIONS, _claims, load, save,
                f"a timm state dict ({', '.join(EXTENSIONS)})")
