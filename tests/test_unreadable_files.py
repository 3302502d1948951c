"""Every file keras_vit reads is named, with what is wrong and what to do, when it cannot be read
or parsed (``keras_vit.checks.read_json``): a preset folder's JSON (keras_vit's, keras-hub's), a
transformers ``config.json``, a ``.keras`` archive's ``config.json`` and a run folder's files."""

import json
import os
import zipfile

import pytest

from keras_vit.checks import read_json

pytestmark = pytest.mark.backend_independent  # files read before any model is built

BAD = '{"hidden_size": 64,'  # cut off: not JSON


def _refused(call, path, fix):
    with pytest.raises(ValueError) as raised:
        call()
    message = str(raised.value)
    assert os.fspath(path) in message, message
    assert "is not valid JSON" in message, message
    assert fix in message, message


def test_read_json_names_the_file_the_problem_and_the_fix(tmp_path):
    path = tmp_path / "a.json"
    path.write_text(BAD)
    _refused(lambda: read_json(path, "write it again"), path, "write it again")
    path.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ValueError, match=r"a\.json is not (valid JSON|text).*write it again"):
        read_json(path, "write it again")
    with pytest.raises(ValueError, match=r"missing\.json cannot be read.*write it again"):
        read_json(tmp_path / "missing.json", "write it again")
    assert read_json(path, "", text="[1]") == [1]


def test_a_keras_hub_preset_folder_with_a_bad_config(tmp_path):
    from keras_vit.checkpoints.formats import load_checkpoint

    (tmp_path / "config.json").write_text(BAD)
    (tmp_path / "metadata.json").write_text(json.dumps({"keras_hub_version": "0.20.0"}))
    _refused(lambda: load_checkpoint(tmp_path), tmp_path / "config.json", "save_to_preset")


def test_a_keras_vit_preset_folder_with_a_bad_config(tmp_path):
    from keras_vit.models import presets

    (tmp_path / "config.json").write_text(BAD)
    folder = presets._Folder(os.fspath(tmp_path))
    _refused(lambda: folder.json("config.json"), tmp_path / "config.json", "save_to_preset")


def test_a_transformers_folder_with_a_bad_config(tmp_path):
    from keras_vit.checkpoints.transformers import read_folder

    (tmp_path / "config.json").write_text(BAD)
    _refused(lambda: read_folder(tmp_path), tmp_path / "config.json", "save_pretrained")


def test_a_keras_archive_with_a_bad_config(tmp_path):
    from keras_vit.models.upgrade import load_legacy_model

    path = tmp_path / "model.keras"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("config.json", BAD)
        archive.writestr("model.weights.h5", b"")
    _refused(lambda: load_legacy_model(path), path, "model.save")


def test_a_run_folder_with_bad_files(tmp_path):
    from keras_vit.app import run_files

    (tmp_path / run_files.HISTORY).write_text(BAD)
    _refused(lambda: run_files.read_history(tmp_path), tmp_path / run_files.HISTORY,
             "delete it")
    backup = tmp_path / run_files.BACKUP
    backup.mkdir()
    (backup / "latest.weights.h5").write_bytes(b"")
    (backup / run_files.AtomicBackup.METADATA).write_text(BAD)
    _refused(lambda: run_files.backup_epoch(tmp_path),
             backup / run_files.AtomicBackup.METADATA, "delete the backup")
    (tmp_path / run_files.RUN_CONFIG).write_text(BAD)
    _refused(lambda: run_files.interrupted_run_config(tmp_path),
             tmp_path / run_files.RUN_CONFIG, "delete it")
