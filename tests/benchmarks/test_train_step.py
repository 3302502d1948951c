"""benchmarks/train_step.py refuses clearly when what it compares is not installed."""

import importlib.util
import os
import sys
import types

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import train_step  # noqa: E402


def without(monkeypatch, *modules):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in modules else real(name, *a))


def run_main(monkeypatch, *argv):
    monkeypatch.setattr(sys, "argv", ["train_step.py", *argv])
    train_step.main()


def test_nothing_importable_names_every_package_and_its_install(monkeypatch, capsys):
    without(monkeypatch, "jax", "tensorflow", "torch", "timm")
    with pytest.raises(SystemExit):
        run_main(monkeypatch)
    error = capsys.readouterr().err
    for text in ("cannot import jax, tensorflow, torch, timm, timm-compile", "pip install jax",
                 "pip install tensorflow-cpu", "pip install --no-deps timm"):
        assert text in error


def test_a_missing_package_asked_for_by_name_is_an_error(monkeypatch, capsys):
    without(monkeypatch, "timm")
    with pytest.raises(SystemExit):
        run_main(monkeypatch, "--impl", "jax", "timm")
    error = capsys.readouterr().err
    assert "cannot import timm;" in error and "pip install --no-deps timm" in error


def test_a_missing_package_in_the_default_list_is_skipped_with_a_note(monkeypatch, capsys):
    pytest.importorskip("jax")  # the one left (the core install's backend)
    without(monkeypatch, "tensorflow", "torch", "timm", "flax")
    parser = train_step.argparse.ArgumentParser()
    kept = train_step.check_installed(parser, list(train_step.IMPLEMENTATIONS), explicit=False)
    assert kept == ["jax"]
    assert "skipping tensorflow, torch, timm, timm-compile, flax" in capsys.readouterr().err


def test_table_ratios_are_per_round(capsys):
    class W:
        def __init__(self, impl, seconds, ops=None):
            self.impl, self.seconds, self.cpu_seconds, self.ops = impl, seconds, seconds, ops

    args = train_step.argparse.Namespace(model="small-vit", batch=256, device="cpu", ops=True)
    text = train_step.table([W("torch", [0.04, 0.08], 3790), W("timm", [0.02, 0.08], 2746)],
                            args)
    assert "| keras_vit, torch backend | 60.0 (40.0-80.0) |" in text
    assert "| 3,790 | 0.83 (0.50-1.00) |" in text


def test_flax_needs_a_vit_jax_snapshot_on_the_cpu(monkeypatch, capsys, tmp_path):
    with pytest.raises(SystemExit):
        run_main(monkeypatch, "--impl", "flax")
    assert "flax needs --vit-jax DIR" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        run_main(monkeypatch, "--impl", "flax", "--vit-jax", str(tmp_path))
    assert "holds no vit_jax/models_vit.py" in capsys.readouterr().err
    _stand_in(tmp_path)
    with pytest.raises(SystemExit):
        run_main(monkeypatch, "--impl", "flax", "--vit-jax", str(tmp_path), "--device", "gpu")
    assert "flax runs on the CPU only" in capsys.readouterr().err
    parser = train_step.argparse.ArgumentParser()
    args = train_step.argparse.Namespace(impl=None, vit_jax=None, device="cpu")
    assert "flax" not in train_step._with_vit_jax(parser, args)
    assert "(skipping flax: it needs --vit-jax DIR" in capsys.readouterr().err


# A stand-in for vit_jax's models_vit with its constructor's arguments: the harness's step (optax,
# donation, the loop, the clock) runs here, where no snapshot of the official code is.
STAND_IN = """
import flax.linen as nn
import jax.numpy as jnp

class VisionTransformer(nn.Module):
    num_classes: int
    patches: object
    transformer: dict
    hidden_size: int
    representation_size: object = None
    classifier: str = "token"

    @nn.compact
    def __call__(self, x, *, train):
        x = nn.Conv(self.hidden_size, self.patches.size, strides=self.patches.size)(x)
        return nn.Dense(self.num_classes)(jnp.mean(x, axis=(1, 2)))
"""


def _stand_in(folder):
    (folder / "vit_jax").mkdir()
    (folder / "vit_jax" / "__init__.py").write_text("")
    (folder / "vit_jax" / "models_vit.py").write_text(STAND_IN)


def test_the_flax_step_trains_and_times(tmp_path, monkeypatch):
    pytest.importorskip("flax")
    pytest.importorskip("optax")
    _stand_in(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the snapshot's folder is put first
    args = train_step.argparse.Namespace(batch=4, steps=3, vit_jax=str(tmp_path))
    run = train_step.flax_training(train_step.MODELS["small-vit"], args)
    seconds, cpu_seconds = run()
    assert seconds > 0 and cpu_seconds > 0
    assert run()[0] > 0  # the donated state is carried from call to call


def test_a_profile_is_shares_of_operation_kinds():
    assert [train_step._kind(name) for name in ("ynn_fusion.122", "aten::addmm", "copy")] == [
        "ynn_fusion", "addmm", "copy"]
    shares = train_step._shares({"a": 3.0, "b": 1.0, "c": 0.0}, top=2)
    assert shares == [("a", 0.75), ("b", 0.25)]


def test_a_gpu_kernel_is_named_by_its_kind():
    names = ["void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>"
             "(int, float)", "triton_poi_fused_add_mul_3", "sm90_xmma_gemm_bf16bf16_bf16f32",
             "loop_multiply_fusion.12", "void flash_fwd_kernel<Flash_fwd_params>(Flash_fwd_params)"]
    assert [train_step._kernel_kind(name) for name in names] == [
        "vectorized_elementwise_kernel", "triton_poi_fused_add_mul",
        "sm90_xmma_gemm_bf16bf16_bf16f32", "loop_multiply_fusion", "flash_fwd_kernel"]


def _trace(process, thread, events):
    return [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": process}},
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": 7, "args": {"name": thread}},
            {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "/host:CPU"}},
            {"ph": "M", "name": "thread_name", "pid": 2, "tid": 3, "args": {"name": "python"}},
            {"ph": "X", "pid": 2, "tid": 3, "name": "PjitFunction", "dur": 1000}] + [
        {"ph": "X", "pid": 1, "tid": 7, "name": name, "dur": dur} for name, dur in events]


def test_a_gpu_trace_is_read_from_the_cards_stream_lines():
    events = _trace("/device:GPU:0", "Stream #14(Compute)",
                    [("sm90_xmma_gemm_bf16", 60), ("loop_add_fusion.3", 30),
                     ("loop_add_fusion", 10)])
    assert train_step._xla_shares(events, 8, "gpu") == ([("sm90_xmma_gemm_bf16", 0.6),
                                                         ("loop_add_fusion", 0.4)], 100e-6)
    ops = _trace("/device:GPU:0", "XLA Ops", [("fusion.1", 3), ("custom-call", 1)])
    assert train_step._xla_shares(ops, 8, "gpu") == ([("fusion", 0.75), ("custom-call", 0.25)],
                                                     4e-6)
    # Lines the reader does not know: an error that lists them, for the next call to read.
    with pytest.raises(RuntimeError, match=r"no GPU operations.*/device:GPU:0.*Kernels"):
        train_step._xla_shares(_trace("/device:GPU:0", "Kernels", [("gemm", 5)]), 8, "gpu")


def test_a_torch_gpu_profile_counts_kernels_by_their_time_on_the_card():
    def event(key, device, cpu=0.0, card=0.0, count=1):
        return types.SimpleNamespace(key=key, count=count, device_type=types.SimpleNamespace(
            name=device), self_cpu_time_total=cpu, self_device_time_total=card)

    events = [event("aten::mm", "CPU", cpu=50, count=4), event("aten::add", "CPU", cpu=50),
              event("void gemm_kernel<float>(float*)", "CUDA", card=75),
              event("elementwise_kernel", "CUDA", card=25)]
    assert train_step._torch_shares(events, 8, "gpu") == (5, [("gemm_kernel", 0.75),
                                                              ("elementwise_kernel", 0.25)], 1e-4)
    assert train_step._torch_shares(events, 8, "cpu") == (5, [("mm", 0.5), ("add", 0.5)], 1e-4)
    with pytest.raises(RuntimeError, match="no CUDA kernel.*CUPTI"):
        train_step._torch_shares(events[:2], 8, "gpu")


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_the_profiles_name_where_a_small_step_goes(backend):
    pytest.importorskip(backend)
    if backend == "jax":
        import jax.numpy as jnp

        def run():
            x = jnp.ones((64, 64))
            (jnp.tanh(x @ x) @ x).block_until_ready()
        shares, seconds = train_step._xla_profile(run)
    else:
        import torch

        def run():
            x = torch.ones((64, 64))
            torch.tanh(x @ x) @ x
        count, shares, seconds = train_step._torch_profile(run)
        assert count >= 3  # the two products and the tanh, at least
    total = sum(share for _, share in shares)
    assert 0 < seconds < 60
    assert shares and all(0 <= share <= 1 for _, share in shares) and total <= 1 + 1e-9
    if len(shares) < 8:  # every kind listed: the shares add up
        assert total == pytest.approx(1)
    if backend == "torch":
        assert "mm" in {kind for kind, _ in shares}


@pytest.mark.parametrize("projections", ["fused", "concatenated"])
def test_one_product_for_queries_keys_and_values(monkeypatch, projections):
    """The benchmark's layouts of the q/k/v projections: the concatenated one computes what the
    three products compute; the fused one trains (its own weights)."""
    import keras
    import numpy as np

    from keras_vit.layers import attention

    layer_class = attention.MultiHeadSelfAttention
    for name in ("build", "_project"):  # restored after the test
        monkeypatch.setattr(layer_class, name, getattr(layer_class, name))
    x = np.random.default_rng(0).normal(size=(2, 5, 16)).astype("float32")
    separate = layer_class(num_heads=4)
    expected = keras.ops.convert_to_numpy(separate(x))
    spec = dict(train_step.MODELS["small-vit"], steps=2)
    args = train_step.argparse.Namespace(batch=4, steps=2, device="cpu")
    model, run = train_step.keras_training(spec, {"projections": projections}, args)
    assert run()[0] > 0
    paths = [v.path for v in model.trainable_variables]
    assert any("/qkv/" in p for p in paths) == (projections == "fused")
    if projections == "concatenated":
        np.testing.assert_allclose(keras.ops.convert_to_numpy(separate(x)), expected, atol=1e-6)


def test_the_small_hybrid_is_the_commands_default_and_timm_builds_its_shape():
    """The benchmark's "small-hybrid" is `keras-vit train`'s default on Fashion-MNIST; timm's
    model of that shape (its R+ViT root) has the same parameters and takes the same images."""
    from keras_vit.app import configs, runs

    spec = train_step.MODELS["small-hybrid"]
    model = train_step.keras_model(spec)
    default = runs.build_model(configs.TrainConfig(), image_size=32, num_classes=10, channels=1)
    assert model.get_config() == default.get_config()
    # root 16x16 outputs x 7x7x1x32, then the 16 tokens of the small encoder
    tokens = 16 * (4 * 64 * 64 + 2 * 64 * 256) + 2 * 16 * 16 * 64
    assert train_step.train_macs(spec) == 16 * 16 * 49 * 32 + 16 * 2 * 2 * 32 * 64 + \
        3 * tokens + 64 * 10
    if importlib.util.find_spec("timm") is None:
        pytest.skip("timm builds the same shape where it is installed (pip install --no-deps timm)")
    import torch

    timm = train_step.timm_model(spec, {})
    assert sum(p.numel() for p in timm.parameters()) == model.count_params()
    assert tuple(timm(torch.zeros(2, 1, 32, 32)).shape) == (2, 10)
    with pytest.raises(ValueError, match="the ResNet root alone"):
        train_step.train_macs(dict(spec, stem={"num_layers": [2], "width_factor": 1}))
