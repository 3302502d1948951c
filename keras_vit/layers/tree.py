"""The layers inside a layer or model, nested ones included: the one walk every part of
keras_vit that visits all layers uses (LoRA, quantization, resize, the checkpoint formats).

Keras 3 has no public recursive walk (``Model.layers`` lists a model's own graph only, and a
custom layer's sublayers are tracked privately), so this module is the single place that calls
Keras' ``_flatten_layers``; a change in Keras is met here once.

Example:
>>> import keras
>>> class Block(keras.layers.Layer):
...     def __init__(self, **kwargs):
...         super().__init__(**kwargs)
...         self.inner = keras.Sequential([keras.layers.Dense(2, name="dense")], name="mlp")
...         self.norm = keras.layers.LayerNormalization(name="norm")
>>> [layer.name for layer in sublayers(Block())]
['mlp', 'dense', 'norm']
>>> [layer.name for layer in sublayers(Block(), recursive=False)]
['mlp', 'norm']
"""


def sublayers(layer, *, include_self=False, recursive=True):
    """The layers inside ``layer`` (each once, parents before their children), ``layer`` first
    when ``include_self``; only its direct children when not ``recursive``."""
    return list(layer._flatten_layers(include_self=include_self, recursive=recursive))


def quantization_modes(layer):
    """The sorted quantization modes (``"int8"``, ...) of the layers inside ``layer``; empty for
    a float model."""
    return sorted({mode for inner in sublayers(layer, include_self=True)
                   if (mode := getattr(inner, "quantization_mode", None))})
