"""The perturbation test (Chefer et al., CVPR 2021, Sec. 4): its ends, its order, its area."""

import keras
import numpy as np
import pytest

from keras_vit import ViTBackbone, ViTImageClassifier
from keras_vit.inspection import PerturbationCurves, perturbation_curves
from keras_vit.inspection.faithfulness import delete_patches


def model_and_data(count=12):
    keras.utils.set_random_seed(0)
    model = ViTImageClassifier(image_size=12, patch_size=4, hidden_size=8, num_layers=2,
                               num_heads=2, mlp_dim=16, num_classes=3,
                               head_kernel_initializer="glorot_uniform")
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (count, 12, 12, 3)).astype("float32")
    return model, x, rng.integers(0, 3, count)


def accuracy(model, x, labels):
    return float(np.mean(np.argmax(keras.ops.convert_to_numpy(model(x)), -1) == labels))


def test_the_ends_are_the_models_accuracy_and_the_blank_images():
    model, x, labels = model_and_data()
    curves = perturbation_curves(model, x, labels, fractions=[0.0, 0.5, 1.0])
    kept, blank = accuracy(model, x, labels), accuracy(model, np.full_like(x, -1.0), labels)
    assert set(curves.positive) == {"attention", "rollout", "relevancy", "random"}
    for order in (curves.positive, curves.negative):
        for curve in order.values():
            assert curve[0] == pytest.approx(kept) and curve[-1] == pytest.approx(blank)


def test_most_relevant_patches_are_deleted_first():
    model, x, labels = model_and_data()
    scores = np.random.default_rng(1).permutation(len(x) * 9).reshape(len(x), 3, 3) * 1.0
    curves = perturbation_curves(model, x, labels, {"mine": scores}, fractions=[0, 1 / 3, 1])
    flat = scores.reshape(len(x), -1)
    for order, top in (("positive", np.argsort(-flat, 1)[:, :3]),
                       ("negative", np.argsort(flat, 1)[:, :3])):
        deleted = np.zeros_like(flat, bool)
        np.put_along_axis(deleted, top, True, axis=1)
        masked = delete_patches(x, deleted.reshape(-1, 3, 3), 4)
        assert getattr(curves, order)["mine"][1] == pytest.approx(accuracy(model, masked, labels))


def test_the_area_under_the_curve_and_the_table():
    curves = PerturbationCurves(np.array([0.0, 0.5, 1.0]), {"a": np.array([1.0, 0.5, 0.0])},
                                {"a": np.array([1.0, 1.0, 0.5])})
    assert curves.auc("positive") == {"a": pytest.approx(0.5)}
    assert curves.auc("negative") == {"a": pytest.approx(0.875)}
    assert "0.500" in str(curves) and "0.875" in str(curves)
    with pytest.raises(ValueError, match="positive"):
        curves.auc("up")


def test_the_random_order_is_seeded():
    model, x, labels = model_and_data()
    one = perturbation_curves(model, x, labels, ["random"], seed=3)
    again = perturbation_curves(model, x, labels, ["random"], seed=3)
    np.testing.assert_array_equal(one.positive["random"], again.positive["random"])


def test_bad_inputs_name_the_fix():
    model, x, labels = model_and_data(4)
    with pytest.raises(ValueError, match="one integer label per image"):
        perturbation_curves(model, x, labels[:3])
    with pytest.raises(ValueError, match="fractions must increase"):
        perturbation_curves(model, x, labels, fractions=[0.5, 0.2])
    with pytest.raises(ValueError, match="Unknown explanation 'gradcam'"):
        perturbation_curves(model, x, labels, ["gradcam"])
    with pytest.raises(ValueError, match="one map per image"):
        perturbation_curves(model, x, labels, {"mine": np.ones((4, 2, 2))})
    with pytest.raises(ValueError, match="no head"):
        perturbation_curves(ViTBackbone(image_size=12, patch_size=4, hidden_size=8,
                                        num_layers=1, num_heads=2, mlp_dim=16), x, labels)
