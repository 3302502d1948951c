"""How many epochs fit a wall-clock budget: ``keras-vit train --time-budget``.

A fixed epoch count ends on time only on the machine it was tuned on. ``measure_costs`` times
this machine instead, before the learning-rate schedule is built: a few steps of the model's real
compiled train step (the first call, which compiles, is timed apart), a few evaluation batches
and one write of the weights (the backup every epoch makes). It then puts the model's variables
back, so the run that follows starts as ``--epochs`` with the planned number would; the
measurement costs one extra compilation and a few dozen steps, and the plan counts that time too.
``plan_epochs`` then takes the most epochs whose expected time fits the budget:

>>> costs = Costs(step_seconds=0.05, compile_seconds=4.0, eval_seconds=1.5,
...               eval_compile_seconds=1.0, epoch_overhead_seconds=0.2)
>>> plan = plan_epochs(600.0, elapsed_seconds=12.0, costs=costs, steps_per_epoch=234,
...                    evaluations=lambda epochs: epochs // 4 + 1)
>>> plan.epochs, plan.steps, round(plan.expected_seconds, 1)
(44, 10296, 561.6)

44 epochs of 11.9 s, 12 evaluations, 4 + 1 s of compiling and 3 s of saving, after the 12 s spent
before training: 561.6 s, within 95 % of 600 s (``MARGIN``); 45 epochs would end at 573.5 s.

A few dozen steps do not tell how fast the whole run will go: later steps may run faster (caches
warm, other programs end) or slower. So the run re-plans as it learns its real epoch time
(``Replanner``): after every epoch from the second on (the first compiles), it takes the most
epochs whose expected end still leaves free ``MARGIN`` of the time left in the budget, plus the
spread of the last few epochs (the next one may be as slow as the slowest of them). An epoch is
timed from the end of the one before, its writes included and its evaluation taken out (the
evaluations are counted apart); the expected epoch is the slower of the run's mean so far and
the last few epochs' mean, so a machine that slows down is believed at once and one that speeds
up as its faster epochs add up. The margin is the first plan's at the start and shrinks with the
time left, so the run ends near the budget; one that falls behind is shortened, down to stopping
after the epoch just done, rather than overrun. Changes smaller than ``SETTLE`` of the epochs
ahead are left alone, as noise.

The learning-rate schedule follows each new length without a jump: its decay's end moves, and
the decay goes on from where it is to its end value at the new last step
(``keras_vit.training.schedules.AdjustableWarmupDecay``), in the compiled train step, whose
variables the optimizer carries (``keras_vit.training.optimizers.AdjustableAdamW``). Two other
ways were worse: recomputing the schedule for the new total moves the rate by the change in
progress (a jump, largest mid-run), and freezing the length after a first re-plan leaves the
later changes of speed unplanned. Keras cannot lengthen a ``fit`` under way, so the run is fitted
for at most ``GROWTH`` times its first plan and stopped when its plan is done: one history, one
backup and one evaluation cadence, kept to the current plan.
"""

import dataclasses
import math
import os
import tempfile
import time

import keras

# Kept free of the plan: the load of other programs, step-time noise, the run's last writes.
MARGIN = 0.05
FINISH_SECONDS = 3.0  # model.keras, curves.png and metrics.json at the end
WARMUP_STEPS = 3  # the first compiles; the next ones may still warm caches
MEASURED_STEPS = 30
EVAL_BATCHES = 4
RECENT_EPOCHS = 5  # a re-plan trusts the recent epochs: a machine's load changes during a run
GROWTH = 4  # a re-plan may lengthen a run to this many times its first plan
# A re-plan changes the length by at least this part of the epochs ahead: smaller changes are
# the estimate's noise, and well within MARGIN of the time left.
SETTLE = 0.02


@dataclasses.dataclass
class Costs:
    """Seconds this machine takes for the parts of a run (``measure_costs``)."""

    step_seconds: float
    compile_seconds: float
    eval_seconds: float  # one evaluation of the whole test set
    eval_compile_seconds: float
    epoch_overhead_seconds: float  # the backup and history written after each epoch
    steps_measured: int = 0
    measure_seconds: float = 0.0


@dataclasses.dataclass
class Plan:
    """The epochs of a run and the time they are expected to take (``plan_epochs``)."""

    budget_seconds: float
    elapsed_seconds: float  # before training: data, model, measurement
    epochs: int
    steps_per_epoch: int
    steps: int
    evaluations: int
    expected_seconds: float  # of the whole run, elapsed_seconds included
    costs: Costs
    replans: list = dataclasses.field(default_factory=list)  # each ``Replan`` that changed it
    final_epochs: int | None = None  # the epochs trained, once the run is over

    def epoch_seconds(self):
        """Seconds an epoch of training and its writes is expected to take (no evaluation)."""
        return self.steps_per_epoch * self.costs.step_seconds + self.costs.epoch_overhead_seconds

    def outcome(self):
        """One line on what the run did with its plan, e.g. ``Trained 47 epochs (planned 44;
        re-planned twice, last to 47 after epoch 9).`` (each re-plan: ``replans``)."""
        if not self.replans:
            return f"Trained {self.final_epochs} epochs (planned {self.epochs}, not re-planned)."
        count = {1: "once", 2: "twice"}.get(len(self.replans), f"{len(self.replans)} times")
        last = self.replans[-1]
        return (f"Trained {self.final_epochs} epochs (planned {self.epochs}; re-planned {count}, "
                f"last to {last.epochs} after epoch {last.after_epoch}).")

    def describe(self):
        """The plan's line, then each re-plan's and the outcome once the run is over."""
        lines = [self._first_line(), *(r.describe(self) for r in self.replans)]
        if self.final_epochs is not None:
            lines.append(self.outcome())
        return "\n".join(lines)

    def _first_line(self):
        c = self.costs
        return (f"Plan: {c.step_seconds * 1e3:.1f} ms a training step (measured over "
                f"{c.steps_measured} steps, compilation excluded), {self.steps_per_epoch} steps an "
                f"epoch, {c.eval_seconds:.1f} s a test-set evaluation; {self.epochs} epochs "
                f"({self.steps} steps, {self.evaluations} evaluations) expected to end at "
                f"{self.expected_seconds:.0f} s of the {self.budget_seconds:g} s budget "
                f"(measuring took {c.measure_seconds:.1f} s).")

    def to_dict(self):
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Replan:
    """A new length for a run under way (``Replanner``)."""

    after_epoch: int
    epochs: int
    epoch_seconds: float  # the epoch expected from now on: training and writes, no evaluation
    expected_seconds: float  # of the whole run under the new length, from its start

    def describe(self, plan):
        return (f"Re-plan after epoch {self.after_epoch}: {self.epochs} epochs, at "
                f"{self.epoch_seconds:.2f} s an epoch (planned {plan.epoch_seconds():.2f} s), "
                f"expected to end at {self.expected_seconds:.0f} s of the "
                f"{plan.budget_seconds:g} s budget.")


def check_budget(seconds):
    """``seconds`` as a float, or a ``ValueError`` that says what a budget is."""
    try:
        value = float(seconds)
    except (TypeError, ValueError):
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"--time-budget must be a positive, finite number of seconds, got "
                         f"{seconds!r}; e.g. --time-budget 600 for 10 minutes, or --epochs N "
                         "for a fixed length.")
    return value


def expected_seconds(epochs, *, elapsed_seconds, costs, steps_per_epoch, evaluations):
    """Wall seconds of a whole run of ``epochs`` from the start (``elapsed_seconds`` spent)."""
    count = evaluations(epochs)
    per_epoch = steps_per_epoch * costs.step_seconds + costs.epoch_overhead_seconds
    return (elapsed_seconds + costs.compile_seconds + epochs * per_epoch
            + count * costs.eval_seconds + (costs.eval_compile_seconds if count else 0.0)
            + FINISH_SECONDS)


def plan_epochs(budget_seconds, *, elapsed_seconds, costs, steps_per_epoch, evaluations):
    """The most epochs whose expected time stays within ``1 - MARGIN`` of the budget.

    ``evaluations(epochs)``: how many times a run of that length evaluates the test set.
    Raises ``ValueError`` when not even one epoch fits.
    """
    budget = check_budget(budget_seconds)
    usable = budget * (1 - MARGIN)
    options = dict(elapsed_seconds=elapsed_seconds, costs=costs,
                   steps_per_epoch=steps_per_epoch, evaluations=evaluations)
    per_epoch = steps_per_epoch * costs.step_seconds + costs.epoch_overhead_seconds
    epochs = max(1, int((usable - elapsed_seconds) / max(per_epoch, 1e-9)))
    while epochs > 1 and expected_seconds(epochs, **options) > usable:
        epochs -= 1  # evaluations and fixed costs: step down to the largest that fits
    expected = expected_seconds(epochs, **options)
    if expected > usable:
        raise ValueError(
            f"--time-budget {budget:g} s is too short: one epoch of {steps_per_epoch} steps "
            f"would end at about {expected:.0f} s on this machine ({costs.step_seconds * 1e3:.0f} "
            f"ms a step; {elapsed_seconds:.0f} s spent before training, "
            f"{costs.measure_seconds:.0f} of them measuring). Give at least "
            f"{math.ceil(expected / (1 - MARGIN))} s, fewer --train-examples, or --epochs N.")
    return Plan(budget, elapsed_seconds, epochs, steps_per_epoch, epochs * steps_per_epoch,
                evaluations(epochs), expected, costs)


class _StepClock(keras.callbacks.Callback):
    """Times the train steps after the warm-up ones; stops the fit once ``max_seconds`` of
    measured steps are done (a slow model need not run them all)."""

    def __init__(self, max_seconds):
        super().__init__()
        self.max_seconds = max_seconds
        self.begin = self.warm = self.last = None
        self.steps = 0

    def on_train_begin(self, logs=None):
        self.begin = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        # The loss depends on the whole step: reading it waits for asynchronous backends.
        float(keras.ops.convert_to_numpy((logs or {}).get("loss", 0.0)))
        now = time.perf_counter()
        if batch + 1 == WARMUP_STEPS:
            self.warm = now
        elif batch + 1 > WARMUP_STEPS:
            self.last, self.steps = now, batch + 1 - WARMUP_STEPS
            if now - self.warm > self.max_seconds and self.steps >= 2:
                self.model.stop_training = True


def _timed(function):
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def measure_costs(model, train_batches, test_batches, test_batch_count, epoch_end=None,
                  max_seconds=10.0):
    """Time a compiled ``model``'s train step, evaluation and per-epoch writes on this machine.

    ``train_batches``: an endless training pipeline of the real batch size (used for a few
    dozen steps); ``test_batches``: the test pipeline of ``test_batch_count`` batches;
    ``epoch_end(model, folder)``: what the run writes after every epoch, done here into a
    scratch folder (default: the weights). The model's variables are restored afterwards; the caller
    compiles it afresh (a new optimizer), so the measurement leaves no trace in the run.
    """
    start = time.perf_counter()
    saved = [keras.ops.convert_to_numpy(v) for v in model.variables]
    clock = _StepClock(max_seconds)
    model.fit(train_batches, epochs=1, steps_per_epoch=WARMUP_STEPS + MEASURED_STEPS,
              shuffle=False, verbose=0, callbacks=[clock])
    step = (clock.last - clock.warm) / clock.steps
    compile_seconds = max(0.0, clock.warm - clock.begin - WARMUP_STEPS * step)
    batches = min(EVAL_BATCHES, test_batch_count)
    first = _timed(lambda: model.evaluate(test_batches, steps=1, verbose=0))
    per_batch = _timed(lambda: model.evaluate(test_batches, steps=batches, verbose=0)) / batches
    eval_seconds, eval_compile = per_batch * test_batch_count, max(0.0, first - per_batch)
    epoch_end = epoch_end or (lambda model, folder: model.save_weights(
        os.path.join(folder, "probe.weights.h5")))
    with tempfile.TemporaryDirectory() as folder:
        epoch_end(model, folder)  # the second write replaces the first, as every later one does
        overhead = _timed(lambda: epoch_end(model, folder))
    for variable, value in zip(model.variables, saved):
        variable.assign(value)
    return Costs(step, compile_seconds, eval_seconds, eval_compile, overhead, clock.steps,
                 time.perf_counter() - start)


class Replanner(keras.callbacks.Callback):
    """Ends a run at its adjustable schedule's end and, given the run's first ``plan``, moves
    that end after every epoch to the most epochs that fit the budget (module docstring).

    ``schedule``: the run's ``AdjustableWarmupDecay``, whose end, in epochs, is the run's
    length: a resumed run reads it from its backup (restored before the first epoch begins).
    ``validations(epochs)``: the epochs after which a run of that length evaluates; the list
    ``validation_freq`` given to ``fit`` is kept to the current length. ``started``: when the
    run began, on ``clock`` (the wall clock). ``epochs``: a length to set at the start instead
    (``--epochs`` when resuming). ``progress``: the ``ProgbarLogger`` whose "Epoch k/N" shows
    the current length. Placed before the backup among the callbacks, so that each backup holds
    the schedule that the epochs after it follow.
    """

    clock = staticmethod(time.time)  # as ``Run.started``; tests set a clock of their own

    def __init__(self, schedule, steps_per_epoch, validations, *, plan=None, started=0.0,
                 epochs=None, progress=None):
        super().__init__()
        self.schedule, self.steps_per_epoch, self.validations = (
            schedule, steps_per_epoch, validations)
        self.plan, self.started, self.fixed, self.progress = plan, started, epochs, progress
        self.validation_freq = []  # changed in place: Keras reads it after every epoch
        self.epochs = self.done = self.last_end = self.test_start = self.message = None
        self.periods, self.evaluations = [], []  # seconds of each epoch, of each evaluation
        self.evaluating = 0.0  # evaluation seconds since the last epoch ended

    def on_epoch_begin(self, epoch, logs=None):
        if self.epochs is None:  # the first epoch of this process: the schedule is restored
            self.done = epoch
            self._set_length(self.schedule.end_step // self.steps_per_epoch)
            if self.fixed is not None:
                self._set_length(self.fixed)
        self._say()

    def on_test_begin(self, logs=None):
        self.test_start = self.clock()

    def on_test_end(self, logs=None):
        seconds = self.clock() - self.test_start
        self.evaluations.append(seconds)
        self.evaluating += seconds

    def on_epoch_end(self, epoch, logs=None):
        now, self.done = self.clock(), epoch + 1
        if self.last_end is not None:  # the first epoch compiles: not a typical one
            self.periods.append(now - self.last_end - self.evaluating)
        self.last_end, self.evaluating = now, 0.0
        if self.plan is not None and self.periods and self.done < self.epochs:
            self._replan(now)  # once the schedule has ended, the run ends with it
        if self.done >= self.epochs:
            self.model.stop_training = True

    def on_train_end(self, logs=None):
        if self.plan is not None:
            self.plan.final_epochs = self.done
        self._say()

    def _replan(self, now):
        recent = self.periods[-RECENT_EPOCHS:]
        epoch_seconds = max(_mean(self.periods), _mean(recent))
        elapsed, budget = now - self.started, self.plan.budget_seconds
        # Kept free: the noise of the time still ahead, and an epoch as slow as a recent one.
        usable = budget - MARGIN * (budget - elapsed) - (max(recent) - _mean(recent))
        epochs = self.done
        while (epochs < GROWTH * self.plan.epochs
               and elapsed + self._ahead(epochs + 1, epoch_seconds) <= usable):
            epochs += 1
        if abs(epochs - self.epochs) >= max(1, SETTLE * (self.epochs - self.done)):
            replan = Replan(self.done, epochs, epoch_seconds,
                            elapsed + self._ahead(epochs, epoch_seconds))
            self.plan.replans.append(replan)
            self.message = replan.describe(self.plan)
            self._set_length(epochs)

    def _ahead(self, epochs, epoch_seconds):
        """Seconds from now to the last file written of a run of ``epochs``."""
        costs = self.plan.costs
        validations = [e for e in self.validations(epochs) if e > self.done]
        # The final evaluation compiles its own function, the first validation the test step.
        compiles = 1 + bool(validations and not self.evaluations)
        evaluation_seconds = self.evaluations[-1] if len(self.evaluations) > 1 \
            else costs.eval_seconds  # the first one compiled
        return ((epochs - self.done) * epoch_seconds + costs.epoch_overhead_seconds
                + (len(validations) + 1) * evaluation_seconds
                + compiles * costs.eval_compile_seconds + FINISH_SECONDS)

    def _set_length(self, epochs):
        if self.epochs not in (None, epochs) and epochs > self.done:  # stopping moves nothing
            step = self.done * self.steps_per_epoch
            self.schedule.adjust(step, epochs * self.steps_per_epoch)
        self.epochs = epochs
        self.validation_freq[:] = self.validations(epochs)
        if self.progress is not None:
            self.progress.epochs = epochs

    def _say(self):
        if self.message:
            print(self.message)
            self.message = None


def _mean(values):
    return sum(values) / len(values)


class OverrunWarning(keras.callbacks.Callback):
    """Says, after the second epoch, when a run of a fixed ``--epochs`` will overrun the budget."""

    def __init__(self, budget_seconds, started, epochs):
        super().__init__()
        self.budget, self.started, self.epochs = budget_seconds, started, epochs
        self.seen, self.epoch_start = 0, None

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch_start = time.time()

    def on_epoch_end(self, epoch, logs=None):
        self.seen += 1
        if self.seen != 2:  # the first epoch compiles; the second is a typical one
            return
        now = time.time()
        projected = now - self.started + (self.epochs - epoch - 1) * (now - self.epoch_start)
        if projected > self.budget * (1 + MARGIN):
            print(f"Warning: --epochs {self.epochs} will take about {projected:.0f} s on this "
                  f"machine, over the --time-budget of {self.budget:g} s; leave --epochs out to "
                  "fit the budget.")
