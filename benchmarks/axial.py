"""Paper Fig. 13 in numbers: inference speed and FLOPs of the axial models beside ViT and BiT.

Usage (one backend per process; small batches keep a run short on a shared 2-core CPU):
    KERAS_BACKEND=jax python benchmarks/axial.py                      # the six models, batch 2
    KERAS_BACKEND=jax python benchmarks/axial.py --models BiT-R50x1 AxialResNet50 --rounds 5
    KERAS_BACKEND=jax python benchmarks/axial.py --layer              # one attention vs 3x3 conv

All models are built in one process and timed side by side: every round calls
``predict_on_batch`` once per model, in turn, so that load changes hit all alike; the table gives
the median over the rounds, as images/s, with the forward FLOPs of ``keras_vit.flops`` (a
multiply-add is 2 FLOPs) at the same size. The last line is the AxialResNet50 / BiT-R50x1 time
per image at equal batch (goal: at most 1.5).

Measured (2-core AMD EPYC, shared, load 9-11, 2026-11-25 11:04-11:36 UTC, jax, batch 2,
224 px, medians of 3 interleaved rounds, the default command):

    model              GFLOPs   images/s   ms/image
    ViT-B/32             8.82       1.44      692.3
    ViT-B/16            35.13       0.56     1779.5
    Axial-ViT-B/32      19.29       0.62     1600.5
    Axial-ViT-B/16      71.80       0.24     4123.7
    BiT-R50x1            8.18       0.92     1088.2
    AxialResNet50        8.11       0.57     1762.0
    AxialResNet50 / BiT-R50x1 time per image: 1.62 (goal <= 1.5)

The goal is not met on this machine (1.62x; an earlier quick run with the references' einsum
formulation gave 1.7-2.1x at the same load). Like Fig. 13, the AxialResNet matches ResNet50 in
FLOPs but not in speed; the Axial-ViTs cost about twice their ViT (2.3x the time at /16, here).
Only jax was measured: tensorflow and torch were not run for lack of time.

What was tried for ``PositionSensitiveAxialAttention`` (2026-11-25, jax on the same machine at
load 10-11; one layer on a (2, 56, 56, 64) map with 8 heads, AxialResNet50's first stage;
seconds per call, medians of 7-9 interleaved rounds, a 3x3 convolution of the same map 0.035-
0.057 s in the same runs):

- einsums on the (batch, other, L, heads, width) layout, relative tables gathered to
  (width, L, L) (the references' formulation): 0.22-0.31 s. Plain attention alone on that
  layout (no relative terms) already costs 0.15 s: the einsums transpose behind the scenes.
- heads before positions, every product a batched matmul: plain attention 0.048-0.052 s (3x
  faster); with the relative terms as matmuls batched over the query position (the folded
  axis): 0.22 s (the per-position products need logits-sized transposes).
- relative logits by "skewing" q @ table (2L - 1 offsets) with pad/reshape/slice instead of a
  gather: 0.35 s; with gathers (``take``): 0.38-0.48 s. XLA:CPU copies these slices slowly.
- the relative terms as element-wise broadcast products summed over the width: 0.21-0.61 s
  (a reduction over a minor axis of 4 is not vectorised).
- kept: heads-major batched matmuls for q k^T and the probabilities times v, the query and key
  relative logits as one fused sum of broadcast products unrolled over the q/k width (4-32
  channels, vectorised along the keys), the value term as one einsum: 0.117 s (2.6x faster
  than the references' formulation). Torch (eager) showed the same order: 0.70 s for the
  einsums, 0.56 s for matmuls batched over positions.
"""

import argparse
import statistics
import time

import keras
import numpy as np

import keras_vit
from keras_vit.models import registry

MODELS = ("ViT-B/32", "ViT-B/16", "Axial-ViT-B/32", "Axial-ViT-B/16", "BiT-R50x1",
          "AxialResNet50")


def side_by_side(calls, rounds):
    """Median seconds of each named call, timed in interleaved rounds (after one warm-up)."""
    for call in calls.values():
        call()
    times = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def model_table(args):
    images = np.random.default_rng(0).uniform(
        -1, 1, (args.batch, args.image_size, args.image_size, 3)).astype("float32")
    models = {name: registry.build_model(name, image_size=args.image_size)
              for name in args.models}
    calls = {name: (lambda m=m: m.predict_on_batch(images)) for name, m in models.items()}
    seconds = side_by_side(calls, args.rounds)
    print(f"backend={keras.backend.backend()} batch={args.batch} image={args.image_size} "
          f"rounds={args.rounds} (medians)")
    print(f"{'model':<16} {'GFLOPs':>8} {'images/s':>10} {'ms/image':>10}")
    for name, model in models.items():
        gflops = keras_vit.flops(model) / 1e9
        print(f"{name:<16} {gflops:8.2f} {args.batch / seconds[name]:10.2f} "
              f"{1000 * seconds[name] / args.batch:10.1f}")
    if {"AxialResNet50", "BiT-R50x1"} <= set(seconds):
        ratio = seconds["AxialResNet50"] / seconds["BiT-R50x1"]
        print(f"AxialResNet50 / BiT-R50x1 time per image: {ratio:.2f} (goal <= 1.5)")


def layer_table(args):
    """One position-sensitive axial attention against the 3x3 convolution it replaces."""
    from keras_vit.layers.axial import PositionSensitiveAxialAttention

    shape = (args.batch, 56, 56, 64)
    x = keras.ops.convert_to_tensor(np.random.default_rng(0).normal(size=shape).astype("float32"))
    attention = PositionSensitiveAxialAttention(8, axis=1)
    conv = keras.layers.Conv2D(64, 3, padding="same", use_bias=False)
    calls = {}
    for name, layer in (("axial attention", attention), ("3x3 conv", conv)):
        layer.build(shape)
        fn = keras.Sequential([keras.Input(shape[1:], batch_size=shape[0]), layer])
        calls[name] = lambda fn=fn: fn.predict_on_batch(x)
    seconds = side_by_side(calls, args.rounds)
    print(f"backend={keras.backend.backend()} input={shape} rounds={args.rounds} (medians)")
    for name, value in seconds.items():
        print(f"{name:<16} {1000 * value:8.1f} ms")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--layer", action="store_true",
                        help="time one axial attention layer against a 3x3 convolution")
    args = parser.parse_args()
    (layer_table if args.layer else model_table)(args)


if __name__ == "__main__":
    main()
