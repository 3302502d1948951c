"""How far two float32 programs that compute the same function may differ.

Two programs computing one function (remat against plain, a padded attention against the plain
one, a model resized to any size against one built for the size) may fuse and order their
operations differently: each rounded operation on the way may move a value by an ulp of the
largest magnitude it carries. About ``ROUNDINGS`` such operations make a block (a LayerNorm,
projections, softmax, MLP), so the two agree within ``ROUNDINGS * depth * EPS32 * max|value|``:
a few dozen ulps, from the arithmetic rather than from what one machine happened to give, and far
below any real difference.
"""

import numpy as np

EPS32 = 2.0 ** -23  # float32's unit roundoff (one ulp at 1.0)
ROUNDINGS = 8


def float32_bound(depth, *values):
    """The largest difference expected between two float32 programs of ``depth`` blocks that
    compute ``values`` (the largest magnitude among them sets the ulp)."""
    largest = max(float(np.max(np.abs(np.asarray(v, "float64")))) for v in values)
    return ROUNDINGS * depth * EPS32 * largest


def assert_same_function(got, expected, depth):
    """``got`` equals ``expected`` within ``float32_bound(depth, ...)``."""
    got, expected = np.asarray(got), np.asarray(expected)
    np.testing.assert_allclose(got, expected, rtol=0,
                               atol=float32_bound(depth, got, expected))
