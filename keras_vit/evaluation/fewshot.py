"""Few-shot linear evaluation (paper Sec. 4.1 "Metrics").

The paper reports few-shot accuracies "obtained by solving a regularized least-squares regression
problem that maps the (frozen) representation of a subset of training images to {-1, 1}^K target
vectors". This module follows big_vision's ``fewshot_lsr`` evaluator step by step:

1. features are the pre-logits representation, computed once for the train and test sets;
2. for each seed, ``rng = np.random.default_rng(seed)`` draws one permutation of every class's
   training indices (classes in label order); a ``shots``-shot set takes the first ``shots``
   indices of each permutation, so the sets of one seed are nested;
3. the features are whitened with the few-shot set's mean and (std + 1e-5), and a constant
   feature equal to 100 is appended (a bias that is almost unregularised);
4. targets are ``2 * onehot - 1``;
5. W = (X^T X + lambda I)^-1 X^T Y when N >= D, else X^T (X X^T + lambda I)^-1 Y, both through an
   eigendecomposition (``eigh``) of the Gram matrix; lambda = 2^10;
6. the accuracy is that of ``argmax(X_test W)``.

The linear algebra runs in float64 numpy (big_vision uses float32 jax on the CPU).
"""

import keras
import numpy as np

from keras_vit.distribution import predict

BIAS_CONSTANT = 100.0
STD_EPSILON = 1e-5
DEFAULT_SHOTS = (1, 5, 10, 25)
DEFAULT_SEEDS = (0, 1, 2)
DEFAULT_L2_REG = 2.0**10


def ridge_weights(x, y, l2_reg, dual=None):
    """Closed-form ridge regression weights through ``eigh`` (big_vision's formulation).

    Args:
        x: (N, D) inputs.
        y: (N, K) targets.
        l2_reg: the regulariser lambda > 0.
        dual: ``None`` picks the primal form (X^T X + lambda I)^-1 X^T Y when N >= D and the
            dual form X^T (X X^T + lambda I)^-1 Y otherwise; True/False force one of them.

    Returns:
        (D, K) float64 weights.

    Example:
    >>> import numpy as np
    >>> x = np.eye(3)
    >>> np.round(ridge_weights(x, 2 * x, l2_reg=1.0), 6)
    array([[1., 0., 0.],
           [0., 1., 0.],
           [0., 0., 1.]])
    """
    x = np.asarray(x, np.float64)
    y = np.asarray(y, np.float64)
    if l2_reg <= 0:
        raise ValueError(f"l2_reg must be positive, got {l2_reg}.")
    num_points, dim = x.shape
    if dual is None:
        dual = dim > num_points
    if dual:
        eigs, q = np.linalg.eigh(x @ x.T)
        lhs, rhs = x.T @ q, q.T @ y
    else:
        eigs, q = np.linalg.eigh(x.T @ x)
        lhs, rhs = q, q.T @ (x.T @ y)
    return (lhs / (eigs + l2_reg)[None, :]) @ rhs


def _check_labels(labels, what):
    labels = np.asarray(labels)
    if labels.ndim == 2 and labels.shape[1] > 1:
        raise ValueError(
            f"{what} looks one-hot encoded (shape {labels.shape}); pass integer class labels "
            "instead, e.g. labels.argmax(-1)."
        )
    labels = labels.reshape(-1)
    if not np.issubdtype(labels.dtype, np.integer):
        if not np.all(np.equal(np.mod(labels, 1), 0)):
            raise ValueError(f"{what} must be integer class indices, got dtype {labels.dtype}.")
        labels = labels.astype(np.int64)
    if labels.size and labels.min() < 0:
        raise ValueError(f"{what} must be non-negative class indices, got {labels.min()}.")
    return labels


def _check_shots(y_train, num_classes, shots):
    counts = np.bincount(y_train, minlength=num_classes)
    for shot in shots:
        if int(shot) < 1:
            raise ValueError(f"shots must be positive integers, got {shot}.")
        short = np.flatnonzero(counts < shot)
        if short.size:
            listed = ", ".join(f"class {c}: {counts[c]}" for c in short[:10])
            more = f" and {short.size - 10} more" if short.size > 10 else ""
            raise ValueError(
                f"{short.size} class(es) have fewer than shots={shot} training examples "
                f"({listed}{more}). Use fewer shots (at most {counts.min()}), or add training "
                "examples; labels must be 0..K-1 with every class present in the training set."
            )


def _whiten(x, mean, std):
    x = (x - mean) / std
    return np.pad(x, ((0, 0), (0, 1)), constant_values=BIAS_CONSTANT)


def _fewshot_accuracy(x, y, x_test, y_test, num_classes, l2_reg):
    mean = x.mean(axis=0, keepdims=True)
    std = x.std(axis=0, keepdims=True) + STD_EPSILON
    targets = 2.0 * np.eye(num_classes)[y] - 1.0
    weights = ridge_weights(_whiten(x, mean, std), targets, l2_reg)
    predictions = np.argmax(_whiten(x_test, mean, std) @ weights, axis=1)
    return float(np.mean(predictions == y_test))


def _check_features(train_features, y_train, test_features, y_test):
    """The features as float64 matrices and the labels as integer vectors, checked."""
    x_train = np.asarray(train_features, np.float64)
    x_test = np.asarray(test_features, np.float64)
    y_train = _check_labels(y_train, "y_train")
    y_test = _check_labels(y_test, "y_test")
    for name, x, y in (("train", x_train, y_train), ("test", x_test, y_test)):
        if x.ndim != 2:
            raise ValueError(f"{name} features must be a (examples, dim) matrix, got {x.shape}.")
        if len(x) != len(y):
            raise ValueError(
                f"{name} features have {len(x)} rows but there are {len(y)} {name} labels."
            )
    if x_train.shape[1] != x_test.shape[1]:
        raise ValueError(
            f"Train and test features differ in width: {x_train.shape[1]} vs {x_test.shape[1]}."
        )
    return x_train, y_train, x_test, y_test


def _num_classes(y_train, y_test, num_classes):
    """K: as given (every label below it), else one more than the largest label."""
    largest = max(int(y_train.max(initial=-1)), int(y_test.max(initial=-1)))
    if num_classes is None:
        return largest + 1
    if largest >= num_classes:
        raise ValueError(f"A label ({largest}) is not below num_classes ({num_classes}).")
    return num_classes


def fewshot_linear_from_features(
    train_features,
    y_train,
    test_features,
    y_test,
    *,
    shots=DEFAULT_SHOTS,
    seeds=DEFAULT_SEEDS,
    l2_reg=DEFAULT_L2_REG,
    num_classes=None,
):
    """Few-shot linear accuracy from precomputed features (big_vision's ``fewshot_lsr``).

    Args:
        train_features: (N_train, D) features of the pool the few-shot sets are drawn from.
        y_train: (N_train,) integer labels in 0..K-1.
        test_features: (N_test, D) features of the evaluation set.
        y_test: (N_test,) integer labels.
        shots: examples per class of each few-shot set.
        seeds: one few-shot draw per seed (``np.random.default_rng(seed)``).
        l2_reg: the ridge regulariser lambda.
        num_classes: K; by default one more than the largest label in either set.

    Returns:
        ``{shots: {"mean": float, "std": float, "per_seed": [float, ...]}}``: test accuracies
        in [0, 1], their mean and sample standard deviation (``ddof=1``; 0 for one seed) over the
        seeds.

    Example:
    >>> import numpy as np
    >>> features = np.array([[0.0], [0.1], [5.0], [5.1]])
    >>> labels = np.array([0, 0, 1, 1])
    >>> fewshot_linear_from_features(features, labels, features, labels, shots=(1,), seeds=(0,))
    {1: {'mean': 1.0, 'std': 0.0, 'per_seed': [1.0]}}
    """
    x_train, y_train, x_test, y_test = _check_features(train_features, y_train, test_features,
                                                       y_test)
    shots = (shots,) if isinstance(shots, int) else shots
    seeds = (seeds,) if isinstance(seeds, int) else seeds
    num_classes = _num_classes(y_train, y_test, num_classes)
    _check_shots(y_train, num_classes, shots)

    per_seed = {int(shot): [] for shot in shots}
    for seed in seeds:
        rng = np.random.default_rng(seed)
        class_indices = [rng.permutation(np.flatnonzero(y_train == c)) for c in range(num_classes)]
        for shot in per_seed:
            idx = np.concatenate([indices[:shot] for indices in class_indices])
            per_seed[shot].append(
                _fewshot_accuracy(x_train[idx], y_train[idx], x_test, y_test, num_classes, l2_reg)
            )
    return {
        shot: {
            "mean": float(np.mean(accs)),
            # the sample standard deviation, as every spread over seeds in this project
            "std": float(np.std(accs, ddof=1)) if len(accs) > 1 else 0.0,
            "per_seed": [float(a) for a in accs],
        }
        for shot, accs in per_seed.items()
    }


def feature_model(model):
    """A model from images to ``model``'s pre-logits features: a backbone's pooled output
    (Eq. 4's y for a ViT), else the model's ``feature_extractor()``."""
    if isinstance(getattr(model, "output", None), dict) and "pooled" in model.output:
        return keras.Model(model.input, model.output["pooled"], name=f"{model.name}_features")
    extractor = getattr(model, "feature_extractor", None)
    if not callable(extractor):
        raise TypeError(
            f"{type(model).__name__} has no feature_extractor() method; pass a keras_vit model "
            "(a backbone or classifier of any family), or compute features yourself and call "
            "fewshot_linear_from_features."
        )
    return extractor()


def fewshot_linear(
    model,
    x_train,
    y_train,
    x_test,
    y_test,
    *,
    shots=DEFAULT_SHOTS,
    seeds=DEFAULT_SEEDS,
    l2_reg=DEFAULT_L2_REG,
    batch_size=256,
):
    """Few-shot linear evaluation of a model's frozen pre-logits features.

    Features are the head's input: a classifier's ``feature_extractor()``, a backbone's
    ``"pooled"`` output;
    computed once for ``x_train`` and once for ``x_test``. See ``fewshot_linear_from_features``
    for the protocol and the returned dictionary.

    Args:
        model: a keras_vit backbone or classifier of any family, or another model with a
            ``feature_extractor()`` method.
        x_train, y_train: images (in the model's input range) and integer labels to draw the
            few-shot sets from.
        x_test, y_test: evaluation images and labels.
        shots, seeds, l2_reg: as in ``fewshot_linear_from_features``.
        batch_size: batch size of the feature computation.

    Example:
    >>> import numpy as np, keras_vit
    >>> model = keras_vit.ViTImageClassifier(image_size=8, patch_size=4, hidden_size=8,
    ...     num_layers=1, num_heads=2, mlp_dim=16, num_classes=2, num_channels=1)
    >>> x = np.random.default_rng(0).uniform(-1, 1, (6, 8, 8, 1)).astype("float32")
    >>> y = np.array([0, 1, 0, 1, 0, 1])
    >>> sorted(fewshot_linear(model, x, y, x, y, shots=(1, 2), seeds=(0,)))
    [1, 2]
    """
    features = feature_model(model)
    y_train = _check_labels(y_train, "y_train")
    y_test = _check_labels(y_test, "y_test")
    num_classes = max(int(y_train.max(initial=-1)), int(y_test.max(initial=-1))) + 1
    _check_shots(y_train, num_classes, (shots,) if isinstance(shots, int) else shots)
    train_features = predict(features, x_train, batch_size)  # any count on several devices
    test_features = predict(features, x_test, batch_size)
    return fewshot_linear_from_features(
        train_features,
        y_train,
        test_features,
        y_test,
        shots=shots,
        seeds=seeds,
        l2_reg=l2_reg,
        num_classes=num_classes,
    )
