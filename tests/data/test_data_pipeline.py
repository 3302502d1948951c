import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from keras_vit import data
from keras_vit.data import preprocessing


def _images(n=8, size=28, channels=1):
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, (n, size, size, channels), dtype=np.uint8)


def test_unit_range_and_eval_resize():
    image = _images(1, 28)[0]
    out = data.preprocess(image, image_size=28, training=False).numpy()
    np.testing.assert_allclose(out, (image.astype("float32") - 127.5) / 127.5)
    out = data.preprocess(image, image_size=56, training=False).numpy()
    expected = tf.image.resize(image, (56, 56), antialias=False).numpy()
    np.testing.assert_allclose(out, (expected - 127.5) / 127.5, atol=1e-6)


@pytest.mark.parametrize("augmentation", ["inception_crop", "resize_crop", "pad_crop", "resize"])
def test_train_augmentations(augmentation):
    image = _images(1, 40, 3)[0]
    out = data.preprocess(image, image_size=32, training=True, augmentation=augmentation,
                          channels=1).numpy()
    assert out.shape == (32, 32, 1)
    assert out.min() >= -1.0 and out.max() <= 1.0


def test_resize_crop_is_a_crop_of_the_resized_image():
    image = _images(1, 28)[0]
    out = data.preprocess(image, image_size=28, training=True, augmentation="resize_crop",
                          resize_size=32, flip=False).numpy()
    big = (tf.image.resize(image, (32, 32), antialias=False).numpy() - 127.5) / 127.5
    windows = [big[i:i + 28, j:j + 28] for i in range(5) for j in range(5)]
    assert min(np.abs(w - out).max() for w in windows) < 1e-6


def test_pad_crop_is_a_translation_with_zero_padding():
    image = _images(1, 28)[0]
    out = data.preprocess(image, image_size=28, training=True, augmentation="pad_crop",
                          resize_size=32, flip=False).numpy()
    padded = np.full((32, 32, 1), -1.0, "float32")
    padded[2:30, 2:30] = (image.astype("float32") - 127.5) / 127.5
    windows = [padded[i:i + 28, j:j + 28] for i in range(5) for j in range(5)]
    assert min(np.abs(w - out).max() for w in windows) < 1e-6


def test_flip_is_random_and_left_right():
    image = _images(1, 28)[0]
    outs = [data.preprocess(image, image_size=28, training=True, augmentation="resize").numpy()
            for _ in range(16)]
    plain = (image.astype("float32") - 127.5) / 127.5
    flipped = plain[:, ::-1]
    kinds = {0 if np.allclose(o, plain) else 1 if np.allclose(o, flipped) else 2 for o in outs}
    assert kinds == {0, 1}


def test_batch_preprocessing_matches_one_image_at_a_time():
    images = _images(6, 28)
    batch = data.preprocess(images, image_size=16, training=False, channels=3).numpy()
    single = [data.preprocess(im, image_size=16, training=False, channels=3).numpy()
              for im in images]
    np.testing.assert_allclose(batch, np.stack(single), atol=1e-6)
    # flips are drawn per image, not once per batch
    same = np.repeat(images[:1], 32, axis=0)
    out = data.preprocess(same, image_size=28, training=True, augmentation="resize").numpy()
    plain = (same[0].astype("float32") - 127.5) / 127.5
    flipped = [bool(np.allclose(o, plain[:, ::-1])) for o in out]
    assert all(f or np.allclose(o, plain) for f, o in zip(flipped, out)) and 0 < sum(flipped) < 32
    with pytest.raises(ValueError, match="one \\(H, W, C\\) image at a time"):
        data.preprocess(images, image_size=28, training=True, augmentation="inception_crop")


@pytest.mark.parametrize("augmentation", ["pad_crop", "resize_crop"])
def test_batch_crops_are_windows_drawn_per_image(augmentation):
    images = np.repeat(_images(1, 28), 64, axis=0)
    out = data.preprocess(images, image_size=28, training=True, augmentation=augmentation,
                          resize_size=32, flip=False).numpy()
    assert out.shape == (64, 28, 28, 1)
    if augmentation == "pad_crop":
        big = np.full((32, 32, 1), -1.0, "float32")
        big[2:30, 2:30] = (images[0].astype("float32") - 127.5) / 127.5
    else:
        big = (tf.image.resize(images[0], (32, 32), antialias=False).numpy() - 127.5) / 127.5
    windows = np.stack([big[i:i + 28, j:j + 28] for i in range(5) for j in range(5)])
    errors = np.abs(out[:, None] - windows[None]).max(axis=(2, 3, 4))  # (image, window)
    assert errors.min(axis=1).max() < 1e-6  # every output is one of the 25 windows
    assert len(set(errors.argmin(axis=1).tolist())) > 10  # offsets are drawn per image


def test_pipeline_eval_batches_equal_the_preprocessed_images():
    images = _images(5, 28)
    ds = data.from_arrays(images, np.arange(5))
    x = np.concatenate([x.numpy() for x, _ in data.pipeline(
        ds, batch_size=2, image_size=16, num_classes=5, training=False, channels=3)])
    expected = [data.preprocess(im, image_size=16, training=False, channels=3).numpy()
                for im in images]
    np.testing.assert_allclose(x, np.stack(expected), atol=1e-6)


def test_bad_augmentation_and_resize():
    with pytest.raises(ValueError, match="Unknown augmentation"):
        data.preprocess(_images(1)[0], image_size=28, training=True, augmentation="cutout")
    with pytest.raises(ValueError, match="resize_size"):
        data.preprocess(_images(1)[0], image_size=28, training=True, augmentation="resize_crop",
                        resize_size=20)


def test_channel_conversion():
    grey = data.preprocess(_images(1)[0], image_size=28, training=False, channels=3).numpy()
    assert grey.shape == (28, 28, 3) and np.allclose(grey[..., 0], grey[..., 2])
    rgb = data.preprocess(_images(1, 28, 3)[0], image_size=28, training=False, channels=1)
    assert rgb.shape == (28, 28, 1)


def test_bit_resolution_rule():
    assert data.bit_resolution(95, 95) == (160, 128)
    assert data.bit_resolution(96, 96) == (512, 480)
    assert data.resolution("oxford_iiit_pet") == (480, 512)
    assert data.resolution("digits") == (8, None)


def test_mixup_mixes_images_and_labels_alike():
    x = tf.constant(_images(6).astype("float32"))
    y = tf.one_hot(np.arange(6) % 3, 3)  # image 0 is class 0, the reversed batch's is class 2
    mx, my = data.mixup(x, y, alpha=1.0, seed=1)
    lam = float(my.numpy()[0, 0])
    np.testing.assert_allclose(my.numpy()[0], [lam, 0.0, 1.0 - lam], atol=1e-6)
    expected = lam * x.numpy() + (1 - lam) * x.numpy()[::-1]
    np.testing.assert_allclose(mx.numpy(), expected, rtol=1e-5, atol=1e-3)
    np.testing.assert_allclose(my.numpy().sum(-1), 1.0, rtol=1e-6)
    assert data.mixup(x, y, alpha=0.0)[0] is x


def test_pipeline_batches_and_labels():
    ds = data.from_arrays(_images(10), np.arange(10))
    train = list(data.pipeline(ds, batch_size=4, image_size=28, num_classes=10, training=True))
    assert [int(x.shape[0]) for x, _ in train] == [4, 4]  # the partial batch is dropped
    test = list(data.pipeline(ds, batch_size=4, image_size=28, num_classes=10, training=False))
    assert [int(x.shape[0]) for x, _ in test] == [4, 4, 2]
    labels = np.concatenate([y.numpy() for _, y in test])
    np.testing.assert_array_equal(labels, np.eye(10, dtype="float32"))


@pytest.mark.parametrize("augmentation", ["inception_crop", "resize_crop", "pad_crop", "resize"])
def test_pipeline_augmentations_keep_static_shapes(augmentation):
    ds = data.from_arrays(_images(4), np.arange(4))
    batches = data.pipeline(ds, batch_size=2, image_size=16, num_classes=4, training=True,
                            augmentation=augmentation, channels=3)
    assert tuple(batches.element_spec[0].shape) == (2, 16, 16, 3)
    assert next(iter(batches))[0].shape == (2, 16, 16, 3)


def test_pipeline_mixup_gives_soft_labels():
    ds = data.from_arrays(_images(8), np.arange(8))
    _, y = next(iter(data.pipeline(ds, batch_size=8, image_size=28, num_classes=8, training=True,
                                   mixup_alpha=1.0)))
    assert np.allclose(y.numpy().sum(-1), 1.0) and (y.numpy() > 0).sum() > 8


def test_batch_size_must_divide_by_replicas():
    ds = data.from_arrays(_images(8), np.arange(8))
    with pytest.raises(ValueError, match="not divisible by the 4 replicas"):
        data.pipeline(ds, batch_size=30, image_size=28, num_classes=8, training=True, replicas=4)
    assert data.check_batch_size(32, replicas=4) == 8  # the per-replica share
    with pytest.raises(ValueError, match="positive integer"):
        data.check_batch_size(0, replicas=1)


def test_num_replicas_reads_the_current_distribution(monkeypatch):
    import keras

    assert data.num_replicas() == 1
    if keras.backend.backend() == "tensorflow":
        class Strategy:
            num_replicas_in_sync = 4
        monkeypatch.setattr(tf.distribute, "get_strategy", lambda: Strategy())
    else:
        class Mesh:
            axis_names = ("batch", "model")
            shape = (4, 2)

        class Distribution:
            device_mesh = Mesh()
            batch_dim_name = "batch"
        monkeypatch.setattr(keras.distribution, "distribution", lambda: Distribution())
    assert data.num_replicas() == 4
    with pytest.raises(ValueError, match="replicas"):
        data.check_batch_size(6)


def test_take_per_class():
    ds = data.from_arrays(_images(40), np.arange(40) % 4)
    labels = sorted(int(y) for _, y in data.take_per_class(ds, 3, 4, seed=1))
    assert labels == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    other = sorted(int(x.numpy().sum()) for x, _ in data.take_per_class(ds, 3, 4, seed=2))
    assert other != sorted(int(x.numpy().sum()) for x, _ in data.take_per_class(ds, 3, 4, seed=1))


def test_unknown_dataset_lists_valid_ones():
    with pytest.raises(ValueError, match="Unknown dataset 'mnist'.*fashion_mnist.*cifar10"):
        data.load("mnist", batch_size=8)


def test_bad_splits():
    with pytest.raises(ValueError, match="no training split"):
        data.load_examples("imagenet_v2", "train")
    with pytest.raises(ValueError, match="Unknown split"):
        data.load_examples("digits", "validation")


def test_offline_named_datasets():
    x, y = next(iter(data.load("fashion_mnist", "train", batch_size=16, max_examples=32)))
    assert x.shape == (16, 28, 28, 1) and y.shape == (16, 10)
    x, y = next(iter(data.load("digits", "train", batch_size=10, image_size=56,
                               examples_per_class=1, channels=3)))
    assert x.shape == (10, 56, 56, 3)
    assert sorted(np.argmax(y.numpy(), -1).tolist()) == list(range(10))


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


def test_unit_helpers():
    assert preprocessing.to_unit_range(np.uint8([0, 255])).numpy().tolist() == [-1.0, 1.0]
    with pytest.raises(ValueError, match="Expected images"):
        data.from_arrays(np.zeros((3, 4)), np.zeros(3))
