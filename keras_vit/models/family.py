"""A model family as one record (``Family``): what every package above the models asks of a
family reads a field of its record, and every table there is keyed by the record.

A description answers ``config.family`` with its record; the registry
(``keras_vit.models.registry.FAMILIES``) is the tuple of the records.
"""

import dataclasses
import re
from collections.abc import Callable

# The kinds of stem a family may have: the ViT's patch embedding (a plain ViT, an Axial-ViT),
# the hybrid's post-activation ResNet, BiT's pre-activation ResNetV2 and the AxialResNet's
# ResNet with axial attention (Appendix D.6). The costs count a ResNet by its kind.
STEMS = ("patches", "hybrid", "bit", "axial")


# What each refusal of a ``Family`` is about, as its messages say it.
NEEDS = {"token_attention": "token-to-token attention", "masked_patches": "patch tokens to mask",
         "patch_resizing": "a patch embedding to resize"}


class Refused(TypeError, ValueError):
    """What a family refuses (``Family.check``): a ``TypeError``, as a model of the wrong kind
    is, and a ``ValueError``, as a model with the wrong settings is (an Axial-ViT is a ViT whose
    encoder is axial)."""


@dataclasses.dataclass(frozen=True, eq=False)  # one record a family: equal when the same
class Family:
    """One model family, whole.

    Args:
        name: how messages name it ("hybrid ResNet+ViT").
        pattern: the regular expression of its paper names; its groups are ``describe``'s
            arguments.
        describe: parsed groups -> the description of a paper name (224 px, 1,000 classes).
        published: the names of its published models.
        description, backbone, classifier: its description, backbone and classifier classes.
        stem: its kind of stem (``STEMS``).
        weights: whether any of its weights are published (official, timm or transformers).
        token_attention, masked_patches, patch_resizing: None where the family has what these
            need (token-to-token attention for relevancy and rollout, patch tokens to mask, a
            patch embedding to resize), else why it has not: the refusal's message.
    """

    name: str
    pattern: str
    describe: Callable
    published: tuple
    description: type
    backbone: type
    classifier: type
    stem: str
    weights: bool
    token_attention: str | None = None
    masked_patches: str | None = None
    patch_resizing: str | None = None

    def __post_init__(self):
        if self.stem not in STEMS:
            raise ValueError(f"The {self.name} family's stem {self.stem!r} is not a kind of "
                             f"stem; use one of {STEMS}.")
        object.__setattr__(self, "published", tuple(self.published))
        object.__setattr__(self, "pattern", re.compile(self.pattern))

    def __repr__(self):
        return f"Family({self.name!r})"

    def parse(self, name):
        """The description of ``name`` when it is one of this family's names, else None."""
        match = self.pattern.fullmatch(str(name))
        return None if match is None else self.describe(*match.groups())

    def check(self, need, what, fix):
        """Raise ``Refused`` when this family refuses ``need`` (a key of ``NEEDS``): ``what``
        (the function asking) and ``fix`` (what to do instead) say it."""
        reason = getattr(self, need)
        if reason is not None:
            raise Refused(f"{what} needs {NEEDS[need]}, and {reason}. {fix}")

    def model_class(self, config):
        """The class that builds ``config``: the classifier, or the backbone without a head."""
        return self.classifier if config.head is not None else self.backbone


def family_of_model(model):
    """The family record of a keras_vit model or description, None for anything else."""
    config = getattr(model, "config", model)
    return getattr(config, "family", None)
