"""Several processes as one run: ``cluster`` and ``join`` (Keras' variables, with the roll call of
``_rendezvous`` before JAX's own join), the watch that stops every process when one fails
(``stopping_together``), and what each process is: ``process_index``, ``process_count``,
``is_writer``, ``describe_processes``, ``agree``, ``process_rows``."""

import atexit
import contextlib
import dataclasses
import os
import signal
import sys
import threading
import time
import traceback

import keras
import numpy as np

from keras_vit._backends import DISTRIBUTION_VARIABLES
from keras_vit.distribution import _rendezvous, replicas

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
    others on its port (``_rendezvous``): a ``ConnectionError`` names a process that
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
    """Every process counted by process 0 before JAX's own join (``_rendezvous``), on
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
        devices = replicas.num_replicas() if keras.backend.backend() == "torch" else len(
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
