"""Post-training quantization of the shipped Fashion-MNIST ViT, and LoRA's trainable parameters.

Usage (one backend per process):
    KERAS_BACKEND=jax python benchmarks/quantization.py
    KERAS_BACKEND=torch python benchmarks/quantization.py --modes int8 int4 float8
    KERAS_BACKEND=jax python benchmarks/quantization.py --lora-model ViT-B/16 --lora-rank 8

For the shipped model (``keras_vit.inspection.fashion_mnist_vit()``, 56 px, 4 x 4 patches, six
blocks of width 48) and each mode: the test accuracy on the 10,000 Fashion-MNIST test images
(``model.evaluate``, as ``benchmarks/inspection_structure.py`` measures it), the largest
relative logit difference from float32 on those images (max |q - f| / max |f|, and the mean of
the per-image maxima), the share of images whose predicted class changes, and the model's size:
the bytes of its variables and of its ``.keras`` file. Then the trainable parameters of
``--lora-model`` with LoRA of ``--lora-rank`` on its query and value projections and on every
attention projection, with and without its 1000-class head.
"""

import argparse
import json
import os
import tempfile

import keras
import numpy as np

from keras_vit import data, training
from keras_vit.inspection import fashion_mnist_vit
from keras_vit.models.registry import build_model
from keras_vit.training import lora


def variable_bytes(model):
    """Bytes of every variable the model holds (int8 kernels: one byte a number)."""
    return int(sum(np.prod(v.shape) * np.dtype(keras.backend.standardize_dtype(v.dtype)).itemsize
                   for v in model.weights))


def file_bytes(model):
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.keras")
        model.save(path)
        return os.path.getsize(path)


def measure(model, test, images, reference=None):
    """Accuracy, logits and sizes of ``model``; logit differences against ``reference``."""
    model.compile(loss=training.classification_loss(), weighted_metrics=["accuracy"])
    accuracy = model.evaluate(test, return_dict=True, verbose=0)["accuracy"]
    logits = model.predict(images, batch_size=500, verbose=0)
    row = dict(test_accuracy=round(float(accuracy), 4), variable_bytes=variable_bytes(model),
               file_bytes=file_bytes(model))
    if reference is not None:
        scale = np.abs(reference).max()
        per_image = np.abs(logits - reference).max(-1) / np.abs(reference).max(-1)
        row.update(max_relative_difference=float(np.abs(logits - reference).max() / scale),
                   mean_per_image_relative_difference=float(per_image.mean()),
                   changed_predictions=float((logits.argmax(-1) != reference.argmax(-1)).mean()))
    return row, logits


def quantization_table(modes):
    test = data.load("fashion_mnist", "test", batch_size=500, image_size=56)
    images, _ = data.as_arrays(test)
    rows = {}
    rows["float32"], reference = measure(fashion_mnist_vit(), test, images)
    for mode in modes:
        model = fashion_mnist_vit()
        model.quantize(mode)
        rows[mode], _ = measure(model, test, images, reference)
    for name, row in rows.items():
        print(f"{name:>8}: " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v:,}"
                                         for k, v in row.items()))
    return rows


def lora_counts(name, rank):
    model = build_model(name)
    total = model.count_params()
    head = model.get_layer("head").count_params()
    counts = {"model": name, "rank": rank, "parameters": total, "head": head}
    for targets in lora.TARGETS:
        adapted = lora.enable_lora(build_model(name), rank, targets)
        trainable = lora.trainable_parameters(adapted)
        counts[targets] = dict(with_head=trainable, factors=trainable - head,
                               share_of_model=round(trainable / total, 5))
        print(f"{name} LoRA rank {rank} on {targets}: {trainable - head:,} factor parameters, "
              f"{trainable:,} with the head ({trainable / total:.2%} of {total:,})")
    return counts


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--modes", nargs="+", default=["int8"])
    parser.add_argument("--lora-model", default="ViT-B/16")
    parser.add_argument("--lora-rank", type=int, default=8)
    parser.add_argument("--no-lora", action="store_true")
    args = parser.parse_args()
    result = {"backend": keras.backend.backend(), "quantization": quantization_table(args.modes)}
    if not args.no_lora:
        result["lora"] = lora_counts(args.lora_model, args.lora_rank)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
