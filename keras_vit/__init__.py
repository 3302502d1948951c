"""keras_vit: the Vision Transformer paper in Keras 3 (jax, tensorflow, torch).

Example:
>>> import keras_vit
>>> model = keras_vit.create_model("ViT-Ti/4", image_size=28, num_classes=10, num_channels=1)

Importing the package defines names and nothing more: the public names below load their modules
(and Keras) on first use (PEP 562), as do the subpackages and modules
(``keras_vit.models.registry.model_config``), so ``import keras_vit`` is fast and has no side
effects but one: Keras is told, now or when it is imported, where keras_vit's classes live, so
that ``keras.saving.load_model`` reads a keras_vit file whatever was imported before
(``keras_vit._registration``). Every module is reached by attribute whatever was imported
before. The ``keras-vit`` command, which chooses a backend, is the application ``keras_vit.app``.
"""

from keras_vit import _hooks, _registration, _submodules
from keras_vit._version import __version__ as __version__  # the package's version

# Public name -> the module that defines it ("" for a subpackage of its own name).
_ORIGINS = {
    "AxialResNetBackbone": "keras_vit.models.axial",
    "AxialResNetImageClassifier": "keras_vit.models.axial",
    "PatchEmbedding": "keras_vit.layers.patching",
    "ResNetBackbone": "keras_vit.models.resnet_v2",
    "ResNetConfig": "keras_vit.models.description",
    "ResNetImageClassifier": "keras_vit.models.resnet_v2",
    "ViTBackbone": "keras_vit.models.vit",
    "ViTConfig": "keras_vit.models.description",
    "ViTImageClassifier": "keras_vit.models.vit",
    "create_model": "keras_vit.pretrained",
    "distribution": "",
    "export_model": "keras_vit.checkpoints.export",
    "flops": "keras_vit.costs.compute",
    "from_keras_hub": "keras_vit.checkpoints.keras_hub",
    "largest_batch": "keras_vit.costs.batches",
    "load_checkpoint": "keras_vit.checkpoints.formats",
    "memory": "keras_vit.costs.memory",
    "model_names": "keras_vit.models.registry",
    "patchify": "keras_vit.layers.patching",
    "resize_model": "keras_vit.models.resize",
    "resize_patch_size": "keras_vit.models.resize",
    "resize_position_embedding": "keras_vit.layers.position",
    "save_checkpoint": "keras_vit.checkpoints.formats",
    "to_keras_hub": "keras_vit.checkpoints.keras_hub",
}

__all__ = [
    "AxialResNetBackbone",
    "AxialResNetImageClassifier",
    "PatchEmbedding",
    "ResNetBackbone",
    "ResNetConfig",
    "ResNetImageClassifier",
    "ViTBackbone",
    "ViTConfig",
    "ViTImageClassifier",
    "create_model",
    "distribution",
    "export_model",
    "flops",
    "from_keras_hub",
    "largest_batch",
    "load_checkpoint",
    "memory",
    "model_names",
    "patchify",
    "resize_model",
    "resize_patch_size",
    "resize_position_embedding",
    "save_checkpoint",
    "to_keras_hub",
]  # the keys of _ORIGINS

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: for type checkers and IDEs
if TYPE_CHECKING:
    from keras_vit import distribution
    from keras_vit.checkpoints.export import export_model
    from keras_vit.checkpoints.formats import load_checkpoint, save_checkpoint
    from keras_vit.checkpoints.keras_hub import from_keras_hub, to_keras_hub
    from keras_vit.costs.batches import largest_batch
    from keras_vit.costs.compute import flops
    from keras_vit.costs.memory import memory
    from keras_vit.layers.patching import PatchEmbedding, patchify
    from keras_vit.layers.position import resize_position_embedding
    from keras_vit.models.axial import AxialResNetBackbone, AxialResNetImageClassifier
    from keras_vit.models.description import ResNetConfig, ViTConfig
    from keras_vit.models.registry import model_names
    from keras_vit.models.resize import resize_model, resize_patch_size
    from keras_vit.models.resnet_v2 import ResNetBackbone, ResNetImageClassifier
    from keras_vit.models.vit import ViTBackbone, ViTImageClassifier
    from keras_vit.pretrained import create_model

_submodule, _submodule_names = _submodules.attribute_hook(__name__)
_registration.watch()
# The models' from_preset reads names and foreign files with the checkpoint readers, a layer
# above them: that layer's module is named here, above every layer (keras_vit._hooks).
_hooks.provided_by(_hooks.NAMED_PRESETS, "keras_vit.pretrained")
# A description names its family's record, which names the model classes built on the
# description: the records' module is named here, so that neither imports the other.
_hooks.provided_by(_hooks.FAMILIES, "keras_vit.models.registry")


# Earlier names -> today's, for a clear error instead of a bare AttributeError.
_RENAMED = {"ResNetV2": "ResNetImageClassifier (ResNetBackbone for num_classes=None)",
            "AxialResNet": "AxialResNetImageClassifier (AxialResNetBackbone for num_classes=None)"}


def __getattr__(name):
    import importlib

    if name in _RENAMED:
        raise AttributeError(
            f"keras_vit.{name} is now keras_vit.{_RENAMED[name]}, with the same keyword "
            "arguments; a .keras file saved with the old class converts once with "
            "keras_vit.models.upgrade.upgrade_keras_file('old.keras', 'new.keras').")
    if name not in _ORIGINS:
        return _submodule(name)  # keras_vit.models, keras_vit.distribution, ... or AttributeError
    origin = _ORIGINS[name]
    value = (importlib.import_module(f"keras_vit.{name}") if not origin
             else getattr(importlib.import_module(origin), name))
    globals()[name] = value  # found directly from now on
    return value


def __dir__():
    return sorted({*_submodule_names(), *__all__})
