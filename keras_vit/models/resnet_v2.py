"""BiT ResNetV2, the paper's convolutional baseline (Sec. 4.1 "ResNet (BiT)", Tables 2, 6, 7).

A pre-activation bottleneck ResNet with GroupNorm and weight-standardised convolutions, as in Big
Transfer (Kolesnikov et al. 2020). Layers are named after the bit_jax modules (``root_block``,
``block1``..., ``unit01``..., ``norm-pre-head``), so the checkpoint table is short.
"""

import keras

from keras_vit.checks import pair, positive_int
from keras_vit.layers.resnet import (
    BiTRoot,
    ResNetStage,
    check_units,
    group_norm,
    plain_number,
    root_width,
    stage_strides,
)
from keras_vit.models import base


@keras.saving.register_keras_serializable(package="keras_vit")
class ResNetV2(base.ConfiguredModel):
    """BiT ResNetV2 classifier (a functional ``keras.Model``).

    Graph: images -> ``root_block`` -> ``block1`` ... ``blockS`` -> ``norm-pre-head`` (GroupNorm)
    -> ReLU -> global average pool (``pool``) -> ``head`` (Dense). Stage ``s`` has width
    ``64 * width_factor * 2**(s-1)``, outputs 4x that, and strides 2 from the second stage on.

    Input: float NHWC images in [-1, 1]. Output: logits (batch, num_classes); with
    ``num_classes=None`` the pooled features ``mean_hw(relu(GN(x)))``.

    Args:
        block_units: units per stage, e.g. ``(3, 4, 6, 3)`` for R50.
        width_factor: channel multiplier (the "x3" of R50x3); a multiple of 0.5 so that every
            width splits into 32 GroupNorm groups.
        num_classes: head size, or None for no head.
        image_size: int or (height, width), or None to accept any input size (the network is
            fully convolutional up to the pooling).
        num_channels: input channels.
        head_kernel_initializer: head kernel initializer; zeros as the official fine-tuning code.
        head_bias_init: constant head bias.

    Example:
    >>> import numpy as np
    >>> model = ResNetV2(block_units=(1, 1), width_factor=0.5, num_classes=10, image_size=None)
    >>> model.predict(np.zeros((2, 40, 48, 3), "float32"), verbose=0).shape
    (2, 10)
    """

    def __init__(
        self,
        block_units,
        width_factor,
        num_classes=1000,
        image_size=224,
        num_channels=3,
        head_kernel_initializer="zeros",
        head_bias_init=0.0,
        name="resnetv2",
        dtype=None,
        **kwargs,
    ):
        block_units = check_units(block_units, "block_units", allow_empty=False)
        width = root_width(width_factor)
        num_channels = positive_int("num_channels", num_channels)
        num_classes = positive_int("num_classes", num_classes, optional=True)
        sides = pair("image_size", image_size, optional=True) or (None, None)

        inputs = keras.Input((*sides, num_channels), name="images")
        x = BiTRoot(width, dtype=dtype, name="root_block")(inputs)
        for i, (units, strides) in enumerate(zip(block_units, stage_strides(len(block_units)))):
            x = ResNetStage(units, width * 2**i, strides, style="bit", dtype=dtype,
                            name=f"block{i + 1}")(x)
        x = group_norm("norm-pre-head", style="bit", dtype=dtype)(x)
        x = keras.layers.ReLU(dtype=dtype, name="relu")(x)
        x = keras.layers.GlobalAveragePooling2D(dtype=dtype, name="pool")(x)
        if num_classes is not None:
            x = base.class_layer(num_classes, head_kernel_initializer, head_bias_init, dtype)(x)
        arguments = dict(
            block_units=block_units,
            width_factor=plain_number(width_factor),
            num_classes=num_classes,
            image_size=None if image_size is None else sides,
            num_channels=num_channels,
            head_kernel_initializer=keras.initializers.serialize(
                keras.initializers.get(head_kernel_initializer)
            ),
            head_bias_init=float(head_bias_init),
        )
        super().__init__(inputs=inputs, outputs=x, name=name, arguments=arguments, dtype=dtype,
                         **kwargs)

    def feature_extractor(self):
        """A model from images to the head's input, ``mean_hw(relu(norm-pre-head(x)))``."""
        return keras.Model(self.input, self.get_layer("pool").output, name=f"{self.name}_features")
