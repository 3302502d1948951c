"""Polyak averaging (``use_ema``) and global-norm clipping of keras_vit's own optimizers.

The averaged weights are the ones the model holds after ``fit``, the ones ``keras-vit finetune``
evaluates and the ones it saves; the clipping of both recipes bounds the update of a large
gradient to the clip norm.
"""

import json
import os

import keras
import numpy as np
import pytest

import keras_vit
from conftest import fixture_path
from keras_vit import data, training
from keras_vit.app import finetune, run_files


def _np(x):
    return keras.ops.convert_to_numpy(x)


class _Trajectory(keras.callbacks.Callback):
    """The trainable weights after every optimizer step."""

    def __init__(self):
        super().__init__()
        self.steps = []

    def on_train_batch_end(self, batch, logs=None):
        self.steps.append([_np(v).copy() for v in self.model.trainable_weights])


def _polyak(steps, momentum):
    """Keras' EMA: the first step's weights, then ``m * average + (1 - m) * weights``."""
    average = [w.copy() for w in steps[0]]
    for weights in steps[1:]:
        average = [momentum * a + (1 - momentum) * w for a, w in zip(average, weights)]
    return average


def _tiny():
    return keras_vit.ViTImageClassifier(image_size=8, patch_size=4, hidden_size=8,
                                        num_layers=1, num_heads=2, mlp_dim=16, num_classes=3,
                                        head_kernel_initializer="glorot_uniform")


def test_fit_leaves_the_polyak_average_in_the_model():
    model = _tiny()
    rng = np.random.default_rng(0)
    x, y = rng.uniform(-1, 1, (32, 8, 8, 3)).astype("float32"), rng.integers(0, 3, 32)
    optimizer = training.finetuning_optimizer(8, learning_rate=0.3, warmup_steps=1,
                                              use_ema=True, ema_momentum=0.6)
    model.compile(optimizer, training.classification_loss())
    trajectory = _Trajectory()
    model.fit(x, keras.ops.one_hot(y, 3), batch_size=4, epochs=1, callbacks=[trajectory],
              shuffle=False, verbose=0)
    assert len(trajectory.steps) == 8
    final = [_np(v) for v in model.trainable_weights]
    for got, average in zip(final, _polyak(trajectory.steps, 0.6)):
        np.testing.assert_allclose(got, average, rtol=1e-5, atol=1e-6)
    # the average is not the last step's weights: the check above can fail
    assert max(np.abs(a - b).max() for a, b in zip(final, trajectory.steps[-1])) > 1e-3


def test_finetune_evaluates_and_saves_the_averaged_weights(tmp_path, monkeypatch):
    trajectories = []
    epoch_log = run_files.EpochLog

    class RecordingLog(epoch_log, _Trajectory):
        def __init__(self, *args, **kwargs):
            epoch_log.__init__(self, *args, **kwargs)
            self.steps = []
            trajectories.append(self)

    monkeypatch.setattr(run_files, "EpochLog", RecordingLog)
    out = str(tmp_path / "ema")
    config = dict(checkpoint=fixture_path("vit_tiny_token_norep.npz"), dataset="digits",
                  image_size=32, batch_size=16, steps=6, eval_every=3, warmup_steps=1,
                  learning_rate=0.1, label_smoothing=0.0, use_ema=True, ema_momentum=0.5,
                  train_examples=96, test_examples=64, output=out, verbose=0)
    metrics = finetune.finetune(config)
    (trajectory,) = trajectories
    assert len(trajectory.steps) == 6
    saved = keras.saving.load_model(os.path.join(out, run_files.MODEL), compile=False)
    average = _polyak(trajectory.steps, 0.5)
    for got, expected in zip(saved.trainable_weights, average):
        np.testing.assert_allclose(_np(got), expected, rtol=1e-5, atol=1e-6)

    test = data.load("digits", "test", batch_size=256, image_size=32, max_examples=64,
                     channels=3)
    saved.compile(loss=training.classification_loss(), metrics=["accuracy"])
    loss = saved.evaluate(test, return_dict=True, verbose=0)["loss"]
    assert loss == pytest.approx(metrics["test_loss"], rel=1e-5)
    with open(os.path.join(out, run_files.METRICS)) as f:
        assert json.load(f)["test_loss"] == metrics["test_loss"]
    # the last step's own weights give another loss, so the comparison above can fail
    for variable, weights in zip(saved.trainable_weights, trajectory.steps[-1]):
        variable.assign(weights)
    assert saved.evaluate(test, return_dict=True, verbose=0)["loss"] != pytest.approx(
        metrics["test_loss"], rel=1e-3)


@pytest.mark.parametrize("recipe", ["pretraining", "finetuning"])
def test_global_clipnorm_of_our_optimizers_clips(recipe):
    # constant learning rate 1 (no warmup, linear "decay" from 1 to 1), no weight decay
    if recipe == "pretraining":
        optimizer = training.pretraining_optimizer(10, learning_rate=1.0, warmup_steps=0,
                                                   decay="linear", end_learning_rate=1.0,
                                                   weight_decay=0.0)
    else:
        optimizer = training.finetuning_optimizer(10, learning_rate=1.0, warmup_steps=0,
                                                  decay="linear")
    assert optimizer.global_clipnorm == 1.0
    a, b = keras.Variable(np.zeros((2,), "float32")), keras.Variable(np.zeros((1,), "float32"))
    # global norm 130 over two variables: clipped to norm 1 as a whole, (30, 40, 120) / 130
    # (clipping each variable on its own would give (0.6, 0.8) and 1)
    gradients = [np.array([30.0, 40.0], "float32"), np.array([120.0], "float32")]
    clipped = np.array([30.0, 40.0, 120.0]) / 130.0
    optimizer.apply_gradients([(keras.ops.convert_to_tensor(g), v)
                               for g, v in zip(gradients, (a, b))])
    step = np.concatenate([_np(a), _np(b)])
    if recipe == "pretraining":
        # Adam's first step is lr * g_hat / (|g_hat| + eps) per coordinate: the sign, whatever
        # the scale; clipping shows in the moments, which hold the clipped gradient
        np.testing.assert_allclose(step, [-1.0, -1.0, -1.0], atol=1e-5)
        moments = [_np(v) for v in optimizer.variables if tuple(v.shape) == (2,)]
        assert any(np.allclose(m, 0.1 * clipped[:2], rtol=1e-5) for m in moments), moments
    else:
        np.testing.assert_allclose(step, -clipped, rtol=1e-5)
