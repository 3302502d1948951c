"""timm state dicts <-> keras_vit, against the real timm package on small random models.

Both directions for every supported variant: timm writes a state dict, keras_vit loads it and
gives timm's logits; keras_vit writes it back and timm loads it with ``strict=True`` and gives the
same logits. Nothing is downloaded.

timm imports torchvision, whose PyPI wheels are CUDA builds that do not load next to a CPU-only
torch: CI installs timm with ``--no-deps`` and ``tests/timm_import.py`` stands in for torchvision,
which timm's ViT, hybrid and BiT models never call.
"""

from functools import partial

import numpy as np
import pytest
from interop_helpers import (
    assert_close,
    images,
    nchw,
    need,
    numpy,
    randomise_keras,
    randomise_torch,
)
from timm_import import import_timm

import keras_vit
from conftest import installed
from keras_vit import ViTBackbone, ViTImageClassifier, load_checkpoint, save_checkpoint

# The interop extra's packages; Colab's TPU runtime has none of them (timm: --no-deps, README).
needs_timm = pytest.mark.skipif(not installed("torch", "timm", "safetensors"),
                                reason="timm's models need torch, timm and safetensors")
needs_safetensors = pytest.mark.skipif(not installed("safetensors"),
                                       reason=".safetensors files need safetensors")

SMALL = dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, mlp_ratio=2.0,
             num_classes=5)


def _timm():
    """timm, with a stand-in torchvision where the real one cannot load (tests/timm_import.py)."""
    need("torch", "timm")
    return import_timm()


def _vit(**kwargs):
    timm = _timm()
    from timm.models.vision_transformer import VisionTransformer as TimmViT

    del timm
    return TimmViT(**dict(SMALL, **kwargs))


def _hybrid():
    _timm()
    from timm.models.vision_transformer_hybrid import (
        _create_vision_transformer_hybrid,
        _resnetv2,
    )

    backbone = _resnetv2(layers=(1, 1))
    return _create_vision_transformer_hybrid(
        "vit_small_r26_s32_224", backbone=backbone, img_size=32, patch_size=1, embed_dim=64,
        depth=1, num_heads=4, num_classes=5)


def _bit():
    _timm()
    from timm.layers import StdConv2d
    from timm.models.resnetv2 import ResNetV2 as TimmResNetV2

    # resnetv2_50x1_bit's settings (stem 'fixed', StdConv2d eps 1e-8) with fewer units.
    return TimmResNetV2(layers=[1, 1], num_classes=5, stem_type="fixed",
                        conv_layer=partial(StdConv2d, eps=1e-8))


VARIANTS = {
    "token": lambda: _vit(),
    "gap": lambda: _vit(class_token=False, global_pool="avg", fc_norm=False),
    "no_qkv_bias": lambda: _vit(qkv_bias=False),
    "tanh_gelu": lambda: _vit(act_layer="gelu_tanh"),
    "hybrid": _hybrid,
    "bit": _bit,
}


def _logits(module, x):
    import torch

    with torch.no_grad():
        return module(nchw(x)).numpy()


def _save_torch(module, path):
    need("torch", "safetensors")
    import torch
    from safetensors.torch import save_file

    state = {k: v.contiguous() for k, v in module.state_dict().items()}
    if str(path).endswith(".safetensors"):
        save_file(state, path)
    else:
        torch.save(state, path)


@needs_timm
@pytest.mark.parametrize("suffix", [".safetensors", ".pth"])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_timm_both_ways(variant, suffix, tmp_path):
    reference = randomise_torch(VARIANTS[variant]())
    x = images()
    path = tmp_path / f"{variant}{suffix}"
    _save_torch(reference, path)
    overrides = {} if variant == "bit" else dict(num_heads=4)
    if variant == "tanh_gelu":
        overrides["approximate_gelu"] = True  # a state dict does not record the activation
    model = load_checkpoint(path, **overrides)
    expected = _logits(reference, x)
    assert_close(numpy(model(x)), expected, f"timm {variant} load")

    out = tmp_path / f"back{suffix}"
    save_checkpoint(model, out, format="timm")
    # keras_vit always has qkv biases (zero here), so the timm model to load them has them too.
    fresh = (_vit() if variant == "no_qkv_bias" else VARIANTS[variant]()).eval()
    state = keras_vit.checkpoints.timm.read_state_dict(out)
    import torch

    fresh.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()}, strict=True)
    assert_close(_logits(fresh, x), numpy(model(x)), f"timm {variant} save")


@needs_timm
def test_timm_resized_on_load(tmp_path):
    reference = randomise_torch(_vit())
    _save_torch(reference, tmp_path / "vit.safetensors")
    model = load_checkpoint(tmp_path / "vit.safetensors", num_heads=4, image_size=48,
                            num_classes=3)
    assert model.config.grid == (6, 6) and model.config.head.num_classes == 3
    assert numpy(model(images(48))).shape == (2, 3)


@needs_timm
@pytest.mark.parametrize("variant", ["token", "gap", "hybrid"])
def test_timm_backbone_both_ways(variant, tmp_path):
    """timm's num_classes=0 is the ViTBackbone: its tokens are timm's forward_features, and
    the backbone written back loads into a headless timm model with strict=True."""
    import torch

    reference = randomise_torch(VARIANTS[variant]())
    reference.reset_classifier(0)
    _save_torch(reference, tmp_path / "features.safetensors")
    model = load_checkpoint(tmp_path / "features.safetensors", num_heads=4)
    assert isinstance(model, ViTBackbone)
    x = images()
    with torch.no_grad():
        tokens = reference.forward_features(nchw(x)).numpy()
    outputs = model(x)
    assert_close(numpy(outputs["tokens"]), tokens, f"timm {variant} backbone load")
    assert_close(numpy(outputs["pooled"]), _logits(reference, x), f"timm {variant} pooled")

    save_checkpoint(model, tmp_path / "back.safetensors", format="timm")
    fresh = VARIANTS[variant]().eval()
    fresh.reset_classifier(0)
    state = keras_vit.checkpoints.timm.read_state_dict(tmp_path / "back.safetensors")
    fresh.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()}, strict=True)
    with torch.no_grad():
        assert_close(fresh.forward_features(nchw(x)).numpy(), numpy(outputs["tokens"]),
                     f"timm {variant} backbone save")


@needs_safetensors
def test_a_classifier_and_its_backbone_share_every_tensor_but_the_head(tmp_path):
    model = _keras_vit()
    save_checkpoint(model, tmp_path / "model.safetensors", format="timm")
    save_checkpoint(model.backbone, tmp_path / "backbone.safetensors", format="timm")
    read = keras_vit.checkpoints.timm.read_state_dict
    whole, part = read(tmp_path / "model.safetensors"), read(tmp_path / "backbone.safetensors")
    assert sorted(set(whole) - set(part)) == ["head.bias", "head.weight"]
    for key, value in part.items():
        np.testing.assert_array_equal(value, whole[key])
    backbone = load_checkpoint(tmp_path / "model.safetensors", num_heads=4, num_classes=0)
    assert isinstance(backbone, ViTBackbone) and backbone.config == model.backbone.config


# ----------------------------------------------------------------------------- without timm


def _keras_vit(**kwargs):
    config = dict(image_size=32, patch_size=8, hidden_size=64, num_layers=2, num_heads=4,
                  mlp_dim=128, num_classes=5, approximate_gelu=False)
    return randomise_keras(ViTImageClassifier(**dict(config, **kwargs)))


def _state(tmp_path, **kwargs):
    need("safetensors")
    path = tmp_path / "vit.safetensors"
    save_checkpoint(_keras_vit(**kwargs), path, format="timm")
    return keras_vit.checkpoints.timm.read_state_dict(path)


def _write(tmp_path, state, name="edited.safetensors"):
    need("safetensors")
    keras_vit.checkpoints.timm.write_state_dict(tmp_path / name, state)
    return tmp_path / name


@needs_safetensors
def test_keras_round_trip_is_exact(tmp_path):
    need("safetensors")
    model = _keras_vit()
    save_checkpoint(model, tmp_path / "vit.safetensors", format="timm")
    again = load_checkpoint(tmp_path / "vit.safetensors", num_heads=4)
    for a, b in zip(model.weights, again.weights):
        np.testing.assert_array_equal(numpy(a), numpy(b))


REFUSED = {
    "reg_token": ("reg_token", (1, 4, 64), "register tokens"),
    "layer_scale": ("blocks.0.ls1.gamma", (64,), "layer scale"),
    "qk_norm": ("blocks.0.attn.q_norm.weight", (16,), "qk-norm"),
    "fc_norm": ("fc_norm.weight", (64,), "fc_norm=True"),
    "pre_norm": ("norm_pre.weight", (64,), "pre_norm=True"),
    "map": ("attn_pool.latent", (1, 1, 64), "global_pool='map'"),
    "swiglu": ("blocks.0.mlp.fc1_g.weight", (128, 64), "SwiGLU"),
}


@needs_safetensors
@pytest.mark.parametrize("variant", sorted(REFUSED))
def test_variants_outside_the_paper_are_refused_by_name(variant, tmp_path):
    key, shape, words = REFUSED[variant]
    state = _state(tmp_path)
    state[key] = np.zeros(shape, "float32")
    with pytest.raises(ValueError, match="outside the paper's ViT family") as info:
        load_checkpoint(_write(tmp_path, state), num_heads=4)
    assert words in str(info.value)


@needs_safetensors
def test_pos_embed_without_class_row_is_refused(tmp_path):
    state = _state(tmp_path)
    state["pos_embed"] = state["pos_embed"][:, 1:]
    with pytest.raises(ValueError, match="no_embed_class"):
        load_checkpoint(_write(tmp_path, state), num_heads=4)


@needs_safetensors
def test_unknown_width_needs_num_heads(tmp_path):
    need("safetensors")
    path = tmp_path / "vit.safetensors"
    save_checkpoint(_keras_vit(), path, format="timm")
    with pytest.raises(ValueError, match="num_heads"):
        load_checkpoint(path)


@needs_safetensors
def test_unknown_layout_and_truncated_file(tmp_path):
    path = _write(tmp_path, {"encoder.weight": np.zeros(3, "float32")})
    with pytest.raises(ValueError, match="Not a timm ViT, hybrid or BiT"):
        load_checkpoint(path)
    good = tmp_path / "vit.safetensors"
    save_checkpoint(_keras_vit(), good, format="timm")
    data = good.read_bytes()
    (tmp_path / "cut.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="truncated or corrupt"):
        load_checkpoint(tmp_path / "cut.safetensors", num_heads=4)


@needs_safetensors
def test_missing_tensor_is_reported(tmp_path):
    state = _state(tmp_path)
    del state["blocks.1.mlp.fc2.bias"]
    with pytest.raises(ValueError, match="1 missing") as info:
        load_checkpoint(_write(tmp_path, state), num_heads=4)
    assert "blocks.1.mlp.fc2.bias" in str(info.value)


@pytest.mark.parametrize("kwargs, words", [
    (dict(representation_size=16), "no pre-logits"),
    (dict(position_embedding="relative"), "learned 1-D position embedding"),
])
def test_models_timm_cannot_express_are_refused_before_writing(kwargs, words, tmp_path):
    path = tmp_path / "vit.safetensors"
    with pytest.raises(ValueError, match=words):
        save_checkpoint(_keras_vit(**kwargs), path, format="timm")
    assert not path.exists() and not list(tmp_path.iterdir())
