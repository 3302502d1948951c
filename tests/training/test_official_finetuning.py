"""The fine-tuning step against the official vit_jax trainer (tests/fixtures/official README):
``prepare_finetuning`` + ``finetuning_optimizer`` + ``fit`` reproduce the parameters after every
update of ``make_update_fn`` with the optimizer of ``train_and_evaluate``."""

import json

import keras
import numpy as np
import pytest

from keras_vit.checkpoints import official
from keras_vit.training import (
    classification_loss,
    finetuning_optimizer,
    prepare_finetuning,
)
from tests.conftest import fixture_path

# Worst error relative to each tensor's largest value (README of the fixtures, docs/training.md):
# float32 momentum to 1e-5, the bfloat16 trace to 1e-4 (a rounding of the trace that falls the
# other way on another backend moves a parameter by lr * 2^-8 |m|).
TOLERANCE = {"finetune_sgd_f32": 1e-5, "finetune_sgd_bf16": 1e-4, "finetune_sgd_linear": 1e-4,
             "finetune_sgd_gap_8dev": 1e-4}


def load_case(name):
    with np.load(fixture_path(f"{name}.npz")) as f:
        case = {k: f[k] for k in f.files}
    case["meta"] = json.loads(str(case["meta"]))
    return case


def params(case, prefix):
    return {k[len(prefix):]: v for k, v in case.items() if k.startswith(prefix)}


class Snapshots(keras.callbacks.Callback):
    """The model's parameters (official layout) after every ``every``-th batch: one update."""

    def __init__(self, every):
        super().__init__()
        self.every, self.taken = every, []

    def on_train_batch_end(self, batch, logs=None):
        if (batch + 1) % self.every == 0:
            if keras.backend.backend() == "jax":
                self.model.jax_state_sync()
            self.taken.append(official.export(official.table_for(self.model)))


def finetune_like_official(case, **optimizer_options):
    meta = case["meta"]
    pretrained = official.load(fixture_path(meta["pretrained"]))
    model = prepare_finetuning(pretrained, meta["num_classes"], image_size=meta["image_size"])
    accumulation = meta["accum_steps"]
    options = dict(learning_rate=meta["base_lr"], warmup_steps=meta["warmup_steps"],
                   decay=meta["decay_type"], gradient_accumulation_steps=accumulation,
                   momentum=meta["momentum"], global_clipnorm=meta["grad_norm_clip"],
                   momentum_dtype=meta["momentum_accumulator_dtype"])
    options.update(optimizer_options)
    model.compile(optimizer=finetuning_optimizer(meta["steps"], **options),
                  loss=classification_loss())
    images, labels = case["images"], case["labels"]
    x = images.reshape(-1, *images.shape[2:])
    y = labels.reshape(-1, labels.shape[-1])
    snapshots = Snapshots(accumulation)
    model.fit(x, y, batch_size=meta["batch_size"] // accumulation, shuffle=False, epochs=1,
              verbose=0, callbacks=[snapshots])
    return model, snapshots.taken


def worst_errors(case, taken):
    """Per update, the worst parameter error relative to that tensor's largest value over the
    run (a tensor that starts at zero, the head, is measured on the scale it reaches)."""
    steps = case["meta"]["steps"]
    scale = {k: max(float(np.max(np.abs(case[f"{p}/{k}"])))
                    for p in ["init", *(f"step{s}" for s in range(1, steps + 1))])
             for k in params(case, "init/")}
    worst = []
    for step, snapshot in enumerate(taken, start=1):
        expected = params(case, f"step{step}/")
        assert sorted(snapshot) == sorted(expected)
        errors = {k: float(np.max(np.abs(snapshot[k] - v))) / scale[k]
                  for k, v in expected.items()}
        key = max(errors, key=errors.get)
        worst.append((errors[key], key))
    return worst


@pytest.mark.parametrize("name", sorted(TOLERANCE))
def test_every_update_equals_the_official_step(name):
    case = load_case(name)
    model, taken = finetune_like_official(case)
    assert len(taken) == case["meta"]["steps"]
    for step, (error, key) in enumerate(worst_errors(case, taken), start=1):
        assert error < TOLERANCE[name], (step, key, error)


_DATA_PARALLEL = """
import json, keras
from keras_vit import distribution
from tests.training.test_official_finetuning import finetune_like_official, load_case, worst_errors
distribution.data_parallel()
case = load_case("finetune_sgd_gap_8dev")
model, taken = finetune_like_official(case)
print(json.dumps({"devices": distribution.num_replicas(),
                  "worst": [e for e, _ in worst_errors(case, taken)]}))
"""


@pytest.mark.skipif(keras.backend.backend() != "jax",
                    reason="keras.distribution's DataParallel runs under KERAS_BACKEND=jax")
def test_data_parallel_on_eight_devices_equals_the_official_eight_device_step():
    """The fixture is the official pmap step on 8 host devices (each device accumulates over its
    share and the gradients are averaged); here Keras shards each micro-batch over 8 devices."""
    from tests.test_distribution import _run_script

    out = _run_script(_DATA_PARALLEL, "jax",
                      {"XLA_FLAGS": "--xla_force_host_platform_device_count=8"})
    assert out["devices"] == 8
    assert len(out["worst"]) == 5 and max(out["worst"]) < TOLERANCE["finetune_sgd_gap_8dev"]
