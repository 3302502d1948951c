"""Change a trained model's resolution or head, carrying its weights over (paper Sec. 3.2).

Fine-tuning at a higher resolution keeps the patch size, so the token grid grows; the learned
position embeddings are then resized with the official 2-D interpolation
(``keras_vit.resize_position_embedding``). Every other weight is independent of the resolution
and is copied as it is. The model is rebuilt from its ``get_config`` and weights are copied layer
by layer (by name), so this works for any model built from a config, plain ViT or hybrid.
"""

from keras_vit.layers.position import AddPositionEmbedding, resize_position_embedding


def _square_size(image_size):
    if isinstance(image_size, (tuple, list)):
        if len(image_size) != 2:
            raise ValueError(
                f"image_size must be an int or a (height, width) pair, got {image_size!r}.")
        height, width = (int(v) for v in image_size)
    else:
        height = width = int(image_size)
    if height < 1 or width < 1:
        raise ValueError(f"image_size must be positive, got {image_size!r}.")
    return height, width


def rebuild(model, skip=(), **config_changes):
    """A new model from ``model``'s config with ``config_changes``, weights copied over.

    Layers are matched by name. Position embeddings whose token count changed are resized with
    ``resize_position_embedding``; layers named in ``skip`` (e.g. a replaced head) keep their fresh
    initialisation; any other layer whose weight shapes changed is an error.
    """
    config = model.get_config()
    unknown = sorted(set(config_changes) - set(config))
    if unknown:
        raise ValueError(f"{type(model).__name__} has no config entries {unknown}.")
    config.update(config_changes)
    new = type(model).from_config(config)
    for layer in new.layers:
        if layer.name in skip or not layer.weights:
            continue
        try:
            old = model.get_layer(layer.name)
        except ValueError:
            continue
        weights = old.get_weights()
        if isinstance(layer, AddPositionEmbedding):
            weights = [_resized_posemb(model, new, weights[0])]
        shapes = [tuple(w.shape) for w in layer.weights]
        if shapes != [tuple(w.shape) for w in weights]:
            raise ValueError(
                f"Layer {layer.name!r} has weight shapes {shapes} after the change but "
                f"{[tuple(w.shape) for w in weights]} before; it cannot be carried over."
            )
        layer.set_weights(weights)
    return new


def _resized_posemb(old_model, new_model, posemb):
    old_rows, old_cols = old_model.grid_size
    has_class_token = posemb.shape[1] - old_rows * old_cols == 1
    return resize_position_embedding(posemb, new_model.grid_size, has_class_token)


def resize_model(model, image_size):
    """The same model at another (square) resolution, all weights carried over.

    The position embeddings are interpolated as the official fine-tuning code does (bilinear,
    aligned corners, class-token row kept); works for plain and hybrid ViTs. Fine-tuning after
    the resize is what the paper does (Sec. 3.2).

    Args:
        model: a keras_vit model (``VisionTransformer``, plain or hybrid).
        image_size: the new side (int) or a square (height, width) pair; a multiple of
            ``model.stride`` (the patch size, times the ResNet stride for a hybrid).

    Example:
    >>> import keras_vit
    >>> model = keras_vit.VisionTransformer(image_size=28, patch_size=7, hidden_size=16,
    ...     num_layers=1, num_heads=2, mlp_dim=32, num_classes=10, num_channels=1)
    >>> bigger = resize_model(model, 56)
    >>> bigger.image_size, bigger.grid_size
    ((56, 56), (8, 8))
    """
    height, width = _square_size(image_size)
    stride = int(getattr(model, "stride", 1))
    if height != width:
        raise ValueError(
            f"Cannot resize to {height}x{width}: the official position-embedding resize only "
            f"handles square grids. Use a square image size, e.g. {max(height, width)}."
        )
    old = tuple(getattr(model, "image_size", (height, width)))
    if old[0] != old[1]:
        raise ValueError(
            f"The model's resolution {old[0]}x{old[1]} is not square; the official "
            "position-embedding resize only handles square grids."
        )
    if height % stride:
        lower = max(stride, height // stride * stride)
        raise ValueError(
            f"The resolution {height} is not a multiple of the model's stride {stride} (its patch "
            f"size{' times the ResNet stride' if getattr(model, 'resnet', None) else ''}). "
            f"Use a multiple of {stride}, e.g. {lower} or {lower + stride}."
        )
    return rebuild(model, image_size=[height, width])
