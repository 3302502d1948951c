"""``keras-vit finetune``: the official fine-tuning step on a saved model or a published recipe,
with the global batch split into micro-batches that fit the devices.
"""

import os

import keras

from keras_vit import data
from keras_vit.app import configs, run_data, run_files, run_model, run_plan, runs
from keras_vit.app.errors import UsageError
from keras_vit.checkpoints import convert
from keras_vit.costs.batches import plan_batch
from keras_vit.costs.devices import device_memory_gib
from keras_vit.distribution import check_batch_size
from keras_vit.models import lora
from keras_vit.models.resize import rebuild
from keras_vit.training.published import recipe
from keras_vit.training.recipes import finetuning_optimizer, prepare_finetuning


def _micro_batch(batch, accumulation):
    """The micro-batch of a fine-tuning run: the global batch over the accumulation, which the
    devices must divide too."""
    if accumulation < 1 or batch % accumulation:
        raise UsageError(
            f"--batch-size {batch} is not divisible by --accumulation {accumulation}: every "
            "update averages that many equal micro-batches. Use an accumulation that divides "
            f"the batch (e.g. {max(d for d in range(1, accumulation + 1) if batch % d == 0)}) "
            "or a batch that is a multiple of it.")
    micro = batch // accumulation
    try:
        check_batch_size(micro)
    except ValueError as error:
        raise UsageError(f"The micro-batch {micro} (--batch-size {batch} / --accumulation "
                         f"{accumulation}) does not split over the devices: {error}") from None
    return micro


def _batch_plan(config, prepare):
    """How a fine-tuning run splits its global batch, and its precision (``run_plan.device``).

    An explicit ``--accumulation`` is kept. Otherwise, on an accelerator or with
    ``--memory-gib``, the accumulation is the smallest whose micro-batch fits each device's
    memory (``plan_batch``); on a CPU without ``--memory-gib`` it is the recipe's (or 1).
    ``prepare()`` returns the model to fine-tune and its image size, when a plan needs them.
    """
    plan = dict(run_plan.device(), memory_gib=config.memory_gib, planned=False)
    kind, devices = plan["device"], plan["devices"]
    accelerated = kind != "cpu"  # what run_plan.device calls a CPU
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
    print(run_plan.describe(plan, config.batch_size))
    return plan


def _check(config):
    if config.checkpoint is None:
        raise UsageError("Say what to fine-tune: a checkpoint (keras-vit finetune FILE) or a "
                         "published recipe (--recipe NAME).")
    steps, every = config.steps, config.eval_every
    if steps < 1 or every < 1 or steps % every:
        raise UsageError(
            f"--steps ({steps}) must be a positive multiple of --eval-every ({every}).")


def _train_batches(run, model, image_size, micro):
    """The endless training pipeline of micro-batches (the official augmentation unless set)."""
    config = run.config
    return data.load(run.info.name, config.train_split, training=True, batch_size=micro,
                     image_size=image_size, data_dir=config.data_dir,
                     max_examples=config.train_examples,
                     examples_per_class=config.examples_per_class, repeat=True,
                     augmentation=config.augmentation, flip=not config.no_flip,
                     channels=run_model.channels(model), seed=config.seed, **config.mixing())


def _optimizer(config, accumulation):
    """The official fine-tuning optimizer: SGD with a momentum trace, warmup + decay."""
    return finetuning_optimizer(
        config.steps, learning_rate=config.learning_rate,
        warmup_steps=run_plan.warmup(config.warmup_steps, config.eval_every, config.steps),
        decay=config.decay, gradient_accumulation_steps=accumulation,
        momentum_dtype=config.momentum_dtype, global_clipnorm=config.clipnorm,
        use_ema=config.use_ema, ema_momentum=config.ema_momentum)


def _with_lora(model, config):
    """``model`` with LoRA factors on its attention projections when ``--lora-rank`` asks."""
    if config.lora_rank is None:
        return model
    try:
        lora.enable_lora(model, config.lora_rank, config.lora_targets)
    except ValueError as error:
        raise UsageError(f"--lora-rank: {error}") from None
    trainable, total = lora.trainable_parameters(model), model.count_params()
    print(f"LoRA rank {config.lora_rank} on the {config.lora_targets} attention projections: "
          f"{trainable:,} trainable parameters of {total:,} ({trainable / total:.2%}), the head's "
          "included")
    return model


def _published(config):
    """The published accuracy a recipe's run is compared with (none without a recipe)."""
    if config.recipe is None:
        return {}
    published = recipe(config.recipe)
    return {"recipe": published.name, "published_accuracy": published.published_accuracy,
            "published_source": published.source}


def finetune(config):
    """Fine-tune a saved model with the official step (SGD with a momentum trace, gradient
    accumulation, warmup + decay, zero-init head, new resolution), or a published recipe.

    ``config``: a ``FinetuneConfig`` or a dict of its fields (``{"recipe": name}`` runs a
    published fine-tune, ``keras_vit.training.published``).
    """
    config = configs.FinetuneConfig.coerce(config)
    _check(config)
    run = runs.begin(config)
    prepared = []

    def prepare():  # loaded once, after the batch checks that need no model
        if not prepared:
            pretrained = convert.load_model(config.checkpoint)
            size = config.image_size or pretrained.input_shape[1]
            prepared.append((prepare_finetuning(pretrained, run.info.num_classes,
                                                image_size=size), size))
        return prepared[0]

    plan = _batch_plan(config, prepare)
    model, image_size = prepare()
    micro, accumulation = plan["micro_batch"], plan["accumulation"]
    if plan["precision"] != "float32":
        model = rebuild(model, dtype=plan["precision"])
    model = _with_lora(model, config)
    train_ds = _train_batches(run, model, image_size, micro)
    test_ds = run_data.evaluation_batches(
        run, model, micro if accumulation > 1 else max(micro, 256), split=config.test_split)
    optimizer = _optimizer(config, accumulation)
    run_model.compile_model(model, optimizer, config.label_smoothing)
    log = run_files.EpochLog(run.run_dir, keep_existing=False)
    every = config.eval_every
    model.fit(train_ds, epochs=config.steps // every, steps_per_epoch=every * accumulation,
              validation_data=test_ds, shuffle=False, callbacks=[log],
              verbose=config.keras_verbose())
    if optimizer.use_ema:
        # With jax, fit's final swap leaves the averages sharing buffers with the model weights,
        # and the next jitted call frees them; fresh copies keep the optimizer saveable.
        for variable in optimizer.variables:
            variable.assign(keras.ops.convert_to_numpy(variable))
    metrics = dict(run_data.evaluate_model(model, test_ds), steps=config.steps, micro_batch=micro,
                   accumulation=accumulation, **_published(config),
                   batch_plan=dict(plan, loss_scaling=run_model.loss_scaling(model)),
                   updates=int(keras.ops.convert_to_numpy(optimizer.iterations)),
                   trainable_params=lora.trainable_parameters(model))
    if config.lora_rank is not None:  # a plain model: any checkpoint format takes it
        model = lora.merge_lora(model)
    return run.finish(model, metrics, log, title=f"fine-tuning "
                      f"{os.path.basename(config.checkpoint)} on {run.info.name}")
