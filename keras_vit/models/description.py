"""One kind of description for every model family: ``ViTConfig`` and ``ResNetConfig``.

A description is the only place a model's settings live. The registry produces it from a name
("ViT-B/16", "BiT-R50x1"), the checkpoint readers from a file, the costs (``flops``,
``memory``, ``largest_batch``) read it, and a model's ``get_config`` is it. Every description
answers the same questions (``Description``): ``image_size``, ``num_channels``, ``stride``,
``grid``, ``check_input`` and ``head``, so code above the models asks them without knowing the
family. Each family's sections are frozen settings, each checked once.

``ViTConfig``'s sections (the Vision Transformer, a hybrid, an Axial-ViT):

- ``stem``: the ResNet of a hybrid (Sec. 3.1 "Hybrid Architecture"), or None for a plain ViT;
- ``patches``: the patch size P and the image channels C of Eq. 1;
- ``encoder``: the Transformer encoder (``EncoderConfig``: L, D, heads, MLP size, rates, class
  token or GAP, position embedding, axial blocks of Appendix D.6);
- ``head``: the classification head (Sec. 3.1; its tanh hidden layer at pre-training,
  Appendix D.3), or None for a backbone.

``ResNetConfig``'s sections (BiT ResNetV2, Sec. 4.1, and AxialResNet, Appendix D.6):
``stages`` (units per stage and the width factor), ``axial`` (the axial attention's heads, or
None for BiT's convolutions) and the same ``head``.

The head is the classifier's, a sibling of the backbone: a backbone's description has
``head=None`` and a classifier's is the backbone's plus a ``Head``.

A person may also write the settings flat, as keyword arguments (``hidden_size=768,
num_classes=10``; ``block_units=(3, 4, 6, 3), width_factor=1``): ``from_keywords`` sends each
name to the section whose field it is (a head field may carry a ``head_`` prefix), so the
sections are the only list of names.
"""

import dataclasses
import math
from typing import ClassVar

import keras

from keras_vit import _hooks
from keras_vit.checks import check_multiple, pair, positive_int
from keras_vit.layers.encoder import EncoderConfig
from keras_vit.layers.resnet import check_units, hybrid_stride, plain_number, root_width
from keras_vit.layers.settings import Settings

# The keywords every model takes besides its description, the common part of its get_config
# (``QuantizableModel.base_config``); any other keyword is a setting of the description.
MODEL_KEYWORDS = ("name", "trainable", "dtype")


def model_keywords(keywords):
    """Take the model's own keywords (``MODEL_KEYWORDS``) out of the dict ``keywords`` and
    return them; what stays is the description's."""
    return {key: keywords.pop(key) for key in MODEL_KEYWORDS if key in keywords}


__all__ = ["Axial", "Description", "EncoderConfig", "Head", "Patches", "ResNetConfig", "Stages",
           "Stem", "ViTConfig"]


@dataclasses.dataclass(frozen=True)
class Stem(Settings):
    """The ResNet stem of a hybrid (paper Sec. 3.1; ``keras_vit.layers.resnet.HybridStem``).

    Args:
        num_layers: units per ResNet stage, e.g. ``(3, 4, 9)`` for R50+ViT-B/16; ``()`` keeps the
            root alone (AugReg's ``R_Ti_16``).
        width_factor: the root width multiplier.
    """

    num_layers: tuple = (3, 4, 9)
    width_factor: float = 1

    def __post_init__(self):
        units = tuple(check_units(self.num_layers, "stem num_layers", allow_empty=True))
        object.__setattr__(self, "num_layers", units)
        root_width(self.width_factor)  # a number whose root GroupNorm splits, or a clear error
        object.__setattr__(self, "width_factor", plain_number(self.width_factor))

    @property
    def stride(self):
        """The stem's total downsampling (4 for the root, x2 per stage after the first)."""
        return hybrid_stride(list(self.num_layers))


@dataclasses.dataclass(frozen=True)
class Patches(Settings):
    """The patches of Eq. 1: side ``patch_size`` (P; on the stem's feature map for a hybrid) and
    the input's ``num_channels`` (C)."""

    patch_size: int = 16
    num_channels: int = 3

    def __post_init__(self):
        object.__setattr__(self, "patch_size", positive_int("patch_size", self.patch_size))
        object.__setattr__(self, "num_channels", positive_int("num_channels", self.num_channels))


@dataclasses.dataclass(frozen=True)
class Head(Settings):
    """The classification head (paper Sec. 3.1): ``Dense(num_classes)``, after a Dense + tanh
    ``pre_logits`` layer of width ``representation_size`` when set (the pre-training head's
    hidden layer, Appendix D.3; transformers calls it the pooler). The kernel is zeros by
    default (Sec. 3.2 "zero-initialized"); the paper's ImageNet-21k pre-training used a bias of
    -10. ``num_classes=None`` with a ``representation_size`` is the pre-logits layer alone: the
    features of a checkpoint saved without its classes."""

    num_classes: int | None = 1000
    representation_size: int | None = None
    kernel_initializer: str | dict = "zeros"
    bias_init: float = 0.0

    def __post_init__(self):
        object.__setattr__(self, "num_classes", positive_int(
            "num_classes", self.num_classes, optional=self.representation_size is not None))
        object.__setattr__(self, "representation_size", positive_int(
            "representation_size", self.representation_size, optional=True))
        initializer = keras.initializers.get(self.kernel_initializer)  # refuses unknown names
        if not isinstance(self.kernel_initializer, (str, dict)):
            # Serialising imports TensorFlow (Keras' serialisation library): only for objects.
            object.__setattr__(self, "kernel_initializer",
                               keras.initializers.serialize(initializer))
        object.__setattr__(self, "bias_init", float(self.bias_init))


class Description(Settings):
    """What every family's description answers, and how flat keywords find their section.

    A family's description is a frozen dataclass with these class attributes: ``SECTIONS``
    (section name -> its settings class), ``BARE`` (sections whose fields may be named without
    the section's prefix) and ``MODEL`` (the family in messages, "A ViT"); and these answers:
    ``image_size`` ((height, width), or None for any size), ``num_channels``, ``stride``
    (pixels per feature side), ``grid`` (the feature grid of ``image_size``), ``head`` (None
    for a backbone), ``flash_capable``, ``check_input`` and ``family_name`` (the name of its
    record, ``family``, which the packages above ask instead of the description's class).
    """

    SECTIONS: ClassVar[dict] = {}
    BARE: ClassVar[tuple] = ()
    MODEL: ClassVar[str] = "A model"

    def _read_sections(self):
        """Sections given as dicts become their settings; anything else is refused."""
        for name, section in self.SECTIONS.items():
            value = getattr(self, name)
            if isinstance(value, dict):
                object.__setattr__(self, name, section.from_dict(value))
            elif value is not None and not isinstance(value, section):
                raise TypeError(f"{type(self).__name__}'s {name} must be a {section.__name__} "
                                f"or a dict, got {value!r}.")

    @property
    def family(self):
        """The family's record (``keras_vit.models.family.Family``): its names, classes, stem
        and what it refuses; every question a package above asks of a family reads it."""
        return _hooks.get(_hooks.FAMILIES)[self.family_name]

    @property
    def flash_capable(self):
        """Whether every attention of the model may run a flash kernel: token-to-token attention
        that adds no logits. False unless the family says otherwise (a convolution has none)."""
        return False

    @property
    def grid(self):
        """The (rows, cols) feature grid of ``image_size`` (None for any size)."""
        if self.image_size is None:
            return None
        return tuple(math.ceil(side / self.stride) for side in self.image_size)

    def check_input(self, sides, what="input"):
        """Refuse a (height, width) this model cannot take; ``what`` names it in the error.
        Any size is taken unless the family says otherwise."""

    def resized(self, sides):
        """The changes (``replace`` keywords) that put the model at images of ``sides``
        ((height, width), or None for any size at call time), after checking it can be."""
        if sides is not None:
            self.check_input(sides, "new image")
        return {"image_size": sides}

    def flat(self, skip=()):
        """``{"section.field": value}`` of every setting (``encoder.hidden_size``), the fields
        and sections named in ``skip`` left out: what tells two descriptions apart."""
        def walk(values, prefix):
            for key, value in values.items():
                if key in skip:
                    continue
                if isinstance(value, dict):
                    yield from walk(value, f"{prefix}{key}.")
                else:
                    yield f"{prefix}{key}", value
        return dict(walk(self.to_dict(), ""))

    def backbone(self):
        """The description of this model's backbone: the same without a head."""
        return dataclasses.replace(self, head=None)

    @classmethod
    def from_keywords(cls, **keywords):
        """The description of flat keyword arguments (sections may also be given whole)."""
        return cls(**cls._sorted_keywords(keywords, {}))

    def replace(self, **changes):
        """A copy with ``changes``: flat names (``num_classes=10``) or whole sections
        (``head=None``), checked again."""
        return dataclasses.replace(self, **self._sorted_keywords(changes, self))

    @classmethod
    def _owner(cls, name):
        """``(section, field)`` of a flat keyword: a bare field name of a ``BARE`` section, or
        any section's field with the section's prefix (``stem_width_factor``,
        ``head_bias_init``); ``(None, None)`` when no section has it."""
        for section_name, section in cls.SECTIONS.items():
            for field in section.field_names():
                bare = name == field and section_name in cls.BARE
                if bare or name == f"{section_name}_{field}":
                    return section_name, field
        return None, None

    @classmethod
    def settings(cls):
        """Every name a flat keyword may have (prefixed forms aside)."""
        own = [field.name for field in dataclasses.fields(cls)]
        return own + [f for s in cls.BARE for f in cls.SECTIONS[s].field_names()]

    @classmethod
    def _sorted_keywords(cls, keywords, current):
        """Keyword arguments as fields: flat names grouped into their sections, on top of the
        section given whole or ``current``'s. ``num_classes=None`` means no head, unless the head
        keeps a ``representation_size`` (its pre-logits layer alone)."""
        own = [field.name for field in dataclasses.fields(cls)]
        fields, flat = {}, {}
        for name, value in keywords.items():
            section, field = (None, None) if name in own else cls._owner(name)
            if name in own:
                fields[name] = value
            elif section is None:
                prefixed = ", ".join(f"{s}_<name>" for s in cls.SECTIONS if s not in cls.BARE)
                raise TypeError(
                    f"{cls.MODEL} has no setting {name!r}; its settings are "
                    f"{', '.join(cls.settings())} (head settings also as head_<name>"
                    f"{', ' + prefixed if prefixed else ''}).")
            else:
                flat.setdefault(section, {})[field] = value
        for section, changes in flat.items():
            base = fields[section] if section in fields else getattr(current, section, None)
            base = None if base is None else cls.SECTIONS[section].from_dict(base)
            if section == "head" and changes.get("num_classes", 0) is None:
                kept = base.representation_size if base is not None else None
                if changes.get("representation_size", kept) is None:
                    fields["head"] = None
                    continue
            fields[section] = (cls.SECTIONS[section].from_dict(changes) if base is None
                               else base.replace(**changes))
        return fields


@dataclasses.dataclass(frozen=True)
class ViTConfig(Description):
    """A Vision Transformer (a hybrid, an Axial-ViT), whole: see the module's docstring.

    Args:
        patches, encoder, stem, head: the sections (objects or their ``to_dict`` dicts).
        image_size: int or (height, width), each side a multiple of ``stride``; None for any
            size at call time (then ``position_embedding_grid`` is needed).
        position_embedding_grid: the (rows, cols) patch grid the position tables are learned
            at; by default the image's grid, and then not stored.

    Example (ViT-B/16 of Table 1 with a 10-class head, flat and nested):
    >>> config = ViTConfig.from_keywords(image_size=224, patch_size=16, hidden_size=768,
    ...     num_layers=12, num_heads=12, mlp_dim=3072, num_classes=10)
    >>> config.grid, config.encoder.num_heads, config.head.num_classes
    ((14, 14), 12, 10)
    >>> ViTConfig.from_dict(config.to_dict()) == config
    True
    """

    patches: Patches
    encoder: EncoderConfig
    image_size: tuple | None = (224, 224)
    stem: Stem | None = None
    head: Head | None = Head()
    position_embedding_grid: tuple | None = None

    SECTIONS: ClassVar[dict] = {"stem": Stem, "patches": Patches, "encoder": EncoderConfig,
                                "head": Head}
    BARE: ClassVar[tuple] = ("patches", "encoder", "head")
    MODEL: ClassVar[str] = "A ViT"

    def __post_init__(self):
        self._read_sections()
        if self.patches is None or self.encoder is None:
            raise TypeError("ViTConfig needs patches and encoder sections.")
        if self.encoder.hidden_size is None:
            raise ValueError("A ViT needs the encoder's hidden_size (the token width D).")
        object.__setattr__(self, "image_size", pair("image_size", self.image_size, optional=True))
        grid = pair("position_embedding_grid", self.position_embedding_grid, optional=True,
                    sides=("rows", "cols"))
        self.check_input(self.image_size or (None, None), "image")
        object.__setattr__(self, "position_embedding_grid", None if grid == self.grid else grid)
        if self.image_size is None and grid is None and (
                self.encoder.position_embedding != "none"):
            raise ValueError(
                "image_size=None (any size at call time) needs position_embedding_grid=(rows, "
                "cols), the grid of patches the position embedding is learned at, e.g. (14, 14) "
                "for 224-pixel images with 16-pixel patches.")

    @property
    def stride(self):
        """Pixels per token side: the patch size, times the stem's downsampling for a hybrid."""
        return self.patches.patch_size * (1 if self.stem is None else self.stem.stride)

    @property
    def num_channels(self):
        """The image channels (C of Eq. 1)."""
        return self.patches.num_channels

    @property
    def is_axial(self):
        """Whether the encoder is axial (an Axial-ViT, Appendix D.6)."""
        return self.encoder.axial

    @property
    def family_name(self):
        """A ViT's family: an Axial-ViT's encoder is axial, a hybrid's stem a ResNet."""
        if self.encoder.axial:
            return "Axial-ViT"
        return "ViT" if self.stem is None else "hybrid ResNet+ViT"

    @property
    def flash_capable(self):
        """A flash kernel takes no bias: not an Axial-ViT's row/column attention, not relative
        position logits."""
        return not self.encoder.axial and self.encoder.position_embedding != "relative"

    @property
    def learned_grid(self):
        """The grid the position tables are learned at."""
        return self.position_embedding_grid or self.grid or (1, 1)

    def check_input(self, sides, what="input"):
        """Refuse a (height, width) whose sides the stride does not divide (an any-size model's
        input, a new resolution); ``what`` names it in the error."""
        unit = "patch size times the ResNet stem stride" if self.stem is not None else "patch size"
        check_multiple(sides, self.stride, what=what, unit=unit)

    def resized(self, sides):
        """As ``Description.resized``; the position tables follow the new grid (resized as the
        official fine-tuning does), or keep the grid they were learned at for any size.
        Relative position embeddings, sized by the token count, have no resize."""
        if self.encoder.position_embedding == "relative" and sides != self.image_size:
            raise ValueError(
                "This model uses relative position embeddings, whose tables are sized by the "
                "number of tokens: they have no official resize and need a fixed image size; "
                "only models with learned 1-D/2-D absolute position embeddings (or none) change "
                "resolution or take any size.")
        changes = super().resized(sides)
        changes["position_embedding_grid"] = None if sides is not None else self.learned_grid
        return changes




@dataclasses.dataclass(frozen=True)
class Stages(Settings):
    """The stages of a ResNet (BiT's ResNetV2, AxialResNet): ``block_units`` units per stage,
    e.g. ``(3, 4, 6, 3)`` for R50, and ``width_factor``, the channel multiplier (the "x3" of
    R50x3; a multiple of 0.5 so that every width splits into GroupNorm's 32 groups). Stage ``s``
    has width ``64 * width_factor * 2**(s-1)``, outputs 4x that, and strides 2 from the second
    stage on, after the root's 4."""

    block_units: tuple = (3, 4, 6, 3)
    width_factor: float = 1

    def __post_init__(self):
        object.__setattr__(self, "block_units", tuple(
            check_units(self.block_units, "block_units", allow_empty=False)))
        root_width(self.width_factor)  # a number whose GroupNorms split, or a clear error
        object.__setattr__(self, "width_factor", plain_number(self.width_factor))

    @property
    def width(self):
        """The root's channels, ``64 * width_factor``."""
        return root_width(self.width_factor)

    @property
    def stride(self):
        """The total downsampling: the root's 4, x2 for each stage after the first."""
        return 4 * 2 ** (len(self.block_units) - 1)


@dataclasses.dataclass(frozen=True)
class Axial(Settings):
    """The axial attention that replaces an AxialResNet's 3x3 convolutions (Appendix D.6):
    ``num_heads`` heads in every attention (8 in scenic's configuration)."""

    num_heads: int = 8

    def __post_init__(self):
        object.__setattr__(self, "num_heads", positive_int("num_heads", self.num_heads))


@dataclasses.dataclass(frozen=True)
class ResNetConfig(Description):
    """A ResNet, whole: BiT's ResNetV2 (paper Sec. 4.1 "ResNet (BiT)", Tables 2, 6, 7), or with
    ``axial`` an AxialResNet (Appendix D.6).

    Args:
        stages: a ``Stages`` or its dict (``block_units``, ``width_factor``).
        image_size: int or (height, width); None for any size at call time (BiT only: an
            AxialResNet's relative position tables are sized by its feature maps). Any side is
            taken, as in bit_jax: the convolutions pad, so a side that the stride does not divide
            gives a feature map of the side over the stride, rounded up.
        num_channels: the image channels.
        axial: an ``Axial`` (``num_heads``) for an AxialResNet, None for BiT.
        head: the classifier's ``Head``, or None for a backbone.

    Example (BiT-R50x1, flat and nested):
    >>> config = ResNetConfig.from_keywords(block_units=(3, 4, 6, 3), width_factor=1,
    ...                                     num_classes=10)
    >>> config.stride, config.grid, config.head.num_classes
    (32, (7, 7), 10)
    >>> ResNetConfig.from_dict(config.to_dict()) == config
    True
    """

    stages: Stages
    image_size: tuple | None = (224, 224)
    num_channels: int = 3
    axial: Axial | None = None
    head: Head | None = Head()

    SECTIONS: ClassVar[dict] = {"stages": Stages, "axial": Axial, "head": Head}
    BARE: ClassVar[tuple] = ("stages", "axial", "head")
    MODEL: ClassVar[str] = "A ResNet"

    def __post_init__(self):
        self._read_sections()
        if self.stages is None:
            raise TypeError("ResNetConfig needs its stages (block_units, width_factor).")
        object.__setattr__(self, "image_size", pair("image_size", self.image_size, optional=True))
        object.__setattr__(self, "num_channels", positive_int("num_channels", self.num_channels))
        if self.axial is not None:
            self._check_axial()

    def _check_axial(self):
        if self.image_size is None:
            raise ValueError(
                "An AxialResNet needs a fixed image_size: its relative position embeddings are "
                "sized by the feature maps (2L - 1 offsets for a side of L).")
        heads = self.axial.num_heads
        for s in range(len(self.stages.block_units)):
            width = self.stages.width * 2**s
            if width % (2 * heads):
                raise ValueError(
                    f"Stage {s + 1} of this AxialResNet is {width} channels wide, which "
                    f"{heads} heads cannot split into query/key halves (the width must divide "
                    f"by 2 * num_heads = {2 * heads}). Use fewer heads (e.g. "
                    f"{math.gcd(width // 2, heads)}) or a larger width_factor.")

    @property
    def stride(self):
        """Pixels per side of the last feature map's cells."""
        return self.stages.stride

    @property
    def is_axial(self):
        """Whether the 3x3 convolutions are axial attention (an AxialResNet)."""
        return self.axial is not None

    @property
    def family_name(self):
        """A ResNet's family: an AxialResNet's 3x3 convolutions are axial attention."""
        return "AxialResNet" if self.axial is not None else "BiT ResNetV2"
