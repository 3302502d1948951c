"""Keras' jax backend as it behaves on a TPU, on this CPU.

``keras_sees_a_tpu()`` makes ``jax.devices()`` report the platform ``"tpu"`` (the one thing
Keras' ``dot_product_attention`` and ``_can_use_flash_attention`` ask) and stands in for the
Pallas Splash kernel, which cannot run on a CPU, with what the kernel does:

- the block check of the real kernel (jax's own ``process_mask`` with the kernel's default
  128-wide blocks), which raises for token counts it cannot tile, as on a TPU;
- jax's reference semantics of the kernel: softmax(q.k) under the mask object Keras built,
  with no 1/sqrt(head_dim) scale and no bias.

Every call of the stand-in is recorded, so a test can also tell that the path was never taken.
"""

import contextlib

import jax


class _DeviceSeenAsTpu:
    """A real device whose ``platform`` reads ``"tpu"``."""

    def __init__(self, device):
        self._device = device

    platform = "tpu"
    device_kind = "TPU v5 lite (emulated)"

    def __getattr__(self, name):
        return getattr(self._device, name)


@contextlib.contextmanager
def keras_sees_a_tpu():
    """Inside the block, Keras' jax backend takes its TPU attention path; yields the list of
    masks the Splash stand-in was built with (one per call that reached it)."""
    from jax.experimental.pallas.ops.tpu.splash_attention import (
        splash_attention_kernel as kernel,
    )
    from jax.experimental.pallas.ops.tpu.splash_attention import (
        splash_attention_mask_info as mask_info,
    )

    calls = []
    real_devices, real_make = jax.devices, kernel.make_splash_mha

    def devices(backend=None):
        found = real_devices(backend)
        return found if backend is not None else [_DeviceSeenAsTpu(d) for d in found]

    def make_splash_mha(mask, *, head_shards=1, q_seq_shards=1, attn_logits_soft_cap=None,
                        **_):
        calls.append(mask)
        blocks = kernel.BlockSizes.get_default()
        mask_info.process_mask(mask, (blocks.block_q, blocks.block_kv),
                               head_shards=head_shards, q_seq_shards=q_seq_shards)
        reference = kernel.make_masked_mha_reference(mask)

        def splash(q, k, v, segment_ids=None):
            return reference(q, k, v, segment_ids, attn_logits_soft_cap=attn_logits_soft_cap)

        return splash

    jax.devices, kernel.make_splash_mha = devices, make_splash_mha
    try:
        yield calls
    finally:
        jax.devices, kernel.make_splash_mha = real_devices, real_make
