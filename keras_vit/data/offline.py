"""In-memory image data: Fashion-MNIST and scikit-learn digits (numpy only, no TensorFlow).

Fashion-MNIST (Xiao et al. 2017; 60k/10k grey 28x28 clothing images, 10 classes) is read from its
four IDX files: a local folder first (``$KERAS_VIT_FASHION_MNIST``, Debian's
``dataset-fashion-mnist`` package, the Keras cache), else they are downloaded into the Keras cache
from the origin ``keras.datasets.fashion_mnist`` uses (``keras_vit.downloads``). The
8x8 handwritten digits bundled with scikit-learn (1797 images, 10 classes) are the small downstream
task of the transfer demo.

Both loaders return uint8 images of shape (N, H, W, 1) in 0..255, like tfds images, so the same
preprocessing (``keras_vit.data.preprocessing``) applies to every source.
"""

import gzip
import os
import struct
import zlib

import numpy as np

from keras_vit import _optional

SYSTEM_DATASETS = "/usr/share/datasets"  # Debian's dataset-* packages; $KERAS_VIT_SYSTEM_DATASETS
# The origin keras.datasets.fashion_mnist downloads from, and the SHA-256 of each file's
# decompressed IDX content (the .gz bytes differ between copies that were recompressed).
FASHION_MNIST_ORIGIN = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/"
FASHION_MNIST_SHA256 = {
    "train-images-idx3-ubyte.gz":
        "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
    "train-labels-idx1-ubyte.gz":
        "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
    "t10k-images-idx3-ubyte.gz": "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
    "t10k-labels-idx1-ubyte.gz": "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
}
_CACHE_SUBDIR = os.path.join("datasets", "fashion-mnist")  # where Keras' own loader puts them
FASHION_MNIST_CLASSES = (
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
)
_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
_HOW_TO_GET = (
    "Get it by any one of: network access (it is then downloaded into the Keras cache, "
    "~/.keras/datasets/fashion-mnist, or through $KERAS_VIT_MIRROR); the Debian package "
    "(`apt-get install dataset-fashion-mnist`); or the folder holding the four IDX .gz files "
    "passed as path=... / --data-dir / $KERAS_VIT_FASHION_MNIST."
)


def _read_idx(path, count):
    """Read the first ``count`` items (all when None) of a gzipped IDX file.

    Raises ``UnreadableFile`` naming the file when it is not a whole gzipped IDX file.
    """
    try:
        with gzip.open(path, "rb") as f:
            magic = f.read(4)
            if len(magic) != 4 or magic[:2] != b"\x00\x00" or magic[2] != 0x08:
                raise UnreadableFile(path, f"not an unsigned-byte IDX file (magic {magic!r})")
            ndim = magic[3]
            shape = struct.unpack(f">{ndim}I", f.read(4 * ndim))
            n = shape[0] if count is None else min(int(count), shape[0])
            item = int(np.prod(shape[1:], dtype=np.int64))
            data = f.read(n * item)
            if n == shape[0] and f.read(1):  # read to the end: gzip checks the CRC there
                raise UnreadableFile(path, f"longer than its header says ({shape[0]} items)")
    except EOFError as error:  # the stream ends early: an interrupted copy or download
        raise UnreadableFile(path, f"truncated ({error})") from error
    except (gzip.BadGzipFile, zlib.error, struct.error) as error:
        raise UnreadableFile(path, f"corrupt or not a gzip file ({error})") from error
    except OSError as error:
        raise UnreadableFile(path, f"unreadable ({error})") from error
    if len(data) != n * item:
        raise UnreadableFile(path, f"truncated: expected {n * item} bytes of data, found "
                             f"{len(data)}")
    return np.frombuffer(data, np.uint8).reshape((n, *shape[1:]))


class UnreadableFile(ValueError):
    """A Fashion-MNIST file that cannot be read whole (cut short, damaged, not IDX)."""

    def __init__(self, path, problem, origin=""):
        super().__init__(f"The Fashion-MNIST file {os.fspath(path)!r}{origin} is {problem}.")
        self.path, self.problem = os.fspath(path), problem


def fashion_mnist_dirs():
    """The folders searched for Fashion-MNIST, in order: ``$KERAS_VIT_FASHION_MNIST``, the
    Debian package's folder under ``$KERAS_VIT_SYSTEM_DATASETS`` (default /usr/share/datasets;
    set it empty to search no system folder), the Keras cache."""
    folders = [os.environ.get("KERAS_VIT_FASHION_MNIST")]
    system = os.environ.get("KERAS_VIT_SYSTEM_DATASETS", SYSTEM_DATASETS)
    folders += [os.path.join(root, "fashion-mnist") for root in system.split(os.pathsep) if root]
    folders.append(_cache_folder())
    return [folder for folder in folders if folder]


def fashion_mnist_dir(path=None, *, download=False):
    """The folder holding the Fashion-MNIST IDX files.

    ``path`` when given (it must hold the files), else the first of ``fashion_mnist_dirs()``
    that holds them; else, with ``download=True``, the Keras cache after downloading the files
    that are missing there (from Keras' origin or ``$KERAS_VIT_MIRROR``, content hash-checked).
    Raises a FileNotFoundError that says how to get the data when nothing is found.
    """
    candidates = [path] if path is not None else fashion_mnist_dirs()
    names = [name for pair in _FILES.values() for name in pair]
    for folder in candidates:
        if all(os.path.isfile(os.path.join(folder, name)) for name in names):
            return folder
    if path is None and download:
        return _download_fashion_mnist()
    looked = ", ".join(repr(os.fspath(c)) for c in candidates)
    raise FileNotFoundError(
        f"Fashion-MNIST not found (looked for {', '.join(names)} in {looked}). {_HOW_TO_GET}"
    )


def _download_fashion_mnist():
    from keras_vit.downloads import download, sha256

    def check(expected):
        def verify(path):
            if sha256(path, decompress=True) != expected:
                raise ValueError("the SHA-256 of the decompressed content does not match")
        return verify

    try:
        paths = [download(FASHION_MNIST_ORIGIN + name, cache_subdir=_CACHE_SUBDIR,
                          check=check(FASHION_MNIST_SHA256[name]))
                 for name in FASHION_MNIST_SHA256]
    except ConnectionError as error:  # offline: the other ways to the data
        raise ConnectionError(f"{error} Fashion-MNIST is not on this machine. {_HOW_TO_GET}") \
            from error
    return os.path.dirname(paths[0])


def load_fashion_mnist(path=None, *, num_train=None, num_test=None, download=True):
    """Fashion-MNIST as uint8 arrays: ``(x_train, y_train), (x_test, y_test)``.

    Args:
        path: folder with the four IDX ``.gz`` files; None searches the usual places
            (``fashion_mnist_dirs``), then downloads into the Keras cache.
        num_train, num_test: read only the first examples of each split (fast, for tests).
        download: download the files when no folder holds them (``path=None`` only).

    Returns:
        images (N, 28, 28, 1) uint8 and labels (N,) int64.

    Example:
    >>> (x, y), (xt, yt) = load_fashion_mnist(num_train=5, num_test=3)
    >>> x.shape, x.dtype, yt.shape
    ((5, 28, 28, 1), dtype('uint8'), (3,))
    """
    folder = fashion_mnist_dir(path, download=download)
    try:
        return _read_fashion_mnist(folder, num_train, num_test)
    except UnreadableFile as error:
        if not (path is None and download and folder == _cache_folder()):
            raise _explained(error, path) from None
        # A cached download that turns out bad (cut or damaged since) is fetched again.
        os.remove(error.path)
        return _read_fashion_mnist(fashion_mnist_dir(download=True), num_train, num_test)


def _read_fashion_mnist(folder, num_train, num_test):
    result = []
    for split, count in (("train", num_train), ("test", num_test)):
        image_file, label_file = (os.path.join(folder, name) for name in _FILES[split])
        images = _read_idx(image_file, count)[..., None]
        labels = _read_idx(label_file, count).astype(np.int64)
        if len(images) != len(labels):
            raise UnreadableFile(label_file, f"not the labels of {image_file!r}: they hold "
                                 f"{len(labels)} examples, the images {len(images)}")
        result.append((images, labels))
    return tuple(result)


def _cache_folder():
    """Where Keras' own loader, and a download here, put the files."""
    from keras_vit.downloads import cache_dir

    return os.path.join(cache_dir(), _CACHE_SUBDIR)


def _explained(error, path):
    """``error`` with where its file came from and what to do about it."""
    file, problem = error.path, error.problem
    folder = os.path.dirname(file)
    again = ("an interrupted copy or download leaves a file cut short: copy the four files "
             f"({', '.join(FASHION_MNIST_SHA256)}) into {folder!r} again")
    if path is not None:
        origin, fix = "", (f"{again}, or leave out the folder (path= / --data-dir) to use "
                           "Debian's package or a download into the Keras cache")
    elif folder == os.environ.get("KERAS_VIT_FASHION_MNIST"):
        origin, fix = " (from $KERAS_VIT_FASHION_MNIST)", f"{again}, or unset it"
    elif folder == _cache_folder():
        origin, fix = " in the Keras cache", "delete it, and the next run downloads it again"
    else:
        origin, fix = (" of Debian's dataset-fashion-mnist",
                       "reinstall the package (`apt-get install --reinstall "
                       "dataset-fashion-mnist`), or set KERAS_VIT_SYSTEM_DATASETS= to skip it")
    return UnreadableFile(file, f"{problem}; {fix}", origin=origin)


def load_digits(*, test_fraction=0.5, seed=0):
    """scikit-learn's 8x8 handwritten digits as uint8 arrays with a fixed stratified split.

    The 0..16 pixel values are scaled to 0..255 so that the usual ``(x - 127.5) / 127.5``
    preprocessing maps them to [-1, 1] (background -1, like Fashion-MNIST).

    Args:
        test_fraction: fraction of every class held out for testing.
        seed: seed of the split.

    Returns:
        ``(x_train, y_train), (x_test, y_test)``; images (N, 8, 8, 1) uint8, labels int64.

    Example:
    >>> (x, y), (xt, yt) = load_digits()
    >>> x.shape[1:], len(x) + len(xt), sorted(set(y.tolist())) == list(range(10))
    ((8, 8, 1), 1797, True)
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}.")
    # an optional package (the train and notebooks extras), imported only here
    bunch = _optional.need("sklearn.datasets", "The digits dataset").load_digits()
    images = np.round(bunch.images * (255.0 / 16.0)).astype(np.uint8)[..., None]
    labels = bunch.target.astype(np.int64)
    rng = np.random.default_rng(seed)
    train, test = [], []
    for label in np.unique(labels):
        index = rng.permutation(np.flatnonzero(labels == label))
        cut = int(round(len(index) * (1.0 - test_fraction)))
        train.append(index[:cut])
        test.append(index[cut:])
    train, test = np.sort(np.concatenate(train)), np.sort(np.concatenate(test))
    return (images[train], labels[train]), (images[test], labels[test])
