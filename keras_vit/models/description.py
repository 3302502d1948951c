"""One description of a Vision Transformer: stem, patches, encoder and head (paper Sec. 3.1).

``ViTConfig`` is the only place a ViT's settings live. The registry produces it from a name
("ViT-B/16"), the checkpoint readers from a file, the costs (``flops``, ``memory``,
``largest_batch``) read it, and a model's ``get_config`` is it. Its sections, each checked once:

- ``stem``: the ResNet of a hybrid (Sec. 3.1 "Hybrid Architecture"), or None for a plain ViT;
- ``patches``: the patch size P and the image channels C of Eq. 1;
- ``encoder``: the Transformer encoder (``EncoderConfig``: L, D, heads, MLP size, rates, class
  token or GAP, position embedding, axial blocks of Appendix D.6);
- ``head``: the classification head (Sec. 3.1; its tanh hidden layer at pre-training,
  Appendix D.3), or None for a backbone.

A person may also write the settings flat, as keyword arguments (``hidden_size=768,
num_classes=10``): ``ViTConfig.from_keywords`` sends each name to the section whose field it is
(a head field may carry a ``head_`` prefix), so the sections are the only list of names.
"""

import dataclasses

import keras

from keras_vit.checks import check_multiple, pair, positive_int
from keras_vit.layers.encoder import EncoderConfig, Settings
from keras_vit.layers.resnet import check_units, hybrid_stride, plain_number, root_width

__all__ = ["EncoderConfig", "Head", "Patches", "Stem", "ViTConfig"]


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
    hidden layer, Appendix D.3). The kernel is zeros by default (Sec. 3.2 "zero-initialized");
    the paper's ImageNet-21k pre-training used a bias of -10."""

    num_classes: int = 1000
    representation_size: int | None = None
    kernel_initializer: str | dict = "zeros"
    bias_init: float = 0.0

    def __post_init__(self):
        object.__setattr__(self, "num_classes", positive_int("num_classes", self.num_classes))
        object.__setattr__(self, "representation_size", positive_int(
            "representation_size", self.representation_size, optional=True))
        initializer = keras.initializers.get(self.kernel_initializer)  # refuses unknown names
        if not isinstance(self.kernel_initializer, (str, dict)):
            # Serialising imports TensorFlow (Keras' serialisation library): only for objects.
            object.__setattr__(self, "kernel_initializer",
                               keras.initializers.serialize(initializer))
        object.__setattr__(self, "bias_init", float(self.bias_init))


_SECTIONS = {"stem": Stem, "patches": Patches, "encoder": EncoderConfig, "head": Head}


@dataclasses.dataclass(frozen=True)
class ViTConfig(Settings):
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

    def __post_init__(self):
        for name, section in _SECTIONS.items():
            value = getattr(self, name)
            if isinstance(value, dict):
                object.__setattr__(self, name, section.from_dict(value))
            elif value is not None and not isinstance(value, section):
                raise TypeError(f"ViTConfig's {name} must be a {section.__name__} or a dict, "
                                f"got {value!r}.")
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
    def grid(self):
        """The (rows, cols) token grid of ``image_size`` (None for any size)."""
        if self.image_size is None:
            return None
        return tuple(side // self.stride for side in self.image_size)

    @property
    def learned_grid(self):
        """The grid the position tables are learned at."""
        return self.position_embedding_grid or self.grid or (1, 1)

    def check_input(self, sides, what="input"):
        """Refuse a (height, width) whose sides the stride does not divide (an any-size model's
        input, a new resolution); ``what`` names it in the error."""
        unit = "patch size times the ResNet stem stride" if self.stem is not None else "patch size"
        check_multiple(sides, self.stride, what=what, unit=unit)

    @classmethod
    def from_keywords(cls, **keywords):
        """The description of flat keyword arguments (sections may also be given whole)."""
        return cls(**_sorted_keywords(keywords, {}))

    def replace(self, **changes):
        """A copy with ``changes``: flat names (``num_classes=10``) or whole sections
        (``head=None``), checked again."""
        return dataclasses.replace(self, **_sorted_keywords(changes, self))


_BARE = ("patches", "encoder", "head")  # sections whose fields may be named bare


def _owner(name):
    """``(section, field)`` of a flat keyword: a bare field name of the patches, encoder or
    head, or any section's field with the section's prefix (``stem_width_factor``,
    ``head_bias_init``); ``(None, None)`` when no section has it."""
    for section_name, section in _SECTIONS.items():
        for field in section.field_names():
            if name == f"{section_name}_{field}" or (name == field and section_name in _BARE):
                return section_name, field
    return None, None


def _sorted_keywords(keywords, current):
    """Keyword arguments as ``ViTConfig`` fields: flat names grouped into their sections, on top
    of the section given whole or ``current``'s. ``num_classes=None`` means no head."""
    own = [field.name for field in dataclasses.fields(ViTConfig)]
    fields, flat = {}, {}
    for name, value in keywords.items():
        section, field = (None, None) if name in own else _owner(name)
        if name in own:
            fields[name] = value
        elif section is None:
            known = own + [f for s in _BARE for f in _SECTIONS[s].field_names()]
            raise TypeError(f"A ViT has no setting {name!r}; its settings are "
                            f"{', '.join(known)} (stem and head settings also as stem_<name>, "
                            f"head_<name>).")
        else:
            flat.setdefault(section, {})[field] = value
    if "head" in flat and "num_classes" in flat["head"] and flat["head"]["num_classes"] is None:
        del flat["head"]
        fields["head"] = None
    for section, changes in flat.items():
        base = fields[section] if section in fields else getattr(current, section, None)
        base = None if base is None else _SECTIONS[section].from_dict(base)
        fields[section] = (_SECTIONS[section].from_dict(changes) if base is None
                           else base.replace(**changes))
    return fields
