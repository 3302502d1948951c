"""Inference speed measured side by side (paper Fig. 13, right: accuracy against images/s;
Fig. 12, left: images/s against the input size)."""

import statistics
import time

import numpy as np


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


def speed_by_size(names, sizes, *, batch_size=8, rounds=5, seed=0):
    """Fig. 12 (left), measured where it runs: images per second of each named model's forward
    pass at each input size.

    Every (model, size) pair is built by ``create_model(name, image_size=size)`` with random
    weights (the speed does not depend on them) at the size ``figure_12`` counts it (ViT-H/14 at
    384 px runs at 378), and all pairs are timed together by ``inference_speed`` on one batch of
    random images each: one compiling call, then ``rounds`` interleaved rounds, the median.
    The paper's points are each the peak over a wide range of batch sizes on one TPUv3 core;
    this times one batch size on the devices Keras runs on.

    Args:
        names: registered model names (``"ViT-Ti/16"``, ``"BiT-R26x1"``...).
        sizes: input sizes in pixels.
        batch_size: images per timed call.
        rounds: timed calls per (model, size).
        seed: of the random images.

    Returns:
        ``{name: [(image_size, images per second), ...]}``, the shape of ``figure_12``'s table
        (``keras_vit.inspection.plot_speed_by_size`` draws it).

    Example:
    >>> table = speed_by_size(["ViT-Ti/16"], [32, 48], batch_size=2, rounds=1)
    >>> [size for size, _ in table["ViT-Ti/16"]], all(s > 0 for _, s in table["ViT-Ti/16"])
    ([32, 48], True)
    """
    from keras_vit.costs.batches import aligned_size
    from keras_vit.pretrained import create_model

    pairs = [(name, aligned_size(name, size)) for name in names for size in sizes]
    images = {size: np.random.default_rng(seed).uniform(-1, 1, (batch_size, size, size, 3))
              .astype("float32") for _, size in pairs}
    models = {pair: create_model(pair[0], image_size=pair[1]) for pair in dict.fromkeys(pairs)}
    calls = {pair: (lambda model=model, x=images[pair[1]]: model.predict_on_batch(x))
             for pair, model in models.items()}
    seconds = median_seconds(calls, rounds=rounds)
    return {name: [(size, batch_size / seconds[name, size]) for n, size in pairs if n == name]
            for name in names}


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
