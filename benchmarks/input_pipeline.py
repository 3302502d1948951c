"""Seconds per epoch of the ``keras-vit train`` input pipeline: numpy (``keras_vit.data.arrays``,
the default for in-memory data) against tf.data (``keras_vit.data.tfdata``, the path before it).

Usage:
    python benchmarks/input_pipeline.py                       # pipeline alone, default train
    python benchmarks/input_pipeline.py --fit-steps 60        # also fit steps of the small ViT

Both build the train pipeline of the small ViT (28 px, shuffled, pad_crop by 1 px, flips,
one-hot labels) of the 60,000 Fashion-MNIST images. "pipeline": one epoch of batches pulled as
numpy arrays, as Keras does under jax. "fit": ``--fit-steps`` training steps of that model
(``keras-vit train --model small-vit``)
(per-epoch cost = time per step x 234 steps). Rounds alternate numpy / tf.data; medians reported.
"""

import argparse
import statistics
import time

import keras

from keras_vit import data
from keras_vit.app import runs
from keras_vit.data import tfdata

ARGS = dict(image_size=28, num_classes=10, training=True, augmentation="pad_crop",
            resize_size=30, channels=1, repeat=True, seed=0)


def batches(kind, examples, batch_size):
    if kind == "numpy":
        return data.pipeline(examples, batch_size=batch_size, replicas=1, **ARGS)
    ds = tfdata.tf.data.Dataset.from_tensor_slices((examples.images, examples.labels))
    return tfdata.pipeline(ds, batch_size=batch_size, **ARGS)


def iterate(pipeline):
    if isinstance(pipeline, data.Batches):
        return (pipeline[i] for i in range(10**9))
    return iter(pipeline.as_numpy_iterator())


def pipeline_seconds(kind, examples, batch_size, steps):
    iterator = iterate(batches(kind, examples, batch_size))
    next(iterator)  # start the threads before timing
    started = time.perf_counter()
    for _ in range(steps):
        next(iterator)
    return time.perf_counter() - started


def fit_seconds_per_step(kind, examples, batch_size, steps):
    keras.utils.set_random_seed(0)
    model = runs.build_model({"model": "small-vit"}, image_size=28, num_classes=10, channels=1)
    model.compile(optimizer="adamw", loss="categorical_crossentropy")
    train = batches(kind, examples, batch_size)
    model.fit(train, epochs=1, steps_per_epoch=5, verbose=0)  # compile
    started = time.perf_counter()
    model.fit(train, epochs=1, steps_per_epoch=steps, verbose=0)
    return (time.perf_counter() - started) / steps


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--fit-steps", type=int, default=0)
    args = parser.parse_args()
    examples = data.load_examples("fashion_mnist", "train")
    steps = len(examples) // args.batch_size
    times = {"numpy": [], "tf.data": []}
    fits = {"numpy": [], "tf.data": []}
    for _ in range(args.rounds):
        for kind in times:
            times[kind].append(pipeline_seconds(kind, examples, args.batch_size, steps))
            if args.fit_steps:
                fits[kind].append(fit_seconds_per_step(kind, examples, args.batch_size,
                                                       args.fit_steps))
    print(f"backend {keras.backend.backend()}, batch {args.batch_size}, {steps} steps per epoch")
    for kind in times:
        line = (f"{kind:8s} pipeline alone: {statistics.median(times[kind]):.2f} s per epoch "
                f"(min {min(times[kind]):.2f})")
        if fits[kind]:
            per_step = statistics.median(fits[kind])
            line += (f"; fit: {per_step * 1000:.1f} ms per step, {per_step * steps:.1f} s per "
                     f"epoch (min {min(fits[kind]) * 1000:.1f} ms)")
        print(line)


if __name__ == "__main__":
    main()
