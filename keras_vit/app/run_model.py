"""The model of a ``keras-vit`` run: ``--model`` and ``--set`` read into a ``ModelSpec``, the model
built from it (the default small ViT of ``configs`` unless ``--model`` names one), its input
channels, and its compilation for training and evaluation."""

import dataclasses
import json

import keras

from keras_vit.app import configs
from keras_vit.app.errors import UsageError
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
    if config.get("stochastic_depth") is not None:
        overrides["stochastic_depth_rate"] = config["stochastic_depth"]
    if config.get("head_bias_init") is not None:
        overrides["head_bias_init"] = config["head_bias_init"]
    return create_model(spec.name, image_size=image_size, num_classes=num_classes, **overrides)


def channels(model):
    return int(model.input_shape[-1])


# Accuracy is a weighted metric: on several devices the last evaluation batch is padded with
# weight-0 examples (keras_vit.data.pipeline), which plain ``metrics`` would count.
def compile_model(model, optimizer=None, label_smoothing=0.0):
    model.compile(optimizer=optimizer, loss=classification_loss(label_smoothing),
                  weighted_metrics=["accuracy"])


def loss_scaling(model):
    """Whether the compiled model scales its loss: Keras's ``compile`` wraps the optimizer in a
    ``LossScaleOptimizer`` for a ``mixed_float16`` model."""
    return isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
