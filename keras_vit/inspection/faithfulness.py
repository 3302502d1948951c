"""Which explanation to trust: the perturbation test of Chefer, Gur & Wolf ("Transformer
Interpretability Beyond Attention Visualization", CVPR 2021, Sec. 4).

An explanation ranks the patches of an image. Deleting them in that order, most relevant first
("positive" perturbation), should make the model's accuracy fall fast if the ranking is
faithful; deleting the least relevant first ("negative") should keep it. The test reports the
accuracy after deleting each fraction of the patches and the area under that curve: low for a
faithful explanation in the positive order, high in the negative one, and a random order
(seeded) as the yardstick between them.

"Delete" sets every pixel of a patch to ``fill``, by default -1, the black of the models'
[-1, 1] inputs: the paper's code writes 0 into [0, 1] images before their (x - 0.5) / 0.5
normalisation, the same colour. The paper ranks pixels of the map upsampled to the image; here
whole patches (the tokens the map is over) are deleted, ``round(fraction * patches)`` of them.
"""

import dataclasses

import numpy as np

from keras_vit.inspection.attention import (
    _check_images,
    attention_maps,
    attention_rollout,
    backbone_of,
)
from keras_vit.inspection.gradients import _check_family, logits, relevancy

EXPLANATIONS = ("attention", "rollout", "relevancy", "random")
FRACTIONS = tuple(np.round(np.linspace(0.0, 1.0, 11), 2).tolist())


@dataclasses.dataclass(frozen=True)
class PerturbationCurves:
    """Accuracy after deleting each fraction of the patches, per explanation and order.

    ``positive[name]`` and ``negative[name]`` are float64 arrays over ``fractions`` (most and
    least relevant patches deleted first); ``auc(order)`` gives their areas (trapezoid rule over
    the fractions), ``str(curves)`` the table.
    """

    fractions: np.ndarray
    positive: dict
    negative: dict

    def auc(self, order="positive"):
        """{explanation: area under the accuracy curve} of the ``"positive"`` or ``"negative"``
        order: lower is better in the positive order, higher in the negative one."""
        if order not in ("positive", "negative"):
            raise ValueError(f"order must be 'positive' or 'negative', got {order!r}.")
        x = np.asarray(self.fractions, np.float64)
        return {name: float(np.sum((curve[1:] + curve[:-1]) / 2 * np.diff(x)))
                for name, curve in getattr(self, order).items()}

    def __str__(self):
        positive, negative = self.auc("positive"), self.auc("negative")
        lines = [f"{'explanation':<14}{'positive AUC (lower: better)':>30}"
                 f"{'negative AUC (higher: better)':>31}"]
        lines += [f"{name:<14}{positive[name]:>30.3f}{negative[name]:>31.3f}" for name in positive]
        return "\n".join(lines)


def delete_patches(images, deleted, stride, fill=-1.0):
    """The images with the patches marked in ``deleted`` (batch, rows, cols) set to ``fill``.

    Example:
    >>> import numpy as np
    >>> out = delete_patches(np.ones((1, 4, 4, 1)), np.array([[[True, False], [False, False]]]), 2)
    >>> out[0, :, :, 0].tolist()[:2]
    [[-1.0, -1.0, 1.0, 1.0], [-1.0, -1.0, 1.0, 1.0]]
    """
    pixels = np.repeat(np.repeat(np.asarray(deleted, bool), stride, axis=1), stride, axis=2)
    return np.where(pixels[..., None], np.asarray(fill, images.dtype), images)


def _explanation_maps(model, images, explanations, class_index, seed, batch_size):
    """{name: (batch, rows, cols) scores} for the named explanations and the given maps."""
    if isinstance(explanations, str):
        explanations = (explanations,)
    named = dict(explanations) if isinstance(explanations, dict) else dict.fromkeys(explanations)
    if not named:
        raise ValueError(f"Expected at least one explanation, e.g. {EXPLANATIONS}.")
    grid = _check_images(backbone_of(model), images)[1]
    maps = {}
    for name, given in named.items():
        if given is not None:
            maps[name] = np.asarray(given, np.float64)
        elif name == "attention":  # the last block's heads, averaged, from the output's row
            maps[name] = attention_maps(model, images, batch_size)[:, -1].mean(axis=1)
        elif name == "rollout":
            maps[name] = attention_rollout(model, images, batch_size)
        elif name == "relevancy":
            maps[name] = relevancy(model, images, class_index, batch_size)
        elif name == "random":
            maps[name] = np.random.default_rng(seed).random((len(images), *grid))
        else:
            raise ValueError(f"Unknown explanation {name!r}; use names of {EXPLANATIONS} or a "
                             "dict {name: (batch, rows, cols) maps} of your own.")
        if maps[name].shape != (len(images), *grid):
            raise ValueError(f"The {name!r} maps have shape {maps[name].shape}; expected one "
                             f"map per image over the patch grid, {(len(images), *grid)}.")
    return maps


def _check_fractions(fractions):
    fractions = np.asarray(FRACTIONS if fractions is None else fractions, np.float64)
    if fractions.ndim != 1 or len(fractions) < 2 or np.any(np.diff(fractions) <= 0) or (
            fractions[0] < 0 or fractions[-1] > 1):
        raise ValueError(f"fractions must increase within [0, 1], at least two of them, e.g. "
                         f"{FRACTIONS}; got {fractions.tolist()}.")
    return fractions


def perturbation_curves(model, images, labels, explanations=EXPLANATIONS, fractions=None,
                        seed=0, class_index=None, fill=-1.0, batch_size=32):
    """The positive and negative perturbation test of Chefer et al. (CVPR 2021, Sec. 4).

    For each explanation, the patches of every image are ranked by its map; for each fraction
    f, the ``round(f * patches)`` highest-ranked (positive order) or lowest-ranked (negative
    order) are deleted (set to ``fill``) and the images re-predicted. All fractions of one image
    come from one ranking, so the deleted sets grow.

    Args:
        model: a keras_vit ``ViTImageClassifier`` (plain or hybrid, any image size).
        images: (batch, height, width, channels) array, preprocessed as for the model.
        labels: (batch,) integer labels the accuracy is counted against.
        explanations: names among ``"attention"`` (the last block's attention from the
            classifier's row, heads averaged), ``"rollout"`` (``attention_rollout``),
            ``"relevancy"`` (``relevancy``) and ``"random"`` (uniform scores drawn with
            ``seed``); or a dict ``{name: (batch, rows, cols) maps}`` whose None values are
            computed by name.
        fractions: increasing fractions of the patches to delete, in [0, 1]; by default
            0, 0.1, ..., 1.
        seed: the seed of the random order.
        class_index: the class relevancy explains: None for each image's predicted class (the
            paper's setting), an int, or one per image (e.g. ``labels``).
        fill: the value a deleted patch's pixels take (-1: black, as in the paper's code).
        batch_size: images per forward pass.

    Returns:
        A ``PerturbationCurves``: at fraction 0 every curve is the model's accuracy, at 1 the
        accuracy on images of ``fill`` alone.

    Example:
    >>> import numpy as np
    >>> from keras_vit import ViTImageClassifier
    >>> model = ViTImageClassifier(image_size=8, patch_size=4, hidden_size=8, num_layers=2,
    ...                            num_heads=2, mlp_dim=16, num_classes=3)
    >>> curves = perturbation_curves(model, np.zeros((2, 8, 8, 3), "float32"), [0, 1],
    ...                              fractions=[0, 0.5, 1])
    >>> sorted(curves.auc("positive")), curves.positive["random"].shape
    (['attention', 'random', 'relevancy', 'rollout'], (3,))
    """
    _check_family(model, "perturbation_curves")
    backbone = model.backbone
    images, _ = _check_images(backbone, images)
    labels = np.asarray(labels)
    if labels.shape != (len(images),) or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"Expected one integer label per image, shape ({len(images)},); got "
                         f"{labels.dtype} of shape {labels.shape}.")
    fractions = _check_fractions(fractions)
    maps = _explanation_maps(model, images, explanations, class_index, seed, batch_size)
    positive, negative = _curves(model, images, labels, maps, fractions, fill, batch_size)
    return PerturbationCurves(fractions, positive, negative)


def _curves(model, images, labels, maps, fractions, fill, batch_size):
    """({name: accuracy per fraction}, the same) for the positive and the negative order."""

    def accuracy(batch):
        return float(np.mean(np.argmax(logits(model, batch, int(batch_size)), axis=-1)
                             == labels))

    batch, rows, cols = next(iter(maps.values())).shape
    # the ends are shared by every order: computed once, they are exactly the same
    ends = {0: accuracy(images), rows * cols: accuracy(np.full_like(images, fill))}
    curves = ({}, {})
    for name, scores in maps.items():
        for curve, sign in zip(curves, (-1.0, 1.0)):
            # rank 0 is deleted first; ties go to the earlier patch (row-major)
            first = np.argsort(sign * scores.reshape(batch, -1), axis=1, kind="stable")
            rank = np.argsort(first, axis=1, kind="stable").reshape(batch, rows, cols)
            curve[name] = np.array([
                ends[k] if k in ends else
                accuracy(delete_patches(images, rank < k, model.config.stride, fill))
                for k in np.rint(fractions * rows * cols).astype(int)])
    return curves
