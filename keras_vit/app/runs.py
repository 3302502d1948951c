"""The start and end every ``keras-vit`` run shares: ``begin`` fixes a run's dataset, seed and
folder (and checks, for a command that trains, that it can); ``Run.finish`` writes its metrics
(and, after training, the model and its history) through ``run_files``.

The commands (``keras_vit.app.commands``: ``train``, ``finetune``, ``evaluate``...) build on
these and on the run's model (``run_model``), data and evaluation (``run_data``) and device
(``run_plan``)."""

import dataclasses
import os
import time

import keras

from keras_vit import _optional, data
from keras_vit.app import configs, run_files
from keras_vit.distribution import check_batch_size


def _checkpoint_name(path):
    stem = os.path.splitext(os.path.basename(os.fspath(path)))[0]
    if stem == "model":  # a run folder's model.keras: name it after the folder
        stem = os.path.basename(os.path.dirname(os.path.abspath(path))) or stem
    return stem


@dataclasses.dataclass
class Run:
    """What every command starts from and ends with: its configuration, dataset and folder."""

    config: configs.Config
    info: data.DatasetInfo
    run_dir: str
    started: float

    def finish(self, model, extra, log=None, title=None):
        """The metrics of the run, written with the model when ``log`` holds a history."""
        metrics = {
            "command": self.config.command,
            "wall_time_s": round(time.time() - self.started, 2),
            "backend": keras.backend.backend(),
            "num_params": int(model.count_params()),
            "cpu_time_s": round(sum(os.times()[:2]), 2),
            "load_average": [round(v, 2) for v in os.getloadavg()],
            "config": self.config.to_dict(),
            "model_config": model.get_config(),
        }
        metrics.update(extra)
        if log is None:
            run_files.write_json(os.path.join(self.run_dir, run_files.METRICS), metrics)
        else:
            metrics["train_time_s"] = round(sum(r["seconds"] for r in log.records), 2)
            run_files.write_run(self.run_dir, model=model, metrics=metrics, history=log.records,
                                title=title)
        return dict(metrics, output=self.run_dir)


def begin(config, model_name=None):
    """The shared start of a run: the dataset, the seed, the run folder and, for a command that
    trains, the checks that it can (batch size, plotting package). ``model_name`` names the folder
    (default: the checkpoint's)."""
    started = time.time()
    info = data.dataset_info(config.dataset)
    if info.source == "tfds":
        # Refused here, before a checkpoint is downloaded and a model built for nothing, where
        # TensorFlow or tensorflow-datasets is missing (Colab's TPU runtime has no TensorFlow).
        from keras_vit.data import tfdata  # noqa: F401  (its import names what to install)

        _optional.need("tensorflow_datasets", f"The dataset {info.name!r}")
    if model_name is None:
        model_name = _checkpoint_name(config.checkpoint)
    keras.utils.set_random_seed(config.seed)
    run_dir = config.output or run_files.default_output(config.command, info.name, model_name)
    if isinstance(config, configs.OptimizerOptions):  # a command that trains
        check_batch_size(config.batch_size)
        run_files.check_plotting()
    return Run(config, info, run_dir, started)
