"""Does a small ViT trained on a fine grid develop the paper's inspection structure (Sec. 4.5)?

A ViT on Fashion-MNIST upsampled to 56 px with 4 x 4 patches: a 14 x 14 grid, the grid of
ViT-B/16 at 224 px. It is trained with the package's pre-training recipe and compared with the
same network before training on the numbers behind the paper's Fig. 6, 7 and 11:

- test accuracy on the 10,000 test images;
- per layer, the min / median / max over heads of the mean attention distance (pixels) on
  ``--eval-images`` test images, trained against untrained, and the uniform-attention value;
- position-embedding cosine similarity: mean over patches of the similarity to the 4 grid
  neighbours, to the other patches of the same row / column, and to all other patches;
- attention rollout: the share of the rollout that falls on object patches (mean pixel above
  the background) against the object's share of the patches (what a uniform map gives).

    KERAS_BACKEND=torch python benchmarks/inspection_structure.py \
        --save /tmp/vit.npz --ship keras_vit/inspection/weights/fashion_mnist_vit_56px_p4.npz
    KERAS_BACKEND=jax python benchmarks/inspection_structure.py --measure 20   # time 20 steps

The shipped weights (``keras_vit.inspection.fashion_mnist_vit``) come from
``--steps 3000`` (batch 64: 192,000 images, 3.2 epochs) under torch, one thread pinned to one
core of an idle 2-core AMD EPYC CPU (``OMP_NUM_THREADS=1 taskset -c 0``), 2,015 s; 2026-11-24
23:25 UTC. That run printed:

    test accuracy 0.8754; attention distance over 256 test images; uniform attention 29.1 px
    layer  trained min/median/max   untrained min/median/max  (pixels)
        0   27.4  28.4  29.1         28.8  29.0  29.1
        1   26.6  28.2  28.5         28.3  28.8  29.4
        2   28.1  28.9  29.7         28.3  28.8  29.3
        3   27.9  29.0  29.4         27.6  28.9  29.2
        4   28.6  28.8  29.5         28.7  28.9  30.0
        5   28.2  29.4  30.0         28.3  29.5  30.2
    trained   position-embedding cosine: neighbours +0.495, same_row +0.125, same_column +0.249,
              other -0.018
    trained   rollout share on object patches 0.639 (object patches: 0.544 of the grid)
    untrained position-embedding cosine: neighbours +0.003, same_row -0.006, same_column -0.001,
              other +0.000
    untrained rollout share on object patches 0.589 (object patches: 0.544 of the grid)

The weights shipped before, ``--steps 700 --batch-size 32`` under jax (22,400 images, a third
of an epoch; 36 min at load average 20), gave test accuracy 0.7365, per-layer medians of 28.4-29.7
px (lowest head 27.4), position-embedding similarity neighbours +0.530, same row +0.117, same
column +0.359, and a rollout share of 0.582 on the garment (untrained 0.548).

Read: 8.6 times as many images raised the test accuracy from 0.737 to 0.875 and the rollout's
share on the garment from 0.582 to 0.639 (uniform: 0.544), and the position embeddings kept
the grid (neighbours most similar, then columns, then rows). The attention did not become local:
the lowest head is at 26.6 px, 91 % of uniform attention, every layer's median stays within
1 px of uniform, and the medians do not grow with depth beyond the untrained model's own
spread. After 3 epochs of Fashion-MNIST the paper's local early heads have not formed.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # noqa: E402
import numpy as np  # noqa: E402

import keras_vit  # noqa: E402
from keras_vit import data, inspection  # noqa: E402
from keras_vit.app.shipped import train_fashion_mnist_vit  # noqa: E402


def shipped_config():
    """The description (``ViTConfig``) of the shipped model, ``inspection.fashion_mnist_vit``."""
    return inspection.fashion_mnist_vit(trained=False).config


def build(args, shipped):
    """The shipped architecture (``shipped``, its ``ViTConfig``) with the sizes of ``args``."""
    config = shipped.replace(
        image_size=args.image_size, patch_size=args.patch_size, hidden_size=args.width,
        num_layers=args.depth, num_heads=args.heads, mlp_dim=args.mlp_dim)
    return keras_vit.ViTImageClassifier(config=config, name="fashion_mnist_vit")


def train(args, shipped):
    """The trained model (``keras_vit.app.shipped.train_fashion_mnist_vit``, the shipped
    recipe), its untrained twin, the steps and the seconds of training."""
    keras.utils.set_random_seed(args.seed)
    model = build(args, shipped)
    untrained = keras_vit.ViTImageClassifier.from_config(model.get_config())
    untrained.set_weights(model.get_weights())
    steps = args.measure or args.steps
    start = time.time()
    train_fashion_mnist_vit(steps, batch_size=args.batch_size, learning_rate=args.learning_rate,
                            weight_decay=args.weight_decay, seed=args.seed, model=model)
    seconds = time.time() - start
    return model, untrained, steps, seconds


def ship(source, target):
    """The official .npz ``source`` as float16, compressed: the package data (half the size;
    the model computes in float32 after loading)."""
    with np.load(source) as archive:
        tensors = {key: archive[key].astype(np.float16) for key in archive.files}
    np.savez_compressed(target, **tensors)
    print(f"shipped {target} ({os.path.getsize(target) / 1024:.0f} KiB)")


def distance_rows(values):
    return [[float(np.min(row)), float(np.median(row)), float(np.max(row))] for row in values]


def report(model, untrained, args):
    test = data.load("fashion_mnist", "test", batch_size=500, image_size=args.image_size)
    accuracy = model.evaluate(test, return_dict=True, verbose=0)["accuracy"]
    images, _ = data.as_arrays(data.load("fashion_mnist", "test", batch_size=args.eval_images,
                                         image_size=args.image_size,
                                         max_examples=args.eval_images))
    uniform = inspection.uniform_attention_distance(model)
    result = dict(test_accuracy=float(accuracy), eval_images=len(images),
                  uniform_distance=uniform)
    for name, net in (("trained", model), ("untrained", untrained)):
        result[name] = dict(
            distance_min_median_max=distance_rows(inspection.mean_attention_distance(net, images)),
            position_similarity=inspection.position_similarity_summary(
                inspection.position_embedding_similarity(net)),
            rollout_on_object=float(inspection.rollout_object_share(
                inspection.attention_rollout(net, images), images)[0].mean()))
    result["object_share_of_patches"] = float(
        inspection.rollout_object_share(np.ones((len(images), *model.config.grid)),
                                        images)[1].mean())
    return result


def print_report(result):
    print(f"test accuracy {result['test_accuracy']:.4f}; attention distance over "
          f"{result['eval_images']} test images; uniform attention {result['uniform_distance']:.1f}"
          " px")
    print("layer  trained min/median/max   untrained min/median/max  (pixels)")
    trained = result["trained"]["distance_min_median_max"]
    untrained = result["untrained"]["distance_min_median_max"]
    for layer, (a, b) in enumerate(zip(trained, untrained)):
        print(f"{layer:5d}  {a[0]:5.1f} {a[1]:5.1f} {a[2]:5.1f}        {b[0]:5.1f} {b[1]:5.1f} "
              f"{b[2]:5.1f}")
    for name in ("trained", "untrained"):
        sims = result[name]["position_similarity"]
        print(f"{name:9s} position-embedding cosine: " + ", ".join(
            f"{key} {value:+.3f}" for key, value in sims.items()))
        print(f"{name:9s} rollout share on object patches {result[name]['rollout_on_object']:.3f}"
              f" (object patches: {result['object_share_of_patches']:.3f} of the grid)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    shipped = shipped_config()  # the defaults: the shipped model's architecture
    encoder = shipped.encoder
    parser.add_argument("--image-size", type=int, default=shipped.image_size[0])
    parser.add_argument("--patch-size", type=int, default=shipped.patches.patch_size)
    parser.add_argument("--width", type=int, default=encoder.hidden_size)
    parser.add_argument("--depth", type=int, default=encoder.num_layers)
    parser.add_argument("--heads", type=int, default=encoder.num_heads)
    parser.add_argument("--mlp-dim", type=int, default=encoder.mlp_dim)
    parser.add_argument("--steps", type=int, default=3000)  # the shipped model
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--learning-rate", type=float, default=2e-3)
    parser.add_argument("--weight-decay", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-images", type=int, default=256)
    parser.add_argument("--measure", type=int, default=0,
                        help="only time this many training steps and exit")
    parser.add_argument("--save", help="write the trained model here (official .npz)")
    parser.add_argument("--ship", help="also write the model as float16 package data here")
    parser.add_argument("--json", help="write the numbers here")
    args = parser.parse_args()
    model, untrained, steps, seconds = train(args, shipped)
    print(f"{keras.backend.backend()}: {steps} steps of batch {args.batch_size} in {seconds:.0f} s"
          f" ({seconds / steps:.3f} s/step)", flush=True)
    if args.measure:
        return
    if args.save:
        keras_vit.save_checkpoint(model, args.save)
        print(f"saved {args.save} ({os.path.getsize(args.save) / 1024:.0f} KiB)")
        if args.ship:
            ship(args.save, args.ship)
    result = dict(report(model, untrained, args), steps=steps, train_seconds=seconds,
                  config=vars(args))
    print_report(result)
    if args.json:
        with open(args.json, "w") as file:
            json.dump(result, file, indent=1)


if __name__ == "__main__":
    main()
