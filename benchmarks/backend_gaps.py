"""The training-step gaps to timm that are the backends' own, without keras_vit.

    python benchmarks/backend_gaps.py                  # every part whose packages are installed
    python benchmarks/backend_gaps.py --part block --rounds 7
    python benchmarks/backend_gaps.py --part layer-call dense

Three minimal reproductions, each timed in interleaved rounds in one process (medians, ranges):

- ``block``: one pre-LN encoder block of the default `keras-vit train` model's shape (batch 256,
  16 tokens, width 64, 4 heads, MLP 256, tanh GELU), written directly in jax (``jax.jit``), torch
  (eager) and TensorFlow (``tf.function``, with and without XLA), from the same numpy weights.
  No Keras: what each framework makes of the same arithmetic, forward and forward + backward.
- ``layer-call``: the cost of calling a Keras layer on the torch backend against calling the
  ``torch.nn`` module that does the same arithmetic, on one example (so the arithmetic is
  negligible): Keras' per-call Python (``Layer.__call__``: argument binding, masks, autocast scope,
  dtype checks).
- ``dense``: ``keras.layers.Dense`` on the torch backend against ``torch.nn.Linear`` on (4096, 64)
  -> 256 activations, forward and forward + backward: Keras computes ``matmul`` then adds the
  bias, torch's ``Linear`` one ``addmm``.
"""

import argparse
import importlib.util
import os
import statistics
import sys
import time

BATCH, TOKENS, WIDTH, HEADS, MLP = 256, 16, 64, 4, 256
PARTS = ("block", "layer-call", "dense")


def _weights():
    import numpy as np

    rng = np.random.default_rng(0)
    shapes = dict(ln1_scale=(WIDTH,), ln1_bias=(WIDTH,), qkv=(WIDTH, 3 * WIDTH),
                  qkv_bias=(3 * WIDTH,), out=(WIDTH, WIDTH), out_bias=(WIDTH,),
                  ln2_scale=(WIDTH,), ln2_bias=(WIDTH,), mlp1=(WIDTH, MLP), mlp1_bias=(MLP,),
                  mlp2=(MLP, WIDTH), mlp2_bias=(WIDTH,))
    weights = {k: (rng.normal(size=s) * 0.1).astype("float32") for k, s in shapes.items()}
    x = rng.normal(size=(BATCH, TOKENS, WIDTH)).astype("float32")
    return weights, x


def _block(xp, w, x, layer_norm, gelu, softmax):
    """Eq. 2-3 for one block; ``xp`` is the framework's numpy-like module."""
    head_dim = WIDTH // HEADS
    h = layer_norm(x) * w["ln1_scale"] + w["ln1_bias"]
    qkv = xp.reshape(xp.matmul(h, w["qkv"]) + w["qkv_bias"], (BATCH, TOKENS, 3, HEADS, head_dim))
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    probs = softmax(xp.einsum("bqhd,bkhd->bhqk", q, k) / head_dim**0.5)
    context = xp.reshape(xp.einsum("bhqk,bkhd->bqhd", probs, v), (BATCH, TOKENS, WIDTH))
    x = x + xp.matmul(context, w["out"]) + w["out_bias"]
    h = layer_norm(x) * w["ln2_scale"] + w["ln2_bias"]
    h = gelu(xp.matmul(h, w["mlp1"]) + w["mlp1_bias"])
    return x + xp.matmul(h, w["mlp2"]) + w["mlp2_bias"]


def _jax_cases(weights, x):
    import jax
    import jax.numpy as jnp

    def jax_ln(z):
        mean = z.mean(-1, keepdims=True)
        return (z - mean) * jax.lax.rsqrt(((z - mean) ** 2).mean(-1, keepdims=True) + 1e-6)

    def jax_loss(w, z):
        out = _block(jnp, w, z, jax_ln, lambda a: jax.nn.gelu(a, approximate=True),
                     lambda a: jax.nn.softmax(a, -1))
        return (out * out).mean()

    w, z = jax.tree.map(jnp.asarray, (weights, x))
    forward, gradient = jax.jit(jax_loss), jax.jit(jax.grad(jax_loss, argnums=(0, 1)))
    return {"jax (jit, XLA:CPU)": (lambda: forward(w, z).block_until_ready(),
                                   lambda: jax.block_until_ready(gradient(w, z)))}


def _torch_cases(weights, x):
    import torch
    import torch.nn.functional as F

    def torch_loss(w, z):
        out = _block(torch, w, z, lambda a: F.layer_norm(a, (WIDTH,), eps=1e-6),
                     lambda a: F.gelu(a, approximate="tanh"), lambda a: a.softmax(-1))
        return (out * out).mean()

    w = {k: torch.tensor(v, requires_grad=True) for k, v in weights.items()}
    z = torch.tensor(x, requires_grad=True)

    def torch_step():
        torch_loss(w, z).backward()
        for t in (*w.values(), z):
            t.grad = None

    return {"torch (eager)": (lambda: torch_loss(w, z).item(), torch_step)}


def _tensorflow_cases(weights, x):
    import tensorflow as tf

    def tf_ln(z):
        mean, variance = tf.nn.moments(z, axes=[-1], keepdims=True)
        return (z - mean) * tf.math.rsqrt(variance + 1e-6)

    def tf_loss(w, z):
        out = _block(tf, w, z, tf_ln, lambda a: tf.nn.gelu(a, approximate=True),
                     lambda a: tf.nn.softmax(a, -1))
        return tf.reduce_mean(out * out)

    w = {k: tf.Variable(v) for k, v in weights.items()}
    z = tf.Variable(x)

    def tf_grad(w, z):
        with tf.GradientTape() as tape:
            loss = tf_loss(w, z)
        return tape.gradient(loss, (w, z))

    cases = {}
    for xla in (True, False):
        forward = tf.function(tf_loss, jit_compile=xla)
        gradient = tf.function(tf_grad, jit_compile=xla)
        cases[f"tensorflow (tf.function, {'XLA' if xla else 'no XLA'})"] = (
            lambda f=forward: f(w, z).numpy(),
            lambda g=gradient: [t.numpy() for t in tf.nest.flatten(g(w, z))])
    return cases


def block_cases():
    """Case name -> a no-argument function that waits for its result: each installed framework's
    block, forward and forward + backward."""
    weights, x = _weights()
    cases = {}
    for module, make in (("jax", _jax_cases), ("torch", _torch_cases),
                         ("tensorflow", _tensorflow_cases)):
        if importlib.util.find_spec(module):
            cases.update(make(weights, x))
    return {f"{name}, {kind}": fn for name, pair in cases.items()
            for kind, fn in zip(("forward", "forward+backward"), pair)}


def _keras_torch():
    """Keras on the torch backend in this process, or a clear error."""
    os.environ.setdefault("KERAS_BACKEND", "torch")
    import keras

    if keras.backend.backend() != "torch":
        sys.exit(f"the layer-call and dense parts need KERAS_BACKEND=torch (or unset); "
                 f"this process has {keras.backend.backend()!r}")
    return keras


def layer_call_cases():
    import torch

    keras = _keras_torch()
    x = torch.zeros(1, WIDTH)
    pairs = [("Dense(64)", keras.layers.Dense(WIDTH), "Linear(64, 64)",
              torch.nn.Linear(WIDTH, WIDTH)),
             ("LayerNormalization", keras.layers.LayerNormalization(epsilon=1e-6),
              "LayerNorm(64)", torch.nn.LayerNorm(WIDTH, eps=1e-6)),
             ("Dropout(0.0)", keras.layers.Dropout(0.0), "Dropout(0.0)", torch.nn.Dropout(0.0))]
    cases = {}
    for keras_name, keras_layer, torch_name, module in pairs:
        keras_layer(x)  # build
        cases[f"keras.layers.{keras_name}"] = lambda f=keras_layer: f(x, training=True)
        cases[f"torch.nn.{torch_name}"] = lambda f=module: f(x)
    return {name: _no_grad(fn) for name, fn in cases.items()}


def _no_grad(fn):
    import torch

    def call():
        with torch.no_grad():
            return fn()

    return call


def dense_cases():
    import torch

    keras = _keras_torch()
    x = torch.randn(BATCH * TOKENS, WIDTH, requires_grad=True)
    dense = keras.layers.Dense(MLP)
    dense(x)
    linear = torch.nn.Linear(WIDTH, MLP)

    def step(f):
        f(x).sum().backward()
        x.grad = None

    return {"keras Dense, forward": lambda: dense(x),
            "torch.nn.Linear, forward": lambda: linear(x),
            "keras Dense, forward+backward": lambda: step(dense),
            "torch.nn.Linear, forward+backward": lambda: step(linear)}


def measure(cases, rounds, repeats, warmup=3):
    for fn in cases.values():
        for _ in range(warmup):
            fn()
    times = {name: [] for name in cases}
    names = list(cases)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            start = time.perf_counter()
            for _ in range(repeats):
                cases[name]()
            times[name].append((time.perf_counter() - start) / repeats)
    return times


def table(times, unit, scale):
    lines = [f"| case | {unit}, median (range) |", "|---|---|"]
    for name, values in times.items():
        lines.append(f"| {name} | {statistics.median(values) * scale:.3f} "
                     f"({min(values) * scale:.3f}-{max(values) * scale:.3f}) |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    missing = [p for p in args.part if p != "block" and not importlib.util.find_spec("torch")]
    if missing:
        parser.error(f"{', '.join(missing)} need torch and keras: pip install torch")
    if "block" in args.part and not any(importlib.util.find_spec(m)
                                        for m in ("jax", "torch", "tensorflow")):
        parser.error("block needs jax, torch or tensorflow: pip install jax (or torch, or "
                     "tensorflow-cpu)")
    load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"date={time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} cpus={os.cpu_count()} "
          f"load average {load}; rounds={args.rounds}")
    if "layer-call" in args.part:
        print("\nOne call on one example (Keras on torch against torch.nn)\n")
        print(table(measure(layer_call_cases(), args.rounds, repeats=200), "us", 1e6))
    if "dense" in args.part:
        print("\n(4096, 64) -> 256 (Keras Dense on torch against torch.nn.Linear)\n")
        print(table(measure(dense_cases(), args.rounds, repeats=20), "ms", 1e3))
    # Last: Keras must meet torch as its backend before tensorflow is imported here.
    if "block" in args.part:
        print("\nOne encoder block, batch 256 x 16 tokens x 64 (no Keras)\n")
        print(table(measure(block_cases(), args.rounds, repeats=10), "ms", 1e3))
    print(f"\nafter: load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
