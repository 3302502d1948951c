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

Several processes (jax: a TPU pod slice, one process per host, or several GPU hosts): the same
program starts once per host with Keras' variables ``KERAS_DISTRIBUTION_JOB_ADDRESSES`` (process
0's ``host:port``), ``KERAS_DISTRIBUTION_NUM_PROCESSES`` and ``KERAS_DISTRIBUTION_PROCESS_ID``, and
``join()``, called before anything touches a device, joins them (``keras-vit`` does so by itself).
The devices of every process then form one set: ``data_parallel()`` shares every global batch over
all of them, and each process feeds only its own rows of it (``process_rows``), which
``keras_vit.data``'s pipelines do by themselves. ``predict`` and ``evaluate`` give every process
the results over all examples. TensorFlow's multi-worker training (``MultiWorkerMirroredStrategy``,
``TF_CONFIG``) and several torch processes are not set up here: ``join`` refuses them.
"""

import atexit
import contextlib
import dataclasses
import glob
import logging
import os
import signal
import sys
import threading
import time
import traceback
import weakref

import keras
import numpy as np

from keras_vit import _rendezvous
from keras_vit._backends import DISTRIBUTION_VARIABLES
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

# Keras' variables (keras.distribution.initialize) and the timeouts keras_vit adds to them.
JOB_ADDRESSES, NUM_PROCESSES, PROCESS_ID = DISTRIBUTION_VARIABLES
JOIN_TIMEOUT = "KERAS_VIT_JOIN_TIMEOUT"
HEARTBEAT_TIMEOUT = "KERAS_VIT_HEARTBEAT_TIMEOUT"
# JAX's own defaults: seconds to wait for every process to join, and without a heartbeat before
# a process counts as dead (the others then stop).
DEFAULT_TIMEOUTS = {JOIN_TIMEOUT: 300, HEARTBEAT_TIMEOUT: 100}
# Set by Google's TPU pod slices on GKE and multislice: JAX finds the processes by itself.
TPU_POD_VARIABLES = ("TPU_PROCESS_ADDRESSES", "TPU_WORKER_HOSTNAMES",
                     "MEGASCALE_COORDINATOR_ADDRESS")


@dataclasses.dataclass(frozen=True)
class Cluster:
    """Where the processes of one run meet: process 0's ``coordinator`` address (``host:port``),
    how many processes join and which one this is, and the two timeouts in seconds."""

    coordinator: str | None
    num_processes: int | None
    process_id: int | None
    join_timeout: int
    heartbeat_timeout: int

    def describe(self):
        """What ``join`` is about to do, with the timeouts and what to do when one runs out."""
        if self.coordinator is None:
            return ("joining the processes of this TPU pod slice (found by JAX); a process that "
                    f"does not join within {self.join_timeout} s stops them all "
                    f"({JOIN_TIMEOUT}).")
        return (f"process {self.process_id} of {self.num_processes}: joining at "
                f"{self.coordinator}. Process 0 waits up to {self.join_timeout} s "
                f"({JOIN_TIMEOUT}) for the others and names any that does not come; a process "
                "that ends without a word stops the others, named, and one silent for "
                f"{self.heartbeat_timeout} s ({HEARTBEAT_TIMEOUT}) stops them all (JAX's "
                "'tasks are unhealthy (stopped sending heartbeats)').")


def _whole(name, value, smallest, hint):
    try:
        number = int(str(value).strip())
    except ValueError:
        number = None
    if number is None or number < smallest:
        raise ValueError(f"{name}={value!r} is not a whole number of at least {smallest}: set it "
                         f"to {hint}.")
    return number


def cluster(job_addresses=None, num_processes=None, process_id=None, environ=None):
    """The ``Cluster`` the arguments or Keras' variables describe, None for one process.

    An argument wins over its variable (as in ``keras.distribution.initialize``). A TPU pod slice
    that sets one of ``TPU_POD_VARIABLES`` gives a ``Cluster`` that JAX fills in. Wrong values
    raise a ``ValueError`` naming the variable to fix.

    Example:
    >>> cluster(environ={})  # one process
    >>> cluster("10.0.0.1:1234", 2, 1, environ={})
    Cluster(coordinator='10.0.0.1:1234', num_processes=2, process_id=1, join_timeout=300, \
heartbeat_timeout=100)
    """
    environ = os.environ if environ is None else environ
    values = {name: given if given is not None else environ.get(name)
              for name, given in ((JOB_ADDRESSES, job_addresses), (NUM_PROCESSES, num_processes),
                                  (PROCESS_ID, process_id))}
    timeouts = {name: _whole(name, environ.get(name, default), 1, "a number of seconds")
                for name, default in DEFAULT_TIMEOUTS.items()}
    timeouts = dict(join_timeout=timeouts[JOIN_TIMEOUT],
                    heartbeat_timeout=timeouts[HEARTBEAT_TIMEOUT])
    if all(value in (None, "") for value in values.values()):
        if any(environ.get(name) for name in TPU_POD_VARIABLES):
            return Cluster(None, None, None, **timeouts)
        return None
    missing = [name for name, value in values.items() if value in (None, "")]
    if missing:
        raise ValueError(f"{', '.join(missing)} not set: several processes join with all three "
                         f"of {JOB_ADDRESSES} (process 0's host:port), {NUM_PROCESSES} and "
                         f"{PROCESS_ID} (0 to {NUM_PROCESSES} - 1).")
    count = _whole(NUM_PROCESSES, values[NUM_PROCESSES], 1, "the number of processes")
    index = _whole(PROCESS_ID, values[PROCESS_ID], 0, "this process's number, 0 for the first")
    if index >= count:
        raise ValueError(f"{PROCESS_ID}={index} is not below {NUM_PROCESSES}={count}: number the "
                         f"processes 0 to {count - 1}, process 0 at {JOB_ADDRESSES}.")
    addresses = [a.strip() for a in str(values[JOB_ADDRESSES]).split(",")]
    if len(addresses) > 1 and len(addresses) != count:
        raise ValueError(f"{JOB_ADDRESSES} lists {len(addresses)} addresses for "
                         f"{NUM_PROCESSES}={count} processes: give every process's address, or "
                         "only process 0's.")
    host, _, port = addresses[0].rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{JOB_ADDRESSES}={values[JOB_ADDRESSES]!r}: process 0's address needs "
                         "a host and a free port, e.g. 10.0.0.1:8476.")
    return Cluster(addresses[0], count, index, **timeouts)


def join(job_addresses=None, num_processes=None, process_id=None):
    """Join the other processes of a multi-process run, once, before any device is touched.

    Does nothing in a one-process run (no variables: see ``cluster``) or when already joined.
    Otherwise, on the jax backend, it is ``keras.distribution.initialize`` with timeouts: JAX's
    ``jax.distributed.initialize`` waits ``KERAS_VIT_JOIN_TIMEOUT`` seconds for every process and
    stops them all when one is silent for ``KERAS_VIT_HEARTBEAT_TIMEOUT`` seconds, then Keras
    seeds its random generator alike in all processes. Before JAX's join, process 0 counts the
    others on its port (``keras_vit._rendezvous``): a ``ConnectionError`` names a process that
    never comes, comes twice or counts the processes differently, or process 0 when it never
    answers. Once joined, a process that ends without a word, or is stopped by ``SIGTERM``,
    stops the others with its number (see ``stopping_together``).

    Returns the ``Cluster`` joined, or None.
    """
    found = cluster(job_addresses, num_processes, process_id)
    if found is None or (found.num_processes == 1):
        return None
    backend = keras.backend.backend()
    if backend != "jax":
        raise ValueError(
            f"{JOB_ADDRESSES} and the other distribution variables are set, but several "
            f"processes train together on the jax backend only (this is {backend}): set "
            "KERAS_BACKEND=jax. TensorFlow's multi-worker training needs its own "
            "MultiWorkerMirroredStrategy and TF_CONFIG; Keras' torch backend trains in one "
            "process.")
    import jax

    if jax.distributed.is_initialized():
        return found
    roll = _roll_call(found)
    try:
        jax.distributed.initialize(
            found.coordinator, found.num_processes, found.process_id,
            initialization_timeout=found.join_timeout,
            heartbeat_timeout_seconds=found.heartbeat_timeout)
    except RuntimeError as error:
        if "before any JAX" in str(error):
            raise RuntimeError(
                "keras_vit.distribution.join() must come before anything touches a device "
                "(building a model, jax.devices(), keras.distribution.list_devices()): call "
                "it first in the program.") from error
        raise
    from keras.src.backend.jax import distribution_lib

    distribution_lib.initialize_rng()  # the rest of keras.distribution.initialize
    if roll is not None:
        _watch_over(found, roll)
    return found


def _roll_call(found):
    """Every process counted by process 0 before JAX's own join (``keras_vit._rendezvous``), on
    the coordinator's port; None on a TPU pod slice, whose processes JAX finds by itself."""
    if found.coordinator is None:
        return None
    host, _, port = found.coordinator.rpartition(":")
    names = (JOB_ADDRESSES, NUM_PROCESSES, PROCESS_ID, JOIN_TIMEOUT)
    if found.process_id == 0:
        return _rendezvous.roll_call(int(port), found.num_processes, found.join_timeout, names)
    return _rendezvous.report(host, port, found.process_id, found.num_processes,
                              found.join_timeout, names)


def _watch_over(found, roll):
    # After JAX's own exit handler, so it runs before it: a process leaving normally says so
    # and stops watching before the coordination service goes away.
    _ROLL.append(roll)
    atexit.register(_leave)
    if threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminated)
    threading.Thread(target=_watch, args=(found, roll), name="keras_vit_watch",
                     daemon=True).start()


def _leave():
    _LEAVING.set()
    for roll in _ROLL:
        roll.leave()


def _terminated(signum, frame):
    # Raised in the main thread between two steps, so that ``stopping_together`` tells the
    # others which process was stopped (a job's cancellation, a preemption, ``kill``).
    raise SystemExit(f"ended by {signal.Signals(signum).name} from outside")


# Where a failing process leaves its error for the others (JAX's key-value store), and how long
# it waits for them to read it: its exit would break their collectives before they could.
_STOPPED = "keras_vit_stopped"
_NOTICE_SECONDS = 3.0
_LEAVING = threading.Event()
_ROLL = []  # the connections of this process's roll call, once joined


def _client():
    from jax._src import distributed

    return distributed.global_state.client


def _watch(found, roll, every=0.5):
    """Stop this process, saying why, when another one has stopped with an error, ended without
    a word (its connection closed) or, for the others, when process 0 (which holds JAX's
    coordination service) no longer answers."""
    client = _client()
    while True:
        gone = roll.gone(every)
        if _LEAVING.is_set():
            return
        try:
            stopped = client.key_value_dir_get(_STOPPED)
        except Exception:  # noqa: BLE001 (any failure: the coordinator is gone)
            if _LEAVING.is_set() or found.process_id == 0:
                return  # this process is leaving, or holds the service that is going
            if 0 in gone:
                _gone(found, 0)
            _stop(f"process 0 (the coordinator at {found.coordinator}) stopped answering")
        for key, message in stopped:
            index = int(key.rsplit("/", 1)[-1])
            if index != found.process_id:
                _stop(f"process {index} of {found.num_processes} stopped: {message}")
        for index in gone:  # after the messages: a process stopping for another says bye
            _gone(found, index)


def _gone(found, index):
    why = (f"ended without a word (its connection to process {found.process_id} closed: "
           "killed, out of memory, or its host went down)")
    if index == 0:
        _stop(f"process 0 (the coordinator at {found.coordinator}) {why}")
    _stop(f"process {index} of {found.num_processes} {why}",
          tell=f"{_STOPPED}/{index}", message=why)


def _stop(reason, tell=None, message=None):
    """Say why and end this process; process 0 first leaves ``message`` for the others under
    the key ``tell`` and keeps JAX's coordination service up while they read it."""
    print(f"keras_vit: {reason}; process {process_index()} stops too.", file=sys.stderr,
          flush=True)
    _leave()
    if process_index() == 0 and process_count() > 2:
        with contextlib.suppress(Exception):
            if tell is not None:
                _client().key_value_set(tell, message)
            time.sleep(_NOTICE_SECONDS)
    os._exit(1)


@contextlib.contextmanager
def stopping_together():
    """Around a multi-process run: when this process fails, the others stop too and say why
    (otherwise they would wait in their next collective until ``KERAS_VIT_HEARTBEAT_TIMEOUT``,
    or stop on a bare transport error). Nothing to do in a one-process run."""
    try:
        yield
    except BaseException as error:
        if keras.backend.backend() == "jax" and process_count() > 1 and _client() is not None:
            # Said here first: the others' exit can end this process before the error is raised.
            traceback.print_exc()
            message = f"{type(error).__name__}: {error}"[:2000]
            print(f"keras_vit: process {process_index()} of {process_count()} stopped: "
                  f"{message}; stopping the others.", file=sys.stderr, flush=True)
            _LEAVING.set()  # the others' ends are theirs to report, not this process's
            with contextlib.suppress(Exception):
                _client().key_value_set(f"{_STOPPED}/{process_index()}", message)
                time.sleep(_NOTICE_SECONDS)
        raise


def process_index():
    """This process's number among the processes of the run (0 alone, and off jax)."""
    if keras.backend.backend() != "jax":
        return 0
    import jax

    return jax.process_index()


def process_count():
    """How many processes train together (1 alone, and off jax)."""
    if keras.backend.backend() != "jax":
        return 1
    import jax

    return jax.process_count()


def is_writer():
    """Whether this process writes the run's files: process 0, the only one that does."""
    return process_index() == 0


def describe_processes():
    """``"process 0 of 2, 4 devices in all (2 here)"``; one process: ``"1 process, ..."``.

    Example:
    >>> describe_processes()  # doctest: +ELLIPSIS
    '1 process, ... device(s)'
    """
    if process_count() == 1:  # Keras' torch backend lists no devices: it trains on one
        devices = num_replicas() if keras.backend.backend() == "torch" else len(
            keras.distribution.list_devices())
        return f"1 process, {devices} device(s)"
    devices = len(keras.distribution.list_devices())
    import jax

    return (f"process {process_index()} of {process_count()}, {devices} devices in all "
            f"({jax.local_device_count()} here)")


def agree(value, what):
    """``value`` when every process has the same one (an int), else a ``ValueError`` listing
    them: ``what`` says what they disagree on and how to make them agree."""
    if process_count() == 1:
        return value
    from jax.experimental import multihost_utils

    values = multihost_utils.process_allgather(np.asarray(int(value), np.int64)).tolist()
    if len(set(values)) > 1:
        raise ValueError(f"The processes disagree: {what} ({', '.join(map(str, values))} in "
                         "processes 0, 1, ...).")
    return value


def process_rows(batch_size):
    """The rows of a global batch of ``batch_size`` that this process feeds, in order: all of
    them in a one-process run, else the rows the current distribution places on this process's
    devices (a contiguous block per process for ``DataParallel``).

    Example:
    >>> process_rows(4).tolist()
    [0, 1, 2, 3]
    """
    batch_size = int(batch_size)
    distribution = keras.distribution.distribution()
    if distribution is None or process_count() == 1:
        return np.arange(batch_size)
    sharding = distribution.get_data_layout((batch_size,)).backend_layout
    rows = set()
    for index in sharding.addressable_devices_indices_map((batch_size,)).values():
        rows.update(range(*index[0].indices(batch_size)))
    return np.array(sorted(rows), np.int64)


@contextlib.contextmanager
def _own_rows():
    """Keras takes each process's arrays as its rows (no tf.data sharding) while active."""
    distribution = keras.distribution.distribution()
    if distribution is None or not hasattr(distribution, "auto_shard_dataset"):
        yield
        return
    before = distribution.auto_shard_dataset
    distribution.auto_shard_dataset = False
    try:
        yield
    finally:
        distribution.auto_shard_dataset = before


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

    Under several processes every process passes all the inputs and gets all the outputs; each
    feeds only its rows of every batch (``process_rows``).

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
