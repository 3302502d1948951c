"""Several devices and processes: replicas (tf.distribute strategies, replica counts, batch
checks), jax layouts, processes (joining and watching them), padded evaluation and prediction
across them, and the accelerator and its precision.

One module a concern: ``replicas`` (``strategy``, ``num_replicas``, ``check_batch_size``,
``data_parallel``), ``layouts`` (``layout_map``), ``processes`` (``cluster``, ``join``,
``stopping_together``, ``process_rows`` and what each process is; its roll call, sockets only,
is ``_rendezvous``), ``padded`` (``predict``, ``evaluate``, ``unpadded_batches``,
``evaluation_batch_size``) and ``devices`` (``accelerator``, ``precision``); every name is
importable from here.

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

from keras_vit import _submodules
from keras_vit.distribution.devices import accelerator, precision
from keras_vit.distribution.layouts import MODEL_AXIS, layout_map
from keras_vit.distribution.padded import evaluate, evaluation_batch_size, predict, unpadded_batches
from keras_vit.distribution.processes import (
    DEFAULT_TIMEOUTS,
    HEARTBEAT_TIMEOUT,
    JOB_ADDRESSES,
    JOIN_TIMEOUT,
    NUM_PROCESSES,
    PROCESS_ID,
    TPU_POD_VARIABLES,
    Cluster,
    agree,
    cluster,
    describe_processes,
    is_writer,
    join,
    process_count,
    process_index,
    process_rows,
    stopping_together,
)
from keras_vit.distribution.replicas import check_batch_size, data_parallel, num_replicas, strategy

# Its modules are reached as attributes too (keras_vit.distribution.padded), imported or not.
__getattr__, __dir__ = _submodules.attribute_hook(__name__)

__all__ = [
    "DEFAULT_TIMEOUTS", "HEARTBEAT_TIMEOUT", "JOB_ADDRESSES", "JOIN_TIMEOUT", "MODEL_AXIS",
    "NUM_PROCESSES", "PROCESS_ID", "TPU_POD_VARIABLES", "Cluster", "accelerator", "agree",
    "check_batch_size", "cluster", "data_parallel", "describe_processes", "evaluate",
    "evaluation_batch_size", "is_writer", "join", "layout_map", "num_replicas", "precision",
    "predict", "process_count", "process_index", "process_rows", "stopping_together", "strategy",
    "unpadded_batches",
]
