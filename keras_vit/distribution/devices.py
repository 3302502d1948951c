"""The accelerator this backend trains on (``accelerator``) and the precision to train with on it
(``precision``)."""

import keras

from keras_vit.distribution import replicas


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
        return "gpu", details.get("device_name", "GPU"), replicas.num_replicas(), capability
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
