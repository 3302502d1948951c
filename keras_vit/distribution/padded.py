"""Evaluation and prediction of any number of examples on several replicas and processes: the
last batch padded to a multiple of the replicas and the padding left out of the results
(``evaluation_batch_size``, ``predict``, ``evaluate``, ``unpadded_batches``)."""

import weakref

import keras
import numpy as np

from keras_vit.distribution import replicas as _replicas
from keras_vit.distribution.processes import _own_rows, process_count, process_rows


def evaluation_batch_size(batch_size, replicas=None):
    """``batch_size`` rounded up to a multiple of the replicas, for batches that only predict:
    they split evenly and give the same outputs (a training batch is checked instead,
    ``check_batch_size``, as its size changes the training).

    Example:
    >>> evaluation_batch_size(500, replicas=8), evaluation_batch_size(500, replicas=1)
    (504, 500)
    """
    replicas = _replicas.num_replicas() if replicas is None else int(replicas)
    _replicas.check_batch_size(batch_size, replicas=1)
    return int(batch_size) + -int(batch_size) % replicas


def predict(model, inputs, batch_size=256):
    """``model.predict(inputs)`` that works for any number of inputs on several replicas: the
    inputs are padded to a multiple of the replicas and the padding's outputs dropped.

    Under several processes every process passes all the inputs and gets all the outputs; each
    feeds only its rows of every batch (``process_rows``).

    Example:
    >>> import numpy as np
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> predict(model, np.zeros((3, 2), "float32")).shape
    (3, 1)
    """
    inputs = np.asarray(inputs)
    replicas = _replicas.num_replicas()
    batch_size = evaluation_batch_size(min(int(batch_size), max(len(inputs), 1)), replicas)
    missing = -len(inputs) % replicas
    padded = np.pad(inputs, ((0, missing),) + ((0, 0),) * (inputs.ndim - 1))
    if process_count() == 1:
        outputs = model.predict(padded, batch_size=batch_size, verbose=0)
    else:
        outputs = _concatenated([
            _gathered(model, padded[start:start + batch_size])[0]
            for start in range(0, len(padded), batch_size)])
    return keras.tree.map_structure(lambda x: x[:len(inputs)], outputs)


def _concatenated(parts):
    return keras.tree.map_structure(lambda *xs: np.concatenate(xs), *parts)


class _Gathered(keras.Model):
    """A model's outputs, and any further inputs, laid out whole on every device: ``predict``
    then returns every process's rows to every process (Keras would fetch arrays that live on
    other processes' devices, which JAX refuses)."""

    def __init__(self, model):
        super().__init__()
        self.inner = model

    def call(self, inputs):
        mesh = keras.distribution.distribution().device_mesh
        values = [self.inner(inputs[0], training=False), *inputs[1:]]
        return keras.tree.map_structure(
            lambda x: keras.distribution.distribute_tensor(
                x, keras.distribution.TensorLayout([None] * len(x.shape), mesh)), values)


_GATHERED = weakref.WeakKeyDictionary()


def _gathered(model, global_batch):
    """``[outputs]`` of a global batch over all processes, in every process; this process
    feeds its rows."""
    return _gathered_rows(model, [np.asarray(global_batch)[process_rows(len(global_batch))]])


def _gathered_rows(model, local):
    """``_gathered`` of this process's rows ``local`` (a list of arrays)."""
    wrapper = _GATHERED.get(model)
    if wrapper is None:
        wrapper = _GATHERED[model] = _Gathered(model)
    with _own_rows():
        return wrapper.predict(local, batch_size=len(local[0]), verbose=0)


def _each_batch(batches):
    """The batches of a pipeline; a ``keras.utils.PyDataset`` read by index (its iterator may
    not end)."""
    if isinstance(batches, keras.utils.PyDataset):
        return (batches[index] for index in range(len(batches)))
    return batches


def unpadded_batches(batches):
    """The ``(images, labels)`` of every batch of an evaluation pipeline (``keras_vit.data
    .pipeline``, a ``keras.utils.PyDataset`` or any iterable of batches), as numpy arrays
    without the weight-0 examples that pad its last batch to a multiple of the replicas.

    Example:
    >>> batch = (np.zeros((4, 2)), np.eye(4), np.array([1.0, 1.0, 1.0, 0.0]))
    >>> [images.shape for images, labels in unpadded_batches([batch])]
    [(3, 2)]
    """
    for batch in _each_batch(batches):
        images, labels = np.asarray(batch[0]), np.asarray(batch[1])
        if len(batch) > 2:
            keep = np.asarray(batch[2]) > 0
            images, labels = images[keep], labels[keep]
        yield images, labels


def _predicted_batches(model, batches):
    """``(outputs, labels)`` of every batch of a pipeline without its padding. Under several
    processes each batch holds this process's rows (as ``keras_vit.data``'s pipelines give
    them), and every process gets every process's."""
    if process_count() == 1:
        for images, labels in unpadded_batches(batches):
            yield predict(model, images, len(images)), labels
        return
    for batch in _each_batch(batches):
        images, labels = np.asarray(batch[0]), np.asarray(batch[1])
        weights = np.asarray(batch[2]) if len(batch) > 2 else np.ones(len(images), np.float32)
        outputs, labels, weights = _gathered_rows(model, [images, labels, weights])
        keep = weights > 0
        yield outputs[keep], labels[keep]


def evaluate(model, data, labels=None, batch_size=256):
    """``model.evaluate`` that works for any number of examples on several replicas: accuracy
    and mean loss over exactly the given examples (``model.evaluate`` would count the padding
    of the last batch in the mean loss).

    Args:
        model: a classifier (one output per class); its compiled loss, if it has one
            (``model.compile(loss=...)``), gives ``"loss"``.
        data: an evaluation pipeline (``keras_vit.data.load`` / ``pipeline``, or any iterable
            of ``(images, labels[, sample weights])`` batches, weight 0 marking the padding),
            or images with ``labels``. Under several processes a pipeline's batches are each
            process's rows (``keras_vit.data``'s are), images and labels are all of them, and
            every process gets the results over all examples.
        labels: with images: class indices (N,) or one-hot (N, classes); indices are one-hot
            encoded for a loss that is not a sparse one.
        batch_size: images per ``predict`` batch, for images.

    Returns:
        ``{"accuracy": ..., "loss": ...}`` (no ``"loss"`` without a compiled loss).

    Example:
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(3)])
    >>> model.compile(loss="categorical_crossentropy")
    >>> sorted(evaluate(model, np.zeros((5, 2), "float32"), np.arange(5) % 3))
    ['accuracy', 'loss']
    """
    if labels is None:
        batches = _predicted_batches(model, data)
    else:
        batches = [(predict(model, data, batch_size), np.asarray(labels))]
    loss = _example_loss(model)
    count = correct = total_loss = 0
    for outputs, y in batches:
        classes = np.argmax(y, axis=-1) if y.ndim == outputs.ndim else y
        correct += int(np.sum(np.argmax(outputs, axis=-1) == classes))
        count += len(outputs)
        if loss is not None:
            total_loss += float(np.sum(loss(y, outputs)))
    if count == 0:
        raise ValueError("There is nothing to evaluate: the data holds no examples.")
    results = {"accuracy": correct / count}
    if loss is not None:
        results["loss"] = total_loss / count
    return results


def _example_loss(model):
    """The model's compiled loss as ``(labels, outputs) -> one value per example`` (the mean
    over any further axes), or None when it has none or several."""
    loss = getattr(model, "loss", None)
    if isinstance(loss, str):
        loss = keras.losses.get(loss)
    if not callable(loss):
        return None
    name = loss.name if isinstance(loss, keras.losses.Loss) else getattr(loss, "__name__", "")
    per_example = loss.call if isinstance(loss, keras.losses.Loss) else loss  # not reduced

    def values(labels, outputs):
        if "sparse" not in name and labels.ndim == outputs.ndim - 1:
            labels = np.eye(outputs.shape[-1], dtype=outputs.dtype)[labels]
        result = np.asarray(keras.ops.convert_to_numpy(per_example(labels, outputs)), "float64")
        return result.reshape(len(outputs), -1).mean(axis=1)

    return values
