"""Every download of keras_vit (datasets, official checkpoints) goes through ``download``.

Files land in the Keras cache (``~/.keras``, or ``$KERAS_HOME``) through
``keras.utils.get_file``, with its progress bar; a ``file://`` source (a local folder) is copied
quietly, without a message or a bar. ``KERAS_VIT_MIRROR=<base url>`` sends every
request to ``<base url>/<original host>/<original path>`` instead (a proxy, or a local copy of
the buckets: ``https://storage.googleapis.com/vit_models/x.npz`` is fetched from
``<base url>/storage.googleapis.com/vit_models/x.npz``). A download that is cut short or fails
its check is deleted, so a broken file never stays in the cache.

Example (the variable set for this block only, as a shell's ``KERAS_VIT_MIRROR=... python``):
>>> import os
>>> from unittest import mock
>>> with mock.patch.dict(os.environ, KERAS_VIT_MIRROR="http://127.0.0.1:8000/buckets/"):
...     mirrored("https://storage.googleapis.com/vit_models/imagenet21k/ViT-B_16.npz")
'http://127.0.0.1:8000/buckets/storage.googleapis.com/vit_models/imagenet21k/ViT-B_16.npz'
"""

import hashlib
import os
import urllib.parse

MIRROR = "KERAS_VIT_MIRROR"


def mirrored(url):
    """``url`` rewritten to ``$KERAS_VIT_MIRROR/<host>/<path>``, or unchanged when it is unset."""
    base = os.environ.get(MIRROR, "").strip()
    if not base:
        return url
    if not base.startswith(("http://", "https://", "file://")):
        raise ValueError(f"{MIRROR}={base!r} is not a URL; set it to a base such as "
                         "'http://127.0.0.1:8000' or 'https://mirror.example.org/buckets'.")
    parts = urllib.parse.urlsplit(url)
    return f"{base.rstrip('/')}/{parts.netloc}{parts.path}"


def mirror_path(root, url):
    """Where ``url`` lives in a mirror folder ``root``: ``<root>/<host>/<path>``, the layout that
    ``KERAS_VIT_MIRROR`` reads (``file://<root>`` serves the folder without a server).

    Example:
    >>> mirror_path("mirror", "https://storage.googleapis.com/vit_models/imagenet21k/ViT-B_32.npz")
    'mirror/storage.googleapis.com/vit_models/imagenet21k/ViT-B_32.npz'
    """
    parts = urllib.parse.urlsplit(url)
    return os.path.join(os.fspath(root), parts.netloc, *parts.path.lstrip("/").split("/"))


def sha256(path, *, decompress=False):
    """The SHA-256 of a file, or of its gzip-decompressed content."""
    import gzip

    digest = hashlib.sha256()
    with (gzip.open if decompress else open)(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_zip(path):
    """Raise ValueError unless ``path`` is a whole zip archive (an ``.npz``) with intact CRCs."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, EOFError, OSError) as error:
        raise ValueError(f"not a complete .npz (zip) archive: {error}") from error
    if bad is not None:
        raise ValueError(f"the member {bad!r} fails its CRC check")


def cache_dir():
    """The Keras cache folder: ``$KERAS_HOME`` (read now, not when keras was imported), else
    ``~/.keras``; ``/tmp/.keras`` if that is read-only, as ``keras.utils.get_file`` does."""
    home = os.path.expanduser(os.environ.get("KERAS_HOME") or os.path.join("~", ".keras"))
    try:
        os.makedirs(home, exist_ok=True)
    except OSError:
        pass
    return home if os.access(home, os.W_OK) else os.path.join("/tmp", ".keras")


def download(url, *, cache_subdir, fname=None, check=None):
    """The local path of ``url`` in the Keras cache, downloaded (through the mirror) if needed.

    Args:
        url: the original URL (the mirror is applied here).
        cache_subdir: folder under the Keras cache.
        fname: file name in that folder; default: the URL's last part.
        check: called with the path of a fresh download; raises ValueError if the file is
            bad. The file is then deleted and the error names the URL.

    Raises:
        ConnectionError: the server could not be reached or answered with an error.
        ValueError: the download failed ``check`` (truncated, corrupt, wrong hash).
    """
    import keras

    source = mirrored(url)
    fname = fname or url.rstrip("/").split("/")[-1]
    target = os.path.join(cache_dir(), cache_subdir, fname)
    fresh = not os.path.exists(target)
    via = f" (through {MIRROR}={os.environ[MIRROR]!r})" if source != url else ""
    try:
        if source.startswith("file://"):
            path = _copy_local(source, target)
        else:
            path = keras.utils.get_file(fname=fname, origin=source, cache_subdir=cache_subdir,
                                        cache_dir=cache_dir())
    except Exception as error:  # get_file wraps HTTP and URL errors in a bare Exception
        _remove(target)
        raise ConnectionError(
            f"Could not download {source}{via}: {error}. Check the network connection or "
            f"{MIRROR}, or fetch the file on another machine and pass its local path."
        ) from error
    if fresh and check is not None:
        try:
            check(path)
        except Exception as error:
            _remove(path)
            raise ValueError(
                f"The download of {source}{via} is corrupt or incomplete ({error}); it was "
                "deleted. Try again; if it persists, the server holds a bad copy.") from error
    return path


def _copy_local(source, target):
    """Copy a ``file://`` source into the cache (unless it is there): a local copy needs no
    "Downloading data from" line or progress bar, which would print the folder's path."""
    import shutil
    import urllib.parse
    import urllib.request

    if not os.path.exists(target):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        local = urllib.request.url2pathname(urllib.parse.urlsplit(source).path)
        try:  # through a temporary name, so a failed copy never looks complete
            shutil.copyfile(local, target + ".part")
            os.replace(target + ".part", target)
        finally:
            _remove(target + ".part")
    return target


def _remove(path):
    if os.path.exists(path):
        os.remove(path)
