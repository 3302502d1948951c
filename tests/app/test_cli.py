import dataclasses
import json
import os
import subprocess
import sys
import time

import keras
import numpy as np
import pytest

from keras_vit import create_model
from keras_vit.app import cli, configs, finetune, run_files, run_model, train
from tests.conftest import fixture_path, installed

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = ["--train-examples", "256", "--test-examples", "64", "--batch-size", "64",
        "--model", "small-vit", "--set", "patch_size=7", "--set", "hidden_size=16",
        "--set", "num_layers=1", "--set", "num_heads=2", "--set", "mlp_dim=32",
        "--warmup-steps", "2", "--verbose", "0"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("run") / "train")
    assert cli.main(["train", *TINY, "--epochs", "2", "--output", out]) == 0
    return out


def _metrics(folder):
    with open(os.path.join(folder, "metrics.json")) as f:
        return json.load(f)


@pytest.mark.fashion_mnist
def test_train_writes_the_run_folder(trained, capsys):
    for name in ("model.keras", "metrics.json", "history.json", "curves.png"):
        assert os.path.getsize(os.path.join(trained, name)) > 0
    metrics = _metrics(trained)
    assert 0.0 <= metrics["test_accuracy"] <= 1.0 and metrics["wall_time_s"] > 0
    assert metrics["config"]["dataset"] == "fashion_mnist" and metrics["config"]["epochs"] == 2
    encoder = metrics["model_config"]["config"]["encoder"]  # the model's ViTConfig
    assert encoder["hidden_size"] == 16
    # the default model pools with GAP; the small offline images get flips and 1-pixel shifts
    assert encoder["classifier"] == "gap"
    assert metrics["augmentation"] == "pad_crop" and metrics["resize_size"] == 30
    assert metrics["config"]["label_smoothing"] == 0.1
    assert metrics["epochs_completed"] == 2 and metrics["optimizer_iterations"] == 8
    assert metrics["plan"] == {"epochs": 2, "fixed": True}  # --epochs: no measured plan
    assert [r["epoch"] for r in metrics["history"]] == [1, 2]
    # the test set is evaluated every 4 epochs and after the last one
    assert ["val_accuracy" in r for r in metrics["history"]] == [False, True]
    assert not run_files.has_backup(trained)  # the backup is removed after a finished run
    with open(os.path.join(trained, "curves.png"), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


@pytest.mark.fashion_mnist
def test_evaluate_a_saved_model(trained, tmp_path, capsys):
    out = str(tmp_path / "eval")
    assert cli.main(["evaluate", os.path.join(trained, "model.keras"), "--test-examples", "64",
                     "--output", out, "--verbose", "0"]) == 0
    assert "test accuracy" in capsys.readouterr().out
    assert _metrics(out)["test_accuracy"] == pytest.approx(_metrics(trained)["test_accuracy"])


@pytest.mark.fashion_mnist
def test_finetune_at_a_higher_resolution(trained, tmp_path):
    out = str(tmp_path / "ft")
    args = ["finetune", os.path.join(trained, "model.keras"), "--dataset", "digits",
            "--image-size", "56", "--examples-per-class", "2", "--batch-size", "10",
            "--steps", "4", "--eval-every", "2", "--warmup-steps", "1", "--test-examples", "50",
            "--use-ema", "--output", out, "--verbose", "0"]
    assert cli.main(args) == 0
    model = keras.saving.load_model(os.path.join(out, "model.keras"), compile=False)
    assert model.config.image_size == (56, 56) and model.config.head.num_classes == 10
    assert _metrics(out)["steps"] == 4 and len(_metrics(out)["history"]) == 2


@pytest.mark.fashion_mnist
def test_finetune_chooses_the_accumulation_that_fits_memory_gib(trained, tmp_path, capsys):
    from keras_vit.checkpoints import convert
    from keras_vit.costs.memory import GIB, memory
    from keras_vit.training.recipes import prepare_finetuning

    # a budget for 2.5 examples of the fine-tuned model at 56 px: batch 10 = 5 x 2
    model = prepare_finetuning(convert.load_model(os.path.join(trained, "model.keras")), 10,
                               image_size=56)
    fixed, one = memory(model, 56, 0), memory(model, 56, 1)
    budget = (fixed + 2.5 * (one - fixed)) / GIB
    out = str(tmp_path / "fit")
    args = ["finetune", os.path.join(trained, "model.keras"), "--dataset", "digits",
            "--image-size", "56", "--examples-per-class", "2", "--batch-size", "10",
            "--steps", "1", "--eval-every", "1", "--warmup-steps", "0", "--test-examples", "20",
            "--memory-gib", repr(budget), "--output", out, "--verbose", "0"]
    assert cli.main(args) == 0
    assert "batch 10 = 5 x micro-batch 2" in capsys.readouterr().out
    metrics = _metrics(out)
    assert (metrics["accumulation"], metrics["micro_batch"]) == (5, 2)
    assert metrics["batch_plan"]["planned"] and metrics["batch_plan"]["precision"] == "float32"
    assert metrics["updates"] == 1


@pytest.mark.fashion_mnist
def test_finetune_resolution_must_be_a_multiple_of_the_patch(trained, capsys):
    args = ["finetune", os.path.join(trained, "model.keras"), "--image-size", "30",
            "--steps", "2", "--eval-every", "1", "--verbose", "0", "--output", "unused"]
    assert cli.main(args) == 1
    assert "not a multiple of the patch size (7)" in capsys.readouterr().err


def test_bad_inputs(tmp_path, capsys, monkeypatch):
    out = ["--output", str(tmp_path / "bad")]
    assert cli.main(["train", "--dataset", "mnist", *out]) == 1
    assert "Unknown dataset 'mnist'" in capsys.readouterr().err
    assert cli.main(["train", *TINY, "--image-size", "30", *out]) == 1
    assert "not a multiple of the patch size (7)" in capsys.readouterr().err
    assert cli.main(["train", *TINY, "--data-dir", str(tmp_path), *out]) == 1
    assert "apt-get install dataset-fashion-mnist" in capsys.readouterr().err
    assert cli.main(["train", *TINY, "--set", "hidden_size", *out]) == 1
    assert "key=value" in capsys.readouterr().err
    assert cli.main(["evaluate", str(tmp_path / "missing.keras"), *out]) == 1
    assert "No model file" in capsys.readouterr().err
    assert cli.main(["convert", "a.keras", "a.keras"]) == 1
    assert "same file" in capsys.readouterr().err
    from keras_vit import distribution

    monkeypatch.setattr(distribution.replicas, "num_replicas", lambda: 3)
    assert cli.main(["train", *TINY, *out]) == 1
    assert "not divisible by the 3 replicas" in capsys.readouterr().err
    assert not os.path.exists(out[1])  # a run that fails its checks leaves no folder behind


@pytest.mark.skipif(not installed("tensorflow", "tensorflow_datasets"),
                    reason="tensorflow-datasets datasets need tensorflow and tensorflow-datasets")
def test_train_on_a_tfds_dataset_with_mock_data(tmp_path):
    pytest.importorskip("tensorflow")
    tfds = pytest.importorskip("tensorflow_datasets")

    out = str(tmp_path / "cifar")
    with tfds.testing.mock_data(num_examples=16):
        assert cli.main(["train", *TINY, "--dataset", "cifar10", "--image-size", "16",
                         "--set", "patch_size=8", "--batch-size", "8", "--epochs", "2",
                         "--output", out]) == 0
    metrics = _metrics(out)
    vit = metrics["model_config"]["config"]
    assert metrics["steps_per_epoch"] == 2 and vit["patches"]["num_channels"] == 3
    assert metrics["config"]["dataset"] == "cifar10"
    assert metrics["augmentation"] == "inception_crop"  # tfds at a set size, as vit_jax
    assert vit["head"]["num_classes"] == 10


def test_convert_round_trip(tmp_path, capsys):
    source = fixture_path("vit_tiny_token_norep.npz")
    keras_file, npz_file = str(tmp_path / "m.keras"), str(tmp_path / "m.npz")
    assert cli.main(["convert", source, keras_file]) == 0
    assert cli.main(["convert", keras_file, npz_file]) == 0
    with np.load(source) as a, np.load(npz_file) as b:
        assert sorted(a.files) == sorted(b.files)
        for key in a.files:
            np.testing.assert_array_equal(a[key], b[key])


@pytest.mark.fashion_mnist
def test_pretrain_mpp_runs_whole_epochs(tmp_path, capsys):
    out = str(tmp_path / "mpp")
    assert cli.main(["pretrain-mpp", *TINY, "--epochs", "2", "--output", out]) == 0
    metrics = _metrics(out)
    assert [r["epoch"] for r in metrics["history"]] == [1, 2]
    assert np.isfinite(metrics["final_loss"]) and metrics["final_loss"] > 0
    assert cli.main(["pretrain-mpp", *TINY, "--batch-size", "512", "--output", out]) == 1
    assert "batch_size 512 is larger than the training set" in capsys.readouterr().err


def test_train_defaults_are_the_measured_recipe():
    # docs/results.md measures exactly this run: change both together
    args = cli.build_parser().parse_args(["train"])
    assert (args.dataset, args.batch_size, args.epochs) == ("fashion_mnist", 256, None)
    assert args.time_budget == 600.0  # the epochs are planned to end within the 10 minutes
    assert (args.learning_rate, args.weight_decay, args.label_smoothing) == (4e-3, 0.05, 0.1)
    assert (args.augmentation, args.resize_size, args.model, args.set) == (None, None, None, [])
    spec = run_model.model_spec(vars(args), channels=1)
    assert (spec.label, spec.image_size) == ("small-hybrid", 32)
    model = run_model.build_model(configs.TrainConfig(), image_size=32, num_classes=10, channels=1)
    # the measured command: keras-vit train --image-size 32 --set patch_size=2
    #   --set 'stem={"num_layers": [], "width_factor": 0.5}'  (a ViT-Ti/7 default underneath)
    measured = create_model("ViT-Ti/7", image_size=32, num_classes=10, num_channels=1,
                            hidden_size=64, num_layers=3, num_heads=4, mlp_dim=256,
                            classifier="gap", patch_size=2,
                            stem={"num_layers": [], "width_factor": 0.5})
    assert model.get_config() == measured.get_config() and model.count_params() == 161_642


def test_the_small_vit_is_one_flag_away_and_the_default_where_the_hybrid_is_not():
    small_vit = dict(hidden_size=64, num_layers=3, num_heads=4, mlp_dim=256, classifier="gap",
                     num_channels=1)
    for config in (configs.TrainConfig(model="small-vit"), configs.TrainConfig(dataset="digits"),
                   configs.PretrainMppConfig()):  # MPP predicts the pixels of plain patches
        spec = run_model.model_spec(config, channels=1)
        assert (spec.label, spec.name, spec.image_size) == ("small-vit", "ViT-Ti/7", None)
        assert spec.overrides == small_vit
    named = run_model.model_spec(configs.TrainConfig(model="ViT-B/16", set=["num_layers=2"]), 1)
    assert (named.label, named.name, named.overrides) == ("ViT-B/16", "ViT-B/16",
                                                          {"num_layers": 2})


@pytest.mark.fashion_mnist
def test_the_default_model_trains_at_its_own_size(tmp_path, capsys):
    out = str(tmp_path / "hybrid")
    tiny = ["--train-examples", "128", "--test-examples", "64", "--batch-size", "64",
            "--set", "hidden_size=16", "--set", "num_layers=1", "--set", "num_heads=2",
            "--set", "mlp_dim=32", "--epochs", "1", "--no-validate", "--verbose", "0"]
    assert cli.main(["train", *tiny, "--output", out]) == 0
    config = _metrics(out)["model_config"]["config"]
    assert config["image_size"] == [32, 32] and config["stem"]["width_factor"] == 0.5
    assert cli.main(["train", *tiny, "--image-size", "28", "--output", out + "28"]) == 1
    assert "not a multiple of the patch size times the ResNet stem stride (8)" in \
        capsys.readouterr().err


@pytest.mark.parametrize("command", sorted(configs.COMMANDS))
def test_the_flags_are_the_configurations(command):
    # one source of the defaults: the parsed defaults of a command are its dataclass's
    config_class = configs.COMMANDS[command]
    positional = {f.name: f"{f.name}.keras" for f in dataclasses.fields(config_class)
                  if f.metadata.get("positional")}
    args = vars(cli.build_parser().parse_args([command, *positional.values()]))
    assert args.pop("command") == command
    assert args == config_class(**positional).to_dict()
    assert config_class.from_dict(args) == config_class(**positional)


def test_a_configuration_dict_is_checked():
    config = configs.FinetuneConfig.from_dict({"checkpoint": "m.keras", "steps": np.int64(10),
                                               "learning_rate": 1})
    assert config.steps == 10 and type(config.steps) is int
    assert config.learning_rate == 1.0 and type(config.learning_rate) is float
    assert config.augmentation == "resize_crop" and config.dataset == "digits"
    with pytest.raises(ValueError, match="Unknown finetune option 'eval_evry' \\(did you mean "
                                         "'eval_every'\\?\\)"):
        finetune.finetune({"checkpoint": "m.keras", "eval_evry": 10})
    with pytest.raises(ValueError, match="The evaluate configuration needs checkpoint"):
        configs.EvaluateConfig.from_dict({})
    with pytest.raises(ValueError, match="a checkpoint .* or a published recipe"):
        finetune.finetune({})


def test_validation_epochs_are_every_nth_and_the_last():
    assert train._validation_epochs(19, 4) == [4, 8, 12, 16, 19]
    assert train._validation_epochs(8, 4) == [4, 8]
    assert train._validation_epochs(3, 1) == [1, 2, 3]


def test_validate_every_must_be_positive(tmp_path, capsys):
    assert cli.main(["train", *TINY, "--validate-every", "0", "--output", str(tmp_path)]) == 1
    assert "--validate-every must be at least 1, got 0" in capsys.readouterr().err


def test_parsing_of_the_other_commands():
    parser = cli.build_parser()
    args = parser.parse_args(["fewshot", "m.keras", "--shots", "1", "5", "--seeds", "0"])
    assert (args.dataset, args.shots, args.seeds, args.l2_reg) == ("digits", [1, 5], [0], 1024.0)
    args = parser.parse_args(["pretrain-mpp", "--target", "color_3bit", "--epochs", "1"])
    assert (args.target, args.corrupt_rate, args.dataset) == ("color_3bit", 0.5, "fashion_mnist")
    assert cli.main([]) == 2


@pytest.mark.fashion_mnist
def test_resume_refuses_other_options(tmp_path, capsys):
    out = str(tmp_path / "changed")
    argv = ["train", *TINY, "--epochs", "2", "--output", out]
    started = vars(cli.build_parser().parse_args(argv))
    started.pop("command")
    run_files.write_json(os.path.join(out, run_files.RUN_CONFIG),
                         dict(started, learning_rate=0.1, epochs=5))
    for name in run_files.AtomicBackup._FILES:  # a backup in Keras' own layout
        run_files.write_json(os.path.join(out, run_files.BACKUP, name), {})
    assert run_files.has_backup(out)
    assert cli.main(argv) == 1
    error = capsys.readouterr().err
    assert "interrupted run started with other options (learning_rate: 0.1 -> 0.004)" in error
    assert not os.path.exists(os.path.join(out, run_files.MODEL))  # nothing was trained


@pytest.mark.fashion_mnist
def test_resume_after_kill(tmp_path):
    out = str(tmp_path / "resume")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    command = [sys.executable, "-m", "keras_vit", "train", *TINY, "--epochs", "1000",
               "--output", out]
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    deadline = time.time() + 240
    try:
        while len(run_files.read_history(out)) < 3:
            assert process.poll() is None, process.stderr.read().decode()[-2000:]
            assert time.time() < deadline, "the run did not reach 3 epochs in time"
            time.sleep(0.05)
    finally:
        process.kill()
        process.wait()
    assert run_files.has_backup(out)
    done = len(run_files.read_history(out))
    epochs = done + 2
    assert cli.main(["train", *TINY, "--epochs", str(epochs), "--output", out]) == 0
    metrics = _metrics(out)
    assert metrics["resumed_from_epoch"] >= 2  # finished epochs were not redone
    assert [r["epoch"] for r in metrics["history"]] == list(range(1, epochs + 1))
    # the optimizer state came back too: its step count covers every epoch of both runs
    assert metrics["optimizer_iterations"] == epochs * metrics["steps_per_epoch"]


class Killed(Exception):
    """Stands for a kill: raised out of ``fit``, it leaves the backup a kill would leave."""


def _killed_after(epochs, monkeypatch):
    """Make ``train`` stop as if killed right after the backup of its ``epochs``-th epoch."""
    back_up = run_files.AtomicBackup.on_epoch_end

    def then_killed(backup, epoch, logs=None):
        back_up(backup, epoch, logs)
        if epoch + 1 == epochs:
            raise Killed

    monkeypatch.setattr(run_files.AtomicBackup, "on_epoch_end", then_killed)
    return lambda: monkeypatch.setattr(run_files.AtomicBackup, "on_epoch_end", back_up)


def _run_weights(folder):
    model = keras.saving.load_model(os.path.join(folder, run_files.MODEL), compile=False)
    return [keras.ops.convert_to_numpy(w) for w in model.weights]


@pytest.mark.fashion_mnist
@pytest.mark.backend_dependent  # the restored weights and optimizer go through each backend
@pytest.mark.parametrize("mixing", [["--mixup", "0.2"], ["--augreg", "medium2"]],
                         ids=["bit-mixup", "augreg"])
def test_a_resumed_run_trains_on_the_batches_of_an_uninterrupted_one(mixing, tmp_path,
                                                                     monkeypatch):
    argv = ["train", *TINY, "--epochs", "4", *mixing, "--seed", "5", "--output"]
    whole, resumed = str(tmp_path / "whole"), str(tmp_path / "resumed")
    assert cli.main([*argv, whole]) == 0
    not_killed = _killed_after(2, monkeypatch)
    with pytest.raises(Killed):
        cli.main([*argv, resumed])
    assert len(run_files.read_history(resumed)) == 2 and run_files.has_backup(resumed)
    not_killed()
    assert cli.main([*argv, resumed]) == 0
    assert _metrics(resumed)["resumed_from_epoch"] == 2
    # epochs 3 and 4 saw the same order, crops, flips, RandAugment draws and mixup partners as
    # the whole run's
    losses = [[r["loss"] for r in run_files.read_history(f)] for f in (whole, resumed)]
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-5)
    for got, expected in zip(_run_weights(resumed), _run_weights(whole), strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_train_on_a_cut_data_file_says_which_file_in_one_line(tmp_path, capsys):
    """A ``--data-dir`` whose images were cut short by an interrupted copy."""
    from tests.data.test_data_offline import _cut, _write_large

    (tmp_path / "data").mkdir()
    images = _write_large(tmp_path / "data")
    _cut(images)
    code = cli.main(["train", "--data-dir", str(tmp_path / "data"), "--epochs", "1",
                     "--output", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1, err
    assert err[0].startswith(f"keras-vit train: error: The Fashion-MNIST file {images!r} is "
                             "truncated (Compressed file ended before the end-of-stream marker")
    assert not (tmp_path / "run").exists()


def test_train_offline_without_the_data_says_how_to_get_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("KERAS_VIT_MIRROR", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KERAS_VIT_SYSTEM_DATASETS", "")
    code = cli.main(["train", "--epochs", "1", "--output", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1, err
    assert err[0].startswith("keras-vit train: error: Could not download http://127.0.0.1:9/")
    assert "Fashion-MNIST is not on this machine" in err[0]
    assert "apt-get install dataset-fashion-mnist" in err[0] and "--data-dir" in err[0]


def test_augreg_and_bit_mixup_do_not_combine(tmp_path, capsys):
    code = cli.main(["train", *TINY, "--epochs", "1", "--augreg", "light2", "--mixup", "0.2",
                     "--output", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1, err
    assert "--mixup 0.2 (BiT's mixup) and --augreg light2" in err[0]
    assert not (tmp_path / "run").exists()


@pytest.mark.fashion_mnist
def test_train_with_an_augreg_setting_and_stochastic_depth(tmp_path):
    """AugReg's strongest augmentation with its regularisation: the run records the setting
    and the saved model keeps its stochastic depth and dropout rates."""
    out = str(tmp_path / "run")
    assert cli.main(["train", *TINY, "--epochs", "1", "--augreg", "strong2", "--dropout", "0.1",
                     "--stochastic-depth", "0.1", "--weight-decay", "0.1", "--output",
                     out]) == 0
    config = _metrics(out)["config"]
    assert (config["augreg"], config["stochastic_depth"], config["dropout"]) == ("strong2", 0.1,
                                                                                   0.1)
    model = keras.saving.load_model(os.path.join(out, run_files.MODEL), compile=False)
    encoder = model.config.encoder
    assert (encoder.stochastic_depth_rate, encoder.dropout_rate) == (0.1, 0.1)
