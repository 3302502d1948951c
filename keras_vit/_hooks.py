"""What a package calls on a layer above it, while every import points down.

A model loads a preset by name (``ViTBackbone.from_preset("ViT-B/16")``) with the checkpoint
readers, a layer above the models (docs/architecture.md). The models import nothing from there:
they call a hook by its name (``get(NAMED_PRESETS)``); the module above that serves it fills it
when it is imported (``fill``); and the package root, which stands above every layer and runs
before any of its modules, names that module (``provided_by``), which the first call imports. The
wiring is written once, at the top, and ``tests/test_layering.py`` reads every import as one
that points down. Nothing here imports a package, or Keras.
"""

import importlib

# ``load(preset, cls, **kwargs)``: the model of class ``cls`` a preset name, checkpoint file or
# foreign folder holds; ``presets_for(cls)``: ``{name: preset}`` of the named presets ``cls``
# builds. Filled by ``keras_vit.pretrained``.
NAMED_PRESETS = "named presets"
# ``{name: Family}`` of every family's record (``keras_vit.models.family.Family``), which a
# description's ``family`` reads. Filled by ``keras_vit.models.registry``.
FAMILIES = "families"

_PROVIDERS = {}  # hook -> the module that fills it, as the package root names it
_FILLED = {}  # hook -> what serves it


def provided_by(hook, module):
    """Name the module that fills ``hook`` (the package root's call)."""
    _PROVIDERS[hook] = module


def fill(hook, value):
    """Serve ``hook`` with ``value`` (the call of the module that provides it)."""
    _FILLED[hook] = value


def get(hook):
    """What serves ``hook``; its module is imported on the first call."""
    if hook not in _FILLED:
        if hook not in _PROVIDERS:
            raise LookupError(f"No module provides the hook {hook!r}: name one in keras_vit's "
                              "package root (keras_vit._hooks.provided_by).")
        importlib.import_module(_PROVIDERS[hook])
        if hook not in _FILLED:
            raise LookupError(f"{_PROVIDERS[hook]} is named for the hook {hook!r} but does not "
                              "fill it (keras_vit._hooks.fill).")
    return _FILLED[hook]
