"""The tf.data path (tensorflow-datasets) and the promise that nothing else needs TensorFlow."""

import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import installed, once_per_ci
from keras_vit import data
from keras_vit.data import preprocessing

TENSORFLOW = installed("tensorflow", "tensorflow_datasets")
if TENSORFLOW:
    import tensorflow as tf
    import tensorflow_datasets as tfds

    from keras_vit.data import tfdata
# The promises about a runtime without TensorFlow (below) hold and are checked on every runtime.
needs_tensorflow = pytest.mark.skipif(
    not TENSORFLOW, reason="the tf.data path needs tensorflow and tensorflow-datasets")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _images(n=8, size=28, channels=1):
    return np.random.default_rng(0).integers(0, 256, (n, size, size, channels), dtype=np.uint8)


def _dataset(images, labels):
    return tf.data.Dataset.from_tensor_slices((images, np.asarray(labels, np.int64)))


@needs_tensorflow
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


@needs_tensorflow
@pytest.mark.parametrize("augmentation", ["inception_crop", "resize_crop", "pad_crop", "resize"])
def test_tf_pipeline_keeps_static_shapes(augmentation):
    ds = _dataset(_images(4), np.arange(4))
    batches = data.pipeline(ds, batch_size=2, image_size=16, num_classes=4, training=True,
                            augmentation=augmentation, channels=3)
    assert tuple(batches.element_spec[0].shape) == (2, 16, 16, 3)
    assert next(iter(batches))[0].shape == (2, 16, 16, 3)


@needs_tensorflow
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


@needs_tensorflow
def test_tf_take_per_class():
    ds = _dataset(_images(40), np.arange(40) % 4)
    labels = sorted(int(y) for _, y in data.take_per_class(ds, 3, 4, seed=1))
    assert labels == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]


@needs_tensorflow
@pytest.mark.parametrize("name", [n for n, i in data.DATASETS.items() if i.source == "tfds"])
def test_tfds_datasets_with_mock_data(name):
    info = data.dataset_info(name)
    split = "train" if "train" in info.splits else "test"
    with tfds.testing.mock_data(num_examples=6):
        ds = data.load(name, split, batch_size=2, image_size=32)
        x, y = next(iter(ds))
    assert x.shape == (2, 32, 32, 3) and y.shape == (2, info.num_classes)
    assert float(tf.reduce_min(x)) >= -1 and float(tf.reduce_max(x)) <= 1


@needs_tensorflow
def test_tfds_bit_rule_and_eval_split_with_mock_data():
    with tfds.testing.mock_data(num_examples=3):
        x, _ = next(iter(data.load("cifar10", "test", batch_size=3)))
        assert x.shape == (3, 128, 128, 3)
        x, _ = next(iter(data.load("imagenet2012", "test", batch_size=1, image_size=16)))
        assert x.shape == (1, 16, 16, 3)


_WITHOUT = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked}:
            raise ImportError("No module named " + repr(name))
sys.meta_path.insert(0, Block())
"""


def _run_without(blocked, code):
    env = dict(os.environ, PYTHONPATH=ROOT, KERAS_BACKEND="jax")
    script = _WITHOUT.format(blocked=blocked) + code
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=300)


@once_per_ci  # a fresh interpreter under jax, whatever the suite's backend
def test_offline_path_and_cli_need_no_tensorflow():
    result = _run_without({"tensorflow", "tensorflow_datasets"}, """
import keras_vit, keras_vit.data, keras_vit.training, keras_vit.inspection, keras_vit.app.cli
from keras_vit import data
x, y = data.as_arrays(data.load("digits", "test", batch_size=64))
assert x.shape == (899, 8, 8, 1)
assert data.load("digits", "train", batch_size=8, examples_per_class=2)[0][0].shape[0] == 8
assert "tensorflow" not in sys.modules
try:
    data.load("cifar10", batch_size=8)
except ImportError as error:
    print("ERROR", error)
""")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "pip install tensorflow-cpu tensorflow-datasets" in result.stdout


@once_per_ci
def test_without_tensorflow_only_the_command_picks_an_installed_backend(tmp_path):
    """A library import leaves the backend to Keras and the user; the command picks one."""
    env = {k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"}
    env.update(PYTHONPATH=ROOT, HOME=str(tmp_path), KERAS_HOME=str(tmp_path / "keras"))
    script = _WITHOUT.format(blocked={"tensorflow"}) + (
        "import os, keras_vit\n"
        "assert 'KERAS_BACKEND' not in os.environ\n"
        "from keras_vit.app import backend_choice\n"
        "print(backend_choice.choose_backend({'KERAS_HOME': os.environ['KERAS_HOME']}))")
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split()[-1] == "jax"


@once_per_ci
@needs_tensorflow
def test_tfds_dataset_without_tensorflow_datasets_says_how_to_install():
    result = _run_without({"tensorflow_datasets"}, """
from keras_vit import data
data.load_examples("cifar10")
""")
    assert "`pip install tensorflow-datasets`" in result.stderr
