"""Inference speed measured side by side (paper Fig. 13, right: accuracy against images/s)."""

import statistics
import time


def inference_speed(models, images, *, rounds=5):
    """Images per second of each model's forward pass, timed in interleaved rounds.

    Every model is called once to compile, then each round calls ``predict_on_batch(images)``
    once per model, in turn, so that a change in the machine's load hits all of them alike;
    the result is the median over the rounds.

    Args:
        models: ``{name: model}``.
        images: one batch, in the models' input range.
        rounds: timed calls per model.

    Returns:
        ``{name: images per second}`` (median of ``rounds`` timed calls).

    Example:
    >>> import numpy as np, keras
    >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    >>> speed = inference_speed({"dense": model}, np.zeros((8, 4), "float32"), rounds=2)
    >>> list(speed), speed["dense"] > 0
    (['dense'], True)
    """
    calls = {name: (lambda model=model: model.predict_on_batch(images))
             for name, model in models.items()}
    return {name: len(images) / seconds
            for name, seconds in median_seconds(calls, rounds=rounds).items()}


def median_seconds(calls, *, rounds=5):
    """Median seconds of each named call ``{name: function}``, after one untimed call each (the
    compile), timed in interleaved rounds so that the machine's load hits all of them alike."""
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}.")
    for call in calls.values():
        call()
    seconds = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            seconds[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in seconds.items()}
