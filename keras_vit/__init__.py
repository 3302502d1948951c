"""keras_vit: the Vision Transformer paper in Keras 3 (jax, tensorflow, torch).

Example:
>>> import keras_vit
>>> model = keras_vit.create_model("ViT-Ti/4", image_size=28, num_classes=10, num_channels=1)
"""

# First, before Keras is imported: the backend where the user chose none (backend_choice).
from keras_vit import backend_choice as _backend_choice  # noqa: F401, I001
from keras_vit import distribution
from keras_vit.checkpoints.export import export_model
from keras_vit.checkpoints.formats import load_checkpoint, save_checkpoint
from keras_vit.checkpoints.keras_hub import from_keras_hub, to_keras_hub
from keras_vit.layers.patching import PatchEmbedding, patchify
from keras_vit.layers.position import resize_position_embedding
from keras_vit.models.axial import AxialResNet, AxialVisionTransformer
from keras_vit.models.compute import flops
from keras_vit.models.memory import largest_batch, memory
from keras_vit.models.registry import model_names
from keras_vit.models.resize import resize_model, resize_patch_size
from keras_vit.models.resnet_v2 import ResNetV2
from keras_vit.models.vit import VisionTransformer
from keras_vit.pretrained import create_model

__version__ = "0.1.0"

__all__ = [
    "AxialResNet",
    "AxialVisionTransformer",
    "PatchEmbedding",
    "ResNetV2",
    "VisionTransformer",
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
]
