import json

import keras
import numpy as np
import pytest

from keras_vit import distribution
from keras_vit.app import configs, finetune, run_files, run_model, run_plan, train
from keras_vit.costs.batches import largest_batch, plan_batch
from keras_vit.costs.devices import DEVICE_MEMORY_GIB, device_memory_gib

# the published ViT-B/16 fine-tune: batch 512 at 384 px
B16 = ("ViT-B/16", 384, 512)


@pytest.mark.parametrize("kind, devices, dtype, expected", [
    ("TPU v5 lite", 1, "mixed_bfloat16", (16, 32, 16)),  # Colab TPU v5e-1
    ("TPU v5 lite", 8, "mixed_bfloat16", (128, 4, 16)),  # Kaggle TPU v5e-8
    ("Tesla T4", 1, "mixed_float16", (16, 32, 16)),  # Colab T4
    ("Tesla T4", 2, "mixed_float16", (32, 16, 16)),  # Kaggle 2xT4
    ("NVIDIA H100 80GB HBM3", 1, "mixed_bfloat16", (128, 4, 128)),
])
def test_the_published_fine_tune_on_each_runtime(kind, devices, dtype, expected):
    plan = plan_batch(*B16, device_memory_gib(kind), devices=devices, dtype=dtype)
    assert (plan["micro_batch"], plan["accumulation"], plan["per_device"]) == expected
    assert plan["micro_batch"] * plan["accumulation"] == 512
    fits = largest_batch("ViT-B/16", 384, device_memory_gib(kind), dtype=dtype)
    assert plan["per_device"] <= fits < 2 * plan["per_device"]  # the largest split that fits


def test_a_batch_that_fits_needs_no_accumulation():
    assert plan_batch("ViT-B/32", 224, 64, DEVICE_MEMORY_GIB["H100"]) == {
        "micro_batch": 64, "accumulation": 1, "per_device": 64}


def test_bad_budgets_and_splits_are_refused():
    with pytest.raises(ValueError, match="more than 0.1 GiB.*mixed precision"):
        plan_batch(*B16, 0.1)
    with pytest.raises(ValueError, match="splits evenly over 8 devices.*multiple of 8"):
        plan_batch("ViT-B/16", 384, 12, 16, devices=8)
    with pytest.raises(ValueError, match="positive integer"):
        plan_batch("ViT-B/16", 384, 0, 16)
    with pytest.raises(ValueError, match="Unknown device kind 'Quadro X'"):
        device_memory_gib("Quadro X")


def test_precision_by_platform_and_compute_capability():
    assert distribution.precision("cpu") == "float32"
    assert distribution.precision("tpu", "TPU v5 lite") == "mixed_bfloat16"
    assert distribution.precision("gpu", "Tesla T4", "7.5") == "mixed_float16"
    assert distribution.precision("gpu", "NVIDIA L4", "8.9") == "mixed_bfloat16"
    assert distribution.precision("gpu", "NVIDIA A100-SXM4-40GB") == "mixed_bfloat16"


def _config(**values):
    return configs.FinetuneConfig.from_dict({"recipe": "vit_jax-b16-cifar10-500", **values})


@pytest.fixture
def b16():
    return lambda: ("ViT-B/16", 384)  # counted without building (a built model counts the same)


def test_run_plan_on_a_fake_accelerator(monkeypatch, capsys, b16):
    monkeypatch.setattr(run_plan, "accelerator", lambda: ("tpu", "TPU v5 lite", 8, None))
    plan = finetune._batch_plan(_config(), b16)
    assert (plan["accumulation"], plan["micro_batch"], plan["per_device"]) == (4, 128, 16)
    assert (plan["memory_gib"], plan["precision"], plan["planned"]) == (16, "mixed_bfloat16", True)
    assert ("TPU v5 lite x8, 16 GiB: batch 512 = 4 x micro-batch 128 (16 per device) (chosen "
            "to fit), precision mixed_bfloat16") in capsys.readouterr().out
    # an explicit accumulation overrides the choice
    plan = finetune._batch_plan(_config(accumulation=8), b16)
    assert (plan["accumulation"], plan["micro_batch"], plan["planned"]) == (8, 64, False)


def test_run_plan_on_an_unknown_device_and_on_a_cpu(monkeypatch, capsys, b16):
    monkeypatch.setattr(run_plan, "accelerator", lambda: ("gpu", "Quadro X", 1, "7.0"))
    plan = finetune._batch_plan(_config(), b16)
    out = capsys.readouterr().out
    assert "Unknown device kind 'Quadro X'" in out and "--memory-gib G" in out
    assert (plan["accumulation"], plan["precision"], plan["planned"]) == (8, "mixed_float16", False)
    plan = finetune._batch_plan(_config(memory_gib=24), b16)
    assert (plan["accumulation"], plan["micro_batch"]) == (16, 32)
    monkeypatch.setattr(run_plan, "accelerator", lambda: None)
    plan = finetune._batch_plan(_config(), b16)  # a CPU: the recipe's accumulation
    assert (plan["accumulation"], plan["precision"], plan["planned"]) == (8, "float32", False)


# `keras-vit train` on a tiny ViT, 2 steps: says its device, batch and precision, and trains in it
TINY_TRAIN = {"model": "small-vit",
              "set": ["patch_size=7", "hidden_size=16", "num_layers=1", "num_heads=2",
                      "mlp_dim=32"], "epochs": 1, "train_examples": 64, "test_examples": 32,
              "batch_size": 32, "warmup_steps": 1, "verbose": 0}


def _attention_in_float32(query, key, value, bias=None, flash_attention=None):
    """softmax(q k^T / sqrt(d) + bias) v with float32 logits. jax's CPU has no float16 x float16
    -> float32 dot_general, which jax's fused attention asks for (a T4 has it)."""
    ops = keras.ops
    scale = 1.0 / float(np.sqrt(query.shape[-1]))
    logits = ops.einsum("bqhd,bkhd->bhqk", ops.cast(query, "float32") * scale,
                        ops.cast(key, "float32"))
    if bias is not None:
        logits = logits + ops.cast(bias, "float32")
    return ops.einsum("bhqk,bkhd->bqhd", ops.cast(ops.softmax(logits), value.dtype), value)


@pytest.mark.parametrize("device, line, precision, scaled", [
    (None, "cpu x1: batch 32 (32 per device), precision float32", "float32", False),
    (("tpu", "TPU v5 lite", 1, None),
     "TPU v5 lite x1: batch 32 (32 per device), precision mixed_bfloat16", "mixed_bfloat16", False),
    (("gpu", "Tesla T4", 1, "7.5"),
     "Tesla T4 x1: batch 32 (32 per device), precision mixed_float16", "mixed_float16", True),
], ids=["cpu", "tpu", "t4"])
@pytest.mark.fashion_mnist
def test_train_says_its_device_and_precision(monkeypatch, capsys, tmp_path, device, line,
                                             precision, scaled):
    monkeypatch.setattr(run_plan, "accelerator", lambda: device)
    if keras.backend.backend() == "jax" and precision == "mixed_float16":
        monkeypatch.setattr(keras.ops, "dot_product_attention", _attention_in_float32)
    train.train(dict(TINY_TRAIN, output=str(tmp_path)))
    assert line in capsys.readouterr().out
    with open(tmp_path / run_files.METRICS) as file:
        metrics = json.load(file)
    assert metrics["batch_plan"] == {"device": device[1] if device else "cpu", "devices": 1,
                                     "precision": precision, "per_device": 32,
                                     "loss_scaling": scaled}
    assert metrics["model_config"]["dtype"]["config"]["name"] == precision
    assert np.isfinite(metrics["test_loss"]) and metrics["optimizer_iterations"] == 2


def test_a_dtype_set_on_the_command_line_is_kept():
    options = dict(image_size=28, num_classes=10, channels=1, dtype="mixed_float16")
    tiny = TINY_TRAIN["set"]
    vit = {"model": "small-vit", "set": tiny}
    assert run_model.build_model(vit, **options).dtype_policy.name == "mixed_float16"
    model = run_model.build_model(dict(vit, set=[*tiny, "dtype=float32"]), **options)
    assert model.dtype_policy.name == "float32"
