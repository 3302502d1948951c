"""What a keras-hub user expects of a backbone and a task, on keras_vit's models, Keras-native.

``Backbone`` (a mixin for any backbone class): ``from_preset``/``save_to_preset``
(``keras_vit.models.presets``) and ``enable_lora(rank)`` as keras-hub spells it, on the LoRA of
``keras_vit.models.lora``: factors on the attention's query and value projections, every other
weight of the backbone frozen (a classifier's head on it still trains).

``Task`` (a mixin for any classifier class, which sets ``backbone_cls``): presets too; a
``preprocessor`` (``keras_vit.models.preprocessor``) that ``predict``, ``fit`` and ``evaluate``
run on raw images, ``None`` meaning inputs are already preprocessed; and ``compile()`` with the
paper's fine-tuning as defaults (``FINE_TUNING``; see ``Task.compile``).

A mixin goes first in the class bases, before the Keras model it serves:
``class ViTImageClassifier(Task, DescribedModel)``.
"""

import keras

from keras_vit.models import lora
from keras_vit.models import preprocessor as preprocessing
from keras_vit.models.presets import PresetMixin

# The paper's fine-tuning (Appendix B.1.1, Table 4) as vit_jax runs it: SGD with momentum 0.9,
# no weight decay, global-norm clipping at 1, linear warmup then cosine decay to zero; vit_jax's
# default peak rate and length (its CIFAR runs: 10k steps at batch 512, 500 warmup steps).
# keras_vit.training.finetuning_optimizer is the same recipe, step for step the official one.
FINE_TUNING = {"learning_rate": 0.03, "momentum": 0.9, "global_clipnorm": 1.0,
               "total_steps": 10_000, "warmup_steps": 500}


def fine_tuning_schedule(values=FINE_TUNING):
    """Linear warmup to the peak rate, then a cosine decay to zero (``FINE_TUNING``).

    Example:
    >>> schedule = fine_tuning_schedule()
    >>> [round(float(schedule(step)), 4) for step in (0, 250, 500, 5250, 10_000)]
    [0.0, 0.015, 0.03, 0.015, 0.0]
    """
    return keras.optimizers.schedules.CosineDecay(
        initial_learning_rate=0.0, warmup_target=values["learning_rate"],
        warmup_steps=values["warmup_steps"],
        decay_steps=values["total_steps"] - values["warmup_steps"])


def fine_tuning_optimizer(values=FINE_TUNING):
    """Keras' SGD with the paper's fine-tuning settings (``FINE_TUNING``).

    Example:
    >>> optimizer = fine_tuning_optimizer()
    >>> optimizer.momentum, optimizer.global_clipnorm
    (0.9, 1.0)
    """
    return keras.optimizers.SGD(learning_rate=fine_tuning_schedule(values),
                                momentum=values["momentum"],
                                global_clipnorm=values["global_clipnorm"])


class Backbone(PresetMixin):
    """keras-hub's backbone habits: presets and ``enable_lora``."""

    def enable_lora(self, rank, targets="qv", alpha=None):
        """LoRA factors of ``rank`` on the attention projections (``"qv"``: query and value,
        keras-hub's and the LoRA paper's choice; ``"all"``: every one); every other weight of
        the backbone is frozen. ``keras_vit.models.lora.merge_lora`` folds them back."""
        lora.enable_lora(self, rank, targets=targets, alpha=alpha, trained_in_full=())


class Task(PresetMixin):
    """keras-hub's task habits: presets, a preprocessor used on raw images, compile defaults."""

    preprocessor = None

    def compile(self, optimizer="auto", loss="auto", *, metrics="auto", **kwargs):
        """``keras.Model.compile`` with defaults for fine-tuning; any argument given replaces
        its default, as in keras-hub.

        ``"auto"`` means: ``optimizer``, SGD with momentum 0.9, global-norm clipping at 1 and a
        cosine decay to zero over 10,000 steps after 500 linear warmup steps to 0.03 (the
        paper's fine-tuning, Appendix B.1.1, with vit_jax's defaults: ``FINE_TUNING``);
        ``loss``, softmax cross-entropy on integer labels and the logits; ``metrics``, their
        accuracy (with a loss of your own: none, as Keras). For another length, pass
        ``keras_vit.training.finetuning_optimizer(steps)``.
        """
        if isinstance(optimizer, str) and optimizer == "auto":
            optimizer = fine_tuning_optimizer()
        if isinstance(metrics, str) and metrics == "auto":
            # the accuracy of integer labels goes with the default loss only: labels of another
            # form (one-hot, smoothed) come with a loss of their own, and Keras' default then
            metrics = None if not (isinstance(loss, str) and loss == "auto") else [
                keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
        if isinstance(loss, str) and loss == "auto":
            loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        super().compile(optimizer=optimizer, loss=loss, metrics=metrics, **kwargs)

    def compile_from_config(self, config):
        """Compile a loaded model as it was saved (Keras skips a custom ``compile``)."""
        self.compile(**keras.saving.deserialize_keras_object(config))
        if self.built:  # the optimizer's variables, which the file's state is loaded into
            self.optimizer.build(self.trainable_variables)

    def fit(self, x=None, y=None, batch_size=None, epochs=1, verbose="auto", callbacks=None,
            validation_split=0.0, validation_data=None, shuffle=True, sample_weight=None,
            **kwargs):
        """``keras.Model.fit``; with a preprocessor, ``x`` (and ``validation_data``) are raw
        images, preprocessed one batch at a time."""
        if self.preprocessor is not None and x is not None:
            x = preprocessing.batches(self.preprocessor, x, y, sample_weight,
                                      batch_size=batch_size, shuffle=shuffle)
            y = sample_weight = batch_size = None
            if validation_data is not None:
                validation_data = preprocessing.batches(self.preprocessor, *validation_data)
        return super().fit(x, y, batch_size=batch_size, epochs=epochs, verbose=verbose,
                           callbacks=callbacks, validation_split=validation_split,
                           validation_data=validation_data, shuffle=shuffle,
                           sample_weight=sample_weight, **kwargs)

    def evaluate(self, x=None, y=None, batch_size=None, verbose="auto", sample_weight=None,
                 **kwargs):
        """``keras.Model.evaluate``; with a preprocessor, ``x`` holds raw images."""
        if self.preprocessor is not None and x is not None:
            x = preprocessing.batches(self.preprocessor, x, y, sample_weight,
                                      batch_size=batch_size)
            y = sample_weight = batch_size = None
        return super().evaluate(x, y, batch_size=batch_size, verbose=verbose,
                                sample_weight=sample_weight, **kwargs)

    def predict(self, x, batch_size=None, verbose="auto", **kwargs):
        """``keras.Model.predict``; with a preprocessor, ``x`` holds raw images (an array, or
        a list of images of any size)."""
        if self.preprocessor is not None:
            x = preprocessing.batches(self.preprocessor, x, batch_size=batch_size)
            batch_size = None
        return super().predict(x, batch_size=batch_size, verbose=verbose, **kwargs)

    def get_config(self):
        config = super().get_config()
        if self.preprocessor is not None:
            config["preprocessor"] = keras.saving.serialize_keras_object(self.preprocessor)
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        saved = config.pop("preprocessor", None)
        model = super().from_config(config)
        if saved is not None:
            model.preprocessor = keras.saving.deserialize_keras_object(saved)
        return model
