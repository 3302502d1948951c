"""What the ``keras-vit`` commands do, as functions of a configuration dict.

Each function builds data and model from ``keras_vit.data`` / ``keras_vit.models``, trains or
evaluates with the recipes of ``keras_vit.training``, writes its run folder (``run_files``) and
returns the metrics. ``keras_vit.cli`` only parses arguments into these configurations.
"""

import json
import os
import time

import keras
import numpy as np

from keras_vit import data
from keras_vit.distribution import check_batch_size
from keras_vit.models.registry import create_model
from keras_vit.training import run_files
from keras_vit.training.recipes import (
    classification_loss,
    finetuning_optimizer,
    prepare_finetuning,
    pretraining_optimizer,
)

# The default of ``keras-vit train``: a small ViT for 28x28 Fashion-MNIST, 7x7 patches (a 4x4
# grid), the paper's MLP ratio of 4, global average pooling, sized for a 10-minute run on a
# 2-core CPU (docs/training.md, benchmarks/accuracy.py): 4x4 patches (49 tokens) cost about 3x
# as much per step under jax, and 23 epochs of 3 layers take the time of 19 of 4 and end higher.
DEFAULT_MODEL = "ViT-Ti/7"
DEFAULT_OVERRIDES = {"hidden_size": 64, "num_layers": 3, "num_heads": 4, "mlp_dim": 256,
                     "classifier": "gap"}


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


def model_spec(config, channels=None):
    """``(name, overrides)``: the default small ViT unless ``config["model"]`` names one.

    The default model takes the dataset's ``channels``; a named model keeps its own input
    channels (3 for the published architectures) and the pipeline converts the images.
    """
    name = config.get("model")
    overrides = {}
    if name is None:
        overrides.update(DEFAULT_OVERRIDES)
        if channels is not None:
            overrides["num_channels"] = channels
    overrides.update(parse_overrides(config.get("set")))
    return (name or DEFAULT_MODEL), overrides


def build_model(config, *, image_size, num_classes, channels=None):
    name, overrides = model_spec(config, channels)
    if config.get("dropout") is not None:
        overrides["dropout_rate"] = config["dropout"]
    if config.get("head_bias_init") is not None:
        overrides["head_bias_init"] = config["head_bias_init"]
    return create_model(name, image_size=image_size, num_classes=num_classes, **overrides)


def load_model_file(path):
    """A model from a ``.keras`` file (keras.saving) or an official ``.npz`` (load_checkpoint)."""
    from keras_vit.checkpoints.official import load_checkpoint

    path = os.fspath(path)
    if path.endswith(".keras"):
        if not os.path.exists(path):
            raise FileNotFoundError(f"No model file at {path!r}.")
        return keras.saving.load_model(path, compile=False)
    if path.endswith(".npz") or not os.path.splitext(path)[1]:
        return load_checkpoint(path)
    raise ValueError(f"{path!r} is neither a .keras model nor an official .npz checkpoint.")


def _count(examples):
    if isinstance(examples, data.Examples):
        return len(examples)
    count = int(examples.cardinality())
    if count < 0:
        count = int(examples.reduce(np.int64(0), lambda n, _: n + 1))
    return count


def _channels(model):
    return int(model.input_shape[-1])


def _start(config, command, dataset, model_name):
    keras.utils.set_random_seed(int(config.get("seed", 0)))
    return config.get("output") or run_files.default_output(command, dataset, model_name)


def _checkpoint_name(path):
    stem = os.path.splitext(os.path.basename(os.fspath(path)))[0]
    if stem == "model":  # a run folder's model.keras: name it after the folder
        stem = os.path.basename(os.path.dirname(os.path.abspath(path))) or stem
    return stem


# Accuracy is a weighted metric: on several devices the last evaluation batch is padded with
# weight-0 examples (keras_vit.data.pipeline), which plain ``metrics`` would count.


def _evaluate(model, dataset):
    results = model.evaluate(dataset, return_dict=True, verbose=0)
    return {f"test_{k}": float(v) for k, v in results.items()}


def _summary(config, command, model, started, extra):
    metrics = {
        "command": command,
        "wall_time_s": round(time.time() - started, 2),
        "backend": keras.backend.backend(),
        "num_params": int(model.count_params()),
        "cpu_time_s": round(sum(os.times()[:2]), 2),
        "load_average": [round(v, 2) for v in os.getloadavg()],
        "config": dict(config),
        "model_config": model.get_config(),
    }
    metrics.update(extra)
    return metrics


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


def _default_augmentation(info, image_size, resize_size):
    """``(augmentation, resize_size)`` when ``--augmentation`` / ``--resize-size`` are not given:
    vit_jax's Inception crop for tfds data at a chosen size, BiT's resize + crop with BiT's
    resolution rule, and for the small offline images flips and shifts of at most one pixel
    (zero-padding by 1 then a random crop): larger crops slow a run of a few epochs down."""
    if info.source == "offline":
        return "pad_crop", image_size + 2
    return ("inception_crop" if resize_size is None else "resize_crop"), resize_size


def _validation_epochs(epochs, every):
    """The 1-based epochs after which ``train`` evaluates the test set: every ``every``-th and
    the last.

    >>> _validation_epochs(19, 4), _validation_epochs(2, 4)
    ([4, 8, 12, 16, 19], [2])
    """
    return sorted({*range(every, epochs + 1, every), epochs})


def train(config):
    """Train a model from scratch (pre-training recipe: AdamW, warmup + decay, clipping).

    Resumes from ``<output>/backup`` when an earlier run with the same output was interrupted.
    """
    started = time.time()
    validate_every = config.get("validate_every")
    validate_every = 1 if validate_every is None else int(validate_every)
    if validate_every < 1:
        raise ValueError(f"--validate-every must be at least 1, got {validate_every}; use "
                         "--no-validate to skip the evaluations during training.")
    info = data.dataset_info(config["dataset"])
    model_name, _ = model_spec(config)
    run_dir = _start(config, "train", info.name, model_name)
    image_size, resize_size = data.resolution(info.name, config.get("image_size"))
    model = build_model(config, image_size=image_size, num_classes=info.num_classes,
                        channels=info.channels)
    batch_size = int(config["batch_size"])
    check_batch_size(batch_size)
    examples = data.load_examples(info.name, "train", data_dir=config.get("data_dir"),
                                  max_examples=config.get("train_examples"), shuffle_files=True)
    steps_per_epoch = _steps_per_epoch(examples, batch_size)
    epochs = int(config["epochs"])
    total_steps = steps_per_epoch * epochs
    augmentation, resize_size = _default_augmentation(info, image_size, resize_size)
    augmentation = config.get("augmentation") or augmentation
    resize_size = config.get("resize_size") or resize_size
    train_ds = data.pipeline(
        examples, batch_size=batch_size, image_size=image_size, num_classes=info.num_classes,
        training=True, augmentation=augmentation,
        resize_size=resize_size, flip=not config.get("no_flip"),
        channels=_channels(model), mixup_alpha=float(config.get("mixup") or 0.0),
        cache=info.source == "tfds" and config.get("train_examples") is not None,
        repeat=True, seed=int(config.get("seed", 0)))
    test_ds = data.load(info.name, "test", batch_size=batch_size, image_size=image_size,
                        data_dir=config.get("data_dir"), max_examples=config.get("test_examples"),
                        channels=_channels(model))
    optimizer = pretraining_optimizer(
        total_steps, learning_rate=float(config["learning_rate"]),
        warmup_steps=_warmup(config.get("warmup_steps"), steps_per_epoch, total_steps),
        decay=config.get("decay", "cosine"), weight_decay=float(config["weight_decay"]),
        global_clipnorm=config.get("clipnorm", 1.0))
    model.compile(optimizer=optimizer, loss=classification_loss(float(config["label_smoothing"])),
                  weighted_metrics=["accuracy"])
    resuming = run_files.check_resume(run_dir, config)
    if resuming:
        print(f"Resuming the interrupted run in {run_dir}")
    log = run_files.EpochLog(run_dir, keep_existing=resuming)
    # The log is written before the backup: a kill between the two redoes that epoch, whose
    # record is then replaced, so no finished epoch is ever missing from the history. Two
    # backups are kept: a kill while the newest is being written falls back to the previous.
    backup = keras.callbacks.BackupAndRestore(os.path.join(run_dir, run_files.BACKUP),
                                              double_checkpoint=True)
    callbacks = [log, backup]
    # One endless iterator with a fixed epoch length: re-creating a tf.data iterator every epoch
    # doubled the step time of the default jax run on a 2-core CPU (from epoch 3: 170-184 against
    # 100-107 ms/step; epochs 3-7 took 78-86 s against 47-50 s).
    model.fit(train_ds, epochs=epochs, steps_per_epoch=steps_per_epoch, shuffle=False,
              validation_data=test_ds if config.get("validate", True) else None,
              validation_freq=_validation_epochs(epochs, validate_every), callbacks=callbacks,
              verbose=config.get("verbose", "auto"))
    metrics = _evaluate(model, test_ds)
    history = log.records
    metrics.update(
        epochs_completed=len(history),
        resumed_from_epoch=log.first_epoch if resuming else 0,
        train_time_s=round(sum(r["seconds"] for r in history), 2),
        steps_per_epoch=steps_per_epoch,
        augmentation=augmentation,
        resize_size=resize_size,
        optimizer_iterations=int(keras.ops.convert_to_numpy(model.optimizer.iterations)),
    )
    metrics = _summary(config, "train", model, started, metrics)
    run_files.write_run(run_dir, model=model, metrics=metrics, history=history,
                        title=f"{model_name} on {info.name}")
    return dict(metrics, output=run_dir)


def finetune(config):
    """Fine-tune a saved model (SGD momentum, warmup + cosine, zero-init head, new resolution)."""
    started = time.time()
    info = data.dataset_info(config["dataset"])
    run_dir = _start(config, "finetune", info.name, _checkpoint_name(config["checkpoint"]))
    pretrained = load_model_file(config["checkpoint"])
    image_size = config.get("image_size") or pretrained.input_shape[1]
    model = prepare_finetuning(pretrained, info.num_classes, image_size=image_size)
    batch_size = int(config["batch_size"])
    check_batch_size(batch_size)
    steps, every = int(config["steps"]), int(config["eval_every"])
    if steps < 1 or every < 1 or steps % every:
        raise ValueError(
            f"--steps ({steps}) must be a positive multiple of --eval-every ({every}).")
    train_ds = data.load(info.name, "train", batch_size=batch_size, image_size=image_size,
                         data_dir=config.get("data_dir"), max_examples=config.get("train_examples"),
                         examples_per_class=config.get("examples_per_class"), repeat=True,
                         augmentation=config.get("augmentation") or "resize_crop",
                         flip=not config.get("no_flip"), channels=_channels(model),
                         mixup_alpha=float(config.get("mixup") or 0.0),
                         seed=int(config.get("seed", 0)))
    test_ds = data.load(info.name, "test", batch_size=max(batch_size, 256), image_size=image_size,
                        data_dir=config.get("data_dir"), max_examples=config.get("test_examples"),
                        channels=_channels(model))
    optimizer = finetuning_optimizer(
        steps, learning_rate=float(config["learning_rate"]),
        warmup_steps=_warmup(config.get("warmup_steps"), every, steps),
        decay=config.get("decay", "cosine"), use_ema=bool(config.get("use_ema")),
        ema_momentum=float(config.get("ema_momentum", 0.999)))
    model.compile(optimizer=optimizer, loss=classification_loss(float(config["label_smoothing"])),
                  weighted_metrics=["accuracy"])
    log = run_files.EpochLog(run_dir, keep_existing=False)
    model.fit(train_ds, epochs=steps // every, steps_per_epoch=every, validation_data=test_ds,
              shuffle=False,
              callbacks=[log], verbose=config.get("verbose", "auto"))
    if optimizer.use_ema:
        # With jax, fit's final swap leaves the averages sharing buffers with the model weights,
        # and the next jitted call frees them; fresh copies keep the optimizer saveable.
        for variable in optimizer.variables:
            variable.assign(keras.ops.convert_to_numpy(variable))
    metrics = _evaluate(model, test_ds)
    metrics.update(steps=steps, train_time_s=round(sum(r["seconds"] for r in log.records), 2))
    metrics = _summary(config, "finetune", model, started, metrics)
    run_files.write_run(run_dir, model=model, metrics=metrics, history=log.records,
                        title=f"fine-tuning {os.path.basename(config['checkpoint'])} on "
                              f"{info.name}")
    return dict(metrics, output=run_dir)


def evaluate(config):
    """Test accuracy of a saved model on a dataset split, at the model's resolution."""
    started = time.time()
    info = data.dataset_info(config["dataset"])
    run_dir = _start(config, "evaluate", info.name, _checkpoint_name(config["checkpoint"]))
    model = load_model_file(config["checkpoint"])
    if model.output_shape[-1] != info.num_classes:
        raise ValueError(
            f"The model has {model.output_shape[-1]} outputs but {info.name} has "
            f"{info.num_classes} "
            "classes; fine-tune it first (keras-vit finetune) or use `keras-vit fewshot`.")
    model.compile(loss=classification_loss(), weighted_metrics=["accuracy"])
    test_ds = data.load(info.name, config.get("split", "test"), training=False,
                        batch_size=int(config["batch_size"]), image_size=model.input_shape[1],
                        data_dir=config.get("data_dir"), max_examples=config.get("test_examples"),
                        channels=_channels(model))
    metrics = _summary(config, "evaluate", model, started, _evaluate(model, test_ds))
    run_files.write_json(os.path.join(run_dir, run_files.METRICS), metrics)
    return dict(metrics, output=run_dir)


def fewshot(config):
    """Few-shot linear accuracy of a model's frozen features (``keras_vit.evaluation``)."""
    from keras_vit.evaluation import fewshot_linear

    started = time.time()
    info = data.dataset_info(config["dataset"])
    run_dir = _start(config, "fewshot", info.name, _checkpoint_name(config["checkpoint"]))
    model = load_model_file(config["checkpoint"])
    size = config.get("image_size") or model.input_shape[1]
    arrays = []
    for split, limit in (("train", config.get("train_examples")),
                         ("test", config.get("test_examples"))):
        ds = data.load(info.name, split, training=False, batch_size=int(config["batch_size"]),
                       image_size=size, data_dir=config.get("data_dir"), max_examples=limit,
                       channels=_channels(model))
        arrays.extend(data.as_arrays(ds))
    if size != model.input_shape[1]:
        from keras_vit.models.resize import resize_model

        model = resize_model(model, size)
    results = fewshot_linear(model, *arrays, shots=tuple(config["shots"]),
                             seeds=tuple(config["seeds"]), l2_reg=float(config["l2_reg"]),
                             batch_size=int(config["batch_size"]))
    metrics = _summary(config, "fewshot", model, started, {"fewshot": results})
    run_files.write_json(os.path.join(run_dir, run_files.METRICS), metrics)
    return dict(metrics, output=run_dir)


def pretrain_mpp(config):
    """Masked patch prediction self-supervision (``keras_vit.training.mpp``); saves the encoder."""
    from keras_vit.training.mpp import MaskedPatchPrediction

    started = time.time()
    info = data.dataset_info(config["dataset"])
    model_name, _ = model_spec(config)
    run_dir = _start(config, "pretrain-mpp", info.name, model_name)
    image_size, resize_size = data.resolution(info.name, config.get("image_size"))
    encoder = build_model(config, image_size=image_size, num_classes=info.num_classes,
                          channels=info.channels)
    batch_size = int(config["batch_size"])
    check_batch_size(batch_size)
    examples = data.load_examples(info.name, "train", data_dir=config.get("data_dir"),
                                  max_examples=config.get("train_examples"), shuffle_files=True)
    steps_per_epoch = _steps_per_epoch(examples, batch_size)
    epochs = int(config["epochs"])
    images = data.pipeline(
        examples, batch_size=batch_size, image_size=image_size, num_classes=info.num_classes,
        training=True, augmentation=config.get("augmentation") or "resize_crop",
        resize_size=resize_size, channels=_channels(encoder), repeat=True,
        seed=int(config.get("seed", 0)),
    )  # (images, labels): the labels are not used
    model = MaskedPatchPrediction(encoder, target=config["target"],
                                  corrupt_rate=float(config["corrupt_rate"]))
    model.compile(optimizer=pretraining_optimizer(
        steps_per_epoch * epochs, learning_rate=float(config["learning_rate"]),
        warmup_steps=_warmup(config.get("warmup_steps"), steps_per_epoch, steps_per_epoch * epochs),
        decay=config.get("decay", "cosine"), weight_decay=float(config["weight_decay"])))
    log = run_files.EpochLog(run_dir, keep_existing=False)
    # one endless iterator, as in ``train`` (a new one each epoch slows long jax runs down)
    model.fit(images, epochs=epochs, steps_per_epoch=steps_per_epoch, shuffle=False,
              callbacks=[log],
              verbose=config.get("verbose", "auto"))
    metrics = _summary(config, "pretrain-mpp", model.encoder, started, {
        "test_accuracy": None, "final_loss": log.records[-1].get("loss") if log.records else None,
        "train_time_s": round(sum(r["seconds"] for r in log.records), 2)})
    run_files.write_run(run_dir, model=model.encoder, metrics=metrics, history=log.records,
                        title=f"masked patch prediction, {model_name} on {info.name}")
    return dict(metrics, output=run_dir)


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
    """
    from keras_vit.checkpoints.export import export_model
    from keras_vit.checkpoints.formats import load_checkpoint, save_checkpoint

    source, target = os.fspath(config["source"]), os.fspath(config["target"])
    target_format = _target_format(target, config.get("format"))
    if target_format not in CONVERT_FORMATS:
        raise ValueError(f"Unknown target format {target_format!r}; use one of "
                         f"{CONVERT_FORMATS}.")
    if os.path.abspath(source) == os.path.abspath(target):
        raise ValueError("The source and the target are the same file.")
    if source.endswith(".keras") and config.get("source_format") in (None, "keras"):
        model = load_model_file(source)
    else:
        extra = {"num_heads": config["num_heads"]} if config.get("num_heads") else {}
        if config.get("tanh_gelu"):
            extra["approximate_gelu"] = True
        model = load_checkpoint(source, format=config.get("source_format"), **extra)
    if target_format == "keras":
        model.save(target)
    elif target_format in ("onnx", "saved_model", "tflite"):
        export_model(model, target, format=target_format, batch_size=config.get("batch_size"))
    else:
        save_checkpoint(model, target, format=target_format)
    return {"command": "convert", "source": source, "target": target, "format": target_format,
            "num_params": int(model.count_params())}
