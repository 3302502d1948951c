"""The ``keras-vit`` command line (also ``python -m keras_vit``).

Commands: ``train`` (from scratch), ``finetune``, ``evaluate``, ``fewshot``, ``pretrain-mpp``,
``convert``. Each run writes a folder (``--output``, default ``runs/<command>-<dataset>-<model>``)
with ``model.keras``, ``metrics.json`` (test accuracy, wall time, the whole configuration),
``history.json`` and ``curves.png``; ``presets`` prints the named presets and writes nothing.
``keras-vit train`` with no arguments trains a small ViT on the offline Fashion-MNIST and prints
its test accuracy. What each command does lives in
``keras_vit.app.commands``, the options with their defaults and help in ``keras_vit.app.configs``;
this module only turns those into flags. The backend is chosen before this module is imported
(``keras_vit.app.main``).

Models: ``--model`` takes any ``keras_vit.create_model`` name (``keras_vit.model_names()``: the
ViT, hybrid, BiT and axial models) and ``--set key=value`` overrides any setting (JSON values): a
``ViTConfig`` name for a ViT (``keras_vit.ViTConfig.from_keywords``), a constructor argument for
a ResNet:

    keras-vit train --model ViT-Ti/4 --set hidden_size=96 --set num_layers=6 --epochs 10
    keras-vit train --model BiT-R26x1 --dataset fashion_mnist --image-size 32
    keras-vit train --model ViT-Ti/2 --set 'stem={"num_layers": [2, 2], "width_factor": 1}'
"""

import argparse
import dataclasses
import json
import sys

from keras_vit import distribution
from keras_vit.app import backend_choice, commands
from keras_vit.app.configs import COMMANDS, value_type
from keras_vit.training.published import recipe

# What a command reports as one line and exit status 1, without a traceback: the refusals of bad
# values, missing files and failed downloads (``ValueError``, which ``errors.UsageError`` is,
# ``FileNotFoundError`` and ``keras_vit.downloads``' ``ConnectionError``) that the library and the
# runs raise with what to do instead. Anything else is a bug and keeps its traceback.
USER_ERRORS = (ValueError, FileNotFoundError, ConnectionError)


def _add_option(parser, groups, field):
    """The flag (or positional argument) of one configuration field, from its metadata."""
    options = dict(field.metadata)
    group, positional = options.pop("group"), options.pop("positional", False)
    if group is not None:
        if group not in groups:
            groups[group] = parser.add_argument_group(group)
        parser = groups[group]
    if positional:
        parser.add_argument(field.name, **options)
        return
    kind = value_type(field.type)
    if kind is bool:
        options["action"] = "store_false" if field.default else "store_true"
    elif "action" not in options:
        options["type"] = kind
    default = field.default
    if field.default_factory is not dataclasses.MISSING:
        default = field.default_factory()
    flag = options.pop("flag", "--" + field.name.replace("_", "-"))
    parser.add_argument(flag, dest=field.name, default=default, **options)


def build_parser():
    """The ``keras-vit`` parser: a sub-command per ``keras_vit.app.configs.COMMANDS``."""
    parser = argparse.ArgumentParser(
        prog="keras-vit", description="Train, fine-tune and evaluate Vision Transformers.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    parser.commands = {}
    for name, config in COMMANDS.items():
        command = commands.add_parser(name, help=" ".join(config.__doc__.split()))
        parser.commands[name] = command
        groups = {}
        for field in dataclasses.fields(config):
            _add_option(command, groups, field)
    return parser


def _parse(parser, argv):
    """The arguments; a ``--recipe`` becomes the defaults that the other flags override."""
    args = parser.parse_args(argv)
    if getattr(args, "recipe", None) is not None:
        try:
            options = recipe(args.recipe).options()
        except ValueError as error:
            parser.commands[args.command].error(str(error))
        parser.commands[args.command].set_defaults(**options)
        args = parser.parse_args(argv)
    return args


def _print_result(result):
    if result.get("command") == "presets":
        print(result["table"])
        return
    if result.get("command") == "convert":
        print(f"wrote {result['target']} ({result['num_params']:,} parameters)")
        return
    if result.get("fewshot") is not None:
        for shots, values in result["fewshot"].items():
            print(f"{shots}-shot linear accuracy: {values['mean']:.4f} +- {values['std']:.4f}")
    elif result.get("test_accuracy") is not None:
        published = result.get("published_accuracy")
        beside = f" (published: {published:.4f}, {result['recipe']})" if published else ""
        print(f"test accuracy: {result['test_accuracy']:.4f}{beside}")
    print(f"wall time: {result['wall_time_s']:.1f} s; results in {result['output']}")


def _join():
    """Join the other processes of a multi-process run (``keras_vit.distribution.join``), first:
    nothing has touched a device yet. Says where this process stands, process 0 for them all."""
    cluster = distribution.cluster()
    if cluster is None or cluster.num_processes == 1:
        return
    print(f"keras-vit: {cluster.describe()}", file=sys.stderr, flush=True)
    distribution.join()
    if distribution.is_writer():
        print(f"keras-vit: {distribution.describe_processes()}; process 0 writes the run "
              "folder", flush=True)


def main(argv=None):
    """The command line, for a process whose backend is already chosen (``keras_vit.app.main``
    is the console script's entry point)."""
    parser = build_parser()
    args = _parse(parser, argv)
    if args.command is None:
        parser.print_help()
        return 2
    backend_choice.announce()
    options = vars(args)
    command = options.pop("command")
    try:
        _join()
        with distribution.stopping_together():
            distribution.data_parallel()
            result = commands.run(COMMANDS[command](**options))
    except USER_ERRORS as error:
        print(f"keras-vit {command}: error: {error}", file=sys.stderr)
        return 1
    _print_result(json.loads(json.dumps(result, default=str)))
    return 0
