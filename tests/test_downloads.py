import http.server
import os
import shutil
import threading

import numpy as np
import pytest

import keras_vit
from keras_vit import downloads
from keras_vit.data import offline
from tests import mirror
from tests.conftest import fixture_path

pytestmark = pytest.mark.backend_independent  # the cache and mirror of keras.utils.get_file

URL = "https://storage.googleapis.com/vit_models/imagenet21k/ViT-Ti_16.npz"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    home = tmp_path / "keras_home"
    monkeypatch.setenv("KERAS_HOME", str(home))
    return home


@pytest.fixture
def served(tmp_path, monkeypatch):
    root = tmp_path / "mirror"
    url, server = mirror.serve(root)
    monkeypatch.setenv("KERAS_VIT_MIRROR", url + "/")
    yield root, url
    server.shutdown()


def test_mirror_rewrites_every_url(monkeypatch):
    monkeypatch.delenv("KERAS_VIT_MIRROR", raising=False)
    assert downloads.mirrored(URL) == URL
    monkeypatch.setenv("KERAS_VIT_MIRROR", "https://proxy.example/buckets/")
    assert downloads.mirrored(URL) == (
        "https://proxy.example/buckets/storage.googleapis.com/vit_models/imagenet21k/ViT-Ti_16.npz")
    monkeypatch.setenv("KERAS_VIT_MIRROR", "proxy.example")
    with pytest.raises(ValueError, match="KERAS_VIT_MIRROR='proxy.example' is not a URL"):
        downloads.mirrored(URL)


def test_published_checkpoint_downloads_through_the_mirror(served, cache):
    root, _ = served
    mirror.put(root, URL, fixture_path("vit_tiny_token_norep.npz"))
    model = keras_vit.load_checkpoint("imagenet21k/ViT-Ti_16")
    assert model.config.encoder.hidden_size == 32
    cached = cache / "keras_vit" / "imagenet21k" / "ViT-Ti_16.npz"
    assert cached.is_file()
    os.remove(mirror.location(root, URL))  # the second load comes from the cache
    assert keras_vit.load_checkpoint("imagenet21k/ViT-Ti_16").config.encoder.hidden_size == 32


def test_a_mirror_folder_serves_without_a_server(cache, monkeypatch, tmp_path, capsys):
    """``file://<folder>`` laid out by ``mirror_path`` (notebook 05's offline stand-in), copied
    without a message or progress bar (they would print the folder's path)."""
    root = tmp_path / "mirror"
    target = downloads.mirror_path(root, URL)
    assert target == str(root / "storage.googleapis.com" / "vit_models" / "imagenet21k"
                         / "ViT-Ti_16.npz")
    os.makedirs(os.path.dirname(target))
    shutil.copyfile(fixture_path("vit_tiny_token_norep.npz"), target)
    monkeypatch.setenv("KERAS_VIT_MIRROR", root.as_uri())
    assert keras_vit.load_checkpoint("imagenet21k/ViT-Ti_16").config.encoder.hidden_size == 32
    assert (cache / "keras_vit" / "imagenet21k" / "ViT-Ti_16.npz").is_file()
    printed = capsys.readouterr()
    assert "Downloading" not in printed.out + printed.err and str(root) not in printed.out
    with pytest.raises(ConnectionError, match="Could not download file://.*ViT-Ti_32.npz"):
        keras_vit.load_checkpoint("imagenet21k/ViT-Ti_32")  # not in the folder
    assert not list((cache / "keras_vit" / "imagenet21k").glob("ViT-Ti_32*"))


def test_corrupt_checkpoint_is_deleted(served, cache):
    root, _ = served
    with open(fixture_path("vit_tiny_token_norep.npz"), "rb") as f:
        whole = f.read()
    target = mirror.location(root, URL)
    os.makedirs(os.path.dirname(target))
    with open(target, "wb") as f:
        f.write(whole[: len(whole) // 2])  # a half file, served with a matching length
    with pytest.raises(ValueError, match="corrupt or incomplete.*deleted"):
        keras_vit.load_checkpoint("imagenet21k/ViT-Ti_16")
    assert not (cache / "keras_vit" / "imagenet21k" / "ViT-Ti_16.npz").exists()


class _ShortBody(http.server.BaseHTTPRequestHandler):
    """Announces 1000 bytes and sends 10, like a dropped connection."""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "1000")
        self.end_headers()
        self.wfile.write(b"0123456789")

    def log_message(self, *args):
        pass


def test_truncated_download_leaves_nothing(cache, monkeypatch):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ShortBody)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("KERAS_VIT_MIRROR", f"http://127.0.0.1:{server.server_address[1]}")
    try:
        with pytest.raises(ConnectionError, match="through KERAS_VIT_MIRROR"):
            downloads.download(URL, cache_subdir="x")
    finally:
        server.shutdown()
    assert not (cache / "x" / "ViT-Ti_16.npz").exists()


def test_unreachable_mirror_and_missing_file(served, cache, monkeypatch):
    with pytest.raises(ConnectionError, match="404.*Check the network connection or "
                                              "KERAS_VIT_MIRROR"):
        keras_vit.load_checkpoint("imagenet21k/ViT-Ti_16")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ShortBody)
    port = server.server_address[1]
    server.server_close()  # nothing listens on this port now
    monkeypatch.setenv("KERAS_VIT_MIRROR", f"http://127.0.0.1:{port}")
    with pytest.raises(ConnectionError, match=f"127.0.0.1:{port}/storage.googleapis.com"):
        keras_vit.load_checkpoint("imagenet21k/ViT-Ti_16")
    assert not list(cache.rglob("*.npz"))


def test_fashion_mnist_downloads_hash_checked(served, cache, monkeypatch, tmp_path):
    root, _ = served
    monkeypatch.setenv("KERAS_VIT_SYSTEM_DATASETS", "")
    fake = tmp_path / "fake"
    fake.mkdir()
    _write_idx(fake, 3)
    mirror.build(root, fashion_mnist=str(fake))
    # wrong content: the hash check fails, and the bad file is not kept
    with pytest.raises(ValueError, match="train-images-idx3-ubyte.gz .*corrupt.*SHA-256"):
        offline.load_fashion_mnist()
    assert not (cache / "datasets" / "fashion-mnist" / "train-images-idx3-ubyte.gz").exists()


@pytest.mark.fashion_mnist
def test_fashion_mnist_real_files_through_the_mirror(download_mirror, cache):
    root, _ = download_mirror
    if not os.path.exists(mirror.location(root, offline.FASHION_MNIST_ORIGIN
                                          + "t10k-labels-idx1-ubyte.gz")):
        with pytest.raises(FileNotFoundError, match="Fashion-MNIST not found.*network access"):
            offline.load_fashion_mnist()
        return
    (x, y), (xt, yt) = offline.load_fashion_mnist(num_train=4, num_test=2)
    assert y.tolist()[:2] == [9, 0] and xt.shape == (2, 28, 28, 1)
    folder = cache / "datasets" / "fashion-mnist"
    assert offline.fashion_mnist_dir() == str(folder)  # found in the Keras cache from now on
    assert sorted(os.listdir(folder)) == sorted(offline.FASHION_MNIST_SHA256)


def _write_idx(folder, n):
    import gzip
    import struct

    for split in ("train", "t10k"):
        with gzip.open(os.path.join(folder, f"{split}-images-idx3-ubyte.gz"), "wb") as f:
            f.write(struct.pack(">IIII", 2051, n, 28, 28) + np.zeros(n * 784, np.uint8).tobytes())
        with gzip.open(os.path.join(folder, f"{split}-labels-idx1-ubyte.gz"), "wb") as f:
            f.write(struct.pack(">II", 2049, n) + bytes(range(n)))
