"""Masked patch prediction, the paper's self-supervised pre-training (Sec. 4.6, Appendix B.1.2).

As in BERT's masked language modelling, 50% of the patch embeddings of every image are
corrupted; of the corrupted ones 80% are replaced by a learned ``[mask]`` embedding, 10% by the
embedding of another patch and 10% are kept. The Transformer then predicts, from each corrupted
patch's output token, a target computed from the clean image. The appendix lists three targets:

- ``"color_3bit"`` (the one the paper reports): the patch's mean colour with 3 bits per channel,
  one 512-way classification per patch for RGB (8^C classes for C channels);
- ``"color_3bit_4x4"``: the patch downsized to 4x4 (mean over P/4 x P/4 cells), each cell's 3-bit
  colour predicted in parallel: 16 classifications of 512 colours per patch, the paper's
  "16 predictions of 512 colors" (rather than 48 per-channel predictions);
- ``"l2"``: regression of the full patch (all P*P*C pixel values in [-1, 1]) with a squared error.

Quantisation: a mean value ``m`` in [-1, 1] gets level ``clip(floor((m + 1) / 2 * 8), 0, 7)`` and a
colour's class is ``r * 64 + g * 8 + b`` (first channel most significant).

Choices the paper leaves open, made here: exactly ``round(corrupt_rate * N)`` patches are
corrupted in every image (BERT draws each token independently; a fixed count keeps the loss's
normaliser constant); the replacement embedding comes from another position of the same image;
the embeddings are corrupted before the class token and position embeddings are added, so the
``[mask]`` embedding still knows its position. Corruption happens in every call (training or
not), because the task is defined on the corrupted input.
"""

import keras
from keras import ops

from keras_vit.layers.patching import patchify
from keras_vit.models.base import float32_output_dtype
from keras_vit.models.family import family_of_model

TARGETS = ("color_3bit", "color_3bit_4x4", "l2")
COLOR_BITS = 3


def quantized_colors(images, patch_size, cells=1, bits=COLOR_BITS):
    """Class index of the quantised mean colour of each patch (or of each cell of a patch).

    Args:
        images: (batch, H, W, C) values in [-1, 1].
        patch_size: side P of the patches.
        cells: split each patch into cells x cells sub-squares (P must be divisible by it).
        bits: bits per channel; the classes are 0 .. 2^(bits*C) - 1.

    Returns:
        int32 (batch, N) for ``cells=1``, else (batch, N, cells * cells), cells row-major.

    Example:
    >>> import numpy as np
    >>> image = np.full((1, 4, 4, 3), -1.0, "float32")
    >>> image[..., 0] = 1.0   # pure red: levels (7, 0, 0)
    >>> np.asarray(quantized_colors(image, 4)).tolist()
    [[448]]
    """
    images = ops.cast(ops.convert_to_tensor(images), "float32")
    _, height, width, channels = images.shape
    if patch_size % cells:
        raise ValueError(f"The patch size ({patch_size}) is not divisible by cells ({cells}).")
    rows, cols, side = height // patch_size, width // patch_size, patch_size // cells
    x = ops.reshape(images, (-1, rows, cells, side, cols, cells, side, channels))
    x = ops.mean(x, axis=(3, 6))  # (B, rows, cells, cols, cells, C)
    x = ops.transpose(x, (0, 1, 3, 2, 4, 5))
    x = ops.reshape(x, (-1, rows * cols, cells * cells, channels))
    levels = 2**bits
    level = ops.clip(ops.floor((x + 1.0) * (levels / 2.0)), 0, levels - 1)
    place = [float(levels ** (channels - 1 - c)) for c in range(channels)]
    classes = ops.cast(ops.sum(level * ops.convert_to_tensor(place), axis=-1), "int32")
    return classes[:, :, 0] if cells == 1 else classes


def _check_arguments(encoder, target, corrupt_rate, mask_fraction, random_fraction):
    """Refuses bad ``MaskedPatchPrediction`` arguments; returns (backbone, patch size, cells per
    side)."""
    backbone = getattr(encoder, "backbone", encoder)
    family = family_of_model(backbone)
    if family is None:
        raise TypeError(
            "MaskedPatchPrediction needs a keras_vit ViT (a ViTBackbone, or a "
            f"ViTImageClassifier, whose backbone it trains), got {type(encoder).__name__}."
        )
    family.check("masked_patches", "MaskedPatchPrediction",
                 "Pre-train a ViT, hybrid or Axial-ViT with it (paper Appendix B.1.2).")
    if target not in TARGETS:
        raise ValueError(f"Unknown target {target!r}; use one of {TARGETS}.")
    if not 0.0 < corrupt_rate <= 1.0:
        raise ValueError(f"corrupt_rate must be in (0, 1], got {corrupt_rate}.")
    if mask_fraction < 0 or random_fraction < 0 or mask_fraction + random_fraction > 1:
        raise ValueError(
            "mask_fraction and random_fraction must be non-negative with a sum of at most 1, "
            f"got {mask_fraction} and {random_fraction}."
        )
    patch = backbone.config.stride  # pixels per token: a hybrid's patch times its stem's stride
    cells = 4 if target == "color_3bit_4x4" else 1
    if patch % cells:
        raise ValueError(
            f"target='color_3bit_4x4' downsizes each patch to 4x4, so the patch size must be "
            f"a multiple of 4; this encoder's patches are {patch}x{patch} pixels. Use "
            "target='color_3bit' or 'l2'."
        )
    return backbone, patch, cells


@keras.saving.register_keras_serializable(package="keras_vit")
class MaskedPatchPrediction(keras.Model):
    """Masked patch prediction pre-training around a ViT (paper Sec. 4.6).

    Train with ``compile(optimizer)`` and ``fit(images)`` (no labels: the targets come from the
    images). The backbone's layers are used directly, so training updates ``encoder``, which can
    then be fine-tuned with its own head (``keras_vit.training.prepare_finetuning``). The
    pooling, and a classifier's ``pre_logits`` and head, are not used here; a separate Dense
    ``mpp_head`` makes the predictions.

    Args:
        encoder: a ``ViTBackbone`` or a ``ViTImageClassifier`` (plain or hybrid), whose
            backbone is trained.
        target: ``"color_3bit"``, ``"color_3bit_4x4"`` or ``"l2"`` (see the module docstring).
        corrupt_rate: fraction of the patches corrupted in each image.
        mask_fraction: fraction of the corrupted patches replaced by the ``[mask]`` embedding.
        random_fraction: fraction replaced by another patch's embedding (the rest is kept).
        seed: seed of the corruption's random draws.

    Calling the model returns a dict: ``predictions`` (B, N, classes), (B, N, 16, classes) or
    (B, N, P*P*C); ``targets`` (B, N), (B, N, 16) or (B, N, P*P*C); ``corrupted`` (B, N) 0/1.

    Example:
    >>> import numpy as np, keras, keras_vit
    >>> vit = keras_vit.ViTBackbone(image_size=8, patch_size=4, hidden_size=8, num_layers=1,
    ...                             num_heads=2, mlp_dim=16)
    >>> mpp = MaskedPatchPrediction(vit)
    >>> mpp.compile(keras.optimizers.Adam(1e-3))
    >>> images = np.random.default_rng(0).uniform(-1, 1, (4, 8, 8, 3)).astype("float32")
    >>> history = mpp.fit(images, batch_size=2, epochs=1, verbose=0)
    >>> mpp.encoder is vit
    True
    """

    def __init__(
        self,
        encoder,
        target="color_3bit",
        corrupt_rate=0.5,
        mask_fraction=0.8,
        random_fraction=0.1,
        seed=None,
        **kwargs,
    ):
        backbone, patch, cells = _check_arguments(
            encoder, target, corrupt_rate, mask_fraction, random_fraction
        )
        kwargs.setdefault("name", "masked_patch_prediction")
        dtype = kwargs.pop("dtype", encoder.dtype_policy)
        super().__init__(dtype=dtype, **kwargs)
        # Not tracked as a sub-model: only the layers MPP uses (below) get gradients and are
        # saved; the encoder's head, pooling and pre_logits stay out of training.
        object.__setattr__(self, "_encoder", encoder)
        self.target = target
        self.corrupt_rate = float(corrupt_rate)
        self.mask_fraction = float(mask_fraction)
        self.random_fraction = float(random_fraction)
        self.seed = seed
        self.patch_size = patch
        self.cells = cells
        self._split_encoder(backbone)
        self.seed_generator = keras.random.SeedGenerator(seed)
        self._make_objective(channels=int(encoder.input.shape[-1]))
        self.build(encoder.input.shape)

    def _split_encoder(self, backbone):
        """The backbone's patch embedding and Transformer as two models, with the token grid."""
        embedded = backbone.get_layer("embedding").output
        self.patch_embedding = keras.Model(backbone.input, embedded, name="patch_embedding")
        self.trunk = keras.Model(embedded, backbone.encoder.output, name="trunk")
        # The embedding is the (rows, cols) token grid the encoder takes; corruption is per token.
        self.grid_shape = tuple(int(v) for v in embedded.shape[1:])
        self.num_patches = self.grid_shape[0] * self.grid_shape[1]
        self.hidden_size = self.grid_shape[2]
        self.num_corrupted = max(1, round(self.corrupt_rate * self.num_patches))
        if self.random_fraction and self.num_patches < 2:
            raise ValueError("Replacing a patch by another one needs at least 2 patches.")

    def _make_objective(self, channels):
        """The prediction head, loss and accuracy of the target."""
        patch, cells = self.patch_size, self.cells
        if self.target == "l2":
            self.num_classes = None
            outputs = patch * patch * channels
        else:
            self.num_classes = 2 ** (COLOR_BITS * channels)
            outputs = cells * cells * self.num_classes
        self.mpp_head = keras.layers.Dense(
            outputs, dtype=float32_output_dtype(self.dtype_policy), name="mpp_head"
        )
        self.mpp_loss = (
            keras.losses.MeanSquaredError(reduction="mean_with_sample_weight")
            if self.target == "l2"
            else keras.losses.SparseCategoricalCrossentropy(
                from_logits=True, reduction="mean_with_sample_weight"
            )
        )
        self.accuracy = (
            None
            if self.target == "l2"
            else keras.metrics.SparseCategoricalAccuracy(name="accuracy")
        )

    @property
    def encoder(self):
        """The wrapped ViT, as given (sharing its backbone's weights with this model)."""
        return self._encoder

    def build(self, input_shape):
        self.mask_token = self.add_weight(
            name="mask_token",
            shape=(1, 1, self.hidden_size),
            initializer=keras.initializers.RandomNormal(stddev=0.02),
        )
        self.mpp_head.build((None, self.num_patches, self.hidden_size))
        self.built = True

    def compute_targets(self, images):
        """The prediction targets of clean images (see the module docstring)."""
        if self.target == "l2":
            return patchify(ops.cast(images, "float32"), self.patch_size)
        return quantized_colors(images, self.patch_size, cells=self.cells)

    def corrupt(self, tokens):
        """Corrupt patch embeddings (B, N, D); returns (tokens, corrupted 0/1 (B, N) float32)."""
        batch, count = ops.shape(tokens)[0], self.num_patches
        noise = keras.random.uniform((batch, count), seed=self.seed_generator)
        threshold = ops.top_k(noise, self.num_corrupted, sorted=True)[0][:, -1:]
        corrupted = ops.greater_equal(noise, threshold)
        choice = keras.random.uniform((batch, count), seed=self.seed_generator)
        masked = ops.logical_and(corrupted, choice < self.mask_fraction)
        replaced = ops.logical_and(
            corrupted,
            ops.logical_and(
                choice >= self.mask_fraction, choice < self.mask_fraction + self.random_fraction
            ),
        )
        # Another position of the same image: shift by 1..N-1 places, modulo N.
        offset = keras.random.randint((batch, count), 1, max(count, 2), seed=self.seed_generator)
        source = ops.mod(ops.arange(count, dtype="int32")[None, :] + offset, count)
        source = ops.broadcast_to(source[:, :, None], ops.shape(tokens))
        others = ops.take_along_axis(tokens, source, axis=1)
        mask_token = ops.cast(self.mask_token, tokens.dtype)
        tokens = ops.where(replaced[:, :, None], others, tokens)
        tokens = ops.where(masked[:, :, None], mask_token, tokens)
        return tokens, ops.cast(corrupted, "float32")

    def call(self, images, training=None):
        grid = self.patch_embedding(images, training=training)
        tokens = ops.reshape(grid, (-1, self.num_patches, self.hidden_size))
        tokens, corrupted = self.corrupt(tokens)
        encoded = self.trunk(ops.reshape(tokens, (-1, *self.grid_shape)), training=training)
        encoded = encoded[:, encoded.shape[1] - self.num_patches :]  # drop the class token
        predictions = self.mpp_head(encoded)
        if self.cells > 1:
            predictions = ops.reshape(
                predictions, (-1, self.num_patches, self.cells * self.cells, self.num_classes)
            )
        return {
            "predictions": predictions,
            "targets": self.compute_targets(images),
            "corrupted": corrupted,
        }

    def _weights(self, y_pred, sample_weight):
        weights = y_pred["corrupted"]
        if sample_weight is not None:
            weights = weights * ops.reshape(ops.cast(sample_weight, weights.dtype), (-1, 1))
        if self.cells > 1:
            weights = ops.repeat(weights[:, :, None], self.cells * self.cells, axis=-1)
        return weights

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """Loss on the corrupted patches only (plus any regularisation losses)."""
        loss = self.mpp_loss(
            y_pred["targets"],
            y_pred["predictions"],
            sample_weight=self._weights(y_pred, sample_weight),
        )
        if self.losses:  # regularisation losses, scaled as Keras does
            others = super().compute_loss(x=x, y=y, y_pred=None, training=training)
            loss = loss + ops.cast(others, loss.dtype)
        return loss

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        if self.accuracy is not None:
            self.accuracy.update_state(
                y_pred["targets"],
                y_pred["predictions"],
                sample_weight=self._weights(y_pred, sample_weight),
            )
        return super().compute_metrics(x, y, y_pred, sample_weight=sample_weight)

    def compile(self, optimizer="adam", **kwargs):
        if kwargs.get("loss") is not None or kwargs.get("metrics") is not None:
            raise ValueError(
                "MaskedPatchPrediction computes its own loss and accuracy from the images; "
                "compile it with an optimizer only, e.g. mpp.compile(keras.optimizers.Adam(2e-4))."
            )
        super().compile(optimizer=optimizer, **kwargs)

    def compile_from_config(self, config):
        # Restores the optimizer (and its state) when a saved model is loaded.
        self.compile(**keras.saving.deserialize_keras_object(config))
        self.optimizer.build(self.trainable_variables)

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "encoder": keras.saving.serialize_keras_object(self.encoder),
            "target": self.target,
            "corrupt_rate": self.corrupt_rate,
            "mask_fraction": self.mask_fraction,
            "random_fraction": self.random_fraction,
            "seed": self.seed,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        encoder = keras.saving.deserialize_keras_object(config.pop("encoder"))
        return cls(encoder, **config)
