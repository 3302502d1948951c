"""The Vision Transformer (paper Sec. 3.1, Eq. 1-4; Fig. 1) and its hybrid form.

A hybrid (paper Sec. 3.1 "Hybrid Architecture") is the same model whose patches are taken from a
ResNet feature map instead of the raw image: pass ``resnet=dict(num_layers=..., width_factor=...)``.
The model is an assembly: (ResNet stem) -> ``PatchEmbedding`` -> ``Encoder`` -> pooling ->
(``pre_logits``) -> ``head``.
"""

import keras

from keras_vit.layers.encoder import Encoder, EncoderConfig
from keras_vit.layers.patching import PatchEmbedding
from keras_vit.layers.resnet import HybridStem
from keras_vit.layers.tokens import TokenPooling
from keras_vit.models.base import (
    ConfiguredModel,
    check_positive,
    float32_output_dtype,
    head,
    image_shape,
    optional_int,
)

__all__ = ["VisionTransformer", "float32_output_dtype"]


class _WithAttention(keras.layers.Layer):
    """Calls the model's encoder on the path that also returns the attention probabilities.

    A separate operation is needed because a Keras graph expects every call of one layer to
    return the same structure; the encoder's weights are shared, not copied.
    """

    def __init__(self, encoder, **kwargs):
        super().__init__(name=f"{encoder.name}_with_attention", **kwargs)
        self.encoder = encoder

    def call(self, inputs):
        return self.encoder(inputs, return_attention_scores=True)

    def compute_output_spec(self, inputs):
        return self.encoder.compute_output_spec(inputs, return_attention_scores=True)


def _check_divisible(what, sides, stride, hybrid):
    for side_name, side in zip(("height", "width"), sides):
        if side is not None and side % stride:
            unit = "patch size times the ResNet stem stride" if hybrid else "patch size"
            raise ValueError(
                f"The {what} {side_name} ({side}) is not a multiple of the {unit} ({stride}). "
                f"Use a size that divides by {stride}, e.g. "
                f"{max(stride, round(side / stride) * stride)}."
            )


def vit_arguments(encoder, image_size, patch_size, num_classes=1000, representation_size=None,
                  head_kernel_initializer="zeros", head_bias_init=0.0, num_channels=3, resnet=None,
                  position_embedding_grid=None):
    """The model's config: its own arguments checked and normalised, and the (already checked)
    ``EncoderConfig``'s settings, flat, as ``VisionTransformer`` takes them."""
    check_positive(patch_size=patch_size, num_channels=num_channels)
    for key, value in (("num_classes", num_classes), ("representation_size", representation_size)):
        if value is not None:
            check_positive(**{key: value})
    if image_size is None and position_embedding_grid is None and (
            encoder.position_embedding != "none"):
        raise ValueError(
            "image_size=None (any size at call time) needs position_embedding_grid=(rows, cols), "
            "the grid of patches the position embedding is learned at, e.g. (14, 14) for "
            "224-pixel images with 16-pixel patches."
        )
    return dict(
        encoder.to_dict(),
        image_size=None if image_size is None else image_shape(image_size),
        patch_size=int(patch_size), num_classes=optional_int(num_classes),
        representation_size=optional_int(representation_size),
        head_kernel_initializer=keras.initializers.serialize(
            keras.initializers.get(head_kernel_initializer)),
        head_bias_init=float(head_bias_init), num_channels=int(num_channels),
        resnet=None if resnet is None else dict(resnet),
        position_embedding_grid=(
            None if position_embedding_grid is None else image_shape(position_embedding_grid)),
    )


@keras.saving.register_keras_serializable(package="keras_vit")
class VisionTransformer(ConfiguredModel):
    """Vision Transformer classifier (a functional ``keras.Model``).

    Input: float NHWC images in [-1, 1] of shape (batch, *image_size, num_channels).
    Output: logits (batch, num_classes); with ``num_classes=None`` the pooled features (after the
    ``pre_logits`` layer when there is one), i.e. a feature extractor.

    Args:
        image_size: int or (height, width); each side a multiple of the patch size
            (times the ResNet stem's stride for a hybrid). ``None`` builds a model for any size
            at call time (see "Any image size" below).
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
        position_embedding_grid: (rows, cols) of patches the position tables are learned at;
            by default the grid of ``image_size``. Needed with ``image_size=None``.
        attention_implementation: the attention kernel, saved with the model: ``"auto"``
            (default: the fastest kernel that is exact on this backend and device, never Keras'
            TPU flash path, which would make the attention causal), ``"xla"`` (the backend's
            plain attention) or ``"flash"`` (a flash kernel, or an error naming why there is
            none). Outputs agree to float rounding; docs/runtimes.md lists each runtime's choice.

    Any image size: with ``image_size=None`` the model takes images of any height and width that
    ``stride`` divides; the position tables, learned at ``position_embedding_grid``, are
    interpolated to each input's grid inside the call with the official math, so the outputs equal
    those of ``resize_model(model, size)``. ``resize_model(model, None)`` gives this form of a
    trained model. Each new shape costs a compile under jax and TensorFlow (as any new input
    shape does); relative position embeddings are sized by the token count and need a fixed size.

    Mixed precision: pass ``dtype="mixed_bfloat16"`` (or ``"mixed_float16"``, or set the global
    policy). LayerNorm statistics and the attention softmax are computed in float32, and the
    head returns float32 logits.

    Example:
    >>> import numpy as np
    >>> model = VisionTransformer(image_size=28, patch_size=4, hidden_size=32, num_layers=2,
    ...                           num_heads=4, mlp_dim=64, num_classes=10, num_channels=1)
    >>> model.predict(np.zeros((2, 28, 28, 1), "float32"), verbose=0).shape
    (2, 10)
    >>> anysize = VisionTransformer(image_size=None, position_embedding_grid=(7, 7), patch_size=4,
    ...     hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, num_classes=10, num_channels=1)
    >>> anysize.predict(np.zeros((2, 36, 20, 1), "float32"), verbose=0).shape
    (2, 10)
    """

    encoder_class = Encoder  # the encoder layer; Axial-ViT's is AxialEncoder

    def __init__(self, image_size, patch_size, hidden_size, num_layers, num_heads, mlp_dim,
                 num_classes=1000, classifier="token", representation_size=None,
                 dropout_rate=0.0, attention_dropout_rate=0.0, approximate_gelu=True,
                 head_kernel_initializer="zeros", head_bias_init=0.0, num_channels=3,
                 resnet=None, position_embedding="learned_1d",
                 position_embedding_placement="stem", remat=False,
                 position_embedding_grid=None, layer_norm_epsilon=1e-6,
                 attention_implementation="auto", name="vit", dtype=None, **kwargs):
        encoder = EncoderConfig(
            num_layers, num_heads, mlp_dim, hidden_size=hidden_size, dropout_rate=dropout_rate,
            attention_dropout_rate=attention_dropout_rate, approximate_gelu=approximate_gelu,
            layer_norm_epsilon=layer_norm_epsilon, remat=remat, classifier=classifier,
            position_embedding=position_embedding,
            position_embedding_placement=position_embedding_placement,
            attention_implementation=attention_implementation)
        args = vit_arguments(
            encoder, image_size, patch_size, num_classes, representation_size,
            head_kernel_initializer, head_bias_init, num_channels, resnet, position_embedding_grid)
        stem = None if resnet is None else HybridStem(**resnet, dtype=dtype, name="resnet")
        if stem is not None:  # JSON form (lists, not tuples): the same config after a .keras trip
            args["resnet"] = {k: stem.get_config()[k] for k in resnet}
        stride = args["patch_size"] * (1 if stem is None else stem.stride)
        sides = args["image_size"] or (None, None)
        _check_divisible("image", sides, stride, stem is not None)
        grid = None if sides[0] is None else (sides[0] // stride, sides[1] // stride)
        if args["position_embedding_grid"] == grid:  # the default, kept out of the config
            args["position_embedding_grid"] = None

        inputs = keras.Input((*sides, args["num_channels"]), name="images")
        x = inputs if stem is None else stem(inputs)
        x = PatchEmbedding(patch_size, hidden_size, flatten=False, dtype=dtype, name="embedding")(x)
        x = type(self).encoder_class(encoder, args["position_embedding_grid"] or grid or (1, 1),
                                     dtype=dtype, name="Transformer")(x)
        x = TokenPooling(classifier, dtype=dtype, name="pool")(x)
        if representation_size is not None:
            x = keras.layers.Dense(
                representation_size, activation="tanh", dtype=dtype, name="pre_logits"
            )(x)
        if num_classes is not None:
            x = head(num_classes, head_kernel_initializer, head_bias_init,
                     float32_output_dtype(dtype))(x)
        super().__init__(inputs=inputs, outputs=x, name=name, arguments=args, dtype=dtype,
                         **kwargs)
        self.stride = stride
        self.grid_size = grid
        self._attention_model = None

    @property
    def encoder(self):
        """The ``Encoder`` layer (official path ``Transformer``)."""
        return super().get_layer("Transformer")

    def get_layer(self, name=None, index=None):
        """A layer by name, the encoder's own included (``encoderblock_3``, ``posembed_input``,
        ``cls``, ``encoder_norm``...): the official module names reach every layer."""
        if name is not None and index is None:
            inner = self.encoder.sublayer(name)
            if inner is not None:
                return inner
        return super().get_layer(name, index)

    def call(self, inputs, training=None, mask=None):
        if self.image_size is None:  # checked whenever the shape is known when traced
            _check_divisible("input", tuple(inputs.shape)[1:3], self.stride,
                             self.resnet is not None)
        return super().call(inputs, training=training, mask=mask)

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
        return self.encoder.position_embedding_layer(block)

    def attention_model(self):
        """A model from images to the list of per-block attention probabilities.

        Each output has shape (batch, heads, tokens, tokens). It shares this model's weights and
        uses the explicit softmax path of the attention layer, so the fast path stays untouched.
        """
        if self._attention_model is None:
            _, probs = _WithAttention(self.encoder)(super().get_layer("embedding").output)
            self._attention_model = keras.Model(self.input, probs, name=f"{self.name}_attention")
        return self._attention_model
