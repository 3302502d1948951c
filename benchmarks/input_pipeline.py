"""Seconds per epoch of the training input pipeline alone (no model): what ``keras-vit train``
spends on tf.data besides the training steps.

Usage:
    python benchmarks/input_pipeline.py                          # Fashion-MNIST, flips only
    python benchmarks/input_pipeline.py --augmentation pad_crop --batch-size 256

Each round builds the pipeline of ``keras-vit train`` (shuffled, augmented, one-hot labels) and
pulls one epoch of batches as numpy arrays, as Keras does under jax; the best of ``--rounds`` is
reported with the median.
"""

import argparse
import statistics
import time

from keras_vit import data
from keras_vit.data.preprocessing import TRAIN_AUGMENTATIONS


def epoch_seconds(examples, batch_size, augmentation, steps):
    batches = data.pipeline(examples, batch_size=batch_size, image_size=28, num_classes=10,
                            training=True, augmentation=augmentation, repeat=True, replicas=1)
    iterator = iter(batches.as_numpy_iterator())
    next(iterator)  # start the threads before timing
    started = time.perf_counter()
    for _ in range(steps):
        next(iterator)
    return time.perf_counter() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--augmentation", default="resize", choices=TRAIN_AUGMENTATIONS)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    examples = data.load_examples("fashion_mnist", "train")
    steps = 60_000 // args.batch_size
    times = [epoch_seconds(examples, args.batch_size, args.augmentation, steps)
             for _ in range(args.rounds)]
    print(f"{args.augmentation}, batch {args.batch_size}: {steps} batches in {min(times):.2f} s "
          f"(best of {args.rounds}; median {statistics.median(times):.2f} s)")


if __name__ == "__main__":
    main()
