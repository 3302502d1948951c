"""Peak device memory of a training or inference step, counted from the architecture (Fig. 12).

``memory`` adds up, in bytes, what a compiled step holds at its peak:

- ``weights``: every parameter, in the variable dtype (float32 under mixed precision);
- ``gradients`` and ``optimizer`` (training): one gradient per parameter, and the optimizer's
  slots (``OPTIMIZER_SLOTS``), in the variable dtype;
- ``inputs``: the batch of images (and one-hot labels when training), in float32;
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

Each of these numbers is a named constant below. Not counted: dropout masks (ViT-L, ViT-H and
R50+ViT-B/16 train with dropout 0.1), XLA's layout copies and scratch buffers, and the
framework's own overhead. Flash attention keeps no N^2 matrix: ``flash_attention=True``
counts the ``attention`` part as 0.

Agreement with XLA (``XLA_AGREEMENT``; ``python benchmarks/memory.py --xla``; the machine and
versions in docs/any-size-and-compute.md): on eleven small random ViT, hybrid, BiT, Axial-ViT
and AxialResNet configurations at two batch sizes each, this count over what XLA:CPU allocates
for the compiled jax step (argument + output - alias + temp bytes) was 0.76-1.35 for training
steps (ViTs 0.80-1.02, hybrids 1.23-1.35, BiT 1.06-1.15, Axial-ViTs 0.76-0.97, AxialResNets
1.08-1.14) and 0.52-1.43 for inference (Axial-ViTs 0.52-1.09, AxialResNets 0.74-0.86).
XLA:GPU and XLA:TPU fuse and lay out buffers differently from XLA:CPU. On one H200 (jax,
mixed bfloat16, AdamW; docs/results.md) the count with ``flash_attention=True`` was 0.99-1.03
of the measured peak of ViT-Ti/16, S/16 and B/16 training steps (batches 64-960); XLA's own
attention at batch 960 peaked at 0.85 of the count with the matrices. No TPU was measured:
treat the count as an estimate within about +-50 % there, and leave a margin when you pick a
batch. XLA:CPU did not shrink the step of a ``remat=True`` ViT at all (our remat count
was 0.42-0.44 of its allocation).

Example (ViT-B/16 at 384 px, the published fine-tune):
>>> count = memory("ViT-B/16", 384, 32, optimizer="sgd")
>>> sorted(count.parts)
['activations', 'attention', 'gradients', 'inputs', 'optimizer', 'weights']
>>> round(count.parts["weights"] / 2**20)  # 86.9M float32 weights
331
"""

from typing import NamedTuple

import keras

from keras_vit.costs.architecture import (
    ceil_half,
    dtype_policy,
    label,
    read,
    resnet_units,
    root_output,
    token_spans,
)
from keras_vit.costs.parameters import count_parameters
from keras_vit.layers.resnet import EXPANSION, root_width
from keras_vit.models.description import Description
from keras_vit.models.registry import (
    AXIAL_RESNET,
    AXIAL_VIT,
    BIT,
    HYBRID,
    MODEL_CLASSES,
    VIT,
)

GIB = 2**30
FLOAT32_BYTES = 4  # images, labels and the attention matrices (softmax runs in float32)
OPTIMIZER_SLOTS = {"sgd": 1, "adamw": 2}  # SGD's momentum; AdamW's first and second moments
# memory() / XLA:CPU, lowest and highest over the 44 steps of ``benchmarks/memory.py --xla``.
XLA_AGREEMENT = {"training": (0.76, 1.35), "inference": (0.52, 1.43)}

# Kept for the backward pass, per token (Transformer) or per position (ResNet), in multiples of
# the layer's width: a LayerNorm its input and output; q, k and v; the heads' output before the
# out projection; the MLP's hidden layer before, inside (the tanh of the approximate GELU) and
# after the GELU (in mlp_dim). A GroupNorm followed by a ReLU its input, output and ReLU
# output; one without (a hybrid unit's gn3 and gn_proj) its input and output; a hybrid unit
# its output after the residual ReLU. An AxialResNet attention 8 C: its projection to 2C and
# that one's GroupNorm (2C each), q, k, v laid out by heads (2C), its output and that one's
# GroupNorm (C each).
LAYER_NORM_KEPT = 2
QKV_KEPT = 3
ATTENTION_OUTPUT_KEPT = 1
MLP_KEPT = 3
GROUP_NORM_KEPT = 3
NORM_WITHOUT_RELU_KEPT = 2
UNIT_OUTPUT_KEPT = 1
AXIAL_ATTENTION_KEPT = 8
# Attention matrices (heads x queries x keys, float32): a softmax keeps its exponentials and
# probabilities for the backward pass, holds its logits too at its forward peak; the gradients
# of one unit's logits and probabilities are in flight backward. An AxialResNet attention with
# heads at most NARROW_HEAD channels wide keeps 2 (C / heads) more for its relative logits,
# a wider one 2.
SOFTMAX_KEPT = 2
SOFTMAX_PEAK = 3
MATRIX_GRADIENTS = 2
NARROW_HEAD = 8
RELATIVE_MATRICES_OF_WIDE_HEADS = 2

# The model classes memory() counts (exact classes: a subclass may change the blocks).
COVERED = MODEL_CLASSES


class MemoryCount(int):
    """A byte count (an ``int``) with its per-part breakdown ``parts`` (name -> bytes)."""

    def __new__(cls, parts):
        count = super().__new__(cls, sum(parts.values()))
        count.parts = dict(parts)
        return count

    @property
    def gib(self):
        return self / GIB


class _Tally:
    """Per-example elements kept for the backward pass, of the largest unit (a block's
    gradients in flight) and at the forward peak: activations, and float32 attention matrices
    (the exponentials and probabilities of a softmax kept, its logits too at the peak)."""

    def __init__(self):
        self.kept = self.block = self.forward = 0
        self.matrices = self.block_matrices = self.forward_matrices = 0

    def add(self, kept, forward, matrices=(), copies=SOFTMAX_KEPT):
        """One unit (a Transformer or ResNet block); ``matrices``: the heads x queries x keys
        of each of its attentions, ``copies`` of each kept for the backward pass."""
        self.kept += kept
        self.block = max(self.block, kept)
        self.forward = max(self.forward, forward)
        self.matrices += copies * sum(matrices)
        self.block_matrices = max(self.block_matrices, MATRIX_GRADIENTS * sum(matrices))
        self.forward_matrices = max(self.forward_matrices,
                                    SOFTMAX_PEAK * max(matrices, default=0))


def _area_half(side):
    return ceil_half(side[0]) * ceil_half(side[1])


def _root_forward(side, channels, width):
    """The root's forward peak: the image and the convolution's output with its next copy."""
    return side[0] * side[1] * channels + 2 * width * _area_half(side)


def _bit_root(tally, side, channels, width):
    """BiT's root keeps the convolution's output and its padded copy, which the max-pool
    reads."""
    tally.add(2 * width * _area_half(side), _root_forward(side, channels, width))


def _post_activation_root(tally, side, channels, width):
    """A post-activation root (hybrid, axial) keeps its GroupNorm and ReLU, then the pooled
    map."""
    quarter = root_output(side)
    tally.add(GROUP_NORM_KEPT * width * _area_half(side) + width * quarter[0] * quarter[1],
              _root_forward(side, channels, width))


def _bit_end(tally, out, channels):
    """BiT's norm-pre-head and its ReLU."""
    area = out[0] * out[1]
    tally.add(GROUP_NORM_KEPT * channels * area, 2 * channels * area)


def _no_end(tally, out, channels):
    """A post-activation ResNet's last unit normalised its output already."""


def _bit_unit(unit, heads):
    """BiT's unit (pre-activation): three GroupNorms and ReLUs; (kept, matrices, copies)."""
    kept = GROUP_NORM_KEPT * ((unit.channels + unit.features) * unit.area_in
                              + unit.features * unit.area_out)
    return kept, 0, (), SOFTMAX_KEPT


def _post_activation(unit):
    """What a post-activation unit keeps besides its 3x3 convolution's place: gn1, gn3, gn_proj
    and the output after the residual ReLU."""
    unkept = NORM_WITHOUT_RELU_KEPT * (1 + unit.projection) + UNIT_OUTPUT_KEPT
    return GROUP_NORM_KEPT * unit.features * unit.area_in + unkept * unit.width_out * unit.area_out


def _hybrid_unit(unit, heads):
    """A hybrid's unit (post-activation), its 3x3 convolution's GroupNorm and ReLU."""
    kept = _post_activation(unit) + GROUP_NORM_KEPT * unit.features * unit.area_out
    return kept, 0, (), SOFTMAX_KEPT


def _axial_unit(unit, heads):
    """An AxialResNet's unit: the hybrid's, its 3x3 convolution a column and a row attention of
    ``heads`` heads, the pooled map (strided) and its ReLU."""
    features, area_in = unit.features, unit.area_in
    kept = _post_activation(unit) + 2 * AXIAL_ATTENTION_KEPT * features * area_in
    kept += (1 + (unit.stride != 1)) * features * unit.area_out
    matrices = tuple(heads * area_in * length for length in unit.side_in)
    head = features // heads
    copies = SOFTMAX_KEPT + (2 * head if head <= NARROW_HEAD else RELATIVE_MATRICES_OF_WIDE_HEADS)
    return kept, 3 * features * area_in, matrices, copies


# Kind of ResNet (a family's stem, ``keras_vit.models.family.STEMS``) -> (its root's tally;
# what its unit keeps: (kept, more at the forward peak, attention matrices, copies of each
# kept); what it adds after its last unit).
UNITS = {"bit": (_bit_root, _bit_unit, _bit_end),
         "hybrid": (_post_activation_root, _hybrid_unit, _no_end),
         "axial": (_post_activation_root, _axial_unit, _no_end)}


class _Unit:
    """One bottleneck unit's sides, widths and areas."""

    def __init__(self, side_in, out, channels, features, stride):
        self.side_in, self.channels, self.features = side_in, channels, features
        self.stride = stride
        self.area_in, self.area_out = side_in[0] * side_in[1], out[0] * out[1]
        self.width_out = EXPANSION * features
        self.projection = channels != self.width_out or stride != 1


def _unit(tally, kind, heads, unit):
    """One bottleneck unit of a ResNet of ``kind`` (``UNITS``)."""
    kept, more, matrices, copies = UNITS[kind][1](unit, heads)
    forward = (unit.channels * unit.area_in + unit.width_out * unit.area_out
               + 2 * unit.features * unit.area_in + more)
    tally.add(kept, forward, matrices, copies)


def _resnet_tally(tally, side, channels, stages, width_factor, kind, heads=None):
    """Add a ResNet of ``kind`` (``UNITS``) to ``tally``; return its output side and channels."""
    root, _, end = UNITS[kind]
    width = root_width(width_factor)
    root(tally, side, channels, width)
    out, channels = root_output(side), width
    for side_in, out, channels, features, stride in resnet_units(side, stages, width_factor):
        _unit(tally, kind, heads, _Unit(side_in, out, channels, features, stride))
        channels = EXPANSION * features
    end(tally, out, channels)
    return out, channels


def _vit_tally(config, height, width):
    """(tally, blocks, what a block keeps, its input), per example, of a ViT or Axial-ViT."""
    return _transformer_tally(_Tally(), config, (height, width), config.patches.num_channels)


def _hybrid_tally(config, height, width):
    """As ``_vit_tally``, of a hybrid: its ResNet stem, then the ViT on its feature map."""
    tally, stem = _Tally(), config.stem
    side, channels = _resnet_tally(tally, (height, width), config.patches.num_channels,
                                   stem.num_layers, stem.width_factor, config.family.stem)
    return _transformer_tally(tally, config, side, channels)


def _transformer_tally(tally, config, side, channels):
    """Add a ViT on a (``side``, ``channels``) input to ``tally`` (an Axial-ViT has a row and a
    column block per layer, on the grid with its class row); ``_vit_tally``'s answer."""
    encoder, patch = config.encoder, config.patches.patch_size
    tokens, spans = token_spans(config, (side[0] // patch, side[1] // patch))
    dim, mlp = encoder.hidden_size, encoder.mlp_dim
    tally.add(0, side[0] * side[1] * channels + tokens * dim)  # the patch embedding
    per_token = (2 * LAYER_NORM_KEPT + QKV_KEPT + ATTENTION_OUTPUT_KEPT) * dim + MLP_KEPT * mlp
    block = tokens * per_token
    # The forward peak of a block: four D-wide tensors around the attention, or the residual
    # stream and its LayerNorm with the MLP's hidden layer before and after the GELU.
    peak = tokens * max(4 * dim, 2 * dim + 2 * mlp)
    for _ in range(encoder.num_layers):
        for span in spans:
            tally.add(block, peak, [encoder.num_heads * tokens * span])
    final = LAYER_NORM_KEPT * tokens * dim  # the final LayerNorm
    tally.add(final, final)
    return tally, encoder.num_layers * len(spans), block, tokens * dim


def _bytes(dtype):
    return {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2}[
        keras.backend.standardize_dtype(dtype)]


def _check_covered(model):
    if not isinstance(model, (str, Description)) and type(model) not in COVERED:
        raise TypeError(
            f"memory counts the keras_vit models {', '.join(c.__name__ for c in COVERED)} "
            f"(and their descriptions and registered names), got {type(model).__name__}: its "
            "blocks are "
            "not in the count. Measure it with XLA instead: "
            "keras_vit.costs.memory.xla_memory(model, batch_size) under jax "
            "(jax.jit(step).lower(...).compile().memory_analysis())."
        )


def _resnet_model_tally(config, height, width):
    """(tally, blocks, what a block keeps, its input) of a BiT ResNet or AxialResNet, which has
    no Transformer block."""
    tally, stages = _Tally(), config.stages
    _resnet_tally(tally, (height, width), config.num_channels, stages.block_units,
                  stages.width_factor, config.family.stem,
                  getattr(config.axial, "num_heads", None))
    return tally, 0, 0, 0


def _encoder_settings(config):
    return config.encoder.remat, config.encoder.dropout_rate


def _no_encoder(config):
    return False, 0.0


# Family (``keras_vit.models.family.Family``) -> (its tally, its (remat, dropout rate)).
TALLIES = {
    VIT: (_vit_tally, _encoder_settings),
    HYBRID: (_hybrid_tally, _encoder_settings),
    BIT: (_resnet_model_tally, _no_encoder),
    AXIAL_VIT: (_vit_tally, _encoder_settings),
    AXIAL_RESNET: (_resnet_model_tally, _no_encoder),
}


def _activations(description, height, width, training, remat):
    """(activation elements, attention float32 elements) per example at the step's peak."""
    tally, blocks, block, block_input = TALLIES[description.family][0](description, height, width)
    if remat and not blocks:
        family = description.family.name
        raise ValueError(f"remat=True rematerialises Transformer blocks; "
                         f"{'an' if family[0] in 'AEIOU' else 'a'} {family} has none. Use "
                         "remat=False.")
    if not training:
        return tally.forward, tally.forward_matrices
    if remat:  # block inputs only; one block recomputed (its matrices as many as the
        # gradients in flight through it), then the gradients in flight
        return (tally.kept - blocks * (block - block_input) + block + tally.block,
                2 * tally.block_matrices)
    return tally.kept + tally.block, tally.matrices + tally.block_matrices


def _settings(description):
    """(remat, dropout rate, classes, channels) of a description."""
    head = description.head
    classes = 0 if head is None or head.num_classes is None else head.num_classes
    return (*TALLIES[description.family][1](description), classes, description.num_channels)


def memory(model, image_size=None, batch_size=1, *, training=True, dtype=None, remat=None,
           optimizer="sgd", flash_attention=False, **overrides):
    """Peak device memory of one training (or inference) step, in bytes, with its parts.

    Counted from the architecture; see the module docstring for what each part holds and
    ``XLA_AGREEMENT`` for how it compares with what XLA allocates.

    Args:
        model: a keras_vit backbone or classifier of any family (``COVERED``); or, counted
            without building, a registered name (``"ViT-H/14"``, ``"R50+ViT-B/16"``,
            ``"BiT-R152x2"``, ``"Axial-ViT-B/16"``, ``"AxialResNet50"``) or a description
            (``ViTConfig``, ``ResNetConfig``). Other models raise a ``TypeError`` (measure them
            with ``xla_memory``).
        image_size: int or (height, width); by default the model's own, 224 for a name.
        batch_size: examples per step on the device.
        training: a training step (forward, backward, update) or inference alone.
        dtype: a Keras dtype policy (``"float32"``, ``"mixed_bfloat16"``, ``"bfloat16"``...); by
            default the model's (the global policy for a name).
        remat: rematerialised Transformer blocks (``remat=True`` of the model); by default the
            model's own setting (off for a name).
        optimizer: ``"sgd"`` (with momentum, the fine-tuning recipe) or ``"adamw"``
            (pre-training).
        flash_attention: the step runs a flash kernel (cuDNN on a GPU under mixed precision,
            ``attention_implementation="auto"`` or ``"flash"``), which keeps no attention
            matrix: the ``attention`` part is 0. Only for models whose attention adds no bias
            (plain and hybrid ViTs with 1-D or 2-D position embeddings).
        **overrides: with a name, the arguments of ``create_model`` (``num_classes``...); with
            a description, the settings its ``replace`` takes.

    Returns:
        a ``MemoryCount``: bytes as an ``int`` (``.gib`` in GiB) and ``.parts``: ``weights``,
        ``gradients``, ``optimizer``, ``inputs``, ``activations``, ``attention``.

    Example (attention grows with the square of the tokens, so with the 4th power of the side):
    >>> small = memory("ViT-B/16", 224, 8, training=False)
    >>> large = memory("ViT-B/16", 448, 8, training=False)
    >>> round(large.parts["attention"] / small.parts["attention"], 1)
    15.9
    """
    description, height, width = _read_checked(model, image_size, overrides, batch_size,
                                               optimizer, flash_attention)
    policy = dtype_policy(model, dtype)
    model_remat, dropout_rate, num_classes, num_channels = _settings(description)
    remat = model_remat if remat is None else remat
    if remat and training and dropout_rate:
        raise ValueError("remat=True needs dropout_rate=0 (the model refuses it otherwise); pass "
                         "dropout_rate=0.0 with the name, or remat=False.")
    variable, compute = _bytes(policy.variable_dtype), _bytes(policy.compute_dtype)
    weights = count_parameters(description, height, width) * variable
    elements, matrices = _activations(description, height, width, training, remat)
    labels = num_classes if training else 0
    return MemoryCount({
        "weights": weights,
        "gradients": weights if training else 0,
        "optimizer": OPTIMIZER_SLOTS[optimizer] * weights if training else 0,
        "inputs": batch_size * FLOAT32_BYTES * (height * width * num_channels + labels),
        "activations": batch_size * compute * elements,
        "attention": 0 if flash_attention else batch_size * FLOAT32_BYTES * matrices,
    })


def _read_checked(model, image_size, overrides, batch_size, optimizer, flash_attention):
    """``read``'s (description, height, width), after refusing what ``memory`` cannot count."""
    if optimizer not in OPTIMIZER_SLOTS:
        raise ValueError(f"Unknown optimizer {optimizer!r}; use one of {sorted(OPTIMIZER_SLOTS)}.")
    if int(batch_size) < 0:
        raise ValueError(f"batch_size must be 0 or more, got {batch_size!r}.")
    _check_covered(model)
    description, height, width = read(model, image_size, overrides, "memory")
    if flash_attention and not description.flash_capable:
        raise ValueError(f"flash_attention=True counts a ViT whose attention adds no bias; "
                         f"{label(model)}'s attention is axial, adds relative-position logits or "
                         f"is absent (a ResNet): count it with flash_attention=False.")
    return description, height, width


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
        classes = model.config.head.num_classes
        labels = jax.ShapeDtypeStruct((batch_size, classes), "float32")
        compiled = step.lower(trainable, frozen, slots, images, labels).compile()
    analysis = compiled.memory_analysis()
    return (analysis.argument_size_in_bytes + analysis.output_size_in_bytes
            - analysis.alias_size_in_bytes + analysis.temp_size_in_bytes)


class XlaComparison(NamedTuple):
    """One step counted two ways: ``count``, ``memory``'s bytes, and ``xla``, what XLA
    allocates for the compiled step (``xla_memory``; ``None`` under a backend other than jax)."""

    name: str
    batch_size: int
    count: int
    xla: int | None

    @property
    def ratio(self):
        """``count / xla``: above 1 the count over-estimates; ``None`` without XLA's count."""
        return None if self.xla is None else self.count / self.xla


def xla_comparison(models, batch_sizes=(8, 16), *, training=False, optimizer="sgd"):
    """``memory``'s count beside XLA's own count of the same compiled step, for built models.

    How far the estimate is off, shown rather than asserted: each model at each batch size, the
    inference step (``training=False``) or a training step. XLA's count needs the jax backend
    (``xla_memory``); under tensorflow or torch each row's ``xla`` (and ``ratio``) is ``None``.

    Args:
        models: ``{name: model}``, keras_vit models that ``memory`` counts (small ones compile
            in seconds on a CPU).
        batch_sizes: the batches to compile each step for.
        training, optimizer: as for ``memory`` and ``xla_memory``.

    Returns:
        a list of ``XlaComparison(name, batch_size, count, xla)``, model by model.

    Example:
    >>> from keras_vit import ViTImageClassifier
    >>> model = ViTImageClassifier(image_size=16, patch_size=8, hidden_size=8, num_layers=1,
    ...                            num_heads=2, mlp_dim=16, num_classes=3)
    >>> rows = xla_comparison({"tiny ViT": model}, [2, 4])
    >>> [(row.name, row.batch_size) for row in rows], rows[0].count == memory(model, None, 2,
    ...                                                                      training=False)
    ([('tiny ViT', 2), ('tiny ViT', 4)], True)
    """
    jax_backend = keras.backend.backend() == "jax"
    rows = []
    for name, model in models.items():
        for batch in batch_sizes:
            count = memory(model, None, batch, training=training, optimizer=optimizer)
            xla = (xla_memory(model, batch, training=training, optimizer=optimizer)
                   if jax_backend else None)
            rows.append(XlaComparison(name, int(batch), int(count), xla))
    return rows


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
