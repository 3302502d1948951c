import inspect
import math
import warnings

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit import training
from keras_vit.training import (
    AdjustableWarmupDecay,
    WarmupDecay,
    WarmupLinearDecay,
    warmup_schedule,
)


def official(step, base, total, warmup, decay, end=1e-5):
    """vit_jax create_learning_rate_schedule, written out."""
    progress = min(max((step - warmup) / (total - warmup), 0.0), 1.0)
    if decay == "cosine":
        lr = base * 0.5 * (1.0 + math.cos(math.pi * progress))
    else:
        lr = end + (base - end) * (1.0 - progress)
    return lr * min(1.0, step / warmup) if warmup else lr


@pytest.mark.parametrize("decay", ["cosine", "linear"])
@pytest.mark.parametrize("warmup", [0, 50])
def test_schedule_matches_official_formula(decay, warmup):
    schedule = warmup_schedule(3e-2, total_steps=400, warmup_steps=warmup, decay=decay)
    for step in (0, 1, 25, 49, 50, 51, 100, 225, 399, 400, 500):
        got = float(keras.ops.convert_to_numpy(schedule(step)))
        assert got == pytest.approx(official(step, 3e-2, 400, warmup, decay), rel=1e-5, abs=1e-9)


def test_cosine_equals_keras_builtin_and_both_forms_serialise():
    cosine = warmup_schedule(1.0, 10, 2)
    assert isinstance(cosine, WarmupDecay) and cosine.decay == "cosine"
    builtin = keras.optimizers.schedules.CosineDecay(0.0, 8, warmup_target=1.0, warmup_steps=2)
    for step in range(12):
        assert float(cosine(step)) == pytest.approx(float(builtin(step)), rel=1e-6, abs=1e-9)
    linear = warmup_schedule(1e-3, 100, 10, decay="linear", end_learning_rate=1e-6)
    assert isinstance(linear, WarmupLinearDecay)
    for schedule in (cosine, linear):
        restored = keras.optimizers.schedules.deserialize(
            keras.optimizers.schedules.serialize(schedule))
        assert type(restored) is type(schedule)
        assert restored.get_config() == schedule.get_config()
        assert float(restored(6)) == pytest.approx(float(schedule(6)))


def test_schedules_never_wait_for_the_device(monkeypatch):
    """A train step must not wait on its schedule. Two things make a step wait: a branch on the
    step (Keras' CosineDecay branches with ops.cond, which torch answers by reading the step
    back), and on Keras' torch backend a Python number made into a device tensor (a copy that
    waits for the device: ops.minimum(1.0, x), ops.clip(x, 0.0, 1.0)). Both are counted while
    the schedules run: reads of a tensor as a Python value on every backend, and on torch the
    Python numbers made into tensors."""
    events = []

    def counting(name, call):
        def counted(*args, **kwargs):
            if name != "as_tensor" or isinstance(args[0], (bool, int, float)):
                events.append(name)
            return call(*args, **kwargs)
        return counted

    tensor_type = type(keras.ops.convert_to_tensor(1.0))
    targets = [(tensor_type, n) for n in ("__bool__", "item", "__index__", "__int__",
                                          "__float__", "numpy") if hasattr(tensor_type, n)]
    if keras.backend.backend() == "torch":
        import torch

        targets.append((torch, "as_tensor"))
    step = keras.Variable(3, dtype="int64", trainable=False)
    ours = [warmup_schedule(1.0, 10, 2), warmup_schedule(1.0, 10, 2, decay="linear"),
            warmup_schedule(1.0, 10), AdjustableWarmupDecay(1.0, 10, 2),
            AdjustableWarmupDecay(1.0, 10, 0, decay="linear")]
    builtin = keras.optimizers.schedules.CosineDecay(0.0, 8, warmup_target=1.0, warmup_steps=2)
    counts = []
    for schedule in (*ours, builtin):
        events.clear()
        for owner, name in targets:
            monkeypatch.setattr(owner, name, counting(name, getattr(owner, name)))
        value = schedule(step.value)
        monkeypatch.undo()
        counts.append(len(events))
        assert float(value) == pytest.approx(float(schedule(3)))
    assert counts[:-1] == [0] * len(ours)
    if keras.backend.backend() == "torch":
        assert counts[-1] > 0  # the builtin's ops.cond waits: the count can fail


def test_schedule_bad_inputs():
    with pytest.raises(ValueError, match="warmup_steps"):
        warmup_schedule(1e-3, 100, 100)
    with pytest.raises(ValueError, match="total_steps"):
        warmup_schedule(1e-3, 0)
    with pytest.raises(ValueError, match="Unknown decay"):
        warmup_schedule(1e-3, 100, decay="step")


@pytest.mark.parametrize("decay", ["cosine", "linear"])
@pytest.mark.parametrize("warmup", [0, 50])
def test_an_adjustable_schedule_never_adjusted_is_the_official_one(decay, warmup):
    schedule = AdjustableWarmupDecay(3e-2, total_steps=400, warmup_steps=warmup, decay=decay)
    steps = np.array([0, 1, 25, 49, 50, 51, 100, 225, 399, 400, 500])
    got = keras.ops.convert_to_numpy(schedule(steps))
    want = [official(step, 3e-2, 400, warmup, decay) for step in steps]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize("decay", ["cosine", "linear"])
@pytest.mark.parametrize("new_total", [300, 700])
def test_adjusting_the_end_keeps_the_rate_and_ends_the_decay_there(decay, new_total):
    schedule = AdjustableWarmupDecay(1.0, total_steps=500, warmup_steps=50, decay=decay,
                                     end_learning_rate=0.0)
    before = float(keras.ops.convert_to_numpy(schedule(200)))
    schedule.adjust(200, new_total)
    rates = keras.ops.convert_to_numpy(schedule(np.arange(200, new_total + 50)))
    assert rates[0] == pytest.approx(before, rel=1e-6)  # no jump where it moved
    assert np.all(np.diff(rates) <= 1e-7)  # and never a rise
    assert rates[new_total - 200] == pytest.approx(0.0, abs=1e-7) == rates[-1]
    assert schedule.end_step == new_total
    clone = AdjustableWarmupDecay.from_config(schedule.get_config())  # what model.keras holds
    np.testing.assert_allclose(keras.ops.convert_to_numpy(clone(np.arange(200, new_total))),
                               rates[:new_total - 200], rtol=1e-6, atol=1e-9)


def test_adjusting_in_the_warmup_is_the_schedule_of_the_new_length():
    schedule = AdjustableWarmupDecay(1.0, total_steps=500, warmup_steps=100)
    schedule.adjust(40, 900)
    steps = np.arange(0, 1000, 7)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(schedule(steps)),
                               [official(t, 1.0, 900, 100, "cosine") for t in steps],
                               rtol=1e-5, atol=1e-7)


def test_adjustable_schedule_bad_inputs():
    with pytest.raises(ValueError, match="warmup_steps"):
        AdjustableWarmupDecay(1e-3, 100, 100)
    with pytest.raises(ValueError, match="Unknown decay"):
        AdjustableWarmupDecay(1e-3, 100, decay="step")


def _bias_fit(optimizer, adjust_after, to_steps):
    """Steps of rate ``lr`` on a loss whose gradient is constant move the bias by ``-lr`` each
    (Adam normalises the gradient): the bias after a ``fit`` is minus the sum of the rates
    applied. The schedule's end moves to ``to_steps`` after epoch ``adjust_after``."""
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer=optimizer, loss="mean_absolute_error")  # targets far below

    class Adjust(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch + 1 == adjust_after:
                optimizer.schedule.adjust((epoch + 1) * 4, to_steps)

    model.fit(np.zeros((32, 3), "float32"), np.full((32, 1), -1e3, "float32"), batch_size=8,
              epochs=4, verbose=0, shuffle=False, callbacks=[Adjust()])
    return float(keras.ops.convert_to_numpy(model.layers[0].bias)[0]), model


def test_the_compiled_step_reads_the_adjusted_schedule_and_saves_it(tmp_path):
    optimizer = training.pretraining_optimizer(40, learning_rate=1.0, warmup_steps=4,
                                               decay="linear", end_learning_rate=0.0,
                                               weight_decay=0.0, global_clipnorm=None,
                                               adjustable=True)
    assert isinstance(optimizer, training.AdjustableAdamW)
    assert isinstance(optimizer.schedule, training.AdjustableWarmupDecay)
    bias, model = _bias_fit(optimizer, adjust_after=2, to_steps=16)
    # warmup 0, .25, .5, .75; 1 then down to 36/36 -> 33/36 of the way; from step 8 the rest
    # over 8 steps: 8/9 (1 - k/8) for k = 0..7
    rates = [0, .25, .5, .75, 1, 35 / 36, 34 / 36, 33 / 36] + [8 / 9 * (1 - k / 8)
                                                               for k in range(8)]
    assert bias == pytest.approx(-sum(rates), rel=1e-5)  # a schedule read once: 11.67
    path = str(tmp_path / "model.keras")
    model.save(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. Keras skipping the optimizer's variables
        restored = keras.saving.load_model(path)
    assert int(keras.ops.convert_to_numpy(restored.optimizer.iterations)) == 16
    assert restored.optimizer.schedule.get_config() == optimizer.schedule.get_config()


def test_pretraining_optimizer_settings():
    opt = training.pretraining_optimizer(1000, learning_rate=1e-3, warmup_steps=100)
    assert isinstance(opt, keras.optimizers.AdamW)
    assert (opt.beta_1, opt.beta_2, opt.epsilon) == (0.9, 0.999, 1e-8)
    assert opt.weight_decay == 0.1 and opt.global_clipnorm == 1.0
    assert isinstance(opt._learning_rate, WarmupLinearDecay)


def test_weight_decay_is_decoupled_and_scaled_by_the_scheduled_lr():
    # With a zero gradient Adam's step is 0, so only the decay acts: p -= lr_t * wd * p.
    opt = training.pretraining_optimizer(10, learning_rate=0.5, warmup_steps=0, decay="linear",
                                         end_learning_rate=0.5, weight_decay=0.1)
    var = keras.Variable(np.full((3,), 2.0, "float32"))
    opt.apply_gradients([(keras.ops.zeros((3,)), var)])
    np.testing.assert_allclose(keras.ops.convert_to_numpy(var), 2.0 - 0.5 * 0.1 * 2.0, rtol=1e-6)


def test_finetuning_optimizer_settings():
    opt = training.finetuning_optimizer(500, warmup_steps=10, use_ema=True, ema_momentum=0.99)
    assert isinstance(opt, training.TraceSGD) and opt.momentum_dtype == "bfloat16"
    assert opt.momentum == 0.9 and opt.global_clipnorm == 1.0
    assert opt.weight_decay is None and opt.use_ema and opt.ema_momentum == 0.99
    assert opt.gradient_accumulation_steps is None
    assert isinstance(opt._learning_rate, WarmupDecay)
    keras_form = training.finetuning_optimizer(500, warmup_steps=10, momentum_form="keras",
                                               gradient_accumulation_steps=4)
    assert isinstance(keras_form, keras.optimizers.SGD) and not keras_form.nesterov
    assert keras_form.gradient_accumulation_steps == 4
    clone = training.AccumulatingSGD.from_config(keras_form.get_config())
    assert clone.gradient_accumulation_steps == 4 and clone.momentum == 0.9
    with pytest.raises(ValueError, match="momentum_form"):
        training.finetuning_optimizer(500, warmup_steps=10, momentum_form="nesterov")
    with pytest.raises(ValueError, match="gradient_accumulation_steps must be a positive integer"):
        training.finetuning_optimizer(500, warmup_steps=10, gradient_accumulation_steps=0)


def test_trace_sgd_round_trips_and_counts_updates_when_accumulating():
    opt = training.finetuning_optimizer(10, learning_rate=0.1, warmup_steps=2,
                                        gradient_accumulation_steps=3, global_clipnorm=None)
    clone = training.TraceSGD.from_config(opt.get_config())
    assert (clone.momentum_dtype, clone.gradient_accumulation_steps) == ("bfloat16", 3)
    w = keras.Variable(np.zeros(2, "float32"))
    rates = []
    for _ in range(9):  # 3 updates of 3 micro-batches
        rates.append(float(keras.ops.convert_to_numpy(opt.learning_rate)))
        opt.apply([keras.ops.ones((2,))], [w])
    # the schedule reads the update count: warmup 0, 0.05, 0.1, each for all 3 micro-batches
    np.testing.assert_allclose(rates, [0.0] * 3 + [0.05] * 3 + [0.1] * 3, atol=1e-7)
    # update 1 at rate 0 moves only the trace; update 2: 0.05 * (1 + 0.9 * 1);
    # update 3: 0.1 * (1 + 0.8984375 * 1.8984375) with the trace and 0.9 in bfloat16
    expected = -(0.05 * (1 + 0.8984375) + 0.1 * (1 + 0.8984375 * 1.8984375))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(w), [expected] * 2, rtol=1e-6)


def test_label_smoothing_loss():
    loss = training.classification_loss(0.1)
    assert loss.label_smoothing == 0.1 and loss.from_logits


def _tiny(**kwargs):
    config = dict(image_size=16, patch_size=4, hidden_size=16, num_layers=1, num_heads=2,
                  mlp_dim=32, num_classes=10, num_channels=1)
    config.update(kwargs)
    model = keras_vit.ViTImageClassifier(**config)
    for v in model.weights:  # non-zero everything, the head included
        v.assign(np.random.default_rng(len(v.path)).normal(size=v.shape).astype("float32"))
    return model


def test_prepare_finetuning_puts_a_zero_head_on_the_same_backbone():
    model = _tiny(representation_size=8, head_bias_init=-10.0)
    tuned = training.prepare_finetuning(model, 5)
    assert tuned.config.head == keras_vit.models.description.Head(num_classes=5)
    assert tuned.backbone is model.backbone  # paper Sec. 3.2: a new head, the same backbone
    head = tuned.get_layer("head")
    assert not np.any(head.get_weights()[0]) and not np.any(head.get_weights()[1])
    images = np.random.default_rng(0).uniform(-1, 1, (2, 16, 16, 1)).astype("float32")
    np.testing.assert_array_equal(tuned.predict(images, verbose=0), np.zeros((2, 5)))
    kept = training.prepare_finetuning(model, 5, keep_pre_logits=True)
    assert kept.config.head.representation_size == 8
    np.testing.assert_array_equal(kept.get_layer("pre_logits").get_weights()[0],
                                  model.get_layer("pre_logits").get_weights()[0])
    # a backbone alone gets a head too
    assert training.prepare_finetuning(model.backbone, 4).config.head.num_classes == 4


def test_prepare_finetuning_at_a_new_resolution():
    model = _tiny()
    tuned = training.prepare_finetuning(model, 3, image_size=32)
    assert tuned.config.image_size == (32, 32) and tuned.backbone is not model.backbone
    for name in ("embedding", "cls", "encoderblock_0", "encoder_norm"):
        for a, b in zip(model.get_layer(name).get_weights(), tuned.get_layer(name).get_weights()):
            np.testing.assert_array_equal(a, b)
    assert training.prepare_finetuning(model, 3, image_size=16).backbone is model.backbone
    with pytest.raises(ValueError,
                       match=r"new image height \(30\) is not a multiple of the patch size"):
        training.prepare_finetuning(model, 3, image_size=30)


@pytest.mark.parametrize("image_size", [32, None])
def test_prepare_finetuning_a_bit_model_at_a_new_resolution(image_size):
    model = keras_vit.ResNetImageClassifier(block_units=[1], width_factor=0.5, num_classes=10,
                                            image_size=image_size,
                                            head_kernel_initializer="glorot_uniform")
    tuned = training.prepare_finetuning(model, 3, image_size=64)
    assert tuned.config.image_size == (64, 64) and tuned.config.head.num_classes == 3
    assert not np.any(tuned.get_layer("head").get_weights()[0])
    for a, b in zip(model.get_layer("block1").get_weights(),
                    tuned.get_layer("block1").get_weights()):
        np.testing.assert_array_equal(a, b)


def test_the_fine_tuning_constants_are_written_once():
    """``Task.compile``'s defaults and the official step's are the same numbers: one table."""
    from keras_vit.models.habits import FINE_TUNING

    defaults = {name: parameter.default for name, parameter
                in inspect.signature(training.finetuning_optimizer).parameters.items()}
    constants = {name: value for name, value in FINE_TUNING.items() if name != "total_steps"}
    assert {name: defaults[name] for name in constants} == constants  # the length is required
    assert defaults["total_steps"] is inspect.Parameter.empty
