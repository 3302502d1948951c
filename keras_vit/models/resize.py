"""Change a trained model's resolution or patch size, carrying its weights over (paper Sec. 3.2).

Fine-tuning at a higher resolution keeps the patch size, so the token grid grows; the learned
position embeddings are then resized with the official 2-D interpolation
(``keras_vit.resize_position_embedding``). Every other weight is independent of the resolution
and is copied as it is. A model (of any family, backbone or classifier) is built again from
``model.config.replace(...)`` (what its description's ``resized`` says), and the weights are
copied layer by layer, by the official layer names.
"""

import numpy as np
import scipy.ndimage

from keras_vit.checks import check_multiple, pair, positive_int
from keras_vit.layers.encoder import Encoder
from keras_vit.layers.position import (
    AddPositionEmbedding,
    AddPositionEmbedding2D,
    resize_position_embedding,
)
from keras_vit.layers.tree import sublayers
from keras_vit.models.base import DescribedModel
from keras_vit.models.family import family_of_model


def _new_config(model, dtype, changes):
    """``model``'s ``get_config`` with ``changes`` (its description's ``replace`` names) and
    ``dtype``."""
    if not isinstance(model, DescribedModel):
        raise TypeError(f"keras_vit resizes its own models (a backbone or classifier of any "
                        f"family), got {type(model).__name__}.")
    config = model.get_config()
    if dtype is not None:
        config["dtype"] = dtype
    config["config"] = model.config.replace(**changes).to_dict()
    return config


def rebuild(model, skip=(), dtype=None, **changes):
    """A new model like ``model`` with ``changes``, weights copied over.

    ``changes`` are the description's ``replace`` names (``image_size``, ``patch_size``,
    ``num_classes``...); ``dtype`` sets another dtype
    policy (``"mixed_bfloat16"``). Layers are matched by name. Position embeddings whose token
    count changed are resized with ``resize_position_embedding``; layers named in ``skip`` (e.g.
    a replaced head) keep their fresh initialisation; any other layer whose weight shapes
    changed is an error.
    """
    new = type(model).from_config(_new_config(model, dtype, changes))
    for layer in weight_layers(new):
        if layer.name in skip or not layer.weights:
            continue
        try:
            old = model.get_layer(layer.name)
        except ValueError:
            continue
        layer.set_weights(_carried(model, new, old, layer))
    return new


def _carried(model, new, old, layer):
    """``old``'s weights in the shapes of ``layer``, its counterpart in ``new``."""
    weights = old.get_weights()
    if isinstance(layer, AddPositionEmbedding):
        weights = [_resized_posemb(model, new, weights[0])]
    elif isinstance(layer, AddPositionEmbedding2D):
        weights = _resized_posemb_2d(layer.grid_size, weights)
    shapes = [tuple(w.shape) for w in layer.weights]
    if shapes != [tuple(w.shape) for w in weights]:
        if "position" in type(layer).__name__.lower():
            raise ValueError(
                f"Layer {layer.name!r} ({type(layer).__name__}) depends on the number of "
                "tokens and has no resize; only learned 1-D (official) and 2-D absolute "
                "position embeddings can be carried to another resolution."
            )
        raise ValueError(
            f"Layer {layer.name!r} has weight shapes {shapes} after the change but "
            f"{[tuple(w.shape) for w in weights]} before; it cannot be carried over."
        )
    return weights


def weight_layers(model):
    """The layers holding weights, by official name: a classifier's backbone's and its own
    (``pre_logits``, ``head``), the encoder's own layers instead of the encoder."""
    backbone = getattr(model, "backbone", model)
    for layer in backbone.layers:
        if isinstance(layer, Encoder):
            yield from sublayers(layer, recursive=False)
        else:
            yield layer
    if backbone is not model:
        yield from (layer for layer in model.layers if layer is not backbone)


def position_grid(model):
    """The (rows, cols) grid a ViT's position tables are learned at."""
    return tuple(model.config.learned_grid)


def _resized_posemb(old_model, new_model, posemb):
    old_grid = position_grid(old_model)
    has_class_token = posemb.shape[1] - old_grid[0] * old_grid[1] == 1
    return resize_position_embedding(posemb, position_grid(new_model), has_class_token, old_grid)


def _resize_table(table, length):
    """Corner-aligned linear resampling of a (n, d) table to (length, d), as scipy zoom does."""
    if table.shape[0] == length:
        return table
    zoomed = scipy.ndimage.zoom(table.astype(np.float64), (length / table.shape[0], 1), order=1)
    return zoomed.astype(table.dtype)


def _resized_posemb_2d(grid_size, weights):
    """A 2-D embedding is ``concat(X[col], Y[row])``: its bilinear resize resamples each table."""
    rows, cols = grid_size
    return [_resize_table(weights[0], cols), _resize_table(weights[1], rows), *weights[2:]]


def resize_model(model, image_size):
    """The same model at another resolution, all weights carried over.

    The position embeddings are interpolated as the official fine-tuning code does (bilinear,
    aligned corners, class-token row kept), per axis, so any grid goes to any other grid, square
    or not (the model knows its grid); works for plain and hybrid ViTs, backbones and
    classifiers, and for ResNets (whose weights do not depend on the resolution). A learned 2-D
    embedding (Appendix D.4) has its X and Y tables resampled the same way, which is the same
    bilinear resize of the table they form; relative position embeddings have no resize and are
    refused. Fine-tuning after the resize is what the paper does (Sec. 3.2).

    Args:
        model: a keras_vit model, backbone or classifier, of any family.
        image_size: the new side (int) or (height, width); each a multiple of
            ``model.config.stride`` (the patch size, times the ResNet stride for a hybrid).
            ``None`` gives the model for any size at call time: the same weights, its position
            tables interpolated inside the call to each input's grid (``image_size=None`` of
            ``ViTConfig``), equal to this function's result at every size.

    Example:
    >>> import keras_vit
    >>> model = keras_vit.ViTImageClassifier(image_size=28, patch_size=7, hidden_size=16,
    ...     num_layers=1, num_heads=2, mlp_dim=32, num_classes=10, num_channels=1)
    >>> bigger = resize_model(model, 56)
    >>> bigger.config.image_size, bigger.config.grid
    ((56, 56), (8, 8))
    >>> resize_model(model.backbone, (42, 70)).config.grid
    (6, 10)
    """
    sides = None if image_size is None else pair("image_size", image_size)
    if not isinstance(model, DescribedModel):
        raise TypeError(f"resize_model takes a keras_vit model (a backbone or classifier of any "
                        f"family), got {type(model).__name__}.")
    return rebuild(model, **model.config.resized(sides))


def _bilinear_matrix(new, old):
    """(new, old) weights of a 1-D bilinear resize with half-pixel centres, antialiased when
    shrinking (the triangle kernel widened by old/new), as ``jax.image.resize`` computes it."""
    scale = new / old
    kernel_scale = min(scale, 1.0)
    centres = (np.arange(new) + 0.5) / scale - 0.5
    distance = np.abs(np.arange(old)[None, :] - centres[:, None]) * kernel_scale
    weights = np.maximum(0.0, 1.0 - distance)
    return weights / weights.sum(axis=1, keepdims=True)


def pi_resize_kernel(kernel, patch_size):
    """A patch-embedding kernel (P, P, C, D) resized to (P', P', C, D) by pseudo-inverse.

    FlexiViT (Beyer et al. 2023, Sec. 3.4): with B the bilinear resize of a P x P patch to
    P' x P', the new kernel w' = pinv(B^T) w gives <B x, w'> = <x, w> for every patch x when
    upsampling (P' >= P), and the least-squares best match when downsampling. Float64 inside.
    """
    old = kernel.shape[0]
    resize = np.kron(_bilinear_matrix(patch_size, old), _bilinear_matrix(patch_size, old))
    flat = np.asarray(kernel, np.float64).reshape(old * old, -1)
    new = np.linalg.pinv(resize.T) @ flat
    return new.reshape(patch_size, patch_size, *kernel.shape[2:]).astype(kernel.dtype)


def resize_patch_size(model, patch_size):
    """The same ViT with another patch size (FlexiViT's PI-resize), all weights carried over.

    The patch-embedding kernel is resized by ``pi_resize_kernel`` and the position embeddings
    are interpolated to the new grid as ``resize_model`` does (a model of any size keeps its
    table and interpolates it in the call). The image size stays; it must be a multiple of the
    new patch size (times the ResNet stride of a hybrid, whose feature-map patches are resized).
    Works on a ``ViTImageClassifier`` and a ``ViTBackbone``.

    Example:
    >>> import keras_vit
    >>> model = keras_vit.ViTImageClassifier(image_size=32, patch_size=8, hidden_size=16,
    ...     num_layers=1, num_heads=2, mlp_dim=32, num_classes=10)
    >>> finer = resize_patch_size(model, 4)
    >>> finer.config.patches.patch_size, finer.config.grid
    (4, (8, 8))
    """
    patch_size = positive_int("patch_size", patch_size)
    takes = "resize_patch_size takes a model with patches (a ViT, hybrid or Axial-ViT: " \
            f"backbone or classifier), got {type(model).__name__}."
    family = family_of_model(model)
    if family is None:
        raise TypeError(takes)
    family.check("patch_resizing", "resize_patch_size", takes)
    config = model.config
    if config.image_size is not None:
        stem = config.stride // config.patches.patch_size
        for side in config.image_size:
            if patch_size * stem > side:
                raise ValueError(
                    f"The patch size {patch_size} is larger than the image ({side} pixels"
                    f"{' / ' + str(stem) + ' after the ResNet stem' if stem > 1 else ''})."
                )
        unit = "new patch size" + (f" times the ResNet stem stride {stem}" if stem > 1 else "")
        check_multiple(config.image_size, patch_size * stem, unit=unit)
    new = rebuild(model, skip=("embedding",), patch_size=patch_size)
    kernel, bias = model.get_layer("embedding").get_weights()
    new.get_layer("embedding").set_weights([pi_resize_kernel(kernel, patch_size), bias])
    return new
