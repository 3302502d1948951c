"""The device table: the memory of each kind, under the names jax and nvidia-smi give it."""

import pytest

from keras_vit.costs.devices import DEVICE_MEMORY_GIB, device_memory_gib


def test_device_kinds():
    assert DEVICE_MEMORY_GIB["TPU v5e"] == 16 and DEVICE_MEMORY_GIB["TPU v6e"] == 32
    assert device_memory_gib("TPU v5 lite") == 16 and device_memory_gib("TPU v6 lite") == 32
    assert device_memory_gib("Tesla T4") == 15 and device_memory_gib("NVIDIA L4") == 24
    assert device_memory_gib("NVIDIA A100-SXM4-40GB") == 40
    assert device_memory_gib("NVIDIA H100 80GB HBM3") == 80
    with pytest.raises(ValueError, match="Unknown device kind 'TPU v2'.*memory_gib"):
        device_memory_gib("TPU v2")
