"""Import timm where torchvision cannot load; shared by the interop tests and the benchmarks.

timm imports torchvision at start-up (data transforms, FrozenBatchNorm2d) although its ViT,
hybrid and BiT models never call it. The only torchvision wheels on the package index are CUDA
builds, which fail to load next to a CPU-only torch (and, installed, break transformers' imports
too), so CI installs timm with ``--no-deps`` and no torchvision. Where ``import torchvision``
fails, every ``torchvision`` module becomes a stand-in whose names are classes that raise when
they are used: timm's models run for real, anything that needs torchvision says so.
"""

import importlib.abc
import importlib.machinery
import sys
import types


def _refuse(*args, **kwargs):
    raise RuntimeError("torchvision cannot be imported here; only timm's models are usable")


class _Unusable(type):
    def __getattr__(cls, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Unusable(attr, (), {"__init__": _refuse})


class _StandIn(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "torchvision":
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = lambda attr: getattr(_Unusable("torchvision", (), {}), attr)
        return module

    def exec_module(self, module):
        pass


def import_timm():
    """timm, with a stand-in torchvision where the real one cannot be imported."""
    try:
        import torchvision  # noqa: F401
    except Exception:  # noqa: BLE001 - missing, or a C extension built for another torch
        for name in [n for n in sys.modules if n.split(".")[0] == "torchvision"]:
            del sys.modules[name]
        if not any(isinstance(finder, _StandIn) for finder in sys.meta_path):
            sys.meta_path.insert(0, _StandIn())
    try:
        import timm
    except ImportError as error:
        raise ImportError(
            f"timm is needed here ({error}); install it with `pip install --no-deps timm` "
            "(plain `pip install timm` may replace a CPU torch with a CUDA build)") from error
    return timm
