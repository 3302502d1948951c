"""Batches that fit a device: the largest batch by the memory count (paper Fig. 12), and the
split of a global batch into micro-batches for gradient accumulation (``keras-vit finetune``).

Example (ViT-B/16 at 384 px, the published fine-tune, on one 16 GiB TPU v5e chip):
>>> from keras_vit.costs.devices import DEVICE_MEMORY_GIB
>>> largest_batch("ViT-B/16", 384, DEVICE_MEMORY_GIB["TPU v5e"])
18
"""

from keras_vit.checks import positive_int
from keras_vit.costs.architecture import describe_name, label
from keras_vit.costs.memory import GIB, memory

# The device of the paper's Fig. 12: one TPUv3 core, 16 GiB.
TPU_V3_CORE_GIB = 16

def largest_batch(model, image_size=None, memory_gib=TPU_V3_CORE_GIB, **options):
    """The largest batch whose step fits ``memory_gib`` GiB by ``memory`` (same options).

    Example (the paper's Fig. 12 reading: a ViT fits a larger batch than a ResNet):
    >>> largest_batch("ViT-B/16", 224, 16, training=False) > largest_batch(
    ...     "BiT-R152x2", 224, 16, training=False)
    True
    """
    fixed = memory(model, image_size, 0, **options)
    per_example = memory(model, image_size, 1, **options) - fixed
    budget = float(memory_gib) * GIB
    batch = int((budget - fixed) // per_example) if budget > fixed else 0
    if batch < 1:
        raise ValueError(
            f"One example of {label(model)} at {image_size or 'its size'} needs "
            f"{(fixed + per_example) / GIB:.2f} GiB ({fixed / GIB:.2f} GiB without the "
            f"activations), more than {memory_gib} GiB. Use a device with more memory, "
            "a smaller image size, mixed precision (dtype='mixed_bfloat16'), "
            "remat=True, or optimizer='sgd'."
        )
    return batch


def aligned_size(name, size):
    """``size`` rounded to the nearest multiple of the named model's stride (pixels per token
    side, or the total downsampling of a ResNet), at least one stride: the size at which
    ``figure_12`` counts the model and ``keras_vit.evaluation.speed_by_size`` times it.

    Example:
    >>> aligned_size("ViT-H/14", 384), aligned_size("ViT-B/16", 384), aligned_size("BiT-R50x1", 380)
    (378, 384, 384)
    """
    stride = describe_name(name).stride
    return max(stride, round(size / stride) * stride)


# The models and sizes of the paper's Fig. 12 (right), plus the hybrid R50+ViT-B/16.
FIGURE_12_MODELS = ("ViT-B/32", "ViT-B/16", "ViT-L/16", "ViT-H/14", "R50+ViT-B/16",
                    "BiT-R50x1", "BiT-R152x2")
FIGURE_12_SIZES = (224, 288, 384, 448, 512)


def figure_12(models=FIGURE_12_MODELS, sizes=FIGURE_12_SIZES, memory_gib=TPU_V3_CORE_GIB,
              **options):
    """The largest batch per device of ``memory_gib`` GiB, by model and image size (Fig. 12).

    The paper measured inference on a 16 GiB TPUv3 core (``training=False``); the options are
    those of ``memory``. A size the model's stride does not divide is rounded to the nearest
    multiple (ViT-H/14 at 384 px runs at 378).

    Returns:
        ``{model: [(image_size, batch), ...]}``, batch 0 where one example does not fit.

    Example:
    >>> figure_12(["ViT-B/32"], [224, 512], training=False)
    {'ViT-B/32': [(224, 6735), (512, 818)]}
    """
    table = {}
    for name in models:
        row = []
        for size in sizes:
            size = aligned_size(name, size)
            try:
                row.append((size, largest_batch(name, size, memory_gib, **options)))
            except ValueError:
                row.append((size, 0))
        table[name] = row
    return table


def plan_batch(model, image_size, batch_size, memory_gib, *, devices=1, dtype=None,
               optimizer="sgd", **options):
    """Split a global batch into micro-batches whose step fits each device's memory.

    Keeps ``batch_size`` (one update averages it) and picks the smallest gradient accumulation
    whose micro-batch (``batch_size / accumulation``) divides over ``devices`` into per-device
    batches that ``largest_batch`` lets into ``memory_gib`` GiB.

    Returns:
        ``{"micro_batch": ..., "accumulation": ..., "per_device": ...}``; ``micro_batch`` is
        the global micro-batch (all devices together).

    Example (the published ViT-B/16 fine-tune, batch 512 at 384 px, on one TPU v5e chip and on
    eight):
    >>> plan_batch("ViT-B/16", 384, 512, 16, dtype="mixed_bfloat16")
    {'micro_batch': 16, 'accumulation': 32, 'per_device': 16}
    >>> plan_batch("ViT-B/16", 384, 512, 16, devices=8, dtype="mixed_bfloat16")
    {'micro_batch': 128, 'accumulation': 4, 'per_device': 16}
    """
    batch_size = positive_int("The batch size", batch_size)
    if int(devices) < 1:
        raise ValueError(f"devices must be at least 1, got {devices!r}.")
    batch, devices = int(batch_size), int(devices)
    fits = largest_batch(model, image_size, memory_gib, dtype=dtype, optimizer=optimizer,
                         **options)
    for accumulation in range(1, batch + 1):
        micro = batch // accumulation
        if batch % accumulation == 0 and micro % devices == 0 and micro // devices <= fits:
            return {"micro_batch": micro, "accumulation": accumulation,
                    "per_device": micro // devices}
    raise ValueError(
        f"No micro-batch of the global batch {batch} splits evenly over {devices} devices with "
        f"at most {fits} examples each (the most that fit {memory_gib} GiB). Use a global batch "
        f"that is a multiple of {devices} (e.g. {max(devices, batch // devices * devices)}), or "
        "set --accumulation yourself.")
