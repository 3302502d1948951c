"""The Vision Transformer (paper Sec. 3.1, Eq. 1-4; Fig. 1) as a backbone and a classifier.

``ViTBackbone`` maps images to named outputs: ``"tokens"``, the encoder's output sequence z_L
(after its final LayerNorm), and ``"pooled"``, the image representation y of Eq. 4 (the class
token, or the mean of the tokens for GAP). Its graph: (ResNet stem of a hybrid) ->
``PatchEmbedding`` -> ``Encoder`` (or Axial-ViT's) -> pooling, traced from one forward function
that ``backbone.record(images)`` runs again to record every intermediate (each block's output
and attention probabilities among them) and that gradient relevancy runs with attention gates.

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


class _Layers:
    """The backbone's layers in the order of its forward (a plain holder: Keras neither tracks
    nor saves it, so the saved paths stay those of the graph)."""

    def __init__(self, stem, embedding, encoder, pool):
        self.stem, self.embedding, self.encoder, self.pool = stem, embedding, encoder, pool


def _forward(layers, images, training=None, gates=None, out=None):
    """The ViT's forward (paper Eq. 1-4): (hybrid stem) -> patch embedding -> encoder -> pooling.

    The backbone's graph is this function traced on its symbolic input (``out`` None: the encoder
    is one node of it); ``ViTBackbone.record`` runs it again on arrays with ``out``, a dict that
    receives every intermediate, and optional attention ``gates`` (``Encoder.encode``).
    """
    def kept(name, value):
        if out is not None:
            out[name] = value
        return value

    x = images
    if layers.stem is not None:
        x = kept("stem", layers.stem(x, training=training))
    x = kept("patches", layers.embedding(x))
    if out is None:
        tokens = layers.encoder(x, training=training)
    else:
        tokens = layers.encoder.encode(x, training, gates, out)
    return {"tokens": kept("tokens", tokens), "pooled": kept("pooled", layers.pool(tokens))}


def _recorded(layers, images, training=None, gates=None):
    """``_forward``'s dict of every intermediate (``ViTBackbone.record``)."""
    out = {}
    _forward(layers, images, training, gates, out)
    return out


class _Recorded(keras.layers.Layer):
    """``_recorded`` as one layer, for a model of the intermediates.

    A layer of its own because a Keras graph expects every call of one layer to return the same
    structure. It tracks the backbone's layers (shared, not copied), not the backbone: the
    backbone keeps the model this layer is part of, and tracking it back would make a cycle.
    """

    def __init__(self, layers, **kwargs):
        super().__init__(autocast=False, **kwargs)  # each layer inside casts as in the graph
        self._in_order = layers
        self.parts = [layer for layer in vars(layers).values() if layer is not None]

    def call(self, images, training=None):
        return _recorded(self._in_order, images, training)


@keras.saving.register_keras_serializable(package="keras_vit")
class ViTBackbone(Backbone, DescribedModel):
    """The Vision Transformer without its head: images to named outputs.

    Input: float NHWC images in [-1, 1] of shape ``(batch, *image_size, num_channels)``.
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
        encoder_class = AxialEncoder if config.encoder.axial else Encoder
        layers = _Layers(
            stem,
            PatchEmbedding(config.patches.patch_size, config.encoder.hidden_size, flatten=False,
                           dtype=dtype, name="embedding"),
            encoder_class(config.encoder, config.learned_grid, dtype=dtype, name="Transformer"),
            TokenPooling(config.encoder.classifier, dtype=dtype, name="pool"))
        sides = config.image_size or (None, None)
        inputs = keras.Input((*sides, config.patches.num_channels), name="images")
        super().__init__(inputs=inputs, outputs=_forward(layers, inputs), name=name,
                         config=config, dtype=dtype, trainable=trainable)
        self._layers_in_order = layers
        self._intermediates = None

    @property
    def encoder(self):
        """The ``Encoder`` layer (official path ``Transformer``)."""
        return self._layers_in_order.encoder

    @property
    def patch_embedding(self):
        """The ``PatchEmbedding`` layer (official path ``embedding``): its kernel holds the
        filters E (paper Eq. 1, Fig. 7 left)."""
        return self._layers_in_order.embedding

    # Not named forward: under torch a Keras layer is a torch Module, whose forward Keras calls.
    def record(self, images, gates=None, training=False):
        """The backbone's forward on ``images``, the one its graph is traced from, with what
        inspection reads recorded on the way.

        Args:
            images: (batch, height, width, channels), as for the call.
            gates: None, or one (batch, heads, N, N) array per block multiplying its attention
                probabilities (``Encoder.encode``; gradient relevancy).
            training: dropout on or off.

        Returns:
            A dict: ``"stem"`` (a hybrid's ResNet feature map), ``"patches"`` (the patch
            embeddings, a (batch, rows, cols, D) grid), ``"embedded"`` (z_0 of Eq. 1),
            ``"blocks"`` and ``"attention"`` (every block's output and attention
            probabilities; an Axial-ViT gives a row and a column array per layer), and the
            outputs ``"tokens"`` and ``"pooled"``.
        """
        return _recorded(self._layers_in_order, images, training, gates)

    def get_layer(self, name=None, index=None):
        """A layer by name, the encoder's own included (``encoderblock_3``, ``posembed_input``,
        ``cls``, ``encoder_norm``...): the official module names reach every layer."""
        if name is not None and index is None:
            inner = self.encoder.sublayer(name)
            if inner is not None:
                return inner
        return super().get_layer(name, index)

    def intermediates(self):
        """A model from images to ``record``'s dict (every block's output and attention
        probabilities among them), sharing this backbone's weights."""
        if self._intermediates is None:
            recorded = _Recorded(self._layers_in_order, name=f"{self.name}_recorded")
            self._intermediates = keras.Model(self.input, recorded(self.input),
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

    def record(self, images, gates=None, training=False):
        """The classifier's forward: the backbone's (``ViTBackbone.record``, with optional
        attention ``gates``), then the head its graph was built with.

        Returns:
            ``(logits, out)``: the head's output, and the backbone's record with
            ``"pre_logits"`` (a head with a representation layer) and ``"logits"`` added.
        """
        out = self.backbone.record(images, gates=gates, training=training)
        return self._head(out["pooled"], out), out
