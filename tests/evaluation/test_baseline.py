import warnings

import numpy as np
import pytest

from keras_vit.evaluation import pixel_baseline


def test_pixel_baseline_on_real_digits():
    """sklearn's 8x8 digits: a linear model on pixels is strong there (about 0.95)."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x, y = digits.images[..., None], digits.target
    accuracy = pixel_baseline(x[:1200], y[:1200], x[1200:], y[1200:])
    assert 0.9 < accuracy <= 1.0


@pytest.mark.fashion_mnist
def test_pixel_baseline_converges_on_thousands_of_images():
    """The per-example penalty: a fixed C = 1 left L-BFGS unconverged after 200 iterations on
    25,600 Fashion-MNIST images (the notebooks' ConvergenceWarning)."""
    from sklearn.exceptions import ConvergenceWarning

    from keras_vit.data import offline

    (x, y), (x_test, y_test) = offline.load_fashion_mnist(num_train=6000, num_test=2000)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        accuracy = pixel_baseline(x, y, x_test, y_test)
    assert 0.8 < accuracy < 0.9


def test_pixel_baseline_ignores_constant_pixels():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 3, 3, 1))
    x[:, 0, 0, 0] = 7.0  # a border pixel that never changes
    y = (x[:, 1, 1, 0] > 0).astype(int)
    assert pixel_baseline(x, y, x, y) > 0.95  # a division by its zero spread would give NaNs


@pytest.mark.parametrize(
    "x_test, l2_reg, message",
    [(np.zeros((2, 5)), 1.0, "differ in size: 4 vs 5"), (np.zeros((2, 4)), 0.0, "positive")],
)
def test_pixel_baseline_bad_input(x_test, l2_reg, message):
    with pytest.raises(ValueError, match=message):
        pixel_baseline(np.eye(4), [0, 1, 0, 1], x_test, [0, 1], l2_reg=l2_reg)
