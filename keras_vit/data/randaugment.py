"""RandAugment as big_vision's ``randaug(num_layers, magnitude)`` computes it, in numpy.

AugReg (Steiner et al., "How to train your ViT?") trained with big_vision's ``randaug`` op
(``big_vision/pp/ops_image.py``), which calls ``distort_image_with_randaugment`` of
``big_vision/pp/autoaugment.py`` (forked from the TPU AutoAugment code) on the uint8 image after
``decode_jpeg_and_inception_crop|flip_lr`` and before ``value_range``. Each of ``num_layers``
layers picks one of the 16 ``OPERATIONS`` uniformly and always applies it (the op's drawn
probability goes unused there); Rotate, ShearX/Y and TranslateX/Y take a random sign.

Each operation here takes a uint8 batch (N, H, W, C) and per-image parameters and gives what
big_vision's TensorFlow op gives, to the bit (``tests/fixtures/randaugment``): truncating
casts, float32 arithmetic in TensorFlow's order, nearest-neighbour projective transforms with
TensorFlow's round-half-away-from-zero, the fill value 128 (Rotate, Shear, Translate, Cutout).
big_vision's code fails on one channel in 11 of the 16 ops (``rgb_to_grayscale`` in Color and
Contrast; three channels indexed or tiled in AutoContrast, Equalize, Sharpness, Cutout; a
three-value fill in Rotate, Shear, Translate); here a grey image (C == 1) gives what the op
gives on its RGB replica (``tf.image.grayscale_to_rgb``), whose channels stay equal: one of them.

Three quirks of the TensorFlow code are kept, since AugReg's models were trained with them:
Contrast blends towards ``H * W / 256`` (its histogram's sum over 256, not the mean pixel),
Solarize's threshold ``int(m / 10 * 256)`` wraps modulo 256 as TensorFlow converts it to uint8
(magnitudes 0, 10 and 20 invert every pixel), and Posterize's shift is clamped to 7
(magnitude 0 keeps the top bit only).

Each image's draws come from its 64-bit key (``keras_vit.data.keys.uniform``), draws
``FIRST_DRAW + DRAWS_PER_LAYER * layer + (0: op, 1: sign, 2: Cutout row, 3: Cutout column)``,
clear of the crop's and the flip's draws 0-3.
"""

import math
import numbers

import numpy as np

from keras_vit.data.keys import uniform

OPERATIONS = ("AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize", "Color",
              "Contrast", "Brightness", "Sharpness", "ShearX", "ShearY", "TranslateX",
              "TranslateY", "Cutout", "SolarizeAdd")
MAX_MAGNITUDE = 30  # the RandAugment paper's largest magnitude; AugReg used 0 to 20
FILL = 128  # big_vision's replace value for the pixels a transform or Cutout leaves empty
FIRST_DRAW, DRAWS_PER_LAYER = 16, 8
_OP, _SIGN, _ROW, _COLUMN = range(4)
_GREY_WEIGHTS = (0.2989, 0.5870, 0.1140)  # tf.image.rgb_to_grayscale's


def _per_image(values, images, dtype=np.float64):
    return np.broadcast_to(np.asarray(values, dtype), (len(images),))


def _float(images):
    return np.asarray(images).astype(np.float32)


def _to_uint8(values):
    """TensorFlow's clip to 0..255 and truncating cast."""
    return np.clip(values, np.float32(0), np.float32(255)).astype(np.uint8)


def blend(images1, images2, factors):
    """``image1 + factor * (image2 - image1)`` in float32, clipped, truncated to uint8.

    Example:
    >>> blend(np.zeros((1, 1, 1, 1), np.uint8), np.full((1, 1, 1, 1), 9, np.uint8), 0.5)[0, 0, 0]
    array([4], dtype=uint8)
    """
    factors = _per_image(factors, images1).astype(np.float32)[:, None, None, None]
    first = _float(images1)
    return _to_uint8(first + factors * (_float(images2) - first))


def _rgb(images):
    return images if images.shape[-1] == 3 else np.repeat(images, 3, axis=-1)


def grey(images):
    """``tf.image.rgb_to_grayscale`` of uint8 images (N, H, W, 3 or 1): (N, H, W, 1) uint8.

    Example:
    >>> grey(np.full((1, 1, 1, 3), 200, np.uint8))[0, 0, 0]
    array([200], dtype=uint8)
    """
    unit = _float(_rgb(images)) * np.float32(1 / 255)
    red, green, blue = (np.float32(w) for w in _GREY_WEIGHTS)
    value = unit[..., 0] * red + unit[..., 1] * green + unit[..., 2] * blue
    return (value * np.float32(255.5)).astype(np.uint8)[..., None]


def invert(images):
    """``255 - image``.

    Example:
    >>> invert(np.array([[[[0, 200]]]], np.uint8)).tolist()
    [[[[255, 55]]]]
    """
    return 255 - np.asarray(images, np.uint8)


def posterize(images, bits):
    """Keep each pixel's top ``bits`` bits; the shift ``8 - bits`` as a uint8, clamped to 7.

    Example:
    >>> posterize(np.array([[[[201]]]], np.uint8), 2).ravel().tolist(), posterize(
    ...     np.array([[[[201]]]], np.uint8), 0).ravel().tolist()
    ([192], [128])
    """
    shift = np.minimum((8 - _per_image(bits, images, np.int64)) % 256, 7).astype(np.uint8)
    shift = shift[:, None, None, None]
    return (np.asarray(images, np.uint8) >> shift) << shift


def solarize(images, thresholds):
    """Invert the pixels at or above the threshold (taken modulo 256, as TensorFlow's uint8).

    Example:
    >>> solarize(np.array([[[[10, 200]]]], np.uint8), 128).ravel().tolist()
    [10, 55]
    """
    thresholds = (_per_image(thresholds, images, np.int64) % 256)[:, None, None, None]
    return np.where(images < thresholds, images, 255 - images).astype(np.uint8)


def solarize_add(images, additions, threshold=128):
    """Add ``addition`` (clipped to 0..255) to the pixels below ``threshold``.

    Example:
    >>> solarize_add(np.array([[[[10, 200]]]], np.uint8), 100).ravel().tolist()
    [110, 200]
    """
    additions = _per_image(additions, images, np.int64)[:, None, None, None]
    added = np.clip(images.astype(np.int64) + additions, 0, 255).astype(np.uint8)
    return np.where(images < threshold, added, images)


def color(images, factors):
    """PIL's Color: blend from the image's grey version.

    Example:
    >>> color(np.array([[[[255, 0, 0]]]], np.uint8), 0.0).ravel().tolist()
    [76, 76, 76]
    """
    degenerate = grey(images)
    return blend(np.broadcast_to(degenerate, images.shape), images, factors)


def contrast(images, factors):
    """TensorFlow AutoAugment's Contrast: blend from a flat ``min(H * W // 256, 255)`` image.

    Example:
    >>> contrast(np.full((1, 32, 32, 1), 100, np.uint8), 0.5)[0, 0, 0]
    array([52], dtype=uint8)
    """
    level = min(images.shape[1] * images.shape[2] // 256, 255)
    return blend(np.full(images.shape, level, np.uint8), images, factors)


def brightness(images, factors):
    """PIL's Brightness: blend from black.

    Example:
    >>> brightness(np.full((1, 1, 1, 1), 100, np.uint8), 1.5)[0, 0, 0]
    array([150], dtype=uint8)
    """
    return blend(np.zeros_like(images), images, factors)


_SMOOTH = np.array([[1, 1, 1], [1, 5, 1], [1, 1, 1]], np.float32) / np.float32(13)  # PIL's


def _smooth(images):
    """The 3x3 SMOOTH filter over the valid interior, float32, the taps summed in row order."""
    values = _float(images)
    height, width = values.shape[1] - 2, values.shape[2] - 2
    total = np.zeros((len(values), height, width, values.shape[3]), np.float32)
    for row in range(3):
        for column in range(3):
            total += values[:, row:row + height, column:column + width] * _SMOOTH[row, column]
    return total


def sharpness(images, factors):
    """PIL's Sharpness: blend from the smoothed image (its border left as it was).

    Example:
    >>> image = np.zeros((1, 3, 3, 1), np.uint8)
    >>> image[0, 1, 1] = 130
    >>> sharpness(image, 0.0)[0, 1, 1], sharpness(image, 2.0)[0, 1, 1]
    (array([50], dtype=uint8), array([210], dtype=uint8))
    """
    images = np.asarray(images, np.uint8)
    degenerate = images.copy()
    degenerate[:, 1:-1, 1:-1] = _to_uint8(_smooth(images))
    return blend(degenerate, images, factors)


def autocontrast(images):
    """Stretch each channel of each image to 0..255 (unchanged where it is flat).

    Example:
    >>> autocontrast(np.array([[[[50], [100]]]], np.uint8)).ravel().tolist()
    [0, 255]
    """
    images = np.asarray(images, np.uint8)
    low = images.min(axis=(1, 2), keepdims=True).astype(np.float32)
    high = images.max(axis=(1, 2), keepdims=True).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.float32(255) / (high - low)
        offset = -low * scale
        stretched = _to_uint8(_float(images) * scale + offset)
    return np.where(high > low, stretched, images)


def _histograms(images):
    """(N, C, 256) counts of each channel's values."""
    count, channels = images.shape[0], images.shape[3]
    bins = (np.arange(count * channels).reshape(count, 1, 1, channels) * 256 + images)
    return np.bincount(bins.ravel(), minlength=count * channels * 256).reshape(
        count, channels, 256)


def equalize(images):
    """PIL's Equalize, channel by channel, with the TensorFlow code's integer lookup table.

    Example:
    >>> image = np.repeat(np.array([0, 10, 20], np.uint8), 256).reshape(1, 1, -1, 1)
    >>> np.unique(equalize(image)).tolist()
    [0, 128, 255]
    """
    images = np.asarray(images, np.uint8)
    histograms = _histograms(images)
    last = 255 - np.argmax(histograms[..., ::-1] > 0, axis=-1)
    step = (histograms.sum(-1) - np.take_along_axis(histograms, last[..., None], -1)[..., 0])
    step = (step // 255)[..., None]
    safe = np.maximum(step, 1)
    table = (np.cumsum(histograms, axis=-1) + step // 2) // safe
    table = np.clip(np.concatenate([np.zeros_like(table[..., :1]), table[..., :-1]], -1), 0, 255)
    table = np.where(step == 0, np.arange(256), table)  # (N, C, 256)
    count, channels = images.shape[0], images.shape[3]
    return table[np.arange(count)[:, None, None, None], np.arange(channels), images].astype(
        np.uint8)


def _round_half_away(values):
    """C's ``std::round``, which TensorFlow's nearest interpolation uses."""
    return np.sign(values) * np.floor(np.abs(values) + np.float32(0.5))


def project(images, transforms):
    """TensorFlow's ``ImageProjectiveTransformV3`` (nearest, constant fill) with the affine
    part of (N, 8) float32 ``transforms``; empty pixels filled with ``FILL``.

    Example:
    >>> shift = np.array([[1, 0, 1, 0, 1, 0, 0, 0]], np.float32)  # input x = output x + 1
    >>> project(np.array([[[[1], [2], [3]]]], np.uint8), shift).ravel().tolist()
    [2, 3, 128]
    """
    images = np.asarray(images, np.uint8)
    count, height, width = images.shape[:3]
    t = np.asarray(transforms, np.float32)[:, :, None, None]
    y = np.arange(height, dtype=np.float32)[:, None]
    x = np.arange(width, dtype=np.float32)[None, :]
    source_x = _round_half_away(t[:, 0] * x + t[:, 1] * y + t[:, 2])
    source_y = _round_half_away(t[:, 3] * x + t[:, 4] * y + t[:, 5])
    inside = (source_x >= 0) & (source_x < width) & (source_y >= 0) & (source_y < height)
    rows = np.where(inside, source_y, 0).astype(np.int64)
    columns = np.where(inside, source_x, 0).astype(np.int64)
    picked = images[np.arange(count)[:, None, None], rows, columns]
    return np.where(inside[..., None], picked, np.uint8(FILL))


def _affine(count, **entries):
    """(N, 8) float32 transforms: the identity with ``entries`` (``a0`` ... ``a5``) set."""
    transforms = np.tile(np.array([1, 0, 0, 0, 1, 0, 0, 0], np.float32), (count, 1))
    for name, values in entries.items():
        transforms[:, int(name[1])] = values
    return transforms


def rotate(images, degrees):
    """Rotate about the centre by ``degrees`` (positive: counter-clockwise on screen), as
    tensorflow-addons' ``rotate`` builds the transform in float32.

    Example:
    >>> rotate(np.arange(4, dtype=np.uint8).reshape(1, 2, 2, 1), 90.0)[0, ..., 0].tolist()
    [[1, 3], [0, 2]]
    """
    radians = (_per_image(degrees, images) * (math.pi / 180.0)).astype(np.float32)
    cos = np.cos(radians.astype(np.float64)).astype(np.float32)
    sin = np.sin(radians.astype(np.float64)).astype(np.float32)
    height, width = (np.float32(size - 1) for size in images.shape[1:3])
    x_offset = (width - (cos * width - sin * height)) / np.float32(2)
    y_offset = (height - (sin * width + cos * height)) / np.float32(2)
    return project(images, _affine(len(images), a0=cos, a1=-sin, a2=x_offset, a3=sin, a4=cos,
                                   a5=y_offset))


def shear_x(images, levels):
    """Shear along x: the pixel at (x, y) comes from (x + level * y, y).

    Example:
    >>> shear_x(np.arange(4, dtype=np.uint8).reshape(1, 2, 2, 1), 1.0)[0, ..., 0].tolist()
    [[0, 1], [3, 128]]
    """
    return project(images, _affine(len(images), a1=_per_image(levels, images)))


def shear_y(images, levels):
    """Shear along y: the pixel at (x, y) comes from (x, y + level * x).

    Example:
    >>> shear_y(np.arange(4, dtype=np.uint8).reshape(1, 2, 2, 1), 1.0)[0, ..., 0].tolist()
    [[0, 3], [2, 128]]
    """
    return project(images, _affine(len(images), a3=_per_image(levels, images)))


def translate_x(images, pixels):
    """Move the content ``pixels`` to the left (the pixel at x comes from x + pixels).

    Example:
    >>> translate_x(np.array([[[[1], [2], [3]]]], np.uint8), 2.0).ravel().tolist()
    [3, 128, 128]
    """
    return project(images, _affine(len(images), a2=_per_image(pixels, images)))


def translate_y(images, pixels):
    """Move the content ``pixels`` up (the pixel at y comes from y + pixels).

    Example:
    >>> translate_y(np.array([[[[1]], [[2]]]], np.uint8), -1.0).ravel().tolist()
    [128, 1]
    """
    return project(images, _affine(len(images), a5=_per_image(pixels, images)))


def cutout(images, pad_sizes, rows, columns):
    """Fill with ``FILL`` the square ``rows +- pad_size``, ``columns +- pad_size`` (clipped to
    the image, the far side exclusive) of each image.

    Example:
    >>> cutout(np.zeros((1, 1, 4, 1), np.uint8), 1, 0, 2).ravel().tolist()
    [0, 128, 128, 0]
    """
    images = np.asarray(images, np.uint8)
    pads = _per_image(pad_sizes, images, np.int64)[:, None]
    height, width = images.shape[1:3]

    def span(centres, size):
        start = np.maximum(0, _per_image(centres, images, np.int64)[:, None] - pads)
        stop = size - np.maximum(0, size - _per_image(centres, images, np.int64)[:, None] - pads)
        positions = np.arange(size)
        return (positions >= start) & (positions < stop)  # (N, size)

    hole = span(rows, height)[:, :, None] & span(columns, width)[:, None, :]
    return np.where(hole[..., None], np.uint8(FILL), images)


def parameter(name, magnitude, pixel_scale=1.0):
    """The positive parameter big_vision's ``level_to_arg`` gives operation ``name`` at
    ``magnitude`` (``None`` for AutoContrast, Equalize and Invert).

    ``pixel_scale`` multiplies the two parameters counted in pixels, TranslateX/Y's shift and
    Cutout's half-size: big_vision's are for 224-pixel images (100 and 40 pixels at magnitude
    10), so that ``pixel_scale = size / 224`` keeps their share of a ``size``-pixel image.

    Example:
    >>> parameter("Rotate", 10), parameter("Posterize", 15), parameter("Sharpness", 5)
    (30.0, 6, 1.0)
    >>> parameter("TranslateX", 10, pixel_scale=28 / 224), parameter("Cutout", 10, 28 / 224)
    (12.5, 5)
    """
    level = float(magnitude) / 10.0
    maps = {"Rotate": lambda: level * 30.0, "Posterize": lambda: int(level * 4),
            "Solarize": lambda: int(level * 256), "SolarizeAdd": lambda: int(level * 110),
            "ShearX": lambda: level * 0.3, "ShearY": lambda: level * 0.3,
            "TranslateX": lambda: level * 100.0 * pixel_scale,
            "TranslateY": lambda: level * 100.0 * pixel_scale,
            "Cutout": lambda: int(level * 40 * pixel_scale)}
    for enhance in ("Color", "Contrast", "Brightness", "Sharpness"):
        maps[enhance] = lambda: level * 1.8 + 0.1
    return maps[name]() if name in maps else None


_APPLY = {
    "AutoContrast": lambda images, value, sign, rows, columns: autocontrast(images),
    "Equalize": lambda images, value, sign, rows, columns: equalize(images),
    "Invert": lambda images, value, sign, rows, columns: invert(images),
    "Rotate": lambda images, value, sign, rows, columns: rotate(images, value * sign),
    "Posterize": lambda images, value, sign, rows, columns: posterize(images, value),
    "Solarize": lambda images, value, sign, rows, columns: solarize(images, value),
    "Color": lambda images, value, sign, rows, columns: color(images, value),
    "Contrast": lambda images, value, sign, rows, columns: contrast(images, value),
    "Brightness": lambda images, value, sign, rows, columns: brightness(images, value),
    "Sharpness": lambda images, value, sign, rows, columns: sharpness(images, value),
    "ShearX": lambda images, value, sign, rows, columns: shear_x(images, value * sign),
    "ShearY": lambda images, value, sign, rows, columns: shear_y(images, value * sign),
    "TranslateX": lambda images, value, sign, rows, columns: translate_x(images, value * sign),
    "TranslateY": lambda images, value, sign, rows, columns: translate_y(images, value * sign),
    "Cutout": lambda images, value, sign, rows, columns: cutout(images, value, rows, columns),
    "SolarizeAdd": lambda images, value, sign, rows, columns: solarize_add(images, value),
}


def apply(name, images, magnitude, signs=1, rows=0, columns=0, pixel_scale=1.0):
    """Operation ``name`` at ``magnitude`` on uint8 images (N, H, W, C), with per-image signs
    (+1 or -1: Rotate, Shear, Translate) and Cutout centres (``pixel_scale``: ``parameter``).

    Example:
    >>> apply("Solarize", np.array([[[[10, 200]]]], np.uint8), 5).ravel().tolist()
    [10, 55]
    """
    signs = _per_image(signs, images)
    return _APPLY[name](np.asarray(images, np.uint8), parameter(name, magnitude, pixel_scale),
                        signs, rows, columns)


def check(num_layers, magnitude, pixel_scale=1.0):
    """Refuse a ``num_layers`` that is not a whole number >= 0, a ``magnitude`` outside
    0..``MAX_MAGNITUDE`` or a ``pixel_scale`` that is not a number > 0.

    Example:
    >>> check(2, 10, 28 / 224)
    """
    if isinstance(num_layers, bool) or not isinstance(num_layers, numbers.Integral) or (
            num_layers < 0):
        raise ValueError(f"randaugment: num_layers must be a whole number >= 0, got "
                         f"{num_layers!r}")
    if isinstance(magnitude, bool) or not isinstance(magnitude, numbers.Real) or not (
            0 <= magnitude <= MAX_MAGNITUDE):
        raise ValueError(f"randaugment: magnitude must be a number from 0 to {MAX_MAGNITUDE}, "
                         f"got {magnitude!r}")
    if isinstance(pixel_scale, bool) or not isinstance(pixel_scale, numbers.Real) or not (
            pixel_scale > 0):
        raise ValueError(f"randaugment: pixel_scale must be a number > 0 (the image size over "
                         f"224 to keep big_vision's shifts and Cutout in proportion), got "
                         f"{pixel_scale!r}")


def layer_draws(keys, layer, height, width):
    """``(ops, signs, rows, columns)`` of one layer, each (N,) and a function of the image's key
    alone: the index into ``OPERATIONS``, the sign (+1 or -1), the Cutout centre.

    Example:
    >>> from keras_vit.data.keys import example_keys
    >>> ops, signs, rows, columns = layer_draws(example_keys(0, 0, range(1000)), 0, 8, 6)
    >>> sorted(set(ops.tolist())) == list(range(16)), sorted(set(signs.tolist())), int(rows.max())
    (True, [-1.0, 1.0], 7)
    """
    draw = FIRST_DRAW + DRAWS_PER_LAYER * layer
    ops = np.floor(uniform(keys, draw + _OP) * len(OPERATIONS)).astype(np.int64)
    signs = np.where(uniform(keys, draw + _SIGN) < 0.5, -1.0, 1.0)
    rows = np.floor(uniform(keys, draw + _ROW) * height).astype(np.int64)
    columns = np.floor(uniform(keys, draw + _COLUMN) * width).astype(np.int64)
    return ops, signs, rows, columns


def apply_layer(images, magnitude, ops, signs, rows, columns, pixel_scale=1.0):
    """One layer of the policy: operation ``OPERATIONS[ops[i]]`` on image ``i``, always applied.

    Example:
    >>> images = np.array([[[[10]]], [[[200]]]], np.uint8)
    >>> apply_layer(images, 10, np.array([2, 0]), 1, 0, 0).ravel().tolist()  # Invert, AutoContrast
    [245, 200]
    """
    count = len(images)
    signs, rows, columns = (np.broadcast_to(np.asarray(v), (count,)) for v in (signs, rows,
                                                                                 columns))
    out = images.copy()
    for index, name in enumerate(OPERATIONS):
        chosen = np.asarray(ops) == index
        if chosen.any():
            out[chosen] = apply(name, images[chosen], magnitude, signs[chosen], rows[chosen],
                                columns[chosen], pixel_scale)
    return out


def randaugment(images, num_layers, magnitude, keys, pixel_scale=1.0):
    """big_vision's ``randaug(num_layers, magnitude)`` on uint8 images (N, H, W, C), every
    image's draws from its key (``keras_vit.data.keys.example_keys``), so that an example is
    augmented alike in any batch. ``pixel_scale`` (default 1: big_vision's, for 224-pixel
    images) scales the shifts and Cutout's size, as ``parameter`` says.

    Example:
    >>> from keras_vit.data.keys import example_keys
    >>> images = np.arange(2 * 8 * 8 * 3, dtype=np.uint8).reshape(2, 8, 8, 3)
    >>> out = randaugment(images, 2, 10, example_keys(0, 0, [0, 1]))
    >>> out.shape, out.dtype, bool((out[1:] == randaugment(images[1:], 2, 10,
    ...                                                    example_keys(0, 0, [1]))).all())
    ((2, 8, 8, 3), dtype('uint8'), True)
    """
    check(num_layers, magnitude, pixel_scale)
    images = np.asarray(images)
    if images.dtype != np.uint8 or images.ndim != 4:
        raise ValueError(f"randaugment: images must be uint8 (N, H, W, C), got {images.dtype} "
                         f"{images.shape}")
    keys = np.asarray(keys, np.uint64)
    if keys.shape != images.shape[:1]:
        raise ValueError(f"randaugment: one key per image, got {keys.shape} keys for "
                         f"{len(images)} images")
    for layer in range(num_layers):
        draws = layer_draws(keys, layer, images.shape[1], images.shape[2])
        images = apply_layer(images, magnitude, *draws, pixel_scale=pixel_scale)
    return images
