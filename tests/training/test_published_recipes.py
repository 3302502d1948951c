"""The published fine-tune recipes: their settings, the command line, and a few steps of each
through the 127.0.0.1 mirror (tiny files under the published names, tensorflow-datasets mock
data)."""

import json
import os

import pytest

from keras_vit.app import cli, configs, finetune, run_files
from keras_vit.training.published import RECIPES, recipe
from tests import mirror
from tests.conftest import fixture_path, installed

tfds = pytest.importorskip("tensorflow_datasets")
# The recipes' datasets are tensorflow-datasets', read through tf.data: a run needs TensorFlow,
# which the dev extra leaves out (tests/data/test_without_tensorflow.py: the error without it).
needs_tensorflow = pytest.mark.skipif(not installed("tensorflow"),
                                      reason="a recipe's tfds dataset needs tensorflow")

# The official settings, read from vision_transformer c6de1e5 (vit_jax.ipynb, README.md,
# vit_jax/configs/common.py): (checkpoint, dataset, px, steps, warmup, published).
OFFICIAL = {
    "vit_jax-colab-b32-cifar10": ("imagenet21k/ViT-B_32", "cifar10", 224, 100, 5, 0.977),
    "vit_jax-b16-cifar10-500": ("imagenet21k/ViT-B_16", "cifar10", 384, 500, 50, 0.9859),
    "vit_jax-b16-cifar10-1000": ("imagenet21k/ViT-B_16", "cifar10", 384, 1000, 100, 0.9886),
    "vit_jax-b16-cifar100-500": ("imagenet21k/ViT-B_16", "cifar100", 384, 500, 50, 0.8917),
    "vit_jax-b16-cifar100-1000": ("imagenet21k/ViT-B_16", "cifar100", 384, 1000, 100, 0.9115),
}


@pytest.mark.parametrize("name", sorted(OFFICIAL))
def test_recipes_are_the_official_configurations(name):
    r = recipe(name)
    assert (r.checkpoint, r.dataset, r.image_size, r.steps, r.warmup_steps,
            r.published_accuracy) == OFFICIAL[name]
    # common to all: vit_jax/configs/common.py and the Colab
    assert (r.batch_size, r.accumulation, r.learning_rate, r.decay, r.clipnorm,
            r.momentum_dtype, r.train_split, r.test_split) == (
        512, 8, 0.03, "cosine", 1.0, "bfloat16", "train[:98%]", "test")
    assert sorted(RECIPES) == sorted(OFFICIAL)


def test_command_line_recipe_sets_defaults_that_flags_override():
    parser = cli.build_parser()
    args = cli._parse(parser, ["finetune", "--recipe", "vit_jax-b16-cifar100-500",
                               "--steps", "10", "--eval-every", "5"])
    config = configs.FinetuneConfig(**{k: v for k, v in vars(args).items() if k != "command"})
    assert (config.checkpoint, config.dataset, config.image_size) == (
        "imagenet21k/ViT-B_16", "cifar100", 384)
    # the accumulation is chosen at run time: by the device's memory, or the recipe's 8 on a CPU
    assert (config.batch_size, config.accumulation, config.steps, config.eval_every) == (
        512, None, 10, 5)
    from_dict = configs.FinetuneConfig.from_dict(
        {"recipe": "vit_jax-b16-cifar100-500", "steps": 10, "eval_every": 5})
    assert from_dict == config


def test_unknown_recipes_and_runs_without_a_checkpoint_are_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        cli.main(["finetune", "--recipe", "vit_jax-b16-cifar10-50"])
    assert "did you mean 'vit_jax-b16-cifar10-500'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="Unknown fine-tuning recipe"):
        configs.FinetuneConfig.from_dict({"recipe": "b16"})
    with pytest.raises(ValueError, match="a checkpoint .* or a published recipe"):
        finetune.finetune({"dataset": "digits", "output": str(tmp_path / "y")})


@needs_tensorflow
def test_a_batch_the_recipes_accumulation_does_not_divide_is_refused(tmp_path):
    with pytest.raises(ValueError, match="not divisible by --accumulation 8"):
        finetune.finetune({"recipe": "vit_jax-b16-cifar10-500", "batch_size": 12,
                           "output": str(tmp_path / "x")})


# Every recipe goes through the same command; two of them cover both checkpoints and both
# datasets (the settings of all five are pinned above), which keeps CI's time down.
@needs_tensorflow
@pytest.mark.parametrize("name", ["vit_jax-colab-b32-cifar10", "vit_jax-b16-cifar100-500"])
def test_recipes_run_offline_and_records_the_published_figure(
        name, download_mirror, tmp_path, capsys):
    root, _ = download_mirror
    mirror.put(root, mirror.checkpoint_url(recipe(name).checkpoint),
               fixture_path("vit_tiny_token_rep16.npz"))
    out = str(tmp_path / "run")
    with tfds.testing.mock_data(num_examples=16):
        code = cli.main(["finetune", "--recipe", name, "--image-size", "32", "--batch-size", "16",
                         "--steps", "2", "--eval-every", "1", "--warmup-steps", "1",
                         "--test-examples", "8", "--verbose", "0", "--output", out])
    assert code == 0
    published = recipe(name).published_accuracy
    assert f"(published: {published:.4f}, {name})" in capsys.readouterr().out
    with open(os.path.join(out, run_files.METRICS)) as f:
        metrics = json.load(f)
    assert (metrics["recipe"], metrics["published_accuracy"]) == (name, published)
    assert (metrics["updates"], metrics["micro_batch"]) == (2, 2)  # 16 / accumulation 8
    config = metrics["config"]
    assert (metrics["accumulation"], config["learning_rate"], config["train_split"]) == (
        8, 0.03, "train[:98%]")
    assert config["dataset"] == recipe(name).dataset
