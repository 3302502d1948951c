"""Keras finds keras_vit's classes in a saved file whatever keras_vit has imported so far.

A ``.keras`` file names each class by its registered name (``"keras_vit>ViTImageClassifier"``),
which the class's module enters in Keras' registry when it is imported. keras_vit imports its
modules on first use (``import keras_vit`` imports neither them nor Keras), and Keras imports a
module by the file's ``module`` entry only for its own packages (keras, keras_hub, keras_cv,
keras_nlp), so after a plain ``import keras_vit`` a fresh process could not load a keras_vit
file. Here every registered name (read from the ``register_keras_serializable`` decorators in
the source, so that no list is kept beside them) gets a stand-in whose ``from_config`` imports
the class's module (which registers the class itself, replacing the stand-in) and builds the
object with it. The stand-ins enter Keras' registry as soon as Keras is imported: at once when
it already is, else when Python finishes importing it (a finder on ``sys.meta_path`` that sees
the ``keras`` import only, then leaves). Neither imports Keras.
"""

import importlib
import importlib.util
import pathlib
import re
import sys

PACKAGE = "keras_vit"
# The decorator each registered class carries; the classes are read from it, never listed.
_REGISTERED = re.compile(
    r'^@keras\.saving\.register_keras_serializable\(package="keras_vit"\)\s*\nclass (\w+)',
    re.MULTILINE)


def classes():
    """``{module: class names}`` of every class a keras_vit module registers under
    ``keras_vit>``, read from the decorators in the source files (nothing is imported)."""
    root = pathlib.Path(__file__).parent
    found = {}
    for path in sorted(root.rglob("*.py")):
        names = _REGISTERED.findall(path.read_text(encoding="utf-8"))
        if names:
            module = ".".join((PACKAGE, *path.relative_to(root).with_suffix("").parts))
            found[module] = tuple(sorted(names))
    return found


class _StandIn:
    """Stands for a keras_vit class in Keras' registry until its module is imported."""

    registered_name = module = None

    @classmethod
    def from_config(cls, config):
        importlib.import_module(cls.module)
        import keras

        # Keras' registry itself: get_registered_object would look in the scope of names that
        # Keras copied, stand-ins included, before this call.
        real = keras.saving.get_custom_objects().get(cls.registered_name)
        if real is None or issubclass(real, _StandIn):
            raise TypeError(f"{cls.module} does not register {cls.registered_name}; "
                            "its decorator is not the one keras_vit._registration reads.")
        return real.from_config(config)


def stand_ins():
    """``{registered name: stand-in class}`` of every class of ``classes()``."""
    found = {}
    for module, names in classes().items():
        for name in names:
            registered = f"{PACKAGE}>{name}"
            found[registered] = type(name, (_StandIn,), {
                "registered_name": registered, "module": module, "__module__": __name__})
    return found


def register(keras):
    """Enter the stand-ins in ``keras``' registry, beside (never over) the real classes."""
    registry = keras.saving.get_custom_objects()
    for registered, stand_in in stand_ins().items():
        registry.setdefault(registered, stand_in)


class _ThenRegister:
    """Keras' loader, which registers the stand-ins once Keras is imported."""

    def __init__(self, loader):
        self._loader = loader

    def __getattr__(self, name):
        return getattr(self._loader, name)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        try:
            self._loader.exec_module(module)
        except ImportError as error:
            _failed_keras_import()
            from keras_vit import _backends

            explained = _backends.explain(error)
            if explained is None:
                raise
            raise explained from error
        register(module)


def _failed_keras_import():
    """Forget the half-imported Keras, so that the next ``import keras`` starts afresh (with the
    backend chosen since), and keep answering for it."""
    for name in [name for name in sys.modules if name == "keras" or name.startswith("keras.")]:
        del sys.modules[name]
    watch()


class _KerasImport:
    """A ``sys.meta_path`` finder that answers for ``keras`` only, once: Keras' own spec, with
    a loader that registers the stand-ins after Keras' code has run."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "keras":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec("keras")
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenRegister(spec.loader)
        return spec


def watch():
    """Register the stand-ins now if Keras is imported, else as soon as it is."""
    keras = sys.modules.get("keras")
    if keras is not None and hasattr(keras, "saving"):
        register(keras)
    elif not any(isinstance(finder, _KerasImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _KerasImport())
