"""One typed configuration per ``keras-vit`` command: its options, their defaults and help.

``keras_vit.app.cli`` builds each command's flags from these dataclasses (a field
``batch_size`` is the flag ``--batch-size``, its metadata the help), and the commands
(``keras_vit.app.commands``) take them, so a default is written once. Programs may pass a dict
instead (``from_dict``), which fills in the same defaults and rejects unknown keys.

Example:
>>> config = TrainConfig.from_dict({"epochs": 2})
>>> config.epochs, config.batch_size, config.learning_rate, config.time_budget
(2, 256, 0.004, 600.0)
>>> try:
...     TrainConfig.from_dict({"epoch": 2})
... except ValueError as error:
...     print(str(error).split(";")[0])
Unknown train option 'epoch' (did you mean 'epochs'?)
"""

import dataclasses
import difflib
import numbers
import sys
import types
import typing

from keras_vit import distribution
from keras_vit.app.errors import UsageError
from keras_vit.checkpoints.convert import CONVERT_FORMATS
from keras_vit.checkpoints.formats import FORMATS, NAMES
from keras_vit.data.preprocessing import TRAIN_AUGMENTATIONS
from keras_vit.models.lora import TARGETS as LORA_TARGETS
from keras_vit.training.augreg import AUGMENTATIONS
from keras_vit.training.published import RECIPES, recipe
from keras_vit.training.schedules import DECAYS

# Help texts are argparse's: "%(default)s" is the flag's default, "%%" a percent sign.
CHECKPOINT_HELP = "a .keras model, " + ", ".join(f.what for f in FORMATS)
DATASET_HELP = "dataset name (default %(default)s); see keras_vit.data.DATASETS"
CROP_HELP = "train crop (default %(default)s)"

@dataclasses.dataclass(frozen=True)
class SmallModel:
    """A model ``keras-vit train`` and ``pretrain-mpp`` build by a short name (``--model
    small-hybrid``), with the dataset's channels: the ``create_model`` name, its overrides, the
    image side it takes (None: the dataset's own) and what the help says of it."""

    name: str
    overrides: dict
    image_size: int | None
    about: str


# A narrow, shallow encoder for small images: width 64, 3 layers, the paper's MLP ratio of 4,
# global average pooling. Chosen for the most accuracy per unit of CPU time among the shapes
# tried (finer patches and deeper or wider encoders cost more per step than they gain per
# epoch); the epochs are not fixed but fill --time-budget. The runs behind both: docs/results.md.
_SMALL_ENCODER = {"hidden_size": 64, "num_layers": 3, "num_heads": 4, "mlp_dim": 256,
                  "classifier": "gap"}
SMALL_MODELS = {
    "small-vit": SmallModel("ViT-Ti/7", _SMALL_ENCODER, None,
                            "the small encoder on 7x7 pixel patches"),
    # The paper's hybrid (Sec. 3.1) with the ResNet root alone (a 7x7 convolution and a max
    # pool, stride 4, half width) and 2x2 patches of its feature map: 32 px images give the
    # small ViT's 4x4 grid of 28 px ones. It learns more per epoch than it loses per step
    # (Sec. 4.4: hybrids lead at small compute): level or ahead at every budget measured.
    "small-hybrid": SmallModel("R+ViT-Ti/16",
                               dict(_SMALL_ENCODER, patch_size=2, stem_width_factor=0.5), 32,
                               "the small encoder on 2x2 patches of a half-width ResNet root, "
                               "at 32 px"),
}
SMALL_DEFAULT = "small-vit"


def option(default=None, help=None, *, group=None, **flag):
    """A dataclass field with its command-line form: ``help``, argparse ``group`` and any
    ``argparse.add_argument`` keyword (``choices``, ``nargs``, ``metavar``, ``flag`` for another
    flag name, ``positional=True`` for an argument without one)."""
    metadata = dict(flag, help=help, group=group)
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata=metadata)
    if default is dataclasses.MISSING:
        return dataclasses.field(metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def value_type(annotation):
    """``int`` for ``int``, ``int | None`` and ``list[int]``: the type of one value."""
    if typing.get_origin(annotation) in (list, types.UnionType, typing.Union):
        return next(a for a in typing.get_args(annotation) if a is not type(None))
    return annotation


@dataclasses.dataclass(kw_only=True)
class Config:
    """Base of the command configurations. A command's docstring is its ``keras-vit`` help
    line; ``command`` its name."""

    command: typing.ClassVar[str]

    @classmethod
    def from_dict(cls, values):
        """This configuration from ``values`` (missing keys: the defaults; numbers converted)."""
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - set(fields))
        if unknown:
            close = difflib.get_close_matches(unknown[0], fields, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"Unknown {cls.command} option {unknown[0]!r}{hint}; the options "
                             f"are: {', '.join(fields)}.")
        missing = [name for name, f in fields.items() if name not in values
                   and f.default is f.default_factory is dataclasses.MISSING]
        if missing:
            raise ValueError(f"The {cls.command} configuration needs {', '.join(missing)}.")
        converted = {}
        for key, value in values.items():
            kind = value_type(fields[key].type)
            if kind is int and isinstance(value, numbers.Integral) or \
                    kind is float and isinstance(value, numbers.Real):
                value = kind(value)  # numpy numbers, and ints for floats: JSON-able, exact type
            converted[key] = value
        return cls(**converted)

    @classmethod
    def coerce(cls, config):
        """``config`` itself when it is this dataclass, else ``from_dict(config)``."""
        return config if isinstance(config, cls) else cls.from_dict(config)

    def to_dict(self):
        return dataclasses.asdict(self)


@dataclasses.dataclass(kw_only=True)
class DataOptions(Config):
    dataset: str = option("fashion_mnist", DATASET_HELP, group="data")
    data_dir: str | None = option(None, "Fashion-MNIST folder or tensorflow-datasets data_dir",
                                  group="data")
    image_size: int | None = option(None, "model resolution (default: the dataset's own, BiT "
                                    "rule for tfds)", group="data")
    batch_size: int = option(128, "global batch size", group="data")
    train_examples: int | None = option(None, "use only the first N training examples",
                                        group="data")
    test_examples: int | None = option(None, "use only the first N test examples", group="data")
    seed: int = option(0, group="data")


@dataclasses.dataclass(kw_only=True)
class AugmentationOptions(DataOptions):
    augmentation: str | None = option(
        None, "train crop (default: pad_crop by 1 px, i.e. shifts of at most 1 px, for the "
        "offline datasets; inception_crop for tfds at a set size; resize_crop with BiT's rule)",
        group="data", choices=TRAIN_AUGMENTATIONS)
    resize_size: int | None = option(None, "side before the random crop (default: image size + 2 "
                                     "for the offline datasets, BiT's rule for tfds)",
                                     group="data")
    no_flip: bool = option(False, "no random horizontal flip", group="data")
    mixup: float = option(0.0, "mixup alpha (0: off)", group="data")
    augreg: str | None = option(
        None, "AugReg's augmentation by its name: RandAugment and mixup as big_vision's "
        "vit_i1k config defines them (keras_vit.training.augreg; with --dropout, "
        "--stochastic-depth and --weight-decay, its other axes)", group="data",
        choices=tuple(AUGMENTATIONS))

    def mixing(self):
        """The training pipeline's options beyond the crop and flip: BiT's mixup (``--mixup``)
        or AugReg's RandAugment and mixup (``--augreg``), never both.

        >>> TrainConfig.from_dict({"augreg": "medium2"}).mixing()
        {'randaugment': (2, 15), 'mixup_p': 0.5}
        """
        if self.augreg is None:
            return {"mixup_alpha": self.mixup}
        if self.mixup:
            raise UsageError(f"--mixup {self.mixup} (BiT's mixup) and --augreg {self.augreg} "
                             "(which has its own mixup) do not combine; give one of them.")
        setting = AUGMENTATIONS[self.augreg]
        return {"randaugment": setting.randaugment, "mixup_p": setting.mixup}


@dataclasses.dataclass(kw_only=True)
class ModelOptions(Config):
    model: str | None = option(
        None, "a create_model name (ViT-B/16, R+ViT-Ti/16, BiT-R50x1...) or a small model with "
        "the dataset's channels: " + "; ".join(f"{k}: {m.about}" for k, m in SMALL_MODELS.items())
        + " (default: the command's small model for the dataset, train: small-hybrid on "
        "fashion_mnist, small-vit elsewhere; pretrain-mpp: small-vit)", group="model")
    set: list[str] = option([], "override a model setting by its description's name: a "
                            "ViTConfig name for a ViT (hidden_size, stem...), a ResNetConfig "
                            "name for a ResNet (block_units, width_factor...) (repeatable, JSON "
                            "values)", group="model", action="append",
                            metavar="KEY=VALUE")
    dropout: float | None = option(None, "dropout_rate", group="model")
    stochastic_depth: float | None = option(
        None, "stochastic_depth_rate: the last block's rate of dropping a residual branch",
        group="model")
    head_bias_init: float | None = option(None, "constant head bias (paper: -10)", group="model")


@dataclasses.dataclass(kw_only=True)
class OptimizerOptions(Config):
    learning_rate: float = option(dataclasses.MISSING, group="optimization")
    warmup_steps: int | None = option(None, "linear warmup steps (default: one epoch, at most "
                                      "10%% of the run)", group="optimization")
    decay: str = option("cosine", group="optimization", choices=DECAYS)
    label_smoothing: float = option(0.0, group="optimization")


@dataclasses.dataclass(kw_only=True)
class PretrainingOptions(OptimizerOptions):
    weight_decay: float = option(0.05, "AdamW decoupled weight decay (paper convention, x lr)",
                                 group="optimization")


@dataclasses.dataclass(kw_only=True)
class OutputOptions(Config):
    output: str | None = option(None, "run folder (default runs/<command>-<dataset>-<model>)")
    verbose: int | None = option(None, "Keras progress output: 0 silent, 1 a bar redrawn every "
                                 "step, 2 one line per epoch (default: 1 on a terminal, else 2)",
                                 choices=(0, 1, 2))

    def keras_verbose(self, stream=None):
        """``fit``'s ``verbose``: the one given, else the bar on a terminal and one line per
        epoch elsewhere (a file, CI, a notebook's saved output), where the bar's redraws would
        be thousands of ``\\r``-joined, colour-coded updates and no epoch line. In a run of
        several processes only process 0 shows its progress.

        >>> import io
        >>> TrainConfig.from_dict({}).keras_verbose(io.StringIO())
        2
        >>> TrainConfig.from_dict({"verbose": 1}).keras_verbose(io.StringIO())
        1
        """
        if not distribution.is_writer():
            return 0
        if self.verbose is not None:
            return self.verbose
        stream = sys.stdout if stream is None else stream
        return 1 if getattr(stream, "isatty", lambda: False)() else 2


@dataclasses.dataclass(kw_only=True)
class TrainConfig(OutputOptions, PretrainingOptions, ModelOptions, AugmentationOptions):
    """train from scratch (default: a small hybrid ResNet+ViT on offline Fashion-MNIST)"""

    # The defaults are the run docs/results.md measures: change both together.

    command: typing.ClassVar[str] = "train"
    # The model without --model, by dataset (the others: SMALL_DEFAULT): the hybrid where it
    # was measured against the small ViT.
    DEFAULT_MODELS: typing.ClassVar[dict] = {"fashion_mnist": "small-hybrid"}
    batch_size: int = option(256, "global batch size", group="data")
    learning_rate: float = option(4e-3, group="optimization")
    label_smoothing: float = option(0.1, group="optimization")
    epochs: int | None = option(None, "fixed number of epochs (default: as many as "
                                "--time-budget allows on this machine)", group="optimization")
    time_budget: float = option(600.0, "wall-clock seconds of the whole run, evaluation and "
                                "saving included: the epochs are planned from the step time "
                                "measured before training, unless --epochs is given",
                                group="optimization", metavar="SECONDS")
    clipnorm: float = option(1.0, "global gradient norm", group="optimization")
    validate: bool = option(True, "skip the test-set evaluations during training",
                            flag="--no-validate")
    validate_every: int = option(4, "evaluate on the test set every N epochs and after the last "
                                 "one (the points of the test curves)", metavar="N")

    def crop(self, info, image_size, resize_size):
        """``(augmentation, resize_size)`` of the training images; unless chosen: vit_jax's
        Inception crop for tfds data at a set size, BiT's resize + crop with BiT's resolution
        rule, and for the small offline images flips and shifts of at most one pixel
        (zero-padding by 1 then a random crop): larger crops slow a run of a few epochs down."""
        if info.source == "offline":
            augmentation, resize_size = "pad_crop", image_size + 2
        else:
            augmentation = "inception_crop" if resize_size is None else "resize_crop"
        return self.augmentation or augmentation, self.resize_size or resize_size


@dataclasses.dataclass(kw_only=True)
class FinetuneConfig(OutputOptions, OptimizerOptions, AugmentationOptions):
    """fine-tune a saved model (the official SGD step, new head, optionally at a higher
    resolution), or run a published fine-tune by name (--recipe)"""

    command: typing.ClassVar[str] = "finetune"
    checkpoint: str | None = option(None, CHECKPOINT_HELP + " (default: the recipe's)",
                                    positional=True, nargs="?")
    recipe: str | None = option(
        None, "a published fine-tune that sets the checkpoint, data, resolution, batch, "
        "accumulation, steps and schedule; other flags override it: "
        f"{', '.join(RECIPES)}", group="recipe", metavar="NAME")
    dataset: str = option("digits", DATASET_HELP, group="data")
    train_split: str = option("train", "training split (tfds split strings too: 'train[:98%%]')",
                              group="data")
    test_split: str = option("test", "evaluation split", group="data")
    augmentation: str = option("resize_crop", CROP_HELP, group="data",
                               choices=TRAIN_AUGMENTATIONS)
    examples_per_class: int | None = option(None, "a k-shot training subset", group="data")
    accumulation: int | None = option(
        None, "gradient accumulation: micro-batches of batch-size / N averaged into one update "
        "(official accum_steps); default: on an accelerator or with --memory-gib the smallest "
        "that fits the device's memory, else the recipe's (8) or 1", group="optimization",
        metavar="N")
    memory_gib: float | None = option(
        None, "memory of one device in GiB for choosing the accumulation (default: known from "
        "the accelerator's kind: TPU v5e 16, T4 15, ...; none on a CPU)", group="optimization",
        metavar="G")
    learning_rate: float = option(0.01, group="optimization")
    steps: int = option(500, "updates", group="optimization")
    eval_every: int = option(50, "updates per 'epoch'", group="optimization")
    clipnorm: float = option(1.0, "global gradient norm", group="optimization")
    momentum_dtype: str = option("bfloat16", "dtype of the stored momentum (official: "
                                 "bfloat16)", group="optimization",
                                 choices=("bfloat16", "float32"))
    use_ema: bool = option(False, "Polyak averaging", group="optimization")
    ema_momentum: float = option(0.999, group="optimization")
    lora_rank: int | None = option(
        None, "train rank-R LoRA factors of the attention projections (--lora-targets) and the "
        "head, every other weight frozen; the saved model has the factors merged into its "
        "kernels", group="lora", metavar="R")
    lora_targets: str = option("qv", "projections --lora-rank adapts: qv (query and value, the "
                               "LoRA paper's) or all (every attention projection)",
                               group="lora", choices=tuple(LORA_TARGETS))

    @classmethod
    def from_dict(cls, values):
        """As ``Config.from_dict``; a ``recipe`` fills in its settings under ``values``."""
        if values.get("recipe") is not None:
            values = {**recipe(values["recipe"]).options(), **values}
        return super().from_dict(values)


@dataclasses.dataclass(kw_only=True)
class EvaluateConfig(OutputOptions, DataOptions):
    """test accuracy of a saved model"""

    command: typing.ClassVar[str] = "evaluate"
    checkpoint: str = option(dataclasses.MISSING, CHECKPOINT_HELP, positional=True)
    split: str = option("test", "dataset split")


@dataclasses.dataclass(kw_only=True)
class FewshotConfig(OutputOptions, DataOptions):
    """few-shot linear evaluation of frozen features"""

    command: typing.ClassVar[str] = "fewshot"
    checkpoint: str = option(dataclasses.MISSING, CHECKPOINT_HELP, positional=True)
    dataset: str = option("digits", DATASET_HELP, group="data")
    shots: list[int] = option([1, 5, 10, 25], "training examples per class", nargs="+")
    seeds: list[int] = option([0, 1, 2], "random subsets per shot count", nargs="+")
    l2_reg: float = option(2.0 ** 10, "ridge regression's L2 regularisation")


@dataclasses.dataclass(kw_only=True)
class PretrainMppConfig(OutputOptions, PretrainingOptions, ModelOptions, DataOptions):
    """masked patch prediction self-supervision"""

    command: typing.ClassVar[str] = "pretrain-mpp"
    # Masked patch prediction predicts the pixels of each patch: a plain ViT's patches.
    DEFAULT_MODELS: typing.ClassVar[dict] = {}
    augmentation: str = option("resize_crop", CROP_HELP, group="data",
                               choices=TRAIN_AUGMENTATIONS)
    learning_rate: float = option(2e-3, group="optimization")
    epochs: int = option(4, group="optimization")
    target: str = option("color_3bit", "prediction target (color_3bit; see "
                         "keras_vit.training.mpp)")
    corrupt_rate: float = option(0.5)

    def crop(self, info, image_size, resize_size):
        """``(augmentation, resize_size)`` of the training images: BiT's resolution rule."""
        return self.augmentation, resize_size


@dataclasses.dataclass(kw_only=True)
class ConvertConfig(Config):
    """between .keras, the checkpoint formats (official .npz, timm, transformers, keras-hub),
    ONNX, SavedModel, TFLite"""

    command: typing.ClassVar[str] = "convert"
    source: str = option(dataclasses.MISSING, CHECKPOINT_HELP, positional=True)
    target: str = option(dataclasses.MISSING, ".keras, .npz, .safetensors/.pth/.bin (timm), "
                         ".onnx, .tflite, or a folder with --format", positional=True)
    format: str | None = option(None, f"target format: {', '.join(CONVERT_FORMATS)} (default: "
                                "from the name)")
    source_format: str | None = option(None, f"source format: keras, {', '.join(NAMES)} "
                                       "(default: from the name)")
    num_heads: int | None = option(None, "heads of a timm ViT whose width is not one of timm's "
                                   "named sizes")
    tanh_gelu: bool = option(False, "a timm source uses the tanh GELU (act_layer='gelu_tanh'); a "
                             "state dict does not record it and timm's default is the exact GELU")
    batch_size: int | None = option(None, "fixed batch size of an export (default: any; torch "
                                    "ONNX: 1)")


@dataclasses.dataclass(kw_only=True)
class PresetsConfig(Config):
    """list the named presets: checkpoint, resolution, classes, parameters, source"""

    command: typing.ClassVar[str] = "presets"


COMMANDS = {c.command: c for c in (TrainConfig, FinetuneConfig, EvaluateConfig, FewshotConfig,
                                   PretrainMppConfig, ConvertConfig, PresetsConfig)}
