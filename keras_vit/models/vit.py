"""The Vision Transformer (paper Sec. 3.1, Eq. 1-4; Fig. 1) as a backbone and a classifier.

``ViTBackbone`` maps images to named outputs: ``"tokens"``, the encoder's output sequence z_L
(after its final LayerNorm), and ``"pooled"``, the image representation y of Eq. 4 (the class
token, or the mean of the tokens for GAP). Its graph: (ResNet stem of a hybrid) ->
``PatchEmbedding`` -> ``Encoder`` (or Axial-ViT's) -> pooling. ``backbone.intermediates()``
adds every block's output and attention probabilities.

``ViTImageClassifier`` is a head on a backbone: (``pre_logits``, the pre-training head's tanh
hidden layer) -> ``head``. A new task is the same backbone with a new zero-initialised head
(paper Sec. 3.2): ``ViTImageClassifier(backbone, num_classes=10)``.

Both are described by one ``ViTConfig`` (``keras_vit.models.description``), which is also their
``get_config``; both take it whole or as flat keyword arguments.
"""

import keras

from keras_vit.layers.axial import AxialEncoder
from keras_vit.layers.encoder import Encoder
from keras_vit.layers.patching import PatchEmbedding
from keras_vit.layers.resnet import HybridStem
from keras_vit.layers.tokens import TokenPooling
from keras_vit.models.base import DescribedModel
from keras_vit.models.classifier import ImageClassifier
from keras_vit.models.description import ViTConfig
from keras_vit.models.habits import Backbone

__all__ = ["ViTBackbone", "ViTImageClassifier", "describe"]


def describe(config=None, keywords=None):
    """The ``ViTConfig`` of a ``config`` (object or dict) and/or flat keyword arguments."""
    return ViTBackbone.describe(config, keywords)


class _Intermediates(keras.layers.Layer):
    """Runs a model's encoder on the path that records every block (``Encoder.intermediates``).

    A layer of its own because a Keras graph expects every call of one layer to return the same
    structure; the encoder's weights are shared, not copied.
    """

    def __init__(self, encoder, **kwargs):
        super().__init__(name=f"{encoder.name}_intermediates", **kwargs)
        self.encoder = encoder

    def call(self, inputs):
        return self.encoder.intermediates(inputs)


@keras.saving.register_keras_serializable(package="keras_vit")
class ViTBackbone(Backbone, DescribedModel):
    """The Vision Transformer without its head: images to named outputs.

    Input: float NHWC images in [-1, 1] of shape (batch, *image_size, num_channels).
    Outputs: ``{"tokens": (batch, N, D), "pooled": (batch, D)}``.

    Args:
        config: a ``ViTConfig`` (its head is ignored) or its ``to_dict()``; or leave it out and
            give the settings as keywords (``patch_size``, ``hidden_size``, ``num_layers``,
            ``num_heads``, ``mlp_dim``, ``image_size``... as ``ViTConfig.from_keywords``).
        **keywords: settings, on top of ``config`` when both are given.

    With ``image_size=None`` the backbone takes images of any size that the stride divides; the
    position tables, learned at ``position_embedding_grid``, are interpolated to each input's grid
    inside the call with the official math (``keras_vit.resize_model(model, None)`` gives this form
    of a trained model). Under a mixed policy (``dtype="mixed_bfloat16"``) LayerNorm statistics and
    the attention softmax are computed in float32.

    Example:
    >>> import numpy as np
    >>> backbone = ViTBackbone(image_size=28, patch_size=4, hidden_size=32, num_layers=2,
    ...                        num_heads=4, mlp_dim=64, num_channels=1)
    >>> outputs = backbone.predict(np.zeros((2, 28, 28, 1), "float32"), verbose=0)
    >>> outputs["tokens"].shape, outputs["pooled"].shape  # 7 x 7 patches and the class token
    ((2, 50, 32), (2, 32))
    """

    config_class = ViTConfig

    def __init__(self, config=None, *, name="vit_backbone", dtype=None, trainable=True,
                 **keywords):
        config = self.describe(config, keywords).backbone()
        stem = None
        if config.stem is not None:
            stem = HybridStem(**config.stem.to_dict(), dtype=dtype, name="resnet")
        sides = config.image_size or (None, None)
        inputs = keras.Input((*sides, config.patches.num_channels), name="images")
        x = inputs if stem is None else stem(inputs)
        x = PatchEmbedding(config.patches.patch_size, config.encoder.hidden_size, flatten=False,
                           dtype=dtype, name="embedding")(x)
        encoder_class = AxialEncoder if config.encoder.axial else Encoder
        tokens = encoder_class(config.encoder, config.learned_grid, dtype=dtype,
                               name="Transformer")(x)
        pooled = TokenPooling(config.encoder.classifier, dtype=dtype, name="pool")(tokens)
        super().__init__(inputs=inputs, outputs={"tokens": tokens, "pooled": pooled}, name=name,
                         config=config, dtype=dtype, trainable=trainable)
        self._intermediates = None

    @property
    def encoder(self):
        """The ``Encoder`` layer (official path ``Transformer``)."""
        return self.graph_layer("Transformer")

    def embed(self, images):
        """The patch embeddings of ``images`` (after a hybrid's ResNet stem): the encoder's
        input, for code that runs the encoder itself."""
        x = images
        if self.config.stem is not None:
            x = self.get_layer("resnet")(x, training=False)
        return self.get_layer("embedding")(x)

    def get_layer(self, name=None, index=None):
        """A layer by name, the encoder's own included (``encoderblock_3``, ``posembed_input``,
        ``cls``, ``encoder_norm``...): the official module names reach every layer."""
        if name is not None and index is None:
            inner = self.encoder.sublayer(name)
            if inner is not None:
                return inner
        return super().get_layer(name, index)

    def intermediates(self):
        """A model from images to ``{"tokens", "pooled", "blocks", "attention"}``: the outputs,
        each block's output and each attention's probabilities (a list per block; Axial-ViT
        gives a row and a column array per layer), sharing this backbone's weights."""
        if self._intermediates is None:
            seen = _Intermediates(self.encoder)(self.graph_layer("embedding").output)
            pooled = self.graph_layer("pool")(seen["tokens"])
            self._intermediates = keras.Model(self.input, {**seen, "pooled": pooled},
                                              name=f"{self.name}_intermediates")
        return self._intermediates

    def attention_model(self):
        """A model from images to the list of per-block attention probabilities, each
        (batch, heads, N, N) (float32, the explicit softmax; the fast path stays untouched)."""
        intermediates = self.intermediates()
        return keras.Model(intermediates.input, intermediates.output["attention"],
                           name=f"{self.name}_attention")

    def position_embedding_layer(self, block=0):
        """The layer adding the absolute (1-D or 2-D) position embedding seen by block ``block``:
        ``posembed_input`` for the "stem" placement, ``posembed_{block}`` for "every_layer",
        ``posembed_shared`` for "every_layer_shared". Its ``position_embeddings()`` returns the
        (1, N, D) table (class-token row first, if any)."""
        encoder = self.config.encoder
        if not encoder.position_embedding.startswith("learned"):
            raise ValueError(
                f"This model has position_embedding={encoder.position_embedding!r}, which adds "
                "no absolute position embedding to the tokens; only 'learned_1d' and "
                "'learned_2d' models have one.")
        if not 0 <= int(block) < encoder.num_layers:
            raise ValueError(f"block must be in [0, {encoder.num_layers}), got {block}.")
        return self.encoder.position_embedding_layer(block)


@keras.saving.register_keras_serializable(package="keras_vit")
class ViTImageClassifier(ImageClassifier):
    """A classification head on a ``ViTBackbone`` (paper Sec. 3.1): logits (batch, num_classes),
    float32 under a mixed policy (``keras_vit.models.classifier.ImageClassifier`` has the
    arguments: a backbone and head settings, or the whole model's ``ViTConfig``/keywords).

    The head's kernel is zeros by default, as in the official code and the paper's fine-tuning
    (Sec. 3.2); ``representation_size`` adds the pre-training head's Dense + tanh hidden layer
    ``pre_logits`` (Appendix D.3).

    Example (a model, then a new task on the same backbone):
    >>> import numpy as np
    >>> model = ViTImageClassifier(image_size=28, patch_size=4, hidden_size=32, num_layers=2,
    ...                            num_heads=4, mlp_dim=64, num_classes=10, num_channels=1)
    >>> model.predict(np.zeros((2, 28, 28, 1), "float32"), verbose=0).shape
    (2, 10)
    >>> digits = ViTImageClassifier(model.backbone, num_classes=3)
    >>> digits.predict(np.zeros((2, 28, 28, 1), "float32"), verbose=0).shape
    (2, 3)
    """

    backbone_cls = ViTBackbone
    default_name = "vit"
