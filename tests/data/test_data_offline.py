import gzip
import os
import struct

import numpy as np
import pytest

from keras_vit import data
from keras_vit.data import offline


def test_fashion_mnist_slice():
    (x, y), (xt, yt) = data.load_fashion_mnist(num_train=100, num_test=50)
    assert x.shape == (100, 28, 28, 1) and x.dtype == np.uint8
    assert xt.shape == (50, 28, 28, 1) and yt.shape == (50,)
    # Known first labels of the published files: ankle boot (9) and T-shirt/top (0).
    assert y[:2].tolist() == [9, 0]
    assert yt[0] == 9
    assert set(y.tolist()) <= set(range(10)) and 0 < x.mean() < 255


def test_fashion_mnist_missing_files_say_how_to_get_them(tmp_path):
    with pytest.raises(FileNotFoundError, match="network access.*apt-get install dataset-fashi"):
        data.load_fashion_mnist(str(tmp_path))


def test_fashion_mnist_search_order(tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KERAS_VIT_FASHION_MNIST", str(tmp_path / "env"))
    monkeypatch.setenv("KERAS_VIT_SYSTEM_DATASETS", str(tmp_path / "a") + os.pathsep + "/b")
    assert offline.fashion_mnist_dirs() == [
        str(tmp_path / "env"), str(tmp_path / "a" / "fashion-mnist"), "/b/fashion-mnist",
        str(tmp_path / "home" / "datasets" / "fashion-mnist")]
    monkeypatch.delenv("KERAS_VIT_SYSTEM_DATASETS")
    assert offline.fashion_mnist_dirs()[1] == "/usr/share/datasets/fashion-mnist"


def test_fashion_mnist_environment_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_VIT_FASHION_MNIST", str(tmp_path))
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "empty_home"))
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        data.fashion_mnist_dir()
    _write_fake(tmp_path, 3)
    assert data.fashion_mnist_dir() == str(tmp_path)
    (x, y), _ = data.load_fashion_mnist()
    assert x.shape == (3, 28, 28, 1) and y.tolist() == [0, 1, 2]


def _write_fake(folder, n, truncate=False):
    for split in ("train", "t10k"):
        with gzip.open(os.path.join(folder, f"{split}-images-idx3-ubyte.gz"), "wb") as f:
            f.write(struct.pack(">IIII", 2051, n, 28, 28))
            f.write(np.zeros(n * 784 - (10 if truncate else 0), np.uint8).tobytes())
        with gzip.open(os.path.join(folder, f"{split}-labels-idx1-ubyte.gz"), "wb") as f:
            f.write(struct.pack(">II", 2049, n) + bytes(range(n)))


def test_fashion_mnist_truncated_file(tmp_path):
    _write_fake(tmp_path, 3, truncate=True)
    with pytest.raises(ValueError, match="truncated"):
        data.load_fashion_mnist(str(tmp_path))


def test_fashion_mnist_not_idx(tmp_path):
    _write_fake(tmp_path, 2)
    with gzip.open(os.path.join(tmp_path, "train-images-idx3-ubyte.gz"), "wb") as f:
        f.write(b"hello world")
    with pytest.raises(ValueError, match="IDX"):
        data.load_fashion_mnist(str(tmp_path))


def test_digits_split():
    (x, y), (xt, yt) = data.load_digits()
    assert x.shape[1:] == (8, 8, 1) and x.dtype == np.uint8 and len(x) + len(xt) == 1797
    assert x.max() == 255 and x.min() == 0
    # stratified: every class is split in half
    assert np.all(np.abs(np.bincount(y) - np.bincount(yt)) <= 1)
    (x2, _), _ = data.load_digits()
    np.testing.assert_array_equal(x, x2)
    with pytest.raises(ValueError, match="test_fraction"):
        data.load_digits(test_fraction=1.5)
