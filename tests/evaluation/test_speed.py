"""inference_speed: interleaved rounds, medians, images per second."""

import keras
import numpy as np
import pytest

from keras_vit.evaluation import inference_speed


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
