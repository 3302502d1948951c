"""Replicas of one batch: the ``tf.distribute`` strategy (``strategy``), how many replicas a batch
splits into (``num_replicas``), the check of a training batch (``check_batch_size``) and jax's
data parallelism over every device (``data_parallel``)."""

import glob
import logging
import os

import keras

from keras_vit.checks import positive_int

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
    one device. Once joined to other processes (``join``) the devices are every process's and
    each process feeds its own rows of every batch (Keras' ``auto_shard_dataset`` is off).

    Example:
    >>> data_parallel() == num_replicas()
    True
    """
    if keras.backend.backend() == "jax" and keras.distribution.distribution() is None:
        devices = keras.distribution.list_devices()
        if len(devices) > 1:
            # keras_vit.data's pipelines feed each process its own rows (process_rows) already.
            keras.distribution.set_distribution(keras.distribution.DataParallel(
                devices=devices, auto_shard_dataset=False))
            _log.info("keras_vit: data parallel over %d devices", len(devices))
    return num_replicas()
