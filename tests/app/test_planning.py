"""``keras-vit train --time-budget``: the plan fills the budget, is recorded, and is honest.

No test here depends on how fast the machine is: plans are checked against the costs they were
made from (given, or measured and recorded), never against a wall clock.
"""

import json
import math
import os
import re
import time
import types

import keras
import numpy as np
import pytest

from keras_vit import create_model
from keras_vit.app import cli, configs, planning, run_files, train
from keras_vit.training.recipes import classification_loss, pretraining_optimizer
from keras_vit.training.schedules import AdjustableWarmupDecay

TINY = ["--train-examples", "256", "--test-examples", "64", "--batch-size", "64",
        "--model", "small-vit", "--set", "patch_size=7", "--set", "hidden_size=16",
        "--set", "num_layers=1", "--set", "num_heads=2", "--set", "mlp_dim=32", "--verbose", "0"]


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


def _planned_epochs_of(seconds, monkeypatch, step=75.0):
    """Costs of an epoch of 4 steps of ``step`` seconds for the plan, and epochs of ``seconds`` on
    the re-plans' clock: the plan and the fake clock, not this machine, set the length, so the
    tests are quick whatever the load. Returns the counts of test batches measured."""
    measured, offset = [], [0.0]

    def measure(model, train_batches, test_batches, test_batch_count, epoch_end):
        measured.append(test_batch_count)
        return _costs(step=step, compile_seconds=0.0, eval_seconds=0.0,
                      eval_compile_seconds=0.0, epoch_overhead_seconds=0.0)

    def on_epoch_end(replanner, epoch, logs=None):
        offset[0] += seconds  # the epoch just trained took this long
        end_of_epoch(replanner, epoch, logs)

    end_of_epoch = planning.Replanner.on_epoch_end
    monkeypatch.setattr(planning, "measure_costs", measure)
    monkeypatch.setattr(planning.Replanner, "clock", staticmethod(lambda: time.time() + offset[0]))
    monkeypatch.setattr(planning.Replanner, "on_epoch_end", on_epoch_end)
    return measured


def _first_plan(plan):
    """The epochs of a 1000 s budget with epochs of 300 s: 950 // 300, or 2 when more than 47 s
    went before training (``elapsed_seconds`` and 3 s of saving)."""
    return 950 // 300 - (plan["elapsed_seconds"] + 3 > 950 - 900)


@pytest.mark.fashion_mnist
def test_train_plans_from_the_measured_costs_and_records_the_plan(monkeypatch, tmp_path, capsys):
    measured = _planned_epochs_of(300.0, monkeypatch)  # as planned: no re-plan
    out = str(tmp_path / "run")
    assert cli.main(["train", *TINY, "--time-budget", "1000", "--output", out]) == 0
    printed = capsys.readouterr().out
    assert "Plan: 75000.0 ms a training step" in printed and "Re-plan" not in printed
    with open(os.path.join(out, run_files.METRICS)) as f:
        metrics = json.load(f)
    plan = metrics["plan"]
    assert measured == [1] and plan["budget_seconds"] == 1000 and plan["steps_per_epoch"] == 4
    assert plan["epochs"] == _first_plan(plan)
    assert plan["replans"] == [] and plan["final_epochs"] == plan["epochs"]
    assert f"Trained {plan['epochs']} epochs (planned {plan['epochs']}, not re-planned)" in printed
    assert metrics["epochs_completed"] == plan["epochs"]
    assert metrics["optimizer_iterations"] == plan["steps"] == 4 * plan["epochs"]
    assert metrics["config"]["epochs"] is None and metrics["config"]["time_budget"] == 1000
    with open(os.path.join(out, run_files.RUN_CONFIG)) as f:
        recorded = json.load(f)
    assert recorded["epochs"] == plan["epochs"] and recorded["replanned"]  # for a resumed run


@pytest.mark.fashion_mnist
@pytest.mark.backend_dependent  # the schedule's variables in each backend's compiled step
def test_epochs_faster_than_planned_lengthen_the_run_and_its_schedule(monkeypatch, tmp_path,
                                                                      capsys):
    # Epochs of 3000 s planned in a budget of 10000 s, and twice as fast: the seconds this
    # machine takes before training are far within one epoch.
    _planned_epochs_of(1500.0, monkeypatch, step=750.0)
    out = str(tmp_path / "run")
    assert cli.main(["train", *TINY, "--time-budget", "10000", "--output", out]) == 0
    printed = capsys.readouterr().out
    with open(os.path.join(out, run_files.METRICS)) as f:
        metrics = json.load(f)
    plan = metrics["plan"]
    assert plan["epochs"] == 3
    # after epoch 2 (3000 s): 4 more of 1500 s end at 9003 s, within 10000 less 5 % of the
    # 7000 s left; a 7th would end at 10503 s
    assert [(r["after_epoch"], r["epochs"]) for r in plan["replans"]] == [(2, 6)]
    # An epoch is 1500 s on the fake clock plus this machine's own seconds for it (a few on a
    # loaded machine), which the re-plan measures too.
    seconds = plan["replans"][0]["epoch_seconds"]
    assert 1500 <= seconds < 1560
    assert re.search(rf"Re-plan after epoch 2: 6 epochs, at {seconds:.2f} s an epoch \(planned "
                     r"3000\.00 s\), expected to end at 9\d\d\d s of the 10000 s budget\.",
                     printed)
    assert "Trained 6 epochs (planned 3; re-planned once, last to 6 after epoch 2)." in printed
    assert plan["final_epochs"] == metrics["epochs_completed"] == 6
    assert [r["epoch"] for r in metrics["history"] if "val_accuracy" in r] == [4, 6]
    # The saved optimizer carries the schedule as trained: it ends at the last step, at 0.
    model = keras.saving.load_model(os.path.join(out, run_files.MODEL))
    optimizer = model.optimizer
    assert int(keras.ops.convert_to_numpy(optimizer.iterations)) == 24
    assert optimizer.schedule.end_step == 24
    assert float(keras.ops.convert_to_numpy(optimizer.learning_rate)) == pytest.approx(0.0)


class Killed(Exception):
    pass


@pytest.mark.fashion_mnist
@pytest.mark.backend_dependent  # the schedule's variables restored from each backend's backup
def test_a_resumed_run_ends_where_its_last_replan_did(monkeypatch, tmp_path, capsys):
    _planned_epochs_of(1500.0, monkeypatch, step=750.0)  # as above: 3 epochs, then 6
    replanned = planning.Replanner.on_epoch_end

    def killed_after_epoch_3(replanner, epoch, logs=None):
        replanned(replanner, epoch, logs)
        if epoch + 1 == 3:
            raise Killed  # before epoch 3's backup: the run resumes from epoch 2's

    monkeypatch.setattr(planning.Replanner, "on_epoch_end", killed_after_epoch_3)
    out = str(tmp_path / "run")
    argv = ["train", *TINY, "--time-budget", "10000", "--output", out]
    with pytest.raises(Killed):
        cli.main(argv)
    assert len(run_files.read_history(out)) == 2
    monkeypatch.setattr(planning.Replanner, "on_epoch_end", replanned)
    assert cli.main(argv) == 0
    with open(os.path.join(out, run_files.METRICS)) as f:
        metrics = json.load(f)
    assert metrics["plan"] == {"epochs": 3, "resumed": True}  # the first start's plan
    # the length re-planned after epoch 2 came back with the backup's schedule
    assert [r["epoch"] for r in metrics["history"]] == [1, 2, 3, 4, 5, 6]
    assert metrics["resumed_from_epoch"] == 2 and metrics["optimizer_iterations"] == 24


def test_a_fixed_length_that_will_overrun_is_announced(capsys):
    warning = planning.OverrunWarning(budget_seconds=10, started=time.time() - 8, epochs=40)
    for epoch in range(3):
        warning.on_epoch_begin(epoch)
        warning.epoch_start -= 1.0  # epochs of a second: 8 + 38 s, over the 10 s
        warning.on_epoch_end(epoch)
    assert capsys.readouterr().out.count("--epochs 40 will take about 4") == 1


# A run re-planned on a fake clock: the machine, planned at 113.8 ms a step, 234 steps an
# epoch, 1.5 s an evaluation, 1 s to compile it, 0.3 s of writes after every epoch.
STEPS = 234
EVERY = 4


def _replanned_run(step_seconds, budget=600.0, elapsed=20.0, warmup=STEPS):
    """``(plan, end, rates)``: a run of ``step_seconds(epoch)`` a step planned and re-planned as
    ``fit`` and ``train`` drive the ``Replanner``: its end in seconds from the start (the final
    evaluation and the writes included) and the learning rate of every step it trained."""
    costs = _costs(step=0.1138, compile_seconds=4.0, eval_seconds=1.5, eval_compile_seconds=1.0,
                   epoch_overhead_seconds=0.3)
    config = configs.TrainConfig(validate_every=EVERY)
    plan = planning.plan_epochs(budget, elapsed_seconds=elapsed, costs=costs,
                                steps_per_epoch=STEPS, evaluations=train._evaluations(config))
    schedule = AdjustableWarmupDecay(1e-3, plan.steps, warmup)
    replanner = planning.Replanner(schedule, STEPS, train._validations(config), plan=plan)
    now = [elapsed]
    replanner.clock = lambda: now[0]
    replanner.set_model(types.SimpleNamespace(stop_training=False))
    rates = []
    for epoch in range(planning.GROWTH * plan.epochs):  # fit's epochs
        replanner.on_epoch_begin(epoch)
        steps = np.arange(epoch * STEPS, (epoch + 1) * STEPS)
        rates.extend(keras.ops.convert_to_numpy(schedule(steps)))
        now[0] += STEPS * step_seconds(epoch) + (costs.compile_seconds if epoch == 0 else 0.0)
        if epoch + 1 in replanner.validation_freq:
            replanner.on_test_begin()
            now[0] += 1.5 + (1.0 if len(replanner.evaluations) == 0 else 0.0)
            replanner.on_test_end()
        replanner.on_epoch_end(epoch)
        now[0] += 0.3  # the history and the backup, written after the re-plan
        if replanner.model.stop_training:
            break
    replanner.on_train_end()
    now[0] += 1.5 + 1.0 + planning.FINISH_SECONDS  # the final evaluation, compiled; the files
    assert len(rates) == plan.final_epochs * STEPS
    stopped_at_once = plan.replans and plan.replans[-1].after_epoch == plan.final_epochs
    assert stopped_at_once or schedule.end_step == len(rates)  # the decay ends with the run
    return plan, now[0], np.array(rates)


def _noisy(low, high, seed=0):
    rng = np.random.default_rng(seed)
    steps = rng.uniform(low, high, size=1000)
    return lambda epoch: steps[epoch]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_steps_faster_than_planned_fill_the_budget(seed):
    # The run: planned at 113.8 ms, its steps took 85-110 ms, and it ended at 86 %.
    plan, end, _ = _replanned_run(_noisy(0.085, 0.110, seed))
    assert plan.final_epochs > plan.epochs and plan.replans
    assert 0.95 * 600 <= end <= 600
    assert plan.replans[-1].expected_seconds <= 600
    lines = plan.describe().splitlines()  # the first plan, each re-plan, what was trained
    assert lines[0].startswith("Plan: 113.8 ms a training step") and len(lines) == len(
        plan.replans) + 2
    assert lines[-1].startswith(f"Trained {plan.final_epochs} epochs (planned {plan.epochs}; ")
    recorded = json.loads(json.dumps(plan.to_dict()))  # as metrics.json keeps it
    assert recorded["final_epochs"] == plan.final_epochs
    assert [r["epochs"] for r in recorded["replans"]] == [r.epochs for r in plan.replans]


@pytest.mark.parametrize("step_seconds", [
    _noisy(0.14, 0.16),  # slower from the start
    lambda epoch: 0.09 if epoch < 10 else 0.18,  # a machine that gets busy mid-run
    lambda epoch: 0.09 if epoch < 18 else 0.27,  # much busier, near the end
])
def test_steps_slower_than_planned_shorten_the_run_never_over_the_budget(step_seconds):
    plan, end, _ = _replanned_run(step_seconds)
    assert end <= 600
    assert plan.final_epochs < max(r.epochs for r in plan.replans)  # shortened when it slowed


def test_a_run_as_planned_keeps_its_length():
    plan, end, _ = _replanned_run(lambda epoch: 0.1138)
    assert plan.final_epochs - plan.epochs in (0, 1)  # the margin shrinks as the run goes
    assert end <= 600


def test_a_run_far_behind_stops_after_the_epoch_it_has_done():
    # From epoch 5 on a step takes 2 s: an epoch of 468 s no longer fits, whatever is cut.
    plan, end, rates = _replanned_run(lambda epoch: 0.1138 if epoch < 4 else 2.0)
    assert plan.final_epochs == 5 and plan.replans[-1].epochs == 5
    assert end <= 600 + 2 * STEPS  # only the slow epoch itself could not be foreseen
    assert len(rates) == 5 * STEPS


@pytest.mark.parametrize("step_seconds, warmup", [
    (_noisy(0.085, 0.110), STEPS), (_noisy(0.14, 0.16), STEPS),
    (lambda epoch: 0.09 if epoch < 10 else 0.18, STEPS),
    (_noisy(0.05, 0.06), 3 * STEPS),  # re-planned in its warmup: 20 epochs become 45
])
def test_the_replanned_learning_rate_stays_a_warmup_and_a_cosine_decay(step_seconds, warmup):
    plan, _, rates = _replanned_run(step_seconds, warmup=warmup)
    assert plan.replans
    steps = np.arange(len(rates))
    np.testing.assert_allclose(rates[:warmup], 1e-3 * steps[:warmup] / warmup, rtol=1e-5)
    decay = rates[warmup:]
    assert np.all(np.diff(decay) <= 1e-9)  # never rises after the warmup
    # No jump at a re-plan: no step lowers the rate by more than the steepest step of a cosine
    # decay over the shortest length the run was ever planned to.
    shortest = min([plan.epochs, *(r.epochs for r in plan.replans)]) * STEPS - warmup
    assert -np.diff(decay).max() <= 1e-3 * np.pi / 2 / shortest * 1.5
    assert decay[-1] < 1e-3 * 1e-4  # the last step trained is the decay's last but one


@pytest.mark.parametrize("fixed, length", [(None, 10), (7, 7), (12, 12)])
def test_a_resumed_run_follows_its_restored_schedule_or_a_new_epochs(fixed, length):
    schedule = AdjustableWarmupDecay(1.0, total_steps=10 * 4, warmup_steps=4)
    rate = float(keras.ops.convert_to_numpy(schedule(3 * 4)))
    progress = keras.callbacks.ProgbarLogger()
    replanner = planning.Replanner(schedule, 4, lambda epochs: [4, epochs], epochs=fixed,
                                   progress=progress)
    replanner.set_model(types.SimpleNamespace(stop_training=False))
    replanner.on_epoch_begin(3)  # resumed after 3 epochs, the backup's schedule restored
    assert schedule.end_step == 4 * length and replanner.validation_freq == [4, length]
    assert progress.epochs == length  # "Epoch 4/length"
    assert float(keras.ops.convert_to_numpy(schedule(3 * 4))) == pytest.approx(rate, rel=1e-6)
    for epoch in range(3, length):
        replanner.on_epoch_begin(epoch)
        assert not replanner.model.stop_training
        replanner.on_epoch_end(epoch)
    assert replanner.model.stop_training and replanner.done == length
