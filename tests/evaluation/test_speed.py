"""inference_speed: interleaved rounds, medians, images per second; speed_by_size (Fig. 12
left) builds each model at each size and times them together."""

import keras
import numpy as np
import pytest

from keras_vit.evaluation import inference_speed, speed_by_size


def test_speed_is_images_per_median_second(monkeypatch):
    calls = []

    class Fake:
        def __init__(self, name):
            self.name = name

        def predict_on_batch(self, images):
            calls.append(self.name)

    ticks = iter([0.0, 1.0, 1.0, 3.0, 3.0, 4.0, 4.0, 8.0, 8.0, 9.0, 9.0, 11.0])
    monkeypatch.setattr("keras_vit.evaluation.speed.time.perf_counter", lambda: next(ticks))
    speed = inference_speed({"a": Fake("a"), "b": Fake("b")}, np.zeros((4, 2)), rounds=3)
    assert calls == ["a", "b"] + ["a", "b"] * 3  # one compile call each, then interleaved
    assert speed == {"a": 4 / 1.0, "b": 4 / 2.0}  # a: 1, 1, 1 s; b: 2, 4, 2 s


def test_speed_of_a_real_model_and_bad_rounds():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    assert inference_speed({"m": model}, np.zeros((5, 3), "float32"), rounds=1)["m"] > 0
    with pytest.raises(ValueError, match="rounds"):
        inference_speed({"m": model}, np.zeros((5, 3), "float32"), rounds=0)


def test_speed_by_size_times_every_model_at_every_size(monkeypatch):
    """Each (name, size) is built once at the size figure_12 counts it (ViT-Ti/16 at 40 px runs
    at 32), given a batch of that size, and timed with the others in the same rounds."""
    built, timed = [], []

    class Fake:
        def __init__(self, name, size):
            self.size = size
            built.append((name, size))

        def predict_on_batch(self, images):
            assert images.shape == (3, self.size, self.size, 3) and images.dtype == "float32"
            timed.append(self.size)

    monkeypatch.setattr("keras_vit.pretrained.create_model",
                        lambda name, image_size: Fake(name, image_size))
    seconds = {("ViT-Ti/16", 32): 0.5, ("ViT-Ti/16", 64): 1.5, ("BiT-R26x1", 32): 1.0,
               ("BiT-R26x1", 64): 3.0}

    def median_seconds(calls, rounds):
        assert rounds == 2 and set(calls) == set(seconds)
        for call in calls.values():
            call()
        return seconds

    monkeypatch.setattr("keras_vit.evaluation.speed.median_seconds", median_seconds)
    table = speed_by_size(["ViT-Ti/16", "BiT-R26x1"], [40, 64], batch_size=3, rounds=2)
    assert built == [("ViT-Ti/16", 32), ("ViT-Ti/16", 64), ("BiT-R26x1", 32), ("BiT-R26x1", 64)]
    assert table == {"ViT-Ti/16": [(32, 6.0), (64, 2.0)], "BiT-R26x1": [(32, 3.0), (64, 1.0)]}


def test_speed_by_size_of_a_real_model():
    table = speed_by_size(["ViT-Ti/16"], [32], batch_size=2, rounds=1)
    assert list(table) == ["ViT-Ti/16"] and table["ViT-Ti/16"][0][0] == 32
    assert table["ViT-Ti/16"][0][1] > 0
