"""Seconds of the whole `keras-vit train` job on each Keras backend: what the backend choice of
``keras_vit/app/backend_choice.py`` is measured on.

    python benchmarks/train_job.py                          # 2 epochs of 30 steps, 2 rounds
    python benchmarks/train_job.py --epochs 3 --rounds 3 --backends jax tensorflow
    python benchmarks/train_job.py -- --train-examples 60000   # after --: keras-vit train flags
    python benchmarks/train_job.py --backends torch torch:GOMP_SPINCOUNT=10000 --busy 2

A backend may set environment variables for its runs (``torch:OMP_WAIT_POLICY=ACTIVE``, several
joined by commas), so that settings of one backend compare side by side. ``--busy N`` keeps N
processes spinning on the CPU through the whole benchmark: a stand-in for a machine whose cores
other programs share (a notebook's other kernel, another user of a hosted runtime).

Each round runs ``python -m keras_vit train`` once per backend, in a rotating order, so that load
from other programs on a shared machine hits all of them alike. The job is the default one (its
data, model, optimizer, the test-set evaluation after every epoch) on the first
``--train-examples`` examples, so that an epoch is short; the table gives each epoch's seconds
(from the run's history.json: fit and evaluation), the later epochs' median, and the command's
wall time (start-up, compilation and the final evaluation included), with the load average.
"""

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time

BACKENDS = ("tensorflow", "jax", "torch")


def parse_backend(text):
    """``(backend, environment)`` of ``"torch:NAME=VALUE,NAME=VALUE"``."""
    backend, _, settings = text.partition(":")
    if backend not in BACKENDS:
        raise SystemExit(f"Unknown backend {backend!r} in {text!r}: one of {', '.join(BACKENDS)}, "
                         "optionally followed by :NAME=VALUE,... environment variables")
    environment = {}
    for setting in filter(None, settings.split(",")):
        name, equals, value = setting.partition("=")
        if not equals:
            raise SystemExit(f"{setting!r} in {text!r} is not NAME=VALUE")
        environment[name] = value
    return backend, environment


def spin():
    while True:
        pass


def run_job(name, epochs, extra, folder):
    """One ``keras-vit train`` run; its per-epoch seconds and wall time."""
    backend, environment = parse_backend(name)
    output = os.path.join(folder, f"{backend}-{time.monotonic_ns()}")
    env = dict(os.environ, KERAS_BACKEND=backend, **environment)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    command = [sys.executable, "-m", "keras_vit", "train", "--epochs", str(epochs),
               "--verbose", "0", "--output", output, *extra]
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(f"keras-vit train on {backend} failed (exit {done.returncode}):\n"
                           f"{done.stderr[-3000:]}")
    with open(os.path.join(output, "history.json")) as file:
        epochs_s = [record["seconds"] for record in json.load(file)]
    with open(os.path.join(output, "metrics.json")) as file:
        accuracy = json.load(file).get("test_accuracy")
    return {"epochs": epochs_s, "wall": wall, "accuracy": accuracy,
            "load": os.getloadavg()[0]}


def table(results):
    lines = ["| backend | epoch 1 (compiles), s | later epochs, s, median (range) | "
             "wall time, s, median (range) | load average (1 min) |",
             "|---|---|---|---|---|"]
    for backend, runs in results.items():
        if not runs:
            continue
        first = ", ".join(f"{r['epochs'][0]:.1f}" for r in runs)
        later = [s for r in runs for s in r["epochs"][1:]]
        walls = [r["wall"] for r in runs]
        loads = ", ".join(f"{r['load']:.1f}" for r in runs)
        later_text = (f"{statistics.median(later):.1f} ({min(later):.1f}-{max(later):.1f})"
                      if later else "-")
        lines.append(f"| {backend} | {first} | {later_text} | {statistics.median(walls):.1f} "
                     f"({min(walls):.1f}-{max(walls):.1f}) | {loads} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS),
                        help="backends, each optionally with environment variables for its "
                        "runs: torch:OMP_WAIT_POLICY=ACTIVE,GOMP_SPINCOUNT=0")
    parser.add_argument("--busy", type=int, default=0, metavar="N",
                        help="processes kept spinning on the CPU during the benchmark")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--train-examples", type=int, default=7680,
                        help="examples per epoch (default 7680: 30 steps of 256)")
    parser.add_argument("extra", nargs="*", help="more keras-vit train flags, after --")
    args = parser.parse_args()
    for name in args.backends:
        parse_backend(name)
    extra = ["--train-examples", str(args.train_examples), *args.extra]
    print(f"keras-vit train --epochs {args.epochs} {' '.join(extra)}; rounds={args.rounds} "
          f"cpus={os.cpu_count()} date={time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} "
          f"load={os.getloadavg()[0]:.1f} busy={args.busy}")
    spinners = [multiprocessing.Process(target=spin, daemon=True) for _ in range(args.busy)]
    for spinner in spinners:
        spinner.start()
    results = {backend: [] for backend in args.backends}
    with tempfile.TemporaryDirectory() as folder:
        for r in range(args.rounds):
            turn = args.backends[r % len(args.backends):] + args.backends[:r % len(args.backends)]
            for backend in turn:
                results[backend].append(run_job(backend, args.epochs, extra, folder))
                result = results[backend][-1]
                print(f"  round {r + 1}, {backend}: epochs "
                      + ", ".join(f"{s:.1f}" for s in result["epochs"])
                      + f" s, wall {result['wall']:.1f} s, accuracy {result['accuracy']}, "
                      f"load {result['load']:.1f}", file=sys.stderr)
    for spinner in spinners:
        spinner.terminate()
    print(table(results))


if __name__ == "__main__":
    sys.exit(main())
