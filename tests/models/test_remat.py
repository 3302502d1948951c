import keras
import numpy as np
import pytest
from keras.ops import convert_to_numpy as to_numpy

import keras_vit
from keras_vit.layers.encoder import EncoderBlock, EncoderConfig
from tests.tolerances import float32_bound

CONFIG = dict(
    image_size=8, patch_size=4, hidden_size=16, num_layers=2, num_heads=2, mlp_dim=32,
    num_classes=5, head_kernel_initializer="glorot_uniform",
)
# Remat computes the same function as a second XLA program (tests/tolerances.py); the
# embedding and the head count as one block each.
DEPTH = CONFIG["num_layers"] + 2


def _float32_bound(*values):
    return float32_bound(DEPTH, *values)


def test_remat_gives_the_same_outputs_and_gradients(monkeypatch):
    calls = []
    original = keras.remat

    def counting_remat(fn):
        calls.append(fn)
        return original(fn)

    monkeypatch.setattr(keras, "remat", counting_remat)
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (8, 8, 8, 3)).astype("float32")
    y = rng.integers(0, 5, 8)
    results = {}
    init = None
    for remat in (False, True):
        model = keras_vit.ViTImageClassifier(**CONFIG, remat=remat)
        assert all(model.get_layer(f"encoderblock_{i}").config.remat == remat for i in range(2))
        if init is None:
            init = model.get_weights()
        model.set_weights(init)
        outputs = to_numpy(model(x))
        model.compile(
            keras.optimizers.SGD(1.0), keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        )
        calls.clear()
        loss = model.train_on_batch(x, y)
        results[remat] = (outputs, loss, model.get_weights(), len(calls))
    assert results[False][3] == 0
    assert results[True][3] >= 2  # each block's forward pass went through keras.remat
    outputs = results[False][0]
    np.testing.assert_allclose(results[True][0], outputs, rtol=0, atol=_float32_bound(outputs))
    loss = results[False][1]
    assert results[True][1] == pytest.approx(loss, rel=0, abs=_float32_bound(loss))
    # With SGD(lr=1) the weight change is the gradient: the gradients agree, within the rounding
    # of the weights they were added to and of the sums that made them. A gradient entry can be
    # tiny where larger terms cancel (a bias whose terms nearly sum to 0), so its rounding is
    # that of the terms: the largest gradient of the model sets the scale for every tensor.
    steps = [a - before for before, a in zip(init, results[False][2])]
    for step, before, a, b in zip(steps, init, results[False][2], results[True][2]):
        np.testing.assert_allclose(step, b - before, rtol=0,
                                   atol=_float32_bound(*steps, a, before))
    moved = [np.abs(a - before).max() for before, a in zip(init, results[True][2])]
    assert min(moved) > 0


def test_remat_round_trips_and_refuses_dropout():
    model = keras_vit.ViTImageClassifier(**dict(CONFIG, num_layers=1), remat=True)
    assert model.get_config()["config"]["encoder"]["remat"] is True
    assert keras_vit.ViTImageClassifier.from_config(model.get_config()).config.encoder.remat
    assert EncoderBlock.from_config(model.get_layer("encoderblock_0").get_config()).config.remat
    with pytest.raises(ValueError, match="remat=True needs dropout_rate=0"):
        keras_vit.ViTImageClassifier(**CONFIG, remat=True, dropout_rate=0.1)
    with pytest.raises(ValueError, match="remat=True needs dropout_rate=0"):
        EncoderConfig(1, 2, 8, attention_dropout_rate=0.1, remat=True)
