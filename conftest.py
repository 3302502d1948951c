# Runs first, for doctests and tests alike, with the repository as working folder. The suite is
# an application of the library: where the user chose no backend (no KERAS_BACKEND, no
# keras.json of their own) it takes the one `keras-vit` would, so that `python -m pytest` after
# the README's install (no TensorFlow) runs on jax instead of failing in `import keras`.
import importlib.util
import os

import pytest

from keras_vit.app.backend_choice import choose_backend

choose_backend()

# Optional packages (the interop extra, TensorFlow) are not on every runtime: Colab's TPU runtime
# has none of them. keras_vit.data.tfdata refuses to import without TensorFlow, so its doctests
# are collected only where it is installed; the doctests below skip where a package is missing.
collect_ignore = [] if importlib.util.find_spec("tensorflow") else ["keras_vit/data/tfdata.py"]
DOCTESTS_NEED = {
    "keras_vit.checkpoints.keras_hub.from_keras_hub": ("keras_hub",),
    "keras_vit.checkpoints.keras_hub.to_keras_hub": ("keras_hub",),
    "keras_vit.checkpoints.export.export_model": ("onnx",),
    "keras_vit.checkpoints.formats.save_checkpoint": ("safetensors",),
}


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


def pytest_collection_modifyitems(items):
    for item in items:
        missing = [m for m in DOCTESTS_NEED.get(item.name, ()) if not importlib.util.find_spec(m)]
        if missing:
            item.add_marker(pytest.mark.skip(reason=f"needs {', '.join(missing)}"))
