import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.evaluation import fewshot_linear, fewshot_linear_from_features
from keras_vit.evaluation.fewshot import BIAS_CONSTANT, ridge_weights


def _clusters(num_classes, per_class, dim, seed, spread=0.1):
    """Well-separated Gaussian clusters: linearly separable features."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(0.0, 5.0, (num_classes, dim))
    labels = np.repeat(np.arange(num_classes), per_class)
    features = centres[labels] + rng.normal(0.0, spread, (len(labels), dim))
    return features, labels


def test_linearly_separable_features_give_full_accuracy():
    x_train, y_train = _clusters(5, 30, 16, seed=0)
    x_test, y_test = _clusters(5, 20, 16, seed=0)
    x_test = x_test + np.random.default_rng(1).normal(0, 0.05, x_test.shape)
    result = fewshot_linear_from_features(x_train, y_train, x_test, y_test)
    assert sorted(result) == [1, 5, 10, 25]
    for shot in result:
        assert result[shot]["per_seed"] == [1.0, 1.0, 1.0]
        assert result[shot]["mean"] == 1.0 and result[shot]["std"] == 0.0


def test_random_labels_are_near_chance():
    rng = np.random.default_rng(0)
    x_train, x_test = rng.normal(size=(400, 8)), rng.normal(size=(400, 8))
    y_train, y_test = rng.integers(0, 4, 400), rng.integers(0, 4, 400)
    result = fewshot_linear_from_features(x_train, y_train, x_test, y_test, shots=(25,))
    assert 0.15 < result[25]["mean"] < 0.35


def test_solver_branches_agree_and_match_direct_solves():
    rng = np.random.default_rng(0)
    for n, d in ((40, 10), (10, 40)):
        x, y = rng.normal(size=(n, d)), rng.normal(size=(n, 3))
        lam = 3.0
        primal = ridge_weights(x, y, lam, dual=False)
        dual = ridge_weights(x, y, lam, dual=True)
        direct = np.linalg.solve(x.T @ x + lam * np.eye(d), x.T @ y)
        np.testing.assert_allclose(primal, dual, atol=1e-10)
        np.testing.assert_allclose(ridge_weights(x, y, lam), direct, atol=1e-10)


def _reference_fewshot(x_train, y_train, x_test, y_test, shot, seed, lam):
    """The protocol written out directly with np.linalg.solve."""
    num_classes = y_train.max() + 1
    rng = np.random.default_rng(seed)
    perms = [rng.permutation(np.where(y_train == c)[0]) for c in range(num_classes)]
    idx = np.concatenate([p[:shot] for p in perms])
    x, y = x_train[idx], y_train[idx]
    mean, std = x.mean(0), x.std(0) + 1e-5

    def prep(z):
        z = (z - mean) / std
        return np.concatenate([z, np.full((len(z), 1), BIAS_CONSTANT)], axis=1)

    a = prep(x)
    targets = 2 * np.eye(num_classes)[y] - 1
    w = np.linalg.solve(a.T @ a + lam * np.eye(a.shape[1]), a.T @ targets)
    return np.mean(np.argmax(prep(x_test) @ w, axis=1) == y_test)


# 5 shots x 4 classes = 20 points: the primal solver at D=6+1, the dual one at D=64+1.
@pytest.mark.parametrize("dim,spread", [(6, 4.0), (64, 25.0)])
def test_matches_a_direct_numpy_ridge_solve(dim, spread):
    rng = np.random.default_rng(dim)
    x_train, y_train = _clusters(4, 12, dim, seed=2, spread=spread)
    x_test, y_test = _clusters(4, 25, dim, seed=2, spread=spread)
    x_test += rng.normal(0, 1.0, x_test.shape)
    result = fewshot_linear_from_features(
        x_train, y_train, x_test, y_test, shots=(1, 5), seeds=(0, 1, 2), l2_reg=2.0**10
    )
    for shot in (1, 5):
        expected = [
            _reference_fewshot(x_train, y_train, x_test, y_test, shot, s, 2.0**10)
            for s in (0, 1, 2)
        ]
        assert result[shot]["per_seed"] == pytest.approx(expected)
        assert result[shot]["mean"] == pytest.approx(np.mean(expected))
        assert result[shot]["std"] == pytest.approx(np.std(expected, ddof=1))
    # The task is hard enough that the accuracies are informative (not all 0 or 1).
    assert 0.3 < result[5]["mean"] < 1.0


def test_seeds_give_different_draws_and_are_reproducible():
    x_train, y_train = _clusters(3, 20, 4, seed=3, spread=6.0)
    x_test, y_test = _clusters(3, 30, 4, seed=3, spread=6.0)
    a = fewshot_linear_from_features(x_train, y_train, x_test, y_test, shots=(1,), seeds=range(6))
    b = fewshot_linear_from_features(x_train, y_train, x_test, y_test, shots=(1,), seeds=range(6))
    assert a == b
    assert len(set(a[1]["per_seed"])) > 1


def test_too_few_examples_for_the_shots_is_a_clear_error():
    x, y = _clusters(3, 4, 5, seed=0)
    y = y.copy()
    y[y == 2] = 1  # class 2 now has no examples
    y[0] = 2
    with pytest.raises(ValueError, match=r"fewer than shots=5.*class 0: 3.*class 2: 1"):
        fewshot_linear_from_features(x, y, x, y, shots=(1, 5))
    with pytest.raises(ValueError, match="shots must be positive"):
        fewshot_linear_from_features(x, y, x, y, shots=(0,))


def test_bad_inputs_are_clear_errors():
    x, y = _clusters(2, 5, 3, seed=0)
    with pytest.raises(ValueError, match="one-hot"):
        fewshot_linear_from_features(x, np.eye(2)[y], x, y, shots=(1,))
    with pytest.raises(ValueError, match="rows but there are"):
        fewshot_linear_from_features(x, y[:-1], x, y, shots=(1,))
    with pytest.raises(ValueError, match="differ in width"):
        fewshot_linear_from_features(x, y, x[:, :2], y, shots=(1,))
    with pytest.raises(ValueError, match="non-negative"):
        fewshot_linear_from_features(x, y - 1, x, y, shots=(1,))
    with pytest.raises(ValueError, match="l2_reg must be positive"):
        fewshot_linear_from_features(x, y, x, y, shots=(1,), l2_reg=0.0)
    with pytest.raises(TypeError, match="feature_extractor"):
        fewshot_linear(object(), x, y, x, y)


def test_fewshot_linear_uses_the_models_pre_logits_features():
    model = keras_vit.ViTImageClassifier(
        image_size=8, patch_size=4, hidden_size=8, num_layers=1, num_heads=2, mlp_dim=16,
        num_classes=3, representation_size=6, num_channels=1,
    )
    rng = np.random.default_rng(0)
    x_train = rng.uniform(-1, 1, (12, 8, 8, 1)).astype("float32")
    x_test = rng.uniform(-1, 1, (6, 8, 8, 1)).astype("float32")
    y_train, y_test = np.arange(12) % 3, np.arange(6) % 3
    result = fewshot_linear(
        model, x_train, y_train, x_test, y_test, shots=(1, 4), seeds=(0, 1), batch_size=6
    )
    features = model.feature_extractor()
    assert features.output.shape[-1] == 6
    expected = fewshot_linear_from_features(
        features.predict(x_train, batch_size=6, verbose=0), y_train,
        features.predict(x_test, batch_size=6, verbose=0), y_test,
        shots=(1, 4), seeds=(0, 1),
    )
    for shot in (1, 4):
        assert result[shot]["per_seed"] == pytest.approx(expected[shot]["per_seed"])
    with pytest.raises(ValueError, match="fewer than shots=5"):
        fewshot_linear(model, x_train, y_train, x_test, y_test, shots=(5,))


def test_fewshot_linear_of_a_backbone_reads_its_pooled_output():
    backbone = keras_vit.ViTBackbone(image_size=8, patch_size=4, hidden_size=8, num_layers=1,
                                     num_heads=2, mlp_dim=16, classifier="gap", num_channels=1)
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, (12, 8, 8, 1)).astype("float32")
    y = np.arange(12) % 3
    result = fewshot_linear(backbone, x, y, x, y, shots=(2,), seeds=(0, 1), batch_size=4)
    pooled = backbone.predict(x, verbose=0)["pooled"]
    assert pooled.shape == (12, 8)
    expected = fewshot_linear_from_features(pooled, y, pooled, y, shots=(2,), seeds=(0, 1))
    assert result[2]["per_seed"] == pytest.approx(expected[2]["per_seed"])
    classifier = keras_vit.ViTImageClassifier(backbone, num_classes=3)  # no pre_logits
    again = fewshot_linear(classifier, x, y, x, y, shots=(2,), seeds=(0, 1))
    assert again[2]["per_seed"] == pytest.approx(result[2]["per_seed"])


def test_fewshot_linear_duck_types_the_feature_extractor():
    class Features:  # any model with feature_extractor(), e.g. ResNetV2
        def feature_extractor(self):
            inputs = keras.Input((4,))
            return keras.Model(inputs, keras.layers.Identity()(inputs))

    x, y = _clusters(3, 6, 4, seed=5)
    result = fewshot_linear(Features(), x, y, x, y, shots=(1, 2), seeds=(0,), batch_size=9)
    assert result[1]["per_seed"] == [1.0] and result[2]["per_seed"] == [1.0]
