"""Gradient-weighted relevancy of a ViT's tokens (Chefer, Gur & Wolf, "Generic
Attention-model Explainability for Interpreting Bi-Modal and Encoder-Decoder Transformers",
ICCV 2021, the rule for self-attention encoders).

Attention maps and rollout say where a model looks, whatever class it is asked about. Chefer et
al. weight every block's attention probabilities A by the gradient of the chosen class's logit
y_t, keep the positive part, average the heads and accumulate the blocks from the first:

    R = I;   for each block:   Abar = E_h[(grad_A y_t * A)^+],   R <- R + Abar R

The map is the row of R that reaches the classifier, over the patch tokens: the class token's
row for a ``"token"`` model; for a ``"gap"`` model, whose representation is the mean of all
tokens, the mean of R's rows (as ``attention_rollout`` takes it).

grad_A y_t * A is the gradient with respect to a gate G = 1 of A's full shape multiplied onto
the probabilities: d y_t(A * G) / dG = grad_A y_t * A at G = 1. The gates go through the
model's own forward (``ViTImageClassifier.record``, the function its graph is traced from), so
there is no second forward here to drift from the model's. The one gradient Keras leaves to its
backends is taken in ``gradient``.
"""

import keras
import numpy as np

from keras_vit import distribution
from keras_vit.checks import positive_int
from keras_vit.inspection.attention import _check_images, _output_row, backbone_of
from keras_vit.layers.tree import quantization_modes
from keras_vit.models.family import family_of_model


def gradient(function, arrays):
    """The gradient of the scalar ``function(tensors)`` with respect to each of ``arrays``.

    The one place that differentiates with the backend's own tool (jax.grad,
    tf.GradientTape, torch.autograd): Keras 3 has no backend-neutral gradient call.

    Returns:
        A list of float32 numpy arrays, one per array, of their shapes.

    Example:
    >>> import numpy as np
    >>> [g.tolist() for g in gradient(lambda t: keras.ops.sum(t[0] * t[0]), [np.ones(2)])]
    [[2.0, 2.0]]
    """
    backend = keras.backend.backend()
    arrays = [np.asarray(a, dtype=np.float32) for a in arrays]
    if backend == "jax":
        import jax  # the backend in use: installed

        grads = jax.grad(function)([jax.numpy.asarray(a) for a in arrays])
    elif backend == "tensorflow":
        import tensorflow as tf

        tensors = [tf.convert_to_tensor(a) for a in arrays]
        with tf.GradientTape() as tape:
            tape.watch(tensors)
            value = function(tensors)
        grads = tape.gradient(value, tensors)
    elif backend == "torch":
        import torch

        tensors = [keras.ops.convert_to_tensor(a).requires_grad_(True) for a in arrays]
        grads = torch.autograd.grad(function(tensors), tensors)
        grads = [g.detach() for g in grads]
    else:
        raise ValueError(f"Gradients need the jax, tensorflow or torch backend of Keras, not "
                         f"{backend!r}; set KERAS_BACKEND before importing keras.")
    return [np.asarray(keras.ops.convert_to_numpy(g), dtype=np.float32) for g in grads]


def _check_model(model, what="relevancy"):
    """The classifier, refused with the fix when relevancy is not defined or not exact for it."""
    _check_family(model, what)
    quantized = quantization_modes(model)
    if quantized:
        raise ValueError(
            f"The model is quantized ({', '.join(quantized)}): its quantized projections pass "
            f"straight-through gradients, not those of the function it computes, so {what} "
            "would weight the attention by the wrong gradients. Explain the float model (build "
            "or load it again, without model.quantize()).")
    return model


def _check_family(model, what):
    """Refuse a model without token-to-token attention (R <- R + Abar R follows one per block)
    or without class logits."""
    family = family_of_model(model)
    if family is None:
        raise TypeError(
            f"{what} explains a Vision Transformer through its attention; "
            f"{type(model).__name__} is not a keras_vit model. Use a ViT or a hybrid (ResNet "
            "stem and ViT) built with keras_vit.ViTImageClassifier or keras_vit.create_model.")
    family.check("token_attention", what,
                 "Read the maps it has with keras_vit.inspection.attention_weights(model, "
                 "images) (an Axial-ViT's rows and columns), or explain a ViT or a hybrid.")
    if model.config.head is None:
        raise ValueError(
            f"{what} needs class logits, and a ViTBackbone has no head. Pass the "
            "ViTImageClassifier, or put a head on the backbone and train it first: "
            "keras_vit.ViTImageClassifier(backbone, num_classes=K).")


def attention_gradients(model, images, class_index):
    """grad_A y_t * A of every block, for a batch of images and one class index per image.

    Returns:
        A list with one float32 numpy array (batch, heads, N, N) per block: the gradient of
        the sum over images of each one's logit y_t with respect to the gate on its block
        (images do not interact at inference, so image b's gradient is its own).
    """
    config = model.config
    grid = [side // config.stride for side in images.shape[1:3]]
    tokens = grid[0] * grid[1] + (config.encoder.classifier == "token")
    shape = (len(images), config.encoder.num_heads, tokens, tokens)
    chosen = keras.ops.convert_to_tensor(
        np.eye(config.head.num_classes, dtype=np.float32)[np.asarray(class_index)])
    inputs = keras.ops.convert_to_tensor(images)

    def chosen_logits(gates):
        logits = model.record(inputs, gates=gates)[0]
        return keras.ops.sum(keras.ops.cast(logits, "float32") * chosen)

    return gradient(chosen_logits, [np.ones(shape, np.float32)] * config.encoder.num_layers)


def relevancy_matrices(weighted):
    """R = I, then R <- R + E_h[(grad A * A)^+] R block by block (Chefer et al., 2021).

    Args:
        weighted: one (batch, heads, N, N) array of grad A * A per block, first block first.

    Returns:
        float64 numpy array (batch, N, N).

    Example (one block, one head: R = I + max(W, 0)):
    >>> import numpy as np
    >>> relevancy_matrices([np.array([[[[0.5, -1.0], [0.0, 2.0]]]])])[0].tolist()
    [[1.5, 0.0], [0.0, 3.0]]
    """
    tokens = weighted[0].shape[-1]
    relevance = np.broadcast_to(np.eye(tokens), (len(weighted[0]), tokens, tokens))
    for block in weighted:
        mixing = np.maximum(np.asarray(block, np.float64), 0.0).mean(axis=1)
        relevance = relevance + mixing @ relevance
    return relevance


def logits(model, images, batch_size=32):
    """The model's logits (float32 numpy) by its compiled ``predict``, the images padded to a
    multiple of the devices of a distribution (four photos on Kaggle's eight TPU cores): direct
    calls would run op by op, each deletion step of ``perturbation_curves`` anew."""
    return np.asarray(distribution.predict(model, images, batch_size=batch_size), np.float32)


def class_indices(model, images, class_index, batch_size=32):
    """One class per image: the predicted one (``class_index`` None), or ``class_index`` (an int,
    or one per image) checked against the model's classes."""
    classes = model.config.head.num_classes
    if class_index is None:
        return np.argmax(logits(model, images, int(batch_size)), axis=-1)
    chosen = np.asarray(class_index)
    if not np.issubdtype(chosen.dtype, np.integer) or chosen.ndim > 1 or (
            chosen.ndim == 1 and len(chosen) != len(images)):
        raise ValueError(
            f"class_index must be None (each image's predicted class), an int, or one int per "
            f"image ({len(images)}); got {class_index!r}.")
    if np.any(chosen < 0) or np.any(chosen >= classes):
        raise ValueError(
            f"class_index {class_index!r} is out of range for a model with {classes} classes; "
            f"pass indices in [0, {classes}), or None for each image's predicted class.")
    return np.broadcast_to(chosen, (len(images),))


def relevancy(model, images, class_index=None, batch_size=32):
    """Gradient-weighted relevancy maps over the patch grid (Chefer, Gur & Wolf, ICCV 2021).

    Every block's attention probabilities A are weighted by the gradient of the class logit
    y_t, their positive part averaged over heads, Abar = E_h[(grad_A y_t * A)^+], and
    accumulated from the first block: R = I, R <- R + Abar R. Unlike attention maps and
    rollout, the map depends on the class asked about.

    Args:
        model: a keras_vit ``ViTImageClassifier``, plain or hybrid, of any image size (not an
            Axial-ViT, not quantized).
        images: (batch, height, width, channels) array, preprocessed as for the model.
        class_index: the class t to explain: None for each image's predicted class, an int for
            all images, or one int per image.
        batch_size: images per forward and backward pass.

    Returns:
        float32 numpy array (batch, rows, cols) over the images' patch grid, not normalised:
        the class token's row of R over the patch tokens (a ``"gap"`` model: the mean of R's
        rows, the token mean being its representation). The identity's share stays on the
        class token, so a block whose gradients are all negative adds nothing.

    Example:
    >>> import numpy as np
    >>> from keras_vit import ViTImageClassifier
    >>> model = ViTImageClassifier(image_size=8, patch_size=4, hidden_size=8, num_layers=2,
    ...                            num_heads=2, mlp_dim=16, num_classes=3)
    >>> relevancy(model, np.zeros((2, 8, 8, 3), "float32"), class_index=1).shape
    (2, 2, 2)
    """
    _check_model(model)
    batch_size = positive_int("batch_size", batch_size)
    images, grid = _check_images(backbone_of(model), images)
    chosen = class_indices(model, images, class_index, batch_size)
    maps = []
    for start in range(0, len(images), int(batch_size)):
        batch = slice(start, start + int(batch_size))
        weighted = attention_gradients(model, images[batch], chosen[batch])
        maps.append(_output_row(model.config, relevancy_matrices(weighted)))
    return np.concatenate(maps).reshape(-1, *grid).astype(np.float32)
