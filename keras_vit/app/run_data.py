"""The data of a ``keras-vit`` run and the evaluation of its model: the evaluation batches at the
model's resolution and channels, the examples and batches counted, and the test metrics without
the padding of the last batch."""

import numpy as np

from keras_vit import data
from keras_vit.app.run_model import channels
from keras_vit.distribution import evaluate


def count_examples(examples):
    if isinstance(examples, data.Examples):
        return len(examples)
    count = int(examples.cardinality())
    if count < 0:
        count = int(examples.reduce(np.int64(0), lambda n, _: n + 1))
    return count


def evaluation_batches(run, model, batch_size, split="test"):
    """Evaluation batches of ``split`` at the model's resolution and channels."""
    config = run.config
    return data.load(run.info.name, split, training=False, batch_size=batch_size,
                     image_size=model.input_shape[1], data_dir=config.data_dir,
                     max_examples=config.test_examples, channels=channels(model))


def evaluate_model(model, dataset):
    results = evaluate(model, dataset)  # the mean loss without the padding, on any device count
    return {f"test_{k}": float(v) for k, v in results.items()}


def count_batches(dataset):
    """Batches in one pass of a finite evaluation pipeline."""
    if hasattr(dataset, "cardinality"):
        return count_examples(dataset)
    return len(dataset)
