"""LoRA (Hu et al., 2021) fine-tuning of keras_vit models: low-rank updates of the attention
projections, everything else frozen but the head.

Every projection is a Keras ``Dense`` or ``EinsumDense`` layer, so ``layer.enable_lora(rank)``
adds to its frozen kernel W the product (alpha / rank) A B of two trainable factors, A of shape
(inputs..., rank) drawn at random and B (rank, outputs...) zero, so training starts from the
pre-trained function. ``enable_lora(model, rank)`` does that for the attention projections of
every block (``"qv"``: query and value, the LoRA paper's choice; ``"all"``: query, key, value
and output, and the ``qkv`` projections of an AxialResNet) and freezes every other weight except
the head's, which a new task trains in full. ``merge_lora(model)`` folds the factors into the
kernels: the result is a plain model that every checkpoint format takes.

Example:
>>> import keras_vit
>>> model = keras_vit.ViTImageClassifier(image_size=8, patch_size=4, hidden_size=16,
...                                      num_layers=2, num_heads=2, mlp_dim=32, num_classes=3)
>>> model = enable_lora(model, rank=4)
>>> trainable_parameters(model)  # 2 blocks x (query, value) x (16x4 + 4x16), head 16x3 + 3
563
>>> trainable_parameters(merge_lora(model)) == model.count_params() - 2 * 2 * 128
True
"""

import numpy as np

from keras_vit.checks import positive_int
from keras_vit.layers.tree import quantization_modes, sublayers

TARGETS = {
    "qv": ("query", "value"),
    "all": ("query", "key", "value", "out", "qkv"),
}
TRAINED_IN_FULL = ("head",)


def _check_targets(targets):
    if targets not in TARGETS:
        raise ValueError(f"Unknown LoRA targets {targets!r}; use 'qv' (query and value "
                         "projections, the LoRA paper's choice) or 'all' (every attention "
                         "projection).")
    return TARGETS[targets]


def _projections(model):
    """The Dense/EinsumDense layers of ``model`` by their name (``query``, ``Dense_0``, ...)."""
    return [layer for layer in sublayers(model)
            if hasattr(layer, "enable_lora")]


def lora_layers(model, targets="qv"):
    """The projection layers ``enable_lora(model, rank, targets)`` adapts.

    Raises a ``ValueError`` naming the fix when ``model`` has none (a BiT ResNet, which has no
    attention; an AxialResNet with ``"qv"``: its attention has one fused ``qkv``).
    """
    names = _check_targets(targets)
    layers = [layer for layer in _projections(model) if layer.name in names]
    if not layers:
        fused = any(layer.name == "qkv" for layer in _projections(model))
        hint = ("its attention has one fused qkv projection: use targets='all'" if fused else
                "this helper adapts attention projections, and the model has no attention (a "
                "BiT ResNet: its convolutions take Keras' layer.enable_lora(rank) one by one)")
        raise ValueError(f"{model.name} has no {'/'.join(names[:4])} projections to adapt: "
                         f"{hint}.")
    return layers


def enable_lora(model, rank, targets="qv", alpha=None, trained_in_full=TRAINED_IN_FULL):
    """Add LoRA factors of ``rank`` to the attention projections and freeze all other weights.

    Args:
        model: a keras_vit model with float weights (quantize after ``merge_lora``).
        rank: the rank r of the factors.
        targets: ``"qv"`` (query and value) or ``"all"`` (every attention projection).
        alpha: the factors' scale is alpha / rank (Keras' default alpha: the rank).
        trained_in_full: names of layers whose weights stay trainable (the new task's head).

    Returns the model, changed in place: only the factors and ``trained_in_full`` train.
    """
    rank = positive_int("The LoRA rank", rank)
    layers = lora_layers(model, targets)
    _check_float(model)
    adapted = [layer.path for layer in layers if layer.lora_enabled]
    if adapted:
        raise ValueError(f"LoRA is already enabled on {adapted[0]}; merge it first "
                         "(model = merge_lora(model)) to add new factors.")
    for layer in layers:
        layer.enable_lora(int(rank), lora_alpha=alpha)
    factors = {id(layer.lora_kernel_a) for layer in layers}
    factors |= {id(layer.lora_kernel_b) for layer in layers}
    kept = {id(v) for layer in sublayers(model)
            if layer.name in trained_in_full for v in layer.weights}
    for variable in model.weights:
        if id(variable) not in kept:  # a kept layer's own flags stand (an int8 kernel: frozen)
            variable.trainable = id(variable) in factors
    return model


def _check_float(model):
    """Refuse a quantized model, naming the order that works: LoRA, merge, then quantize."""
    modes = quantization_modes(model)
    if modes:
        raise ValueError(
            f"The model is quantized ({', '.join(modes)}): LoRA factors on quantized kernels "
            "cannot be merged back faithfully (merge_lora re-quantizes every kernel with its "
            "factors, which moves the logits away from the trained model's, and float8 kernels "
            "do not train with factors). Fine-tune the float model instead, then quantize: "
            "enable_lora(model, rank); model.fit(...); model = merge_lora(model); "
            "model.quantize('int8').")


def trainable_parameters(model):
    """How many numbers ``model.fit`` updates: the sizes of the trainable weights."""
    return int(sum(np.prod(v.shape) for v in model.trainable_weights))


def merge_lora(model):
    """A new model whose kernels are W + (alpha / rank) A B, without factors: every weight
    trainable again, the same outputs, ready for ``save_checkpoint`` in any format.

    Keras itself merges: each adapted layer's ``save_own_variables`` writes its merged kernel
    (re-quantized for an int8 or int4 layer), which the new model's layer reads.
    """
    merged = type(model).from_config(model.get_config())
    source = {layer.path: layer for layer in sublayers(model, include_self=True)}
    for layer in sublayers(merged, include_self=True):
        if not layer.weights or layer is merged:
            continue
        store = {}
        source[layer.path].save_own_variables(store)
        layer.load_own_variables(store)
    return merged
