"""Transfer demo, fully offline: Fashion-MNIST (28 px) -> scikit-learn digits (56 px), 10 shots.

1. Pre-train: the small ViT (``keras-vit train --model small-vit``) on Fashion-MNIST at 28x28
   (or --pretrained).
2. Fine-tune on the 8x8 digits upsampled to 56x56 with 10 training examples per class: the
   position embeddings are interpolated to the 4x larger grid (``keras_vit.resize_model``), the
   head is replaced by a zero-initialised one, SGD with momentum, warmup + cosine (paper B.1.1).
3. The same architecture at 56x56 from scratch, trained with the same recipe and budget.
Test accuracy on the 898 held-out digits is printed for both. The digits are 8x8 pictures
enlarged 7x: the larger grid adds tokens, not detail, so this shows the mechanics of a transfer
to another resolution rather than the paper's gain from one (notebook 05 measures that).

    KERAS_BACKEND=jax python benchmarks/transfer_digits.py
    KERAS_BACKEND=jax python benchmarks/transfer_digits.py --pretrained runs/.../model.keras
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # noqa: E402

from keras_vit import data  # noqa: E402
from keras_vit.app import run_files, train  # noqa: E402
from keras_vit.app.cli import build_parser  # noqa: E402
from keras_vit.training import (  # noqa: E402
    classification_loss,
    finetuning_optimizer,
    prepare_finetuning,
)

SMALL_VIT = "small-vit"  # the model of docs/results.md's transfer runs, at Fashion-MNIST's 28 px


def pretrained_model(path):
    if path is None:
        path = os.path.join(run_files.default_output("train", "fashion_mnist", SMALL_VIT),
                            "model.keras")
        if not os.path.exists(path):
            print(f"No pre-trained model at {path}: training it (keras-vit train --model "
                  f"{SMALL_VIT}).")
            defaults = runs_defaults()
            train.train(defaults)
    return keras.saving.load_model(path, compile=False), path


def runs_defaults():
    config = vars(build_parser().parse_args(["train", "--model", SMALL_VIT]))
    config.pop("command")
    return config


def fit_digits(model, args, seed):
    keras.utils.set_random_seed(seed)
    channels = int(model.input_shape[-1])
    train = data.load("digits", "train", batch_size=args.batch_size, image_size=args.image_size,
                      examples_per_class=args.shots, repeat=True, augmentation="resize",
                      channels=channels, seed=seed)
    test = data.load("digits", "test", batch_size=300, image_size=args.image_size,
                     channels=channels)
    model.compile(
        optimizer=finetuning_optimizer(args.steps, learning_rate=args.learning_rate,
                                       warmup_steps=args.steps // 10),
        loss=classification_loss(), metrics=["accuracy"])
    model.fit(train, epochs=1, steps_per_epoch=args.steps, shuffle=False, verbose=0)
    return float(model.evaluate(test, return_dict=True, verbose=0)["accuracy"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pretrained", help="a .keras model trained on Fashion-MNIST at 28 px")
    parser.add_argument("--image-size", type=int, default=56)
    parser.add_argument("--shots", type=int, default=10, help="training examples per class")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=50)
    parser.add_argument("--learning-rate", type=float, default=0.01)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--output", default="runs/transfer_digits.json")
    args = parser.parse_args()

    started = time.time()
    pretrained, path = pretrained_model(args.pretrained)
    results = {"pretrained": [], "scratch": [], "config": vars(args), "pretrained_path": path}
    for seed in args.seeds:
        tuned = prepare_finetuning(pretrained, 10, image_size=args.image_size)
        results["pretrained"].append(fit_digits(tuned, args, seed))
        keras.utils.set_random_seed(1000 + seed)
        config = dict(tuned.get_config(), name="scratch")
        scratch = type(tuned).from_config(config)
        results["scratch"].append(fit_digits(scratch, args, seed))
        print(f"seed {seed}: fine-tuned {results['pretrained'][-1]:.4f}, "
              f"from scratch {results['scratch'][-1]:.4f}", flush=True)
    for key in ("pretrained", "scratch"):
        values = results[key]
        results[f"{key}_mean"] = sum(values) / len(values)
    results["wall_time_s"] = round(time.time() - started, 1)
    print(f"digits, {args.shots} examples per class, {args.image_size} px: "
          f"Fashion-MNIST pre-trained {results['pretrained_mean']:.4f} vs from scratch "
          f"{results['scratch_mean']:.4f} (mean of {len(args.seeds)} seeds; "
          f"{results['wall_time_s']:.0f} s)")
    os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
    with open(args.output, "w") as f:
        json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
