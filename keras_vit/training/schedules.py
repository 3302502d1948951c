"""Learning-rate schedules of the official code: linear warmup, then cosine or linear decay.

vit_jax's ``create_learning_rate_schedule`` at step ``t`` (W warmup steps, T total steps):

    progress = clip((t - W) / (T - W), 0, 1)
    cosine:  lr(t) = base * 0.5 * (1 + cos(pi * progress)) * min(1, t / W)
    linear:  lr(t) = (end + (base - end) * (1 - progress)) * min(1, t / W)

``WarmupDecay`` is that formula, written with arithmetic alone (clip, minimum, cos): no branch
on the step, so the rate never waits for the device to report the step count, and a compiled
train step (``jit_compile=True``, also Keras' torch backend) traces it once. Keras'
``CosineDecay(0, T - W, warmup_target=base, warmup_steps=W)`` computes the same cosine form but
chooses between warmup and decay with ``ops.cond``, which on the torch backend reads the step
back from the device twice a step. optax evaluates the schedule on its update count, from 0, so
the official update ``k`` (from 1) uses ``lr(k - 1)``: with warmup the first update has rate 0
and only moves the momentum. Keras passes ``optimizer.iterations``, also from 0, so the two
agree update for update (checked against the official trainer's fine-tuning steps,
tests/training/test_official_finetuning.py; with gradient accumulation
``keras_vit.training.optimizers`` keeps the count on updates).
"""

import math

import keras

from keras_vit.checks import positive_int

DECAYS = ("cosine", "linear")


def unit_interval(x):
    """``x`` clipped to [0, 1], its bounds made on ``x``'s device: Keras' torch backend copies
    a Python number to the device for each such operation, a copy that waits for the device."""
    return keras.ops.clip(x, keras.ops.zeros_like(x), keras.ops.ones_like(x))


def decayed(progress, decay, learning_rate, end_learning_rate):
    """The decay's rate at ``progress`` in [0, 1]: cosine to 0, or linear to the end rate."""
    if decay == "cosine":
        return learning_rate * 0.5 * (1.0 + keras.ops.cos(math.pi * progress))
    return end_learning_rate + (learning_rate - end_learning_rate) * (1.0 - progress)


@keras.saving.register_keras_serializable(package="keras_vit")
class WarmupDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup from 0 to ``learning_rate`` over ``warmup_steps``, then ``decay`` until
    ``total_steps``: ``"cosine"`` to 0 or ``"linear"`` to ``end_learning_rate`` (constant
    afterwards); the official formula.

    Example:
    >>> schedule = WarmupDecay(1e-3, total_steps=110, warmup_steps=10)
    >>> [round(float(schedule(t)), 6) for t in (0, 5, 10, 60, 110, 200)]
    [0.0, 0.0005, 0.001, 0.0005, 0.0, 0.0]
    """

    def __init__(self, learning_rate, total_steps, warmup_steps=0, decay="cosine",
                 end_learning_rate=1e-5):
        super().__init__()
        if decay not in DECAYS:
            raise ValueError(f"Unknown decay {decay!r}; use one of {DECAYS}.")
        self.learning_rate = float(learning_rate)
        self.total_steps = int(total_steps)
        self.warmup_steps = int(warmup_steps)
        self.decay = decay
        self.end_learning_rate = float(end_learning_rate)
        _check_steps(self.total_steps, self.warmup_steps)

    def __call__(self, step):
        step = keras.ops.cast(step, "float32")
        progress = unit_interval((step - self.warmup_steps)
                                 / float(self.total_steps - self.warmup_steps))
        lr = decayed(progress, self.decay, self.learning_rate, self.end_learning_rate)
        if self.warmup_steps:
            lr = lr * unit_interval(step / float(self.warmup_steps))
        return lr

    def get_config(self):
        return {
            "learning_rate": self.learning_rate,
            "total_steps": self.total_steps,
            "warmup_steps": self.warmup_steps,
            "decay": self.decay,
            "end_learning_rate": self.end_learning_rate,
        }


@keras.saving.register_keras_serializable(package="keras_vit")
class WarmupLinearDecay(WarmupDecay):
    """``WarmupDecay`` with the linear decay, under the name saved optimizers give it.

    Example:
    >>> schedule = WarmupLinearDecay(1e-3, total_steps=110, warmup_steps=10, end_learning_rate=0.0)
    >>> [round(float(schedule(t)), 6) for t in (0, 5, 10, 60, 110, 200)]
    [0.0, 0.0005, 0.001, 0.0005, 0.0, 0.0]
    """

    def __init__(self, learning_rate, total_steps, warmup_steps=0, end_learning_rate=1e-5):
        super().__init__(learning_rate, total_steps, warmup_steps, "linear", end_learning_rate)

    def get_config(self):
        config = super().get_config()
        del config["decay"]
        return config


def _check_steps(total_steps, warmup_steps):
    positive_int("total_steps", total_steps)
    if not 0 <= warmup_steps < total_steps:
        raise ValueError(
            f"warmup_steps ({warmup_steps}) must be in [0, total_steps) = [0, {total_steps}); "
            "use fewer warmup steps or train longer."
        )


def warmup_schedule(learning_rate, total_steps, warmup_steps=0, decay="cosine",
                    end_learning_rate=1e-5):
    """The official warmup + decay schedule as a Keras ``LearningRateSchedule``.

    Args:
        learning_rate: peak (base) learning rate.
        total_steps: steps of the whole run (warmup included).
        warmup_steps: linear warmup steps from 0.
        decay: ``"cosine"`` (to 0, ``WarmupDecay``) or ``"linear"`` (to ``end_learning_rate``,
            ``WarmupLinearDecay``).
        end_learning_rate: final value of the linear decay (official 1e-5).

    Example:
    >>> schedule = warmup_schedule(0.03, total_steps=1000, warmup_steps=100)
    >>> [round(float(schedule(t)), 6) for t in (0, 50, 100, 550, 1000)]
    [0.0, 0.015, 0.03, 0.015, 0.0]
    """
    total_steps, warmup_steps = int(total_steps), int(warmup_steps)
    if decay == "linear":
        return WarmupLinearDecay(learning_rate, total_steps, warmup_steps, end_learning_rate)
    return WarmupDecay(learning_rate, total_steps, warmup_steps, decay, end_learning_rate)


@keras.saving.register_keras_serializable(package="keras_vit")
class AdjustableWarmupDecay(keras.optimizers.schedules.LearningRateSchedule):
    """``warmup_schedule``'s warmup and decay, whose end can move while the run trains.

    A run planned to a time budget learns its real step time only as it trains
    (``keras_vit.app.planning``). ``adjust(step, total_steps)`` then moves the decay's end:
    from ``step`` on, the decay's progress goes on from where it is to 1 at the new end, linearly
    in the step. So the rate never jumps and never rises after the warmup, and reaches its end
    value at the new last step; only the slope of the rest of the decay changes, the less the
    earlier and the smaller the change. Never adjusted, it is ``warmup_schedule``'s schedule.

    The warmup length, the end and the point the decay last moved from are variables: the
    optimizer carries them with its own (``AdjustableAdamW``), so compiled train steps read
    their current values and backups save and restore them. Values of steps before the last
    adjustment are not kept (the rate a step had is the one it was trained with).

    Example:
    >>> schedule = AdjustableWarmupDecay(1e-3, total_steps=110, warmup_steps=10, decay="linear",
    ...                                  end_learning_rate=0.0)
    >>> [round(float(schedule(t)), 6) for t in (5, 10, 60)]
    [0.0005, 0.001, 0.0005]
    >>> schedule.adjust(60, total_steps=160)  # half the decay done; the other half over 100 steps
    >>> [round(float(schedule(t)), 6) for t in (60, 110, 160, 200)]
    [0.0005, 0.00025, 0.0, 0.0]
    """

    def __init__(self, learning_rate, total_steps, warmup_steps=0, decay="cosine",
                 end_learning_rate=1e-5, anchor_step=None, anchor_progress=0.0):
        super().__init__()
        _check_steps(int(total_steps), int(warmup_steps))
        if decay not in DECAYS:
            raise ValueError(f"Unknown decay {decay!r}; use one of {DECAYS}.")
        self.learning_rate = float(learning_rate)
        self.decay = decay
        self.end_learning_rate = float(end_learning_rate)
        anchor_step = warmup_steps if anchor_step is None else anchor_step
        self.warmup_steps, self.total_steps, self.anchor_step, self.anchor_progress = (
            keras.Variable(float(value), dtype="float32", trainable=False, name=name)
            for value, name in ((warmup_steps, "warmup_steps"), (total_steps, "total_steps"),
                                (anchor_step, "anchor_step"), (anchor_progress, "anchor_progress")))

    @property
    def variables(self):
        return (self.warmup_steps, self.total_steps, self.anchor_step, self.anchor_progress)

    def progress(self, step):
        """How far the decay is at ``step``: 0 until the warmup ends, 1 from its end on."""
        # The variables' tensors: a Keras variable's operators would make each Python number
        # a device tensor (see ``unit_interval``); a tensor's own operators take it as it is.
        anchor, progress = self.anchor_step.value, self.anchor_progress.value
        step = keras.ops.cast(step, "float32")
        span = self.total_steps.value - anchor
        ahead = unit_interval((step - anchor) / keras.ops.maximum(span, keras.ops.ones_like(span)))
        return progress + (1.0 - progress) * ahead

    def __call__(self, step):
        lr = decayed(self.progress(step), self.decay, self.learning_rate,
                     self.end_learning_rate)
        step = keras.ops.cast(step, "float32")
        one, warmup_steps = keras.ops.ones_like(step), self.warmup_steps.value
        warmup = unit_interval(step / keras.ops.maximum(warmup_steps, one))
        return lr * keras.ops.where(warmup_steps > 0, warmup, one)

    def adjust(self, step, total_steps):
        """End the decay at ``total_steps``, going on from ``step`` (the next step to train)."""
        anchor = max(float(step), _value(self.warmup_steps))
        progress = float(keras.ops.convert_to_numpy(self.progress(anchor)))
        self.anchor_step.assign(anchor)
        self.anchor_progress.assign(progress)
        self.total_steps.assign(max(float(total_steps), anchor + 1.0))

    @property
    def end_step(self):
        """The step the decay now ends at (the run's length in steps)."""
        return int(round(_value(self.total_steps)))

    def get_config(self):
        return {
            "learning_rate": self.learning_rate,
            "total_steps": self.end_step,
            "warmup_steps": int(round(_value(self.warmup_steps))),
            "decay": self.decay,
            "end_learning_rate": self.end_learning_rate,
            "anchor_step": _value(self.anchor_step),
            "anchor_progress": _value(self.anchor_progress),
        }


def _value(variable):
    return float(keras.ops.convert_to_numpy(variable))
