"""``keras-vit train --time-budget``: the plan fills the budget, is recorded, and is honest.

No test here depends on how fast the machine is: plans are checked against the costs they were
made from (given, or measured and recorded), never against a wall clock.
"""

import json
import math
import os
import time

import keras
import numpy as np
import pytest

from keras_vit import create_model
from keras_vit.app import cli, configs, planning, run_files, train
from keras_vit.training.recipes import classification_loss, pretraining_optimizer

TINY = ["--train-examples", "256", "--test-examples", "64", "--batch-size", "64",
        "--set", "patch_size=7", "--set", "hidden_size=16", "--set", "num_layers=1",
        "--set", "num_heads=2", "--set", "mlp_dim=32", "--verbose", "0"]


def _costs(step=0.05, **changes):
    values = dict(step_seconds=step, compile_seconds=4.0, eval_seconds=1.5,
                  eval_compile_seconds=1.0, epoch_overhead_seconds=0.2, steps_measured=30)
    return planning.Costs(**dict(values, **changes))


@pytest.mark.parametrize("budget, elapsed, step, per_epoch, every", [
    (600, 12.0, 0.05, 234, 4), (600, 30.0, 0.09, 234, 4), (400, 5.0, 0.02, 234, 1),
    (20, 3.0, 0.001, 4, 4), (3600, 60.0, 1.3, 50, 10)])
def test_the_plan_is_the_most_epochs_that_fit(budget, elapsed, step, per_epoch, every):
    costs = _costs(step)
    evaluations = train._evaluations(configs.TrainConfig(validate_every=every))
    plan = planning.plan_epochs(budget, elapsed_seconds=elapsed, costs=costs,
                                steps_per_epoch=per_epoch, evaluations=evaluations)
    usable = budget * (1 - planning.MARGIN)
    options = dict(elapsed_seconds=elapsed, costs=costs, steps_per_epoch=per_epoch,
                   evaluations=evaluations)
    assert plan.expected_seconds == planning.expected_seconds(plan.epochs, **options) <= usable
    assert planning.expected_seconds(plan.epochs + 1, **options) > usable
    assert plan.steps == plan.epochs * per_epoch and plan.evaluations == evaluations(plan.epochs)
    json.dumps(plan.to_dict())  # recorded in metrics.json


def test_the_evaluations_are_the_validations_and_the_final_one():
    count = train._evaluations(configs.TrainConfig(validate_every=4))
    assert [count(e) for e in (1, 4, 5, 19)] == [2, 2, 3, 6]
    assert train._evaluations(configs.TrainConfig(validate=False))(19) == 1


def test_a_budget_too_short_for_one_epoch_names_the_minimum():
    with pytest.raises(ValueError, match=r"--time-budget 10 s is too short.* at least 1\d s"):
        planning.plan_epochs(10, elapsed_seconds=2.0, costs=_costs(0.01), steps_per_epoch=100,
                             evaluations=lambda epochs: 1)


@pytest.mark.parametrize("budget", [0, -5, math.nan, math.inf, "ten"])
def test_bad_budgets_are_refused_before_any_work(budget, tmp_path):
    with pytest.raises(ValueError, match="--time-budget must be a positive, finite number"):
        train.train({"time_budget": budget, "output": str(tmp_path)})
    assert not os.listdir(tmp_path)


def test_bad_budgets_on_the_command_line(capsys):
    assert cli.main(["train", "--time-budget", "-1"]) == 1
    assert "--time-budget must be a positive" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["train", "--time-budget", "ten"])
    assert cli.main(["train", "--epochs", "0"]) == 1
    assert "--epochs must be at least 1" in capsys.readouterr().err


def _endless(shape, classes=10, batch=8):
    rng = np.random.default_rng(0)
    while True:
        labels = np.eye(classes, dtype="float32")[rng.integers(0, classes, batch)]
        yield rng.normal(size=(batch, *shape)).astype("float32"), labels


def test_measuring_leaves_the_model_as_it_was(monkeypatch, tmp_path):
    monkeypatch.setattr(planning, "MEASURED_STEPS", 4)
    model = create_model("ViT-Ti/7", image_size=14, num_classes=10, num_channels=1,
                         hidden_size=8, num_layers=1, num_heads=2, mlp_dim=16)
    model.compile(optimizer=pretraining_optimizer(100, learning_rate=0.1, warmup_steps=0),
                  loss=classification_loss(0.1))
    before = [keras.ops.convert_to_numpy(v) for v in model.variables]
    folders = []
    costs = planning.measure_costs(model, _endless((14, 14, 1)), _endless((14, 14, 1)), 10,
                                   epoch_end=lambda m, folder: folders.append(folder))
    after = [keras.ops.convert_to_numpy(v) for v in model.variables]
    assert all(np.array_equal(a, b) for a, b in zip(before, after))  # lr 0.1 moved them
    assert costs.steps_measured == 4 and costs.step_seconds > 0 and costs.eval_seconds > 0
    assert costs.measure_seconds >= 4 * costs.step_seconds
    assert len(folders) == 2 and not os.path.exists(folders[0])  # a scratch folder, removed


def test_train_plans_from_the_measured_costs_and_records_the_plan(monkeypatch, tmp_path, capsys):
    # Costs of an epoch of 300 s: the plan, not this machine, sets the length, so the test is
    # quick whatever the load; the measurement itself is tested above.
    measured = []

    def measure(model, train_batches, test_batches, test_batch_count, epoch_end):
        measured.append(test_batch_count)
        return _costs(step=75.0, compile_seconds=0.0, eval_seconds=0.0,
                      eval_compile_seconds=0.0, epoch_overhead_seconds=0.0)

    monkeypatch.setattr(planning, "measure_costs", measure)
    out = str(tmp_path / "run")
    assert cli.main(["train", *TINY, "--time-budget", "1000", "--output", out]) == 0
    assert "Plan: 75000.0 ms a training step" in capsys.readouterr().out
    with open(os.path.join(out, run_files.METRICS)) as f:
        metrics = json.load(f)
    plan = metrics["plan"]
    assert measured == [1] and plan["budget_seconds"] == 1000 and plan["steps_per_epoch"] == 4
    assert plan["epochs"] == 950 // 300 - (plan["elapsed_seconds"] + 3 > 950 - 900)  # 3, or 2
    assert metrics["epochs_completed"] == plan["epochs"]
    assert metrics["optimizer_iterations"] == plan["steps"] == 4 * plan["epochs"]
    assert metrics["config"]["epochs"] is None and metrics["config"]["time_budget"] == 1000
    with open(os.path.join(out, run_files.RUN_CONFIG)) as f:
        assert json.load(f)["epochs"] == plan["epochs"]  # what a resumed run keeps


def test_a_fixed_length_that_will_overrun_is_announced(capsys):
    warning = planning.OverrunWarning(budget_seconds=10, started=time.time() - 8, epochs=40)
    for epoch in range(3):
        warning.on_epoch_begin(epoch)
        warning.epoch_start -= 1.0  # epochs of a second: 8 + 38 s, over the 10 s
        warning.on_epoch_end(epoch)
    assert capsys.readouterr().out.count("--epochs 40 will take about 4") == 1
