"""``keras-vit convert`` through every format, keeping the logits."""

import pytest
from interop_helpers import assert_close, images, numpy

from conftest import fixture_path
from keras_vit import load_checkpoint
from keras_vit.app import cli


def test_convert_chain_keeps_the_logits(tmp_path, capsys):
    for module in ("transformers", "torch", "safetensors"):
        pytest.importorskip(module)
    source = fixture_path("vit_tiny_token_norep.npz")
    expected = numpy(load_checkpoint(source)(images(32)))
    timm_file, hf_dir = str(tmp_path / "m.safetensors"), str(tmp_path / "hf")
    keras_file, npz_file = str(tmp_path / "m.keras"), str(tmp_path / "m.npz")
    assert cli.main(["convert", source, timm_file]) == 0
    # The fixture has the official tanh GELU, which a timm state dict does not record.
    assert cli.main(["convert", timm_file, hf_dir, "--format", "transformers",
                     "--num-heads", "4", "--tanh-gelu"]) == 0
    assert cli.main(["convert", hf_dir, keras_file]) == 0
    assert cli.main(["convert", keras_file, npz_file]) == 0
    assert "wrote" in capsys.readouterr().out
    for path in (timm_file, hf_dir, npz_file):
        options = dict(num_heads=4, approximate_gelu=True) if path == timm_file else {}
        model = load_checkpoint(path, **options)
        assert_close(numpy(model(images(32))), expected, f"convert {path[-12:]}")


def test_convert_to_onnx(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    source = fixture_path("vit_tiny_token_norep.npz")
    target = str(tmp_path / "m.onnx")
    assert cli.main(["convert", source, target, "--batch-size", "2"]) == 0
    session = ort.InferenceSession(target)
    x = images(32)
    out = session.run(None, {session.get_inputs()[0].name: x})[0]
    assert_close(out, numpy(load_checkpoint(source)(x)), "convert onnx", 1e-4)


def test_convert_errors_name_the_fix(tmp_path, capsys):
    source = fixture_path("vit_tiny_token_norep.npz")
    assert cli.main(["convert", source, str(tmp_path / "folder")]) == 1
    assert "say which kind with --format, one of transformers, keras_hub, saved_model" in \
        capsys.readouterr().err
    assert cli.main(["convert", source, str(tmp_path / "m.xyz")]) == 1
    assert "Cannot tell the export format" in capsys.readouterr().err
    assert cli.main(["convert", source, str(tmp_path / "m.bin"), "--format", "png"]) == 1
    assert "Unknown target format" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
