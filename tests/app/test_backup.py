"""The run folder's backup: a kill at any point resumes from one whole, consistent epoch."""

import os

import keras
import numpy as np
import pytest

from keras_vit.app import run_files

STEPS = 4  # batches per epoch


class Killed(Exception):
    pass


def _model():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss="mse")
    return model


def _data():
    x = np.random.default_rng(0).normal(size=(8 * STEPS, 3)).astype("float32")
    return x, x[:, :2]


def test_kill_before_the_pointer_moves_resumes_the_previous_epoch(tmp_path, monkeypatch):
    """Keras' own callback writes the weights (and optimizer step) and then the epoch count: a
    kill between the two resumed the new weights at the old epoch, training it twice."""
    backup_dir = str(tmp_path / "backup")
    real_replace, saves = os.replace, []

    def replace(src, dst):
        if dst.endswith(run_files.AtomicBackup.POINTER):
            saves.append(dst)
            if len(saves) == 2:  # epoch 2 is written out whole, then the run dies
                raise Killed
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(Killed):
        _model().fit(*_data(), batch_size=8, epochs=5, verbose=0,
                     callbacks=[run_files.AtomicBackup(backup_dir)])
    monkeypatch.setattr(os, "replace", real_replace)
    assert sorted(os.listdir(backup_dir)) == [  # the next save removes what the kill left
        "CURRENT", "CURRENT.tmp", "epoch00001-batch0000000", "epoch00002-batch0000000"]
    assert run_files.AtomicBackup.latest(backup_dir).endswith("epoch00001-batch0000000")

    model = _model()
    history = model.fit(*_data(), batch_size=8, epochs=3, verbose=0,
                        callbacks=[run_files.AtomicBackup(backup_dir)])
    assert history.epoch == [1, 2]  # epoch 1 was not redone, epoch 2 was
    assert int(model.optimizer.iterations) == 3 * STEPS  # and nothing was trained twice
    assert not os.path.exists(backup_dir)  # a finished run removes its backup


def test_a_half_written_backup_is_not_resumed(tmp_path):
    backup_dir = tmp_path / "backup"
    (backup_dir / "epoch00003-batch0000000.partial").mkdir(parents=True)
    (backup_dir / "epoch00003-batch0000000.partial" / "latest.weights.h5").write_bytes(b"\x89HDF")
    assert run_files.AtomicBackup.latest(str(backup_dir)) is None
    assert not run_files.has_backup(str(tmp_path))


def test_a_process_that_does_not_write_leaves_the_run_folder_alone(tmp_path, monkeypatch):
    """In a run of several processes only process 0 writes; the others still take part in
    Keras' save (it gathers the variables), in a folder of their own: none creates the backup
    folder, even when it comes first."""
    monkeypatch.setattr(run_files, "is_writer", lambda: False)
    backup_dir = str(tmp_path / "backup")
    model = _model()
    model.fit(*_data(), batch_size=8, epochs=2, verbose=0,
              callbacks=[run_files.AtomicBackup(backup_dir)])
    assert not os.path.exists(backup_dir) and os.listdir(tmp_path) == []
