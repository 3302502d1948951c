"""Jax layouts: ``layout_map`` shards a ViT's encoder over a ``"model"`` mesh axis (the Megatron-LM
layout: attention split by heads, the MLP by its hidden units) for ``keras.distribution
.ModelParallel``."""

import keras

MODEL_AXIS = "model"

# (pattern over variable paths, sharded axes); each pattern matches one weight of every block.
_VIT_LAYOUT = (
    (r".*MultiHeadDotProductAttention_1/(query|key|value)/kernel", (None, MODEL_AXIS)),
    (r".*MultiHeadDotProductAttention_1/(query|key|value)/bias", (MODEL_AXIS,)),
    (r".*MultiHeadDotProductAttention_1/out/kernel", (MODEL_AXIS, None)),
    (r".*MlpBlock_3/Dense_0/kernel", (None, MODEL_AXIS)),
    (r".*MlpBlock_3/Dense_0/bias", (MODEL_AXIS,)),
    (r".*MlpBlock_3/Dense_1/kernel", (MODEL_AXIS, None)),
)


def _vit_sizes(model_or_config):
    """``(num_heads, mlp_dim)`` of a ViT, read from its description without importing the
    models (this package serves the data pipelines, a layer below them)."""
    if isinstance(model_or_config, str):
        raise TypeError(
            f"layout_map takes the description of a ViT, not its name {model_or_config!r}: "
            f"pass keras_vit.models.registry.model_config({model_or_config!r}).")
    found = model_or_config
    if isinstance(found, dict):  # a get_config(), a ViTConfig.to_dict() or the encoder's dict
        found = found.get("config", found)
        found = found.get("encoder", found)
        sizes = {key: found.get(key) for key in ("num_heads", "mlp_dim")}
    else:  # a model, its ViTConfig, or the EncoderConfig
        found = getattr(found, "config", found)
        found = getattr(found, "encoder", found)
        sizes = {key: getattr(found, key, None) for key in ("num_heads", "mlp_dim")}
    if None in sizes.values():
        raise TypeError(
            "layout_map expects a ViTBackbone or ViTImageClassifier, its ViTConfig (e.g. "
            "keras_vit.models.registry.model_config('ViT-B/16')), an EncoderConfig, or a dict "
            f"of num_heads and mlp_dim; got {type(model_or_config).__name__}.")
    return int(sizes["num_heads"]), int(sizes["mlp_dim"])


def layout_map(model_or_config, mesh, model_axis=MODEL_AXIS):
    """A ``keras.distribution.LayoutMap`` sharding a ViT's encoder over a mesh axis.

    The query/key/value kernels (D, H, hd) and biases (H, hd) and the out kernel (H, hd, D) are
    split by heads; the MLP's ``Dense_0`` kernel (D, M) and bias by columns and ``Dense_1``
    kernel (M, D) by rows. Everything else (embedding, position embedding, LayerNorms, head, a
    hybrid's ResNet) is replicated. Use it with ``keras.distribution.ModelParallel``.

    Args:
        model_or_config: a ``ViTBackbone`` or ``ViTImageClassifier``, its ``ViTConfig`` (of a
            paper name: ``keras_vit.models.registry.model_config("ViT-B/16")``), its
            ``EncoderConfig``, or any of them as a dict; only num_heads and mlp_dim matter.
        mesh: a ``keras.distribution.DeviceMesh`` with an axis named ``model_axis``.
        model_axis: the mesh axis that splits the weights.

    Example:
    >>> import keras
    >>> from keras_vit.models.registry import model_config
    >>> mesh = keras.distribution.DeviceMesh((1, 1), ("batch", "model"), ["cpu:0"])
    >>> layouts = layout_map(model_config("ViT-B/16"), mesh)
    >>> layouts["encoderblock_0/MlpBlock_3/Dense_0/kernel"].axes
    (None, 'model')
    """
    num_heads, mlp_dim = _vit_sizes(model_or_config)
    if not isinstance(mesh, keras.distribution.DeviceMesh):
        raise TypeError(f"mesh must be a keras.distribution.DeviceMesh, got {type(mesh).__name__}.")
    names = list(mesh.axis_names)
    if model_axis not in names:
        raise ValueError(
            f"The mesh has no {model_axis!r} axis (its axes are {names}); build it as e.g. "
            f"DeviceMesh((data, model), ('batch', '{model_axis}')), or pass model_axis=."
        )
    size = int(mesh.shape[names.index(model_axis)])
    for what, count in (("num_heads", num_heads), ("mlp_dim", mlp_dim)):
        if count % size:
            raise ValueError(
                f"{what} ({count}) is not divisible by the {model_axis!r} mesh axis ({size}); "
                f"use a model axis size that divides both num_heads ({num_heads}) and mlp_dim "
                f"({mlp_dim})."
            )
    layouts = keras.distribution.LayoutMap(mesh)
    for pattern, axes in _VIT_LAYOUT:
        layouts[pattern] = tuple(model_axis if a == MODEL_AXIS else a for a in axes)
    return layouts
