"""The layers of the paper's models: patching, tokens, position embeddings, encoder, ResNet."""

from keras_vit import _submodules

# Each module is imported when it is first reached as keras_vit.layers.<module>.
__getattr__, __dir__ = _submodules.attribute_hook(__name__)
