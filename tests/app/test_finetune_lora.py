"""``keras-vit finetune --lora-rank``: LoRA fine-tuning end to end on a tiny official file."""

import json
import os

import keras
import numpy as np
import pytest

import keras_vit
from conftest import fixture_path
from keras_vit.app import cli, run_files
from keras_vit.layers.tree import sublayers
from keras_vit.models import lora
from keras_vit.training.recipes import prepare_finetuning

FILE = fixture_path("vit_tiny_token_norep.npz")
RUN = ["--dataset", "digits", "--image-size", "48", "--train-examples", "100",
       "--test-examples", "50", "--batch-size", "25", "--steps", "4", "--eval-every", "2",
       "--warmup-steps", "1", "--learning-rate", "0.1", "--verbose", "0"]


def _numpy(model, path):
    return next(keras.ops.convert_to_numpy(v) for v in model.weights if v.path == path)


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("lora") / "ft")
    return out, cli.main(["finetune", FILE, *RUN, "--lora-rank", "2", "--output", out])


def test_lora_finetuning_trains_the_factors_and_the_head_only(lora_run, capsys):
    out, code = lora_run
    assert code == 0
    with open(os.path.join(out, run_files.METRICS)) as f:
        metrics = json.load(f)
    start = prepare_finetuning(keras_vit.load_checkpoint(FILE), 10, image_size=48)
    expected = lora.trainable_parameters(lora.enable_lora(
        prepare_finetuning(keras_vit.load_checkpoint(FILE), 10, image_size=48), 2))
    assert metrics["trainable_params"] == expected < start.count_params() // 4
    assert metrics["config"]["lora_rank"] == 2 and metrics["updates"] == 4
    saved = keras.saving.load_model(os.path.join(out, run_files.MODEL), compile=False)
    # the factors were merged into the kernels: a plain model of the pre-trained size
    assert saved.count_params() == start.count_params()
    assert not any(getattr(layer, "lora_enabled", False) for layer in sublayers(saved))
    block = "Transformer/encoderblock_0"
    for frozen in ("MultiHeadDotProductAttention_1/key/kernel", "MlpBlock_3/Dense_0/kernel",
                   "LayerNorm_0/gamma", "MultiHeadDotProductAttention_1/query/bias"):
        path = f"{block}/{frozen}"
        np.testing.assert_array_equal(_numpy(saved, path), _numpy(start, path))
    for adapted in ("query", "value"):
        path = f"{block}/MultiHeadDotProductAttention_1/{adapted}/kernel"
        assert not np.allclose(_numpy(saved, path), _numpy(start, path))
    assert not np.allclose(_numpy(saved, "head/kernel"), 0.0)


def test_lora_finetuning_prints_the_trainable_count(tmp_path, capsys):
    out = str(tmp_path / "all")
    args = ["finetune", FILE, *RUN, "--steps", "2", "--eval-every", "1", "--lora-rank", "1",
            "--lora-targets", "all", "--output", out]
    assert cli.main(args) == 0
    printed = capsys.readouterr().out
    assert "LoRA rank 1 on the all attention projections" in printed
    with open(os.path.join(out, run_files.METRICS)) as f:
        count = json.load(f)["trainable_params"]
    assert f"{count:,} trainable parameters of" in printed


def test_lora_rank_on_a_model_without_attention_is_a_usage_error(tmp_path, capsys):
    at_its_size = [a for a in RUN if a not in ("--image-size", "48")]
    args = ["finetune", fixture_path("bit_tiny_r2-1_w32.npz"), *at_its_size, "--lora-rank", "2",
            "--output", str(tmp_path / "bit")]
    assert cli.main(args) == 1
    error = capsys.readouterr().err
    assert "--lora-rank" in error and "convolutions" in error
