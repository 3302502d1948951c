"""The numpy input pipeline (in-memory data; no TensorFlow)."""

import numpy as np
import pytest

from keras_vit import data
from keras_vit.data import preprocessing


def _images(n=8, size=28, channels=1):
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, (n, size, size, channels), dtype=np.uint8)


def _unit(images):
    return (np.asarray(images, "float32") - 127.5) / 127.5


def test_unit_range_and_eval_resize():
    image = _images(1, 28)[0]
    np.testing.assert_allclose(data.preprocess(image, image_size=28, training=False),
                               _unit(image))
    # half-pixel-centre bilinear, no antialiasing (tf.image.resize's), by hand for a 2x upsample
    row = preprocessing.resize(np.float32([[0, 4]])[..., None], 4)[0, :, 0]
    np.testing.assert_allclose(row, [0, 1, 3, 4])
    down = preprocessing.resize(np.arange(16, dtype="float32").reshape(4, 4, 1), 2)[..., 0]
    np.testing.assert_allclose(down, [[2.5, 4.5], [10.5, 12.5]])  # means of the 2x2 blocks


@pytest.mark.parametrize("augmentation", ["inception_crop", "resize_crop", "pad_crop", "resize"])
def test_train_augmentations(augmentation):
    images = _images(3, 40, 3)
    out = data.preprocess(images, image_size=32, training=True, augmentation=augmentation,
                          channels=1, rng=np.random.default_rng(0))
    assert out.shape == (3, 32, 32, 1) and out.dtype == np.float32
    assert out.min() >= -1.0 and out.max() <= 1.0


def _windows(big, size=28):
    return np.stack([big[i:i + size, j:j + size] for i in range(5) for j in range(5)])


@pytest.mark.parametrize("augmentation", ["pad_crop", "resize_crop"])
def test_crops_are_windows_drawn_per_image(augmentation):
    images = np.repeat(_images(1, 28), 64, axis=0)
    out = data.preprocess(images, image_size=28, training=True, augmentation=augmentation,
                          resize_size=32, flip=False, rng=np.random.default_rng(1))
    if augmentation == "pad_crop":
        big = np.full((32, 32, 1), -1.0, "float32")
        big[2:30, 2:30] = _unit(images[0])
    else:
        big = _unit(preprocessing.resize(images[0], 32))
    errors = np.abs(out[:, None] - _windows(big)[None]).max(axis=(2, 3, 4))  # (image, window)
    assert errors.min(axis=1).max() < 1e-6  # every output is one of the 25 windows
    assert len(set(errors.argmin(axis=1).tolist())) > 10  # offsets are drawn per image


def test_flip_is_drawn_per_image_and_left_right():
    same = np.repeat(_images(1), 32, axis=0)
    out = data.preprocess(same, image_size=28, training=True, augmentation="resize",
                          rng=np.random.default_rng(0))
    plain = _unit(same[0])
    flipped = [bool(np.allclose(o, plain[:, ::-1])) for o in out]
    assert all(f or np.allclose(o, plain) for f, o in zip(flipped, out)) and 0 < sum(flipped) < 32


def test_inception_window_statistics():
    rng = np.random.default_rng(0)
    windows = np.array([preprocessing.inception_window(100, 100, rng) for _ in range(2000)])
    area = windows[:, 2] * windows[:, 3] / 1e4
    ratio = windows[:, 3] / windows[:, 2]
    assert 0.045 < area.min() and area.max() <= 1.0 and 0.45 < area.mean() < 0.58
    assert 0.7 < ratio.min() and ratio.max() < 1.4
    assert (windows[:, :2] + windows[:, 2:] <= 100).all()


def test_bad_augmentation_and_resize():
    with pytest.raises(ValueError, match="Unknown augmentation"):
        data.preprocess(_images(1)[0], image_size=28, training=True, augmentation="cutout")
    with pytest.raises(ValueError, match="resize_size"):
        data.preprocess(_images(1)[0], image_size=28, training=True, augmentation="resize_crop",
                        resize_size=20)


def test_channel_conversion():
    grey = data.preprocess(_images(1)[0], image_size=28, training=False, channels=3)
    assert grey.shape == (28, 28, 3) and np.allclose(grey[..., 0], grey[..., 2])
    rgb = data.preprocess(np.full((4, 4, 3), 255, np.uint8), image_size=4, training=False,
                          channels=1)
    assert rgb.shape == (4, 4, 1) and np.allclose(rgb, 1.0, atol=1e-3)


def test_bit_resolution_rule():
    assert data.bit_resolution(95, 95) == (160, 128)
    assert data.bit_resolution(96, 96) == (512, 480)
    assert data.resolution("oxford_iiit_pet") == (480, 512)
    assert data.resolution("digits") == (8, None)


def test_mixup_mixes_images_and_labels_alike():
    x = _images(6).astype("float32")
    y = np.eye(3, dtype="float32")[np.arange(6) % 3]  # image 0 is class 0, the reversed 2
    mx, my = data.mixup(x, y, alpha=1.0, rng=np.random.default_rng(1))
    lam = float(my[0, 0])
    np.testing.assert_allclose(my[0], [lam, 0.0, 1.0 - lam], atol=1e-6)
    np.testing.assert_allclose(mx, lam * x + (1 - lam) * x[::-1], rtol=1e-5, atol=1e-3)
    assert data.mixup(x, y, alpha=0.0)[0] is x


def test_pipeline_batches_and_labels():
    ds = data.from_arrays(_images(10), np.arange(10))
    train = data.pipeline(ds, batch_size=4, image_size=28, num_classes=10, training=True)
    assert len(train) == 2 and [train[i][0].shape[0] for i in range(2)] == [4, 4]
    seen = np.concatenate([train[i][1].argmax(-1) for i in range(2)])
    assert len(set(seen.tolist())) == 8  # a shuffled subset, no repeats within a pass
    test = data.pipeline(ds, batch_size=4, image_size=28, num_classes=10, training=False)
    assert [test[i][0].shape[0] for i in range(len(test))] == [4, 4, 2]
    labels = np.concatenate([test[i][1] for i in range(len(test))])
    np.testing.assert_array_equal(labels, np.eye(10, dtype="float32"))
    x, y = data.as_arrays(test)
    np.testing.assert_allclose(x, _unit(_images(10)))
    assert y.tolist() == list(range(10))


def test_endless_pipeline_reshuffles_every_pass_and_repeats_exactly():
    ds = data.from_arrays(_images(8), np.arange(8))
    args = dict(batch_size=4, image_size=28, num_classes=8, training=True, repeat=True, seed=3)
    batches = data.pipeline(ds, **args)
    assert batches.num_batches is None
    passes = [np.concatenate([batches[p * 2 + i][1].argmax(-1) for i in range(2)])
              for p in range(3)]
    assert all(sorted(p.tolist()) == list(range(8)) for p in passes)
    assert len({tuple(p) for p in passes}) == 3
    again = data.pipeline(ds, **args)
    np.testing.assert_array_equal(batches[5][0], again[5][0])


@pytest.mark.parametrize("repeat", [False, True])
def test_a_pipeline_started_at_an_epoch_gives_that_epochs_batches(repeat):
    """What a resumed run relies on: order, crops, flips and mixup partners of epoch 2 are the
    same whether the pipeline ran two passes first or was made to start at epoch 2."""
    ds = data.from_arrays(_images(12), np.arange(12))
    args = dict(batch_size=4, image_size=28, num_classes=12, training=True, repeat=repeat,
                seed=3, augmentation="resize_crop", resize_size=32, mixup_alpha=0.4)

    def epoch(batches, first):
        return [batches[first + step] for step in range(3)]

    ran = data.pipeline(ds, **args)
    first = epoch(ran, 0)
    if repeat:  # an endless pipeline's index runs on across epochs
        third = epoch(ran, 6)
    else:  # a finite one is indexed from 0 every epoch, and told when an epoch ends
        ran.on_epoch_end()
        ran.on_epoch_end()
        third = epoch(ran, 0)
    started = epoch(data.pipeline(ds, **args, start_epoch=2), 0)
    for got, expected, other in zip(started, third, first, strict=True):
        for a, b in zip(got, expected, strict=True):
            np.testing.assert_array_equal(a, b)
        assert not np.array_equal(got[1], other[1])  # another epoch has other batches
    with pytest.raises(ValueError, match="start_epoch"):
        data.pipeline(ds, **args, start_epoch=-1)


def test_eval_pipeline_pads_to_the_replicas_with_zero_weights():
    ds = data.from_arrays(_images(10), np.arange(10))
    test = data.pipeline(ds, batch_size=8, image_size=28, num_classes=10, training=False,
                         replicas=4)
    x, y, w = test[1]
    assert x.shape[0] == 4 and w.tolist() == [1, 1, 0, 0] and not x[2:].any()
    np.testing.assert_array_equal(y[2:], y[1:2].repeat(2, 0))  # a real label: finite losses
    assert test[0][2].tolist() == [1] * 8
    images, labels = data.as_arrays(test)
    assert labels.tolist() == list(range(10)) and len(images) == 10


def test_eval_pipeline_rounds_its_batch_size_up_to_the_replicas():
    ds = data.from_arrays(_images(70), np.arange(70) % 10)
    test = data.pipeline(ds, batch_size=30, image_size=28, num_classes=10, training=False,
                         replicas=4)  # a training batch of 30 is refused on 4 replicas
    assert [len(test[i][0]) for i in range(len(test))] == [32, 32, 8]
    assert test[2][2].tolist() == [1] * 6 + [0] * 2
    assert data.as_arrays(test)[1].tolist() == (np.arange(70) % 10).tolist()


def test_pipeline_mixup_gives_soft_labels():
    ds = data.from_arrays(_images(8), np.arange(8))
    _, y = data.pipeline(ds, batch_size=8, image_size=28, num_classes=8, training=True,
                         mixup_alpha=1.0)[0]
    assert np.allclose(y.sum(-1), 1.0) and (y > 0).sum() > 8


def test_batch_size_must_divide_by_replicas():
    ds = data.from_arrays(_images(8), np.arange(8))
    with pytest.raises(ValueError, match="not divisible by the 4 replicas"):
        data.pipeline(ds, batch_size=30, image_size=28, num_classes=8, training=True, replicas=4)
    with pytest.raises(ValueError, match="larger than the 8 training examples"):
        data.pipeline(ds, batch_size=16, image_size=28, num_classes=8, training=True)


def test_take_per_class():
    ds = data.from_arrays(_images(40), np.arange(40) % 4)
    kept = data.take_per_class(ds, 3, 4, seed=1)
    assert sorted(kept.labels.tolist()) == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    other = data.take_per_class(ds, 3, 4, seed=2)
    assert sorted(kept.images.sum((1, 2, 3)).tolist()) != sorted(
        other.images.sum((1, 2, 3)).tolist())
    with pytest.raises(ValueError, match="positive integer"):
        data.take_per_class(ds, 0, 4)


def test_shared_images_compares_the_images_not_their_sums():
    images = _images(40)
    flipped = images[:, ::-1]  # the same pixel sums, other images
    first = data.from_arrays(images[:30], np.zeros(30))
    assert data.shared_images(first, data.from_arrays(images[20:], np.zeros(20))) == 10
    assert data.shared_images(first, data.from_arrays(flipped, np.zeros(40))) == 0
    twice = data.from_arrays(np.concatenate([images[:3], images[:3]]), np.zeros(6))
    assert data.shared_images(twice, first) == 6  # a repeated image counts each time
    kept, other = (data.take_per_class(data.from_arrays(images, np.arange(40) % 4), 5, 4, seed=s)
                   for s in (1, 2))
    expected = len({i.tobytes() for i in kept.images} & {i.tobytes() for i in other.images})
    assert data.shared_images(kept, other) == expected


def test_unknown_dataset_lists_valid_ones():
    with pytest.raises(ValueError, match="Unknown dataset 'mnist'.*fashion_mnist.*cifar10"):
        data.load("mnist", batch_size=8)


def test_bad_splits():
    with pytest.raises(ValueError, match="no training split"):
        data.load_examples("imagenet_v2", "train")
    with pytest.raises(ValueError, match="Unknown split"):
        data.load_examples("digits", "validation")


@pytest.mark.fashion_mnist
def test_offline_named_datasets():
    x, y = data.load("fashion_mnist", "train", batch_size=16, max_examples=32)[0]
    assert x.shape == (16, 28, 28, 1) and y.shape == (16, 10)
    x, y = data.load("digits", "train", batch_size=10, image_size=56, examples_per_class=1,
                     channels=3)[0]
    assert x.shape == (10, 56, 56, 3)
    assert sorted(np.argmax(y, -1).tolist()) == list(range(10))


def test_unit_helpers():
    assert preprocessing.to_unit_range(np.uint8([0, 255])).tolist() == [-1.0, 1.0]
    with pytest.raises(ValueError, match="Expected images"):
        data.from_arrays(np.zeros((3, 4)), np.zeros(3))


@pytest.mark.parametrize("augmentation", ["resize_crop", "pad_crop", "inception_crop"])
def test_an_examples_augmentation_does_not_depend_on_its_place_in_the_batch(augmentation):
    """Each image's crop and flip come from its own key (seed, epoch, example): the same
    examples in another order, or half of them alone (one process's rows), get the same
    pixels; another epoch gets others."""
    images = np.random.default_rng(0).integers(0, 256, (8, 20, 20, 1), dtype=np.uint8)
    examples = np.arange(8)
    options = dict(image_size=16, training=True, augmentation=augmentation, resize_size=18)

    def prepared(chosen, epoch=3):
        keys = preprocessing.example_keys(5, epoch, examples[chosen])
        return preprocessing.preprocess(images[chosen], keys=keys, **options)

    whole = prepared(np.arange(8))
    np.testing.assert_array_equal(prepared(np.arange(8)[::-1]), whole[::-1])
    np.testing.assert_array_equal(prepared(np.arange(4, 8)), whole[4:])
    assert not np.array_equal(prepared(np.arange(8), epoch=4), whole)
