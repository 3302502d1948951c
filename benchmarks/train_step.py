"""Training-step speed of keras_vit on each Keras backend against timm's VisionTransformer.

One command, one table:

    python benchmarks/train_step.py                         # the small ViT, CPU
    python benchmarks/train_step.py --model small-hybrid    # `keras-vit train`'s default
    python benchmarks/train_step.py --model vit-s16         # ViT-S/16 at 224 px
    python benchmarks/train_step.py --impl jax torch timm --rounds 5
    python benchmarks/train_step.py --impl "jax:steps_per_execution=8" "torch:jit_compile=true"
    python benchmarks/train_step.py --device gpu --model vit-s16 --batch 512   # bf16
    python benchmarks/train_step.py --ops               # add torch's ATen op counts per step
    python benchmarks/train_step.py --impl timm "timm:gelu=erf"   # timm with its exact GELU
    python benchmarks/train_step.py --impl tensorflow "tensorflow:mlp_dim=128" \
        'tensorflow:dtype_policy="mixed_bfloat16"'    # another shape, CPU mixed precision
    python benchmarks/train_step.py --impl jax flax timm --vit-jax ~/vision_transformer
    python benchmarks/train_step.py --impl torch timm jax flax --profile   # where the time goes
    python benchmarks/train_step.py --impl torch 'torch:projections="fused"'   # one q/k/v product

The step is the one `keras-vit train` runs: AdamW (weight decay 0.05) on a warmup + cosine
schedule, global-norm clipping at 1, softmax cross-entropy with label smoothing 0.1, accuracy
metric, batch 256 of 28x28x1 images for the small ViT (32x32x1 for the small hybrid). keras_vit
steps are `model.fit` on in-memory arrays; timm's are the loop a PyTorch user writes (eager, or
`torch.compile`d with `timm-compile`), with the same optimizer, clipping and loss, and the same
model; `flax` is what a JAX user writes instead, the official vit_jax model
(`models_vit.VisionTransformer`, from a snapshot of github.com/google-research/vision_transformer
that `--vit-jax` names: `git clone` it, the package index has no vit_jax) under an optax AdamW
step, jitted with its state donated. timm's GELU is set to the tanh approximation of keras_vit's
models (on this CPU torch's tanh GELU took about 2 ms more CPU time a layer, forward and backward
at batch 256, than its exact one; `timm:gelu=erf` for timm's default).

Each implementation lives in its own worker process (a Keras backend is fixed per process), built
and warmed up once. On the CPU the workers then take turns: every round times `--steps` steps of
each, in a rotating order, so that load from other programs on a shared machine hits all of them
alike; only ratios from one run mean anything there. The table gives the median and the range
over rounds, the CPU time a step took (all threads of the worker process; steadier than the
wall time under load, though threads spinning while they wait add to it), and the ratio to
timm with the range of the per-round ratios. The line "before:" names the CPU, the load average
and the versions; "after:" gives the load average at the end. On a GPU (`--device gpu`: mixed
bfloat16, the backends' fused attention) each worker runs its rounds alone, since a waiting
worker would keep its peak GPU memory, and the table adds images/s and MFU (model FLOPs, 3x the
forward's, over the GPU's dense bf16 peak).
"""

import argparse
import functools
import importlib.util
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

MODELS = {
    # `keras-vit train --model small-vit` (keras_vit.app.configs.SMALL_MODELS), the shape timm's
    # VisionTransformer has too; the command's default on Fashion-MNIST, the small hybrid, adds
    # a ResNet root that timm's ViT does not take.
    "small-vit": dict(name="ViT-Ti/7", image_size=28, channels=1, num_classes=10, hidden_size=64,
                    num_layers=3, num_heads=4, mlp_dim=256, classifier="gap", batch=256,
                    steps=20),
    # `keras-vit train`'s default on Fashion-MNIST (`--model small-hybrid`): the same encoder on
    # 2x2 patches of a half-width ResNet root (stride 4) at 32 px; timm's and vit_jax's hybrids
    # take the same root (their R+ViT-Ti/16 with another width and patch).
    "small-hybrid": dict(name="ViT-Ti/2", image_size=32, channels=1, num_classes=10,
                         hidden_size=64, num_layers=3, num_heads=4, mlp_dim=256,
                         classifier="gap", stem={"num_layers": [], "width_factor": 0.5},
                         batch=256, steps=20),
    "vit-s16": dict(name="ViT-S/16", image_size=224, channels=3, num_classes=1000,
                    hidden_size=384, num_layers=12, num_heads=6, mlp_dim=1536,
                    classifier="token", batch=8, steps=3),
}
KERAS_BACKENDS = ("jax", "tensorflow", "torch")
# Options that build the model rather than compile it.
SHAPE_KEYS = ("hidden_size", "num_layers", "num_heads", "mlp_dim", "classifier", "patch_size",
              "stem", "attention_implementation")
IMPLEMENTATIONS = (*KERAS_BACKENDS, "timm", "timm-compile", "flax")
# Dense (no sparsity) bf16 peaks in TFLOP/s, from the vendors' data sheets.
PEAK_BF16_TFLOPS = {"H100 80GB HBM3": 989.0, "H100 PCIe": 756.0, "H100 NVL": 835.0,
                    "H200": 989.0, "A100": 312.0, "L4": 121.0, "A10G": 70.0}
LEARNING_RATE, WEIGHT_DECAY, LABEL_SMOOTHING, CLIPNORM = 4e-3, 0.05, 0.1, 1.0
# timm's GELU: by default the tanh approximation, as keras_vit's models (approximate_gelu=True,
# the official checkpoints'); "timm:gelu=erf" is timm's own default, the exact GELU.
GELU = {"tanh": "tanh", "erf": "none"}
# What each implementation imports, and how to install it.
REQUIREMENTS = {"jax": ("jax", "pip install jax"),
                "tensorflow": ("tensorflow", "pip install tensorflow-cpu (tensorflow on a GPU)"),
                "torch": ("torch", "pip install torch"),
                "timm": ("timm", "pip install torch && pip install --no-deps timm"),
                "timm-compile": ("timm", "pip install torch && pip install --no-deps timm"),
                "flax": ("flax", "pip install flax optax, and --vit-jax DIR, a clone of "
                         "github.com/google-research/vision_transformer")}


def train_macs(spec):
    """Multiply-adds per image of the forward pass (the matrix products and, for a hybrid, its
    root's 7x7 convolution; a step is ~3x)."""
    patch, size, channels = int(spec["name"].split("/")[1]), spec["image_size"], spec["channels"]
    root = 0
    if spec.get("stem"):
        _check_root(spec["stem"])
        width = int(64 * spec["stem"]["width_factor"])
        root = (size // 2) ** 2 * 7 * 7 * channels * width
        size, channels = size // 4, width
    grid = (size // patch) ** 2
    tokens = grid + (spec["classifier"] == "token")
    d, m = spec["hidden_size"], spec["mlp_dim"]
    block = tokens * (4 * d * d + 2 * d * m) + 2 * tokens * tokens * d
    return root + grid * patch**2 * channels * d + spec["num_layers"] * block \
        + d * spec["num_classes"]


def _check_root(stem):
    if stem.get("num_layers"):
        raise ValueError("The step benchmark's hybrids are the ResNet root alone (stem "
                         f"num_layers []), got {stem['num_layers']}: add the stages to timm's "
                         "and vit_jax's models here first.")


def _data(spec, batch, steps, channels_last):
    import numpy as np

    rng = np.random.default_rng(0)
    size, channels = spec["image_size"], spec["channels"]
    shape = (batch * steps, size, size, channels) if channels_last else \
        (batch * steps, channels, size, size)
    images = rng.uniform(-1, 1, shape).astype("float32")
    labels = rng.integers(0, spec["num_classes"], batch * steps)
    return images, labels


# ---------------------------------------------------------------------------------------------
# Workers: each answers "go" on stdin with one JSON line of seconds per step on stdout.


def keras_model(spec, image_size=None, **overrides):
    """keras_vit's model of ``spec``'s shape (at ``image_size``, by default the spec's);
    ``overrides``: ``create_model`` arguments over the spec's (``dtype``,
    ``attention_implementation``...)."""
    from keras_vit import create_model

    arguments = {k: spec[k] for k in SHAPE_KEYS if k in spec}
    arguments.update(overrides)
    return create_model(spec["name"], image_size=image_size or spec["image_size"],
                        num_classes=spec["num_classes"], num_channels=spec["channels"],
                        **arguments)


def fuse_projections(concatenated=False):
    """From here on, every ``MultiHeadSelfAttention`` built computes its queries, keys and values
    with one (D, 3D) ``Dense`` (``torch:projections="fused"``): the layout the checkpoint tables
    do not address, measured on the training step before ruling it in or out. ``concatenated``
    keeps the three ``Dense`` layers and concatenates their kernels and biases at every call
    into one product (``torch:projections="concatenated"``)."""
    from keras import ops

    from keras_vit.layers import attention

    if concatenated:
        def project_concatenated(self, inputs, bias):
            layers = (self.query, self.key, self.value)
            kernel = ops.concatenate([layer.kernel for layer in layers], axis=-1)
            qkv = ops.matmul(inputs, kernel) + ops.concatenate([layer.bias for layer in layers])
            qkv = ops.reshape(qkv, (ops.shape(inputs)[0], -1, 3, self.num_heads, self.head_dim))
            return qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], bias

        attention.MultiHeadSelfAttention._project = project_concatenated
        return

    attention.MultiHeadSelfAttention.build = _build_fused
    attention.MultiHeadSelfAttention._project = _project_fused


def _build_fused(self, input_shape):
    """``MultiHeadSelfAttention.build`` with q, k and v from one (D, 3D) ``Dense``."""
    import keras

    from keras_vit.layers import attention

    dim = input_shape[-1]
    self.hidden_size, self.head_dim = dim, dim // self.num_heads
    # The separate projections' fans (D, D), so that a model trained with this layout starts
    # from the same distribution as the model's own.
    for name, width in (("qkv", 3 * dim), ("out", dim)):
        layer = keras.layers.Dense(width, dtype=self.dtype_policy, name=name,
                                   kernel_initializer=attention.FlatGlorotUniform(dim, dim))
        setattr(self, name, layer)
        layer.build(input_shape)


def _project_fused(self, inputs, bias):
    from keras import ops

    qkv = ops.reshape(self.qkv(inputs), (ops.shape(inputs)[0], -1, 3, self.num_heads,
                                         self.head_dim))
    return qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], bias


def keras_training(spec, options, args):
    """(model, run): keras_vit's model compiled with the step of `keras-vit train`; ``run()``
    trains ``args.steps`` steps of ``args.batch`` and returns (wall seconds, CPU seconds), the
    device synchronised.

    Options that are not ``model.compile``'s: the model's shape (``SHAPE_KEYS``), the dtype
    policy, ``projections``, ``schedule`` (``"keras_vit"``: ``warmup_schedule``'s, the default;
    ``"keras"``: Keras' ``CosineDecay`` with ``warmup_target``, which branches on the step) and
    ``data`` (``"host"``: ``fit`` on numpy arrays in host memory, the default; ``"device"``:
    batches already on the device, as slices of one tensor there).
    """
    import keras

    shape = {k: options.pop(k) for k in SHAPE_KEYS if k in options}
    projections = options.pop("projections", "separate")
    if projections != "separate":
        fuse_projections(concatenated=projections == "concatenated")
    policy = options.pop("dtype_policy", "mixed_bfloat16" if args.device == "gpu" else None)
    schedule = options.pop("schedule", "keras_vit")
    data = options.pop("data", "host")
    if policy:
        keras.config.set_dtype_policy(policy)
    model = keras_model(spec, **shape)
    model.compile(optimizer=_optimizer(schedule), loss=_loss(), metrics=["accuracy"], **options)
    fit = _fit_arguments(spec, args, data)

    class Clock(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if batch == 0:
                self.start = time.perf_counter(), _cpu_seconds()

        def on_epoch_end(self, epoch, logs=None):
            # The weights depend on every step: reading one waits for the device to finish.
            keras.ops.convert_to_numpy(model.trainable_variables[0])
            self.seconds = time.perf_counter() - self.start[0], _cpu_seconds() - self.start[1]

    def run():
        clock = Clock()
        model.fit(**fit(), epochs=1, verbose=0, callbacks=[clock])
        return clock.seconds

    return model, run


SCHEDULES = ("keras_vit", "keras")
DATA = ("host", "device")


def _optimizer(schedule):
    """`keras-vit train`'s AdamW, on keras_vit's warmup + cosine or on Keras' CosineDecay."""
    import keras

    from keras_vit.training.recipes import pretraining_optimizer

    total, warmup = 10_000, 100
    optimizer = pretraining_optimizer(total, learning_rate=LEARNING_RATE, warmup_steps=warmup,
                                      decay="cosine", weight_decay=WEIGHT_DECAY,
                                      global_clipnorm=CLIPNORM)
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule={schedule!r}: use one of {SCHEDULES}")
    if schedule == "keras":
        builtin = keras.optimizers.schedules.CosineDecay(
            0.0, total - warmup, warmup_target=LEARNING_RATE, warmup_steps=warmup)
        optimizer = keras.optimizers.AdamW(**{**optimizer.get_config(), "learning_rate": builtin})
    return optimizer


def _loss():
    from keras_vit.training.recipes import classification_loss

    return classification_loss(LABEL_SMOOTHING)


def _fit_arguments(spec, args, data):
    """A function giving ``model.fit``'s data arguments for one round of ``args.steps``."""
    import keras
    import numpy as np

    if data not in DATA:
        raise ValueError(f"data={data!r}: use one of {DATA}")
    images, labels = _data(spec, args.batch, args.steps, channels_last=True)
    onehot = np.eye(spec["num_classes"], dtype="float32")[labels]
    if data == "host":
        return lambda: dict(x=images, y=onehot, batch_size=args.batch, shuffle=False)
    images, onehot = keras.ops.convert_to_tensor(images), keras.ops.convert_to_tensor(onehot)

    def batches():
        for step in range(args.steps):
            rows = slice(step * args.batch, (step + 1) * args.batch)
            yield images[rows], onehot[rows]

    return lambda: dict(x=batches(), steps_per_epoch=args.steps, shuffle=False)


def timm_model(spec, options, image_size=None):
    """timm's ``VisionTransformer`` of ``spec``'s shape (at ``image_size``, by default the
    spec's), on the CPU; ``options["gelu"]``: ``"tanh"`` (keras_vit's, the default) or
    ``"erf"`` (timm's own)."""
    _import_timm()
    import functools

    import torch
    from timm.models.vision_transformer import VisionTransformer

    gap = spec["classifier"] == "gap"
    hybrid = {}
    if spec.get("stem"):  # timm's R+ViT root: 7x7 convolution, GroupNorm, ReLU, max-pool
        from timm.layers import StdConv2dSame
        from timm.models.resnetv2 import create_resnetv2_stem
        from timm.models.vision_transformer_hybrid import HybridEmbed

        _check_root(spec["stem"])
        root = create_resnetv2_stem(
            spec["channels"], int(64 * spec["stem"]["width_factor"]), stem_type="same",
            preact=False, conv_layer=functools.partial(StdConv2dSame, eps=1e-8))
        hybrid["embed_layer"] = functools.partial(HybridEmbed, backbone=root)
    return VisionTransformer(
        img_size=image_size or spec["image_size"], patch_size=int(spec["name"].split("/")[1]),
        in_chans=spec["channels"], num_classes=spec["num_classes"], **hybrid,
        embed_dim=spec["hidden_size"], depth=spec["num_layers"], num_heads=spec["num_heads"],
        mlp_ratio=spec["mlp_dim"] / spec["hidden_size"], class_token=not gap,
        global_pool="avg" if gap else "token", fc_norm=False,
        act_layer=functools.partial(torch.nn.GELU, approximate=GELU[options.get("gelu", "tanh")]),
    )


def timm_training(spec, compiled, options, args, mixed=None, backend="inductor"):
    """(model, forward, run): timm's model trained by the loop a PyTorch user writes, with the
    optimizer, clipping and loss of `keras-vit train`; ``forward`` is the model, or its
    ``torch.compile``; ``run()`` trains ``args.steps`` steps of ``args.batch`` from (pinned)
    host memory and returns (wall seconds, CPU seconds), the device synchronised. ``mixed``:
    bf16 autocast (by default on a GPU); ``backend``: ``torch.compile``'s."""
    import torch
    import torch.nn.functional as F

    device = "cuda" if args.device == "gpu" else "cpu"
    model = timm_model(spec, options).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE,
                                  weight_decay=WEIGHT_DECAY, eps=1e-8)
    total, warmup = 10_000, 100

    def multiplier(step):
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / (total - warmup)))

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, multiplier)
    forward = torch.compile(model, backend=backend) if compiled else model
    images, labels = _data(spec, args.batch, args.steps, channels_last=False)
    # Batches come from host memory, as from a DataLoader(pin_memory=True) (and as Keras' fit
    # takes them from the arrays).
    images, labels = torch.from_numpy(images), torch.from_numpy(labels)
    if device == "cuda":
        images, labels = images.pin_memory(), labels.pin_memory()
    mixed = args.device == "gpu" if mixed is None else mixed
    autocast = torch.autocast(device, dtype=torch.bfloat16, enabled=mixed)

    def step(x, y):
        with autocast:
            logits = forward(x)
        loss = F.cross_entropy(logits.float(), y, label_smoothing=LABEL_SMOOTHING)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIPNORM)
        optimizer.step()
        schedule.step()
        # What Keras' accuracy metric does on every step.
        return (logits.argmax(-1) == y).float().mean()

    def run():
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter(), _cpu_seconds()
        for i in range(args.steps):
            batch = slice(i * args.batch, (i + 1) * args.batch)
            accuracy = step(images[batch].to(device, non_blocking=True),
                            labels[batch].to(device, non_blocking=True))
        accuracy.item()
        return time.perf_counter() - start[0], _cpu_seconds() - start[1]

    return model, forward, run


def flax_training(spec, args):
    """run: vit_jax's own model of ``spec``'s shape trained by the step a JAX user writes: optax's
    AdamW with the schedule, clipping and loss of `keras-vit train`, one jitted function whose
    parameters and optimizer state are donated; ``run()`` trains ``args.steps`` steps of
    ``args.batch`` from host memory and returns (wall seconds, CPU seconds), the device
    synchronised."""
    import types

    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    sys.path.insert(0, os.path.abspath(os.path.expanduser(args.vit_jax)))
    from vit_jax import models_vit

    patch = int(spec["name"].split("/")[1])
    hybrid = {}
    if spec.get("stem"):
        _check_root(spec["stem"])
        hybrid["resnet"] = types.SimpleNamespace(num_layers=(),
                                                 width_factor=spec["stem"]["width_factor"])
    model = models_vit.VisionTransformer(
        num_classes=spec["num_classes"], patches=types.SimpleNamespace(size=(patch, patch)),
        **hybrid,
        hidden_size=spec["hidden_size"], classifier=spec["classifier"], representation_size=None,
        transformer=dict(num_layers=spec["num_layers"], num_heads=spec["num_heads"],
                         mlp_dim=spec["mlp_dim"], dropout_rate=0.0, attention_dropout_rate=0.0))
    images, labels = _data(spec, args.batch, args.steps, channels_last=True)
    onehot = np.eye(spec["num_classes"], dtype="float32")[labels]
    params = model.init(jax.random.PRNGKey(0), images[:1], train=False)["params"]
    schedule = optax.warmup_cosine_decay_schedule(0.0, LEARNING_RATE, 100, 10_000)
    optimizer = optax.chain(optax.clip_by_global_norm(CLIPNORM),
                            optax.adamw(schedule, b1=0.9, b2=0.999, eps=1e-8,
                                        weight_decay=WEIGHT_DECAY))
    state = [params, optimizer.init(params)]

    @functools.partial(jax.jit, donate_argnums=(0, 1))
    def step(params, opt_state, x, y):
        def loss_fn(params):
            logits = model.apply({"params": params}, x, train=True)
            targets = optax.smooth_labels(y, LABEL_SMOOTHING)
            return optax.softmax_cross_entropy(logits, targets).mean(), logits

        (_, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        # What Keras' accuracy metric does on every step.
        accuracy = jnp.mean(jnp.argmax(logits, -1) == jnp.argmax(y, -1))
        return optax.apply_updates(params, updates), opt_state, accuracy

    def run():
        start = time.perf_counter(), _cpu_seconds()
        for i in range(args.steps):
            batch = slice(i * args.batch, (i + 1) * args.batch)
            state[0], state[1], accuracy = step(*state, images[batch], onehot[batch])
        accuracy.block_until_ready()
        return time.perf_counter() - start[0], _cpu_seconds() - start[1]

    return run


def _import_timm():
    """timm, with a stand-in for a torchvision that cannot load (tests/timm_import.py)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                    "tests"))
    from timm_import import import_timm

    return import_timm()


def _cpu_seconds():
    """CPU time of this process, all threads: less swayed by other programs than wall time
    (though threads that spin while waiting for each other add to it)."""
    return time.process_time()


def _kind(name):
    """An operation's kind: its name without XLA's ``.N`` numbering or ATen's namespace."""
    return re.sub(r"\.\d+$", "", name).removeprefix("aten::")


def _shares(durations, top):
    """The ``top`` kinds by their share of the summed time, as ``[(kind, share), ...]``."""
    total = sum(durations.values()) or 1.0
    ranked = sorted(durations.items(), key=lambda item: -item[1])[:top]
    return [(kind, seconds / total) for kind, seconds in ranked]


def _torch_profile(run, top=8, device="cpu"):
    """One round under torch.profiler: ``(ATen operations it issued, every dispatched op, nested
    ones included; where its time went; the seconds summed)``: on a CPU ATen operations by self
    CPU time, on a GPU the kernels by their time on the device."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "gpu" else [])
    with profile(activities=activities) as trace:
        run()
    return _torch_shares(trace.key_averages(), top, device)


def _torch_shares(events, top, device):
    """``_torch_profile``'s answer from torch.profiler's averaged events."""
    count, durations = 0, {}
    for event in events:
        if event.key.startswith("aten::"):
            count += event.count
            if device != "gpu":
                kind = _kind(event.key)
                durations[kind] = durations.get(kind, 0.0) + event.self_cpu_time_total
        elif device == "gpu" and event.device_type.name == "CUDA":
            kind = _kernel_kind(event.key)
            durations[kind] = durations.get(kind, 0.0) + event.self_device_time_total
    if device == "gpu" and not durations:
        raise RuntimeError("the profile holds no CUDA kernel (is CUPTI, which torch.profiler "
                           "reads kernels through, installed with torch?)")
    return count, _shares(durations, top), sum(durations.values()) / 1e6


def _kernel_kind(name):
    """A GPU kernel's kind: its name without ``void``, namespaces, template or call arguments
    and numbering (``triton_poi_fused_add_3`` -> ``triton_poi_fused_add``)."""
    name = name.removeprefix("void ").replace("(anonymous namespace)::", "")
    name = re.split(r"[<(]", name, maxsplit=1)[0]
    name = re.sub(r"_\d+$", "", name.rsplit("::", 1)[-1].strip())
    return _kind(name)[:60] or "?"


def _xla_profile(run, top=8, device="cpu"):
    """Where one round's time goes: on a CPU XLA:CPU's compiled operations (fusions, dots,
    copies...) by kind, on a GPU the kernels on the card's streams; from a jax.profiler trace.
    ``(shares, the seconds summed)``."""
    import glob
    import gzip

    import jax

    with tempfile.TemporaryDirectory() as folder:
        with jax.profiler.trace(folder, create_perfetto_trace=True):
            run()
        path = glob.glob(os.path.join(folder, "**", "*perfetto_trace.json.gz"), recursive=True)[0]
        with gzip.open(path) as file:
            trace = json.load(file)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    return _xla_shares(events, top, device)


def _xla_shares(events, top, device):
    """``_xla_profile``'s answer from the trace's events. A CPU's operations lie on the threads
    named XLA (less the executor's spans, which enclose them); a GPU's kernels on the "Stream"
    lines of its ``/device:GPU`` process (else its "XLA Ops" line). A trace without such lines
    is an error that names the lines it has, to read where the kernels went."""
    import collections

    def names(kind):
        return {(e["pid"], e.get("tid")) if kind == "thread_name" else e["pid"]: e["args"]["name"]
                for e in events if e.get("ph") == "M" and e.get("name") == kind}

    processes, threads = names("process_name"), names("thread_name")
    if device == "gpu":
        gpus = {pid for pid, name in processes.items() if "GPU" in name}
        lanes = {key for key, name in threads.items() if key[0] in gpus and "Stream" in name}
        # Without stream lines, the per-operation line that xprof derives from them.
        lanes = lanes or {key for key, name in threads.items()
                          if key[0] in gpus and name == "XLA Ops"}
    else:
        lanes = {key for key, name in threads.items() if "XLA" in name}
    durations = collections.Counter()
    for event in events:
        if event.get("ph") == "X" and (event["pid"], event.get("tid")) in lanes and not re.match(
                r"(ThunkExecutor|SlinkyThreadPool)", event["name"]):
            kind = _kernel_kind(event["name"]) if device == "gpu" else _kind(event["name"])
            durations[kind] += event.get("dur", 0)
    if not durations:
        raise RuntimeError(f"no {device.upper()} operations in the trace: its processes are "
                           f"{sorted(set(processes.values()))}, its threads "
                           f"{sorted(set(threads.values()))[:40]}")
    return _shares(durations, top), sum(durations.values()) / 1e6


def _options(text, impl):
    options = {}
    # A comma starts a new option only before "key=": JSON values may hold commas.
    for item in filter(None, re.split(r",(?=\w+=)", text)):
        key, _, value = item.partition("=")
        options[key] = json.loads(value) if impl in KERAS_BACKENDS else value
    return options


def worker(args):
    spec = MODELS[args.model]
    impl, _, option_text = args.worker.partition(":")
    options = _options(option_text, impl)
    if impl in KERAS_BACKENDS:
        run = keras_training(spec, options, args)[1]
    elif impl == "flax":
        run = flax_training(spec, args)
    else:
        run = timm_training(spec, impl == "timm-compile", options, args)[2]
    for _ in range(args.warmup):
        run()
    ops = shares = None
    if impl in ("torch", "timm", "timm-compile") and (args.ops or args.profile):
        count, shares, _ = _torch_profile(run, device=args.device)  # one round for both
        ops = count / args.steps if args.ops else None
        shares = shares if args.profile else None
    elif impl in ("jax", "flax") and args.profile:
        shares = _xla_profile(run, device=args.device)[0]
    _reply({"ready": True, "ops": ops, "profile": shares})
    for line in sys.stdin:
        if line.strip() != "go":
            break
        seconds, cpu_seconds = run()
        _reply({"seconds": seconds / args.steps, "cpu_seconds": cpu_seconds / args.steps})


def _reply(message):
    sys.stdout.write("@@" + json.dumps(message) + "\n")
    sys.stdout.flush()


# ---------------------------------------------------------------------------------------------
# The orchestrator.


class Worker:
    def __init__(self, impl, args):
        self.impl = impl
        name = impl.split(":")[0]
        backend = name if name in KERAS_BACKENDS else "jax" if name == "flax" else "torch"
        env = dict(os.environ, KERAS_BACKEND=backend, PYTHONUNBUFFERED="1")
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        # Several processes share one GPU: take memory as needed, not 75 % up front.
        env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        command = [sys.executable, os.path.abspath(__file__), "--worker", impl,
                   "--model", args.model, "--batch", str(args.batch), "--steps",
                   str(args.steps), "--warmup", str(args.warmup), "--device", args.device]
        command += ["--ops"] if args.ops else []
        command += ["--profile"] if args.profile else []
        command += ["--vit-jax", args.vit_jax] if args.vit_jax else []
        self.log = tempfile.TemporaryFile(mode="w+")
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=self.log, text=True, env=env)
        self.seconds, self.cpu_seconds, self.ops, self.profile = [], [], None, None

    def start(self):
        ready = self.read()
        self.ops, self.profile = ready["ops"], ready.get("profile")
        if self.ops is not None:
            print(f"  {self.impl}: {self.ops:,.0f} ATen ops a step", file=sys.stderr)

    def read(self):
        for line in self.process.stdout:
            if line.startswith("@@"):
                return json.loads(line[2:])
        self.log.seek(0)
        tail = self.log.read()[-3000:]
        raise RuntimeError(f"worker {self.impl} ended (exit {self.process.wait()}):\n{tail}")

    def go(self):
        self.process.stdin.write("go\n")
        self.process.stdin.flush()
        reply = self.read()
        self.seconds.append(reply["seconds"])
        self.cpu_seconds.append(reply["cpu_seconds"])

    def close(self):
        if self.process.poll() is None:
            self.process.stdin.close()
            self.process.wait()


def measure(args):
    workers = []
    try:
        if args.device == "gpu":  # one at a time: an idle worker would hold its GPU memory
            for impl in args.impl:
                worker = Worker(impl, args)
                worker.start()
                for _ in range(args.rounds):
                    worker.go()
                worker.close()
                workers.append(worker)
                print(f"  {impl}: {_summary(worker.seconds)}", file=sys.stderr)
        else:
            for impl in args.impl:  # start one by one: compiling in parallel would be noise
                workers.append(Worker(impl, args))
                workers[-1].start()
            for r in range(args.rounds):
                turn = workers[r % len(workers):] + workers[:r % len(workers)]
                for worker in turn:
                    worker.go()
                print(f"  round {r + 1}: " + ", ".join(
                    f"{w.impl} {w.seconds[-1] * 1e3:.1f}" for w in workers) + " ms",
                    file=sys.stderr)
    finally:
        for worker in workers:
            worker.close()
    return workers


def _summary(seconds):
    ms = sorted(s * 1e3 for s in seconds)
    return f"{statistics.median(ms):.1f} ({ms[0]:.1f}-{ms[-1]:.1f})"


def _peak_tflops(args):
    if args.peak_tflops:
        return args.peak_tflops
    try:
        name = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)


def table(workers, args):
    """The markdown table: wall and CPU ms a step, images/s, (MFU,) torch ops, ratio to timm."""
    spec = MODELS[args.model]
    by_impl = {w.impl: w for w in workers}
    reference = next((i for i in ("timm", "timm-compile") if i in by_impl), None)
    reference_s = statistics.median(by_impl[reference].seconds) if reference else None
    flops = 3 * 2 * train_macs(spec) * args.batch
    peak = _peak_tflops(args) if args.device == "gpu" else None
    lines = ["| implementation | ms/step, median (range) | CPU ms/step, median | images/s | "
             + ("MFU | " if peak else "") + ("torch ops/step | " if args.ops else "")
             + f"vs {reference or 'timm'}: ratio of medians (per-round range) |",
             "|---|---|---|---|" + ("---|" if peak else "") + ("---|" if args.ops else "")
             + "---|"]
    for w in workers:
        median = statistics.median(w.seconds)
        backend, _, options = w.impl.partition(":")
        name = w.impl if backend not in KERAS_BACKENDS else \
            f"keras_vit, {backend} backend" + (f" ({options})" if options else "")
        row = (f"| {name} | {_summary(w.seconds)} | {statistics.median(w.cpu_seconds) * 1e3:.1f}"
               f" | {args.batch / median:,.0f} | ")
        if peak:
            row += f"{flops / median / (peak * 1e12):.1%} | "
        if args.ops:
            row += f"{w.ops:,.0f} | " if w.ops is not None else "- | "
        if reference:
            # Each round's ratio: a round's load hits every implementation in it alike.
            ratios = [r / s for r, s in zip(by_impl[reference].seconds, w.seconds)]
            row += f"{reference_s / median:.2f} ({min(ratios):.2f}-{max(ratios):.2f}) |"
        else:
            row += "- |"
        lines.append(row)
    return "\n".join(lines)


def environment():
    """The machine, the load and the versions: what a reader needs to compare two tables."""
    from importlib import metadata

    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as file:
            cpu = next(line.split(":", 1)[1].strip() for line in file
                       if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    versions = []
    for package in ("keras", "jax", "jaxlib", "tensorflow", "torch", "timm"):
        try:
            versions.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            continue
    load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    return f"{cpu}, {os.cpu_count()} CPUs, load average {load}; {', '.join(versions)}"


def check_installed(parser, impls, explicit):
    """The implementations whose packages are installed; an error naming what is missing (and
    how to install it) for one asked for by name, or when none is left."""
    def missing(impl):
        module = REQUIREMENTS[impl.split(":")[0]][0]
        return importlib.util.find_spec(module) is None

    absent = [i for i in impls if missing(i)]
    how = "; ".join(f"{i}: {REQUIREMENTS[i.split(':')[0]][1]}" for i in absent)
    if importlib.util.find_spec("keras") is None and any(
            i.split(":")[0] in KERAS_BACKENDS for i in impls):
        parser.error("keras is not installed: pip install keras")
    if absent and (explicit or len(absent) == len(impls)):
        parser.error(f"cannot import {', '.join(absent)}; install with {how}, or leave "
                     "them out of --impl")
    if absent:
        print(f"(skipping {', '.join(absent)}, not installed: {how})", file=sys.stderr)
    return [i for i in impls if i not in absent]


def _with_vit_jax(parser, args):
    """The implementations asked for (default: all), flax only with a vit_jax snapshot, on a
    CPU: refused when asked for without them, left out of the default list with a note."""
    impls = args.impl or list(IMPLEMENTATIONS)
    problem = None
    if args.vit_jax is None:
        problem = ("needs --vit-jax DIR, a clone of github.com/google-research/vision_transformer "
                   "(git clone https://github.com/google-research/vision_transformer)")
    elif not os.path.isfile(os.path.join(os.path.expanduser(args.vit_jax), "vit_jax",
                                         "models_vit.py")):
        problem = f"--vit-jax {args.vit_jax!r} holds no vit_jax/models_vit.py"
    elif args.device == "gpu":
        problem = "runs on the CPU only (its model has no mixed-precision setting here)"
    flax = [i for i in impls if i.split(":")[0] == "flax"]
    if flax and problem:
        if args.impl:
            parser.error(f"flax {problem}")
        print(f"(skipping flax: it {problem})", file=sys.stderr)
        return [i for i in impls if i not in flax]
    return impls


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="small-vit")
    parser.add_argument("--impl", nargs="+", metavar="IMPL",
                        help=f"among {', '.join(IMPLEMENTATIONS)}; a Keras backend takes "
                        "compile() options after a colon: 'jax:jit_compile=false', "
                        "'torch:jit_compile=true,steps_per_execution=4' (default: all)")
    parser.add_argument("--batch", type=int, help="batch size (default: 256 for the small "
                        "ViT, 8 for ViT-S/16 on the CPU, 256 on a GPU)")
    parser.add_argument("--steps", type=int, help="steps per round (default 20, 3 for ViT-S/16)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds first")
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu",
                        help="gpu: mixed bfloat16, one worker at a time, images/s and MFU")
    parser.add_argument("--peak-tflops", type=float,
                        help="the accelerator's dense bf16 peak (default: from nvidia-smi's name)")
    parser.add_argument("--ops", action="store_true",
                        help="also count the ATen ops of a step of the torch-based "
                        "implementations (torch.profiler, one extra untimed round): unlike "
                        "times, the counts do not depend on the machine's load")
    parser.add_argument("--vit-jax", metavar="DIR",
                        help="a clone of github.com/google-research/vision_transformer (the "
                        "folder holding vit_jax/), for the flax implementation")
    parser.add_argument("--profile", action="store_true",
                        help="also say where a step's time goes (one extra untimed round): "
                        "torch's ATen operations by self CPU time (torch, timm), XLA's compiled "
                        "operations by kind (jax, flax); with --device gpu, the kernels by "
                        "their time on the card")
    parser.add_argument("--json", help="also write the per-round seconds to this file")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    spec = MODELS[args.model]
    if args.batch is None:
        args.batch = 256 if args.device == "gpu" else spec["batch"]
    args.steps = args.steps or spec["steps"]
    if args.worker:
        return worker(args)
    for impl in args.impl or ():
        if impl.split(":")[0] not in IMPLEMENTATIONS:
            parser.error(f"unknown implementation {impl!r}; choose among {IMPLEMENTATIONS}")
    args.impl = check_installed(parser, _with_vit_jax(parser, args), bool(args.impl))
    print(f"model={args.model} ({spec['name']} at {spec['image_size']} px, hidden "
          f"{spec['hidden_size']}, {spec['num_layers']} layers) batch={args.batch} "
          f"steps/round={args.steps} rounds={args.rounds} device={args.device} "
          f"date={time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"before: {environment()}")
    workers = measure(args)
    print(table(workers, args))
    for w in workers:
        if w.profile:
            print(f"{w.impl}, where a step's time goes: "
                  + ", ".join(f"{kind} {share:.0%}" for kind, share in w.profile))
    print(f"after: load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    if args.json:
        with open(args.json, "w") as file:
            json.dump({"args": vars(args), "environment": environment(),
                       "seconds": {w.impl: w.seconds for w in workers},
                       "cpu_seconds": {w.impl: w.cpu_seconds for w in workers},
                       "ops": {w.impl: w.ops for w in workers},
                       "profile": {w.impl: w.profile for w in workers}}, file, indent=1)


if __name__ == "__main__":
    sys.exit(main())
