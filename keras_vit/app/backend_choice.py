"""The Keras backend of the ``keras-vit`` command, chosen before Keras is imported.

Keras fixes its backend when it is first imported: ``KERAS_BACKEND``, else the ``backend`` of
``keras.json`` (in ``$KERAS_HOME``, else ``~/.keras``), else TensorFlow, which Keras then writes
into a new ``keras.json`` itself. A user who set neither, or whose ``keras.json`` names only that
default, has chosen nothing, and the command then runs on the installed backend measured fastest
for training (``benchmarks/train_step.py``, docs/results.md) and says so. Any other choice is
kept: ``KERAS_BACKEND=tensorflow keras-vit train`` runs on TensorFlow.

Only the command's entry point (``keras_vit.app.main``) calls ``prepare_command_line``; importing
this module, like ``import keras_vit``, changes nothing: a library leaves the process's
environment, file descriptors and threads to the program that imports it.

The command also quiets the start-up lines of TensorFlow and XLA (oneDNN notices, CUDA probing on a
machine without a GPU) that come before the first epoch, and on the torch backend makes OpenMP's
waiting threads sleep (``OMP_WAIT_POLICY=PASSIVE``): torch's CPU threads otherwise spin while they
wait, and on cores that other programs share they spin against those programs and each other, which
made a training step 10-40x slower (docs/results.md). A variable the user set is kept.
"""

import atexit
import os
import re
import sys
import threading

from keras_vit._backends import (
    DISTRIBUTION_VARIABLES,
    FASTEST,
    KERAS_DEFAULT,
    accelerator,
    installed,
    keras_config_backend,
    keras_config_path,
)

CHOSEN = None  # the backend prepare_command_line chose for the user, until announced
QUIET = {"TF_CPP_MIN_LOG_LEVEL": "2", "GRPC_VERBOSITY": "ERROR", "GLOG_minloglevel": "2"}
# torch's intra-op threads are OpenMP's: sleeping, not spinning, while they wait for work.
TORCH_THREADS = {"OMP_WAIT_POLICY": "PASSIVE"}
# TensorFlow's start-up lines that come through before its logging reads TF_CPP_MIN_LOG_LEVEL.
NOISE = re.compile(
    r"^(WARNING: All log messages before absl::InitializeLog\(\) is called"
    r"|[IWE]\d{4} [\d:. ]+\d+ (port|cudart_stub|cpu_feature_guard|cuda_fft|cuda_dnn|cuda_blas"
    r"|cuda_executor|cuda_platform|computation_placer|gpu_device)\.cc:\d+\]"
    r"|To enable the following instructions: .* rebuild TensorFlow)"
)
NOISE_START = re.compile(r"^(W(A(R(N(I(N(G(:.*)?)?)?)?)?)?)?$|[IWE]\d|To enable)")


def prepare_command_line():
    """Choose the backend and quiet start-up noise for the life of the command, unless Keras is
    already imported (a program that calls the command line in-process chose already)."""
    global CHOSEN
    if "keras" in sys.modules:
        return
    CHOSEN = choose_backend()
    quiet_startup()
    passive_threads()
    noise = FilteredStderr().__enter__()
    atexit.register(noise.__exit__, None, None, None)  # after a traceback is printed


def announce(stream=None):
    """Say which backend was chosen for the user, and how to choose another (once)."""
    global CHOSEN
    if CHOSEN is not None:
        device = accelerator()
        others = "|".join(b for b in FASTEST[device] if b != CHOSEN)
        why = (f"the fastest installed one for training on this {device.upper()} "
               "(docs/training.md)")
        if any(os.environ.get(name) for name in DISTRIBUTION_VARIABLES):
            why = "the one that trains in several processes (KERAS_DISTRIBUTION_* are set)"
        print(f"keras-vit: running on the {CHOSEN} backend, {why}; choose another with "
              f"KERAS_BACKEND={others} or in {keras_config_path()}",
              file=stream or sys.stderr)
        CHOSEN = None


def user_backend(environ=None):
    """The backend the user chose (``KERAS_BACKEND`` or a non-default keras.json), else None.

    >>> user_backend({"KERAS_BACKEND": "jax"})
    'jax'
    """
    environ = os.environ if environ is None else environ
    if environ.get("KERAS_BACKEND"):
        return environ["KERAS_BACKEND"]
    backend = keras_config_backend(environ)
    return backend if backend != KERAS_DEFAULT else None


def choose_backend(environ=None):
    """Set ``KERAS_BACKEND`` to the fastest installed backend unless the user chose one; jax,
    the one that joins several processes, where Keras' distribution variables are set.

    Returns the backend chosen here, or None when the user's choice (or Keras) decides.

    >>> environ = {"KERAS_DISTRIBUTION_NUM_PROCESSES": "2", "KERAS_HOME": "/nowhere"}
    >>> choose_backend(environ), environ["KERAS_BACKEND"]
    ('jax', 'jax')
    """
    environ = os.environ if environ is None else environ
    if user_backend(environ) is not None:
        return None
    device = accelerator()
    several = any(environ.get(name) for name in DISTRIBUTION_VARIABLES)
    order = ("jax",) if several else FASTEST[device]
    backend = next((b for b in order if installed(b)), None)
    if backend is None:
        return None  # Keras will say that no backend is installed
    environ["KERAS_BACKEND"] = backend
    return backend


def quiet_startup(environ=None):
    """Hide TensorFlow/XLA start-up notices; the user's own settings of the variables win."""
    environ = os.environ if environ is None else environ
    for name, value in QUIET.items():
        environ.setdefault(name, value)


def backend_in_use(environ=None):
    """The backend Keras will load: the user's, the one chosen here, else Keras' default.

    >>> backend_in_use({"KERAS_BACKEND": "torch"})
    'torch'
    """
    environ = os.environ if environ is None else environ
    return user_backend(environ) or KERAS_DEFAULT


def passive_threads(environ=None):
    """On the torch backend, let OpenMP's idle threads sleep (unless the user set the policy).

    Set before torch is imported: OpenMP reads the variable once, when it starts.
    """
    environ = os.environ if environ is None else environ
    if backend_in_use(environ) == "torch":
        for name, value in TORCH_THREADS.items():
            environ.setdefault(name, value)


class FilteredStderr:
    """Drop the lines of ``NOISE`` written to file descriptor 2 (C++ code too) while active.

    The rest passes through unchanged, tracebacks included.
    """

    def __enter__(self):
        sys.stderr.flush()
        self._saved = os.dup(2)
        read, write = os.pipe()
        os.dup2(write, 2)
        os.close(write)
        out = os.dup(self._saved)  # here, not in the thread: __exit__ may close _saved first
        self._thread = threading.Thread(target=self._pump, args=(read, out), daemon=True)
        self._thread.start()
        return self

    @staticmethod
    def _pump(read, out):
        """Forward what is read, line by line; a line's start goes on at once (progress bars
        redraw with carriage returns) unless it may begin a line of noise."""
        pending = b""
        while chunk := os.read(read, 65536):  # drain to the end: a full pipe would block
            *lines, pending = (pending + chunk).split(b"\n")
            text = b"".join(line + b"\n" for line in lines
                            if not NOISE.match(line.decode("utf-8", "replace")))
            if pending and not NOISE_START.match(pending.decode("utf-8", "replace")):
                text, pending = text + pending, b""
            _write(out, text)
        if not NOISE.match(pending.decode("utf-8", "replace")):
            _write(out, pending)
        for fd in (read, out):
            os.close(fd)

    def __exit__(self, *exc):
        sys.stderr.flush()
        os.dup2(self._saved, 2)  # closes the pipe's last write end: the pump ends
        os.close(self._saved)
        self._thread.join(timeout=60)  # a child process may hold the pipe
        return False


def _write(fd, data):
    try:
        while data:
            data = data[os.write(fd, data):]
    except OSError:  # the reader went away (`keras-vit ... 2>&1 | head`): drop the rest
        pass

