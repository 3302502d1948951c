"""Where a notebook runs: a hosted one (Colab, Kaggle) or elsewhere, and on what devices.

Colab is recognised by its ``google.colab`` module (or ``COLAB_RELEASE_TAG``), Kaggle by the
variables it sets in its notebooks and scripts (``KAGGLE_KERNEL_RUN_TYPE``, ``KAGGLE_URL_BASE``;
Kaggle has no ``google.colab``). Both have network access, so the notebooks download there
(``online``). ``setup`` is what each notebook's one set-up cell calls after the install:
seed, small mode and ``distribute``, where one device (a CPU, one GPU, Colab's one-chip TPU
v5e-1) needs nothing and several (Kaggle's TPU v5e-8 or two T4s) share every batch.
"""

import collections
import contextlib
import importlib.util
import os
import platform
import sys

import keras

from keras_vit import distribution

KAGGLE_VARIABLES = ("KAGGLE_KERNEL_RUN_TYPE", "KAGGLE_URL_BASE")


def hosted():
    """``"colab"``, ``"kaggle"`` or None (a laptop, a server, CI)."""
    if "google.colab" in sys.modules or os.environ.get("COLAB_RELEASE_TAG"):
        return "colab"
    if any(os.environ.get(name) for name in KAGGLE_VARIABLES):
        return "kaggle"
    return None


def online():
    """Whether downloads are expected to work: on Colab or Kaggle, or with
    ``KERAS_VIT_ONLINE=1``."""
    return hosted() is not None or os.environ.get("KERAS_VIT_ONLINE") == "1"


def distribute():
    """Share every batch over this runtime's devices; returns ``(replicas, scope)``.

    jax: ``keras.distribution.DataParallel`` over all devices when there are several
    (``distribution.data_parallel``). TensorFlow: its ``tf.distribute`` strategy (TPUStrategy,
    MirroredStrategy), whose ``scope()`` the models are built in. Prints one line: where, the
    devices, and the precision ``keras-vit finetune`` picks for them (on Colab or Kaggle
    preceded by its name).

    Example:
    >>> import io
    >>> with contextlib.redirect_stdout(io.StringIO()) as printed:
    ...     replicas, scope = distribute()
    >>> printed.getvalue().split(": ", 1)[1].strip()  # after the backend's name
    '1 device(s) (cpu), precision float32'
    >>> replicas
    1
    """
    scope = contextlib.nullcontext()
    if keras.backend.backend() == "tensorflow":
        strategy = distribution.strategy()
        replicas = strategy.num_replicas_in_sync
        if replicas > 1:
            scope = strategy.scope()
    else:
        replicas = distribution.data_parallel()
    device = distribution.accelerator()
    platform, kind, _, capability = device or ("cpu", "cpu", replicas, None)
    where = f"{hosted()}, " if hosted() else ""
    print(f"{where}{keras.backend.backend()}: {replicas} device(s) ({kind}), "
          f"precision {distribution.precision(platform, kind, capability)}")
    return replicas, scope


def processor():
    """The CPU's model name and its core count: what a time a notebook prints was measured on.

    Example:
    >>> processor()  # doctest: +ELLIPSIS
    '..., ... core...'
    """
    name = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            found = [line.split(":", 1)[1].strip() for line in cpuinfo
                     if line.startswith("model name")]
        name = found[0] if found else name
    cores = os.cpu_count() or 1
    return f"{name}, {cores} core{'' if cores == 1 else 's'}"


Setup = collections.namedtuple("Setup", ["small", "replicas", "scope"])


def small():
    """Small mode (``KERAS_VIT_SMALL=1``): less data and fewer steps, for CI and slow machines."""
    return os.environ.get("KERAS_VIT_SMALL") == "1"


def setup(seed=0, timed=False):
    """A notebook's set-up after the install: seeds Python, NumPy and the backend with ``seed``,
    reads small mode and shares batches over the devices (``distribute``).

    Returns ``Setup(small, replicas, scope)`` and prints the Keras version and backend, then
    ``distribute``'s line. A notebook that prints how long its cells took passes
    ``timed=True``: the processor (``processor``) is then printed too, as what those times were
    measured on.

    Example:
    >>> small_mode, replicas, scope = setup(seed=0, timed=True)  # doctest: +ELLIPSIS
    keras 3..., backend ..., small mode ...
    processor: ... (the times below were measured on it)
    ...: 1 device(s) (cpu), precision float32
    >>> replicas
    1
    """
    _import_tensorflow_quietly()  # set_random_seed imports it, to seed tf.data too
    keras.utils.set_random_seed(seed)
    print(f"keras {keras.__version__}, backend {keras.backend.backend()}, small mode "
          f"{'on' if small() else 'off'}")
    if timed:
        print(f"processor: {processor()} (the times below were measured on it)")
    replicas, scope = distribute()
    return Setup(small(), replicas, scope)


def _import_tensorflow_quietly():
    """Import TensorFlow, where installed, with file descriptor 2 closed for the duration.

    Its C++ start-up lines (absl's "All log messages before absl::InitializeLog()", CUDA probing
    on a machine without a GPU) bypass Python and ``TF_CPP_MIN_LOG_LEVEL``; a notebook kernel
    shows them in red under the set-up cell. A failed import still raises in Python, as in Keras.
    """
    if "tensorflow" in sys.modules or importlib.util.find_spec("tensorflow") is None:
        return
    sys.stderr.flush()
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        import tensorflow  # noqa: F401
    except ImportError:
        pass  # Keras, too, seeds without it then
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
