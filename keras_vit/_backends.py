"""Which Keras backend a process will load, which are installed, and what to say when Keras
cannot import the one it was set to.

Keras reads its backend once, when it is first imported: ``KERAS_BACKEND``, else the ``backend``
of ``keras.json`` (in ``$KERAS_HOME``, else ``~/.keras``), else TensorFlow. An install that left
TensorFlow out (``pip install "keras-vit-paper[torch]"``) therefore fails in ``import keras``
with a bare ``No module named 'tensorflow'`` unless a backend was chosen; ``keras_vit`` turns that
error into one that names the backend Keras was set to, where that came from, the backends that
are installed and the variable to set (``keras_vit._registration`` calls ``explain`` when it sees
Keras fail to import). Nothing here imports Keras or a backend.
"""

import importlib.util
import json
import os

KERAS_DEFAULT = "tensorflow"
# The modules each backend needs (jax's compiled half is a package of its own).
MODULES = {"jax": ("jax", "jaxlib"), "tensorflow": ("tensorflow",), "torch": ("torch",)}
# Fastest first, for the whole `keras-vit train` job: benchmarks/train_job.py on a CPU, idle and
# shared with other programs, benchmarks/train_step.py on a GPU (the numbers: docs/results.md).
FASTEST = {"cpu": ("torch", "tensorflow", "jax"), "gpu": ("jax", "torch", "tensorflow")}
# Keras' variables of a run of several processes (keras.distribution.initialize), which only the
# jax backend joins (keras_vit.distribution.join).
DISTRIBUTION_VARIABLES = ("KERAS_DISTRIBUTION_JOB_ADDRESSES", "KERAS_DISTRIBUTION_NUM_PROCESSES",
                          "KERAS_DISTRIBUTION_PROCESS_ID")


def accelerator():
    """``"gpu"`` where an NVIDIA driver is loaded, else ``"cpu"`` (no framework is imported)."""
    return "gpu" if os.path.exists("/proc/driver/nvidia/version") else "cpu"


def keras_config_path(environ=None):
    """The ``keras.json`` Keras reads: in ``$KERAS_HOME``, else in ``~/.keras``."""
    environ = os.environ if environ is None else environ
    home = environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    return os.path.join(home, "keras.json")


def keras_config_backend(environ=None):
    """The ``backend`` of ``keras.json``, or None where the file is missing or unreadable (Keras,
    too, then ignores it)."""
    try:
        with open(keras_config_path(environ)) as file:
            return json.load(file).get("backend") or None
    except (OSError, ValueError, AttributeError):
        return None


def configured_backend(environ=None):
    """``(backend, where it was set)``: the backend Keras loads in a process with ``environ``.

    >>> configured_backend({"KERAS_BACKEND": "jax"})
    ('jax', 'KERAS_BACKEND')
    """
    environ = os.environ if environ is None else environ
    if environ.get("KERAS_BACKEND"):
        return environ["KERAS_BACKEND"], "KERAS_BACKEND"
    backend = keras_config_backend(environ)
    if backend is not None:
        return backend, keras_config_path(environ)
    return KERAS_DEFAULT, None


def installed(backend):
    """Whether every module ``backend`` needs can be found (none is imported)."""
    try:
        return all(importlib.util.find_spec(name) is not None
                   for name in MODULES.get(backend, (backend,)))
    except (ImportError, ValueError):
        return False


def explain(error, environ=None):
    """A ``ModuleNotFoundError`` that says what to do, for ``error`` raised while Keras imported a
    backend that is not installed; None for any other error (which is not ours to explain)."""
    backend, source = configured_backend(environ)
    missing = (getattr(error, "name", None) or "").partition(".")[0]
    if missing not in MODULES.get(backend, ()):
        return None
    if source is None:
        where = "by default: neither KERAS_BACKEND nor keras.json names one"
    elif source == "KERAS_BACKEND":
        where = "by KERAS_BACKEND"
    else:  # Keras writes its default into a new keras.json itself
        where = f"in {source}" + (", which Keras writes with its default when there is none"
                                  if backend == KERAS_DEFAULT else "")
    others = [name for name in FASTEST[accelerator()] if name != backend and installed(name)]
    if others:
        choice = others[0]  # the fastest of them, as the keras-vit command would choose
        fix = (f"Installed here: {', '.join(others)}. Choose one with KERAS_BACKEND: in the shell "
               f"(KERAS_BACKEND={choice} python ...), or in Python before the next keras_vit "
               f'call, os.environ["KERAS_BACKEND"] = "{choice}"; or install {backend}: '
               f'pip install "keras-vit-paper[{backend}]"')
    else:
        fix = ('No backend is installed here: pip install "keras-vit-paper[jax]" (or '
               "[tensorflow], [torch]), then set KERAS_BACKEND to it unless it is tensorflow")
    return ModuleNotFoundError(
        f"Keras is set to the {backend} backend ({where}), which is not installed ({error}). "
        f"{fix}.", name=missing)
