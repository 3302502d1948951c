"""What every ``keras-vit`` run shares: its model, its data, its start and its end.

The commands (``keras_vit.app.commands``: ``train``, ``finetune``, ``evaluate``...) build on
these: ``begin`` fixes a run's dataset, seed and folder; ``Run.finish`` writes its metrics (and,
after training, the model and its history) through ``run_files``; the model is built from
``keras_vit.models`` with the default small ViT of ``configs`` unless ``--model`` names one.
"""

import dataclasses
import json
import os
import time

import keras
import numpy as np

from keras_vit import _optional, data
from keras_vit.app import configs, run_files
from keras_vit.app.errors import UsageError
from keras_vit.distribution import accelerator, check_batch_size, evaluate, num_replicas, precision
from keras_vit.pretrained import create_model
from keras_vit.training.recipes import classification_loss


def parse_overrides(items):
    """``["hidden_size=64", "classifier=gap"]`` -> dict; values are JSON, else strings."""
    overrides = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"Model override {item!r} is not of the form key=value "
                             "(e.g. --set hidden_size=64).")
        try:
            overrides[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            overrides[key.strip()] = value
    return overrides


def _as_dict(config):
    return config.to_dict() if isinstance(config, configs.Config) else config


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """The model of a run from scratch: ``label`` names its folder and title (``--model``'s
    value), ``name`` and ``overrides`` are ``create_model``'s, ``image_size`` the side it takes
    unless ``--image-size`` says (None: the dataset's own)."""

    label: str
    name: str
    overrides: dict
    image_size: int | None = None


def model_spec(config, channels=None):
    """The ``ModelSpec`` of ``config``: ``config.model``, else the command's small model for
    the dataset (``configs.SMALL_MODELS``), with ``--set``'s overrides on top.

    ``config``: a command's configuration, or a dict (read as ``train``'s). A small model takes
    the dataset's ``channels``; a named model keeps its own input channels (3 for the published
    architectures) and the pipeline converts the images.

    >>> spec = model_spec({"dataset": "digits", "set": ["num_layers=2"]}, channels=1)
    >>> spec.label, spec.name, spec.overrides["num_layers"], spec.overrides["num_channels"]
    ('small-vit', 'ViT-Ti/7', 2, 1)
    >>> model_spec({}).label, model_spec({}).image_size
    ('small-hybrid', 32)
    """
    defaults = getattr(config, "DEFAULT_MODELS", configs.TrainConfig.DEFAULT_MODELS)
    config = _as_dict(config)
    dataset = config.get("dataset") or configs.TrainConfig.dataset
    label = config.get("model") or defaults.get(dataset, configs.SMALL_DEFAULT)
    small = configs.SMALL_MODELS.get(label)
    if small is None:
        spec = ModelSpec(label, label, {})
    else:
        overrides = dict(small.overrides)
        if channels is not None:
            overrides["num_channels"] = channels
        spec = ModelSpec(label, small.name, overrides, small.image_size)
    spec.overrides.update(parse_overrides(config.get("set")))
    return spec


def build_model(config, *, image_size, num_classes, channels=None, dtype=None):
    """The model of a run from scratch; ``dtype`` is the run's dtype policy unless ``--set
    dtype=...`` names one."""
    spec = model_spec(config, channels)
    config = _as_dict(config)
    overrides = dict(spec.overrides)
    if dtype is not None:
        overrides.setdefault("dtype", dtype)
    if config.get("dropout") is not None:
        overrides["dropout_rate"] = config["dropout"]
    if config.get("head_bias_init") is not None:
        overrides["head_bias_init"] = config["head_bias_init"]
    return create_model(spec.name, image_size=image_size, num_classes=num_classes, **overrides)


def count_examples(examples):
    if isinstance(examples, data.Examples):
        return len(examples)
    count = int(examples.cardinality())
    if count < 0:
        count = int(examples.reduce(np.int64(0), lambda n, _: n + 1))
    return count


def channels(model):
    return int(model.input_shape[-1])


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


def evaluation_batches(run, model, batch_size, split="test"):
    """Evaluation batches of ``split`` at the model's resolution and channels."""
    config = run.config
    return data.load(run.info.name, split, training=False, batch_size=batch_size,
                     image_size=model.input_shape[1], data_dir=config.data_dir,
                     max_examples=config.test_examples, channels=channels(model))


# Accuracy is a weighted metric: on several devices the last evaluation batch is padded with
# weight-0 examples (keras_vit.data.pipeline), which plain ``metrics`` would count.
def compile_model(model, optimizer=None, label_smoothing=0.0):
    model.compile(optimizer=optimizer, loss=classification_loss(label_smoothing),
                  weighted_metrics=["accuracy"])


def evaluate_model(model, dataset):
    results = evaluate(model, dataset)  # the mean loss without the padding, on any device count
    return {f"test_{k}": float(v) for k, v in results.items()}


def count_batches(dataset):
    """Batches in one pass of a finite evaluation pipeline."""
    if hasattr(dataset, "cardinality"):
        return count_examples(dataset)
    return len(dataset)


def warmup(value, steps_per_epoch, total_steps):
    if value is None:
        value = min(steps_per_epoch, total_steps // 10)
    return int(value)


def device():
    """What a run trains on: ``device`` (the accelerator's kind, or "cpu"), ``devices`` and the
    ``precision`` of ``keras_vit.distribution.precision`` (float32 on a CPU)."""
    found = accelerator()
    platform, kind, devices, capability = found or ("cpu", "cpu", num_replicas(), None)
    return {"device": kind, "devices": devices, "precision": precision(platform, kind, capability)}


def describe(plan, batch_size):
    """The line a run prints about its device, batch and precision, e.g. ``cpu x1: batch 512 =
    8 x micro-batch 64 (64 per device), precision float32``.

    >>> describe({"device": "TPU v5 lite", "devices": 8, "precision": "mixed_bfloat16",
    ...            "per_device": 32}, 256)
    'TPU v5 lite x8: batch 256 (32 per device), precision mixed_bfloat16'
    """
    memory = "" if plan.get("memory_gib") is None else f", {plan['memory_gib']:g} GiB"
    split = ("" if "accumulation" not in plan
             else f" = {plan['accumulation']} x micro-batch {plan['micro_batch']}")
    chosen = " (chosen to fit)" if plan.get("planned") else ""
    return (f"{plan['device']} x{plan['devices']}{memory}: batch {batch_size}{split} "
            f"({plan['per_device']} per device){chosen}, precision {plan['precision']}")


def loss_scaling(model):
    """Whether the compiled model scales its loss: Keras's ``compile`` wraps the optimizer in a
    ``LossScaleOptimizer`` for a ``mixed_float16`` model."""
    return isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
