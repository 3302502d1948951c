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

Measured (2-core AMD EPYC, shared with other timing runs, 2026-11-25, batch 2, 224 px, medians
of 3 interleaved rounds, the default command, one backend after the other; images/s):

    model            GFLOPs    jax 19:29-19:34   tensorflow 19:34-19:37   torch 19:37-19:40
    ViT-B/32           8.82         2.84                3.27                    0.88
    ViT-B/16          35.13         1.10                1.07                    0.57
    Axial-ViT-B/32    19.29         1.25                1.54                    0.54
    Axial-ViT-B/16    71.80         0.55                0.54                    0.29
    BiT-R50x1          8.18         2.02                2.18                    0.50
    AxialResNet50      8.11         1.03                0.90                    0.14
    AxialResNet50 / BiT-R50x1       1.96                2.42                    3.50

(load averages 3.6-5.9). The ratio moves a lot with the load on this machine: under jax the same
code gave 1.57 with ``--models BiT-R50x1 AxialResNet50 --rounds 5`` (19:44-19:48 UTC, load
5.5-5.9: BiT-R50x1 2.29, AxialResNet50 1.46 images/s) and 1.30 in a run that timed BiT-R50x1,
the AxialResNet50 of this formulation and that of the previous one in the same rounds (19:41-
19:44, load 5-6, 3 rounds: 1152, 1500 and 2328 ms a batch; the previous formulation 2.02x).
So under jax the attention got 1.55x faster side by side, and the 1.5x goal is met in some
runs, not reliably; under tensorflow and torch it is not met. Torch runs eagerly and stalls
when the two cores are shared (BiT-R50x1 itself ran 4x slower than under tensorflow); neither
runs XLA on the CPU, so every element-wise step over the (lines, L, L) logits is a pass
through memory: 2.8 million numbers per attention at 56 px and batch 2.

What was tried for ``PositionSensitiveAxialAttention``, first round (2026-11-25, jax on the
same machine at load 10-11; one layer on a (2, 56, 56, 64) map with 8 heads, AxialResNet50's
first stage; seconds per call, medians of 7-9 interleaved rounds, a 3x3 convolution of the
same map 0.035-0.057 s in the same runs):

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
- kept then: heads-major batched matmuls for q k^T and the probabilities times v, the query
  and key relative logits as one fused sum of broadcast products unrolled over the q/k width,
  the value term as one einsum: 0.117 s.

Second round (2026-11-25 18:55-19:28 UTC, load 2.6-6; one layer, batch 2, 8 heads, ms per
call, medians of 5-7 interleaved rounds; ``--layer`` times the first shape):

- where the time went (jax, (2, 56, 56, 64)): 62 ms for the layer, 40 without the relative
  terms, 23.5 without the attention at all (projection, transposes, the two GroupNorms), 4.1
  without the GroupNorms either: Keras' ``GroupNormalization`` (one (positions, 2-4 channels)
  block per group) alone took 11 ms on that map, a 3x3 convolution 20 ms. Under tensorflow the
  same split was 224 / 80 / 48 / 9.5 ms. In the whole AxialResNet50 (jax, batch 2, load 5.5)
  the 32 attentions took 920 of 1588 ms (1588 against 668 with each attention replaced by a
  GroupNorm), BiT-R50x1 864 ms.
- the GroupNorms from per-channel means over the positions, then means over each group's
  channels (the same statistics, two passes as the layer's), and one transpose each way
  between the NHWC map and the heads-major lines: the layer 32-38 ms against 50-56 ms (jax);
  torch 201-318 against 396-421 ms; tensorflow 97-105 against 104-112 ms; on (2, 14, 14, 256)
  tensorflow 11-12 against 20-22 ms, torch 14-19 against 39-58 ms.
- the q/k relative logits as matmuls against the raw (width, 2L - 1) table, shifted into
  place by reshaping the flat array with rows of 2L - 2 (``offsets_to_positions``; the key
  term is the query term of the reversed table, transposed), and the value term as the
  probabilities shifted to offsets (pad, rows of 2L) times the table, one plain matmul: on
  (2, 56, 56, 64) torch 64-69 ms against 110-179 ms for the fused sum (which eager torch
  materialises product by product), tensorflow 84-117 against 117 ms, but jax 172-206 against
  60-72 ms: XLA:CPU's reshaped slices are slow copies (the matmul q @ table alone 8.9 ms, the
  fused broadcast sum 3.3 ms; the probabilities' shift 31.6 ms, the einsum 12.4 ms). Kept for
  torch and tensorflow.
- jax, q/k 8 channels wide ((2, 56, 56, 128), the first unit of the second stage, the layer
  that cost most): the fused sum 213-252 ms (40 ms without any attention, 50 without the
  relative terms), the shifted matmuls 236, einsums 224, the sum in chunks of 4 channels 248,
  matmuls batched over the position with explicit transposes of q, k and the tables and of
  the two (L, lines, L) products 148 ms; on (2, 28, 28, 256) 12.7 against 18.4 ms; but on
  4-channel q/k 128 against 51 ms. Kept: the fused sum up to 4 channels, the position-batched
  matmuls above. (Presumably XLA fuses the wide sum into each of the softmax's passes.)
- rejected under jax: the value term as matmuls batched over the position (no gain, 37
  against 46 ms at 4 channels, 212 against 216 at 8); logits all as broadcast products,
  q k^T included (52 against 46 ms).
"""

import argparse

import keras
import numpy as np

import keras_vit
from keras_vit.evaluation.speed import median_seconds

MODELS = ("ViT-B/32", "ViT-B/16", "Axial-ViT-B/32", "Axial-ViT-B/16", "BiT-R50x1",
          "AxialResNet50")


def model_table(args):
    images = np.random.default_rng(0).uniform(
        -1, 1, (args.batch, args.image_size, args.image_size, 3)).astype("float32")
    models = {name: keras_vit.create_model(name, image_size=args.image_size)
              for name in args.models}
    calls = {name: (lambda m=m: m.predict_on_batch(images)) for name, m in models.items()}
    seconds = median_seconds(calls, rounds=args.rounds)
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
    seconds = median_seconds(calls, rounds=args.rounds)
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
