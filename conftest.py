# Runs first, for doctests and tests alike, with the repository as working folder. The suite is
# an application of the library: where the user chose no backend (no KERAS_BACKEND, no
# keras.json of their own) it takes the one `keras-vit` would, so that `python -m pytest` after
# the README's install (no TensorFlow) runs on jax instead of failing in `import keras`.
import importlib.util

import pytest

from keras_vit.app.backend_choice import choose_backend

choose_backend()

# Doctests that use an optional package: skipped, saying which, where it is not installed (the
# tests of their functions skip the same way, with pytest.importorskip).
DOCTEST_NEEDS = {
    "keras_vit.checkpoints.export.export_model": ("onnx",),
    "keras_vit.checkpoints.formats.save_checkpoint": ("safetensors",),  # a timm .safetensors
    "keras_vit.checkpoints.keras_hub.from_keras_hub": ("keras_hub",),
    "keras_vit.checkpoints.keras_hub.to_keras_hub": ("keras_hub",),
}
# Modules that import an optional package as they load: their doctests cannot be collected.
MODULE_NEEDS = {"keras_vit/data/tfdata.py": ("tensorflow",)}


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


def pytest_collection_modifyitems(items):
    for item in items:
        missing = _missing(DOCTEST_NEEDS.get(item.name, ())) if isinstance(
            item, pytest.DoctestItem) else []
        if missing:
            item.add_marker(pytest.mark.skip(reason=f"needs {', '.join(missing)}, which is not "
                                             "installed"))
