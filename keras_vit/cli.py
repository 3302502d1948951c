"""The ``keras-vit`` command line (also ``python -m keras_vit``).

Commands: ``train`` (from scratch), ``finetune``, ``evaluate``, ``fewshot``, ``pretrain-mpp``,
``convert``. Each run writes a folder (``--output``, default ``runs/<command>-<dataset>-<model>``)
with ``model.keras``, ``metrics.json`` (test accuracy, wall time, the whole configuration),
``history.json`` and ``curves.png``. ``keras-vit train`` with no arguments trains a small ViT on
the offline Fashion-MNIST and prints its test accuracy. The logic lives in
``keras_vit.training.runs``; this module only parses arguments.

Models: ``--model`` takes any ``keras_vit.create_model`` name ("ViT-S/16", the BiT and hybrid
names once registered) and ``--set key=value`` overrides any constructor argument (JSON values):

    keras-vit train --model ViT-Ti/4 --set hidden_size=96 --set num_layers=6 --epochs 10
    keras-vit train --model BiT-R26x1 --dataset fashion_mnist --image-size 32
    keras-vit train --model ViT-Ti/2 --set 'resnet={"num_layers": [2, 2], "width_factor": 1}'
"""

import argparse
import json
import sys

DECAYS = ("cosine", "linear")
AUGMENTATIONS = ("inception_crop", "resize_crop", "pad_crop", "resize")


def _data_args(parser, dataset="fashion_mnist", batch_size=128):
    group = parser.add_argument_group("data")
    group.add_argument("--dataset", default=dataset,
                       help=f"dataset name (default {dataset}); see keras_vit.data.DATASETS")
    group.add_argument("--data-dir", help="Fashion-MNIST folder or tensorflow-datasets data_dir")
    group.add_argument("--image-size", type=int,
                       help="model resolution (default: the dataset's own, BiT rule for tfds)")
    group.add_argument("--batch-size", type=int, default=batch_size, help="global batch size")
    group.add_argument("--train-examples", type=int, help="use only the first N training examples")
    group.add_argument("--test-examples", type=int, help="use only the first N test examples")
    group.add_argument("--seed", type=int, default=0)
    return group


def _augmentation_args(group):
    group.add_argument("--augmentation", choices=AUGMENTATIONS,
                       help="train crop (default: pad_crop by 1 px, i.e. shifts of at most 1 px, "
                       "for the offline datasets; inception_crop for tfds at a set size; "
                       "resize_crop with BiT's rule)")
    group.add_argument("--resize-size", type=int, help="side before the random crop (default: "
                       "image size + 2 for the offline datasets, BiT's rule for tfds)")
    group.add_argument("--no-flip", action="store_true", help="no random horizontal flip")
    group.add_argument("--mixup", type=float, default=0.0, help="mixup alpha (0: off)")


def _model_args(parser):
    group = parser.add_argument_group("model")
    group.add_argument("--model", help="create_model name; default: a small ViT "
                       "(ViT-Ti/7 with hidden_size=64, num_layers=3, num_heads=4, mlp_dim=256, "
                       "classifier=gap, the dataset's channels)")
    group.add_argument("--set", action="append", metavar="KEY=VALUE", default=[],
                       help="override a model constructor argument (repeatable, JSON values)")
    group.add_argument("--dropout", type=float, help="dropout_rate")
    group.add_argument("--head-bias-init", type=float, help="constant head bias (paper: -10)")


def _optimizer_args(parser, *, learning_rate, weight_decay=None, decay="cosine",
                    label_smoothing=0.0):
    group = parser.add_argument_group("optimization")
    group.add_argument("--learning-rate", type=float, default=learning_rate)
    if weight_decay is not None:
        group.add_argument("--weight-decay", type=float, default=weight_decay,
                           help="AdamW decoupled weight decay (paper convention, x lr)")
    group.add_argument("--warmup-steps", type=int,
                       help="linear warmup steps (default: one epoch, at most 10%% of the run)")
    group.add_argument("--decay", choices=DECAYS, default=decay)
    group.add_argument("--label-smoothing", type=float, default=label_smoothing)
    return group


def _output_args(parser):
    parser.add_argument("--output", help="run folder (default runs/<command>-<dataset>-<model>)")
    parser.add_argument("--verbose", type=int, choices=(0, 1, 2), default=1,
                        help="Keras progress output: 0 silent, 1 bars, 2 one line per epoch")


def build_parser():
    parser = argparse.ArgumentParser(
        prog="keras-vit", description="Train, fine-tune and evaluate Vision Transformers.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    train = commands.add_parser("train", help="train from scratch (default: small ViT, "
                                "offline Fashion-MNIST)")
    _augmentation_args(_data_args(train, batch_size=256))
    _model_args(train)
    optimization = _optimizer_args(train, learning_rate=4e-3, weight_decay=0.05,
                                   label_smoothing=0.1)
    optimization.add_argument("--epochs", type=int, default=23)
    optimization.add_argument("--clipnorm", type=float, default=1.0, help="global gradient norm")
    train.add_argument("--no-validate", dest="validate", action="store_false",
                       help="skip the test-set evaluations during training")
    train.add_argument("--validate-every", type=int, default=4, metavar="N",
                       help="evaluate on the test set every N epochs and after the last one "
                       "(the points of the test curves)")
    _output_args(train)

    finetune = commands.add_parser("finetune", help="fine-tune a saved model (SGD, new head, "
                                   "optionally at a higher resolution)")
    finetune.add_argument("checkpoint", help="a .keras model or an official .npz")
    _augmentation_args(_data_args(finetune, dataset="digits"))
    finetune.add_argument("--examples-per-class", type=int, help="a k-shot training subset")
    optimization = _optimizer_args(finetune, learning_rate=0.01)
    optimization.add_argument("--steps", type=int, default=500)
    optimization.add_argument("--eval-every", type=int, default=50, help="steps per 'epoch'")
    optimization.add_argument("--use-ema", action="store_true", help="Polyak averaging")
    optimization.add_argument("--ema-momentum", type=float, default=0.999)
    _output_args(finetune)

    evaluate = commands.add_parser("evaluate", help="test accuracy of a saved model")
    evaluate.add_argument("checkpoint", help="a .keras model or an official .npz")
    _data_args(evaluate)
    evaluate.add_argument("--split", default="test")
    _output_args(evaluate)

    fewshot = commands.add_parser("fewshot", help="few-shot linear evaluation of frozen features")
    fewshot.add_argument("checkpoint", help="a .keras model or an official .npz")
    _data_args(fewshot, dataset="digits")
    fewshot.add_argument("--shots", type=int, nargs="+", default=[1, 5, 10, 25])
    fewshot.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    fewshot.add_argument("--l2-reg", type=float, default=2.0 ** 10)
    _output_args(fewshot)

    mpp = commands.add_parser("pretrain-mpp", help="masked patch prediction self-supervision")
    data = _data_args(mpp)
    data.add_argument("--augmentation", choices=AUGMENTATIONS)
    _model_args(mpp)
    optimization = _optimizer_args(mpp, learning_rate=2e-3, weight_decay=0.05)
    optimization.add_argument("--epochs", type=int, default=4)
    mpp.add_argument("--target", default="color_3bit",
                     help="prediction target (color_3bit; see keras_vit.training.mpp)")
    mpp.add_argument("--corrupt-rate", type=float, default=0.5)
    _output_args(mpp)

    convert = commands.add_parser(
        "convert", help="between .keras, official .npz, timm, transformers, ONNX, SavedModel, "
                        "TFLite")
    convert.add_argument("source", help=".keras, official .npz (or published name), timm "
                                        ".safetensors/.pth/.bin, or a transformers folder")
    convert.add_argument("target", help=".keras, .npz, .safetensors/.pth/.bin (timm), .onnx, "
                                        ".tflite, or a folder with --format")
    convert.add_argument("--format", help="target format: keras, official, timm, transformers, "
                                          "onnx, saved_model or tflite (default: from the name)")
    convert.add_argument("--source-format", help="source format: keras, official, timm or "
                                                 "transformers (default: from the name)")
    convert.add_argument("--num-heads", type=int,
                         help="heads of a timm ViT whose width is not one of timm's named sizes")
    convert.add_argument("--tanh-gelu", action="store_true",
                         help="a timm source uses the tanh GELU (act_layer='gelu_tanh'); a state "
                              "dict does not record it and timm's default is the exact GELU")
    convert.add_argument("--batch-size", type=int,
                         help="fixed batch size of an export (default: any; torch ONNX: 1)")
    return parser


def _print_result(result):
    if result.get("command") == "convert":
        print(f"wrote {result['target']} ({result['num_params']:,} parameters)")
        return
    if result.get("fewshot") is not None:
        for shots, values in result["fewshot"].items():
            print(f"{shots}-shot linear accuracy: {values['mean']:.4f} +- {values['std']:.4f}")
    elif result.get("test_accuracy") is not None:
        print(f"test accuracy: {result['test_accuracy']:.4f}")
    print(f"wall time: {result['wall_time_s']:.1f} s; results in {result['output']}")


def main(argv=None):
    """Entry point of the ``keras-vit`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    from keras_vit import backend_choice
    from keras_vit.distribution import data_parallel
    from keras_vit.training import runs

    backend_choice.announce()

    config = vars(args)
    command = config.pop("command")
    function = {"train": runs.train, "finetune": runs.finetune, "evaluate": runs.evaluate,
                "fewshot": runs.fewshot, "pretrain-mpp": runs.pretrain_mpp,
                "convert": runs.convert}[command]
    try:
        data_parallel()
        result = function(config)
    except (ValueError, FileNotFoundError, TypeError) as error:
        print(f"keras-vit {command}: error: {error}", file=sys.stderr)
        return 1
    _print_result(json.loads(json.dumps(result, default=str)))
    return 0
