"""Hugging Face transformers ViT folders <-> keras_vit, against the real transformers package.

Small random models in both directions: transformers saves a folder, keras_vit loads it and
gives the same logits; keras_vit saves a folder, ``from_pretrained`` loads it with no missing
or unexpected keys and gives the same logits. Nothing is downloaded.
"""

import json

import numpy as np
import pytest
from interop_helpers import assert_close, images, nchw, numpy, randomise_keras, randomise_torch

from keras_vit import ViTBackbone, ViTImageClassifier, load_checkpoint, save_checkpoint

transformers = pytest.importorskip("transformers")  # in the dev extra; see the README
pytest.importorskip("torch")  # its models
pytest.importorskip("safetensors")  # the folders' weights

SMALL = dict(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2,
             num_attention_heads=4, intermediate_size=64)
CONFIGS = {
    "classifier": dict(num_labels=5),  # hidden_act "gelu" (exact), layer_norm_eps 1e-12
    "classifier_tanh_1e-6": dict(num_labels=5, hidden_act="gelu_pytorch_tanh",
                                 layer_norm_eps=1e-6),
    "classifier_gelu_new": dict(num_labels=5, hidden_act="gelu_new"),
    "classifier_no_qkv_bias": dict(num_labels=5, qkv_bias=False),
    "model_pooler": dict(),
    "model_pooler_narrow": dict(pooler_output_size=16),
    "model_no_pooler": dict(),
}


def _hf(case):
    config = transformers.ViTConfig(**SMALL, **CONFIGS[case])
    if case.startswith("classifier"):
        return transformers.ViTForImageClassification(config)
    return transformers.ViTModel(config, add_pooling_layer=case != "model_no_pooler")


def _outputs(module, x):
    """A classifier's logits; a ViTModel's last_hidden_state (the backbone's tokens)."""
    import torch

    with torch.no_grad():
        out = module(nchw(x))
    if hasattr(out, "logits"):
        return out.logits.numpy()
    return out.last_hidden_state.numpy()


def _pooler(module, x):
    import torch

    with torch.no_grad():
        return module(nchw(x)).pooler_output.numpy()


def _keras_outputs(model, x):
    """What ``_outputs`` gives for transformers: a backbone's tokens, a classifier's logits (a
    head of the pooler alone: its backbone's tokens, ViTModel's last_hidden_state)."""
    if isinstance(model, ViTImageClassifier) and model.config.head.num_classes is None:
        model = model.backbone
    outputs = model(x)
    return numpy(outputs["tokens"] if isinstance(model, ViTBackbone) else outputs)


def _reload(case, folder):
    """The folder keras_vit wrote, through from_pretrained with no missing or unexpected keys (a
    ViTModel with its pooler for a head of the pooler alone, else without)."""
    cls = type(_hf(case))
    kwargs = {} if case.startswith("classifier") else dict(
        add_pooling_layer=case.startswith("model_pooler"))
    module, info = cls.from_pretrained(folder, output_loading_info=True, **kwargs)
    problems = {k: v for k, v in info.items() if v}
    assert not problems, problems
    return module.eval()


@pytest.mark.parametrize("case", sorted(CONFIGS))
def test_transformers_both_ways(case, tmp_path):
    """ViTForImageClassification <-> ViTImageClassifier (logits), ViTModel <-> ViTBackbone
    (the token sequence); a ViTModel with a pooler <-> a ViTImageClassifier whose head is the
    pooler alone (its output the pooler's), by default; the pooler is kept under a new class
    layer with num_classes=K, where it gives the pooler's output as the classifier's features."""
    reference = randomise_torch(_hf(case))
    reference.save_pretrained(tmp_path / "hf")
    x = images()
    pooler = case.startswith("model_pooler")
    model = load_checkpoint(tmp_path / "hf")
    expected = ViTImageClassifier if case.startswith("classifier") or pooler else ViTBackbone
    assert type(model) is expected
    assert_close(_keras_outputs(model, x), _outputs(reference, x), f"transformers {case} load")
    if pooler:
        assert_close(numpy(model(x)), _pooler(reference, x), f"transformers {case} pooler")
        headed = load_checkpoint(tmp_path / "hf", num_classes=3)
        assert_close(numpy(headed.feature_extractor()(x)), _pooler(reference, x),
                     f"transformers {case} pooler under a new head")
        assert type(load_checkpoint(tmp_path / "hf", num_classes=0)) is ViTBackbone

    save_checkpoint(model, tmp_path / "back", format="transformers")
    reloaded = _reload(case, tmp_path / "back")
    assert_close(_outputs(reloaded, x), _keras_outputs(model, x), f"transformers {case} save")
    if pooler:
        assert_close(_pooler(reloaded, x), numpy(model(x)), f"transformers {case} pooler save")


def test_pytorch_model_bin_with_in_memory_key_names(tmp_path):
    """A pytorch_model.bin with the newer in-memory names (layers.N.attention.q_proj)."""
    import torch

    reference = randomise_torch(_hf("classifier"))
    reference.config.save_pretrained(tmp_path)
    torch.save(reference.state_dict(), tmp_path / "pytorch_model.bin")
    x = images()
    assert_close(numpy(load_checkpoint(tmp_path)(x)), _outputs(reference, x),
                 "transformers pytorch_model.bin load")


def test_keras_model_to_transformers_and_back_is_exact(tmp_path):
    model = randomise_keras(ViTImageClassifier(
        image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64,
        num_classes=5))
    save_checkpoint(model, tmp_path / "hf", format="transformers")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["hidden_act"] == "gelu_pytorch_tanh" and config["layer_norm_eps"] == 1e-6
    again = load_checkpoint(tmp_path / "hf")
    for a, b in zip(model.weights, again.weights):
        np.testing.assert_array_equal(numpy(a), numpy(b))
    x = images()
    assert_close(_outputs(_reload("classifier", tmp_path / "hf"), x), numpy(model(x)),
                 "transformers keras-built save")
    save_checkpoint(model.backbone, tmp_path / "backbone", format="transformers")
    config = json.loads((tmp_path / "backbone" / "config.json").read_text())
    assert config["architectures"] == ["ViTModel"]
    assert_close(_outputs(_reload("model_no_pooler", tmp_path / "backbone"), x),
                 numpy(model.backbone(x)["tokens"]), "transformers keras-built backbone save")
    again = load_checkpoint(tmp_path / "backbone")
    assert isinstance(again, ViTBackbone) and again.config == model.backbone.config


def test_new_head_and_resolution_on_load(tmp_path):
    randomise_torch(_hf("model_pooler")).save_pretrained(tmp_path / "hf")
    model = load_checkpoint(tmp_path / "hf", num_classes=3, image_size=48)
    head = model.config.head
    assert head.representation_size == 32 and head.num_classes == 3
    assert numpy(model(images(48))).shape == (2, 3)
    model = load_checkpoint(tmp_path / "hf", drop_pre_logits=True)
    assert isinstance(model, ViTBackbone)


def test_a_pooler_folder_round_trips_exactly_and_drops_nothing(tmp_path):
    """The shape of google/vit-base-patch16-224-in21k: a ViTModel with its pooler (here 16
    wide), loaded by default as a head of the pooler alone and written back key for key."""
    from safetensors.numpy import load_file

    randomise_torch(_hf("model_pooler_narrow")).save_pretrained(tmp_path / "hf")
    model = load_checkpoint(tmp_path / "hf")
    head = model.config.head
    assert (head.num_classes, head.representation_size) == (None, 16)
    assert model.output_shape == (None, 16)
    save_checkpoint(model, tmp_path / "back", format="transformers")
    original = load_file(str(tmp_path / "hf" / "model.safetensors"))
    written = load_file(str(tmp_path / "back" / "model.safetensors"))
    assert sorted(written) == sorted(original)
    for key, value in original.items():
        np.testing.assert_array_equal(written[key], value, err_msg=key)
    config = json.loads((tmp_path / "back" / "config.json").read_text())
    assert config["architectures"] == ["ViTModel"] and config["pooler_output_size"] == 16
    from keras_vit.training import prepare_finetuning

    task = prepare_finetuning(model, 4, keep_pre_logits=True)  # a class layer on the pooler
    assert task.output_shape == (None, 4) and task.backbone is model.backbone
    for a, b in zip(task.get_layer("pre_logits").weights, model.get_layer("pre_logits").weights):
        np.testing.assert_array_equal(numpy(a), numpy(b))


def _edit_config(folder, **changes):
    path = folder / "config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))


@pytest.mark.parametrize("changes, words", [
    (dict(hidden_act="relu"), "hidden_act='relu'"),
    (dict(model_type="deit"), "only 'vit'"),
    (dict(pooler_act="relu"), "pooler_act"),
])
def test_unsupported_configs_are_refused(changes, words, tmp_path):
    randomise_torch(_hf("classifier")).save_pretrained(tmp_path)
    _edit_config(tmp_path, **changes)
    with pytest.raises(ValueError, match=words):
        load_checkpoint(tmp_path)


def test_missing_and_truncated_weights(tmp_path):
    randomise_torch(_hf("classifier")).save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 3])
    with pytest.raises(ValueError, match="truncated or corrupt"):
        load_checkpoint(tmp_path)
    weights.unlink()
    with pytest.raises(ValueError, match="none of"):
        load_checkpoint(tmp_path)
    (tmp_path / "config.json").unlink()
    with pytest.raises(ValueError, match="a folder that no checkpoint format reads "
                                         r"\(transformers: a Hugging Face ViT folder \(config"):
        load_checkpoint(tmp_path)


@pytest.mark.parametrize("kwargs, words", [
    (dict(classifier="gap"), "pools the class token"),
    (dict(representation_size=16), "no pre-logits layer"),
    (dict(stem=dict(num_layers=[1], width_factor=1), patch_size=1), "no ResNet stem"),
    (dict(position_embedding="learned_2d"), "learned 1-D position embedding"),
])
def test_models_transformers_cannot_express_are_refused(kwargs, words, tmp_path):
    config = dict(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=4,
                  mlp_dim=64, num_classes=5)
    model = ViTImageClassifier(**dict(config, **kwargs))
    with pytest.raises(ValueError, match=words):
        save_checkpoint(model, tmp_path / "hf", format="transformers")
    assert not list(tmp_path.iterdir())


def test_keras_hub_refuses_another_layer_norm_epsilon(tmp_path):
    pytest.importorskip("keras_hub")
    from keras_vit import to_keras_hub

    randomise_torch(_hf("classifier")).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="epsilon"):
        to_keras_hub(load_checkpoint(tmp_path), strict=False)
