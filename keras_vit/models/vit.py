"""The Vision Transformer (paper Sec. 3.1, Eq. 1-4; Fig. 1) and its hybrid form.

A hybrid (paper Sec. 3.1 "Hybrid Architecture") is the same model whose patches are taken from a
ResNet feature map instead of the raw image: pass ``resnet=dict(num_layers=..., width_factor=...)``.
"""

import keras

from keras_vit.layers.encoder import EncoderBlock, layer_norm
from keras_vit.layers.patching import PatchEmbedding
from keras_vit.layers.position import PLACEMENTS, POSITION_EMBEDDINGS, absolute_position_layer
from keras_vit.layers.tokens import CLASSIFIERS, ClassToken, TokenPooling


class _WithAttention(keras.layers.Layer):
    """Calls a shared encoder block on the explicit path that returns attention probabilities.

    A separate operation is needed because a Keras graph expects every call of one layer to
    return the same structure; the block's weights are shared, not copied. ``position`` is the
    position-embedding layer the model applies right before the block, if any (placements
    "every_layer" and "every_layer_shared"); it is called here too, so that the model's own
    layers get no extra graph nodes.
    """

    def __init__(self, block, position=None, **kwargs):
        super().__init__(name=f"{block.name}_with_attention", **kwargs)
        self.block = block
        self.position = position

    def call(self, inputs):
        if self.position is not None:
            inputs = self.position(inputs)
        return self.block(inputs, return_attention_scores=True)

    def compute_output_spec(self, inputs):
        return self.block.compute_output_spec(inputs, return_attention_scores=True)


def _image_shape(image_size):
    if isinstance(image_size, (tuple, list)):
        if len(image_size) != 2:
            raise ValueError(
                f"image_size must be an int or a (height, width) pair, got {image_size!r}."
            )
        return int(image_size[0]), int(image_size[1])
    return int(image_size), int(image_size)


def _check_position_options(kind, placement, hidden_size):
    if kind not in POSITION_EMBEDDINGS:
        raise ValueError(
            f"Unknown position_embedding {kind!r}; use one of {POSITION_EMBEDDINGS} "
            "(paper Appendix D.4)."
        )
    if placement not in PLACEMENTS:
        raise ValueError(
            f"Unknown position_embedding_placement {placement!r}; use one of {PLACEMENTS}."
        )
    if placement != "stem" and not kind.startswith("learned"):
        raise ValueError(
            f"position_embedding_placement={placement!r} places a learned absolute embedding, "
            f"but position_embedding={kind!r} has none to place. Use placement 'stem' with "
            "'relative' or 'none', or a 'learned_1d'/'learned_2d' embedding."
        )
    if kind == "learned_2d" and hidden_size % 2:
        raise ValueError(
            f"position_embedding='learned_2d' splits the width into X and Y halves, so "
            f"hidden_size must be even; got {hidden_size}."
        )


def float32_output_dtype(dtype):
    """The dtype for a model's last layer: float32 under a mixed policy, else ``dtype``.

    Under ``mixed_float16``/``mixed_bfloat16`` the logits feed the loss in float32 (the Keras
    mixed-precision guidance); the head's weights are float32 already, so this costs nothing.
    """
    policy = keras.dtype_policies.get(dtype) if dtype is not None else keras.config.dtype_policy()
    if policy.quantization_mode is None and policy.compute_dtype != policy.variable_dtype:
        return policy.variable_dtype
    return dtype


def _check_positive(**values):
    for name, value in values.items():
        if value is None or int(value) < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}.")


@keras.saving.register_keras_serializable(package="keras_vit")
class VisionTransformer(keras.Model):
    """Vision Transformer classifier (a functional ``keras.Model``).

    Input: float NHWC images in [-1, 1] of shape (batch, *image_size, num_channels).
    Output: logits (batch, num_classes); with ``num_classes=None`` the pooled features (after the
    ``pre_logits`` layer when there is one), i.e. a feature extractor.

    Args:
        image_size: int or (height, width); each side a multiple of the patch size
            (times the ResNet stem's stride for a hybrid).
        patch_size: side P of the square patches (Table 1: /16, /32, /14 ...).
        hidden_size: token width D.
        num_layers: number of encoder blocks L.
        num_heads: attention heads; must divide ``hidden_size``.
        mlp_dim: hidden width of the MLP blocks.
        num_classes: size of the head, or None for no head.
        classifier: ``"token"`` (class token, Eq. 4) or ``"gap"`` (global average pooling).
        representation_size: if set, a Dense + tanh "pre_logits" layer of this width before
            the head (used in the paper's pre-training; dropped when fine-tuning).
        dropout_rate: dropout after the position embedding, in the MLP and after attention
            (Table 3; 0.1 for ViT-L/H).
        attention_dropout_rate: dropout on the attention probabilities.
        approximate_gelu: tanh-approximated GELU (True, as the official checkpoints) or exact.
        layer_norm_epsilon: epsilon of every LayerNorm; 1e-6 as the official checkpoints
            (Hugging Face's converted ViTs use 1e-12).
        head_kernel_initializer: head kernel initializer; zeros as the official code.
        head_bias_init: constant head bias (the paper's i21k pre-training used -10).
        num_channels: input channels (3 for RGB, 1 for grayscale).
        resnet: None for a plain ViT, or ``dict(num_layers=(3, 4, 9), width_factor=1)`` for a
            hybrid whose tokens come from a ResNet stem (see ``keras_vit.layers.resnet``).
        position_embedding: the paper's Appendix D.4 / Table 8 variants:
            ``"learned_1d"`` (default; layer ``posembed_input``, the official format),
            ``"learned_2d"`` (X and Y embeddings of size D/2 concatenated per patch, plus a
            learned row for the class token; needs an even ``hidden_size``),
            ``"relative"`` (1-D relative attention: every attention layer learns one embedding
            per head and query-key offset, (2N-1, heads, head_dim), N counting the class token)
            or ``"none"``. See ``keras_vit.layers.position``.
        position_embedding_placement: where a learned 1-D/2-D embedding is added:
            ``"stem"`` (default; once, before the dropout after the stem), ``"every_layer"``
            (a separate embedding ``posembed_{i}`` before each block ``i``) or
            ``"every_layer_shared"`` (one embedding ``posembed_shared`` before each block).
            ``"relative"`` and ``"none"`` take only ``"stem"``.
        remat: rematerialise each encoder block (``keras.remat``): its activations are
            recomputed in the backward pass instead of stored, trading compute for memory in
            large models. Outputs and gradients are unchanged; needs dropout rates of 0.

    Mixed precision: pass ``dtype="mixed_bfloat16"`` (or ``"mixed_float16"``, or set the global
    policy). LayerNorm statistics and the attention softmax are computed in float32, and the
    head returns float32 logits.

    Example:
    >>> import numpy as np
    >>> model = VisionTransformer(image_size=28, patch_size=4, hidden_size=32, num_layers=2,
    ...                           num_heads=4, mlp_dim=64, num_classes=10, num_channels=1)
    >>> model.predict(np.zeros((2, 28, 28, 1), "float32"), verbose=0).shape
    (2, 10)
    """

    def __init__(
        self,
        image_size,
        patch_size,
        hidden_size,
        num_layers,
        num_heads,
        mlp_dim,
        num_classes=1000,
        classifier="token",
        representation_size=None,
        dropout_rate=0.0,
        attention_dropout_rate=0.0,
        approximate_gelu=True,
        head_kernel_initializer="zeros",
        head_bias_init=0.0,
        num_channels=3,
        resnet=None,
        position_embedding="learned_1d",
        position_embedding_placement="stem",
        remat=False,
        layer_norm_epsilon=1e-6,
        name="vit",
        **kwargs,
    ):
        height, width = _image_shape(image_size)
        _check_positive(
            patch_size=patch_size,
            hidden_size=hidden_size,
            num_layers=num_layers,
            num_heads=num_heads,
            mlp_dim=mlp_dim,
            num_channels=num_channels,
        )
        if hidden_size % num_heads:
            divisors = [h for h in range(1, min(hidden_size, 64) + 1) if hidden_size % h == 0]
            raise ValueError(
                f"hidden_size ({hidden_size}) must be divisible by num_heads ({num_heads}); "
                f"valid head counts for this width include {divisors}."
            )
        if classifier not in CLASSIFIERS:
            raise ValueError(f"Unknown classifier {classifier!r}; use one of {CLASSIFIERS}.")
        if num_classes is not None:
            _check_positive(num_classes=num_classes)
        _check_position_options(position_embedding, position_embedding_placement, hidden_size)
        if representation_size is not None:
            _check_positive(representation_size=representation_size)
        dtype = kwargs.pop("dtype", None)

        stem = None
        stride = int(patch_size)
        if resnet is not None:
            from keras_vit.layers.resnet import HybridStem

            stem = HybridStem(**resnet, dtype=dtype, name="resnet")
            stride *= stem.stride
        for side_name, side in (("height", height), ("width", width)):
            if side % stride:
                what = "patch size" if stem is None else "patch size times the ResNet stem stride"
                raise ValueError(
                    f"The image {side_name} ({side}) is not a multiple of the {what} ({stride}). "
                    f"Use an image size that divides by {stride}, e.g. "
                    f"{max(stride, round(side / stride) * stride)}."
                )

        inputs = keras.Input((height, width, int(num_channels)), name="images")
        x = inputs if stem is None else stem(inputs)
        x = PatchEmbedding(patch_size, hidden_size, dtype=dtype, name="embedding")(x)
        if classifier == "token":
            x = ClassToken(dtype=dtype, name="cls")(x)
        grid_size = (height // stride, width // stride)
        if position_embedding_placement == "stem" and position_embedding.startswith("learned"):
            x = absolute_position_layer(position_embedding, grid_size, "posembed_input", dtype)(x)
        x = keras.layers.Dropout(dropout_rate, dtype=dtype, name="dropout")(x)
        before_block = [None] * num_layers
        if position_embedding_placement == "every_layer":
            before_block = [
                absolute_position_layer(position_embedding, grid_size, f"posembed_{i}", dtype)
                for i in range(num_layers)
            ]
        elif position_embedding_placement == "every_layer_shared":
            shared = absolute_position_layer(
                position_embedding, grid_size, "posembed_shared", dtype
            )
            before_block = [shared] * num_layers
        for i in range(num_layers):
            if before_block[i] is not None:
                x = before_block[i](x)
            x = EncoderBlock(
                num_heads,
                mlp_dim,
                dropout_rate=dropout_rate,
                attention_dropout_rate=attention_dropout_rate,
                approximate_gelu=approximate_gelu,
                relative_position=position_embedding == "relative",
                remat=remat,
                layer_norm_epsilon=layer_norm_epsilon,
                dtype=dtype,
                name=f"encoderblock_{i}",
            )(x)
        x = layer_norm("encoder_norm", dtype, layer_norm_epsilon)(x)
        x = TokenPooling(classifier, dtype=dtype, name="pool")(x)
        if representation_size is not None:
            x = keras.layers.Dense(
                representation_size, activation="tanh", dtype=dtype, name="pre_logits"
            )(x)
        if num_classes is not None:
            x = keras.layers.Dense(
                num_classes,
                kernel_initializer=head_kernel_initializer,
                bias_initializer=keras.initializers.Constant(head_bias_init),
                dtype=float32_output_dtype(dtype),
                name="head",
            )(x)
        super().__init__(inputs=inputs, outputs=x, name=name, **kwargs)
        if dtype is not None:  # a functional Model ignores the dtype argument
            self.dtype_policy = dtype

        self.image_size = (height, width)
        self.patch_size = int(patch_size)
        self.hidden_size = int(hidden_size)
        self.num_layers = int(num_layers)
        self.num_heads = int(num_heads)
        self.mlp_dim = int(mlp_dim)
        self.num_classes = None if num_classes is None else int(num_classes)
        self.classifier = classifier
        self.representation_size = (
            None if representation_size is None else int(representation_size)
        )
        self.dropout_rate = float(dropout_rate)
        self.attention_dropout_rate = float(attention_dropout_rate)
        self.approximate_gelu = bool(approximate_gelu)
        self.head_kernel_initializer = keras.initializers.serialize(
            keras.initializers.get(head_kernel_initializer)
        )
        self.head_bias_init = float(head_bias_init)
        self.num_channels = int(num_channels)
        # the stem's own config holds the arguments in JSON form (lists, not tuples), so that
        # the config is the same after a trip through a .keras file
        self.resnet = None if stem is None else {k: stem.get_config()[k] for k in resnet}
        self.position_embedding = position_embedding
        self.position_embedding_placement = position_embedding_placement
        self.remat = bool(remat)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.stride = stride
        self.grid_size = grid_size
        # Names, not layers: the layers are tracked by the functional graph already.
        self._before_block = [None if layer is None else layer.name for layer in before_block]
        self._attention_model = None

    def feature_extractor(self):
        """A model from images to the head's input (the ``pre_logits`` features)."""
        name = "pre_logits" if self.representation_size is not None else "pool"
        return keras.Model(self.input, self.get_layer(name).output, name=f"{self.name}_features")

    def position_embedding_layer(self, block=0):
        """The layer adding the absolute (1-D or 2-D) position embedding seen by block ``block``.

        That is ``posembed_input`` for the "stem" placement, ``posembed_{block}`` for
        "every_layer" and ``posembed_shared`` for "every_layer_shared". Its
        ``position_embeddings()`` returns the (1, N, D) table (class-token row first, if any).
        """
        if not self.position_embedding.startswith("learned"):
            raise ValueError(
                f"This model has position_embedding={self.position_embedding!r}, which adds no "
                "absolute position embedding to the tokens; only 'learned_1d' and 'learned_2d' "
                "models have one."
            )
        if not 0 <= int(block) < self.num_layers:
            raise ValueError(f"block must be in [0, {self.num_layers}), got {block}.")
        if self.position_embedding_placement == "stem":
            return self.get_layer("posembed_input")
        return self.get_layer(self._before_block[int(block)])

    def attention_model(self):
        """A model from images to the list of per-block attention probabilities.

        Each output has shape (batch, heads, tokens, tokens). It shares this model's weights and
        uses the explicit softmax path of the attention layer, so the fast path stays untouched.
        """
        if self._attention_model is None:
            x = self.get_layer("dropout").output
            probs = []
            for i in range(self.num_layers):
                block = self.get_layer(f"encoderblock_{i}")
                name = self._before_block[i]
                position = None if name is None else self.get_layer(name)
                x, p = _WithAttention(block, position=position)(x)
                probs.append(p)
            self._attention_model = keras.Model(self.input, probs, name=f"{self.name}_attention")
        return self._attention_model

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "dtype": keras.dtype_policies.serialize(self.dtype_policy),
            "image_size": list(self.image_size),
            "patch_size": self.patch_size,
            "hidden_size": self.hidden_size,
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "mlp_dim": self.mlp_dim,
            "num_classes": self.num_classes,
            "classifier": self.classifier,
            "representation_size": self.representation_size,
            "dropout_rate": self.dropout_rate,
            "attention_dropout_rate": self.attention_dropout_rate,
            "approximate_gelu": self.approximate_gelu,
            "head_kernel_initializer": self.head_kernel_initializer,
            "head_bias_init": self.head_bias_init,
            "num_channels": self.num_channels,
            "resnet": self.resnet,
            "position_embedding": self.position_embedding,
            "position_embedding_placement": self.position_embedding_placement,
            "remat": self.remat,
            "layer_norm_epsilon": self.layer_norm_epsilon,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("dtype"), dict):
            config["dtype"] = keras.dtype_policies.deserialize(config["dtype"])
        return cls(**config)
