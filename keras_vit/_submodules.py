"""Submodules reached as attributes, imported on first use (PEP 562).

Python sets ``package.module`` only when something imports ``package.module``, so without this
``keras_vit.models.registry`` after ``import keras_vit`` would work or not depending on what else
the program had imported. Each package's ``__getattr__`` imports the submodule it is asked for;
importing the package itself still imports nothing more.
"""

import importlib
import importlib.util
import sys


def attribute_hook(package):
    """``(__getattr__, __dir__)`` for the package named ``package``."""

    def __getattr__(name):
        module = submodule(package, name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return module

    def __dir__():
        import pkgutil

        here = sys.modules[package]
        names = (info.name for info in pkgutil.iter_modules(here.__path__))
        return sorted({*vars(here), *(name for name in names if not name.startswith("__"))})

    return __getattr__, __dir__


def submodule(package, name):
    """The module ``package.name``, imported now if needed, or None when there is none."""
    if name.startswith("__"):
        return None  # dunders (__path__, __wrapped__, ...) are looked up by tools, never modules
    full = f"{package}.{name}"
    if full not in sys.modules and importlib.util.find_spec(full) is None:
        return None
    module = importlib.import_module(full)
    setattr(sys.modules[package], name, module)
    return module
