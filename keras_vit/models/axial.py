"""The axial-attention models of the paper's Appendix D.6 and Fig. 13: AxialResNet here, and
Axial-ViT, a ViT whose encoder is axial (``ViTConfig`` with ``axial=True``,
``keras_vit.layers.axial.AxialEncoder``).

No official checkpoints of either exist (the paper published none, and neither timm nor
transformers has these models): they are trained from scratch or fine-tuned from a ``.keras``
file; asking for an official, timm or transformers file of one is an error.
"""

import keras

from keras_vit.checks import pair, positive_int
from keras_vit.layers.axial import AxialUnit
from keras_vit.layers.resnet import HybridStem, check_units, plain_number, stage_strides
from keras_vit.models import base

__all__ = ["AxialResNet", "is_axial"]


def axial_resnet_arguments(block_units, width_factor, num_heads, num_classes, image_size,
                           num_channels, head_kernel_initializer, head_bias_init):
    """Check ``AxialResNet``'s arguments and return them normalised (its config)."""
    if image_size is None:
        raise ValueError(
            "AxialResNet needs a fixed image_size: its relative position embeddings are sized "
            "by the feature maps (2L - 1 offsets for a side of L)."
        )
    return dict(
        block_units=check_units(block_units, "block_units", allow_empty=False),
        width_factor=plain_number(width_factor), num_heads=positive_int("num_heads", num_heads),
        num_classes=positive_int("num_classes", num_classes, optional=True),
        image_size=pair("image_size", image_size),
        num_channels=positive_int("num_channels", num_channels),
        head_kernel_initializer=keras.initializers.serialize(
            keras.initializers.get(head_kernel_initializer)),
        head_bias_init=float(head_bias_init),
    )


@keras.saving.register_keras_serializable(package="keras_vit")
class AxialResNet(base.ConfiguredModel):
    """AxialResNet (paper Appendix D.6): a ResNet whose 3x3 convolutions are axial attention.

    Graph: images -> ``root`` (the hybrid stem's root: 7x7/2 weight-standardised conv,
    GroupNorm, ReLU, 3x3/2 max-pool) -> stages of ``AxialUnit`` named ``block{s}_unit{u}``
    (stage ``s`` of width ``64 * width_factor * 2**(s-1)``, output 4x that, stride 2 from the
    second stage on, by average pooling after the attention) -> global average pool -> ``head``.
    ``block_units=(3, 4, 6, 3)`` is AxialResNet50, the paper's model.

    Args:
        block_units: units per stage.
        width_factor: channel multiplier (a multiple of 0.5: GroupNorm's 32 groups).
        num_heads: heads of every axial attention (8 in scenic's configuration); each stage's
            width must divide by ``2 * num_heads``.
        num_classes: head size, or None for the pooled features.
        image_size: int or (height, width), fixed (the relative embeddings are sized by it).
        num_channels, head_kernel_initializer, head_bias_init: as ``ResNetV2``.

    Example:
    >>> import numpy as np
    >>> model = AxialResNet(block_units=(1, 1), width_factor=0.5, num_heads=2, num_classes=10,
    ...                     image_size=32)
    >>> model.predict(np.zeros((2, 32, 32, 3), "float32"), verbose=0).shape
    (2, 10)
    """

    def __init__(self, block_units, width_factor=1, num_heads=8, num_classes=1000,
                 image_size=224, num_channels=3, head_kernel_initializer="zeros",
                 head_bias_init=0.0, name="axial_resnet", dtype=None, **kwargs):
        args = axial_resnet_arguments(block_units, width_factor, num_heads, num_classes,
                                      image_size, num_channels, head_kernel_initializer,
                                      head_bias_init)
        inputs = keras.Input((*args["image_size"], args["num_channels"]), name="images")
        root = HybridStem(num_layers=[], width_factor=width_factor, dtype=dtype, name="root")
        x = root(inputs)
        units = zip(args["block_units"], stage_strides(len(args["block_units"])))
        for s, (count, strides) in enumerate(units):
            for u in range(count):
                x = AxialUnit(root.width * 2**s, strides if u == 0 else 1, args["num_heads"],
                              dtype=dtype, name=f"block{s + 1}_unit{u + 1}")(x)
        x = keras.layers.GlobalAveragePooling2D(dtype=dtype, name="pool")(x)
        if num_classes is not None:
            x = base.class_layer(num_classes, head_kernel_initializer, head_bias_init, dtype)(x)
        super().__init__(inputs=inputs, outputs=x, name=name, arguments=args, dtype=dtype,
                         **kwargs)

    def feature_extractor(self):
        """A model from images to the head's input (the globally pooled last feature map)."""
        return keras.Model(self.input, self.get_layer("pool").output, name=f"{self.name}_features")


def is_axial(model):
    """Whether ``model`` is an axial-attention model (no official, timm or transformers form):
    an ``AxialResNet``, or a ViT whose encoder is axial (``ViTConfig.encoder.axial``)."""
    config = getattr(model, "config", None)
    return isinstance(model, AxialResNet) or bool(
        config is not None and hasattr(config, "encoder") and config.encoder.axial)

