"""The folder a command-line run writes: model.keras, metrics.json, history.json, curves.png.

``EpochLog`` keeps the per-epoch metrics in ``history.json`` keyed by epoch, so a run that is
killed and resumed (``keras.callbacks.BackupAndRestore``) still ends with its whole history.

In a run of several processes (``keras_vit.distribution.join``) only process 0 writes; the
others read the folder (a resumed run's backup) and write nothing into it. Keras' saving is a
collective there (its arrays are gathered across the processes), so the others save with it,
into a temporary folder that they remove.
"""

import importlib.util
import json
import os
import re
import shutil
import tempfile
import time

import keras

from keras_vit.app.errors import UsageError
from keras_vit.checks import read_json
from keras_vit.distribution import is_writer

BACKUP = "backup"
HISTORY = "history.json"
METRICS = "metrics.json"
MODEL = "model.keras"
CURVES = "curves.png"
RUN_CONFIG = "run_config.json"


def default_output(command, dataset, model_name, root="runs"):
    """``runs/<command>-<dataset>-<model>``: the same command reuses (and resumes) its folder."""
    slug = re.sub(r"[^A-Za-z0-9.+_-]+", "-", str(model_name)).strip("-")
    return os.path.join(root, f"{command}-{dataset}-{slug}")


def has_backup(run_dir):
    """Whether an interrupted run left a checkpoint (``AtomicBackup``) in ``run_dir``."""
    return AtomicBackup.latest(os.path.join(run_dir, BACKUP)) is not None


def backup_epoch(run_dir):
    """The epochs the newest backup in ``run_dir`` has finished: the epoch
    ``BackupAndRestore`` resumes at (0 without a backup)."""
    folder = AtomicBackup.latest(os.path.join(run_dir, BACKUP))
    if folder is None:
        return 0
    path = os.path.join(folder, AtomicBackup.METADATA)
    return int(read_json(path, f"delete the backup {folder} to resume from the one before, or "
                               "the run folder to start again")["epoch"])


class AtomicBackup(keras.callbacks.BackupAndRestore):
    """``BackupAndRestore`` whose weights and epoch count are replaced together, atomically.

    Keras writes the weights file and then the epoch count in place: a kill between the two
    resumes the new weights (and optimizer step) at the old epoch, so that epoch is trained
    twice, and a kill inside a write leaves half a file. Here every backup is written whole into
    a new folder, and one atomic rename of a small pointer file (``CURRENT``) makes it the one a
    restart resumes from; older folders are removed after that.
    """

    POINTER = "CURRENT"
    METADATA = "training_metadata.json"  # Keras' name: the epochs finished, among others
    _FILES = ("latest.weights.h5", METADATA)

    def __init__(self, backup_dir):
        super().__init__(backup_dir)
        self._point_at(self.latest(backup_dir) or backup_dir)

    @classmethod
    def latest(cls, backup_dir):
        """The folder holding the newest complete backup in ``backup_dir``, or None."""
        try:
            with open(os.path.join(backup_dir, cls.POINTER)) as f:
                folder = os.path.join(backup_dir, f.read().strip())
        except OSError:  # no pointer: a backup in Keras' own layout, or none
            folder = backup_dir
        complete = all(os.path.exists(os.path.join(folder, n)) for n in cls._FILES)
        return folder if complete else None

    def _point_at(self, folder):
        self._weights_path, self._training_metadata_path = (
            os.path.join(folder, name) for name in self._FILES)

    def _save_model(self):
        if not is_writer():
            # Keras' gathering of the variables, not its files, nor the folder it creates when
            # it finds none: a process that gets there before process 0 would make it.
            with tempfile.TemporaryDirectory() as elsewhere:
                backup_dir, self.backup_dir = self.backup_dir, elsewhere
                self._point_at(elsewhere)
                try:
                    super()._save_model()
                finally:
                    self.backup_dir = backup_dir
            return
        name = f"epoch{self._current_epoch:05d}-batch{self._last_batch_seen:07d}"
        staging = os.path.join(self.backup_dir, name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        os.makedirs(staging)
        self._point_at(staging)
        super()._save_model()  # Keras writes both files into the staging folder
        final = os.path.join(self.backup_dir, name)
        shutil.rmtree(final, ignore_errors=True)
        os.rename(staging, final)
        pointer = os.path.join(self.backup_dir, self.POINTER)
        with open(pointer + ".tmp", "w") as f:
            f.write(name)
        os.replace(pointer + ".tmp", pointer)
        self._point_at(final)
        for other in os.listdir(self.backup_dir):
            if other not in (name, self.POINTER):
                path = os.path.join(self.backup_dir, other)
                shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)

    def on_train_end(self, logs=None):
        if is_writer():
            super().on_train_end(logs)


# Options a resumed run may change: output and validation do not change what is trained, and a
# new --epochs stretches or shortens the schedule to the new total (train longer, or stop sooner).
# A run planned from --time-budget records its first planned epochs and that it re-plans them
# ("replanned", which a resumed run takes over): its backup's schedule ends at the last re-plan.
_RESUME_FREE = ("output", "verbose", "validate", "validate_every", "epochs", "time_budget",
                "replanned")


def interrupted_run_config(run_dir):
    """The options an interrupted run in ``run_dir`` was started with, or None (no backup)."""
    path = os.path.join(run_dir, RUN_CONFIG)
    if not (has_backup(run_dir) and os.path.exists(path)):
        return None
    return read_json(path, "delete it to resume with the options given now, or the run folder "
                           "to start again")


def check_resume(run_dir, config):
    """Whether to resume an interrupted run in ``run_dir``; records ``config`` for later checks.

    A run folder keeps the options it was started with (``run_config.json``). Resuming with other
    options than ``_RESUME_FREE`` (another model, learning rate, batch size...) would silently mix
    two runs, so that raises a ``ValueError`` that names the differences and the ways out.
    """
    path = os.path.join(run_dir, RUN_CONFIG)
    wanted = json.loads(json.dumps(config, default=_jsonable))
    started = interrupted_run_config(run_dir)
    if started is not None:
        changed = sorted(k for k in set(started) | set(wanted)
                         if k not in _RESUME_FREE and started.get(k) != wanted.get(k))
        if changed:
            details = ", ".join(f"{k}: {started.get(k)!r} -> {wanted.get(k)!r}" for k in changed)
            raise UsageError(
                f"{run_dir} holds an interrupted run started with other options ({details}). "
                "Run the same command again to resume it, pass another --output, or delete "
                f"{os.path.join(run_dir, BACKUP)} to start afresh.")
        if started.get("epochs") != wanted.get("epochs"):
            print(f"Resuming with {wanted.get('epochs')} epochs instead of {started.get('epochs')}:"
                  " the learning-rate schedule now ends at the new total.")
    write_json(path, wanted)
    return has_backup(run_dir)


def write_json(path, payload):
    """Write JSON atomically (a kill never leaves half a file); process 0's alone."""
    if not is_writer():
        return
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(payload, f, indent=2, default=_jsonable)
        f.write("\n")
    os.replace(tmp, path)


def _jsonable(value):
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, (set, tuple)):
        return list(value)
    return str(value)


def read_history(run_dir):
    """The per-epoch records of ``history.json`` (a list ordered by epoch), or []."""
    path = os.path.join(run_dir, HISTORY)
    if not os.path.exists(path):
        return []
    return read_json(path, "delete it to start the run's history again, or the run folder to "
                           "start the run again")


class EpochLog(keras.callbacks.Callback):
    """Record every epoch's logs and duration into ``history.json``, keyed by epoch number.

    Records at or after the epoch being written are replaced, so the epoch that was running when
    a run was killed, and is redone after the restore, appears once.
    """

    def __init__(self, run_dir, keep_existing):
        super().__init__()
        self.path = os.path.join(run_dir, HISTORY)
        self.records = read_history(run_dir) if keep_existing else []
        self.first_epoch = None
        self._start = None

    def on_epoch_begin(self, epoch, logs=None):
        if self.first_epoch is None:
            self.first_epoch = int(epoch)
        self._start = time.time()

    def on_epoch_end(self, epoch, logs=None):
        record = {"epoch": int(epoch) + 1, "seconds": round(time.time() - self._start, 3)}
        record.update({k: float(v) for k, v in (logs or {}).items()})
        self.records = [r for r in self.records if r["epoch"] < record["epoch"]] + [record]
        write_json(self.path, self.records)


PLOTTING_PACKAGE = ("curves.png needs matplotlib: pip install \"keras-vit-paper[train]\" (or "
                    "pip install matplotlib)")


def check_plotting():
    """Refuse a run that would train and then fail to draw its curves."""
    if importlib.util.find_spec("matplotlib") is None:
        raise UsageError(PLOTTING_PACKAGE + ".")


def plot_curves(history, path, title):
    """Loss and accuracy per epoch (train and validation) as a PNG, with matplotlib's Agg canvas."""
    try:  # an optional package (the train extra), imported only here
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as error:
        raise ImportError(f"{PLOTTING_PACKAGE}; the model and metrics of {path!r}'s run were "
                          "written.") from error

    figure = Figure(figsize=(9, 3.5))
    FigureCanvasAgg(figure)
    epochs = [r["epoch"] for r in history]
    for i, metric in enumerate(("loss", "accuracy")):
        axes = figure.add_subplot(1, 2, i + 1)
        for prefix, label in (("", "train"), ("val_", "validation")):
            points = [(e, r[prefix + metric]) for e, r in zip(epochs, history)
                      if r.get(prefix + metric) is not None]  # validation may skip epochs
            if points:
                axes.plot(*zip(*points), marker="o", label=label)
        axes.set_xlabel("epoch")
        axes.set_ylabel(metric)
        axes.grid(alpha=0.3)
        axes.legend()
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def write_run(run_dir, *, model, metrics, history, title):
    """Save ``model.keras``, ``metrics.json`` and (with a history) ``curves.png`` (process 0)."""
    if not is_writer():
        with tempfile.TemporaryDirectory() as elsewhere:  # Keras' gathering, not its file
            model.save(os.path.join(elsewhere, MODEL))
        return
    os.makedirs(run_dir, exist_ok=True)
    model.save(os.path.join(run_dir, MODEL))
    write_json(os.path.join(run_dir, METRICS), dict(metrics, history=history))
    if history:
        plot_curves(history, os.path.join(run_dir, CURVES), title)
