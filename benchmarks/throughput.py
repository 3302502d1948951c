"""Inference throughput of keras_vit against keras-hub, and against the machine's matmul rate.

Usage (one backend per process):
    KERAS_BACKEND=jax python benchmarks/throughput.py
    KERAS_BACKEND=torch python benchmarks/throughput.py --batch 8 --rounds 5

Both models are run in the same process with the same configuration (ViT-B/16 at 224 by
default), alternating round by round so that load changes on the machine hit both alike. Each
round times ``--iters`` calls of ``predict_on_batch``; the best round of each is reported.
The float32 matmul rate is measured with the same backend on a (1576 x 768) @ (768 x 3072)
product, the shape of the model's MLP at batch 8 (and a square 2048 product; the larger rate
counts).
"""

import argparse
import os
import time

import keras
import numpy as np

import keras_vit


def vit_macs(model):
    """Multiply-adds per image of a plain ViT classifier (the dominant matrix products)."""
    tokens = model.grid_size[0] * model.grid_size[1] + (model.classifier == "token")
    d, m = model.hidden_size, model.mlp_dim
    patch = model.grid_size[0] * model.grid_size[1] * model.patch_size**2 * model.num_channels * d
    block = tokens * (4 * d * d + 2 * d * m) + 2 * tokens * tokens * d
    head = d * (model.num_classes or 0)
    return patch + model.num_layers * block + head


def matmul_gflops(repeats=10):
    best = 0.0
    for m, k, n in ((1576, 768, 3072), (2048, 2048, 2048)):
        a = keras.ops.convert_to_tensor(np.random.rand(m, k).astype("float32"))
        b = keras.ops.convert_to_tensor(np.random.rand(k, n).astype("float32"))
        matmul = _compiled(lambda x, y: keras.ops.matmul(x, y))
        keras.ops.convert_to_numpy(matmul(a, b))
        start = time.perf_counter()
        for _ in range(repeats):
            out = matmul(a, b)
        keras.ops.convert_to_numpy(out)
        seconds = (time.perf_counter() - start) / repeats
        best = max(best, 2 * m * k * n / seconds / 1e9)
    return best


def _compiled(fn):
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        return jax.jit(fn)
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.function(fn, jit_compile=True)
    return fn


def keras_hub_vit(model):
    import keras_hub

    return keras_hub.models.ViTBackbone(
        image_shape=(*model.image_size, model.num_channels),
        patch_size=model.patch_size,
        num_layers=model.num_layers,
        num_heads=model.num_heads,
        hidden_dim=model.hidden_size,
        mlp_dim=model.mlp_dim,
        dropout_rate=0.0,
        attention_dropout=0.0,
        layer_norm_epsilon=1e-6,
    )


def time_round(model, images, iters):
    start = time.perf_counter()
    for _ in range(iters):
        model.predict_on_batch(images)
    return (time.perf_counter() - start) / iters


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="ViT-B/16")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--no-hub", action="store_true", help="skip the keras-hub comparison")
    args = parser.parse_args()

    ours = keras_vit.create_model(args.model, image_size=args.image_size)
    images = np.random.default_rng(0).uniform(
        -1, 1, (args.batch, args.image_size, args.image_size, 3)
    ).astype("float32")
    models = {"keras_vit": ours}
    if not args.no_hub:
        models["keras-hub"] = keras_hub_vit(ours)
    for model in models.values():  # compile and warm up
        model.predict_on_batch(images)
        model.predict_on_batch(images)

    best = {name: float("inf") for name in models}
    rates = []
    for _ in range(args.rounds):
        rates.append(matmul_gflops())
        for name, model in models.items():
            best[name] = min(best[name], time_round(model, images, args.iters))

    gflop = 2 * vit_macs(ours) / 1e9
    rate = max(rates)
    print(f"backend={keras.backend.backend()} model={args.model} image={args.image_size} "
          f"batch={args.batch} cpus={os.cpu_count()} GFLOP/image={gflop:.2f}")
    print(f"float32 matmul rate: {rate:.1f} GFLOP/s (best of {len(rates)})")
    throughput = {name: args.batch / seconds for name, seconds in best.items()}
    for name, value in throughput.items():
        print(f"{name:>10}: {value:7.2f} img/s  ({value * gflop / rate:6.1%} of the matmul rate)")
    if "keras-hub" in throughput:
        ratio = throughput["keras_vit"] / throughput["keras-hub"]
        print(f"ratio keras_vit / keras-hub: {ratio:.3f}")


if __name__ == "__main__":
    main()
