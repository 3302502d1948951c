"""Old import paths of the modules that moved, kept as deprecated aliases (issue 28: the
application moved out of the library into ``keras_vit.app``).

An alias is a module object in ``sys.modules`` under the old name, with no file of its own (so
that git follows each move as a rename). It imports nothing until a name is looked up in it; the
first lookup warns with a ``DeprecationWarning`` naming the new path, and every lookup is
answered by the new module, so ``from keras_vit.cli import main`` (an old console script) still
imports no Keras before the command has chosen its backend.
"""

import importlib
import sys
import types
import warnings


class MovedModule(types.ModuleType):
    """The alias ``name`` of the module ``new``; names not there come from the modules ``also``
    (``"package.module"``, or ``"package.module:name"`` for one name)."""

    def __init__(self, name, new, also=()):
        super().__init__(name, f"Deprecated alias of {new} (issue 28).")
        self._single = dict(reversed(target.split(":")) for target in also if ":" in target)
        self._modules = [new, *(target for target in also if ":" not in target)]
        self._warned = False

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        module = self._single.get(name)
        if module is None:
            module = next((m for m in self._modules
                           if hasattr(importlib.import_module(m), name)), None)
        if module is None:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        if not self._warned:
            self._warned = True
            warnings.warn(f"{self.__name__} is deprecated: {name} moved to {module}; import it "
                          "from there.", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(module), name)

    def __dir__(self):
        names = (n for m in self._modules for n in dir(importlib.import_module(m)))
        return sorted({*self._single, *names})


def install(package, moved):
    """Put the aliases ``moved`` (``{name: (new, also)}``) of ``package`` into ``sys.modules``."""
    for name, (new, also) in moved.items():
        sys.modules.setdefault(f"{package}.{name}", MovedModule(f"{package}.{name}", new, also))
