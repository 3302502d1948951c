import json
import os
import subprocess
import sys
import types

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit import distribution

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Shared by both subprocess scripts: a tiny ViT, fixed data, and one training run.
_COMMON = """
import json, os, sys
import numpy as np
CONFIG = dict(image_size=8, patch_size=4, hidden_size=16, num_layers=1, num_heads=4, mlp_dim=32,
              num_classes=5, head_kernel_initializer="glorot_uniform")
rng = np.random.default_rng(0)
X = rng.uniform(-1, 1, (16, 8, 8, 3)).astype("float32")
Y = rng.integers(0, 5, 16)

def run(model, init, keras):
    model.set_weights(init)
    model.compile(keras.optimizers.SGD(0.1),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    loss = model.fit(X, Y, batch_size=8, epochs=2, shuffle=False, verbose=0).history["loss"]
    return loss, model.predict(X, batch_size=8, verbose=0), model.get_weights()

def diffs(a, b):
    return {
        "loss": float(np.max(np.abs(np.subtract(a[0], b[0])))),
        "predictions": float(np.max(np.abs(a[1] - b[1]))),
        "weights": float(max(np.max(np.abs(u - v)) for u, v in zip(a[2], b[2]))),
    }
"""

_MIRRORED = _COMMON + """
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras
from keras_vit import ViTImageClassifier
from keras_vit.distribution import check_batch_size

keras.utils.set_random_seed(0)
reference = ViTImageClassifier(**CONFIG)
init = reference.get_weights()
single = run(reference, init, keras)
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
with strategy.scope():
    replicas = strategy.num_replicas_in_sync
    per_replica = check_batch_size(8)
    try:
        check_batch_size(7)
        odd_error = ""
    except ValueError as error:
        odd_error = str(error)
    mirrored = run(ViTImageClassifier(**CONFIG), init, keras)
print(json.dumps({"replicas": replicas, "per_replica": per_replica, "odd_error": odd_error,
                  "mirrored": diffs(single, mirrored), "loss_moved": single[0][0] - single[0][1]}))
"""

_JAX = _COMMON + """
import jax, keras
from keras_vit import ViTImageClassifier
from keras_vit.distribution import check_batch_size, layout_map

devices = keras.distribution.list_devices()
keras.utils.set_random_seed(0)
reference = ViTImageClassifier(**CONFIG)
init = reference.get_weights()
single = run(reference, init, keras)

keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices))
data_parallel = run(ViTImageClassifier(**CONFIG), init, keras)
dp_replicas = check_batch_size(8)

mesh = keras.distribution.DeviceMesh((2, 2), ("batch", "model"), devices)
keras.distribution.set_distribution(keras.distribution.ModelParallel(
    layout_map=layout_map(CONFIG, mesh), batch_dim_name="batch"))
model = ViTImageClassifier(**CONFIG)
block = model.get_layer("encoderblock_0")
specs = {
    "query_kernel": list(block.MultiHeadDotProductAttention_1.query.kernel.value.sharding.spec),
    "out_kernel": list(block.MultiHeadDotProductAttention_1.out.kernel.value.sharding.spec),
    "mlp_0": list(block.MlpBlock_3.Dense_0.kernel.value.sharding.spec),
    "mlp_1": list(block.MlpBlock_3.Dense_1.kernel.value.sharding.spec),
    "head": list(model.get_layer("head").kernel.value.sharding.spec),
}
shard_shape = block.MlpBlock_3.Dense_0.kernel.value.addressable_shards[0].data.shape
model_parallel = run(model, init, keras)
print(json.dumps({"devices": len(devices), "specs": specs, "shard_shape": list(shard_shape),
                  "mp_per_replica": check_batch_size(8),
                  "data_parallel": diffs(single, data_parallel),
                  "model_parallel": diffs(single, model_parallel), "dp_per_replica": dp_replicas}))
"""


def _run_script(script, backend, extra_env=None):
    env = dict(os.environ, KERAS_BACKEND=backend, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3")
    env.update(extra_env or {})
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow",
    reason="tf.distribute runs under KERAS_BACKEND=tensorflow",
)
def test_mirrored_strategy_on_two_cpus_matches_one_device():
    out = _run_script(_MIRRORED, "tensorflow")
    print("MirroredStrategy (2 logical CPUs) vs one device:", out["mirrored"])
    assert out["replicas"] == 2 and out["per_replica"] == 4
    assert "not divisible by the 2 replicas" in out["odd_error"]
    assert out["loss_moved"] > 0  # the comparison is of a run that actually trains
    assert out["mirrored"]["loss"] < 1e-5
    assert out["mirrored"]["weights"] < 1e-5
    assert out["mirrored"]["predictions"] < 1e-4


@pytest.mark.skipif(
    keras.backend.backend() != "jax", reason="keras.distribution runs under KERAS_BACKEND=jax"
)
def test_jax_data_and_model_parallel_match_one_device():
    out = _run_script(_JAX, "jax", {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"})
    print("DataParallel (4 CPUs) vs one device:", out["data_parallel"])
    print("ModelParallel (2x2 mesh) vs one device:", out["model_parallel"])
    assert out["devices"] == 4
    assert out["dp_per_replica"] == 2 and out["mp_per_replica"] == 4
    specs = out["specs"]
    assert specs["query_kernel"] == [None, "model"]
    assert specs["out_kernel"] == ["model", None]
    assert specs["mlp_0"] == [None, "model"]
    assert specs["mlp_1"] == ["model", None]
    assert "model" not in specs["head"]
    assert out["shard_shape"] == [16, 16]  # (D, M / 2)
    for setting in ("data_parallel", "model_parallel"):
        assert out[setting]["loss"] < 1e-5
        assert out[setting]["weights"] < 1e-5
        assert out[setting]["predictions"] < 1e-4  # logits of size ~1


_EIGHT = """
import json, keras, numpy as np
from keras_vit import ViTImageClassifier, data, distribution
from keras_vit.app import cli

CONFIG = dict(image_size=8, patch_size=4, num_channels=1, num_classes=10, hidden_size=16,
              num_layers=1, num_heads=2, mlp_dim=32, head_kernel_initializer="glorot_uniform")

def measure(model):
    model.compile(loss="categorical_crossentropy", weighted_metrics=["accuracy"])
    test = data.load("digits", "test", batch_size=64)  # 899 = 14 x 64 + 3
    x, y = data.as_arrays(test)
    return (model.evaluate(test, return_dict=True, verbose=0)["accuracy"],
            distribution.predict(model, x, 64).argmax(-1).tolist(), len(x))

keras.utils.set_random_seed(0)
one_model = ViTImageClassifier(**CONFIG)
one = measure(one_model)
replicas = distribution.data_parallel()
eight_model = ViTImageClassifier(**CONFIG)
eight_model.set_weights(one_model.get_weights())
eight = measure(eight_model)
try:
    data.load("digits", "train", batch_size=60)
    refused = ""
except ValueError as error:
    refused = str(error)
rounded = len(data.load("digits", "test", batch_size=60)[0][0])
tiny = ["--train-examples", "256", "--test-examples", "100", "--batch-size", "64", "--epochs",
        "1", "--set", "hidden_size=16", "--set", "num_layers=1", "--verbose", "0",
        "--output", OUTPUT]
code = cli.main(["train", *tiny])
with open(OUTPUT + "/metrics.json") as f:
    metrics = json.load(f)
print(json.dumps({"replicas": replicas, "one": one, "eight": eight, "refused": refused,
                  "rounded": rounded,
                  "cli": code, "cli_accuracy": metrics["test_accuracy"]}))
"""


@pytest.mark.skipif(
    keras.backend.backend() != "jax", reason="keras.distribution runs under KERAS_BACKEND=jax"
)
def test_eight_devices_evaluate_like_one_and_the_cli_shards(tmp_path):
    script = f"OUTPUT = {str(tmp_path / 'run')!r}\n" + _EIGHT
    out = _run_script(script, "jax", {"XLA_FLAGS": "--xla_force_host_platform_device_count=8"})
    assert out["replicas"] == 8
    one, eight = out["one"], out["eight"]
    assert one[2] == eight[2] == 899
    assert eight[0] == one[0] and eight[1] == one[1]  # same accuracy, same predictions
    assert 0 < one[0] < 1 and len(set(one[1])) > 1
    assert "not divisible by the 8 replicas" in out["refused"] and "56 or 64" in out["refused"]
    assert out["rounded"] == 64  # an evaluation batch rounds up: its size changes no result
    assert out["cli"] == 0 and 0 < out["cli_accuracy"] <= 1


# Every evaluation path on a device count that divides neither the examples nor the batch
# sizes: the results are those of one device (the same model, weights and inputs).
_ANY_COUNT = """
import json, keras, numpy as np
from keras_vit import ViTImageClassifier, data, distribution, evaluation
from keras_vit.inspection import attention_weights
from keras_vit.training import classification_loss

CONFIG = dict(image_size=8, patch_size=4, num_channels=1, num_classes=10, hidden_size=16,
              num_layers=1, num_heads=2, mlp_dim=32, head_kernel_initializer="glorot_uniform")

def build(weights=None):
    model = ViTImageClassifier(**CONFIG)
    if weights is not None:
        model.set_weights(weights)
    model.compile(loss=classification_loss(), weighted_metrics=["accuracy"])
    return model

def test_batches():  # 203 images in batches of 50: the last one is partial
    return data.load("digits", "test", batch_size=50, image_size=8, max_examples=203)

def measure(model):
    x, y = data.as_arrays(test_batches())
    return {
        "predict": distribution.predict(model, x[:13], batch_size=5).tolist(),
        "arrays": distribution.evaluate(model, x[:13], y[:13], batch_size=5),
        "pipeline": distribution.evaluate(model, test_batches()),
        "fewshot": evaluation.fewshot_linear(model, x[:101], y[:101], x[101:], y[101:],
                                             shots=(5,), seeds=(0,), batch_size=7)[5]["mean"],
        "attention": attention_weights(model, x[:13], batch_size=5)[0].tolist(),
        "speed": len(evaluation.inference_speed({"m": model}, x[:13], rounds=1)),
    }

keras.utils.set_random_seed(0)
one_model = build()
x, y = data.as_arrays(test_batches())
keras_one = one_model.evaluate(test_batches(), return_dict=True, verbose=0)
one = measure(one_model)
many = {}
for count in (8, 3):  # all the devices, then a mesh of 3 of them
    devices = keras.distribution.list_devices()[:count]
    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices))
    many[count] = dict(measure(build(one_model.get_weights())),
                       replicas=distribution.num_replicas(), batch=len(test_batches()[0][0]))
print(json.dumps({"one": one, "many": many, "keras_one": keras_one}))
"""


@pytest.mark.skipif(
    keras.backend.backend() != "jax", reason="keras.distribution runs under KERAS_BACKEND=jax"
)
def test_every_evaluation_path_works_on_any_device_count():
    out = _run_script(_ANY_COUNT, "jax", {"XLA_FLAGS": "--xla_force_host_platform_device_count=8"})
    one = out["one"]
    # On one device Keras's own mean over the 203 images is exact: the same numbers.
    assert abs(one["pipeline"]["loss"] - out["keras_one"]["loss"]) < 1e-5
    assert abs(one["pipeline"]["accuracy"] - out["keras_one"]["accuracy"]) < 1e-6
    for devices, many in out["many"].items():
        assert many["replicas"] == int(devices)
        assert many["batch"] == 50 + -50 % int(devices)  # evaluation batches round up
        np.testing.assert_allclose(many["predict"], one["predict"], atol=1e-5)
        assert len(many["predict"]) == 13
        for how in ("arrays", "pipeline"):
            assert many[how]["accuracy"] == one[how]["accuracy"], (devices, how)
            assert abs(many[how]["loss"] - one[how]["loss"]) < 1e-5, (devices, how)
        assert many["fewshot"] == one["fewshot"]
        np.testing.assert_allclose(many["attention"], one["attention"], atol=1e-5)
        assert many["speed"] == 1


def test_evaluate_drops_the_padding_from_loss_and_accuracy(monkeypatch):
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(3)])
    model.compile(loss=keras.losses.CategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    x = np.random.default_rng(0).normal(size=(13, 2)).astype("float32")
    y = np.arange(13) % 3
    one_hot = np.eye(3, dtype="float32")[y]
    expected = model.evaluate(x, one_hot, batch_size=13, return_dict=True, verbose=0)
    monkeypatch.setattr(distribution.replicas, "num_replicas", lambda: 8)
    for result in (distribution.evaluate(model, x, y, batch_size=5),
                   distribution.evaluate(model, x, one_hot),
                   # batches as a pipeline gives them: the last padded with weight-0 rows
                   distribution.evaluate(model, [(x[:8], one_hot[:8], np.ones(8)),
                                                 (np.pad(x[8:], ((0, 3), (0, 0))),
                                                  np.pad(one_hot[8:], ((0, 3), (0, 0))),
                                                  np.r_[np.ones(5), np.zeros(3)])])):
        assert abs(result["loss"] - expected["loss"]) < 1e-6
        assert abs(result["accuracy"] - expected["accuracy"]) < 1e-6


def test_evaluate_takes_the_models_loss_in_any_form():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(3, activation="softmax")])
    x = np.random.default_rng(1).normal(size=(7, 2)).astype("float32")
    y = np.arange(7) % 3
    assert list(distribution.evaluate(model, x, y)) == ["accuracy"]  # not compiled: no loss
    losses = {}
    for loss in ("sparse_categorical_crossentropy", "categorical_crossentropy",
                 keras.losses.SparseCategoricalCrossentropy()):
        model.compile(loss=loss)
        losses[str(loss)] = distribution.evaluate(model, x, y)["loss"]
    probabilities = keras.ops.convert_to_numpy(model(x))
    expected = -np.mean(np.log(probabilities[np.arange(7), y]))
    assert np.allclose(list(losses.values()), expected, atol=1e-5)
    with pytest.raises(ValueError, match="nothing to evaluate"):
        distribution.evaluate(model, [])


def test_evaluation_batch_size():
    assert distribution.evaluation_batch_size(500, replicas=8) == 504
    assert distribution.evaluation_batch_size(64, replicas=8) == 64
    assert distribution.evaluation_batch_size(7, replicas=3) == 9
    with pytest.raises(ValueError, match="must be a positive integer"):
        distribution.evaluation_batch_size(0, replicas=8)


def test_predict_pads_to_the_replicas(monkeypatch):
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(3)])
    seen = []
    original = model.predict

    def spy(x, batch_size, verbose):
        seen.append((len(x), batch_size))
        return original(x, batch_size=batch_size, verbose=verbose)

    monkeypatch.setattr(model, "predict", spy)
    monkeypatch.setattr(distribution.replicas, "num_replicas", lambda: 8)
    x = np.random.default_rng(0).normal(size=(13, 2)).astype("float32")
    out = distribution.predict(model, x, batch_size=5)
    assert seen == [(16, 8)] and out.shape == (13, 3)
    np.testing.assert_allclose(out, original(x, verbose=0), atol=1e-6)


def test_data_parallel_is_a_no_op_on_one_device():
    assert distribution.data_parallel() == 1
    assert keras.distribution.distribution() is None


def test_layout_map_matches_every_sharded_vit_weight():
    model = keras_vit.ViTImageClassifier(
        image_size=8, patch_size=4, hidden_size=8, num_layers=2, num_heads=2, mlp_dim=16,
        num_classes=3,
    )
    mesh = keras.distribution.DeviceMesh((1, 1), ("batch", "model"), ["cpu:0"])
    layouts = distribution.layout_map(model, mesh)
    sharded = {}
    for v in model.weights:
        layout = layouts[v.path]
        if layout is not None:
            assert len(layout.axes) == len(v.shape), v.path
            sharded[v.path.split("encoderblock_", 1)[1].split("/", 1)[1]] = layout.axes
    expected = {
        "MultiHeadDotProductAttention_1/query/kernel": (None, "model"),
        "MultiHeadDotProductAttention_1/key/kernel": (None, "model"),
        "MultiHeadDotProductAttention_1/value/kernel": (None, "model"),
        "MultiHeadDotProductAttention_1/query/bias": ("model",),
        "MultiHeadDotProductAttention_1/key/bias": ("model",),
        "MultiHeadDotProductAttention_1/value/bias": ("model",),
        "MultiHeadDotProductAttention_1/out/kernel": ("model", None),
        "MlpBlock_3/Dense_0/kernel": (None, "model"),
        "MlpBlock_3/Dense_0/bias": ("model",),
        "MlpBlock_3/Dense_1/kernel": ("model", None),
    }
    assert sharded == expected
    assert sum(layouts[v.path] is not None for v in model.weights) == 2 * len(expected)
    # The backbone, the descriptions and their dicts work too, a paper name's through registry.
    for described in (model.backbone, model.config, model.config.encoder, model.get_config(),
                      model.config.to_dict(), {"num_heads": 2, "mlp_dim": 16},
                      keras_vit.models.registry.model_config("ViT-B/16")):
        assert len(distribution.layout_map(described, mesh)) == 6


def test_layout_map_errors():
    vit_b = keras_vit.models.registry.model_config("ViT-B/16")
    devices = ["cpu:0"]
    mesh = keras.distribution.DeviceMesh((1,), ("batch",), devices)
    with pytest.raises(ValueError, match="no 'model' axis"):
        distribution.layout_map(vit_b, mesh)
    fake = types.SimpleNamespace(shape=(1, 5), axis_names=("batch", "model"))
    with pytest.raises(TypeError, match="DeviceMesh"):
        distribution.layout_map(vit_b, fake)
    mesh = keras.distribution.DeviceMesh((1, 1), ("batch", "model"), devices)
    class FiveWayMesh(keras.distribution.DeviceMesh):  # without needing 5 devices
        shape, axis_names = (1, 5), ["batch", "model"]

        def __init__(self):
            pass

    mesh_5 = FiveWayMesh()
    with pytest.raises(ValueError, match=r"num_heads \(12\) is not divisible.*\(5\)"):
        distribution.layout_map(vit_b, mesh_5)
    with pytest.raises(TypeError, match="ViTBackbone or ViTImageClassifier, its ViTConfig"):
        distribution.layout_map(42, mesh)
    with pytest.raises(TypeError, match=r"not its name 'ViT-B/16'.*model_config\('ViT-B/16'\)"):
        distribution.layout_map("ViT-B/16", mesh)
    with pytest.raises(TypeError, match="ViTBackbone or ViTImageClassifier"):
        distribution.layout_map(keras_vit.ResNetImageClassifier(
            block_units=[1], width_factor=0.5, image_size=8), mesh)


def test_check_batch_size():
    assert distribution.check_batch_size(512, replicas=8) == 64
    assert distribution.check_batch_size(32) == 32 // distribution.num_replicas()
    with pytest.raises(ValueError, match=r"not divisible by the 8 replicas.*96"):
        distribution.check_batch_size(100, replicas=8)
    with pytest.raises(ValueError, match="must be a positive integer"):
        distribution.check_batch_size(0, replicas=1)


class _FakeTF:
    """Just enough of tensorflow to see which strategy ``strategy()`` picks."""

    def __init__(self, gpus=0, tpu=False):
        calls = self.calls = []

        def resolver(tpu=None):
            if not self.tpu:
                raise ValueError("no TPU")
            calls.append(("resolver", tpu))
            return "resolver"

        self.tpu = tpu
        cluster_resolver = types.SimpleNamespace(TPUClusterResolver=resolver)
        self.distribute = types.SimpleNamespace(
            cluster_resolver=cluster_resolver,
            TPUStrategy=lambda r: ("TPUStrategy", r),
            MirroredStrategy=lambda devices: ("MirroredStrategy", tuple(devices)),
            get_strategy=lambda: "default",
        )
        gpu_list = [types.SimpleNamespace(name=f"/device:GPU:{i}") for i in range(gpus)]
        self.config = types.SimpleNamespace(
            list_logical_devices=lambda kind: gpu_list if kind == "GPU" else [],
            experimental_connect_to_cluster=lambda r: calls.append(("connect", r)),
        )
        self.tpu_module = types.SimpleNamespace(
            experimental=types.SimpleNamespace(
                initialize_tpu_system=lambda r: calls.append(("initialize", r))
            )
        )


def _strategy_with(monkeypatch, fake, env=None):
    monkeypatch.setattr(keras.backend, "backend", lambda: "tensorflow")
    module = types.ModuleType("tensorflow")
    module.distribute, module.config, module.tpu = fake.distribute, fake.config, fake.tpu_module
    monkeypatch.setitem(sys.modules, "tensorflow", module)
    for name in ("COLAB_TPU_ADDR", "TPU_NAME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in (env or {}).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(distribution.replicas.glob, "glob", lambda pattern: [])
    monkeypatch.setattr(distribution.replicas.os.path, "exists", lambda path: False)
    return distribution.strategy()


def test_strategy_picks_tpu_then_gpus_then_default(monkeypatch):
    fake = _FakeTF(gpus=1, tpu=True)
    assert _strategy_with(monkeypatch, fake) == "default"  # no TPU hint: no resolver call
    assert fake.calls == []
    fake = _FakeTF(gpus=0, tpu=True)
    assert _strategy_with(monkeypatch, fake, {"COLAB_TPU_ADDR": "10.0.0.2:8470"}) == (
        "TPUStrategy", "resolver",
    )
    assert fake.calls == [("resolver", None), ("connect", "resolver"), ("initialize", "resolver")]
    fake = _FakeTF(gpus=2, tpu=False)
    assert _strategy_with(monkeypatch, fake, {"TPU_NAME": "x"}) == (
        "MirroredStrategy", ("/device:GPU:0", "/device:GPU:1"),
    )


def test_strategy_is_none_off_tensorflow(monkeypatch):
    monkeypatch.setattr(keras.backend, "backend", lambda: "jax")
    assert distribution.strategy() is None
    assert np.isscalar(distribution.num_replicas())
