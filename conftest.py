# Runs first, for doctests and tests alike, with the repository as working folder. The suite is
# an application of the library: where the user chose no backend (no KERAS_BACKEND, no
# keras.json of their own) it takes the one `keras-vit` would, so that `python -m pytest` after
# the README's install runs on an installed backend instead of failing in `import keras`.
import importlib.util
import os

import pytest

from keras_vit.app.backend_choice import choose_backend, passive_threads

choose_backend()
passive_threads()  # as the command: torch's waiting threads must not spin on shared cores


# The fixtures below serve doctests and tests alike (a doctest must not depend on a test having
# run before it).
@pytest.fixture(scope="session", autouse=True)
def download_mirror(tmp_path_factory):
    """Every test and doctest downloads Fashion-MNIST, as a user without the data does: from a
    mirror on 127.0.0.1 (``tests/mirror.py``) into a fresh Keras cache, no system folder searched.

    The mirror serves the real files, found where ``keras_vit`` would look for them now, and
    they are downloaded once before the first test (the download's progress bar would otherwise
    be part of whichever test ran first); where there are none, the tests marked
    ``fashion_mnist`` skip (``pytest_collection_modifyitems``) and any other that reads the data
    meets the loaders' one error that says how to get it.
    Yields the mirror folder (tests may add files to it) and its URL.
    """
    from keras_vit.data import offline
    from tests import mirror

    source = fashion_mnist_source()
    root = tmp_path_factory.mktemp("mirror")
    mirror.build(root, fashion_mnist=source)
    url, server = mirror.serve(root)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KERAS_VIT_MIRROR", url)
        patch.setenv("KERAS_HOME", str(tmp_path_factory.mktemp("keras_home")))
        patch.setenv("KERAS_VIT_SYSTEM_DATASETS", "")
        patch.delenv("KERAS_VIT_FASHION_MNIST", raising=False)
        if source is not None:  # downloaded now: no test's output depends on its coming first
            offline.fashion_mnist_dir(download=True)
        yield root, url
    server.shutdown()


def pytest_configure(config):
    # pytest-randomly (the dev extra) shuffles the order and would also reseed Python and NumPy
    # from its own seed as each test starts, after _seed: Keras' global generator would then
    # draw its seed from it, and a test's numbers would change with --randomly-seed. The order
    # is what it is for; the seed stays the suite's own.
    if config.pluginmanager.hasplugin("randomly"):
        config.option.randomly_reset_seed = False


@pytest.fixture(autouse=True)
def _seed():
    """Every test and doctest starts from seed 0, whatever ran before it (tests run in random
    order where pytest-randomly is installed)."""
    import keras

    keras.utils.set_random_seed(0)
    yield


# Doctests that use an optional package: skipped, saying which, where it is not installed (the
# tests of their functions skip the same way, with pytest.importorskip).
DOCTEST_NEEDS = {
    "keras_vit.checkpoints.export.export_model": ("onnx",),
    "keras_vit.checkpoints.formats.save_checkpoint": ("safetensors",),  # a timm .safetensors
    "keras_vit.checkpoints.keras_hub.from_keras_hub": ("keras_hub",),
    "keras_vit.checkpoints.keras_hub.to_keras_hub": ("keras_hub",),
}
# Modules that import an optional package as they load: their doctests cannot be collected.
MODULE_NEEDS = {"keras_vit/data/tfdata.py": ("tensorflow",),
                "tests/fixtures/randaugment/make_fixture.py": ("tensorflow",)}


def _missing(modules):
    return [name for name in modules if importlib.util.find_spec(name) is None]


class _NeedsPackages(pytest.File):
    def collect(self):
        pytest.skip(f"needs {', '.join(self.missing)}, which is not installed")


@pytest.hookimpl(wrapper=True)
def pytest_collect_file(file_path, parent):
    collectors = yield
    root = parent.config.rootpath
    relative = file_path.relative_to(root).as_posix() if file_path.is_relative_to(root) else ""
    missing = _missing(MODULE_NEEDS.get(relative, ()))
    if missing and collectors:
        skipped = _NeedsPackages.from_parent(parent, path=file_path)
        skipped.missing = missing
        return [skipped]
    return collectors


@pytest.fixture(autouse=True)
def _doctest_leaves_the_environment(request):
    """A doctest that shows a variable (downloads.py sets and deletes KERAS_VIT_MIRROR) leaves
    os.environ as it found it: in random order, the tests after it keep the session's mirror."""
    if not isinstance(request.node, pytest.DoctestItem):
        yield
        return
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


# Doctests that read the real Fashion-MNIST files (as the tests marked `fashion_mnist` do).
DOCTEST_DATA = {"keras_vit.app.shipped.train_fashion_mnist_vit",
                "keras_vit.data.offline.load_fashion_mnist"}


def fashion_mnist_source():
    """The folder this machine holds Fashion-MNIST in (``$KERAS_VIT_FASHION_MNIST``, Debian's
    package, the Keras cache that ``keras-vit train`` downloads it into), else None. Read before
    the session's mirror replaces the Keras cache with an empty one."""
    from keras_vit.data import offline

    try:
        return offline.fashion_mnist_dir(download=False)
    except FileNotFoundError:
        return None


# The suite downloads nothing from the internet: where the machine has no copy of the data, the
# tests that need the real images skip and say how to get them (the others still run).
NO_FASHION_MNIST = (
    "needs the Fashion-MNIST files, which this machine does not have: `keras-vit train` downloads "
    "them once into ~/.keras/datasets/fashion-mnist, or `apt-get install dataset-fashion-mnist`, "
    "or set KERAS_VIT_FASHION_MNIST to a folder holding the four .gz files")


def pytest_collection_modifyitems(items):
    data_missing = fashion_mnist_source() is None
    for item in items:
        doctest = isinstance(item, pytest.DoctestItem)
        missing = _missing(DOCTEST_NEEDS.get(item.name, ())) if doctest else []
        if missing:
            item.add_marker(pytest.mark.skip(reason=f"needs {', '.join(missing)}, which is not "
                                             "installed"))
        needs_data = item.name in DOCTEST_DATA if doctest else item.get_closest_marker(
            "fashion_mnist") is not None
        if needs_data and data_missing:
            item.add_marker(pytest.mark.skip(reason=NO_FASHION_MNIST))
