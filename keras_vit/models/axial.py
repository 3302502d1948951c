"""The axial-attention models of the paper's Appendix D.6 and Fig. 13: AxialResNet here, as a
backbone and a classifier, and Axial-ViT, a ViT whose encoder is axial (``ViTConfig`` with
``axial=True``, ``keras_vit.layers.axial.AxialEncoder``).

No official checkpoints of either exist (the paper published none, and neither timm nor
transformers has these models): they are trained from scratch or fine-tuned from a ``.keras``
file; asking for an official, timm or transformers file of one is an error.
"""

import keras

from keras_vit.layers.axial import AxialUnit
from keras_vit.layers.resnet import HybridStem, stage_strides
from keras_vit.models.classifier import ImageClassifier
from keras_vit.models.resnet_v2 import ResNetBackboneBase

__all__ = ["AxialResNetBackbone", "AxialResNetImageClassifier", "is_axial"]


@keras.saving.register_keras_serializable(package="keras_vit")
class AxialResNetBackbone(ResNetBackboneBase):
    """AxialResNet (paper Appendix D.6) without its head: a ResNet whose 3x3 convolutions are
    axial attention.

    Graph: images -> ``root`` (the hybrid stem's root: 7x7/2 weight-standardised conv,
    GroupNorm, ReLU, 3x3/2 max-pool) -> stages of ``AxialUnit`` named ``block{s}_unit{u}``
    (stage ``s`` of width ``64 * width_factor * 2**(s-1)``, output 4x that, stride 2 from the
    second stage on, by average pooling after the attention; ``"feature_maps"``) -> global
    average pool (``"pooled"``). ``block_units=(3, 4, 6, 3)`` is AxialResNet50, the paper's.

    Args:
        config: a ``ResNetConfig`` with its ``axial`` section (``num_heads``, 8 in scenic's
            configuration; each stage's width must divide by ``2 * num_heads``) and a fixed
            ``image_size`` (the relative embeddings are sized by it); or the settings as
            keywords (``block_units``, ``width_factor``, ``num_heads``, ``image_size``...).

    Example:
    >>> import numpy as np
    >>> backbone = AxialResNetBackbone(block_units=(1, 1), width_factor=0.5, num_heads=2,
    ...                                image_size=32)
    >>> backbone.predict(np.zeros((2, 32, 32, 3), "float32"), verbose=0)["pooled"].shape
    (2, 256)
    """

    axial = True

    @classmethod
    def describe(cls, config=None, keywords=None):
        keywords = dict(keywords or {})
        if config is None and not any(k in keywords for k in ("axial", "num_heads")):
            keywords["axial"] = {}  # the keywords of an AxialResNet: its axial section by default
        return super().describe(config, keywords)

    def __init__(self, config=None, *, name="axial_resnet_backbone", dtype=None, trainable=True,
                 **keywords):
        config = self.describe(config, keywords).backbone()
        stages = config.stages
        inputs = keras.Input((*config.image_size, config.num_channels), name="images")
        root = HybridStem(num_layers=[], width_factor=stages.width_factor, dtype=dtype,
                          name="root")
        x = root(inputs)
        strides = stage_strides(len(stages.block_units))
        for s, (count, stride) in enumerate(zip(stages.block_units, strides)):
            for u in range(count):
                x = AxialUnit(stages.width * 2**s, stride if u == 0 else 1,
                              config.axial.num_heads, dtype=dtype,
                              name=f"block{s + 1}_unit{u + 1}")(x)
        pooled = keras.layers.GlobalAveragePooling2D(dtype=dtype, name="pool")(x)
        super().__init__(inputs=inputs, outputs={"feature_maps": x, "pooled": pooled},
                         name=name, config=config, dtype=dtype, trainable=trainable)

    def enable_lora(self, rank, targets="all", alpha=None):
        """LoRA factors of ``rank`` on the axial attentions' projections: their fused query/key/
        value projection ``qkv`` (Axial-DeepLab's layout has no separate query and value, so
        ``"all"`` is the default here); every other weight of the backbone is frozen."""
        super().enable_lora(rank, targets=targets, alpha=alpha)


@keras.saving.register_keras_serializable(package="keras_vit")
class AxialResNetImageClassifier(ImageClassifier):
    """AxialResNet's classifier: a head on an ``AxialResNetBackbone``
    (``keras_vit.models.classifier.ImageClassifier`` has the arguments).

    Example:
    >>> import numpy as np
    >>> model = AxialResNetImageClassifier(block_units=(1, 1), width_factor=0.5, num_heads=2,
    ...                                    num_classes=10, image_size=32)
    >>> model.predict(np.zeros((2, 32, 32, 3), "float32"), verbose=0).shape
    (2, 10)
    """

    backbone_cls = AxialResNetBackbone
    default_name = "axial_resnet"


def is_axial(model):
    """Whether ``model`` is an axial-attention model (no official, timm or transformers form):
    an AxialResNet, or a ViT whose encoder is axial."""
    config = getattr(model, "config", None)
    return bool(config is not None and config.is_axial)
