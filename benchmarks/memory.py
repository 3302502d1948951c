"""The paper's Fig. 12 (right) from the memory model, its agreement with XLA, and CPU throughput.

    python benchmarks/memory.py                      # largest inference batch per 16 GiB chip
    python benchmarks/memory.py --train              # ... of a training step (SGD, float32)
    python benchmarks/memory.py --plot fig12.png     # and draw it
    python benchmarks/memory.py --xla                # the model against XLA:CPU (jax backend)
    python benchmarks/memory.py --throughput         # CPU inference images/s against size

The table comes from ``keras_vit.costs.batches.figure_12`` (nothing is built). The paper's
reading (Appendix D.5, Fig. 12 right, inference on a 16 GiB TPUv3 core): large ViTs fit larger
batches than ResNets, and every model's batch falls as the resolution grows.

Measured 2026-11-25 (jax, 2-core AMD EPYC, shared, load 2.9), ``--throughput`` at batch 8:
ViT-Ti/16 21.0/10.6/4.6 images/s at 224/288/384 px, BiT-R26x1 8.3/5.6/2.9. ``--xla``: see
docs/any-size-and-compute.md.
"""

import argparse
import os

PAPER = ("paper (Fig. 12 right): ViT models are clearly more memory-efficient than ResNets; "
         "the batch that fits falls as the resolution grows")


def print_table(table, memory_gib, training):
    sizes = [size for size, _ in next(iter(table.values()))]
    step = "training (SGD)" if training else "inference"
    print(f"largest {step} batch per {memory_gib} GiB device, float32, from keras_vit.memory")
    print(f"{'model':14s}" + "".join(f"{size:>8d}" for size in sizes))
    for name, row in table.items():
        print(f"{name:14s}" + "".join(f"{batch:8d}" for _, batch in row))
    print(PAPER)


def plot(table, path, memory_gib, training):
    from keras_vit.inspection import plot_largest_batch

    plot_largest_batch(table, memory_gib, training).savefig(path, dpi=120)
    print(f"wrote {path}")


def xla_table(only=None):
    """The memory model against XLA:CPU on small random ViT, hybrid, BiT, Axial-ViT and
    AxialResNet configurations (those whose label contains ``only``, if given)."""
    import keras

    from keras_vit import AxialResNetImageClassifier, ResNetImageClassifier, ViTImageClassifier
    from keras_vit.costs.memory import xla_comparison

    vit = dict(num_classes=10)
    configurations = [
        ("ViT D64 L2 N65", ViTImageClassifier, dict(vit, image_size=64, patch_size=8,
         hidden_size=64, num_layers=2, num_heads=4, mlp_dim=256), 16),
        ("ViT D96 L3 N257", ViTImageClassifier, dict(vit, image_size=64, patch_size=4,
         hidden_size=96, num_layers=3, num_heads=3, mlp_dim=192), 8),
        ("ViT gap D128 L4", ViTImageClassifier, dict(vit, image_size=96, patch_size=16,
         hidden_size=128, num_layers=4, num_heads=8, mlp_dim=512, classifier="gap"), 16),
        ("hybrid (1,1)", ViTImageClassifier, dict(vit, image_size=64, patch_size=1,
         hidden_size=64, num_layers=2, num_heads=4, mlp_dim=128,
         stem=dict(num_layers=(1, 1), width_factor=0.5)), 8),
        ("hybrid (2,1,1)", ViTImageClassifier, dict(vit, image_size=64, patch_size=1,
         hidden_size=64, num_layers=1, num_heads=2, mlp_dim=128,
         stem=dict(num_layers=(2, 1, 1), width_factor=0.5)), 8),
        ("BiT (1,1)", ResNetImageClassifier, dict(vit, image_size=64, block_units=(1, 1),
         width_factor=0.5), 8),
        ("BiT (2,1,1)", ResNetImageClassifier, dict(vit, image_size=64, block_units=(2, 1, 1),
         width_factor=0.5), 8),
        ("Axial-ViT D64 L2", ViTImageClassifier, dict(vit, axial=True, image_size=64,
         patch_size=8, hidden_size=64, num_layers=2, num_heads=4, mlp_dim=256), 16),
        ("Axial-ViT gap D96", ViTImageClassifier, dict(vit, axial=True, image_size=64,
         patch_size=4, hidden_size=96, num_layers=2, num_heads=3, mlp_dim=192,
         classifier="gap"), 8),
        ("AxialResNet (1,1)", AxialResNetImageClassifier, dict(vit, image_size=64,
         block_units=(1, 1), width_factor=0.5, num_heads=2), 8),
        ("AxialResNet (2,1,1)", AxialResNetImageClassifier, dict(vit, image_size=64,
         block_units=(2, 1, 1), width_factor=0.5, num_heads=4), 8),
    ]
    print(f"memory model / XLA:CPU (jax {__import__('jax').__version__}, keras "
          f"{keras.__version__}): argument + output - alias + temp bytes of the compiled step")
    print(f"{'configuration':18s} {'step':8s} {'batch':>5s} {'model MiB':>10s} {'XLA MiB':>9s} "
          f"{'ratio':>6s}")
    for label, model_class, config, batch in configurations:
        if only is not None and only not in label:
            continue
        model = model_class(**config)
        for training in (True, False):
            for row in xla_comparison({label: model}, (batch, 2 * batch), training=training):
                print(f"{label:18s} {'train' if training else 'predict':8s} {row.batch_size:5d} "
                      f"{row.count / 2**20:10.2f} {row.xla / 2**20:9.2f} {row.ratio:6.2f}",
                      flush=True)


def throughput(sizes, batch, rounds):
    """Inference images/s of small models on this CPU, median of interleaved rounds (Fig. 12
    left, as notebook 08 draws it)."""
    from keras_vit.evaluation import speed_by_size

    names = ("ViT-Ti/16", "BiT-R26x1")
    table = speed_by_size(names, sizes, batch_size=batch, rounds=rounds)
    print(f"CPU inference, batch {batch}, images/s (median of {rounds} interleaved rounds), "
          f"{os.cpu_count()}-core CPU, load {os.getloadavg()[0]:.1f}, "
          f"backend {__import__('keras').backend.backend()}")
    for name in names:
        print(f"{name:14s}" + "".join(f"{size:>6d}px {speed:7.1f}" for size, speed in table[name]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memory-gib", type=float, default=16)
    parser.add_argument("--train", action="store_true", help="a training step, not inference")
    parser.add_argument("--plot", metavar="PNG")
    parser.add_argument("--xla", action="store_true")
    parser.add_argument("--xla-only", metavar="LABEL",
                        help="with --xla, only the configurations whose label contains LABEL")
    parser.add_argument("--throughput", action="store_true")
    parser.add_argument("--sizes", type=int, nargs="+", default=(224, 288, 384, 448, 512))
    args = parser.parse_args()
    from keras_vit.costs.batches import figure_12

    table = figure_12(sizes=args.sizes, memory_gib=args.memory_gib, training=args.train)
    print_table(table, args.memory_gib, args.train)
    if args.plot:
        plot(table, args.plot, args.memory_gib, args.train)
    if args.xla:
        xla_table(args.xla_only)
    if args.throughput:
        throughput((224, 288, 384), batch=8, rounds=5)


if __name__ == "__main__":
    main()
