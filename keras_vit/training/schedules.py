"""Learning-rate schedules of the official code: linear warmup, then cosine or linear decay.

vit_jax's ``create_learning_rate_schedule`` at step ``t`` (W warmup steps, T total steps):

    progress = clip((t - W) / (T - W), 0, 1)
    cosine:  lr(t) = base * 0.5 * (1 + cos(pi * progress)) * min(1, t / W)
    linear:  lr(t) = (end + (base - end) * (1 - progress)) * min(1, t / W)

The cosine form is exactly Keras' built-in ``CosineDecay(0, T - W, warmup_target=base,
warmup_steps=W)``; the linear form is ``WarmupLinearDecay`` below. optax evaluates the schedule
on its update count, from 0, so the official update ``k`` (from 1) uses ``lr(k - 1)``: with
warmup the first update has rate 0 and only moves the momentum. Keras passes
``optimizer.iterations``, also from 0, so the two agree update for update (checked against the
official trainer's fine-tuning steps, tests/training/test_official_finetuning.py; with gradient
accumulation ``keras_vit.training.optimizers`` keeps the count on updates).
"""

import keras

DECAYS = ("cosine", "linear")


@keras.saving.register_keras_serializable(package="keras_vit")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup from 0 to ``learning_rate`` over ``warmup_steps``, then linear decay to
    ``end_learning_rate`` at ``total_steps`` (constant afterwards); the official formula.

    Example:
    >>> schedule = WarmupLinearDecay(1e-3, total_steps=110, warmup_steps=10, end_learning_rate=0.0)
    >>> [round(float(schedule(t)), 6) for t in (0, 5, 10, 60, 110, 200)]
    [0.0, 0.0005, 0.001, 0.0005, 0.0, 0.0]
    """

    def __init__(self, learning_rate, total_steps, warmup_steps=0, end_learning_rate=1e-5):
        super().__init__()
        self.learning_rate = float(learning_rate)
        self.total_steps = int(total_steps)
        self.warmup_steps = int(warmup_steps)
        self.end_learning_rate = float(end_learning_rate)
        _check_steps(self.total_steps, self.warmup_steps)

    def __call__(self, step):
        step = keras.ops.cast(step, "float32")
        progress = (step - self.warmup_steps) / float(self.total_steps - self.warmup_steps)
        progress = keras.ops.clip(progress, 0.0, 1.0)
        lr = self.end_learning_rate + (self.learning_rate - self.end_learning_rate) * (1 - progress)
        if self.warmup_steps:
            lr = lr * keras.ops.minimum(1.0, step / float(self.warmup_steps))
        return lr

    def get_config(self):
        return {
            "learning_rate": self.learning_rate,
            "total_steps": self.total_steps,
            "warmup_steps": self.warmup_steps,
            "end_learning_rate": self.end_learning_rate,
        }


def _check_steps(total_steps, warmup_steps):
    if total_steps < 1:
        raise ValueError(f"total_steps must be a positive integer, got {total_steps}.")
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
        decay: ``"cosine"`` (to 0, Keras ``CosineDecay``) or ``"linear"`` (to
            ``end_learning_rate``, ``WarmupLinearDecay``).
        end_learning_rate: final value of the linear decay (official 1e-5).

    Example:
    >>> schedule = warmup_schedule(0.03, total_steps=1000, warmup_steps=100)
    >>> [round(float(schedule(t)), 6) for t in (0, 50, 100, 550, 1000)]
    [0.0, 0.015, 0.03, 0.015, 0.0]
    """
    total_steps, warmup_steps = int(total_steps), int(warmup_steps)
    _check_steps(total_steps, warmup_steps)
    if decay == "linear":
        return WarmupLinearDecay(learning_rate, total_steps, warmup_steps, end_learning_rate)
    if decay != "cosine":
        raise ValueError(f"Unknown decay {decay!r}; use one of {DECAYS}.")
    if warmup_steps == 0:
        return keras.optimizers.schedules.CosineDecay(float(learning_rate), total_steps)
    return keras.optimizers.schedules.CosineDecay(
        0.0, total_steps - warmup_steps, warmup_target=float(learning_rate),
        warmup_steps=warmup_steps,
    )
