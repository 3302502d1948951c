"""The tf.data path (tensorflow-datasets); tests/data/test_without_tensorflow.py checks what
runs without it."""

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
tfds = pytest.importorskip("tensorflow_datasets")

from keras_vit import data  # noqa: E402
from keras_vit.data import preprocessing, tfdata  # noqa: E402
from tests.blocked_imports import run_without  # noqa: E402


def _images(n=8, size=28, channels=1):
    return np.random.default_rng(0).integers(0, 256, (n, size, size, channels), dtype=np.uint8)


def _dataset(images, labels):
    return tf.data.Dataset.from_tensor_slices((images, np.asarray(labels, np.int64)))


@pytest.mark.parametrize("size", [16, 28, 56, 61])
def test_numpy_and_tensorflow_preprocessing_agree(size):
    images = _images(4, 28, 3)
    ours = data.preprocess(images, image_size=size, training=False, channels=1)
    theirs = tfdata.preprocess(images, image_size=size, training=False, channels=1).numpy()
    np.testing.assert_allclose(ours, theirs, atol=2e-5)
    rect = _images(1, 40, 3)[0][:, :25]  # the Inception crop resizes rectangles
    np.testing.assert_allclose(preprocessing.resize(rect, 17),
                               tf.image.resize(rect, (17, 17), antialias=False).numpy(),
                               atol=1e-3)


@pytest.mark.parametrize("augmentation", ["inception_crop", "resize_crop", "pad_crop", "resize"])
def test_tf_pipeline_keeps_static_shapes(augmentation):
    ds = _dataset(_images(4), np.arange(4))
    batches = data.pipeline(ds, batch_size=2, image_size=16, num_classes=4, training=True,
                            augmentation=augmentation, channels=3)
    assert tuple(batches.element_spec[0].shape) == (2, 16, 16, 3)
    assert next(iter(batches))[0].shape == (2, 16, 16, 3)


def test_tf_pipeline_eval_matches_numpy_and_pads():
    images = _images(10)
    ds = _dataset(images, np.arange(10))
    batches = list(data.pipeline(ds, batch_size=8, image_size=16, num_classes=10,
                                 training=False, replicas=4))
    assert [int(b[0].shape[0]) for b in batches] == [8, 4]
    one = list(data.pipeline(ds.take(9), batch_size=8, image_size=16, num_classes=10,
                             training=False, replicas=8))[1]  # 1 example padded by 7
    assert one[0].shape[0] == 8 and one[2].numpy().tolist() == [1] + [0] * 7
    assert batches[1][2].numpy().tolist() == [1, 1, 0, 0]
    x, y = data.as_arrays(batches)
    np.testing.assert_allclose(x, data.preprocess(images, image_size=16, training=False),
                               atol=2e-5)
    assert y.tolist() == list(range(10))


def test_tf_take_per_class():
    ds = _dataset(_images(40), np.arange(40) % 4)
    labels = sorted(int(y) for _, y in data.take_per_class(ds, 3, 4, seed=1))
    assert labels == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]


@pytest.mark.parametrize("name", [n for n, i in data.DATASETS.items() if i.source == "tfds"])
def test_tfds_datasets_with_mock_data(name):
    info = data.dataset_info(name)
    split = "train" if "train" in info.splits else "test"
    with tfds.testing.mock_data(num_examples=6):
        ds = data.load(name, split, batch_size=2, image_size=32)
        x, y = next(iter(ds))
    assert x.shape == (2, 32, 32, 3) and y.shape == (2, info.num_classes)
    assert float(tf.reduce_min(x)) >= -1 and float(tf.reduce_max(x)) <= 1


def test_tfds_bit_rule_and_eval_split_with_mock_data():
    with tfds.testing.mock_data(num_examples=3):
        x, _ = next(iter(data.load("cifar10", "test", batch_size=3)))
        assert x.shape == (3, 128, 128, 3)
        x, _ = next(iter(data.load("imagenet2012", "test", batch_size=1, image_size=16)))
        assert x.shape == (1, 16, 16, 3)


def test_tfds_dataset_without_tensorflow_datasets_says_how_to_install():
    result = run_without({"tensorflow_datasets"}, """
from keras_vit import data
data.load_examples("cifar10")
""")
    assert ("The dataset 'cifar10' needs tensorflow-datasets: "
            'pip install "keras-vit-paper[tfds]"') in result.stderr


@pytest.mark.parametrize("augmentation", ["inception_crop", "resize_crop"])
def test_tf_pipeline_with_randaugment_and_big_vision_mixup(augmentation):
    """AugReg's options (per image and per batch): static shapes, values in [-1, 1], mixed labels
    summing to 1; the evaluation pipeline is unchanged."""
    ds = _dataset(_images(8, 20), np.arange(8))
    args = dict(batch_size=4, image_size=16, num_classes=8, augmentation=augmentation,
                resize_size=18, channels=3)
    train = data.pipeline(ds, training=True, randaugment=(2, 15), mixup_p=0.5, **args)
    assert tuple(train.element_spec[0].shape) == (4, 16, 16, 3)
    for x, y in train.as_numpy_iterator():
        assert x.min() >= -1 and x.max() <= 1
        np.testing.assert_allclose(y.sum(-1), 1, rtol=1e-6)
        assert (y > 0).sum() > 4 and y.max() >= 0.5  # each image keeps the larger share
    evaluation = [data.pipeline(ds, training=False, randaugment=r, **args) for r in (None, (2, 15))]
    for plain, augmented in zip(*(e.as_numpy_iterator() for e in evaluation), strict=True):
        np.testing.assert_array_equal(augmented[0], plain[0])
    with pytest.raises(ValueError, match="mixup_alpha .* and mixup_p"):
        data.pipeline(ds, training=True, mixup_alpha=0.2, mixup_p=0.5, **args)


def test_tf_randaugment_and_big_vision_mixup_ops(monkeypatch):
    crops = tf.constant(np.random.default_rng(0).uniform(0, 255, (3, 8, 8, 1)), tf.float32)
    out = tfdata.random_augment(crops, (2, 15))
    assert out.dtype == tf.uint8 and out.shape == (3, 8, 8, 1)
    single = tfdata.random_augment(crops[0], (2, 15))
    assert single.shape == (8, 8, 1)
    policies = []  # (layers, magnitude[, pixel_scale]) as the numpy RandAugment receives it
    monkeypatch.setattr(tfdata, "distort", lambda images, layers, magnitude, keys, *scale:
                        policies.append((layers, magnitude, *scale)) or images)
    tfdata.random_augment(crops, (2, 15, 0.125))
    tfdata.random_augment(crops, (2, 15))
    assert policies == [(2, 15, 0.125), (2, 15)]
    x, y = tf.constant(np.arange(3, dtype="float32").reshape(3, 1, 1, 1)), tf.eye(3)
    mx, my = tfdata.mixup_big_vision(x, y, p=0.5, seed=1)
    a = float(my[0, 0])
    assert a >= 0.5
    np.testing.assert_allclose(my.numpy(), a * y.numpy() + (1 - a) * np.roll(y.numpy(), 1, 0))
    np.testing.assert_allclose(mx.numpy().ravel(), my.numpy() @ np.arange(3), rtol=1e-6)
