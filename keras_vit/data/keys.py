"""Every example's own random numbers: a 64-bit key per example, a function of (seed, epoch,
example index), and the uniform draws of a key. The preprocessing (``keras_vit.data.preprocessing``)
and RandAugment (``keras_vit.data.randaugment``) take each image's draws from its key, so an
example is augmented alike however the batch is split over devices and processes.
"""

import numpy as np

__all__ = ["example_keys", "generator_keys", "uniform"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(values):
    """SplitMix64's finaliser: uint64 -> uint64, every input bit spread over every output bit."""
    with np.errstate(over="ignore"):
        values = np.asarray(values, np.uint64)
        values = (values ^ (values >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        values = (values ^ (values >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return values ^ (values >> np.uint64(31))


def example_keys(seed, epoch, examples):
    """One uint64 key per example: a function of ``(seed, epoch, example index)`` alone.

    Example:
    >>> keys = example_keys(0, 1, [4, 7])
    >>> bool(keys[1] == example_keys(0, 1, [7])[0]), bool(keys[0] != example_keys(0, 2, [4])[0])
    (True, True)
    """
    base = np.random.SeedSequence([int(seed), int(epoch)]).generate_state(1, np.uint64)[0]
    with np.errstate(over="ignore"):
        return _mix(base ^ _mix(np.asarray(examples, np.uint64) * _GOLDEN))


def generator_keys(rng, count):
    """``count`` keys drawn from a ``numpy.random.Generator``."""
    return rng.integers(np.iinfo(np.uint64).max, size=count, dtype=np.uint64, endpoint=True)


def uniform(keys, draw):
    """The ``draw``-th uniform number in [0, 1) of every key: (N,) float64."""
    with np.errstate(over="ignore"):
        bits = _mix(np.asarray(keys, np.uint64) + np.uint64(draw + 1) * _GOLDEN)
    return (bits >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
