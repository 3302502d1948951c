"""The simple baseline every ViT result here is read against: a linear classifier on raw pixels.

A ViT that does not beat a logistic regression on the pixels themselves has learned nothing a
linear model could not, so the notebooks print this number beside each of theirs.
"""

import numpy as np

from keras_vit import _optional


def _flat(images, what):
    images = np.asarray(images, np.float64)
    if images.ndim < 2:
        raise ValueError(f"{what} must be a batch of images or vectors, got shape {images.shape}.")
    return images.reshape(len(images), -1)


def pixel_baseline(x_train, y_train, x_test, y_test, *, l2_reg=1e-2, max_iter=1000):
    """Test accuracy of a logistic regression on standardised raw pixels.

    Each pixel is centred and scaled with the training set's mean and standard deviation, then
    scikit-learn's multinomial ``LogisticRegression`` (L-BFGS) minimises the mean cross-entropy
    over the n training examples plus ``l2_reg / 2`` times the squared weights, i.e.
    ``C = 1 / (l2_reg * n)``. The penalty is per example so that one default suits 100 examples
    and 60,000: with a fixed ``C`` L-BFGS stops unconverged on tens of thousands of images. At the
    defaults it converges in 333 iterations on 6,000 Fashion-MNIST images and 343 on 25,600
    (test accuracy 0.830 and 0.841), and in 50 on 100.

    Args:
        x_train, x_test: images (any shape after the batch axis) or feature vectors.
        y_train, y_test: integer class labels.
        l2_reg: the weight penalty per example (larger: a smoother, faster-converging model).
        max_iter: L-BFGS iterations; scikit-learn warns (``ConvergenceWarning``) if they run out.

    Returns:
        The test accuracy in [0, 1].

    Example:
    >>> import numpy as np
    >>> x = np.array([[0.0, 1.0], [0.1, 0.9], [1.0, 0.0], [0.9, 0.1]])
    >>> pixel_baseline(x, [0, 0, 1, 1], x, [0, 0, 1, 1])
    1.0
    """
    x_train, x_test = _flat(x_train, "x_train"), _flat(x_test, "x_test")
    if x_train.shape[1] != x_test.shape[1]:
        raise ValueError(
            f"Train and test inputs differ in size: {x_train.shape[1]} vs {x_test.shape[1]} "
            "values per example."
        )
    if l2_reg <= 0:
        raise ValueError(f"l2_reg must be positive, got {l2_reg}.")
    linear_model = _optional.need("sklearn.linear_model", "pixel_baseline")
    mean = x_train.mean(axis=0)
    std = x_train.std(axis=0) + 1e-6  # constant pixels (image borders) stay 0
    classifier = linear_model.LogisticRegression(C=1.0 / (l2_reg * len(x_train)), max_iter=max_iter)
    classifier.fit((x_train - mean) / std, np.asarray(y_train).reshape(-1))
    predictions = classifier.predict((x_test - mean) / std)
    return float(np.mean(predictions == np.asarray(y_test).reshape(-1)))
