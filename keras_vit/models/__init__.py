"""The models (ViT, hybrid, BiT ResNetV2, axial), their registry and resizing (what they cost:
``keras_vit.costs``)."""

from keras_vit import _submodules

# Each module is imported when it is first reached as keras_vit.models.<module>.
__getattr__, __dir__ = _submodules.attribute_hook(__name__)
