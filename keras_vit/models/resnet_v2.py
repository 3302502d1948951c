"""BiT ResNetV2, the paper's convolutional baseline (Sec. 4.1 "ResNet (BiT)", Tables 2, 6, 7), as
a backbone and a classifier.

A pre-activation bottleneck ResNet with GroupNorm and weight-standardised convolutions, as in Big
Transfer (Kolesnikov et al. 2020). Layers are named after the bit_jax modules (``root_block``,
``block1``..., ``unit01``..., ``norm-pre-head``), so the checkpoint table is short. Described by
a ``ResNetConfig`` (``keras_vit.models.description``), as the ViT is by its ``ViTConfig``; a new
task is the same two lines as for a ViT:

    backbone = keras_vit.create_model("BiT-R50x1", weights=..., num_classes=None)
    model = ResNetImageClassifier(backbone, num_classes=10)   # a zero-initialised head
"""

import keras

from keras_vit.layers.resnet import BiTRoot, ResNetStage, group_norm, stage_strides
from keras_vit.models.base import DescribedModel
from keras_vit.models.classifier import ImageClassifier
from keras_vit.models.description import ResNetConfig
from keras_vit.models.habits import Backbone

__all__ = ["ResNetBackbone", "ResNetImageClassifier"]


class ResNetBackboneBase(Backbone, DescribedModel):
    """What both ResNet backbones share: their ``ResNetConfig`` and their two outputs."""

    config_class = ResNetConfig
    axial = False  # whether the family's config has its axial section

    @classmethod
    def describe(cls, config=None, keywords=None):
        config = super().describe(config, keywords)
        if (config.axial is not None) != cls.axial:
            other = "AxialResNetBackbone" if config.axial is not None else "ResNetBackbone"
            raise ValueError(
                f"This ResNetConfig {'has' if config.axial is not None else 'has no'} axial "
                f"section: it describes a model of {other}, not of {cls.__name__}.")
        return config


@keras.saving.register_keras_serializable(package="keras_vit")
class ResNetBackbone(ResNetBackboneBase):
    """BiT's ResNetV2 without its head: images to named outputs.

    Graph: images -> ``root_block`` -> ``block1`` ... ``blockS`` -> ``norm-pre-head`` (GroupNorm)
    -> ReLU (``"feature_maps"``) -> global average pool ``pool`` (``"pooled"``).

    Input: float NHWC images in [-1, 1]. Outputs: ``{"feature_maps": (batch, h, w, C),
    "pooled": (batch, C)}`` with ``C = 256 * width_factor * 2**(S-1)``.

    Args:
        config: a ``ResNetConfig`` (its head is ignored) or its ``to_dict()``; or the settings
            as keywords (``block_units``, ``width_factor``, ``image_size`` (None: any size),
            ``num_channels``).

    Example:
    >>> import numpy as np
    >>> backbone = ResNetBackbone(block_units=(1, 1), width_factor=0.5, image_size=None)
    >>> outputs = backbone.predict(np.zeros((2, 40, 48, 3), "float32"), verbose=0)
    >>> outputs["feature_maps"].shape, outputs["pooled"].shape
    ((2, 5, 6, 256), (2, 256))
    """

    def __init__(self, config=None, *, name="resnet_backbone", dtype=None, trainable=True,
                 **keywords):
        config = self.describe(config, keywords).backbone()
        stages = config.stages
        inputs = keras.Input((*(config.image_size or (None, None)), config.num_channels),
                             name="images")
        x = BiTRoot(stages.width, dtype=dtype, name="root_block")(inputs)
        strides = stage_strides(len(stages.block_units))
        for i, (units, stride) in enumerate(zip(stages.block_units, strides)):
            x = ResNetStage(units, stages.width * 2**i, stride, style="bit", dtype=dtype,
                            name=f"block{i + 1}")(x)
        x = group_norm("norm-pre-head", style="bit", dtype=dtype)(x)
        maps = keras.layers.ReLU(dtype=dtype, name="relu")(x)
        pooled = keras.layers.GlobalAveragePooling2D(dtype=dtype, name="pool")(maps)
        super().__init__(inputs=inputs, outputs={"feature_maps": maps, "pooled": pooled},
                         name=name, config=config, dtype=dtype, trainable=trainable)


@keras.saving.register_keras_serializable(package="keras_vit")
class ResNetImageClassifier(ImageClassifier):
    """BiT's ResNetV2 classifier: a head (``head``, a Dense on the pooled features; BiT's 1x1
    convolution on the pooled map, the same numbers) on a ``ResNetBackbone``
    (``keras_vit.models.classifier.ImageClassifier`` has the arguments).

    Example (a model, then a new task on the same backbone):
    >>> import numpy as np
    >>> model = ResNetImageClassifier(block_units=(1, 1), width_factor=0.5, num_classes=10,
    ...                               image_size=None)
    >>> model.predict(np.zeros((2, 40, 48, 3), "float32"), verbose=0).shape
    (2, 10)
    >>> ResNetImageClassifier(model.backbone, num_classes=3).count_params() - (
    ...     model.backbone.count_params())
    771
    """

    backbone_cls = ResNetBackbone
    default_name = "resnetv2"
