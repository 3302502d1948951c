"""Training on several devices: tf.distribute strategies and Keras (jax) layouts.

TensorFlow backend: build, compile and ``fit`` under ``strategy().scope()``; the strategy is a
``TPUStrategy`` on a TPU runtime (Colab, Cloud TPU VM), a ``MirroredStrategy`` over several GPUs,
and TensorFlow's default (single-device) strategy otherwise.

JAX backend: ``keras.distribution`` does the work. ``DataParallel()`` replicates the model and
splits every batch over the devices; ``ModelParallel`` also splits the weights, following
``layout_map``: the attention query/key/value/out kernels are split by heads and the MLP by its
hidden units along a ``"model"`` mesh axis (the Megatron-LM layout), so each device holds
1/model_size of the encoder's weights. Set the distribution *before* building the model::

    mesh = keras.distribution.DeviceMesh((2, 4), ("batch", "model"))
    keras.distribution.set_distribution(keras.distribution.ModelParallel(
        layout_map=keras_vit.distribution.layout_map(
            keras_vit.models.registry.model_config("ViT-B/16"), mesh), batch_dim_name="batch"))
    model = keras_vit.create_model("ViT-B/16")

In both cases a training batch must divide evenly over the replicas: ``check_batch_size``.
Evaluation takes any number of examples: ``predict`` and ``evaluate`` pad the last batch to a
multiple of the replicas and leave the padding out of their results.
"""

import glob
import logging
import os

import keras
import numpy as np

from keras_vit.checks import positive_int

MODEL_AXIS = "model"

# (pattern over variable paths, sharded axes); each pattern matches one weight of every block.
_VIT_LAYOUT = (
    (r".*MultiHeadDotProductAttention_1/(query|key|value)/kernel", (None, MODEL_AXIS)),
    (r".*MultiHeadDotProductAttention_1/(query|key|value)/bias", (MODEL_AXIS,)),
    (r".*MultiHeadDotProductAttention_1/out/kernel", (MODEL_AXIS, None)),
    (r".*MlpBlock_3/Dense_0/kernel", (None, MODEL_AXIS)),
    (r".*MlpBlock_3/Dense_0/bias", (MODEL_AXIS,)),
    (r".*MlpBlock_3/Dense_1/kernel", (MODEL_AXIS, None)),
)

_log = logging.getLogger("keras_vit")


def _tpu_resolver(tf):
    """A connected-to-nothing-yet TPU cluster resolver when this runtime has a TPU, else None.

    The environment is checked first (Colab's COLAB_TPU_ADDR, TPU_NAME, a TPU VM's /dev/accel*
    or /dev/vfio devices), so that machines without a TPU never wait on a metadata server.
    """
    has_tpu_hint = (
        os.environ.get("COLAB_TPU_ADDR")
        or os.environ.get("TPU_NAME")
        or glob.glob("/dev/accel*")
        or os.path.exists("/dev/vfio/0")
    )
    if not has_tpu_hint:
        return None
    for tpu in (None, "local"):
        try:
            return tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
        except (ValueError, RuntimeError, KeyError):
            continue
    return None


def strategy():
    """The ``tf.distribute`` strategy for this machine (TensorFlow backend).

    Returns ``TPUStrategy`` on a TPU runtime (after connecting to and initialising the TPU
    system), ``MirroredStrategy`` when TensorFlow sees several GPUs, and the default strategy
    (one device) otherwise. Under the jax and torch backends it returns None and logs how those
    backends distribute instead (``keras.distribution`` and ``layout_map`` for jax).

    Example:
    >>> import keras
    >>> s = strategy()
    >>> (s is None) == (keras.backend.backend() != "tensorflow")
    True
    """
    if keras.backend.backend() != "tensorflow":
        _log.info(
            "keras_vit.distribution.strategy() is for the TensorFlow backend (KERAS_BACKEND="
            "tensorflow); under %s use keras.distribution (DataParallel, or ModelParallel with "
            "keras_vit.distribution.layout_map) with jax, or a single device with torch.",
            keras.backend.backend(),
        )
        return None
    import tensorflow as tf

    resolver = _tpu_resolver(tf)
    if resolver is not None:
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    gpus = tf.config.list_logical_devices("GPU")
    if len(gpus) > 1:
        return tf.distribute.MirroredStrategy([gpu.name for gpu in gpus])
    return tf.distribute.get_strategy()


def num_replicas():
    """How many data-parallel replicas the current setting splits a batch into.

    TensorFlow: the current ``tf.distribute`` strategy's ``num_replicas_in_sync`` (inside its
    scope). Other backends: the batch axis of the ``keras.distribution`` distribution, or 1.
    """
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        return int(tf.distribute.get_strategy().num_replicas_in_sync)
    distribution = keras.distribution.distribution()
    if distribution is None:
        return 1
    mesh = distribution.device_mesh
    axis = list(mesh.axis_names).index(distribution.batch_dim_name)
    return int(mesh.shape[axis])


def check_batch_size(batch_size, replicas=None):
    """Check that a global batch splits evenly over the replicas; returns the per-replica size.

    Args:
        batch_size: the global batch size.
        replicas: number of replicas; by default ``num_replicas()``.

    Example:
    >>> check_batch_size(512, replicas=8)
    64
    """
    replicas = num_replicas() if replicas is None else int(replicas)
    batch_size = positive_int("The batch size", batch_size)
    if batch_size % replicas:
        lower = max(replicas, batch_size // replicas * replicas)
        raise ValueError(
            f"The global batch size {batch_size} is not divisible by the {replicas} replicas of "
            "the current distribution strategy (the number of replicas): every device must get "
            f"the same number of examples. Use a multiple of {replicas}, e.g. {lower} or "
            f"{lower + replicas}."
        )
    return batch_size // replicas


def data_parallel():
    """Under jax with several devices, shard every batch over all of them (``keras.distribution
    .DataParallel``) unless a distribution is already set; returns the number of replicas.

    The CLI and the notebooks call it before building a model. Batch sizes must then divide by
    the device count (``check_batch_size``); evaluation pipelines pad their last batch
    (``keras_vit.data.pipeline``). TensorFlow distributes with ``strategy()`` instead, torch on
    one device.

    Example:
    >>> data_parallel() == num_replicas()
    True
    """
    if keras.backend.backend() == "jax" and keras.distribution.distribution() is None:
        devices = keras.distribution.list_devices()
        if len(devices) > 1:
            keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices))
            _log.info("keras_vit: data parallel over %d devices", len(devices))
    return num_replicas()


def evaluation_batch_size(batch_size, replicas=None):
    """``batch_size`` rounded up to a multiple of the replicas, for batches that only predict:
    they split evenly and give the same outputs (a training batch is checked instead,
    ``check_batch_size``, as its size changes the training).

    Example:
    >>> evaluation_batch_size(500, replicas=8), evaluation_batch_size(500, replicas=1)
    (504, 500)
    """
    replicas = num_replicas() if replicas is None else int(replicas)
    check_batch_size(batch_size, replicas=1)
    return int(batch_size) + -int(batch_size) % replicas


def predict(model, inputs, batch_size=256):
    """``model.predict(inputs)`` that works for any number of inputs on several replicas: the
    inputs are padded to a multiple of the replicas and the padding's outputs dropped.

    Example:
    >>> import numpy as np
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> predict(model, np.zeros((3, 2), "float32")).shape
    (3, 1)
    """
    inputs = np.asarray(inputs)
    replicas = num_replicas()
    batch_size = evaluation_batch_size(min(int(batch_size), max(len(inputs), 1)), replicas)
    missing = -len(inputs) % replicas
    padded = np.pad(inputs, ((0, missing),) + ((0, 0),) * (inputs.ndim - 1))
    outputs = model.predict(padded, batch_size=batch_size, verbose=0)
    return keras.tree.map_structure(lambda x: x[:len(inputs)], outputs)


def unpadded_batches(batches):
    """The ``(images, labels)`` of every batch of an evaluation pipeline (``keras_vit.data
    .pipeline``, a ``keras.utils.PyDataset`` or any iterable of batches), as numpy arrays
    without the weight-0 examples that pad its last batch to a multiple of the replicas.

    Example:
    >>> batch = (np.zeros((4, 2)), np.eye(4), np.array([1.0, 1.0, 1.0, 0.0]))
    >>> [images.shape for images, labels in unpadded_batches([batch])]
    [(3, 2)]
    """
    if isinstance(batches, keras.utils.PyDataset):  # read by index: its iterator may not end
        dataset = batches
        batches = (dataset[index] for index in range(len(dataset)))
    for batch in batches:
        images, labels = np.asarray(batch[0]), np.asarray(batch[1])
        if len(batch) > 2:
            keep = np.asarray(batch[2]) > 0
            images, labels = images[keep], labels[keep]
        yield images, labels


def evaluate(model, data, labels=None, batch_size=256):
    """``model.evaluate`` that works for any number of examples on several replicas: accuracy
    and mean loss over exactly the given examples (``model.evaluate`` would count the padding
    of the last batch in the mean loss).

    Args:
        model: a classifier (one output per class); its compiled loss, if it has one
            (``model.compile(loss=...)``), gives ``"loss"``.
        data: an evaluation pipeline (``keras_vit.data.load`` / ``pipeline``, or any iterable
            of ``(images, labels[, sample weights])`` batches, weight 0 marking the padding),
            or images with ``labels``.
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
        batches = ((predict(model, x, len(x)), y) for x, y in unpadded_batches(data))
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


def _vit_sizes(model_or_config):
    """``(num_heads, mlp_dim)`` of a ViT, read from its description without importing the
    models (this module serves the data pipelines, a floor below them)."""
    if isinstance(model_or_config, str):
        raise TypeError(
            f"layout_map takes the description of a ViT, not its name {model_or_config!r}: "
            f"pass keras_vit.models.registry.model_config({model_or_config!r}).")
    found = model_or_config
    if isinstance(found, dict):  # a get_config(), a ViTConfig.to_dict() or the encoder's dict
        found = found.get("config", found)
        found = found.get("encoder", found)
        sizes = {key: found.get(key) for key in ("num_heads", "mlp_dim")}
    else:  # a model, its ViTConfig, or the EncoderConfig
        found = getattr(found, "config", found)
        found = getattr(found, "encoder", found)
        sizes = {key: getattr(found, key, None) for key in ("num_heads", "mlp_dim")}
    if None in sizes.values():
        raise TypeError(
            "layout_map expects a ViTBackbone or ViTImageClassifier, its ViTConfig (e.g. "
            "keras_vit.models.registry.model_config('ViT-B/16')), an EncoderConfig, or a dict "
            f"of num_heads and mlp_dim; got {type(model_or_config).__name__}.")
    return int(sizes["num_heads"]), int(sizes["mlp_dim"])


def layout_map(model_or_config, mesh, model_axis=MODEL_AXIS):
    """A ``keras.distribution.LayoutMap`` sharding a ViT's encoder over a mesh axis.

    The query/key/value kernels (D, H, hd) and biases (H, hd) and the out kernel (H, hd, D) are
    split by heads; the MLP's ``Dense_0`` kernel (D, M) and bias by columns and ``Dense_1``
    kernel (M, D) by rows. Everything else (embedding, position embedding, LayerNorms, head, a
    hybrid's ResNet) is replicated. Use it with ``keras.distribution.ModelParallel``.

    Args:
        model_or_config: a ``ViTBackbone`` or ``ViTImageClassifier``, its ``ViTConfig`` (of a
            paper name: ``keras_vit.models.registry.model_config("ViT-B/16")``), its
            ``EncoderConfig``, or any of them as a dict; only num_heads and mlp_dim matter.
        mesh: a ``keras.distribution.DeviceMesh`` with an axis named ``model_axis``.
        model_axis: the mesh axis that splits the weights.

    Example:
    >>> import keras
    >>> from keras_vit.models.registry import model_config
    >>> mesh = keras.distribution.DeviceMesh((1, 1), ("batch", "model"), ["cpu:0"])
    >>> layouts = layout_map(model_config("ViT-B/16"), mesh)
    >>> layouts["encoderblock_0/MlpBlock_3/Dense_0/kernel"].axes
    (None, 'model')
    """
    num_heads, mlp_dim = _vit_sizes(model_or_config)
    if not isinstance(mesh, keras.distribution.DeviceMesh):
        raise TypeError(f"mesh must be a keras.distribution.DeviceMesh, got {type(mesh).__name__}.")
    names = list(mesh.axis_names)
    if model_axis not in names:
        raise ValueError(
            f"The mesh has no {model_axis!r} axis (its axes are {names}); build it as e.g. "
            f"DeviceMesh((data, model), ('batch', '{model_axis}')), or pass model_axis=."
        )
    size = int(mesh.shape[names.index(model_axis)])
    for what, count in (("num_heads", num_heads), ("mlp_dim", mlp_dim)):
        if count % size:
            raise ValueError(
                f"{what} ({count}) is not divisible by the {model_axis!r} mesh axis ({size}); "
                f"use a model axis size that divides both num_heads ({num_heads}) and mlp_dim "
                f"({mlp_dim})."
            )
    layouts = keras.distribution.LayoutMap(mesh)
    for pattern, axes in _VIT_LAYOUT:
        layouts[pattern] = tuple(model_axis if a == MODEL_AXIS else a for a in axes)
    return layouts


def accelerator():
    """The accelerator this backend trains on: ``(platform, device kind, devices, compute
    capability)`` with platform ``"tpu"`` or ``"gpu"``, or None on a CPU.

    jax: ``jax.devices()``; torch: CUDA (one device); TensorFlow: its GPUs (a TPU under
    TensorFlow is reached through ``strategy()``, counted by ``num_replicas``).

    Example:
    >>> accelerator() is None  # this machine has a CPU only
    True
    """
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        devices = jax.devices()
        if devices[0].platform not in ("tpu", "gpu"):
            return None
        capability = getattr(devices[0], "compute_capability", None)
        return devices[0].platform, devices[0].device_kind, len(devices), capability
    if backend == "torch":
        import torch

        if not torch.cuda.is_available():
            return None
        major, minor = torch.cuda.get_device_capability(0)
        return "gpu", torch.cuda.get_device_name(0), 1, f"{major}.{minor}"
    if backend == "tensorflow":
        import tensorflow as tf

        gpus = tf.config.list_physical_devices("GPU")
        if not gpus:
            return None
        details = tf.config.experimental.get_device_details(gpus[0])
        capability = details.get("compute_capability")
        capability = ".".join(map(str, capability)) if capability else None
        return "gpu", details.get("device_name", "GPU"), num_replicas(), capability
    return None


def precision(platform, kind="", capability=None):
    """The Keras dtype policy to train with on a device: ``"mixed_bfloat16"`` on TPUs and on
    GPUs of compute capability 8 and above (A100, L4, H100), ``"mixed_float16"`` (Keras adds
    loss scaling) on older GPUs (T4: 7.5, whose tensor cores have no bfloat16), ``"float32"``
    on a CPU.

    Example:
    >>> precision("tpu"), precision("gpu", "Tesla T4"), precision("gpu", "NVIDIA H100", "9.0")
    ('mixed_bfloat16', 'mixed_float16', 'mixed_bfloat16')
    """
    if platform == "tpu":
        return "mixed_bfloat16"
    if platform != "gpu":
        return "float32"
    if capability is None:  # without a capability, known pre-Ampere names
        old = any(name in str(kind).upper() for name in ("T4", "V100", "P100", "K80", "P4"))
        return "mixed_float16" if old else "mixed_bfloat16"
    return "mixed_float16" if float(capability) < 8 else "mixed_bfloat16"
