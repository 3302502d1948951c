"""``keras-vit train`` (from scratch, planned to a time budget) and ``keras-vit pretrain-mpp``
(masked patch prediction): the two commands that build a new model.
"""

import dataclasses
import os
import time

import keras

from keras_vit import data, distribution
from keras_vit.app import configs, planning, run_data, run_files, run_model, run_plan, runs
from keras_vit.app.errors import UsageError
from keras_vit.training.mpp import MaskedPatchPrediction
from keras_vit.training.optimizers import AdjustableAdamW
from keras_vit.training.recipes import pretraining_optimizer


@dataclasses.dataclass
class _Scratch:
    """A new model and the examples of its endless training batches (``train``,
    ``pretrain-mpp``)."""

    model: keras.Model
    steps_per_epoch: int
    augmentation: str
    resize_size: int | None
    examples: object
    pipeline_options: dict

    def batches(self, start_epoch=0):
        """The endless training pipeline from epoch ``start_epoch`` (0-based) on: a resumed run
        trains on the batches it would have had without the interruption."""
        return data.pipeline(self.examples, start_epoch=start_epoch, **self.pipeline_options)


def _from_scratch(run, dtype=None, **pipeline_options):
    config, info = run.config, run.info
    size = config.image_size or run_model.model_spec(config).image_size
    image_size, resize_size = data.resolution(info.name, size)
    model = run_model.build_model(config, image_size=image_size, num_classes=info.num_classes,
                        channels=info.channels, dtype=dtype)
    examples = data.load_examples(info.name, "train", data_dir=config.data_dir,
                                  max_examples=config.train_examples, shuffle_files=True)
    steps_per_epoch = _steps_per_epoch(examples, config.batch_size)
    augmentation, resize_size = config.crop(info, image_size, resize_size)
    options = dict(batch_size=config.batch_size, image_size=image_size,
                   num_classes=info.num_classes, training=True, augmentation=augmentation,
                   resize_size=resize_size, channels=run_model.channels(model), repeat=True,
                   seed=config.seed, **pipeline_options)
    return _Scratch(model, steps_per_epoch, augmentation, resize_size, examples, options)


def _steps_per_epoch(examples, batch_size):
    """Full batches in one pass over ``examples`` (the epoch length of an endless pipeline)."""
    steps = run_data.count_examples(examples) // batch_size
    if steps < 1:
        raise UsageError(f"batch_size {batch_size} is larger than the training set; use a smaller "
                         "--batch-size or more --train-examples.")
    return steps


def _pretraining_optimizer(config, steps_per_epoch, epochs=None, **options):
    """The pre-training recipe for a run of ``epochs`` (``config.epochs`` unless given)."""
    total_steps = steps_per_epoch * (epochs or config.epochs)
    return pretraining_optimizer(
        total_steps, learning_rate=config.learning_rate,
        warmup_steps=run_plan.warmup(config.warmup_steps, steps_per_epoch, total_steps),
        decay=config.decay, weight_decay=config.weight_decay, **options)


def _compile(model, config, steps_per_epoch, epochs, adjustable):
    """Compile ``model`` with the pre-training recipe for a run of ``epochs``, whose length can
    move while it trains when ``adjustable`` (a re-planned run); returns the optimizer."""
    optimizer = _pretraining_optimizer(config, steps_per_epoch, epochs=epochs,
                                       global_clipnorm=config.clipnorm, adjustable=adjustable)
    run_model.compile_model(model, optimizer, config.label_smoothing)
    return optimizer


def _validation_epochs(epochs, every):
    """The 1-based epochs after which ``train`` evaluates the test set: every ``every``-th and
    the last.

    >>> _validation_epochs(19, 4), _validation_epochs(2, 4)
    ([4, 8, 12, 16, 19], [2])
    """
    return sorted({*range(every, epochs + 1, every), epochs})


def _resumable_callbacks(run, epochs, adjustable):
    """``(log, callbacks, resuming)``: the epoch log and a backup that resumes a killed run."""
    # A planned length is kept for resuming, and whether the run re-plans it: the backup of
    # such a run holds its schedule, whose end is the length to resume to.
    recorded = dict(run.config.to_dict(), epochs=epochs, replanned=adjustable)
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
    if config.epochs is None and distribution.process_count() > 1:
        raise UsageError("A run of several processes needs --epochs: planned from --time-budget, "
                         "each process would measure its own speed and could plan another "
                         "length.")
    if config.validate_every < 1:
        raise UsageError(f"--validate-every must be at least 1, got {config.validate_every}; "
                         "use --no-validate to skip the evaluations during training.")
    if config.epochs is not None and config.epochs < 1:
        raise UsageError(f"--epochs must be at least 1, got {config.epochs}; leave it out to "
                         "plan the epochs from --time-budget.")
    planning.check_budget(config.time_budget)


def _validations(config):
    """The epochs after which a run of ``epochs`` evaluates the test set during training."""
    def epochs_of(epochs):
        return _validation_epochs(epochs, config.validate_every) if config.validate else []
    return epochs_of


def _evaluations(config):
    """How many test-set evaluations a run of ``epochs`` makes: validations and the final one."""
    validations = _validations(config)
    return lambda epochs: len(validations(epochs)) + 1


def _plan(run, scratch, test_ds, earlier):
    """``(epochs, plan)``: the fixed ``--epochs``, the length of the interrupted run
    (``earlier``'s options) this one resumes, or the most epochs the budget allows: a
    ``planning.Plan`` then, which the run re-plans as it trains (``keras_vit.app.planning``)."""
    config = run.config
    if config.epochs is not None:
        return config.epochs, {"epochs": config.epochs, "fixed": True}
    if earlier is not None and earlier.get("epochs"):
        return earlier["epochs"], {"epochs": earlier["epochs"], "resumed": True}
    # Measured on the train step the run compiles (with a schedule of any length).
    _compile(scratch.model, config, scratch.steps_per_epoch, epochs=10**6, adjustable=True)
    costs = planning.measure_costs(scratch.model, scratch.batches(), test_ds,
                                   run_data.count_batches(test_ds), epoch_end=_epoch_end_writes)
    plan = planning.plan_epochs(config.time_budget, elapsed_seconds=time.time() - run.started,
                                costs=costs, steps_per_epoch=scratch.steps_per_epoch,
                                evaluations=_evaluations(config))
    print(plan.describe())
    return plan.epochs, plan


def _replanner(run, optimizer, steps_per_epoch, plan):
    """The callback that ends a run at its adjustable schedule's end, re-planned from the
    budget when ``plan`` is a first start's ``planning.Plan``."""
    return planning.Replanner(
        optimizer.schedule, steps_per_epoch, _validations(run.config),
        plan=plan if isinstance(plan, planning.Plan) else None, started=run.started,
        epochs=run.config.epochs, progress=keras.callbacks.ProgbarLogger())


def _fit(run, scratch, test_ds, epochs, plan, optimizer):
    """Train for ``epochs`` (``optimizer`` an ``AdjustableAdamW``: for the length its schedule
    ends at, re-planned or resumed); returns ``(log, resuming)``."""
    config, adjustable = run.config, isinstance(optimizer, AdjustableAdamW)
    log, callbacks, resuming = _resumable_callbacks(run, epochs, adjustable)
    validation_freq = _validation_epochs(epochs, config.validate_every)
    if adjustable:
        replanner = _replanner(run, optimizer, scratch.steps_per_epoch, plan)
        callbacks = [replanner, *callbacks, replanner.progress]  # before the backup: see there
        validation_freq = replanner.validation_freq
        epochs = config.epochs or planning.GROWTH * epochs  # fit stops at the planned end
    if config.epochs is not None:
        callbacks.append(planning.OverrunWarning(config.time_budget, run.started, epochs))
    # The restored backup's epoch, not 0: the data order goes on where the interrupted run's
    # stopped. One endless iterator with a fixed epoch length: a new tf.data iterator every
    # epoch slows long jax runs down (docs/results.md).
    start = run_files.backup_epoch(run.run_dir) if resuming else 0
    distribution.agree(start, f"the epoch {run.run_dir} resumes from: the run folder must be one "
                       "folder that every process sees (a shared disk, NFS, gcsfuse), or none "
                       "may hold a backup")
    batches = scratch.batches(start)
    scratch.model.fit(batches, epochs=epochs, steps_per_epoch=scratch.steps_per_epoch,
                      shuffle=False, validation_data=test_ds if config.validate else None,
                      validation_freq=validation_freq, callbacks=callbacks,
                      verbose=config.keras_verbose())
    if isinstance(plan, planning.Plan):
        print(plan.outcome())
    return log, resuming


def train(config):
    """Train a model from scratch (pre-training recipe: AdamW, warmup + decay, clipping).

    ``config``: a ``TrainConfig`` or a dict of its fields. Without ``epochs``, the run measures
    its step time, plans as many epochs as fit ``time_budget`` seconds and re-plans them as it
    learns its real epoch time (``planning``).
    Resumes from ``<output>/backup`` when an earlier run with the same output was interrupted.
    """
    config = configs.TrainConfig.coerce(config)
    _check_train_config(config)
    model_name = run_model.model_spec(config).label
    run = runs.begin(config, model_name)
    device = run_plan.device()
    # A CPU builds the model as it always did (no dtype passed): the timed default run is kept.
    mixed = None if device["precision"] == "float32" else device["precision"]
    scratch = _from_scratch(run, dtype=mixed, flip=not config.no_flip, **config.mixing(),
                            cache=run.info.source == "tfds" and config.train_examples is not None)
    model = scratch.model
    batch_plan = dict(device, precision=model.dtype_policy.name,
                      per_device=config.batch_size // device["devices"])
    print(run_plan.describe(batch_plan, config.batch_size))
    test_ds = run_data.evaluation_batches(run, model, config.batch_size)
    earlier = run_files.interrupted_run_config(run.run_dir)
    epochs, plan = _plan(run, scratch, test_ds, earlier)
    # A run planned to the budget re-plans its length; a resumed one keeps its kind of schedule.
    adjustable = isinstance(plan, planning.Plan) or bool(earlier and earlier.get("replanned"))
    optimizer = _compile(model, config, scratch.steps_per_epoch, epochs, adjustable)
    log, resuming = _fit(run, scratch, test_ds, epochs, plan, optimizer)
    metrics = run_data.evaluate_model(model, test_ds)
    metrics.update(
        epochs_completed=len(log.records),
        resumed_from_epoch=log.first_epoch if resuming else 0,
        steps_per_epoch=scratch.steps_per_epoch,
        augmentation=scratch.augmentation,
        resize_size=scratch.resize_size,
        optimizer_iterations=int(keras.ops.convert_to_numpy(model.optimizer.iterations)),
        plan=plan.to_dict() if isinstance(plan, planning.Plan) else plan,
        batch_plan=dict(batch_plan, loss_scaling=run_model.loss_scaling(model)),
    )
    return run.finish(model, metrics, log, title=f"{model_name} on {run.info.name}")


def pretrain_mpp(config):
    """Masked patch prediction self-supervision (``keras_vit.training.mpp``); saves the encoder.

    ``config``: a ``PretrainMppConfig`` or a dict of its fields.
    """
    config = configs.PretrainMppConfig.coerce(config)
    model_name = run_model.model_spec(config).label
    run = runs.begin(config, model_name)
    scratch = _from_scratch(run)  # (images, labels): the labels are not used
    try:
        model = MaskedPatchPrediction(scratch.model, target=config.target,
                                      corrupt_rate=config.corrupt_rate)
    except TypeError as error:  # its documented refusal of an encoder that is not a ViT
        raise UsageError(f"--model {model_name} cannot be pre-trained by masked patch "
                         f"prediction: {error}") from None
    model.compile(optimizer=_pretraining_optimizer(config, scratch.steps_per_epoch))
    log = run_files.EpochLog(run.run_dir, keep_existing=False)
    # one endless iterator, as in ``train`` (a new one each epoch slows long jax runs down)
    model.fit(scratch.batches(), epochs=config.epochs, steps_per_epoch=scratch.steps_per_epoch,
              shuffle=False, callbacks=[log], verbose=config.keras_verbose())
    final_loss = log.records[-1].get("loss") if log.records else None
    return run.finish(model.encoder, {"test_accuracy": None, "final_loss": final_loss}, log,
                      title=f"masked patch prediction, {model_name} on {run.info.name}")
