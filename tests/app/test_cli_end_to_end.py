"""Every command and option the README names, run end to end on tiny data.

Tiny models and a few steps keep each run to seconds; where a run is meant to learn, its result
is checked against chance (10 classes: 0.1).
"""

import json
import os
import shutil
import subprocess

import keras
import numpy as np
import pytest

import keras_vit
from conftest import LOGIT_ATOL, fixture_path, installed
from keras_vit import data
from keras_vit.app import cli, run_files

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QUIET = ["--verbose", "0"]
SMALL_DATA = ["--train-examples", "64", "--test-examples", "32", "--batch-size", "32"]
TINY_VIT = ["--model", "small-vit", "--set", "patch_size=7", "--set", "hidden_size=16",
            "--set", "num_layers=1", "--set", "num_heads=2", "--set", "mlp_dim=32"]
CHANCE = 0.1


def _metrics(folder):
    with open(os.path.join(folder, run_files.METRICS)) as f:
        return json.load(f)


def _run(*argv):
    assert cli.main([*argv, *QUIET]) == 0


@pytest.fixture(scope="module")
def learned(tmp_path_factory):
    """A tiny ViT trained on 1024 Fashion-MNIST images: well above chance."""
    out = str(tmp_path_factory.mktemp("learned") / "train")
    _run("train", *TINY_VIT, "--train-examples", "1024", "--test-examples", "256",
         "--batch-size", "64", "--epochs", "3", "--warmup-steps", "4", "--learning-rate", "3e-3",
         "--output", out)
    return out


@pytest.mark.fashion_mnist
def test_train_learns(learned):
    metrics = _metrics(learned)
    assert metrics["test_accuracy"] > 2 * CHANCE, metrics["test_accuracy"]


@pytest.mark.fashion_mnist
def test_evaluate_split(learned, tmp_path):
    out = str(tmp_path / "eval")
    model_file = os.path.join(learned, run_files.MODEL)
    _run("evaluate", model_file, "--split", "train", "--test-examples", "128", "--output", out)
    metrics = _metrics(out)
    assert metrics["config"]["split"] == "train"
    # the same number as evaluating the first 128 training images by hand
    model = keras.saving.load_model(model_file, compile=False)
    model.compile(loss=keras_vit.training.classification_loss(), metrics=["accuracy"])
    train = data.load("fashion_mnist", "train", training=False, batch_size=256, image_size=28,
                      max_examples=128, channels=1)
    expected = model.evaluate(train, return_dict=True, verbose=0)["accuracy"]
    assert metrics["test_accuracy"] == pytest.approx(expected, abs=1e-6)
    assert metrics["test_accuracy"] > 2 * CHANCE


@pytest.mark.fashion_mnist
@pytest.mark.skipif(not installed("safetensors"), reason=".safetensors files need safetensors")
def test_evaluate_a_timm_file(tmp_path):
    """evaluate and finetune take every format load_checkpoint reads, not only .keras and .npz:
    a timm state dict gives the same accuracy as the same model's .keras file."""
    pytest.importorskip("safetensors")
    keras.utils.set_random_seed(0)
    model = keras_vit.ViTImageClassifier(  # width 192: timm's ViT-Ti, so the file names its heads
        image_size=28, patch_size=7, num_channels=1, num_classes=10, hidden_size=192,
        num_layers=1, num_heads=3, mlp_dim=384)
    sources = [str(tmp_path / "vit.keras"), str(tmp_path / "vit.safetensors")]
    model.save(sources[0])
    keras_vit.save_checkpoint(model, sources[1], format="timm")
    results = []
    for i, source in enumerate(sources):
        _run("evaluate", source, "--test-examples", "128", "--output", str(tmp_path / f"e{i}"))
        results.append(_metrics(str(tmp_path / f"e{i}"))["test_accuracy"])
    assert results[1] == pytest.approx(results[0], abs=1e-6)


@pytest.mark.fashion_mnist
def test_fewshot_of_a_trained_model(learned, tmp_path, capsys):
    out = str(tmp_path / "fewshot")
    _run("fewshot", os.path.join(learned, run_files.MODEL), "--dataset", "fashion_mnist",
         "--shots", "1", "10", "--seeds", "0", "1", "--train-examples", "1000",
         "--test-examples", "200", "--output", out)
    results = _metrics(out)["fewshot"]
    assert sorted(results) == ["1", "10"]
    assert len(results["10"]["per_seed"]) == 2
    assert min(results[shots]["mean"] for shots in results) > 2 * CHANCE, results
    assert "10-shot linear accuracy" in capsys.readouterr().out


@pytest.mark.parametrize("model, overrides, setting", [
    ("BiT-R26x1", ["--set", "block_units=[1,1]", "--set", "width_factor=0.5"],
     lambda config: config["config"]["stages"]["block_units"]),
    ("R+ViT-Ti/16", ["--set", "hidden_size=16", "--set", "num_layers=1", "--set", "num_heads=2",
                     "--set", "mlp_dim=32", "--set", 'stem={"num_layers":[],"width_factor":0.5}'],
     lambda config: config["config"]["stem"]),
])
@pytest.mark.fashion_mnist
def test_train_other_families_with_mixup_and_no_validation(model, overrides, setting, tmp_path):
    out = str(tmp_path / "run")
    _run("train", "--model", model, *overrides, "--image-size", "32", *SMALL_DATA,
         "--epochs", "2", "--warmup-steps", "2", "--mixup", "0.2", "--no-validate",
         "--output", out)
    metrics = _metrics(out)
    assert setting(metrics["model_config"]) is not None
    assert metrics["config"]["mixup"] == 0.2 and metrics["config"]["validate"] is False
    assert not any("val_loss" in record for record in metrics["history"])
    assert len(metrics["history"]) == 2 and 0.0 <= metrics["test_accuracy"] <= 1.0
    model = keras.saving.load_model(os.path.join(out, run_files.MODEL), compile=False)
    assert model.input_shape == (None, 32, 32, 3)  # the grayscale images are made RGB


def test_finetune_an_official_npz(tmp_path):
    out = str(tmp_path / "ft")
    _run("finetune", fixture_path("vit_tiny_token_norep.npz"), "--dataset", "digits",
         "--image-size", "48", "--train-examples", "200", "--test-examples", "100",
         "--batch-size", "32", "--steps", "40", "--eval-every", "20", "--warmup-steps", "4",
         "--use-ema", "--output", out)
    metrics = _metrics(out)
    model = keras.saving.load_model(os.path.join(out, run_files.MODEL), compile=False)
    assert isinstance(model, keras_vit.ViTImageClassifier)
    assert model.config.head == keras_vit.models.description.Head(num_classes=10)
    assert model.config.image_size == (48, 48) and model.config.grid == (12, 12)
    # 40 steps of a random-weight tiny model do not learn digits reliably: the point here is
    # that the official file loads, trains at a new resolution with a new head, and saves
    assert metrics["steps"] == 40 and [r["epoch"] for r in metrics["history"]] == [1, 2]
    assert 0.0 <= metrics["test_accuracy"] <= 1.0


@pytest.mark.fashion_mnist
def test_pretrain_mpp_encoder_loads_back_and_finetunes(tmp_path):
    out = str(tmp_path / "mpp")
    _run("pretrain-mpp", *TINY_VIT, *SMALL_DATA, "--epochs", "1", "--warmup-steps", "1",
         "--output", out)
    encoder_file = os.path.join(out, run_files.MODEL)
    encoder = keras.saving.load_model(encoder_file, compile=False)
    assert isinstance(encoder, keras_vit.ViTImageClassifier)
    assert (encoder.config.encoder.hidden_size, encoder.config.patches.patch_size) == (16, 7)
    assert encoder.count_params() == _metrics(out)["num_params"]
    # the file holds the trained encoder, not a fresh one: its weights differ from the
    # initialisation the run started from (same seed, same model)
    keras.utils.set_random_seed(0)
    fresh = keras_vit.create_model("ViT-Ti/7", image_size=28, num_classes=10, num_channels=1,
                                   hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32,
                                   classifier="gap", patch_size=7)
    changed = [not np.array_equal(a, b) for a, b in
               zip(fresh.get_layer("embedding").get_weights(),
                   encoder.get_layer("embedding").get_weights())]
    assert all(changed)
    ft = str(tmp_path / "ft")
    _run("finetune", encoder_file, "--dataset", "digits", "--image-size", "28",
         "--examples-per-class", "2", "--batch-size", "10", "--steps", "2", "--eval-every", "1",
         "--test-examples", "20", "--output", ft)
    assert _metrics(ft)["steps"] == 2


def test_console_script(tmp_path):
    script = shutil.which("keras-vit")
    assert script, "the keras-vit console script is not installed: pip install -e ."
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    target = str(tmp_path / "converted.keras")
    done = subprocess.run([script, "convert", fixture_path("vit_tiny_token_rep16.npz"), target],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"wrote {target}" in done.stdout
    model = keras.saving.load_model(target, compile=False)
    io = np.load(fixture_path("vit_tiny_token_rep16_io.npz"))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model(io["images"])), io["logits"],
                               atol=LOGIT_ATOL, rtol=0)
