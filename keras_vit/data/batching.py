"""The global batch size vs the replicas of the current distribution strategy."""

import keras


def num_replicas():
    """How many data-parallel replicas the current strategy or distribution has.

    TensorFlow backend: ``tf.distribute.get_strategy().num_replicas_in_sync`` (inside a
    ``strategy.scope()`` this is the strategy's). JAX: the size of the batch axis of the
    ``keras.distribution`` device mesh when one is set. Otherwise 1.

    Example:
    >>> num_replicas()
    1
    """
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        return int(tf.distribute.get_strategy().num_replicas_in_sync)
    distribution = keras.distribution.distribution()
    if distribution is None:
        return 1
    mesh = distribution.device_mesh
    batch_axis = getattr(distribution, "batch_dim_name", None)
    if batch_axis in mesh.axis_names:
        return int(mesh.shape[list(mesh.axis_names).index(batch_axis)])
    return 1


def check_batch_size(batch_size, replicas=None):
    """Validate a global batch size: a positive multiple of the number of replicas.

    Args:
        batch_size: the global batch size (split evenly across replicas).
        replicas: number of replicas; None asks ``num_replicas()``.

    Returns:
        the batch size as an int.

    Example:
    >>> check_batch_size(64, replicas=8)
    64
    """
    replicas = num_replicas() if replicas is None else int(replicas)
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}.")
    if batch_size % replicas:
        lower = max(replicas, batch_size // replicas * replicas)
        raise ValueError(
            f"The global batch size {batch_size} is not divisible by the {replicas} replicas of "
            f"the current distribution strategy; every replica must get the same share. Use a "
            f"multiple of {replicas}, e.g. {lower} or {lower + replicas}."
        )
    return batch_size
