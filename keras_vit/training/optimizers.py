"""The official fine-tuning update as a Keras optimizer: SGD with a momentum trace.

vit_jax fine-tunes with ``optax.chain(optax.clip_by_global_norm(1), optax.sgd(lr_fn, 0.9,
accumulator_dtype="bfloat16"))`` on the mean gradient of ``accum_steps`` micro-batches. Per
update ``k`` (counted from 0), with ``g`` the clipped mean gradient and ``m`` the stored trace:

    u = g + 0.9 m          (in float32; 0.9 rounded to m's dtype, as XLA computes optax's
                            bfloat16 product)
    p = p - lr_fn(k) u
    m = u                  (rounded to bfloat16 when the trace is stored in bfloat16)

Keras' ``SGD`` keeps ``v = 0.9 v - lr_t g; p += v`` instead: the same steps for a constant
learning rate, different ones as soon as the rate changes (warmup, decay), which is every
published recipe. ``TraceSGD`` is the optax form; with ``gradient_accumulation_steps`` (Keras'
own accumulation: the mean of the micro-batch gradients, then clipping, then the update) its
schedule runs on the update count, as optax's does, not on the micro-batch count.

``AdjustableAdamW`` is the pre-training optimizer of a run whose length is re-planned while it
trains: ``AdamW`` carrying the variables of its schedule, whose end moves.
"""

import keras
from keras import ops


class UpdateCountSchedule:
    """Mixin: a learning-rate schedule evaluated on updates, not micro-batches.

    Keras' gradient accumulation advances the schedule on every micro-batch; the official
    step counts updates, so update ``k`` (from 0) reads ``schedule(k)`` here.
    """

    def _get_current_learning_rate(self):
        if isinstance(self._learning_rate, keras.optimizers.schedules.LearningRateSchedule):
            return self._learning_rate(self.iterations)  # updates when accumulating
        return super()._get_current_learning_rate()


@keras.saving.register_keras_serializable(package="keras_vit")
class TraceSGD(UpdateCountSchedule, keras.optimizers.Optimizer):
    """SGD with optax's momentum trace, optionally stored in bfloat16 (the official update).

    Args:
        learning_rate: a float or a ``LearningRateSchedule`` of the update count.
        momentum: the trace's decay (0.9 in every official config).
        momentum_dtype: dtype the trace is stored in: ``"bfloat16"`` as the official
            trainer (``accumulator_dtype``), ``"float32"``, or None for the variable's dtype.
        **kwargs: the Keras optimizer arguments (``global_clipnorm``,
            ``gradient_accumulation_steps``, ``use_ema``, ...).

    Example (a constant rate: the same steps as Keras' ``SGD``):
    >>> import numpy as np
    >>> w = keras.Variable(np.ones(2, "float32"))
    >>> ours = TraceSGD(0.1, momentum_dtype="float32")
    >>> for _ in range(3):
    ...     ours.apply([keras.ops.convert_to_tensor(np.array([1.0, -2.0], "float32"))], [w])
    >>> [round(float(v), 4) for v in keras.ops.convert_to_numpy(w)]
    [0.439, 2.122]
    """

    def __init__(self, learning_rate=0.01, momentum=0.9, momentum_dtype="bfloat16",
                 name="trace_sgd", **kwargs):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        if not 0 <= momentum < 1:
            raise ValueError(f"momentum must be in [0, 1), got {momentum}.")
        self.momentum = float(momentum)
        self.momentum_dtype = (None if momentum_dtype is None
                               else keras.backend.standardize_dtype(momentum_dtype))

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        self.traces = []
        for variable in variables:
            name = getattr(variable, "path", variable.name).replace("/", "_")
            self.traces.append(self.add_variable(
                shape=variable.shape, dtype=self.momentum_dtype or variable.dtype,
                name=f"{name}_trace", layout=getattr(variable, "_layout", None)))

    def update_step(self, gradient, variable, learning_rate):
        trace = self.traces[self._get_variable_index(variable)]
        gradient = ops.cast(gradient, variable.dtype)
        # optax writes the product in the trace's dtype, but XLA keeps it in float32 (it drops
        # the round trip through bfloat16): only the momentum constant is rounded. Written
        # out, the same numbers come on every backend (docs/training.md).
        momentum = ops.cast(ops.cast(self.momentum, trace.dtype), variable.dtype)
        update = ops.add(gradient, ops.multiply(ops.cast(trace, variable.dtype), momentum))
        self.assign(trace, ops.cast(update, trace.dtype))
        self.assign_sub(variable, ops.multiply(update, ops.cast(learning_rate, variable.dtype)))

    def get_config(self):
        config = super().get_config()
        config.update(momentum=self.momentum, momentum_dtype=self.momentum_dtype)
        return config


@keras.saving.register_keras_serializable(package="keras_vit")
class AccumulatingSGD(UpdateCountSchedule, keras.optimizers.SGD):
    """Keras' ``SGD`` (``v = m v - lr g; p += v``) whose schedule counts updates when it
    accumulates gradients; without accumulation it is exactly ``keras.optimizers.SGD``."""


@keras.saving.register_keras_serializable(package="keras_vit")
class AdjustableAdamW(keras.optimizers.AdamW):
    """Keras' ``AdamW`` that carries its learning-rate schedule's variables among its own
    (``keras_vit.training.schedules.AdjustableWarmupDecay``, a decay whose end can move).

    Under jax a compiled train step reads only the variables it is given, the optimizer's among
    them: a variable of the schedule alone would be read once, when the step is traced. As the
    optimizer's, the schedule's variables are passed to every step, saved with the optimizer
    (backups, ``model.keras``) and restored with it. With another schedule it is ``AdamW``.
    """

    def __init__(self, learning_rate=0.001, **kwargs):
        super().__init__(learning_rate=learning_rate, **kwargs)
        # A tuple set as an attribute of a Keras optimizer: its variables are tracked.
        self.schedule_variables = tuple(getattr(learning_rate, "variables", ()))

    @property
    def schedule(self):
        """The learning-rate schedule (or rate) it was made with."""
        return self._learning_rate
