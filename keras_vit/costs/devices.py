"""The memory of the accelerators the notebooks and ``keras-vit finetune`` meet, for planning a
batch (``keras_vit.costs.batches``), and how jax and nvidia-smi name them.

Example:
>>> device_memory_gib("TPU v5 lite"), device_memory_gib("NVIDIA A100-SXM4-80GB")
(16, 80)
"""

import re

# Memory of one device in GiB, as the runtimes report it: a TPU chip's HBM (v5e 16, v6e 32:
# Cloud TPU's system architecture pages), a GPU's memory (a T4's 16 GB show as 15 GiB on Colab
# and Kaggle; the others by their product names).
DEVICE_MEMORY_GIB = {
    "TPU v5e": 16,
    "TPU v6e": 32,
    "T4": 15,
    "L4": 24,
    "A100 40GB": 40,
    "A100 80GB": 80,
    "H100": 80,
}
# How jax (``device.device_kind``) and nvidia-smi spell them -> our key.
_KIND_PATTERNS = (
    (r"tpu v5 ?(lite|e)", "TPU v5e"),
    (r"tpu v6 ?(lite|e)", "TPU v6e"),
    (r"\bt4\b", "T4"),
    (r"\bl4\b", "L4"),
    (r"a100.*80", "A100 80GB"),
    (r"a100", "A100 40GB"),
    (r"h100", "H100"),
)


def device_memory_gib(kind):
    """The memory of a device kind in GiB: a ``DEVICE_MEMORY_GIB`` key or the name jax or
    nvidia-smi gives it (``"TPU v5 lite"``, ``"Tesla T4"``, ``"NVIDIA A100-SXM4-80GB"``)."""
    for pattern, key in _KIND_PATTERNS:
        if re.search(pattern, str(kind), re.IGNORECASE):
            return DEVICE_MEMORY_GIB[key]
    raise ValueError(
        f"Unknown device kind {kind!r}; known kinds are {', '.join(DEVICE_MEMORY_GIB)}. "
        "Pass the device's memory yourself (memory_gib=...)."
    )
