"""ResNet building blocks: weight standardisation, GroupNorm, units, roots, stems."""

import json

import keras
import numpy as np
import pytest

from keras_vit.layers.resnet import (
    BiTRoot,
    HybridStem,
    PostActivationUnit,
    PreActivationUnit,
    StandardizedConv2D,
    group_norm,
    max_pool_3x3_stride_2,
    standardized_conv,
)


def _numpy(x):
    return keras.ops.convert_to_numpy(x)


@pytest.mark.parametrize("style", ["hybrid", "bit"])
def test_weight_standardisation_formula(style):
    conv = standardized_conv(4, 3, style=style)
    conv.build((None, 5, 5, 3))
    rng = np.random.default_rng(0)
    # A small spread makes the epsilon placement visible: std + 1e-5 vs sqrt(var + 1e-10).
    kernel = (0.3 + 1e-3 * rng.normal(size=(3, 3, 3, 4))).astype("float32")
    conv.kernel.assign(kernel)
    w = kernel.astype("float64")
    centred = w - w.mean(axis=(0, 1, 2), keepdims=True)
    var = (centred**2).mean(axis=(0, 1, 2), keepdims=True)
    hybrid = centred / (np.sqrt(var) + 1e-5)
    bit = centred / np.sqrt(var + 1e-10)
    expected, other = (hybrid, bit) if style == "hybrid" else (bit, hybrid)
    got = _numpy(conv.standardized_kernel())
    np.testing.assert_allclose(got, expected, rtol=2e-4, atol=2e-4)
    assert np.abs(got - other).max() > 5e-3  # the two formulas are told apart
    np.testing.assert_array_equal(_numpy(conv.kernel), kernel)  # the raw kernel is kept


def test_weight_standardisation_runs_in_the_forward_pass():
    conv = StandardizedConv2D(6, 3, padding="same")
    x = np.random.default_rng(1).normal(size=(2, 7, 7, 5)).astype("float32")
    before = _numpy(conv(x))
    # An affine change of the raw kernel leaves the standardised kernel, hence the output, alone.
    conv.kernel.assign(conv.kernel * 3.0 + 0.5)
    np.testing.assert_allclose(_numpy(conv(x)), before, atol=1e-4)


def test_group_norm_settings():
    hybrid, bit = group_norm("a", "hybrid"), group_norm("b", "bit")
    assert (hybrid.groups, hybrid.epsilon) == (32, 1e-6)
    assert (bit.groups, bit.epsilon) == (32, 1e-5)


def test_units_projection_and_shapes():
    bit = PreActivationUnit(32, strides=2)
    assert bit(np.ones((1, 9, 9, 64), "float32")).shape == (1, 5, 5, 128)
    assert bit.has_projection and bit.gn_proj is None
    identity = PostActivationUnit(32)
    assert identity(np.ones((1, 9, 9, 128), "float32")).shape == (1, 9, 9, 128)
    assert not identity.has_projection and identity.conv_proj is None
    hybrid = PostActivationUnit(32, strides=2)
    assert hybrid(np.ones((1, 9, 9, 64), "float32")).shape == (1, 5, 5, 128)
    assert hybrid.gn_proj is not None
    np.testing.assert_array_equal(_numpy(hybrid.gn3.gamma), 0.0)  # zero-init as official


def test_bit_root_pads_max_pool_with_zeros():
    root = BiTRoot(32)
    x = np.random.default_rng(3).normal(size=(1, 8, 8, 3)).astype("float32")
    out = _numpy(root(x))
    conv = _numpy(root.conv_root(root.pad_conv(x)))[0]  # (4, 4, 32)

    def pool(padded):
        return np.stack([[padded[2 * i:2 * i + 3, 2 * j:2 * j + 3].max(axis=(0, 1))
                          for j in range(2)] for i in range(2)])

    zeros = pool(np.pad(conv, ((1, 1), (1, 1), (0, 0))))
    minus_inf = pool(np.pad(conv, ((1, 1), (1, 1), (0, 0)), constant_values=-np.inf))
    np.testing.assert_allclose(out[0], zeros, atol=1e-6)
    assert np.abs(zeros - minus_inf).max() > 0  # the padding value matters on this input


@pytest.mark.parametrize("side", [7, 8, 17])
def test_max_pool_3x3_stride_2_is_the_windows_maximum(side):
    x = np.random.default_rng(side).normal(size=(2, side, side + 1, 3)).astype("float32")
    out = _numpy(max_pool_3x3_stride_2(x))
    rows, cols = (side - 1) // 2, side // 2
    expected = np.stack([np.stack([x[:, 2 * i:2 * i + 3, 2 * j:2 * j + 3].max(axis=(1, 2))
                                   for j in range(cols)], axis=1) for i in range(rows)], axis=1)
    np.testing.assert_array_equal(out, expected)


def test_max_pool_3x3_stride_2_makes_no_copy_on_torch():
    # Keras' channels-last pooling on torch copies its input into NCHW order and the gradient
    # back; the root pools the NCHW view instead (at batch 256, a seventh of the small hybrid's
    # training step was these copies). Counts of operations do not depend on the machine.
    if keras.backend.backend() != "torch":
        pytest.skip("the copies are those of Keras' torch backend")
    import torch
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(4, 17, 17, 32, requires_grad=True)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as trace:
        out = max_pool_3x3_stride_2(x)
        out.backward(torch.randn(out.shape))  # a dense gradient, as the next layer's
    assert out.is_contiguous()
    sizes = ([4, 32, 17, 17], [4, 17, 17, 32])
    copies = [e for e in trace.events() if e.name == "aten::copy_"
              and any(list(shape) in sizes for shape in e.input_shapes)]
    assert not copies, [e.input_shapes for e in copies]


@pytest.mark.parametrize("num_layers,stride,channels", [
    ((), 4, 64), ([3, 4, 9], 16, 1024), ((3, 4, 6, 3), 32, 2048), ((2, 2, 2, 2), 32, 2048),
])
def test_stem_stride_known_at_construction(num_layers, stride, channels):
    stem = HybridStem(num_layers=num_layers, width_factor=1)
    assert not stem.built and stem.stride == stride and stem.out_channels == channels
    config = stem.get_config()
    json.dumps(config)
    assert config["num_layers"] == list(num_layers)


def test_stem_output_matches_stride(images):
    stem = HybridStem(num_layers=[1, 1], width_factor=0.5)
    assert stem(images).shape == (2, 32 // stem.stride, 32 // stem.stride, 256)


@pytest.mark.parametrize("num_layers", [[0, 1], 3, [2, -1]])
def test_bad_stage_list(num_layers):
    with pytest.raises(ValueError, match="num_layers"):
        HybridStem(num_layers=num_layers, width_factor=1)
