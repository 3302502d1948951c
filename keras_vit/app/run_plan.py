"""What a ``keras-vit`` run trains on and how: its device and precision, the line it prints about
them and its batch, and its warmup steps."""

from keras_vit.distribution import accelerator, num_replicas, precision


def device():
    """What a run trains on: ``device`` (the accelerator's kind, or "cpu"), ``devices`` and the
    ``precision`` of ``keras_vit.distribution.precision`` (float32 on a CPU)."""
    found = accelerator()
    platform, kind, devices, capability = found or ("cpu", "cpu", num_replicas(), None)
    return {"device": kind, "devices": devices, "precision": precision(platform, kind, capability)}


def describe(plan, batch_size):
    """The line a run prints about its device, batch and precision, e.g. ``cpu x1: batch 512 =
    8 x micro-batch 64 (64 per device), precision float32``.

    >>> describe({"device": "TPU v5 lite", "devices": 8, "precision": "mixed_bfloat16",
    ...            "per_device": 32}, 256)
    'TPU v5 lite x8: batch 256 (32 per device), precision mixed_bfloat16'
    """
    memory = "" if plan.get("memory_gib") is None else f", {plan['memory_gib']:g} GiB"
    split = ("" if "accumulation" not in plan
             else f" = {plan['accumulation']} x micro-batch {plan['micro_batch']}")
    chosen = " (chosen to fit)" if plan.get("planned") else ""
    return (f"{plan['device']} x{plan['devices']}{memory}: batch {batch_size}{split} "
            f"({plan['per_device']} per device){chosen}, precision {plan['precision']}")


def warmup(value, steps_per_epoch, total_steps):
    if value is None:
        value = min(steps_per_epoch, total_steps // 10)
    return int(value)
