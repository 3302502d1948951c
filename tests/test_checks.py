"""One check, one message, whoever asks (keras_vit.checks)."""

import numpy as np
import pytest

from keras_vit import checks


@pytest.mark.parametrize("value", [0, -1, 2.5, True, None, "3"])
def test_positive_int_refuses_what_is_no_positive_whole_number(value):
    with pytest.raises(ValueError, match=r"^num_heads must be a positive integer, got"):
        checks.positive_int("num_heads", value)


def test_positive_int_takes_whole_numbers_of_any_type():
    assert [checks.positive_int("n", v) for v in (3, 3.0, np.int64(3))] == [3, 3, 3]
    assert checks.positive_int("n", None, optional=True) is None


def test_pairs():
    assert checks.pair("image_size", 224) == (224, 224)
    assert checks.pair("image_size", [32, 48]) == (32, 48)
    assert checks.pair("image_size", None, optional=True) is None
    with pytest.raises(ValueError, match=r"grid must be an int or a \(rows, cols\) pair"):
        checks.pair("grid", (1, 2, 3), sides=("rows", "cols"))
    with pytest.raises(ValueError, match="image_size must be a positive integer"):
        checks.pair("image_size", (32, 0))


def test_a_side_the_stride_does_not_divide_is_named_with_the_sizes_that_fit():
    checks.check_multiple((32, None), 16)  # None: any size at call time
    with pytest.raises(ValueError, match=r"The input height \(40\) is not a multiple of the "
                                         r"patch size \(16\)\. .* e\.g\. 32 or 48\."):
        checks.check_multiple((40, 32), 16, what="input", unit="patch size")
