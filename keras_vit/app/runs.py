"""What the ``keras-vit`` commands do, as functions of their configurations.

Each function takes its command's dataclass of ``keras_vit.app.configs`` (or a dict of its
fields), builds data and model from ``keras_vit.data`` / ``keras_vit.models``, trains or
evaluates with the recipes of ``keras_vit.training``, writes its run folder (``run_files``) and
returns the metrics. ``keras_vit.app.cli`` only turns the configurations into flags.
"""

import dataclasses
import json
import os
import time

import keras
import numpy as np

from keras_vit import data
from keras_vit.distribution import accelerator, check_batch_size, num_replicas, precision
from keras_vit.models.memory import device_memory_gib, plan_batch
from keras_vit.models.registry import create_model
from keras_vit.models.resize import rebuild
from keras_vit.app import configs, planning, run_files
from keras_vit.app.configs import DEFAULT_MODEL, DEFAULT_OVERRIDES
from keras_vit.training.published import recipe
from keras_vit.training.recipes import (
    classification_loss,
    finetuning_optimizer,
    prepare_finetuning,
    pretraining_optimizer,
)


def parse_overrides(items):
    """``["hidden_size=64", "classifier=gap"]`` -> dict; values are JSON, else strings."""
    overrides = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"Model override {item!r} is not of the form key=value "
                             "(e.g. --set hidden_size=64).")
        try:
            overrides[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            overrides[key.strip()] = value
    return overrides


def _as_dict(config):
    return config.to_dict() if isinstance(config, configs.Config) else config


def model_spec(config, channels=None):
    """``(name, overrides)``: the default small ViT unless ``config.model`` names one.

    ``config``: a configuration with the model options, or a dict. The default model takes the
    dataset's ``channels``; a named model keeps its own input channels (3 for the published
    architectures) and the pipeline converts the images.
    """
    config = _as_dict(config)
    name = config.get("model")
    overrides = {}
    if name is None:
        overrides.update(DEFAULT_OVERRIDES)
        if channels is not None:
            overrides["num_channels"] = channels
    overrides.update(parse_overrides(config.get("set")))
    return (name or DEFAULT_MODEL), overrides


def build_model(config, *, image_size, num_classes, channels=None, dtype=None):
    """The model of a run from scratch; ``dtype`` is the run's dtype policy unless ``--set
    dtype=...`` names one."""
    config = _as_dict(config)
    name, overrides = model_spec(config, channels)
    if dtype is not None:
        overrides.setdefault("dtype", dtype)
    if config.get("dropout") is not None:
        overrides["dropout_rate"] = config["dropout"]
    if config.get("head_bias_init") is not None:
        overrides["head_bias_init"] = config["head_bias_init"]
    return create_model(name, image_size=image_size, num_classes=num_classes, **overrides)


def load_model_file(path):
    """A model from a ``.keras`` file, or from any checkpoint ``load_checkpoint`` reads: an
    official ``.npz`` or published name, a timm state dict, a transformers folder."""
    from keras_vit.checkpoints.formats import load_checkpoint

    path = os.fspath(path)
    if path.endswith(".keras"):
        if not os.path.exists(path):
            raise FileNotFoundError(f"No model file at {path!r}.")
        return keras.saving.load_model(path, compile=False)
    return load_checkpoint(path)


def _count(examples):
    if isinstance(examples, data.Examples):
        return len(examples)
    count = int(examples.cardinality())
    if count < 0:
        count = int(examples.reduce(np.int64(0), lambda n, _: n + 1))
    return count


def _channels(model):
    return int(model.input_shape[-1])


def _checkpoint_name(path):
    stem = os.path.splitext(os.path.basename(os.fspath(path)))[0]
    if stem == "model":  # a run folder's model.keras: name it after the folder
        stem = os.path.basename(os.path.dirname(os.path.abspath(path))) or stem
    return stem


@dataclasses.dataclass
class _Run:
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


def _begin(config, model_name=None):
    """The shared start of a run: the dataset, the seed, the run folder and, for a command that
    trains, the batch size check. ``model_name`` names the folder (default: the checkpoint's)."""
    started = time.time()
    info = data.dataset_info(config.dataset)
    if model_name is None:
        model_name = _checkpoint_name(config.checkpoint)
    keras.utils.set_random_seed(config.seed)
    run_dir = config.output or run_files.default_output(config.command, info.name, model_name)
    if isinstance(config, configs.OptimizerOptions):
        check_batch_size(config.batch_size)
    return _Run(config, info, run_dir, started)


@dataclasses.dataclass
class _Scratch:
    """A new model and its endless training batches (``train``, ``pretrain-mpp``)."""

    model: keras.Model
    batches: object
    steps_per_epoch: int
    augmentation: str
    resize_size: int | None
    examples: object
    pipeline_options: dict

    def new_batches(self):
        """Another pipeline of the same batches, from the start (for measuring)."""
        return data.pipeline(self.examples, **self.pipeline_options)


def _from_scratch(run, dtype=None, **pipeline_options):
    config, info = run.config, run.info
    image_size, resize_size = data.resolution(info.name, config.image_size)
    model = build_model(config, image_size=image_size, num_classes=info.num_classes,
                        channels=info.channels, dtype=dtype)
    examples = data.load_examples(info.name, "train", data_dir=config.data_dir,
                                  max_examples=config.train_examples, shuffle_files=True)
    steps_per_epoch = _steps_per_epoch(examples, config.batch_size)
    augmentation, resize_size = config.crop(info, image_size, resize_size)
    options = dict(batch_size=config.batch_size, image_size=image_size,
                   num_classes=info.num_classes, training=True, augmentation=augmentation,
                   resize_size=resize_size, channels=_channels(model), repeat=True,
                   seed=config.seed, **pipeline_options)
    return _Scratch(model, data.pipeline(examples, **options), steps_per_epoch, augmentation,
                    resize_size, examples, options)


def _pretraining_optimizer(config, steps_per_epoch, epochs=None, **options):
    total_steps = steps_per_epoch * (epochs or config.epochs)
    return pretraining_optimizer(
        total_steps, learning_rate=config.learning_rate,
        warmup_steps=_warmup(config.warmup_steps, steps_per_epoch, total_steps),
        decay=config.decay, weight_decay=config.weight_decay, **options)


def _test_batches(run, model, batch_size, split="test"):
    """Evaluation batches of ``split`` at the model's resolution and channels."""
    config = run.config
    return data.load(run.info.name, split, training=False, batch_size=batch_size,
                     image_size=model.input_shape[1], data_dir=config.data_dir,
                     max_examples=config.test_examples, channels=_channels(model))


# Accuracy is a weighted metric: on several devices the last evaluation batch is padded with
# weight-0 examples (keras_vit.data.pipeline), which plain ``metrics`` would count.


def _compile(model, optimizer=None, label_smoothing=0.0):
    model.compile(optimizer=optimizer, loss=classification_loss(label_smoothing),
                  weighted_metrics=["accuracy"])


def _evaluate(model, dataset):
    results = model.evaluate(dataset, return_dict=True, verbose=0)
    return {f"test_{k}": float(v) for k, v in results.items()}


def _count_batches(dataset):
    """Batches in one pass of a finite evaluation pipeline."""
    if hasattr(dataset, "cardinality"):
        return _count(dataset)
    return len(dataset)


def _steps_per_epoch(examples, batch_size):
    """Full batches in one pass over ``examples`` (the epoch length of an endless pipeline)."""
    steps = _count(examples) // batch_size
    if steps < 1:
        raise ValueError(f"batch_size {batch_size} is larger than the training set; use a smaller "
                         "--batch-size or more --train-examples.")
    return steps


def _warmup(value, steps_per_epoch, total_steps):
    if value is None:
        value = min(steps_per_epoch, total_steps // 10)
    return int(value)


def _validation_epochs(epochs, every):
    """The 1-based epochs after which ``train`` evaluates the test set: every ``every``-th and
    the last.

    >>> _validation_epochs(19, 4), _validation_epochs(2, 4)
    ([4, 8, 12, 16, 19], [2])
    """
    return sorted({*range(every, epochs + 1, every), epochs})


def _resumable_callbacks(run, epochs):
    """``(log, callbacks, resuming)``: the epoch log and a backup that resumes a killed run."""
    recorded = dict(run.config.to_dict(), epochs=epochs)  # a planned length is kept for resuming
    resuming = run_files.check_resume(run.run_dir, recorded)
    if resuming:
        print(f"Resuming the interrupted run in {run.run_dir}")
    log = run_files.EpochLog(run.run_dir, keep_existing=resuming)
    # The log is written before the backup: a kill between the two redoes that epoch, whose
    # record is then replaced, so no finished epoch is ever missing from the history.
    backup = run_files.AtomicBackup(os.path.join(run.run_dir, run_files.BACKUP))
    return log, [log, backup], resuming


def _epoch_end_writes(model, folder):
    """What ``train`` writes after an epoch of ``model`` (history, atomic backup) into ``folder``
    (``planning.measure_costs`` times it)."""
    for callback in (run_files.EpochLog(folder, keep_existing=True),
                     run_files.AtomicBackup(os.path.join(folder, run_files.BACKUP))):
        callback.set_model(model)
        callback.on_epoch_begin(0)
        callback.on_epoch_end(0, {"loss": 1.0})


def _check_train_config(config):
    if config.validate_every < 1:
        raise ValueError(f"--validate-every must be at least 1, got {config.validate_every}; "
                         "use --no-validate to skip the evaluations during training.")
    if config.epochs is not None and config.epochs < 1:
        raise ValueError(f"--epochs must be at least 1, got {config.epochs}; leave it out to "
                         "plan the epochs from --time-budget.")
    planning.check_budget(config.time_budget)


def _evaluations(config):
    """How many test-set evaluations a run of ``epochs`` makes: validations and the final one."""
    def count(epochs):
        validations = _validation_epochs(epochs, config.validate_every) if config.validate else []
        return len(validations) + 1
    return count


def _plan(run, scratch, test_ds):
    """``(epochs, plan)``: the fixed ``--epochs``, the length of the interrupted run this one
    resumes, or the most epochs the budget allows (``keras_vit.app.planning``)."""
    config = run.config
    if config.epochs is not None:
        return config.epochs, {"epochs": config.epochs, "fixed": True}
    earlier = run_files.interrupted_run_config(run.run_dir)
    if earlier is not None and earlier.get("epochs"):
        return earlier["epochs"], {"epochs": earlier["epochs"], "resumed": True}
    costs = planning.measure_costs(scratch.model, scratch.new_batches(), test_ds,
                                   _count_batches(test_ds), epoch_end=_epoch_end_writes)
    plan = planning.plan_epochs(config.time_budget, elapsed_seconds=time.time() - run.started,
                                costs=costs, steps_per_epoch=scratch.steps_per_epoch,
                                evaluations=_evaluations(config))
    print(plan.describe())
    return plan.epochs, plan.to_dict()


def train(config):
    """Train a model from scratch (pre-training recipe: AdamW, warmup + decay, clipping).

    ``config``: a ``TrainConfig`` or a dict of its fields. Without ``epochs``, the run measures
    its step time and plans as many epochs as fit ``time_budget`` seconds (``planning``).
    Resumes from ``<output>/backup`` when an earlier run with the same output was interrupted.
    """
    config = configs.TrainConfig.coerce(config)
    _check_train_config(config)
    model_name = model_spec(config)[0]
    run = _begin(config, model_name)
    device = _device()
    # A CPU builds the model as it always did (no dtype passed): the timed default run is kept.
    mixed = None if device["precision"] == "float32" else device["precision"]
    scratch = _from_scratch(run, dtype=mixed, flip=not config.no_flip, mixup_alpha=config.mixup,
                            cache=run.info.source == "tfds" and config.train_examples is not None)
    model = scratch.model
    batch_plan = dict(device, precision=model.dtype_policy.name,
                      per_device=config.batch_size // device["devices"])
    print(_describe(batch_plan, config.batch_size))
    test_ds = _test_batches(run, model, config.batch_size)
    if config.epochs is None:  # measured on the train step the run compiles (any long schedule)
        _compile(model, _pretraining_optimizer(config, scratch.steps_per_epoch, epochs=10**6,
                                               global_clipnorm=config.clipnorm),
                 config.label_smoothing)
    epochs, plan = _plan(run, scratch, test_ds)
    _compile(model, _pretraining_optimizer(config, scratch.steps_per_epoch, epochs=epochs,
                                           global_clipnorm=config.clipnorm),
             config.label_smoothing)
    log, callbacks, resuming = _resumable_callbacks(run, epochs)
    if plan.get("fixed"):
        callbacks.append(planning.OverrunWarning(config.time_budget, run.started, epochs))
    # One endless iterator with a fixed epoch length: re-creating a tf.data iterator every epoch
    # doubled the step time of the default jax run on a 2-core CPU (from epoch 3: 170-184 against
    # 100-107 ms/step; epochs 3-7 took 78-86 s against 47-50 s).
    model.fit(scratch.batches, epochs=epochs, steps_per_epoch=scratch.steps_per_epoch,
              shuffle=False, validation_data=test_ds if config.validate else None,
              validation_freq=_validation_epochs(epochs, config.validate_every),
              callbacks=callbacks, verbose=config.verbose)
    metrics = _evaluate(model, test_ds)
    metrics.update(
        epochs_completed=len(log.records),
        resumed_from_epoch=log.first_epoch if resuming else 0,
        steps_per_epoch=scratch.steps_per_epoch,
        augmentation=scratch.augmentation,
        resize_size=scratch.resize_size,
        optimizer_iterations=int(keras.ops.convert_to_numpy(model.optimizer.iterations)),
        plan=plan,
        batch_plan=dict(batch_plan, loss_scaling=_loss_scaling(model)),
    )
    return run.finish(model, metrics, log, title=f"{model_name} on {run.info.name}")


def _micro_batch(batch, accumulation):
    """The micro-batch of a fine-tuning run: the global batch over the accumulation, which the
    devices must divide too."""
    if accumulation < 1 or batch % accumulation:
        raise ValueError(
            f"--batch-size {batch} is not divisible by --accumulation {accumulation}: every "
            "update averages that many equal micro-batches. Use an accumulation that divides "
            f"the batch (e.g. {max(d for d in range(1, accumulation + 1) if batch % d == 0)}) "
            "or a batch that is a multiple of it.")
    micro = batch // accumulation
    try:
        check_batch_size(micro)
    except ValueError as error:
        raise ValueError(f"The micro-batch {micro} (--batch-size {batch} / --accumulation "
                         f"{accumulation}) does not split over the devices: {error}") from None
    return micro


def _device():
    """What a run trains on: ``device`` (the accelerator's kind, or "cpu"), ``devices`` and the
    ``precision`` of ``keras_vit.distribution.precision`` (float32 on a CPU)."""
    device = accelerator()
    platform, kind, devices, capability = device or ("cpu", "cpu", num_replicas(), None)
    return {"device": kind, "devices": devices, "precision": precision(platform, kind, capability)}


def _describe(plan, batch_size):
    """The line a run prints about its device, batch and precision, e.g. ``cpu x1: batch 512 =
    8 x micro-batch 64 (64 per device), precision float32``.

    >>> _describe({"device": "TPU v5 lite", "devices": 8, "precision": "mixed_bfloat16",
    ...            "per_device": 32}, 256)
    'TPU v5 lite x8: batch 256 (32 per device), precision mixed_bfloat16'
    """
    memory = "" if plan.get("memory_gib") is None else f", {plan['memory_gib']:g} GiB"
    split = ("" if "accumulation" not in plan
             else f" = {plan['accumulation']} x micro-batch {plan['micro_batch']}")
    chosen = " (chosen to fit)" if plan.get("planned") else ""
    return (f"{plan['device']} x{plan['devices']}{memory}: batch {batch_size}{split} "
            f"({plan['per_device']} per device){chosen}, precision {plan['precision']}")


def _loss_scaling(model):
    """Whether the compiled model scales its loss: Keras's ``compile`` wraps the optimizer in a
    ``LossScaleOptimizer`` for a ``mixed_float16`` model."""
    return isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)


def _batch_plan(config, prepare):
    """How a fine-tuning run splits its global batch, and its precision (``_device``).

    An explicit ``--accumulation`` is kept. Otherwise, on an accelerator or with
    ``--memory-gib``, the accumulation is the smallest whose micro-batch fits each device's
    memory (``plan_batch``); on a CPU without ``--memory-gib`` it is the recipe's (or 1).
    ``prepare()`` returns the model to fine-tune and its image size, when a plan needs them.
    """
    plan = dict(_device(), memory_gib=config.memory_gib, planned=False)
    kind, devices = plan["device"], plan["devices"]
    accelerated = kind != "cpu"  # what _device calls a CPU
    fixed = config.accumulation
    if fixed is None and (accelerated or config.memory_gib is not None):
        if plan["memory_gib"] is None:
            try:
                plan["memory_gib"] = device_memory_gib(kind)
            except ValueError as error:
                print(f"keras-vit finetune: {error} (--memory-gib G); not choosing the "
                      "accumulation.")
        if plan["memory_gib"] is not None:
            plan.update(plan_batch(*prepare(), config.batch_size, plan["memory_gib"],
                                   devices=devices, dtype=plan["precision"]), planned=True)
    if not plan["planned"]:
        default = recipe(config.recipe).accumulation if config.recipe is not None else 1
        accumulation = default if fixed is None else fixed
        micro = _micro_batch(config.batch_size, accumulation)
        plan.update(micro_batch=micro, accumulation=accumulation, per_device=micro // devices)
    print(_describe(plan, config.batch_size))
    return plan


def finetune(config):
    """Fine-tune a saved model with the official step (SGD with a momentum trace, gradient
    accumulation, warmup + decay, zero-init head, new resolution), or a published recipe.

    ``config``: a ``FinetuneConfig`` or a dict of its fields (``{"recipe": name}`` runs a
    published fine-tune, ``keras_vit.training.published``).
    """
    config = configs.FinetuneConfig.coerce(config)
    if config.checkpoint is None:
        raise ValueError("Say what to fine-tune: a checkpoint (keras-vit finetune FILE) or a "
                         "published recipe (--recipe NAME).")
    steps, every = config.steps, config.eval_every
    if steps < 1 or every < 1 or steps % every:
        raise ValueError(
            f"--steps ({steps}) must be a positive multiple of --eval-every ({every}).")
    run = _begin(config)
    prepared = []

    def prepare():  # loaded once, after the batch checks that need no model
        if not prepared:
            pretrained = load_model_file(config.checkpoint)
            size = config.image_size or pretrained.input_shape[1]
            prepared.append((prepare_finetuning(pretrained, run.info.num_classes,
                                                image_size=size), size))
        return prepared[0]

    plan = _batch_plan(config, prepare)
    model, image_size = prepare()
    micro, accumulation = plan["micro_batch"], plan["accumulation"]
    if plan["precision"] != "float32":
        model = rebuild(model, dtype=plan["precision"])
    train_ds = data.load(run.info.name, config.train_split, training=True, batch_size=micro,
                         image_size=image_size, data_dir=config.data_dir,
                         max_examples=config.train_examples,
                         examples_per_class=config.examples_per_class, repeat=True,
                         augmentation=config.augmentation, flip=not config.no_flip,
                         channels=_channels(model), mixup_alpha=config.mixup, seed=config.seed)
    test_ds = _test_batches(run, model, micro if accumulation > 1 else max(micro, 256),
                            split=config.test_split)
    optimizer = finetuning_optimizer(
        steps, learning_rate=config.learning_rate,
        warmup_steps=_warmup(config.warmup_steps, every, steps), decay=config.decay,
        gradient_accumulation_steps=accumulation, momentum_dtype=config.momentum_dtype,
        global_clipnorm=config.clipnorm, use_ema=config.use_ema,
        ema_momentum=config.ema_momentum)
    _compile(model, optimizer, config.label_smoothing)
    log = run_files.EpochLog(run.run_dir, keep_existing=False)
    model.fit(train_ds, epochs=steps // every, steps_per_epoch=every * accumulation,
              validation_data=test_ds, shuffle=False, callbacks=[log], verbose=config.verbose)
    if optimizer.use_ema:
        # With jax, fit's final swap leaves the averages sharing buffers with the model weights,
        # and the next jitted call frees them; fresh copies keep the optimizer saveable.
        for variable in optimizer.variables:
            variable.assign(keras.ops.convert_to_numpy(variable))
    metrics = dict(_evaluate(model, test_ds), steps=steps, micro_batch=micro,
                   accumulation=accumulation,
                   batch_plan=dict(plan, loss_scaling=_loss_scaling(model)),
                   updates=int(keras.ops.convert_to_numpy(optimizer.iterations)))
    if config.recipe is not None:
        published = recipe(config.recipe)
        metrics.update(recipe=published.name, published_accuracy=published.published_accuracy,
                       published_source=published.source)
    return run.finish(model, metrics, log, title=f"fine-tuning "
                      f"{os.path.basename(config.checkpoint)} on {run.info.name}")


def evaluate(config):
    """Test accuracy of a saved model on a dataset split, at the model's resolution.

    ``config``: an ``EvaluateConfig`` or a dict of its fields.
    """
    config = configs.EvaluateConfig.coerce(config)
    run = _begin(config)
    model = load_model_file(config.checkpoint)
    if model.output_shape[-1] != run.info.num_classes:
        raise ValueError(
            f"The model has {model.output_shape[-1]} outputs but {run.info.name} has "
            f"{run.info.num_classes} classes; fine-tune it first (keras-vit finetune) or use "
            "`keras-vit fewshot`.")
    _compile(model)
    test_ds = _test_batches(run, model, config.batch_size, split=config.split)
    return run.finish(model, _evaluate(model, test_ds))


def fewshot(config):
    """Few-shot linear accuracy of a model's frozen features (``keras_vit.evaluation``).

    ``config``: a ``FewshotConfig`` or a dict of its fields.
    """
    from keras_vit.evaluation import fewshot_linear

    config = configs.FewshotConfig.coerce(config)
    run = _begin(config)
    model = load_model_file(config.checkpoint)
    size = config.image_size or model.input_shape[1]
    arrays = []
    for split, limit in (("train", config.train_examples), ("test", config.test_examples)):
        ds = data.load(run.info.name, split, training=False, batch_size=config.batch_size,
                       image_size=size, data_dir=config.data_dir, max_examples=limit,
                       channels=_channels(model))
        arrays.extend(data.as_arrays(ds))
    if size != model.input_shape[1]:
        from keras_vit.models.resize import resize_model

        model = resize_model(model, size)
    results = fewshot_linear(model, *arrays, shots=tuple(config.shots),
                             seeds=tuple(config.seeds), l2_reg=config.l2_reg,
                             batch_size=config.batch_size)
    return run.finish(model, {"fewshot": results})


def pretrain_mpp(config):
    """Masked patch prediction self-supervision (``keras_vit.training.mpp``); saves the encoder.

    ``config``: a ``PretrainMppConfig`` or a dict of its fields.
    """
    from keras_vit.training.mpp import MaskedPatchPrediction

    config = configs.PretrainMppConfig.coerce(config)
    model_name = model_spec(config)[0]
    run = _begin(config, model_name)
    scratch = _from_scratch(run)  # (images, labels): the labels are not used
    model = MaskedPatchPrediction(scratch.model, target=config.target,
                                  corrupt_rate=config.corrupt_rate)
    model.compile(optimizer=_pretraining_optimizer(config, scratch.steps_per_epoch))
    log = run_files.EpochLog(run.run_dir, keep_existing=False)
    # one endless iterator, as in ``train`` (a new one each epoch slows long jax runs down)
    model.fit(scratch.batches, epochs=config.epochs, steps_per_epoch=scratch.steps_per_epoch,
              shuffle=False, callbacks=[log], verbose=config.verbose)
    final_loss = log.records[-1].get("loss") if log.records else None
    return run.finish(model.encoder, {"test_accuracy": None, "final_loss": final_loss}, log,
                      title=f"masked patch prediction, {model_name} on {run.info.name}")


CONVERT_FORMATS = ("keras", "official", "timm", "transformers", "onnx", "saved_model", "tflite")


def _target_format(target, format):
    if format:
        return format
    from keras_vit.checkpoints import export, formats, timm

    if target.endswith(".keras"):
        return "keras"
    if not os.path.splitext(target)[1] and "://" not in target:
        raise ValueError(
            f"The target {target!r} is a folder name: say which with --format transformers or "
            "--format saved_model."
        )
    if target.endswith((".npz", *timm.EXTENSIONS)):
        return formats.detect_format(target)
    return export.detect_format(target)


def convert(config):
    """Convert a model between ``.keras``, the checkpoint formats and the export formats.

    Sources: ``.keras``, official ``.npz``, timm ``.safetensors``/``.pth``/``.bin``, a
    transformers folder. Targets: those, plus ``.onnx``, a SavedModel folder and ``.tflite``.
    The formats come from the paths unless ``source_format`` / ``format`` name them.
    ``config``: a ``ConvertConfig`` or a dict of its fields.
    """
    from keras_vit.checkpoints.export import export_model
    from keras_vit.checkpoints.formats import load_checkpoint, save_checkpoint

    config = configs.ConvertConfig.coerce(config)
    source, target = os.fspath(config.source), os.fspath(config.target)
    target_format = _target_format(target, config.format)
    if target_format not in CONVERT_FORMATS:
        raise ValueError(f"Unknown target format {target_format!r}; use one of "
                         f"{CONVERT_FORMATS}.")
    if os.path.abspath(source) == os.path.abspath(target):
        raise ValueError("The source and the target are the same file.")
    if source.endswith(".keras") and config.source_format in (None, "keras"):
        model = load_model_file(source)
    else:
        extra = {"num_heads": config.num_heads} if config.num_heads else {}
        if config.tanh_gelu:
            extra["approximate_gelu"] = True
        model = load_checkpoint(source, format=config.source_format, **extra)
    if target_format == "keras":
        model.save(target)
    elif target_format in ("onnx", "saved_model", "tflite"):
        export_model(model, target, format=target_format, batch_size=config.batch_size)
    else:
        save_checkpoint(model, target, format=target_format)
    return {"command": "convert", "source": source, "target": target, "format": target_format,
            "num_params": int(model.count_params())}


RUNS = {"train": train, "finetune": finetune, "evaluate": evaluate, "fewshot": fewshot,
        "pretrain-mpp": pretrain_mpp, "convert": convert}


def run(config):
    """Run the command of ``config``, a dataclass of ``keras_vit.app.configs.COMMANDS``."""
    return RUNS[config.command](config)
