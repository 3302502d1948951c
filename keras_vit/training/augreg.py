"""The AugReg pre-training settings ("How to train your ViT?", Steiner et al. 2021) by name.

AugReg trains with one of seven augmentation settings (RandAugment and mixup, each of some
strength) and, as separate axes, dropout, stochastic depth and weight decay; a published
checkpoint's name holds all four (``...-aug_medium1-wd_0.1-do_0.0-sd_0.0``).
``augreg_setting`` gives the ``AugRegSetting`` of an augmentation name and rates,
``augreg_checkpoint_setting`` that of a checkpoint name or index row
(``keras_vit.checkpoints.augreg``). Nothing here transforms an image.

Sources:

- ``AUGMENTATIONS``: ``RANDAUG_DEF`` and ``MIXUP_DEF`` of ``big_vision/configs/vit_i1k.py``
  (google-research/big_vision at 21bd6ebe253f070f584d8b777ad76f4abce51bef): RandAugment as
  ``randaug(layers, magnitude)``; mixup's ``p``, the Beta/Dirichlet concentration of
  ``big_vision.utils.mixup`` (0 turns mixup off).
- ``RATES``: the values of the published index (``gs://vit_models/augreg/index.csv``, which
  vision_transformer's ``vit_jax_augreg.ipynb`` at c6de1e5 tabulates as the paper's Sec. 3.3
  upstream parameters): weight decay 0.03 or 0.1, dropout and stochastic depth 0.0 or 0.1
  (equal in every published run). Weight decay is in the names' units, multiplied by the
  learning rate as Keras' ``AdamW`` does; big_vision's ``config.wd`` is it times the base rate.
- ``DEFAULTS``: big_vision's config sets ``config.wd = 1e-4`` at ``config.lr = 1e-3`` (0.1
  here) and gives its ViT no dropout rate (0.0 by default) and no stochastic depth.
- ``CHECKPOINT_AUGMENTATIONS``: the index spells the two light settings ``light0`` and
  ``light1`` where big_vision writes ``light1`` and ``light2``; the other five names agree.
  The pairing follows the two lists' order of strength; neither source writes it down.

Example:
>>> s = augreg_checkpoint_setting("B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0")
>>> s.randaugment, s.mixup, s.dropout, s.stochastic_depth, s.weight_decay
((2, 15), 0.2, 0.0, 0.0, 0.1)
>>> augreg_setting("light1", dropout=0.1, stochastic_depth=0.1).randaugment
(2, 0)
"""

import dataclasses
import math
import re
from typing import NamedTuple

from keras_vit.checkpoints.augreg import PREFIX


class Augmentation(NamedTuple):
    """RandAugment's ``(layers, magnitude)`` (None: no RandAugment) and mixup's ``p``."""

    randaugment: tuple[int, int] | None
    mixup: float


AUGMENTATIONS = {  # big_vision's names, weakest first
    "none": Augmentation(None, 0.0),
    "light1": Augmentation((2, 0), 0.0),  # magnitude 0 still flips, equalizes, ...
    "light2": Augmentation((2, 10), 0.2),
    "medium1": Augmentation((2, 15), 0.2),
    "medium2": Augmentation((2, 15), 0.5),
    "strong1": Augmentation((2, 20), 0.5),
    "strong2": Augmentation((2, 20), 0.8),
}
RATES = {"dropout": (0.0, 0.1), "stochastic_depth": (0.0, 0.1), "weight_decay": (0.03, 0.1)}
DEFAULTS = {"dropout": 0.0, "stochastic_depth": 0.0, "weight_decay": 0.1}
# The checkpoint names' augmentation -> big_vision's name.
CHECKPOINT_AUGMENTATIONS = {"none": "none", "light0": "light1", "light1": "light2",
                            "medium1": "medium1", "medium2": "medium2", "strong1": "strong1",
                            "strong2": "strong2"}
_NAME = re.compile(r"[^-]+-[^-]+-\d+ep-lr_[^-]+-aug_(?P<aug>[^-]+)-wd_(?P<wd>[^-]+)"
                   r"-do_(?P<do>[^-]+)-sd_(?P<sd>[^-]+)")


@dataclasses.dataclass(frozen=True)
class AugRegSetting:
    """One AugReg setting: big_vision's augmentation name, RandAugment's ``(layers,
    magnitude)`` or None, mixup's ``p`` (0: none), and the dropout, stochastic depth and
    weight decay rates. ``augreg_setting`` makes one; the constructor checks the same."""

    augmentation: str
    randaugment: tuple[int, int] | None
    mixup: float
    dropout: float
    stochastic_depth: float
    weight_decay: float

    def __post_init__(self):
        expected = AUGMENTATIONS[_augmentation(self.augmentation)]
        if (self.randaugment, self.mixup) != expected:
            raise ValueError(f"AugReg's {self.augmentation!r} is RandAugment "
                             f"{expected.randaugment} with mixup p={expected.mixup}, not "
                             f"{self.randaugment} with p={self.mixup}; use augreg_setting().")
        for axis in RATES:
            _rate(axis, getattr(self, axis))


def augreg_setting(augmentation, *, dropout=DEFAULTS["dropout"],
                   stochastic_depth=DEFAULTS["stochastic_depth"],
                   weight_decay=DEFAULTS["weight_decay"]):
    """The ``AugRegSetting`` of big_vision's augmentation name (``AUGMENTATIONS``) and rates
    (``RATES``; the defaults are big_vision's config's). An unknown name or a rate off the
    grid raises a ``ValueError`` naming the valid ones.

    >>> augreg_setting("strong2", weight_decay=0.03).mixup
    0.8
    """
    name = _augmentation(augmentation)
    rates = {axis: _rate(axis, value) for axis, value in (
        ("dropout", dropout), ("stochastic_depth", stochastic_depth),
        ("weight_decay", weight_decay))}
    return AugRegSetting(name, *AUGMENTATIONS[name], **rates)


def augreg_checkpoint_setting(checkpoint):
    """The ``AugRegSetting`` an AugReg checkpoint was pre-trained with.

    Args:
        checkpoint: a published file name, upstream or fine-tuned, with or without
            ``augreg/`` and ``.npz``; or a ``Row``/``Upstream`` of
            ``keras_vit.checkpoints.augreg`` (its ``aug``, ``wd``, ``do`` and ``sd``).

    The name's augmentation is translated to big_vision's (``CHECKPOINT_AUGMENTATIONS``).

    >>> augreg_checkpoint_setting("augreg/R26_S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1"
    ...                           "-do_0.0-sd_0.0--cifar100-steps_10k-lr_0.03-res_224").augmentation
    'light2'
    """
    if isinstance(checkpoint, str):
        aug, wd, do, sd = _parse(checkpoint)
    elif all(hasattr(checkpoint, column) for column in ("aug", "wd", "do", "sd")):
        aug, wd, do, sd = checkpoint.aug, checkpoint.wd, checkpoint.do, checkpoint.sd
    else:
        raise TypeError(f"Expected an AugReg checkpoint name or an index row "
                        f"(keras_vit.checkpoints.augreg), got {type(checkpoint).__name__}.")
    if aug not in CHECKPOINT_AUGMENTATIONS:
        raise ValueError(f"{aug!r} is not an augmentation of the published AugReg checkpoints; "
                         f"they use {', '.join(CHECKPOINT_AUGMENTATIONS)}.")
    return augreg_setting(CHECKPOINT_AUGMENTATIONS[aug], dropout=do, stochastic_depth=sd,
                          weight_decay=wd)


def _parse(name):
    """``(aug, wd, do, sd)`` of a checkpoint's file name."""
    upstream = name.removeprefix(PREFIX).removesuffix(".npz").split("--")[0]
    match = _NAME.fullmatch(upstream)
    try:
        return match["aug"], float(match["wd"]), float(match["do"]), float(match["sd"])
    except (TypeError, ValueError):  # no match, or a rate that is not a number
        raise ValueError(
            f"{name!r} is not an AugReg checkpoint name: expected "
            "'<model>-<ds>-<epochs>ep-lr_<lr>-aug_<aug>-wd_<wd>-do_<do>-sd_<sd>', e.g. "
            "'B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0'.") from None


def _augmentation(name):
    if name in AUGMENTATIONS:
        return name
    hint = ""
    if name in CHECKPOINT_AUGMENTATIONS:
        hint = (f" {name!r} is how checkpoint names spell big_vision's "
                f"{CHECKPOINT_AUGMENTATIONS[name]!r}; augreg_checkpoint_setting() reads those.")
    raise ValueError(f"Unknown AugReg augmentation {name!r}; big_vision's names are "
                     f"{', '.join(AUGMENTATIONS)}.{hint}")


def _rate(axis, value):
    """``value`` as the grid's own number, or a ``ValueError`` listing the grid."""
    allowed = RATES[axis]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        for option in allowed:
            if math.isclose(value, option, rel_tol=1e-9, abs_tol=1e-12):
                return option
    raise ValueError(f"AugReg's {axis} is one of {', '.join(map(str, allowed))} (the published "
                     f"grid), not {value!r}; pass one of those.")
