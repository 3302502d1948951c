"""Both evaluation pipelines against the official code's own output (tests/fixtures/official/
README.md, "Evaluation preprocessing"): vit_jax's resize and big_vision's (AugReg's)
``resize_small|central_crop|value_range``, on the numpy path and on the tf.data path.

Measured 2026-11-25 (numpy 2.4.6, tensorflow 2.21.0, x86-64): every image of every fixture is
bit-identical on both paths (max error 0). The tests allow 1e-6, far below what a real
difference costs: one uint8 level after big_vision's truncation is 0.0078, and the earlier
bilinear resize that interpolated as ``a * (1 - w) + b * w`` missed vit_jax by 4.5e-5.
"""

import json

import numpy as np
import pytest

from keras_vit import data
from keras_vit.data import preprocessing
from tests.conftest import fixture_path, installed

TENSORFLOW = installed("tensorflow", "tensorflow_datasets")
if TENSORFLOW:
    import tensorflow as tf
    import tensorflow_datasets as tfds

    from keras_vit.data import tfdata
# The numpy path is checked on every runtime; the tf.data path where TensorFlow is installed.
needs_tensorflow = pytest.mark.skipif(
    not TENSORFLOW, reason="the tf.data path needs tensorflow and tensorflow-datasets")

ATOL = 1e-6
VIT_JAX = np.load(fixture_path("preprocess_vit_jax_eval.npz"))
BIG_VISION = np.load(fixture_path("preprocess_big_vision_eval.npz"))
TFDS_MOCK = np.load(fixture_path("preprocess_vit_jax_tfds_mock.npz"))


def _cases(fixture):
    """``(key, photo, sizes)`` of a fixture: ``vit_jax_eval_224/chelsea`` gives (224,),
    ``big_vision_eval_448_384/chelsea`` gives (448, 384)."""
    for key in fixture.files:
        pipeline, _, photo = key.partition("/")
        if pipeline.endswith(tuple("0123456789")) and photo:
            yield key, photo, tuple(int(s) for s in pipeline.split("_")[3:])


def _both_paths(image, **options):
    """The numpy path's output and, where TensorFlow is installed, the tf.data path's."""
    yield preprocessing.preprocess(image, training=False, **options)
    if TENSORFLOW:
        yield tfdata.preprocess(image, training=False, **options).numpy()


@pytest.mark.parametrize("key,photo,sizes", list(_cases(VIT_JAX)))
def test_vit_jax_evaluation_equals_official(key, photo, sizes):
    for ours in _both_paths(VIT_JAX[f"input/{photo}"], image_size=sizes[0]):
        np.testing.assert_allclose(ours, VIT_JAX[key], rtol=0, atol=ATOL)


@pytest.mark.parametrize("key,photo,sizes", list(_cases(BIG_VISION)))
def test_big_vision_central_crop_equals_official(key, photo, sizes):
    resize_size, image_size = sizes
    for ours in _both_paths(VIT_JAX[f"input/{photo}"], image_size=image_size,
                            resize_size=resize_size, evaluation="central_crop"):
        np.testing.assert_allclose(ours, BIG_VISION[key], rtol=0, atol=ATOL)


def test_big_vision_fixture_records_the_augreg_transfer_pp():
    pp = json.loads(str(BIG_VISION["meta"]))["big_vision_pp"]["448_384"]
    assert pp.startswith("decode|resize_small(448)|central_crop(384)|value_range(-1, 1)|")


@needs_tensorflow
@pytest.mark.parametrize("name", sorted(json.loads(str(TFDS_MOCK["meta"]))["tfds_mock"]))
def test_tfds_mock_data_through_get_data_from_tfds(name):
    """keras_vit's ``load`` on the same tensorflow-datasets mock data as the official
    ``get_data_from_tfds(mode="test")``; which drops the last partial batch, keras_vit keeps it."""
    info = json.loads(str(TFDS_MOCK["meta"]))["tfds_mock"][name]
    crop, count = info["crop"], info["num_examples"]
    expected = TFDS_MOCK[f"tfds_mock/{name}/vit_jax_eval_{crop}/images"]
    labels = TFDS_MOCK[f"tfds_mock/{name}/vit_jax_eval_{crop}/labels"].argmax(-1)
    with tfds.testing.mock_data(num_examples=count):
        raw = [image.numpy() for image, _ in tfds.load(name, split="test", as_supervised=True)]
        images, ours_labels = data.as_arrays(
            data.load(name, "test", batch_size=info["batch_eval"], image_size=crop))
    for i, image in enumerate(raw):  # the mock made the same inputs as for the official run
        np.testing.assert_array_equal(image, TFDS_MOCK[f"tfds_mock/{name}/raw/{i}"])
    assert len(images) == count and len(expected) == info["yielded"] < count
    np.testing.assert_allclose(images[:len(expected)], expected, rtol=0, atol=ATOL)
    assert ours_labels[:len(expected)].tolist() == labels.tolist()
    numpy_path = np.stack([data.preprocess(image, image_size=crop, training=False)
                           for image in raw[:len(expected)]])
    np.testing.assert_allclose(numpy_path, expected, rtol=0, atol=ATOL)


def test_area_resize_by_hand():
    # TensorFlow's own example: 4 -> 3 cells, each output the overlap-weighted mean
    row = preprocessing.resize_area(np.float32([[0, 3, 6, 9]])[..., None], 1, 3)[0, :, 0]
    np.testing.assert_allclose(row, [(0 + 3 / 3) * 0.75, (3 * 2 / 3 + 6 * 2 / 3) * 0.75,
                                     (6 / 3 + 9) * 0.75], rtol=1e-6)
    up = preprocessing.resize_area(np.float32([[0, 6]])[..., None], 1, 3)[0, :, 0]
    np.testing.assert_allclose(up, [0, 3, 6], atol=1e-6)  # the middle cell straddles both


@needs_tensorflow
def test_area_resize_equals_tensorflows():
    image = np.random.default_rng(0).integers(0, 256, (2, 13, 21, 3), np.uint8)
    np.testing.assert_array_equal(preprocessing.resize_area(image, 5, 9),
                                  tf.image.resize(image, (5, 9), method="area").numpy())


def test_resize_small_rounds_and_truncates_like_big_vision():
    image = np.random.default_rng(1).integers(0, 256, (300, 451, 3), np.uint8)
    small = preprocessing.resize_small(image, 448)
    assert small.shape == (448, 673, 3) and small.dtype == np.uint8  # 451 * 448 / 300 = 673.5
    area = preprocessing.resize_area(image, 448, 673)
    np.testing.assert_array_equal(small, np.clip(area, 0, 255).astype(np.uint8))
    assert (small < np.round(area)).any()  # truncated, not rounded
    crop = preprocessing.central_crop(small, 384)
    np.testing.assert_array_equal(crop, small[32:416, 144:528])


@needs_tensorflow
def test_central_crop_pipelines_agree_on_batches():
    images = np.random.default_rng(2).integers(0, 256, (5, 40, 30, 3), np.uint8)
    options = dict(batch_size=2, image_size=24, resize_size=32, num_classes=5, training=False,
                   evaluation="central_crop")
    numpy_x, numpy_y = data.as_arrays(data.pipeline(data.from_arrays(images, np.arange(5)),
                                                    **options))
    ds = tf.data.Dataset.from_tensor_slices((images, np.arange(5, dtype=np.int64)))
    batches = data.pipeline(ds, **options)
    assert tuple(batches.element_spec[0].shape) == (None, 24, 24, 3)
    tf_x, tf_y = data.as_arrays(batches)
    np.testing.assert_allclose(numpy_x, tf_x, rtol=0, atol=ATOL)
    assert numpy_x.shape == (5, 24, 24, 3) and numpy_y.tolist() == tf_y.tolist() == [0, 1, 2, 3, 4]


def test_bad_evaluation_options():
    image = np.zeros((8, 8, 3), np.uint8)
    with pytest.raises(ValueError, match="Unknown evaluation 'center'.*central_crop"):
        data.preprocess(image, image_size=4, training=False, evaluation="center")


@needs_tensorflow
def test_bad_evaluation_options_on_the_tf_data_path():
    image = np.zeros((8, 8, 3), np.uint8)
    with pytest.raises(ValueError, match="resize_size \\(3\\) must be at least"):
        tfdata.preprocess(image, image_size=4, resize_size=3, training=False,
                          evaluation="central_crop")
