"""AugReg's augmentation in the numpy pipeline: RandAugment (``randaugment``) and big_vision's
mixup (``mixup_p``), resumable and the same on any number of processes."""

import numpy as np
import pytest

from keras_vit import data, distribution
from keras_vit.data import datasets, preprocessing, randaugment

AUGREG = dict(randaugment=(2, 15), mixup_p=0.5)


def _examples(n=16, size=20, channels=3):
    images = np.random.default_rng(0).integers(0, 256, (n, size, size, channels), dtype=np.uint8)
    return data.from_arrays(images, np.arange(n) % 10)


def _args(**options):
    return dict(batch_size=8, image_size=16, num_classes=10, training=True, seed=3,
                augmentation="resize_crop", resize_size=18, **options)


@pytest.mark.parametrize("repeat", [False, True])
def test_a_pipeline_started_at_an_epoch_gives_that_epochs_augreg_batches(repeat):
    ds = _examples()
    ran = data.pipeline(ds, **_args(repeat=repeat, **AUGREG))
    if repeat:  # an endless pipeline's index runs on across epochs
        third = [ran[4 + step] for step in range(2)]
    else:
        ran.on_epoch_end()
        ran.on_epoch_end()
        third = [ran[step] for step in range(2)]
    started = data.pipeline(ds, **_args(repeat=repeat, start_epoch=2, **AUGREG))
    for step, expected in enumerate(third):
        for got, want in zip(started[step], expected, strict=True):
            np.testing.assert_array_equal(got, want)


def _block(process, count):
    def process_rows(size):
        block = size // count
        return np.arange(process * block, (process + 1) * block)

    return process_rows


@pytest.mark.parametrize("options", [AUGREG, dict(randaugment=(2, 15), mixup_alpha=0.4)])
def test_two_processes_rows_put_together_are_one_process_batch(monkeypatch, options):
    """Each process prepares its rows and their mixup partners (row i-1 for big_vision's, row
    N-1-i for BiT's), which may be the other process's: put together, the rows are the batch
    of one process, to the bit."""
    ds = _examples()
    one = [data.pipeline(ds, **_args(**options))[step] for step in range(2)]
    parts = []
    for process in range(2):
        monkeypatch.setattr(distribution, "process_rows", _block(process, 2))
        batches = data.pipeline(ds, **_args(**options))
        parts.append([batches[step] for step in range(2)])
    for step in range(2):
        for index in range(2):
            joined = np.concatenate([parts[0][step][index], parts[1][step][index]])
            np.testing.assert_array_equal(joined, one[step][index])


def test_randaugment_changes_training_images_and_not_evaluation_ones():
    ds = _examples()
    plain, augmented = (data.pipeline(ds, **_args(randaugment=r))[0] for r in (None, (2, 15)))
    np.testing.assert_array_equal(augmented[1], plain[1])  # the same examples
    assert not np.array_equal(augmented[0], plain[0])
    assert augmented[0].min() >= -1 and augmented[0].max() <= 1
    evaluation = dict(_args(), training=False)
    for plain, augmented in zip(data.pipeline(ds, **evaluation)[0],
                                data.pipeline(ds, **evaluation, randaugment=(2, 15))[0],
                                strict=True):
        np.testing.assert_array_equal(augmented, plain)


@pytest.mark.parametrize("channels", [1, 3])
def test_randaugment_runs_on_the_crop_cast_to_uint8_with_each_images_key(channels):
    """crop, flip, clip to 0..255 and truncate to uint8, RandAugment with the image's key,
    scale to [-1, 1]; grey images too."""
    images = _examples(channels=channels).images
    keys = preprocessing.example_keys(3, 1, np.arange(16))
    options = dict(image_size=16, training=True, augmentation="resize_crop", resize_size=18)
    crops = preprocessing.augment(images, 16, "resize_crop", 18, True, keys)
    assert not np.array_equal(crops, np.floor(crops))  # the cast truncates something here
    expected = preprocessing.to_unit_range(
        randaugment.randaugment(preprocessing.to_uint8(crops), 2, 15, keys))
    got = data.preprocess(images, keys=keys, randaugment=(2, 15), **options)
    np.testing.assert_array_equal(got, expected)
    assert got.shape == (16, 16, 16, channels)
    # A third entry, the pixel scale of the shifts and Cutout: 0.02 makes them 3 and 1 pixels,
    # where big_vision's 150 and 60 empty a 16-pixel crop, so these images differ from `got`.
    scaled = data.preprocess(images, keys=keys, randaugment=(2, 15, 0.02), **options)
    np.testing.assert_array_equal(scaled, preprocessing.to_unit_range(randaugment.randaugment(
        preprocessing.to_uint8(crops), 2, 15, keys, 0.02)))
    assert not np.array_equal(scaled, got)
    for no_layers in [(0, 0), (0, 15)]:  # no layers: no RandAugment, the float crop kept
        np.testing.assert_array_equal(
            data.preprocess(images, keys=keys, randaugment=no_layers, **options),
            data.preprocess(images, keys=keys, **options))


def test_big_vision_mixup_mixes_every_image_with_the_one_before_it():
    """x'_i = a * x_i + (1 - a) * x_{i-1} (x_{-1}: the last row), labels alike, one a >= 0.5 for
    the whole batch and another at the next step."""
    ds = data.from_arrays(_examples().images, np.arange(16))  # a label per example
    args = _args(randaugment=(2, 15))
    args["num_classes"] = 16
    plain, mixed = data.pipeline(ds, **args), data.pipeline(ds, **args, mixup_p=0.5)
    shares = []
    for step in range(2):
        (x, y), (mx, my) = plain[step], mixed[step]
        labels = y.argmax(-1)
        share = my[np.arange(8), labels]
        assert np.all(share == share[0]) and share[0] >= 0.5
        a = share[0]
        np.testing.assert_array_equal(mx, a * x + (1 - a) * np.roll(x, 1, axis=0))
        np.testing.assert_array_equal(my, a * y + (1 - a) * np.roll(y, 1, axis=0))
        shares.append(a)
    assert shares[0] != shares[1]


def test_big_vision_mixup_function():
    x = np.random.default_rng(0).random((6, 2, 2, 1), dtype=np.float32)
    y = np.eye(6, dtype=np.float32)
    mx, my = preprocessing.mixup_big_vision(x, y, p=0.2, rng=np.random.default_rng(1))
    a = my[0, 0]
    assert a >= 0.5 and np.allclose(my[0, 5], 1 - a)
    np.testing.assert_allclose(mx, a * x + (1 - a) * np.roll(x, 1, axis=0), rtol=1e-6)
    assert preprocessing.mixup_big_vision(x, y, p=0.0)[0] is x
    draws = [preprocessing.mixup_share(0.5, np.random.default_rng(s)) for s in range(200)]
    assert min(draws) >= 0.5 and max(draws) <= 1


@pytest.mark.parametrize("bad, message", [
    (dict(randaugment=(2, 31)), "magnitude must be a number from 0 to 30"),
    (dict(randaugment=(-1, 10)), "num_layers must be a whole number"),
    (dict(randaugment=(2.5, 10)), "num_layers must be a whole number"),
    (dict(randaugment=(2,)), r"randaugment must be None, \(num_layers, magnitude\) or"),
    (dict(randaugment="2,15"), r"randaugment must be None, \(num_layers, magnitude\) or"),
    (dict(randaugment=15), r"randaugment must be None, \(num_layers, magnitude\) or"),
    (dict(randaugment=(2, 15, 1, 1)), r"randaugment must be None, \(num_layers, magnitude\) or"),
    (dict(randaugment=(2, 15, 0)), "pixel_scale must be a number > 0"),
    (dict(mixup_p=-0.5), "mixup_p must be a number >= 0"),
    (dict(mixup_p="0.5"), "mixup_p must be a number >= 0"),
    (dict(mixup_p=0.5, mixup_alpha=0.2), r"mixup_alpha \(0.2, BiT's mixup\) and mixup_p \(0.5"),
])
def test_bad_augreg_options_are_refused(monkeypatch, bad, message):
    with pytest.raises(ValueError, match=message):
        data.pipeline(_examples(), **_args(**bad))
    monkeypatch.setattr(datasets, "load_examples", None)  # refused before the data is loaded
    with pytest.raises(ValueError, match=message):
        data.load("digits", batch_size=8, **bad)
    if "randaugment" in bad:
        with pytest.raises(ValueError, match=message):
            data.preprocess(_examples().images, image_size=16, training=True, **bad)
