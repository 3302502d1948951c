"""ViT-B/16 training and inference on one NVIDIA GPU, keras_vit beside timm + torch.compile.

keras_vit runs on jax and on Keras' torch backend. With ``--parts``, the same run also measures
keras_vit's memory count against the measured peak for ViT sizes from Ti/16 to H/14, ViT-L/16
inference beside timm, and AxialResNet50 against BiT-R50x1.

On a machine with an NVIDIA GPU, from the repository root:

    pip install -e . "jax[cuda13]" torch timm    # keras_vit from this checkout, and the others
    python benchmarks/gpu.py --out gpu.json                # ViT-B/16: at most 7.5 minutes
    python benchmarks/gpu.py --parts all --out gpu.json    # every part: at most 14 minutes

(``jax[cuda12]`` with a CUDA 12 driver.) Each row prints a line as it ends; then come a few lines
on the card and the versions and a markdown table: training and inference images/s with their
share of the card's bf16 matmul rate, the ratio to timm + torch.compile, the peak memory beside
keras_vit's count, the bf16 logits' error; the other parts add a table of the memory count and
lines of images/s. ``--out`` writes every number to a JSON file, rewritten as each row ends, so a
run cut short keeps what it measured. A framework that is not installed makes its rows say
"not installed", and the run goes on without them. The times above are ``--budget``'s caps.

On a CPU, the same code at toy size in a few minutes (tests/benchmarks/test_gpu.py runs it):

    python benchmarks/gpu.py --size toy --parts all --out /tmp/gpu.json

The ViT-B/16 part (``--parts vit-b16``, the default) runs, one after the other, each in a
subprocess of its own (a Keras backend is fixed per process, and jax and torch would fight over
the GPU's memory) with a time limit within the run's budget, so that one hang cannot take the
run:

- ``plan`` (on the CPU): the model's FLOPs by ``keras_vit.flops``, its training step's memory
  by ``keras_vit.memory``, and the batch that fills the card by that count
  (``keras_vit.largest_batch`` at 85 % of the memory nvidia-smi reports, down to a multiple of
  32; ``--batch`` sets it);
- the rows: ``timm-compile`` and ``timm``, timm's ``vit_base_patch16_224`` (timm's own GELU)
  under bf16 AMP (``torch.autocast``), ``torch.compile``d and eager; ``jax-flash`` and
  ``jax-xla``, keras_vit on jax under ``mixed_bfloat16`` with ``attention_implementation``
  ``"flash"`` (cuDNN) and ``"xla"`` (docs/runtimes.md); ``torch`` and ``torch-jit``, keras_vit
  on Keras' torch backend, eager and ``jit_compile=True``; and variants of a row's training step
  alone (no inference): ``torch-keras-schedule`` (Keras' ``CosineDecay`` in place of keras_vit's
  schedule), ``torch-device-data`` and ``jax-flash-device-data`` (the batches already on the
  card, where the other rows' ``fit`` reads numpy arrays in host memory) and
  ``torch-device-data-xla`` (torch's own choice of attention kernel).

Each row measures, in its process:

- the card's bf16 matmul rate through its framework (products of random 8192 x 8192 matrices;
  the card's rate is the best of the rows');
- the training step of `keras-vit train` (benchmarks/train_step.py's: AdamW on warmup + cosine,
  global-norm clipping at 1, label smoothing 0.1, the accuracy metric; Keras' ``model.fit`` on
  arrays in host memory, timm's loop from pinned host memory): the median of rounds of steps,
  each round ending on reading a weight, after untimed rounds that compile; its peak memory
  (jax ``memory_stats()["peak_bytes_in_use"]``, ``torch.cuda.max_memory_allocated``) beside
  ``keras_vit.memory``'s count;
- inference at 224 and 384 px (``predict_on_batch`` on a batch already on the device; timm's
  forward under ``torch.inference_mode``), the median of interleaved rounds of one batch each,
  after a call that compiles (``keras_vit.evaluation.speed.median_seconds``), each call ending
  on the logits in host memory;
- the largest difference of its bf16 logits from the float32 logits of the same weights (a
  random head; float32 at full precision, no TF32), relative to the largest float32 logit,
  over the 224 px inference batch.

With ``--profile``, each row also profiles one more round of its training step after the timed
ones (``train_step``'s profilers): on a GPU the kernels by their time on the card, on a CPU the
operations, and for the torch rows the ATen operations a step dispatches; the kernels' time a
step over the measured step ("busy": the share of the step in which the device computes); on a
GPU the torch rows run one more round under torch's sync debug mode, which lists the places
where the host waits for the card. The lines follow the table.

Every row uses one batch; inputs are uniform in [-1, 1]. A share of the matmul rate is images/s
x FLOPs an image (x3 for a training step) over the card's rate. A batch that does not fit is
halved until it does (the row says so); a framework that is not installed makes its row say
"not installed"; a row that fails or runs out of time keeps what it measured before. The JSON
(``--out``) holds every number and is rewritten after each row; the table comes last.

The other parts, each measurement again in a process of its own:

- ``memory``: for each configuration of ``SIZES[...]["memory"]`` (ViT-Ti/16 to ViT-H/14 at
  224 px, a training step and an inference step), a jax process under ``mixed_bfloat16`` (jax's
  peak cannot be reset, so one process is one measurement; ``MEMORY_JOBS`` of them share the
  card at a time, each allocating only what it uses). A training step is
  train_step.keras_training's ``model.fit`` of one step, an inference step ``predict_on_batch``
  of a batch already on the device. Measured: ``memory_stats()["peak_bytes_in_use"]`` after the
  step (compilation and autotuning included, as a user's run has them); counted:
  ``keras_vit.memory(model, 224, batch, training=..., dtype="mixed_bfloat16",
  optimizer="adamw")``; then what XLA's compiled step allocates
  (``keras_vit.costs.memory.xla_memory``) against the count. A batch that did not fit is halved
  (the peak is then that of the failed try or more, and the row says so).
- ``vit-l16``: ViT-L/16 inference at 224 and 384 px on jax with ``attention_implementation``
  ``"xla"`` and ``"flash"`` (``KerasRow``, ``mixed_bfloat16``) and timm's
  ``vit_large_patch16_224`` (``img_size=384`` for 384 px) under bf16 autocast, eager
  (``TimmRow``);
- ``axial``: AxialResNet50 beside BiT-R50x1 (jax, ``mixed_bfloat16``, the same batch), and
  their ratio of seconds per batch.

The ``vit-l16`` and ``axial`` processes run one at a time, each alone on the card: each builds
and compiles its models, measures the bf16 matmul rate through its framework, then the median
seconds of interleaved rounds of one batch per size or model; the share of the matmul rate is
images/s x ``keras_vit.flops`` of an image (counted on the CPU) over the best rate of those
processes.

``--size toy`` is a two-layer ViT at 32 and 48 px, batch 8, on the CPU (bf16 there too), and
one-unit-a-stage AxialResNet and BiT at 32 px; ``torch.compile`` runs with its ``aot_eager``
backend there, ``jax-flash`` and ``torch-jit`` do not run (``TOY_NOTE`` and ``CPU_SKIPS`` say
why), and jax reports no memory statistics on a CPU (the peak is None, the XLA count is not).
"""

import argparse
import concurrent.futures
import gc
import importlib.util
import json
import os
import queue
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_step  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOY_NOTE = ("torch.compile with its aot_eager backend: inductor's C++ build of the kernels took "
            "88 s cold on a 2-core CPU for this toy model")
IMAGENET = dict(channels=3, num_classes=1000, image_size=224)
TOY_VIT = dict(name="ViT-Ti/8", image_size=32, channels=3, num_classes=10, hidden_size=32,
               num_layers=2, num_heads=2, mlp_dim=64, classifier="token")
SIZES = {
    "full": dict(
        spec=dict(name="ViT-B/16", timm="vit_base_patch16_224", image_size=224, channels=3,
                  num_classes=1000, hidden_size=768, num_layers=12, num_heads=12,
                  mlp_dim=3072, classifier="token"),
        inference_sizes=(224, 384), device="gpu", batch=None, steps=4, warmup=1, rounds=3,
        inference_rounds=5, matmul=8192, matmul_repeats=10, jobs=1,
        compile_backend="inductor", compile_note=None,
        # The other parts. memory: (label, spec, training, batch), smallest first, ViT-H/14
        # last (it runs if time is left).
        memory=[(f"{name} {'train' if training else 'infer'}", dict(IMAGENET, name=name),
                 training, batches[training])
                for training in (False, True)
                for name, batches in (("ViT-Ti/16", (256, 256)), ("ViT-S/16", (256, 128)),
                                      ("ViT-B/16", (256, 64)), ("ViT-L/16", (128, 64)),
                                      ("ViT-H/14", (64, 32)))],
        vit_l=dict(IMAGENET, name="ViT-L/16", timm="vit_large_patch16_224"),
        vit_l_inference=((224, 128), (384, 64)), speed_rounds=10,
        axial=dict(models={"AxialResNet50": {}, "BiT-R50x1": {}}, image_size=224, batch=64,
                   num_classes=1000)),
    "toy": dict(
        spec=TOY_VIT, inference_sizes=(32, 48), device="cpu", batch=8, steps=2, warmup=1,
        rounds=2, inference_rounds=3, matmul=256, matmul_repeats=4, jobs=2,
        compile_backend="aot_eager", compile_note=TOY_NOTE,
        memory=[("toy ViT train", TOY_VIT, True, 8), ("toy ViT infer", TOY_VIT, False, 16)],
        vit_l=TOY_VIT, vit_l_inference=((32, 8), (48, 8)), speed_rounds=3,
        axial=dict(models={"AxialResNet50": dict(block_units=(1, 1), width_factor=0.5,
                                                 num_heads=2),
                           "BiT-R50x1": dict(block_units=(1, 1), width_factor=0.5)},
                   image_size=32, batch=2, num_classes=10)),
}
PARTS = ("vit-b16", "memory", "vit-l16", "axial")
# Each part's share of the run's default budget, seconds.
PART_BUDGET_S = {"full": {"vit-b16": 450, "memory": 90, "vit-l16": 240, "axial": 60},
                 "toy": {"vit-b16": 600, "memory": 200, "vit-l16": 240, "axial": 120}}
MEMORY_JOBS = {"full": 5, "toy": 2}  # memory processes sharing the card at a time
# Rows, in the order they run: the reference first, then keras_vit's best hopes, Keras' torch
# compile last (it may not finish compiling).
ROWS = {
    "timm-compile": dict(label="timm + torch.compile", framework="timm", compiled=True),
    "jax-flash": dict(label="keras_vit, jax, flash attention", framework="keras", backend="jax",
                      options={"attention_implementation": "flash"}),
    "jax-xla": dict(label="keras_vit, jax, XLA attention", framework="keras", backend="jax",
                    options={"attention_implementation": "xla"}),
    "timm": dict(label="timm, eager", framework="timm", compiled=False),
    "torch": dict(label="keras_vit, torch, eager", framework="keras", backend="torch",
                  options={}),
    # The same step with Keras' CosineDecay, which branches on the step (keras_vit's schedule
    # before it became arithmetic), and with the batches already on the card: training only.
    "torch-keras-schedule": dict(label="keras_vit, torch, eager, Keras' CosineDecay",
                                 framework="keras", backend="torch",
                                 options={"schedule": "keras"}, training_only=True),
    "torch-device-data": dict(label="keras_vit, torch, eager, batches on the card",
                              framework="keras", backend="torch", options={"data": "device"},
                              training_only=True),
    # torch's own choice of attention kernel (cuDNN's on a Hopper card), where Keras' flash
    # path forces its flash kernel.
    "torch-device-data-xla": dict(
        label="keras_vit, torch, eager, batches on the card, attention by torch's choice",
        framework="keras", backend="torch",
        options={"data": "device", "attention_implementation": "xla"}, training_only=True),
    "jax-flash-device-data": dict(
        label="keras_vit, jax, flash attention, batches on the card", framework="keras",
        backend="jax", options={"attention_implementation": "flash", "data": "device"},
        training_only=True),
    "torch-jit": dict(label="keras_vit, torch, jit_compile=True", framework="keras",
                      backend="torch", options={"jit_compile": True}),
}
REFERENCE = "timm-compile"
# Seconds a row may take on a GPU, compilation included (each also within what is left of the
# budget); at toy size every row may take TOY_LIMIT_S.
LIMIT_S = {"plan": 90, "timm-compile": 180, "jax-flash": 120, "jax-xla": 120, "timm": 75,
           "torch": 90, "torch-keras-schedule": 60, "torch-device-data": 60,
           "torch-device-data-xla": 60, "jax-flash-device-data": 100, "torch-jit": 120,
           "count": 60, "vit-l16-jax-xla": 100, "vit-l16-jax-flash": 100, "vit-l16-timm": 60,
           "axial": 60}
TOY_LIMIT_S = 240
NO_CPU_FLASH = ("no flash attention on a CPU: keras_vit refuses attention_implementation="
                "'flash' there (docs/runtimes.md)")
CPU_SKIPS = {
    "jax-flash": NO_CPU_FLASH,
    "jax-flash-device-data": NO_CPU_FLASH,
    "torch-jit": "not run on a CPU: Keras' torch jit_compile traces the step's ops.cond (the "
                 "warmup of Keras' CosineDecay) anew on every call, torch.compile guarding on "
                 "Keras' name counter, until torch's recompile limit; a toy model's first epoch "
                 "took over 5 minutes on a 2-core CPU",
}
# The other parts' inference processes, in the order they run.
SPEED = {
    "vit-l16-jax-xla": dict(label="ViT-L/16, keras_vit, jax, XLA attention", framework="keras",
                            backend="jax", options={"attention_implementation": "xla"},
                            part="vit-l16"),
    "vit-l16-jax-flash": dict(label="ViT-L/16, keras_vit, jax, flash attention",
                              framework="keras", backend="jax",
                              options={"attention_implementation": "flash"}, part="vit-l16"),
    "vit-l16-timm": dict(label="ViT-L/16, timm, bf16 autocast, eager", framework="timm",
                         part="vit-l16"),
    "axial": dict(label="AxialResNet50 vs BiT-R50x1, jax", framework="axial", backend="jax",
                  part="axial"),
}
CPU_SKIPS["vit-l16-jax-flash"] = NO_CPU_FLASH
REQUIRES = {"jax": ("keras", "jax"), "torch": ("keras", "torch"), "timm": ("torch", "timm"),
            "plan": ("keras",)}
INSTALL = {"keras": "pip install keras", "jax": "pip install 'jax[cuda13]'",
           "torch": "pip install torch", "timm": "pip install timm"}
POLICY = "mixed_bfloat16"
MEMORY_FRACTION = 0.85  # of the card, for the batch the memory count chooses
GIB = 2**30


# ---------------------------------------------------------------------------------------------
# Workers: each prints its results as "@@" JSON lines (train_step._reply) as it gets them.


def _median_seconds():
    """keras_vit.evaluation.speed.median_seconds, loaded without the package's Keras import
    (seconds of start-up in a worker that runs torch alone)."""
    path = os.path.join(ROOT, "keras_vit", "evaluation", "speed.py")
    spec = importlib.util.spec_from_file_location("_keras_vit_speed", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.median_seconds


def out_of_memory(error):
    """Whether ``error`` is a device allocation failure (XLA's, torch's)."""
    text = f"{type(error).__name__}: {error}"
    return any(s in text for s in ("RESOURCE_EXHAUSTED", "OutOfMemory", "out of memory",
                                   "Out of memory"))


def with_lowered_batch(measure, batch, free):
    """``measure(batch)``, the batch halved after each out-of-memory error (``free()`` first);
    returns (result, the batches that did not fit)."""
    too_large = []
    while True:
        try:
            return measure(batch), too_large
        except Exception as error:  # noqa: BLE001 -- only allocation failures are retried
            if not out_of_memory(error) or batch == 1:
                raise
        too_large.append(batch)
        free()
        batch //= 2


def error_text(error):
    """The error's type and message, without Keras' wrapping of a layer's error (a first line
    "Exception encountered when calling ...", the arguments after it) or terminal colours."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(error)).split("Arguments received by")[0]
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].startswith("Exception encountered when calling"):
        lines = lines[1:]
    return f"{type(error).__name__}: " + "\n".join(lines)[:2000]


def _measured(part, call, *args):
    """Report ``call(*args)`` (a dict) as ``part``, or the error that stopped it; its result."""
    try:
        result = call(*args)
    except Exception as error:  # noqa: BLE001 -- a failed part is reported, the next one runs
        train_step._reply({"part": part, "error": error_text(error)})
        return None
    train_step._reply({"part": part, **result})
    return result


def _images(batch, size, channels_last, seed=1):
    import numpy as np

    shape = (batch, size, size, 3) if channels_last else (batch, 3, size, size)
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype("float32")


def _training_result(run, batch, args):
    for _ in range(args.warmup):
        run()
    seconds = [run()[0] / args.steps for _ in range(args.rounds)]
    return {"batch": batch, "seconds_per_step": seconds,
            "images_per_s": batch / statistics.median(seconds)}


def _torch_profile(run, args):
    count, shares, seconds = train_step._torch_profile(run, 12, args.device)
    profile = {"shares": shares, "aten_ops_per_step": count / args.steps,
               "kernel_seconds_per_step": seconds / args.steps}
    if args.device == "gpu":
        profile["syncs"] = _torch_syncs(run)
    return profile


def _torch_syncs(run):
    """Where one round waits for the card: torch's sync debug mode warns at every operation
    that blocks the host until the card is done (a value read back, a copy from pageable
    memory); ``[[count, "file:line <- file:line ..."], ...]``."""
    import torch

    torch.cuda.set_sync_debug_mode("warn")
    try:
        return blocking_calls(run)
    finally:
        torch.cuda.set_sync_debug_mode("default")


def blocking_calls(run, depth=4):
    """The Python places from which ``run()`` raised warnings, most frequent first: each as its
    ``depth`` innermost frames outside torch, ``warnings`` and this file."""
    import collections
    import traceback
    import warnings

    places = collections.Counter()
    skip = (os.sep + "torch" + os.sep, "warnings.py", os.path.abspath(__file__))

    def record(*_):
        frames = [f"{os.path.basename(f.filename)}:{f.lineno}"
                  for f in traceback.extract_stack()[:-1]
                  if not any(part in f.filename for part in skip)]
        places[" <- ".join(reversed(frames[-depth:]))] += 1

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = record
        run()
    return [[count, place] for place, count in places.most_common()]


def _relative_difference(low, reference):
    import numpy as np

    low, reference = np.asarray(low, "float64"), np.asarray(reference, "float64")
    largest = float(np.abs(reference).max())
    return {"max_relative_difference": float(np.abs(low - reference).max()) / largest,
            "max_abs_float32": largest, "images": len(reference)}


class _FullPrecision:
    """float32 matrix products and convolutions at full precision (no TF32) in the block."""

    def __init__(self, framework):
        self.framework = framework

    def __enter__(self):
        if self.framework == "jax":
            import jax

            self.context = jax.default_matmul_precision("highest")
            self.context.__enter__()
        else:
            import torch

            self.saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False

    def __exit__(self, *exc):
        if self.framework == "jax":
            return self.context.__exit__(*exc)
        import torch

        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = self.saved
        return False


def _torch_matmul(args):
    import torch

    device = "cuda" if args.device == "gpu" else "cpu"
    n, repeats = args.matmul, args.matmul_repeats
    generator = torch.Generator(device).manual_seed(0)
    a, b = (torch.randn(n, n, device=device, dtype=torch.bfloat16, generator=generator)
            for _ in range(2))

    def call():
        for _ in range(repeats):
            c = a @ b
        if device == "cuda":
            torch.cuda.synchronize()
        return c

    seconds = _median_seconds()({"matmul": call}, rounds=5)["matmul"]
    return {"tflops": repeats * 2 * n**3 / seconds / 1e12, "n": n, "dtype": "bfloat16",
            "framework": "torch"}


def _jax_matmul(args):
    import jax
    import jax.numpy as jnp

    n, repeats = args.matmul, args.matmul_repeats
    a, b = (jax.random.normal(jax.random.key(i), (n, n), jnp.bfloat16) for i in range(2))
    product = jax.jit(jnp.matmul)

    def call():
        for _ in range(repeats):
            c = product(a, b)
        return c.block_until_ready()

    seconds = _median_seconds()({"matmul": call}, rounds=5)["matmul"]
    return {"tflops": repeats * 2 * n**3 / seconds / 1e12, "n": n, "dtype": "bfloat16",
            "framework": "jax"}


class KerasRow:
    """keras_vit under the process's Keras backend, ``mixed_bfloat16``."""

    def __init__(self, args, options):
        import keras

        self.keras, self.args, self.backend = keras, args, keras.backend.backend()
        self.shape = {k: v for k, v in options.items() if k in train_step.SHAPE_KEYS}
        self.compile_options = {k: v for k, v in options.items() if k not in self.shape}
        self.policy = "mixed_bfloat16"
        self.run = None  # the last measured training step's

    def setup(self):
        if self.backend == "jax":
            import jax

            device = jax.devices()[0]
            name, gpu = device.device_kind, device.platform == "gpu"
        else:
            import torch

            gpu = torch.cuda.is_available()
            name = torch.cuda.get_device_name() if gpu else "CPU"
        if self.args.device == "gpu" and not gpu:
            raise RuntimeError(f"no GPU for Keras' {self.backend} backend; on a CPU use "
                               "--size toy")
        return {"device": name, "keras": self.keras.__version__, "dtype_policy": self.policy,
                **self.shape, **self.compile_options}

    def matmul(self):
        return (_jax_matmul if self.backend == "jax" else _torch_matmul)(self.args)

    def free(self):
        self.keras.backend.clear_session()
        gc.collect()
        if self.backend == "jax":
            import jax

            jax.clear_caches()
        elif self.args.device == "gpu":
            import torch

            torch.cuda.empty_cache()

    def peak_bytes(self):
        if self.backend == "jax":
            import jax

            stats = jax.devices()[0].memory_stats()  # None on a CPU
            return stats and stats.get("peak_bytes_in_use")
        import torch

        return torch.cuda.max_memory_allocated() if self.args.device == "gpu" else None

    def train(self, batch):
        if self.backend == "torch" and self.args.device == "gpu":
            import torch

            torch.cuda.reset_peak_memory_stats()
        options = {**self.shape, **self.compile_options, "dtype_policy": self.policy}
        step_args = types.SimpleNamespace(device=self.args.device, batch=batch,
                                          steps=self.args.steps)
        _, self.run = train_step.keras_training(self.args.spec, options, step_args)
        return {**_training_result(self.run, batch, self.args), "peak_bytes": self.peak_bytes()}

    def profile(self):
        """Where a round of the measured training step goes (``train_step``'s profiles)."""
        if self.backend == "jax":
            shares, seconds = train_step._xla_profile(self.run, 12, self.args.device)
            return {"shares": shares, "kernel_seconds_per_step": seconds / self.args.steps}
        return _torch_profile(self.run, self.args)

    def inference(self, size, batch):
        """(model, images on the device, a call that predicts them), compiled by a first
        call."""
        keras = self.keras
        keras.config.set_dtype_policy(self.policy)
        model = train_step.keras_model(self.args.spec, size, **self.shape)
        images = keras.ops.convert_to_tensor(_images(batch, size, channels_last=True))
        model.predict_on_batch(images)
        return model, images, lambda: model.predict_on_batch(images)

    def logits(self, model, images, size):
        """bf16 logits against float32 ones of the same weights (a random head: its kernel
        starts at zero), float32 at full precision (jax would take TF32 on a GPU)."""
        import numpy as np

        head = model.get_layer("head")
        rng = np.random.default_rng(2)
        head.kernel.assign(rng.normal(0, head.kernel.shape[0] ** -0.5, head.kernel.shape))
        low = model.predict_on_batch(images)
        # Flash kernels take no float32: the reference runs the same attention in XLA.
        shape = {**self.shape, "attention_implementation": "xla"}
        reference = train_step.keras_model(self.args.spec, size, dtype="float32", **shape)
        reference.set_weights(model.get_weights())
        with _FullPrecision(self.backend):
            high = reference.predict_on_batch(images)
        return _relative_difference(low, high)


class TimmRow:
    """timm's ViT under bf16 autocast, eager or ``torch.compile``d."""

    def __init__(self, args, compiled):
        import torch

        self.torch, self.args, self.compiled = torch, args, compiled
        self.device = "cuda" if args.device == "gpu" else "cpu"
        self.run = None  # the last measured training step's
        # timm's own GELU: the model is timm's vit_base_patch16_224 as its users build it.
        self.options = {"gelu": "erf"}
        if compiled:
            # One static graph for each shape, each compiled once here.
            torch._dynamo.config.automatic_dynamic_shapes = False

    def setup(self):
        import timm

        torch = self.torch
        gpu = torch.cuda.is_available()
        if self.args.device == "gpu" and not gpu:
            raise RuntimeError("no GPU for torch (torch.cuda.is_available() is False); on a "
                               "CPU use --size toy")
        setup = {"device": torch.cuda.get_device_name() if gpu else "CPU",
                 "torch": torch.__version__, "timm": timm.__version__,
                 "model": self.args.spec.get("timm", "timm VisionTransformer")}
        if self.compiled:
            setup["compile_backend"] = self.args.compile_backend
            if self.args.compile_note:
                setup["note"] = self.args.compile_note
        return setup

    def matmul(self):
        return _torch_matmul(self.args)

    def free(self):
        gc.collect()
        if self.device == "cuda":
            self.torch.cuda.empty_cache()

    def autocast(self):
        return self.torch.autocast(self.device, dtype=self.torch.bfloat16)

    def train(self, batch):
        torch = self.torch
        if self.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        step_args = types.SimpleNamespace(device=self.args.device, batch=batch,
                                          steps=self.args.steps)
        self.run = train_step.timm_training(self.args.spec, self.compiled, self.options,
                                            step_args, mixed=True,
                                            backend=self.args.compile_backend)[2]
        result = _training_result(self.run, batch, self.args)
        peak = torch.cuda.max_memory_allocated() if self.device == "cuda" else None
        return {**result, "peak_bytes": peak}

    def profile(self):
        return _torch_profile(self.run, self.args)

    def inference(self, size, batch):
        torch = self.torch
        model = self._model(size).to(self.device).eval()
        forward = (torch.compile(model, backend=self.args.compile_backend) if self.compiled
                   else model)
        images = torch.from_numpy(_images(batch, size, channels_last=False)).to(self.device)

        def call():
            with torch.inference_mode(), self.autocast():
                return forward(images).float().cpu()

        call()
        return model, images, call

    def _model(self, size):
        spec = self.args.spec
        if "timm" in spec:  # a model of timm's registry, built as timm's users build it
            import timm

            return timm.create_model(spec["timm"], pretrained=False, img_size=size)
        return train_step.timm_model(spec, self.options, size)

    def logits(self, model, images, size):
        torch = self.torch
        with torch.inference_mode():
            with self.autocast():
                low = model(images).float().cpu().numpy()
            with _FullPrecision("torch"):
                high = model(images).cpu().numpy()
        return _relative_difference(low, high)


def row_worker(args):
    """One row: set-up, training step, matmul rate, inference at each size, bf16 logits."""
    row = ROWS[args.worker]
    if row["framework"] == "keras":
        impl = KerasRow(args, dict(row["options"]))
    else:
        train_step._import_timm()
        impl = TimmRow(args, row["compiled"])
    if _measured("setup", impl.setup) is None:
        return 1

    def train():
        result, too_large = with_lowered_batch(impl.train, args.batch, impl.free)
        return {**result, "too_large": too_large}

    trained = _measured("train", train)  # first: jax's peak memory is the process's
    if args.profile and trained is not None:
        _measured("profile", impl.profile)
    impl.run = None  # the step's model and optimizer, freed with the rest
    impl.free()
    if row.get("training_only"):
        train_step._reply({"part": "done"})
        return 0
    _measured("matmul", impl.matmul)
    prepared = {}
    for size in args.inference_sizes:
        try:
            prepared[size] = with_lowered_batch(lambda b, s=size: impl.inference(s, b),
                                                args.batch, impl.free)
        except Exception as error:  # noqa: BLE001 -- reported; the other size still runs
            train_step._reply({"part": f"inference-{size}", "error": error_text(error)})
    try:
        seconds = _median_seconds()({s: p[0][2] for s, p in prepared.items()},
                                    rounds=args.inference_rounds)
    except Exception as error:  # noqa: BLE001
        train_step._reply({"part": "inference", "error": error_text(error)})
        seconds = {}
    for size, value in seconds.items():
        (_, images, _), too_large = prepared[size]
        train_step._reply({"part": f"inference-{size}", "seconds": value, "batch": len(images),
                           "images_per_s": len(images) / value, "too_large": too_large})
    first = args.inference_sizes[0]
    if first in prepared:
        model, images, _ = prepared[first][0]
        _measured("logits", impl.logits, model, images, first)
    train_step._reply({"part": "done"})
    return 0


def plan_worker(args):
    """The model's FLOPs and training memory by keras_vit's counts, and the batch that fills
    ``args.card_gib`` by that count."""
    from keras_vit import flops, largest_batch, memory

    spec = args.spec
    # Counted on a model (of any image size): a registered name's shape takes no overrides.
    grid = spec["image_size"] // int(spec["name"].split("/")[1])
    model = train_step.keras_model(spec, None, position_embedding_grid=(grid, grid))
    train_step._reply({"part": "flops", **{str(s): int(flops(model, s))
                                            for s in args.inference_sizes}})
    counts = [memory(model, spec["image_size"], b, dtype="mixed_bfloat16", optimizer="adamw")
              for b in (0, 1)]
    train_step._reply({"part": "memory", "fixed_parts": counts[0].parts, "per_example_parts": {
        k: counts[1].parts[k] - counts[0].parts[k] for k in counts[0].parts}})
    if args.card_gib:
        gib = MEMORY_FRACTION * args.card_gib
        fits = largest_batch(model, spec["image_size"], gib, dtype="mixed_bfloat16",
                             optimizer="adamw")
        train_step._reply({
            "part": "batch", "batch": fits // 32 * 32 if fits >= 64 else fits,
            "source": f"keras_vit.largest_batch in {MEMORY_FRACTION:.0%} of the card's "
                      f"{args.card_gib:.1f} GiB: {fits}, down to a multiple of 32"})
    train_step._reply({"part": "done"})
    return 0


# ---------------------------------------------------------------------------------------------
# The other parts' workers: the memory count against the measured peak, and inference speed.


def _args_for(args, spec):
    """The namespace ``KerasRow`` and ``TimmRow`` read (spec, device, matmul size)."""
    return types.SimpleNamespace(spec=spec, device=args.device, matmul=args.matmul,
                                 matmul_repeats=args.matmul_repeats, compile_backend=None,
                                 compile_note=None)


def _memory_stats():
    import jax

    stats = jax.devices()[0].memory_stats()  # None on a CPU
    return {k: stats.get(k) for k in ("peak_bytes_in_use", "bytes_in_use", "bytes_limit")} \
        if stats else None


def _memory_step(row, spec, training, args):
    """A call that builds and runs one step of ``batch`` images: its model."""

    def step(batch):
        if training:
            step_args = types.SimpleNamespace(device=args.device, batch=batch, steps=1)
            model, run = train_step.keras_training(spec, {"dtype_policy": POLICY}, step_args)
            run()
        else:
            model, _, call = row.inference(spec["image_size"], batch)
            call()
        return model

    return step


def memory_worker(args):
    """One configuration's step, its peak against keras_vit.memory, then against XLA's count."""
    import keras

    from keras_vit import memory
    from keras_vit.costs.memory import xla_memory

    _, spec, training, batch = args.memory[args.index]
    row = KerasRow(_args_for(args, spec), {})
    if _measured("setup", row.setup) is None:
        return 1
    train_step._reply({"part": "before", "memory_stats": _memory_stats()})
    step, kept = _memory_step(row, spec, training, args), {}

    def peak():
        model, too_large = with_lowered_batch(step, batch, row.free)
        used = batch // 2 ** len(too_large)
        stats = _memory_stats()
        count = memory(model, spec["image_size"], used, training=training, dtype=POLICY,
                       optimizer="adamw")
        measured = stats and stats["peak_bytes_in_use"]
        kept.update(model=model, batch=used, count=count)
        return {"batch": used, "too_large": too_large, "training": training,
                "memory_stats": stats, "peak_bytes": measured, "count_bytes": int(count),
                "count_parts": count.parts, "peak_over_count": measured and measured / count}

    if _measured("peak", peak) is None:
        return 1
    keras.config.set_dtype_policy(POLICY)

    def xla():
        compiled = xla_memory(kept["model"], kept["batch"], training=training, optimizer="adamw")
        return {"xla_bytes": compiled, "count_over_xla": kept["count"] / compiled}

    _measured("xla", xla)
    train_step._reply({"part": "done"})
    return 0


def count_worker(args):
    """keras_vit.flops of an image for each inference process (by name, nothing built)."""
    from keras_vit import flops

    vit = {k: args.vit_l[k] for k in train_step.SHAPE_KEYS if k in args.vit_l}
    vit["num_classes"] = args.vit_l["num_classes"]
    train_step._reply({"part": "vit", **{str(s): int(flops(args.vit_l["name"], s, **vit))
                                        for s, _ in args.vit_l_inference}})
    axial = args.axial
    train_step._reply({"part": "axial", **{
        name: int(flops(name, axial["image_size"], num_classes=axial["num_classes"], **extra))
        for name, extra in axial["models"].items()}})
    train_step._reply({"part": "done"})
    return 0


class AxialRow:
    """AxialResNet50 and BiT-R50x1 under jax ``mixed_bfloat16``, one batch each."""

    def __init__(self, args):
        self.args = args
        self.keras_row = KerasRow(_args_for(args, args.vit_l), {})

    def setup(self):
        return self.keras_row.setup()

    def matmul(self):
        return self.keras_row.matmul()

    def prepare(self):
        """Model name -> (a call that predicts one batch, compiled, its batch, [])."""
        import keras

        from keras_vit import create_model

        axial, calls = self.args.axial, {}
        keras.config.set_dtype_policy(POLICY)
        images = keras.ops.convert_to_tensor(_images(axial["batch"], axial["image_size"],
                                                     channels_last=True))
        for name, extra in axial["models"].items():
            try:
                model = create_model(name, image_size=axial["image_size"],
                                     num_classes=axial["num_classes"], **extra)
                model.predict_on_batch(images)  # compiles
            except Exception as error:  # noqa: BLE001 -- reported; the other model still runs
                train_step._reply({"part": name, "error": error_text(error)})
                continue
            calls[name] = (lambda m=model: m.predict_on_batch(images))
        return {name: (call, axial["batch"], []) for name, call in calls.items()}


def _prepare_vit(impl, args):
    """Size -> (a call that predicts one batch, compiled, its batch, the batches too large)."""
    prepared = {}
    for size, batch in args.vit_l_inference:
        try:
            (_, _, call), too_large = with_lowered_batch(
                lambda b, s=size: impl.inference(s, b), batch, impl.free)
        except Exception as error:  # noqa: BLE001 -- reported; the other size still runs
            train_step._reply({"part": f"inference-{size}", "error": error_text(error)})
            continue
        prepared[str(size)] = (call, batch // 2 ** len(too_large), too_large)
    return prepared


def speed_worker(args):
    """An inference process: build and compile, then the matmul rate, then the interleaved
    medians of the prepared calls (one batch per size or model)."""
    how = SPEED[args.worker]
    if how["framework"] == "keras":
        impl = KerasRow(_args_for(args, args.vit_l), dict(how["options"]))
    elif how["framework"] == "timm":
        train_step._import_timm()
        impl = TimmRow(_args_for(args, args.vit_l), compiled=False)
    else:
        impl = AxialRow(args)
    if _measured("setup", impl.setup) is not None:
        prepared = impl.prepare() if how["framework"] == "axial" else _prepare_vit(impl, args)
        _measured("matmul", impl.matmul)
        try:
            seconds = _median_seconds()({k: p[0] for k, p in prepared.items()},
                                        rounds=args.speed_rounds)
        except Exception as error:  # noqa: BLE001
            train_step._reply({"part": "timing", "error": error_text(error)})
            seconds = {}
        for key, value in seconds.items():
            _, batch, too_large = prepared[key]
            train_step._reply({"part": f"time-{key}", "seconds": value, "batch": batch,
                               "images_per_s": batch / value, "too_large": too_large})
    train_step._reply({"part": "done"})
    return 0


# ---------------------------------------------------------------------------------------------
# The orchestrator.


def card():
    """The GPU's name and memory from nvidia-smi (which needs no framework), or None."""
    try:
        line = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, check=True, timeout=30).stdout.splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return None
    name, mib = (part.strip() for part in line.rsplit(",", 1))
    return {"name": name, "memory_bytes": int(float(mib)) * 2**20}


def missing_packages(name):
    """The packages row or process ``name`` (or ``"plan"``) needs that are not installed."""
    if name in ("plan", "count"):
        needs = REQUIRES["plan"]
    elif name == "memory":
        needs = REQUIRES["jax"]
    else:
        how = ROWS.get(name) or SPEED[name]
        needs = REQUIRES[how.get("backend", how["framework"])]
    return [m for m in needs if importlib.util.find_spec(m) is None]


def worker_environment(name, args):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    # keras_vit from this checkout, whatever the caller's PYTHONPATH.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (ROOT, env.get("PYTHONPATH"))))
    if name in ("plan", "count"):
        env["KERAS_BACKEND"] = "jax" if importlib.util.find_spec("jax") else "torch"
    elif name == "memory":
        # Several memory processes share the card: each takes what it uses (its peak is its own).
        env.update(KERAS_BACKEND="jax", XLA_PYTHON_CLIENT_PREALLOCATE="false")
    else:
        env["KERAS_BACKEND"] = (ROWS.get(name) or SPEED[name]).get("backend", "torch")
        # One row on the card at a time: most of it for XLA's pool, as the memory count assumes.
        env.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.95")
    env.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    # Counting needs no device, and the toy run stays on the CPU also beside a GPU.
    if name in ("plan", "count") or args.device == "cpu":
        env.update(JAX_PLATFORMS="cpu", CUDA_VISIBLE_DEVICES="")
    if args.size == "toy":
        # A toy run's time is compilation: XLA:CPU builds unoptimised code in about half.
        env["XLA_FLAGS"] = env.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0"
    return env


def run_worker(command, env, limit):
    """Run a worker for at most ``limit`` seconds: (its "@@" messages, None or why it stopped
    early, the tail of its log)."""
    log = tempfile.TemporaryFile(mode="w+")
    # A session of its own: at the end its whole group goes (torch.compile's helpers too).
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True, env=env,
                               cwd=ROOT, start_new_session=True)
    lines = queue.Queue()

    def read():
        for line in process.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    messages, stopped, deadline = [], None, time.monotonic() + limit
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            stopped = f"timed out after {limit:.0f} s"
            break
        if line is None:
            break
        if line.startswith("@@"):
            messages.append(json.loads(line[2:]))
            if messages[-1].get("part") == "done":
                break
    try:
        code = process.wait(timeout=0 if stopped else 30)
    except subprocess.TimeoutExpired:
        code = None
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()
    if stopped is None and code not in (0, None):
        stopped = f"exited with code {code}"
    log.seek(0)
    return messages, stopped, log.read()[-4000:]


def _command(name, args, index=None):
    command = [sys.executable, os.path.abspath(__file__), "--worker", name, "--size", args.size,
               "--batch", str(args.batch or 0)] + (["--profile"] if args.profile else [])
    if args.card_gib:
        command += ["--card-gib", str(args.card_gib)]
    return command + (["--index", str(index)] if index is not None else [])


def run_plan(args, limit):
    messages, stopped, log = run_worker(_command("plan", args), worker_environment("plan", args),
                                        limit)
    plan = {"status": stopped or "ok"}
    plan.update((m.pop("part"), m) for m in messages)
    plan.pop("done", None)
    if stopped:
        plan["log_tail"] = log
    return plan


def run_row(name, args, limit):
    messages, stopped, log = run_worker(_command(name, args), worker_environment(name, args),
                                        limit)
    row = {"label": ROWS[name]["label"], "status": "ok", "limit_s": round(limit)}
    parts = {m.pop("part"): m for m in messages}
    if "done" not in parts:
        row["status"], row["log_tail"] = stopped or "ended early", log
    errors = {k: parts.pop(k)["error"] for k in list(parts) if "error" in parts[k]}
    if errors:
        row["errors"] = errors
        if row["status"] == "ok":
            row["status"] = "errors"
    for key in ("setup", "matmul", "train", "profile", "logits"):
        row[key] = parts.get(key)
    row["inference"] = {str(s): parts[f"inference-{s}"] for s in args.inference_sizes
                        if f"inference-{s}" in parts}
    return row


def add_shares(results):
    """The card's matmul rate (the best of the rows'), each row's share of it and ratio to the
    reference, and the memory count at each row's training batch."""
    done = [row for row in results["rows"].values() if row]  # None: not run yet
    rates = [(r.get("matmul") or {}).get("tflops") for r in done]
    rate = results["matmul_tflops"] = max(filter(None, rates), default=None)
    flops = results["plan"].get("flops", {})
    memory = results["plan"].get("memory")
    size = str(results["spec"]["image_size"])
    reference = (results["rows"].get(REFERENCE) or {}).get("train") or {}
    for row in done:
        train = row.get("train") or {}
        profile = row.get("profile") or {}
        if train.get("seconds_per_step") and profile.get("kernel_seconds_per_step"):
            # The share of the measured step in which the card computed.
            profile["busy"] = profile["kernel_seconds_per_step"] / statistics.median(
                train["seconds_per_step"])
        if "images_per_s" in train:
            if rate and size in flops:
                train["share_of_matmul"] = train["images_per_s"] * 3 * flops[size] / (rate * 1e12)
            if "images_per_s" in reference:
                train["vs_reference"] = train["images_per_s"] / reference["images_per_s"]
            if memory:
                parts = {k: memory["fixed_parts"][k] + train["batch"] * v
                         for k, v in memory["per_example_parts"].items()}
                train["memory_count_bytes"] = sum(parts.values())
                train["memory_count_without_attention_bytes"] = (sum(parts.values())
                                                                 - parts["attention"])
        for key, inference in (row.get("inference") or {}).items():
            if rate and key in flops:
                inference["share_of_matmul"] = inference["images_per_s"] * flops[key] / (
                    rate * 1e12)


def _gib(value):
    return f"{value / GIB:.2f}" if value else "-"


def _rate(part, with_batch=False):
    if not part or "images_per_s" not in part:
        return "-"
    text = f"{part['images_per_s']:,.0f}"
    if "share_of_matmul" in part:
        text += f" ({part['share_of_matmul']:.1%})"
    return text + (f", batch {part['batch']}" if with_batch else "")


def notes(row):
    """What a reader of a row must know: why it did not run or stopped, lowered batches,
    errors."""
    found = []
    if row.get("status") not in ("ok", "errors"):
        found.append(row["status"] + (f": {row['reason']}" if row.get("reason") else ""))
    if (row.get("setup") or {}).get("note"):
        found.append(row["setup"]["note"])
    for part in [row.get("train")] + list((row.get("inference") or {}).values()):
        if part and part.get("too_large"):
            found.append(f"batch {part['too_large'][0]} did not fit, {part['batch']} did")
    for part, error in (row.get("errors") or {}).items():
        found.append(f"{part}: {' '.join(error.split())[:200]}")
    return "; ".join(dict.fromkeys(found))


def table(results):
    """The markdown table: images/s (share of the matmul rate), ratio to the reference,
    memory, logits, notes."""
    sizes = [str(s) for s in results["inference_sizes"]]
    lines = ["| row | training images/s (share of matmul) | vs " + REFERENCE + " | "
             + " | ".join(f"inference {s} px images/s (share)" for s in sizes)
             + " | training peak GiB (count; without attention) | bf16 logits vs float32, "
             "max rel. diff. | notes |",
             "|---|---|---|" + "---|" * len(sizes) + "---|---|---|"]
    for name, row in results["rows"].items():
        train = row.get("train") or {}
        inference = row.get("inference") or {}
        ratio = f"{train['vs_reference']:.2f}" if "vs_reference" in train else "-"
        memory = (f"{_gib(train.get('peak_bytes'))} ({_gib(train.get('memory_count_bytes'))}; "
                  f"{_gib(train.get('memory_count_without_attention_bytes'))})"
                  if train else "-")
        logits = row.get("logits") or {}
        difference = (f"{logits['max_relative_difference']:.1e}"
                      if "max_relative_difference" in logits else "-")
        lines.append(f"| {row.get('label', name)} | {_rate(train, True)} | {ratio} | "
                     + " | ".join(_rate(inference.get(s)) for s in sizes)
                     + f" | {memory} | {difference} | {notes(row)} |")
    return "\n".join(lines)


def header(results):
    """Model, card, date, versions, matmul rates, FLOPs, batch: the lines above the table."""
    matmul = ", ".join(f"{name} {row['matmul']['tflops']:.3g}"
                       for name, row in results["rows"].items()
                       if (row.get("matmul") or {}).get("tflops"))
    flops = ", ".join(f"{s} px {v / 1e9:.3g}"
                      for s, v in results["plan"].get("flops", {}).items())
    card = results["card"]
    return "\n".join([
        f"{results['spec']['name']} ({results['size']} size) on "
        f"{card['name'] + ', ' + _gib(card['memory_bytes']) + ' GiB' if card else 'the CPU'}, "
        f"{results['date']}, {results['wall_s']} s",
        results["environment"],
        f"bf16 matmul {results['matmul_n']}^3, TFLOP/s by row: {matmul or 'not measured'}",
        f"forward GFLOPs an image (keras_vit.flops): {flops or 'not counted'}; a training "
        "step counts 3x",
        f"batch {results['batch']} ({results['batch_source']})"])


def _skip_reason(name, args, left):
    missing = missing_packages(name)
    if missing:
        return "not installed", "; ".join(f"{m} ({INSTALL[m]})" for m in missing)
    if args.device == "cpu" and name in CPU_SKIPS:
        return "skipped", CPU_SKIPS[name]
    if left < 20:
        return "skipped", "the time of its part of the run's budget was spent"
    return None


def _plan(args, limit):
    missing = missing_packages("plan")
    if missing:
        return {"status": "not installed: " + ", ".join(missing)}
    return run_plan(args, limit)


def new_results(args):
    """The run's results before any part: what was asked, the date, the versions, the card."""
    return {"size": args.size, "parts": list(args.parts), "spec": args.spec,
            "inference_sizes": list(args.inference_sizes),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "environment": train_step.environment(), "budget_s": args.budget,
            "card": card() if args.device == "gpu" else None, "matmul_n": args.matmul,
            "rows": dict.fromkeys(args.rows if "vit-b16" in args.parts else [])}


def orchestrate(args):
    """Run the parts asked for, in ``PARTS``'s order; the results, also written to ``--out``."""
    start = time.monotonic()
    results = new_results(args)
    if results["card"]:
        args.card_gib = results["card"]["memory_bytes"] / GIB
    if "vit-b16" in args.parts:
        rows_part(results, args, start)
    if set(args.parts) - {"vit-b16"}:
        other_parts(Recorder(results, args, start))
    return results


def rows_part(results, args, start):
    """The ViT-B/16 rows: the plan, then each row in a worker, then the table."""
    limits = LIMIT_S if args.size == "full" else dict.fromkeys(LIMIT_S, TOY_LIMIT_S)
    lock = threading.Lock()

    def row(name):
        left = args.rows_budget - (time.monotonic() - start)
        skip = _skip_reason(name, args, left)
        if skip:
            result = {"label": ROWS[name]["label"], "status": skip[0], "reason": skip[1]}
        else:
            began = time.monotonic()
            result = run_row(name, args, min(limits[name], left))
            result["wall_s"] = round(time.monotonic() - began, 1)
        with lock:
            results["rows"][name] = result
            print(f"{name}: {result['status']} ({result.get('wall_s', 0):.0f} s) "
                  f"{notes(result)}", file=sys.stderr)
            _finish(results, args, start)

    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        plan = pool.submit(_plan, args, limits["plan"])
        if args.batch is None:  # the rows wait for the batch the plan chooses
            results["plan"] = plan.result()
        _choose_batch(results, args)
        rows = [pool.submit(row, name) for name in args.rows]
        results["plan"] = plan.result()
        print(f"plan: {results['plan']['status']}", file=sys.stderr)
        for future in rows:
            future.result()
    _finish(results, args, start)
    print(header(results))
    print(table(results))
    if args.profile:
        print(profiles(results))


def profiles(results):
    """Where each row's training step goes: its kernels' shares, how much of the step the card
    computed, the ATen operations it dispatched, and where it waited for the card."""
    lines = ["", "Where a training step's time goes (one profiled round):"]
    for name, row in results["rows"].items():
        profile = row.get("profile") or {}
        error = (row.get("errors") or {}).get("profile")
        shares = ", ".join(f"{kind} {share:.0%}" for kind, share in profile.get("shares", []))
        facts = []
        if profile.get("kernel_seconds_per_step"):
            facts.append(f"{profile['kernel_seconds_per_step'] * 1e3:,.1f} ms of kernels a step"
                         + (f", busy {profile['busy']:.0%} of it" if "busy" in profile else ""))
        if profile.get("aten_ops_per_step"):
            facts.append(f"{profile['aten_ops_per_step']:,.0f} ATen ops a step")
        if profile.get("syncs") is not None:
            waits = "; ".join(f"{count}x {place}" for count, place in profile["syncs"][:4])
            facts.append(f"waits for the card: {waits or 'never'}")
        lines.append(f"- {row.get('label', name)}: {shares or error or 'not profiled'}"
                     + (f" ({'; '.join(facts)})" if facts else ""))
    return "\n".join(lines)


def _choose_batch(results, args):
    plan = results.get("plan") or {}
    if args.batch is None:
        args.batch = (plan.get("batch") or {}).get("batch") or 256
        source = (plan.get("batch") or {}).get("source", "256: the card was not counted")
    else:
        source = "--batch" if args.batch_given else f"the {args.size} size's"
    results["batch"], results["batch_source"] = args.batch, source


def _finish(results, args, start):
    """Shares, ratios and wall time as they stand; the JSON rewritten."""
    if "plan" in results:
        add_shares(results)
    results["wall_s"] = round(time.monotonic() - start, 1)
    if args.out:
        write(results, args.out)


def write(results, path):
    """Write the JSON whole or not at all (it is rewritten after each row)."""
    with open(path + ".part", "w") as file:
        json.dump(results, file, indent=1, default=str)
    os.replace(path + ".part", path)


# ---------------------------------------------------------------------------------------------
# The other parts' orchestration.


class Recorder:
    """The other parts' results as they stand: recorded under the lock, the shares derived, a
    line printed, the JSON rewritten."""

    def __init__(self, results, args, start):
        self.results, self.args, self.start = results, args, start
        self.lock = threading.Lock()
        results.update(count=None, memory={}, speed={}, speed_matmul_tflops=None)

    def left(self, part_end=None):
        """Seconds left of the run's budget, and of the part's if it ends at ``part_end``."""
        now = time.monotonic()
        left = self.args.budget - (now - self.start)
        return left if part_end is None else min(left, part_end - now)

    def record(self, section, key, value, line=None):
        with self.lock:
            if key is None:
                self.results[section] = value
            else:
                self.results[section][key] = value
            add_speed_shares(self.results)
            if line:
                print(line, file=sys.stderr)
            self.results["wall_s"] = round(time.monotonic() - self.start, 1)
            if self.args.out:
                write(self.results, self.args.out)


def other_parts(recorder):
    """``memory``, ``vit-l16`` and ``axial`` as asked, the FLOPs counted beside; their table."""
    args = recorder.args
    for label, *_ in args.memory if "memory" in args.parts else []:
        recorder.results["memory"][label] = {"status": "not run yet"}
    counting = threading.Thread(target=count_part, args=(recorder,))
    counting.start()
    if "memory" in args.parts:
        memory_part(recorder)
    speed_part(recorder)
    counting.join()
    recorder.record("speed", None, recorder.results["speed"])
    print(other_table(recorder.results), flush=True)


def _parts(messages):
    parts = {message.pop("part"): message for message in messages}
    parts.pop("done", None)
    return parts


def memory_part(recorder):
    """Each configuration of ``args.memory`` in a jax process, ``MEMORY_JOBS`` at a time, within
    the part's share of the budget."""
    args = recorder.args
    end = time.monotonic() + PART_BUDGET_S[args.size]["memory"]

    def one(index):
        label, _, _, batch = args.memory[index]
        left = recorder.left(end)
        if left < 10:
            recorder.record("memory", label, {"status": "skipped: the memory part's time was "
                                              "spent"}, f"memory {label}: skipped")
            return
        messages, stopped, log = run_worker(_command("memory", args, index),
                                            worker_environment("memory", args), left)
        row = {"status": stopped or "ok", "batch_asked": batch, **_parts(messages)}
        if stopped:
            row["log_tail"] = log
        recorder.record("memory", label, row, _memory_line(label, row))

    if missing_packages("memory"):
        for label, *_ in args.memory:
            recorder.record("memory", label, {"status": "not installed: " + ", ".join(
                missing_packages("memory"))})
        return
    with concurrent.futures.ThreadPoolExecutor(MEMORY_JOBS[args.size]) as pool:
        list(pool.map(one, range(len(args.memory))))


def count_part(recorder):
    """keras_vit.flops of the inference processes' models, on the CPU."""
    args = recorder.args
    if missing_packages("count"):
        counts = {"status": "not installed: " + ", ".join(missing_packages("count"))}
    else:
        limit = LIMIT_S["count"] if args.size == "full" else TOY_LIMIT_S
        messages, stopped, log = run_worker(_command("count", args),
                                            worker_environment("count", args),
                                            min(limit, recorder.left()))
        counts = {**_parts(messages), "status": stopped or "ok"}
        if stopped:
            counts["log_tail"] = log
    recorder.record("count", None, counts, f"count: {counts}")


def speed_part(recorder):
    """The inference processes of the parts asked for, one at a time, each alone on the card."""
    args = recorder.args
    limits = LIMIT_S if args.size == "full" else dict.fromkeys(LIMIT_S, TOY_LIMIT_S)
    for part in ("vit-l16", "axial"):
        if part not in args.parts:
            continue
        end = time.monotonic() + PART_BUDGET_S[args.size][part]
        for name in (n for n, how in SPEED.items() if how["part"] == part):
            left = recorder.left(end)
            skip = _skip_reason(name, args, left)
            if skip:
                row = {"label": SPEED[name]["label"], "status": f"{skip[0]}: {skip[1]}",
                       "time": {}, "errors": {}}
            else:
                row = run_speed(name, args, min(limits[name], left))
            recorder.record("speed", name, row, _speed_line(name, row))


def run_speed(name, args, limit):
    """One inference process: its setup, matmul rate and times, or why it stopped."""
    messages, stopped, log = run_worker(_command(name, args), worker_environment(name, args),
                                        limit)
    row = {"label": SPEED[name]["label"], "status": "ok", "limit_s": round(limit), "time": {},
           "errors": {}}
    if not any(m.get("part") == "done" for m in messages):
        row["status"], row["log_tail"] = stopped or "ended early", log
    for message in messages:
        part = message.pop("part")
        if "error" in message:
            row["errors"][part] = message["error"]
        elif part.startswith("time-"):
            row["time"][part[5:]] = message
        elif part != "done":
            row[part] = message
    return row


def add_speed_shares(results):
    """The best matmul rate of the inference processes, each time's share of it, and the
    AxialResNet50 / BiT-R50x1 ratio, as they stand."""
    speed, flops = results["speed"], results["count"] or {}
    rates = [(row.get("matmul") or {}).get("tflops") for row in speed.values()]
    rate = results["speed_matmul_tflops"] = max(filter(None, rates), default=None)
    for name, row in speed.items():
        counts = flops.get("axial" if name == "axial" else "vit") or {}
        for key, timed in (row.get("time") or {}).items():
            if rate and key in counts:
                timed["gflops_per_image"] = counts[key] / 1e9
                timed["share_of_matmul"] = timed["images_per_s"] * counts[key] / (rate * 1e12)
    timed = (speed.get("axial") or {}).get("time") or {}
    if "AxialResNet50" in timed and "BiT-R50x1" in timed:
        speed["axial"]["axial_over_bit"] = (timed["AxialResNet50"]["seconds"]
                                            / timed["BiT-R50x1"]["seconds"])


def _errors_text(errors):
    return "; ".join(f"{k}: {' '.join(e.split())[:300]}" for k, e in errors.items())


def _memory_line(label, row):
    peak, xla = row.get("peak") or {}, row.get("xla") or {}
    text = f"memory {label}: {row['status']}"
    if "count_bytes" in peak:
        text += (f"; batch {peak['batch']}, peak {_gib(peak['peak_bytes'])} GiB, count "
                 f"{_gib(peak['count_bytes'])} GiB")
        if peak.get("peak_over_count"):
            text += f", peak/count {peak['peak_over_count']:.2f}"
    if "xla_bytes" in xla:
        text += f"; XLA {_gib(xla['xla_bytes'])} GiB, count/XLA {xla['count_over_xla']:.2f}"
    errors = {k: v["error"] for k, v in row.items() if isinstance(v, dict) and "error" in v}
    if row.get("log_tail", "").strip():
        errors["log"] = row["log_tail"].strip().splitlines()[-1]
    return text + ("; " + _errors_text(errors) if errors else "")


def _speed_line(name, row):
    parts = [f"{k} {v['images_per_s']:,.1f} images/s (batch {v['batch']}"
             + (f", {v['share_of_matmul']:.1%} of matmul" if "share_of_matmul" in v else "")
             + ")" for k, v in (row.get("time") or {}).items()]
    text = "; ".join([f"{row['label']}: {row['status']}", *parts])
    if row.get("log_tail", "").strip():
        text += "; log: " + row["log_tail"].strip().splitlines()[-1][:300]
    if row.get("axial_over_bit"):
        text += f"; AxialResNet50 / BiT-R50x1 {row['axial_over_bit']:.2f}"
    if row.get("errors"):
        text += "; " + _errors_text(row["errors"])
    return text


def other_table(results):
    """The other parts' lines: the memory table (peak and XLA against the count), then a line
    for each inference process."""
    lines = ["", f"bf16 matmul of the inference processes, best TFLOP/s: "
                 f"{results['speed_matmul_tflops']}"]
    if results["memory"]:
        lines += ["| configuration | batch | peak GiB | count GiB | peak / count | XLA GiB | "
                  "count / XLA | status |", "|---|---|---|---|---|---|---|---|"]
    for label, row in results["memory"].items():
        peak, xla = row.get("peak") or {}, row.get("xla") or {}
        ratio, over = peak.get("peak_over_count"), xla.get("count_over_xla")
        lines.append(f"| {label} | {peak.get('batch', '-')} | {_gib(peak.get('peak_bytes'))}"
                     f" | {_gib(peak.get('count_bytes'))} | "
                     f"{f'{ratio:.2f}' if ratio else '-'} | {_gib(xla.get('xla_bytes'))} | "
                     f"{f'{over:.2f}' if over else '-'} | {row['status']} |")
    lines += [_speed_line(name, row) for name, row in results["speed"].items()]
    return "\n".join(lines)


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="full",
                        help="full: ViT-B/16 on a GPU (default); toy: a two-layer ViT on the CPU")
    parser.add_argument("--parts", nargs="+", choices=[*PARTS, "all"], default=["vit-b16"],
                        help="vit-b16: the ViT-B/16 rows (default); memory: keras_vit's memory "
                        "count against the measured peak; vit-l16: ViT-L/16 inference beside "
                        "timm; axial: AxialResNet50 against BiT-R50x1; all: every part")
    parser.add_argument("--rows", nargs="+", choices=list(ROWS), default=list(ROWS),
                        help="the ViT-B/16 rows to run, in this order (default: all)")
    parser.add_argument("--batch", type=int, help="the batch of every row (default: the one "
                        "that fills the card by keras_vit.largest_batch; 8 at toy size)")
    parser.add_argument("--budget", type=float,
                        help="seconds for the whole run (default: the parts' shares, "
                        f"{PART_BUDGET_S['full']}; at toy size {PART_BUDGET_S['toy']}); the "
                        "ViT-B/16 rows get what the other parts' shares leave")
    parser.add_argument("--out", help="write every number to this JSON file (after each row)")
    parser.add_argument("--jobs", type=int, help="workers at a time on a CPU (default 2 at toy "
                        "size; 1 on a GPU, where rows would share the card)")
    parser.add_argument("--profile", action="store_true",
                        help="also say where each row's training step goes (one more round "
                        "under its profiler, after the timed ones): on a GPU its kernels by "
                        "their time on the card (torch.profiler; jax.profiler's stream lines), "
                        "on a CPU the operations; torch rows also count the ATen operations a "
                        "step dispatches")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--card-gib", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--index", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker is None and args.batch is not None and args.batch < 1:
        parser.error(f"--batch must be at least 1, got {args.batch}")
    if args.jobs is not None and (args.jobs < 1 or args.jobs > 1 and args.size == "full"):
        parser.error(f"--jobs {args.jobs}: use 1 on a GPU (rows running together would share "
                     "its memory and time), and at least 1 on a CPU")
    args.batch = args.batch or None  # a worker is passed 0 when the plan has not chosen yet
    args.batch_given = args.batch is not None
    args.parts = [p for p in PARTS if p in args.parts or "all" in args.parts]
    shares = PART_BUDGET_S[args.size]
    if args.budget is None:
        args.budget = sum(shares[p] for p in args.parts)
    args.rows_budget = args.budget - sum(shares[p] for p in args.parts if p != "vit-b16")
    return with_size_defaults(args, SIZES[args.size])


def with_size_defaults(args, size):
    """``args`` with every option left unset taken from ``size`` (one of a script's SIZES), and
    the folder of ``--out`` made (by the orchestrator, not its workers)."""
    for key, value in size.items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    if args.worker is None and args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    return args


def main(argv=None):
    args = parse(argv)
    workers = {"plan": plan_worker, "memory": memory_worker, "count": count_worker,
               **dict.fromkeys(ROWS, row_worker), **dict.fromkeys(SPEED, speed_worker)}
    if args.worker:
        return workers[args.worker](args)
    orchestrate(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
