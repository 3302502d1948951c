"""One process of a multi-process run for ``tests/test_processes.py`` (not a test itself).

``python tests/processes_worker.py SCENARIO OUT`` with Keras' distribution variables set (or not,
for the one-process reference) and ``XLA_FLAGS=--xla_force_host_platform_device_count=N``;
writes ``OUT/process<i>.npz``.

- ``library``: ``model.fit`` of a small ViT fed by ``keras_vit.data`` under ``data_parallel()``
  (each process its rows), then ``evaluate`` and ``predict``; then the same under
  ``ModelParallel`` with ``layout_map`` on a (2, 2) mesh.
- ``dies``: trains, then process 1 exits at its second step (as if killed).
- ``fails``: trains, then process 1 raises an error at its second step.
- ``terminated``: trains, then process 1 is sent ``SIGTERM`` at its second step.
- ``vanishes``: once joined, process ``VANISHING`` is killed (``SIGKILL``) while the others wait
  outside any collective (in their input pipeline, say).
- ``cli``: ``keras-vit`` with the arguments after OUT; with ``STOP_AFTER_EPOCH=e`` every process
  ends (as if killed) once the backup of epoch ``e`` is written. Every write this process makes
  into the run folder from Python (open for writing, mkdir, rename, remove) is listed in
  ``OUT/writes<i>.json``.
"""

import os
import signal
import sys
import time

from keras_vit import distribution

distribution.join()  # before anything touches a device

import keras  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402

from keras_vit import data  # noqa: E402
from keras_vit.pretrained import create_model  # noqa: E402

SIZE = dict(hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, patch_size=4)


class Losses(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.values = []

    def on_train_batch_end(self, batch, logs=None):
        self.values.append(float(logs["loss"]))


def gathered_weights(model):
    return [np.asarray(multihost_utils.process_allgather(v.value, tiled=True))
            for v in model.weights]


def trained(train, steps):
    keras.utils.set_random_seed(0)
    model = create_model("ViT-Ti/4", image_size=8, num_classes=10, num_channels=1, **SIZE)
    model.compile(optimizer=keras.optimizers.AdamW(1e-3), weighted_metrics=["accuracy"],
                  loss=keras.losses.CategoricalCrossentropy(from_logits=True))
    losses = Losses()
    model.fit(train, epochs=2, steps_per_epoch=steps, callbacks=[losses], verbose=0)
    return model, losses.values


def library(out):
    (x, y), (xt, yt) = data.load_digits()
    examples, tests = data.from_arrays(x[:256], y[:256]), data.from_arrays(xt[:101], yt[:101])
    options = dict(image_size=8, num_classes=10, augmentation="pad_crop", resize_size=10,
                   mixup_alpha=0.2, repeat=True, seed=3, training=True)
    results = {}
    distribution.data_parallel()
    model, results["dp_losses"] = trained(data.pipeline(examples, batch_size=32, **options), 3)
    results["dp_weights"] = gathered_weights(model)
    test = data.pipeline(tests, batch_size=16, image_size=8, num_classes=10, training=False)
    found = distribution.evaluate(model, test)
    results["dp_evaluate"] = [found["accuracy"], found["loss"]]
    images = data.preprocess(xt[:101], image_size=8, training=False)
    results["dp_predict"] = distribution.predict(model, images, batch_size=16)
    results["dp_evaluate_arrays"] = list(distribution.evaluate(model, images, yt[:101]).values())
    from keras_vit.evaluation.fewshot import fewshot_linear

    train_images = data.preprocess(x[:200], image_size=8, training=False)
    shots = fewshot_linear(model, train_images, y[:200], images, yt[:101], shots=(2, 5),
                           seeds=(0, 1), batch_size=16)
    results["dp_fewshot"] = [shots[2]["mean"], shots[5]["mean"]]
    try:
        import tensorflow as tf
    except ImportError:  # the README's environment has none
        pass
    else:
        raw = tf.data.Dataset.from_tensor_slices((xt[:101], yt[:101]))
        found = distribution.evaluate(model, data.pipeline(
            raw, batch_size=16, image_size=8, num_classes=10, training=False))
        results["dp_evaluate_tfdata"] = [found["accuracy"], found["loss"]]

    mesh = keras.distribution.DeviceMesh((2, 2), ("batch", "model"),
                                         keras.distribution.list_devices())
    config = model.config if hasattr(model, "config") else None
    keras.distribution.set_distribution(keras.distribution.ModelParallel(
        layout_map=distribution.layout_map(config or model, mesh), batch_dim_name="batch",
        auto_shard_dataset=False))
    model, results["mp_losses"] = trained(data.pipeline(examples, batch_size=32, **options), 3)
    results["mp_weights"] = gathered_weights(model)
    return results


def dies(out, end=None):
    (x, y), _ = data.load_digits()
    distribution.data_parallel()
    train = data.pipeline(data.from_arrays(x[:64], y[:64]), batch_size=16, image_size=8,
                          num_classes=10, training=True, repeat=True)

    class Exit(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            print(f"process {distribution.process_index()} step {batch}", flush=True)
            if batch == 1 and distribution.process_index() == 1:
                if end == "fails":
                    raise RuntimeError("a failure in process 1")
                if end == "terminated":
                    os.kill(os.getpid(), signal.SIGTERM)
                    time.sleep(5)  # the handler runs here, between two steps
                os._exit(3)

    trained_model = create_model("ViT-Ti/4", image_size=8, num_classes=10, num_channels=1,
                                 **SIZE)
    trained_model.compile(optimizer="adam",
                          loss=keras.losses.CategoricalCrossentropy(from_logits=True))
    trained_model.fit(train, epochs=1000, steps_per_epoch=4, callbacks=[Exit()], verbose=0)
    return {}


def vanishes(out):
    multihost_utils.sync_global_devices("joined")
    if distribution.process_index() == int(os.environ["VANISHING"]):
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)  # the watcher stops this process long before
    return {}


def command_line(out):
    import json

    from keras_vit.app import cli, run_files

    argv = sys.argv[3:]
    folder = os.path.abspath(argv[argv.index("--output") + 1])
    writes = []

    def audit(event, args):
        if event in ("open", "os.mkdir", "os.rename", "os.replace", "os.remove",
                     "shutil.rmtree") and args and isinstance(args[0], (str, bytes, os.PathLike)):
            path = os.path.abspath(os.fsdecode(args[0]))
            writing = event != "open" or (len(args) > 1 and any(m in str(args[1]) for m in "wax+"))
            if writing and path.startswith(folder):
                writes.append([event, path])

    sys.addaudithook(audit)
    stop_after = int(os.environ.get("STOP_AFTER_EPOCH", "0"))
    back_up = run_files.AtomicBackup.on_epoch_end

    def then_stopped(backup, epoch, logs=None):
        back_up(backup, epoch, logs)
        if epoch + 1 == stop_after:  # every process here, once process 0's backup is whole
            multihost_utils.sync_global_devices("backed up")
            with open(os.path.join(out, f"writes{distribution.process_index()}.json"),
                      "w") as file:
                json.dump(writes, file)
            distribution.processes._leave()  # the whole run ends here: no process reports another
            os._exit(0)

    run_files.AtomicBackup.on_epoch_end = then_stopped
    code = cli.main(argv)
    with open(os.path.join(out, f"writes{distribution.process_index()}.json"), "w") as file:
        json.dump(writes, file)
    assert code == 0, code
    return {}


if __name__ == "__main__":
    scenario, out = sys.argv[1], sys.argv[2]
    scenarios = {"library": library, "dies": dies, "fails": lambda out: dies(out, "fails"),
                 "terminated": lambda out: dies(out, "terminated"), "vanishes": vanishes,
                 "cli": command_line}
    with distribution.stopping_together():
        results = scenarios[scenario](out)
    flat = {}
    for key, value in results.items():
        if isinstance(value, list) and value and isinstance(value[0], np.ndarray):
            flat.update({f"{key}_{i}": w for i, w in enumerate(value)})
        else:
            flat[key] = np.asarray(value)
    np.savez(os.path.join(out, f"process{distribution.process_index()}.npz"), **flat)
    print(f"process {distribution.process_index()}: {distribution.describe_processes()}")
