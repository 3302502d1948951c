"""Checkpoint formats: official .npz files, timm, transformers, keras-hub, AugReg, exports."""

from keras_vit import _submodules

# Each module is imported when it is first reached as keras_vit.checkpoints.<module>.
__getattr__, __dir__ = _submodules.attribute_hook(__name__)
