import gzip
import os
import struct

import numpy as np
import pytest

from keras_vit import data
from keras_vit.data import offline


@pytest.mark.fashion_mnist
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


# Unreadable files: cut short as an interrupted copy leaves them, damaged, or not gzip
# at all. Each is refused with the file's name and what to do, by the place it was read from.
def _write_large(folder, n=1000):
    """Fake files big enough that cutting one leaves part of its gzip stream."""
    rng = np.random.default_rng(0)
    for split in ("train", "t10k"):  # few grey levels: compressed, as real images are
        with gzip.open(os.path.join(folder, f"{split}-images-idx3-ubyte.gz"), "wb") as f:
            f.write(struct.pack(">IIII", 2051, n, 28, 28))
            f.write(rng.integers(0, 4, n * 784, dtype=np.uint8).tobytes())
        with gzip.open(os.path.join(folder, f"{split}-labels-idx1-ubyte.gz"), "wb") as f:
            f.write(struct.pack(">II", 2049, n) + rng.integers(0, 10, n, np.uint8).tobytes())
    return os.path.join(folder, "train-images-idx3-ubyte.gz")


def _cut(file, size=100_000):
    with open(file, "rb") as f:
        head = f.read(size)
    with open(file, "wb") as f:
        f.write(head)


def test_a_cut_file_is_named_with_the_fix(tmp_path):
    images = _write_large(tmp_path)
    _cut(images)
    with pytest.raises(offline.UnreadableFile) as raised:
        data.load_fashion_mnist(str(tmp_path))
    message = str(raised.value)
    assert message.startswith(f"The Fashion-MNIST file {images!r} is truncated (Compressed file "
                              "ended before the end-of-stream marker was reached); an "
                              "interrupted copy")
    assert "copy the four files (train-images-idx3-ubyte.gz, " in message
    assert "leave out the folder (path= / --data-dir)" in message
    assert isinstance(raised.value, ValueError)  # the command reports it in one line


@pytest.mark.parametrize("content, problem", [
    (b"<html>404</html>", "corrupt or not a gzip file"),
    (gzip.compress(b"hello world", mtime=0), "not an unsigned-byte IDX file"),
], ids=["an-html-page", "gzip-not-idx"])
def test_a_file_of_other_content_is_named(tmp_path, content, problem):
    labels = os.path.join(tmp_path, "t10k-labels-idx1-ubyte.gz")
    _write_fake(tmp_path, 3)
    with open(labels, "wb") as f:
        f.write(content)
    with pytest.raises(ValueError, match=f"file {labels!r} is {problem}"):
        data.load_fashion_mnist(str(tmp_path))


def test_a_damaged_stream_is_named(tmp_path):
    images = _write_large(tmp_path)
    with open(images, "r+b") as f:  # flip bytes in the middle of the deflate stream
        f.seek(50_000)
        flipped = bytes(b ^ 0xFF for b in f.read(64))
        f.seek(50_000)
        f.write(flipped)
    # zlib refuses the stream, or it decodes to more than the header says
    with pytest.raises(offline.UnreadableFile,
                       match=f"{images!r} is (corrupt or not a gzip file|longer than its header)"):
        data.load_fashion_mnist(str(tmp_path))


def test_the_fix_follows_where_the_file_was_found(tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KERAS_VIT_SYSTEM_DATASETS", str(tmp_path / "debian"))
    debian = tmp_path / "debian" / "fashion-mnist"
    debian.mkdir(parents=True)
    _cut(_write_large(debian))
    with pytest.raises(ValueError, match="of Debian's dataset-fashion-mnist is truncated.*"
                       "apt-get install --reinstall dataset-fashion-mnist"):
        data.load_fashion_mnist()
    monkeypatch.setenv("KERAS_VIT_FASHION_MNIST", str(tmp_path / "env"))
    (tmp_path / "env").mkdir()
    _cut(_write_large(tmp_path / "env"))
    with pytest.raises(ValueError, match=r"\(from \$KERAS_VIT_FASHION_MNIST\) is truncated.*"
                       "copy the four files.*or unset it"):
        data.load_fashion_mnist()
    monkeypatch.delenv("KERAS_VIT_FASHION_MNIST")
    monkeypatch.setenv("KERAS_VIT_SYSTEM_DATASETS", "")
    cache = tmp_path / "home" / "datasets" / "fashion-mnist"
    cache.mkdir(parents=True)
    _cut(_write_large(cache))
    with pytest.raises(ValueError, match="in the Keras cache is truncated.*delete it"):
        data.load_fashion_mnist(download=False)


def test_a_bad_cached_download_is_deleted_and_fetched_again(tmp_path, monkeypatch):
    from keras_vit import downloads

    served = tmp_path / "mirror"
    origin = downloads.mirror_path(served, offline.FASHION_MNIST_ORIGIN)
    os.makedirs(origin)
    _write_large(origin)
    # the fake files' own hashes stand in for the real ones: the check stays the real check
    hashes = {name: downloads.sha256(os.path.join(origin, name), decompress=True)
              for name in offline.FASHION_MNIST_SHA256}
    monkeypatch.setattr(offline, "FASHION_MNIST_SHA256", hashes)
    monkeypatch.setenv("KERAS_VIT_MIRROR", served.as_uri())
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KERAS_VIT_SYSTEM_DATASETS", "")
    (x, _), _ = data.load_fashion_mnist()  # downloaded into the cache
    cached = os.path.join(offline.fashion_mnist_dir(), "train-images-idx3-ubyte.gz")
    assert cached.startswith(str(tmp_path / "home")) and x.shape == (1000, 28, 28, 1)
    _cut(cached)
    (again, _), _ = data.load_fashion_mnist()
    np.testing.assert_array_equal(again, x)
    assert os.path.getsize(cached) == os.path.getsize(os.path.join(origin,
                                                                   "train-images-idx3-ubyte.gz"))
