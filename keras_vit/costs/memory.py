"""Peak device memory of a training or inference step, counted from the architecture (Fig. 12).

``memory`` adds up, in bytes, what a compiled step holds at its peak:

- ``weights``: every parameter, in the variable dtype (float32 under mixed precision);
- ``gradients`` and ``optimizer`` (training): one gradient per parameter, and the optimizer's
  slots (SGD with momentum: 1 per parameter, AdamW: 2), in the variable dtype;
- ``inputs``: the batch of images (and one-hot labels when training);
- ``activations``: training keeps, per example, what the backward pass reads: per Transformer
  block the LayerNorm inputs and outputs (4 D per token), q, k, v (3 D), the attention output
  (D), the MLP hidden layer before, inside (the tanh of the approximate GELU) and after the GELU
  (3 ``mlp_dim``); per GroupNorm of a ResNet its input, output and ReLU output; plus the
  gradients in flight through one block (its kept set once more). Inference holds only the
  widest point of the forward pass. ``remat=True`` keeps a block's input alone and recomputes
  the rest, one block at a time. An Axial-ViT has two blocks (row, column) per layer on its
  grid (with the class row); an AxialResNet unit keeps per position 8 C numbers for each of
  its two attentions (projection, GroupNorms, q, k, v, output) besides its convolutions';
- ``attention``: the attention matrices, 2 H N^2 float32 numbers per block (the exponentials
  and the probabilities of the softmax) while training; one block's 3 H N^2 (logits,
  exponentials, probabilities) at inference. An axial attention along rows of length W
  holds H x N x W numbers per matrix, along columns H x N x (rows), not H N^2. An AxialResNet
  attention also keeps, while training, 2 C / heads such matrices for its relative logits
  where its heads are at most 8 channels wide (jax keeps both operands of each broadcast
  product q_o r_{p-o}, k_p r_{p-o} at full size; torch and TensorFlow keep the small operands,
  so there the count is an upper bound), 2 for wider heads (matmuls batched over the position
  under jax; the probabilities shifted to the 2L - 1 offsets on torch and TensorFlow).

Not counted: dropout masks (ViT-L, ViT-H and R50+ViT-B/16 train with dropout 0.1), XLA's
layout copies and scratch buffers, and the framework's own overhead. Flash attention keeps no
N^2 matrix: the ``attention`` part is then an upper bound.

Agreement with XLA (``XLA_AGREEMENT``; ``python benchmarks/memory.py --xla``): on eleven small
random ViT, hybrid, BiT, Axial-ViT and AxialResNet configurations at two batch sizes each, this
count over what XLA:CPU allocates for the compiled jax step (argument + output - alias + temp
bytes) was 0.76-1.35 for training steps (ViTs 0.80-1.02, hybrids 1.23-1.35, BiT 1.06-1.15,
Axial-ViTs 0.76-0.97, AxialResNets 1.08-1.14) and 0.52-1.43 for inference (Axial-ViTs
0.52-1.09, AxialResNets 0.74-0.86; jax 0.10.2, keras 3.15.1, 2026-11-25, 2-core AMD EPYC).
XLA:GPU and XLA:TPU fuse and lay out buffers differently from XLA:CPU; no GPU or TPU was
measured, so treat the count as an estimate within about +-50 %, and leave a margin when you
pick a batch. XLA:CPU did not shrink the
step of a ``remat=True`` ViT at all (our remat count was 0.42-0.44 of its allocation).

Example (ViT-B/16 at 384 px, the published fine-tune; one 16 GiB chip):
>>> count = memory("ViT-B/16", 384, 32, optimizer="sgd")
>>> sorted(count.parts)
['activations', 'attention', 'gradients', 'inputs', 'optimizer', 'weights']
>>> round(count.parts["weights"] / 2**20)  # 86.9M float32 weights
331
>>> largest_batch("ViT-B/16", 384, DEVICE_MEMORY_GIB["TPU v5e"])
18
"""

import re

import keras

from keras_vit.costs.compute import (
    _ceil_half,
    _check_size,
    _configuration,
    resnet_units,
    token_spans,
)
from keras_vit.layers.resnet import root_width
from keras_vit.models.axial import AxialResNet, AxialVisionTransformer
from keras_vit.models.resnet_v2 import ResNetV2
from keras_vit.models.vit import VisionTransformer

GIB = 2**30

# Memory of one device in GiB, as the runtimes report it (TPU HBM per chip, GPU memory).
DEVICE_MEMORY_GIB = {
    "TPU v5e": 16,
    "TPU v6e": 32,
    "T4": 15,
    "L4": 24,
    "A100 40GB": 40,
    "A100 80GB": 80,
    "H100": 80,
}
# How jax (``device.device_kind``) and nvidia-smi spell them -> our key.
_KIND_PATTERNS = (
    (r"tpu v5 ?(lite|e)", "TPU v5e"),
    (r"tpu v6 ?(lite|e)", "TPU v6e"),
    (r"\bt4\b", "T4"),
    (r"\bl4\b", "L4"),
    (r"a100.*80", "A100 80GB"),
    (r"a100", "A100 40GB"),
    (r"h100", "H100"),
)
OPTIMIZER_SLOTS = {"sgd": 1, "adamw": 2}
# memory() / XLA:CPU, lowest and highest over the 44 steps of ``benchmarks/memory.py --xla``.
XLA_AGREEMENT = {"training": (0.76, 1.35), "inference": (0.52, 1.43)}


def device_memory_gib(kind):
    """The memory of a device kind in GiB: a ``DEVICE_MEMORY_GIB`` key or the name jax or
    nvidia-smi gives it (``"TPU v5 lite"``, ``"Tesla T4"``, ``"NVIDIA A100-SXM4-80GB"``).

    Example:
    >>> device_memory_gib("TPU v5 lite"), device_memory_gib("NVIDIA A100-SXM4-80GB")
    (16, 80)
    """
    for pattern, key in _KIND_PATTERNS:
        if re.search(pattern, str(kind), re.IGNORECASE):
            return DEVICE_MEMORY_GIB[key]
    raise ValueError(
        f"Unknown device kind {kind!r}; known kinds are {', '.join(DEVICE_MEMORY_GIB)}. "
        "Pass the device's memory yourself (memory_gib=...)."
    )


class MemoryCount(int):
    """A byte count (an ``int``) with its per-part breakdown ``parts`` (name -> bytes)."""

    def __new__(cls, parts):
        count = super().__new__(cls, sum(parts.values()))
        count.parts = dict(parts)
        return count

    @property
    def gib(self):
        return self / GIB


# The model classes memory() counts (exact classes: a subclass may change the blocks).
COVERED = (VisionTransformer, AxialVisionTransformer, ResNetV2, AxialResNet)


class _Tally:
    """Per-example elements kept for the backward pass, of the largest unit (a block's
    gradients in flight) and at the forward peak: activations, and float32 attention matrices
    (the exponentials and probabilities of a softmax kept, its logits too at the peak)."""

    def __init__(self):
        self.kept = self.block = self.forward = 0
        self.matrices = self.block_matrices = self.forward_matrices = 0

    def add(self, kept, forward, matrices=(), copies=2):
        """One unit (a Transformer or ResNet block); ``matrices``: the heads x queries x keys
        of each of its attentions, ``copies`` of each kept for the backward pass."""
        self.kept += kept
        self.block = max(self.block, kept)
        self.forward = max(self.forward, forward)
        self.matrices += copies * sum(matrices)
        # In flight backward through one unit: the gradients of its logits and probabilities.
        self.block_matrices = max(self.block_matrices, 2 * sum(matrices))
        self.forward_matrices = max(self.forward_matrices, 3 * max(matrices, default=0))


def _resnet_tally(tally, side, channels, stages, width_factor, style, heads=None):
    """Add a BiT (``style="bit"``, pre-activation), hybrid (post-activation) or AxialResNet
    (``"axial"``: the hybrid's unit, its 3x3 convolution a column and a row attention of
    ``heads`` heads) to ``tally``; return its output side and channels.

    A GroupNorm keeps its input, output and ReLU output (3 maps of its size); a hybrid unit's
    un-activated norms (gn3, gn_proj) keep 2, and its output (after the ReLU) 1. An axial
    attention keeps its projection to 2C and its GroupNorm, q, k, v laid out by heads (2C),
    its output and that one's GroupNorm (C each): 8C per position; of its matrices, besides
    the softmax's two, the relative logits' 2 C / heads where heads are at most 8 channels
    wide (jax keeps both operands of each broadcast product q_o r^q_{p-o} and k_p r^k_{p-o} at
    full size for the backward pass), else 2 (wider heads take matmuls batched over the
    position under jax, and torch and TensorFlow keep the probabilities shifted to the 2L - 1
    offsets).
    """
    width = root_width(width_factor)
    half = (_ceil_half(side[0]), _ceil_half(side[1]))
    quarter = (_ceil_half(half[0]), _ceil_half(half[1]))
    area_half, area_quarter = half[0] * half[1], quarter[0] * quarter[1]
    if style == "bit":  # conv output and its padded copy, read by the max-pool
        tally.add(2 * width * area_half, side[0] * side[1] * channels + 2 * width * area_half)
    else:  # conv, GroupNorm, ReLU, then the pooled map (the first unit's input)
        tally.add(3 * width * area_half + width * area_quarter,
                  side[0] * side[1] * channels + 2 * width * area_half)
    image, side, channels = side, quarter, width
    for side_in, out, channels, features, stride in resnet_units(image, stages, width_factor):
        area_in, area_out = side_in[0] * side_in[1], out[0] * out[1]
        projection = channels != 4 * features or stride != 1
        forward = channels * area_in + 4 * features * area_out + 2 * features * area_in
        matrices, copies = (), 2
        if style == "bit":
            kept = 3 * (channels * area_in + features * area_in + features * area_out)
        else:
            kept = 3 * features * area_in + (2 + 2 * projection + 1) * 4 * features * area_out
            if style == "axial":  # two attentions, the pooled map (strided) and its ReLU
                kept += 2 * 8 * features * area_in + (1 + (stride != 1)) * features * area_out
                forward += 3 * features * area_in
                matrices = tuple(heads * area_in * length for length in side_in)
                head = features // heads
                copies = 2 + (2 * head if head <= 8 else 2)
            else:
                kept += 3 * features * area_out
        tally.add(kept, forward, matrices, copies)
        side, channels = out, 4 * features
    if style == "bit":  # norm-pre-head and its ReLU
        tally.add(3 * channels * side[0] * side[1], 2 * channels * side[0] * side[1])
    return side, channels


def _vit_tally(model, height, width):
    """(tally, blocks, what a block keeps, its input), per example, of a ViT, hybrid or
    Axial-ViT (a row and a column block per layer, on the grid with its class row)."""
    tally = _Tally()
    side, channels = (height, width), model.num_channels
    if model.resnet is not None:
        side, channels = _resnet_tally(
            tally, side, channels, model.resnet.get("num_layers", (3, 4, 9)),
            model.resnet.get("width_factor", 1), "hybrid")
    tokens, spans = token_spans(model, (side[0] // model.patch_size,
                                        side[1] // model.patch_size))
    dim, mlp = model.hidden_size, model.mlp_dim
    tally.add(0, side[0] * side[1] * channels + tokens * dim)  # the patch embedding
    block = tokens * (8 * dim + 3 * mlp)
    for _ in range(model.num_layers):
        for span in spans:
            tally.add(block, tokens * max(4 * dim, 2 * dim + 2 * mlp),
                      [model.num_heads * tokens * span])
    tally.add(2 * tokens * dim, 2 * tokens * dim)  # the final LayerNorm
    return tally, model.num_layers * len(spans), block, tokens * dim


def _resnet_params(channels, side, stages, width_factor, style, heads=None):
    """Weights and output channels of a BiT, hybrid or AxialResNet (``style`` as
    ``_resnet_tally``) on images of ``side``: an axial attention holds its (C, 2C)
    projection, its (2C / heads, 2L - 1) relative table and GroupNorms of 2C and C."""
    width = root_width(width_factor)
    count = 49 * channels * width + (0 if style == "bit" else 2 * width)
    out_channels = width
    for side_in, _, channels, features, stride in resnet_units(side, stages, width_factor):
        count += channels * features + 4 * features**2  # conv1, conv3
        if style == "axial":  # gn1, gn3, the column and the row attention
            count += 10 * features + sum(
                2 * features**2 + 2 * (features // heads) * (2 * length - 1) + 6 * features
                for length in side_in)
        else:  # conv2, gn2, then gn1 and gn3
            count += 9 * features**2 + 2 * features
            count += 2 * channels + 2 * features if style == "bit" else 10 * features
        if channels != 4 * features or stride != 1:
            count += channels * 4 * features + (0 if style == "bit" else 8 * features)
        out_channels = 4 * features
    return count, out_channels


def _position_params(model, grid, spans):
    dim, layers = model.hidden_size, model.num_layers
    if model.position_embedding == "relative":  # a (2 span - 1, heads, head width) table each
        return layers * sum(2 * span - 1 for span in spans) * dim
    if model.position_embedding == "none":
        return 0
    grid = model.position_embedding_grid or grid
    table = (grid[0] * grid[1] + (model.classifier == "token")) * dim
    if model.position_embedding == "learned_2d":
        table = (grid[0] + grid[1]) * (dim // 2) + (dim if model.classifier == "token" else 0)
    return table * (layers if model.position_embedding_placement == "every_layer" else 1)


def _head_params(width, model):
    count = 0
    if getattr(model, "representation_size", None) is not None:
        count += (width + 1) * model.representation_size
        width = model.representation_size
    return count + (0 if model.num_classes is None else (width + 1) * model.num_classes)


def _parameters(model, height, width):
    """The weights of a model's configuration, counted without building it."""
    if isinstance(model, keras.Model):
        return model.count_params()
    if not hasattr(model, "hidden_size"):  # BiT (a final GroupNorm) or AxialResNet
        axial = hasattr(model, "num_heads")
        count, channels = _resnet_params(
            model.num_channels, (height, width), model.block_units, model.width_factor,
            "axial" if axial else "bit", getattr(model, "num_heads", None))
        return count + (0 if axial else 2 * channels) + _head_params(channels, model)
    count, channels, side = 0, model.num_channels, (height, width)
    if model.resnet is not None:
        count, channels = _resnet_params(channels, side, model.resnet.get("num_layers", (3, 4, 9)),
                                         model.resnet.get("width_factor", 1), "hybrid")
    dim, mlp = model.hidden_size, model.mlp_dim
    grid = (height // model.stride, width // model.stride)
    _, spans = token_spans(model, grid)
    count += model.patch_size**2 * channels * dim + dim + (model.classifier == "token") * dim
    count += _position_params(model, grid, spans) + 2 * dim + _head_params(dim, model)
    block = 4 * dim + 4 * (dim + 1) * dim + 2 * dim * mlp + mlp + dim
    return count + model.num_layers * len(spans) * block


def _bytes(dtype):
    return {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2}[
        keras.backend.standardize_dtype(dtype)]


def _resolve(model, image_size, dtype, overrides):
    """(configuration, model class, height, width, dtype policy) of a name or a built model."""
    if isinstance(model, str):
        num_classes = overrides.pop("num_classes", 1000)
        model_class, config = _configuration(
            model, 224 if image_size is None else image_size, num_classes, overrides)
        _check_covered(model_class)
        policy = keras.dtype_policies.get(dtype or keras.config.dtype_policy())
        return config, model_class, *_check_size(config, image_size), policy
    if overrides:
        raise TypeError(f"memory takes {', '.join(sorted(overrides))} only with a model name; a "
                        "built model has its configuration already.")
    _check_covered(type(model))
    policy = keras.dtype_policies.get(dtype) if dtype is not None else model.dtype_policy
    return model, type(model), *_check_size(model, image_size), policy


def _check_covered(model_class):
    if model_class not in COVERED:
        raise TypeError(
            f"memory counts the keras_vit models {', '.join(c.__name__ for c in COVERED)} "
            f"(and their registered names), got {model_class.__name__}: its blocks are not in "
            "the count. Measure it with XLA instead: keras_vit.costs.memory.xla_memory(model, "
            "batch_size) under jax (jax.jit(step).lower(...).compile().memory_analysis())."
        )


def _activations(model, model_class, height, width, training, remat):
    """(activation elements, attention float32 elements) per example at the step's peak."""
    if issubclass(model_class, (ResNetV2, AxialResNet)):
        if remat:
            kind = "a BiT ResNetV2" if issubclass(model_class, ResNetV2) else "an AxialResNet"
            raise ValueError(f"remat=True rematerialises Transformer blocks; {kind} has none. "
                             "Use remat=False.")
        tally = _Tally()
        axial = issubclass(model_class, AxialResNet)
        _resnet_tally(tally, (height, width), model.num_channels, model.block_units,
                      model.width_factor, "axial" if axial else "bit",
                      getattr(model, "num_heads", None))
        blocks = block = block_input = 0
    else:
        tally, blocks, block, block_input = _vit_tally(model, height, width)
    if not training:
        return tally.forward, tally.forward_matrices
    if remat:  # block inputs only; one block recomputed, then the gradients in flight
        return (tally.kept - blocks * (block - block_input) + block + tally.block,
                2 * tally.block_matrices)
    return tally.kept + tally.block, tally.matrices + tally.block_matrices


def memory(model, image_size=None, batch_size=1, *, training=True, dtype=None, remat=None,
           optimizer="sgd", **overrides):
    """Peak device memory of one training (or inference) step, in bytes, with its parts.

    Counted from the architecture; see the module docstring for what each part holds and
    ``XLA_AGREEMENT`` for how it compares with what XLA allocates.

    Args:
        model: a ``VisionTransformer`` (plain or hybrid), a ``ResNetV2`` (BiT), an
            ``AxialVisionTransformer`` or ``AxialResNet``, or a registered name
            (``"ViT-H/14"``, ``"R50+ViT-B/16"``, ``"BiT-R152x2"``, ``"Axial-ViT-B/16"``,
            ``"AxialResNet50"``), counted without building. Other models raise a
            ``TypeError`` (measure them with ``xla_memory``).
        image_size: int or (height, width); by default the model's own, 224 for a name.
        batch_size: examples per step on the device.
        training: a training step (forward, backward, update) or inference alone.
        dtype: a Keras dtype policy (``"float32"``, ``"mixed_bfloat16"``, ``"bfloat16"``...); by
            default the model's (the global policy for a name).
        remat: rematerialised Transformer blocks (``remat=True`` of the model); by default the
            model's own setting (off for a name).
        optimizer: ``"sgd"`` (with momentum, the fine-tuning recipe) or ``"adamw"``
            (pre-training).
        **overrides: with a name only, the arguments of ``create_model`` (``num_classes``...).

    Returns:
        a ``MemoryCount``: bytes as an ``int`` (``.gib`` in GiB) and ``.parts``: ``weights``,
        ``gradients``, ``optimizer``, ``inputs``, ``activations``, ``attention``.

    Example (attention grows with the square of the tokens, so with the 4th power of the side):
    >>> small = memory("ViT-B/16", 224, 8, training=False)
    >>> large = memory("ViT-B/16", 448, 8, training=False)
    >>> round(large.parts["attention"] / small.parts["attention"], 1)
    15.9
    """
    if optimizer not in OPTIMIZER_SLOTS:
        raise ValueError(f"Unknown optimizer {optimizer!r}; use one of {sorted(OPTIMIZER_SLOTS)}.")
    if int(batch_size) < 0:
        raise ValueError(f"batch_size must be 0 or more, got {batch_size!r}.")
    config, model_class, height, width, policy = _resolve(model, image_size, dtype, overrides)
    if remat is None:
        remat = bool(getattr(config, "remat", False))
    if remat and training and getattr(config, "dropout_rate", 0):
        raise ValueError("remat=True needs dropout_rate=0 (the model refuses it otherwise); pass "
                         "dropout_rate=0.0 with the name, or remat=False.")
    variable, compute = _bytes(policy.variable_dtype), _bytes(policy.compute_dtype)
    weights = _parameters(config, height, width) * variable
    elements, matrices = _activations(config, model_class, height, width, training, remat)
    labels = (config.num_classes or 0) if training else 0
    return MemoryCount({
        "weights": weights,
        "gradients": weights if training else 0,
        "optimizer": OPTIMIZER_SLOTS[optimizer] * weights if training else 0,
        "inputs": batch_size * 4 * (height * width * config.num_channels + labels),
        "activations": batch_size * compute * elements,
        "attention": batch_size * 4 * matrices,
    })


def largest_batch(model, image_size=None, memory_gib=16, **options):
    """The largest batch whose step fits ``memory_gib`` GiB by ``memory`` (same options).

    Example (the paper's Fig. 12 reading: a ViT fits a larger batch than a ResNet):
    >>> largest_batch("ViT-B/16", 224, 16, training=False) > largest_batch(
    ...     "BiT-R152x2", 224, 16, training=False)
    True
    """
    fixed = memory(model, image_size, 0, **options)
    per_example = memory(model, image_size, 1, **options) - fixed
    budget = float(memory_gib) * GIB
    batch = int((budget - fixed) // per_example) if budget > fixed else 0
    if batch < 1:
        name = model if isinstance(model, str) else model.name
        raise ValueError(
            f"One example of {name} at {image_size or 'its size'} needs "
            f"{(fixed + per_example) / GIB:.2f} GiB ({fixed / GIB:.2f} GiB without the "
            f"activations), more than {memory_gib} GiB. Use a device with more memory, "
            "a smaller image size, mixed precision (dtype='mixed_bfloat16'), "
            "remat=True, or optimizer='sgd'."
        )
    return batch


def xla_memory(model, batch_size, *, training=True, optimizer="sgd"):
    """What XLA allocates for ``model``'s compiled step under jax: ``argument + output - alias
    + temp`` bytes of ``memory_analysis()``, the state donated as Keras's jax trainer does.

    The step is Keras's: ``stateless_call``, ``jax.value_and_grad`` of the softmax
    cross-entropy, ``optimizer.stateless_apply`` (SGD with momentum 0.9, or AdamW). Needs the
    jax backend; compiles for the default jax device (the CPU here).
    """
    if keras.backend.backend() != "jax":
        raise RuntimeError("xla_memory compiles with jax; set KERAS_BACKEND=jax.")
    import jax

    trainable = [v.value for v in model.trainable_variables]
    frozen = [v.value for v in model.non_trainable_variables]
    shape = (batch_size, *model.input_shape[1:])
    images = jax.ShapeDtypeStruct(shape, "float32")
    if not training:
        def predict(trainable, frozen, images):
            return model.stateless_call(trainable, frozen, images)[0]
        compiled = jax.jit(predict).lower(trainable, frozen, images).compile()
    else:
        step, slots = _train_step(model, optimizer, jax)
        labels = jax.ShapeDtypeStruct((batch_size, model.num_classes), "float32")
        compiled = step.lower(trainable, frozen, slots, images, labels).compile()
    analysis = compiled.memory_analysis()
    return (analysis.argument_size_in_bytes + analysis.output_size_in_bytes
            - analysis.alias_size_in_bytes + analysis.temp_size_in_bytes)


def _train_step(model, optimizer, jax):
    optimizer = (keras.optimizers.SGD(0.01, momentum=0.9) if optimizer == "sgd"
                 else keras.optimizers.AdamW(1e-3))
    optimizer.build(model.trainable_variables)
    slots = [v.value for v in optimizer.variables]
    loss = keras.losses.CategoricalCrossentropy(from_logits=True)

    def step(trainable, frozen, slots, images, labels):
        def objective(trainable):
            logits, frozen_after = model.stateless_call(trainable, frozen, images, training=True)
            return loss(labels, logits), frozen_after
        (value, frozen), grads = jax.value_and_grad(objective, has_aux=True)(trainable)
        trainable, slots = optimizer.stateless_apply(slots, grads, trainable)
        return value, trainable, frozen, slots

    return jax.jit(step, donate_argnums=(0, 1, 2)), slots


# The models and sizes of the paper's Fig. 12 (right), plus the hybrid R50+ViT-B/16.
FIGURE_12_MODELS = ("ViT-B/32", "ViT-B/16", "ViT-L/16", "ViT-H/14", "R50+ViT-B/16",
                    "BiT-R50x1", "BiT-R152x2")
FIGURE_12_SIZES = (224, 288, 384, 448, 512)


def figure_12(models=FIGURE_12_MODELS, sizes=FIGURE_12_SIZES, memory_gib=16, **options):
    """The largest batch per device of ``memory_gib`` GiB, by model and image size (Fig. 12).

    The paper measured inference on a 16 GiB TPUv3 core (``training=False``); the options are
    those of ``memory``. A size the model's stride does not divide is rounded to the nearest
    multiple (ViT-H/14 at 384 px runs at 378).

    Returns:
        ``{model: [(image_size, batch), ...]}``, batch 0 where one example does not fit.

    Example:
    >>> figure_12(["ViT-B/32"], [224, 512], training=False)
    {'ViT-B/32': [(224, 6735), (512, 818)]}
    """
    table = {}
    for name in models:
        stride = getattr(_configuration(name, 224, 1000, {})[1], "stride", 1)
        row = []
        for size in sizes:
            size = max(stride, round(size / stride) * stride)
            try:
                row.append((size, largest_batch(name, size, memory_gib, **options)))
            except ValueError:
                row.append((size, 0))
        table[name] = row
    return table


def plan_batch(model, image_size, batch_size, memory_gib, *, devices=1, dtype=None,
               optimizer="sgd", **options):
    """Split a global batch into micro-batches whose step fits each device's memory.

    Keeps ``batch_size`` (one update averages it) and picks the smallest gradient accumulation
    whose micro-batch (``batch_size / accumulation``) divides over ``devices`` into per-device
    batches that ``largest_batch`` lets into ``memory_gib`` GiB.

    Returns:
        ``{"micro_batch": ..., "accumulation": ..., "per_device": ...}``; ``micro_batch`` is
        the global micro-batch (all devices together).

    Example (the published ViT-B/16 fine-tune, batch 512 at 384 px, on one TPU v5e chip and on
    eight):
    >>> plan_batch("ViT-B/16", 384, 512, 16, dtype="mixed_bfloat16")
    {'micro_batch': 16, 'accumulation': 32, 'per_device': 16}
    >>> plan_batch("ViT-B/16", 384, 512, 16, devices=8, dtype="mixed_bfloat16")
    {'micro_batch': 128, 'accumulation': 4, 'per_device': 16}
    """
    if isinstance(batch_size, bool) or int(batch_size) != batch_size or batch_size < 1:
        raise ValueError(f"The batch size must be a positive integer, got {batch_size!r}.")
    if int(devices) < 1:
        raise ValueError(f"devices must be at least 1, got {devices!r}.")
    batch, devices = int(batch_size), int(devices)
    fits = largest_batch(model, image_size, memory_gib, dtype=dtype, optimizer=optimizer,
                         **options)
    for accumulation in range(1, batch + 1):
        micro = batch // accumulation
        if batch % accumulation == 0 and micro % devices == 0 and micro // devices <= fits:
            return {"micro_batch": micro, "accumulation": accumulation,
                    "per_device": micro // devices}
    raise ValueError(
        f"No micro-batch of the global batch {batch} splits evenly over {devices} devices with "
        f"at most {fits} examples each (the most that fit {memory_gib} GiB). Use a global batch "
        f"that is a multiple of {devices} (e.g. {max(devices, batch // devices * devices)}), or "
        "set --accumulation yourself.")
