"""Inference throughput of keras_vit's ViTBackbone against keras-hub's and the matmul rate.

Usage (one backend per process):
    KERAS_BACKEND=jax python benchmarks/throughput.py
    KERAS_BACKEND=torch python benchmarks/throughput.py --batch 8 --rounds 5
    KERAS_BACKEND=jax python benchmarks/throughput.py --family      # BiT-R50x1, R50+ViT-B/16
    KERAS_BACKEND=jax python benchmarks/throughput.py --memory 4    # largest batch in 4 GiB
    KERAS_BACKEND=jax python benchmarks/throughput.py --vit-jax ~/vision_transformer  # + flax

Both backbones (no head: keras-hub's ``ViTBackbone`` has none; ``create_model(...,
num_classes=None)`` is keras_vit's) are run in the same process with the same configuration
(ViT-B/16 at 224 by default), alternating round by round so that load changes on the machine
hit both alike. Each round times ``--iters`` calls of ``predict_on_batch``; the best round of
each is reported.
The float32 matmul rate is measured with the same backend on a (1576 x 768) @ (768 x 3072)
product, the shape of the model's MLP at batch 8 (and a square 2048 product; the larger rate
counts). On jax, ``--vit-jax DIR`` (a clone of google-research/vision_transformer: the package
index has no vit_jax) adds the official flax model of the same shape, jitted, in the same rounds:
what XLA makes of the paper's forward written without Keras.
"""

import argparse
import json
import os
import subprocess
import sys
import time

import keras
import numpy as np

import keras_vit


def vit_macs(config):
    """Multiply-adds per image of a plain ViT (the dominant matrix products) of a ``ViTConfig``;
    the head's only when the config has one."""
    encoder, (rows, cols) = config.encoder, config.grid
    tokens = rows * cols + (encoder.classifier == "token")
    d, m = encoder.hidden_size, encoder.mlp_dim
    patch = rows * cols * config.patches.patch_size**2 * config.patches.num_channels * d
    block = tokens * (4 * d * d + 2 * d * m) + 2 * tokens * tokens * d
    head = 0 if config.head is None else d * config.head.num_classes
    return patch + encoder.num_layers * block + head


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


def keras_hub_vit(config):
    """keras-hub's ``ViTBackbone`` of the shape of ``config`` (a ``ViTConfig``)."""
    import keras_hub

    encoder = config.encoder
    return keras_hub.models.ViTBackbone(
        image_shape=(*config.image_size, config.patches.num_channels),
        patch_size=config.patches.patch_size,
        num_layers=encoder.num_layers,
        num_heads=encoder.num_heads,
        hidden_dim=encoder.hidden_size,
        mlp_dim=encoder.mlp_dim,
        dropout_rate=0.0,
        attention_dropout=0.0,
        layer_norm_epsilon=encoder.layer_norm_epsilon,
        use_class_token=encoder.classifier == "token",
    )


def time_round(model, images, iters):
    start = time.perf_counter()
    for _ in range(iters):
        model.predict_on_batch(images)
    return (time.perf_counter() - start) / iters


class FlaxViT:
    """vit_jax's ``VisionTransformer`` of ``config``'s shape, no head, as ``predict_on_batch``."""

    def __init__(self, config, folder):
        import types

        import jax

        sys.path.insert(0, os.path.abspath(os.path.expanduser(folder)))
        from vit_jax import models_vit

        encoder, size = config.encoder, config.patches.patch_size
        model = models_vit.VisionTransformer(
            num_classes=None, patches=types.SimpleNamespace(size=(size, size)),
            hidden_size=encoder.hidden_size, classifier=encoder.classifier,
            representation_size=None,
            transformer=dict(num_layers=encoder.num_layers, num_heads=encoder.num_heads,
                             mlp_dim=encoder.mlp_dim, dropout_rate=0.0,
                             attention_dropout_rate=0.0))
        shape = (1, *config.image_size, config.patches.num_channels)
        self.params = model.init(jax.random.PRNGKey(0), np.zeros(shape, "float32"),
                                 train=False)["params"]
        self.apply = jax.jit(lambda params, x: model.apply({"params": params}, x, train=False))

    def predict_on_batch(self, images):
        return np.asarray(self.apply(self.params, images))


FAMILY_MODELS = ("ViT-B/16", "BiT-R50x1", "R50+ViT-B/16")
MEMORY_MODELS = ("ViT-B/32", "ViT-B/16", "BiT-R50x1")


def family_table(args):
    """Inference images/s of the three families at 224 and 384 (paper Fig. 12, left)."""
    print(f"backend={keras.backend.backend()} batch={args.batch} (best of {args.rounds} rounds)")
    print(f"{'model':>14} {'224 px':>10} {'384 px':>10}")
    for name in FAMILY_MODELS:
        row = []
        for size in (224, 384):
            model = keras_vit.create_model(name, image_size=size)
            images = np.zeros((args.batch, size, size, 3), "float32")
            model.predict_on_batch(images)
            seconds = min(time_round(model, images, args.iters) for _ in range(args.rounds))
            row.append(args.batch / seconds)
            del model
        print(f"{name:>14} {row[0]:>8.2f}/s {row[1]:>8.2f}/s")


def _peak_memory_gib(name, batch, image_size):
    """Peak resident memory of a fresh process that builds ``name`` and runs one batch."""
    code = (
        "import resource, numpy as np, keras_vit\n"
        f"m = keras_vit.create_model({name!r}, image_size={image_size})\n"
        f"m.predict_on_batch(np.zeros(({batch}, {image_size}, {image_size}, 3), 'float32'))\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    return int(out.stdout.strip().splitlines()[-1]) / 2**20


def memory_table(args):
    """The largest inference batch whose process peak memory stays within --memory GiB.

    Peak memory is linear in the batch; it is measured at batches 1 and 8, the largest batch
    under the budget is extrapolated, then measured to confirm (paper Fig. 12, right).
    """
    budget = args.memory
    print(f"backend={keras.backend.backend()} image={args.image_size} budget={budget} GiB "
          f"(peak resident memory of the whole process)")
    rows = {}
    for name in MEMORY_MODELS:
        one, eight = (_peak_memory_gib(name, b, args.image_size) for b in (1, 8))
        per_image = max((eight - one) / 7, 1e-6)
        batch = max(int((budget - one) / per_image) + 1, 0)
        while batch > 0 and _peak_memory_gib(name, batch, args.image_size) > budget:
            batch = int(batch * 0.9)
        rows[name] = dict(base_gib=round(one - per_image, 3),
                          mib_per_image=round(per_image * 1024, 1), max_batch=batch)
        print(f"{name:>10}: {per_image * 1024:7.1f} MiB/image over {one - per_image:.2f} GiB "
              f"-> largest batch {batch}")
    print(json.dumps(rows))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="ViT-B/16")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--no-hub", action="store_true", help="skip the keras-hub comparison")
    parser.add_argument("--vit-jax", metavar="DIR", default=None,
                        help="a google-research/vision_transformer clone: add its flax model (jax)")
    parser.add_argument("--family", action="store_true",
                        help="table of ViT-B/16, BiT-R50x1 and R50+ViT-B/16 at 224 and 384")
    parser.add_argument("--memory", type=float, default=None, metavar="GIB",
                        help="largest batch of ViT-B/32, ViT-B/16, BiT-R50x1 within GIB memory")
    args = parser.parse_args()
    if args.vit_jax:
        if keras.backend.backend() != "jax":
            parser.error("--vit-jax compares on the jax backend: run with KERAS_BACKEND=jax")
        if not os.path.isfile(os.path.join(os.path.expanduser(args.vit_jax), "vit_jax",
                                           "models_vit.py")):
            parser.error(f"--vit-jax {args.vit_jax!r} holds no vit_jax/models_vit.py: git clone "
                         "https://github.com/google-research/vision_transformer and name the clone")
    if args.family:
        return family_table(args)
    if args.memory is not None:
        return memory_table(args)

    # Backbone against backbone: keras-hub's ViTBackbone has no head, so neither does ours.
    ours = keras_vit.create_model(args.model, image_size=args.image_size, num_classes=None)
    images = np.random.default_rng(0).uniform(
        -1, 1, (args.batch, args.image_size, args.image_size, 3)
    ).astype("float32")
    models = {"keras_vit": ours}
    if not args.no_hub:
        models["keras-hub"] = keras_hub_vit(ours.config)
    if args.vit_jax:
        models["flax"] = FlaxViT(ours.config, args.vit_jax)
    for model in models.values():  # compile and warm up
        model.predict_on_batch(images)
        model.predict_on_batch(images)

    best = {name: float("inf") for name in models}
    rates = []
    for _ in range(args.rounds):
        rates.append(matmul_gflops())
        for name, model in models.items():
            best[name] = min(best[name], time_round(model, images, args.iters))

    gflop = 2 * vit_macs(ours.config) / 1e9
    rate = max(rates)
    print(f"backend={keras.backend.backend()} model={args.model} image={args.image_size} "
          f"batch={args.batch} cpus={os.cpu_count()} GFLOP/image={gflop:.2f}")
    print(f"float32 matmul rate: {rate:.1f} GFLOP/s (best of {len(rates)})")
    throughput = {name: args.batch / seconds for name, seconds in best.items()}
    for name, value in throughput.items():
        print(f"{name:>10}: {value:7.2f} img/s  ({value * gflop / rate:6.1%} of the matmul rate)")
    for other in ("keras-hub", "flax"):
        if other in throughput:
            print(f"ratio keras_vit / {other}: {throughput['keras_vit'] / throughput[other]:.3f}")


if __name__ == "__main__":
    main()
