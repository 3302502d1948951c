"""ATen operations of one AdamW update under Keras' torch backend against torch's own AdamW:
the minimal reproduction of the optimizer's share of the torch backend's step (issue 19).

    KERAS_BACKEND=torch python benchmarks/optimizer_ops.py
    KERAS_BACKEND=torch python benchmarks/optimizer_ops.py --shapes 64,64 64 --copies 20

No model: a list of float32 variables shaped like those of the default `keras-vit train` model
(55: patch embedding, 3 blocks with separate query/key/value kernels and biases, head), random
gradients, and one update of ``keras.optimizers.AdamW`` (weight decay 0.05, a warmup + cosine
schedule, ``global_clipnorm=1``, as ``keras_vit.training.recipes.pretraining_optimizer``) against
``torch.nn.utils.clip_grad_norm_`` + ``torch.optim.AdamW`` with the same settings (torch's
default implementation for CPU tensors). Counts come from ``torch.profiler``: every dispatched
ATen op, nested ones included, and the top-level ones (what Python asked for); unlike times they
do not depend on the machine's load. The CPU time of the update (median of ``--repeats``) is
printed too.
"""

import argparse
import os
import statistics
import sys
import time

# The default model's variables: patch embedding, per block LayerNorm, q/k/v/out, LayerNorm, MLP,
# then the encoder norm and the head.
BLOCK = [(64,), (64,), (64, 4, 16), (4, 16), (64, 4, 16), (4, 16), (64, 4, 16), (4, 16),
         (4, 16, 64), (64,), (64,), (64,), (64, 256), (256,), (256, 64), (64,)]
DEFAULT_SHAPES = [(7, 7, 1, 64), (64,), (16, 64), *BLOCK * 3, (64,), (64,), (64, 10), (10,)]


def count(function):
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as trace:
        function()
    events = [e for e in trace.events() if e.name.startswith("aten::")]
    top = [e for e in events if e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::")]
    return len(events), len(top)


def cpu_ms(function, repeats):
    times = []
    for _ in range(repeats):
        start = time.process_time()
        function()
        times.append(time.process_time() - start)
    return statistics.median(times) * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", nargs="+", help="variable shapes as comma-separated sizes "
                        "(default: the default model's 55)")
    parser.add_argument("--copies", type=int, default=1, help="repeat the list of shapes")
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's)")
    args = parser.parse_args()
    os.environ.setdefault("KERAS_BACKEND", "torch")
    import keras
    import numpy as np
    import torch

    if keras.backend.backend() != "torch":
        sys.exit("Run with KERAS_BACKEND=torch: the counts are torch.profiler's.")
    if args.threads:
        torch.set_num_threads(args.threads)
    shapes = [tuple(int(v) for v in s.split(",")) for s in args.shapes] if args.shapes \
        else DEFAULT_SHAPES
    shapes = shapes * args.copies
    rng = np.random.default_rng(0)
    values = [rng.normal(size=s).astype("float32") for s in shapes]
    grads = [rng.normal(size=s).astype("float32") for s in shapes]

    from keras_vit.training.recipes import pretraining_optimizer

    variables = [keras.Variable(v) for v in values]
    keras_grads = [torch.from_numpy(g) for g in grads]
    optimizer = pretraining_optimizer(10_000, learning_rate=4e-3, warmup_steps=100,
                                      decay="cosine", weight_decay=0.05, global_clipnorm=1.0)
    optimizer.build(variables)

    def keras_update():
        with torch.no_grad():
            optimizer.apply(keras_grads, variables)

    parameters = [torch.nn.Parameter(torch.from_numpy(v.copy())) for v in values]
    for p, g in zip(parameters, grads):
        p.grad = torch.from_numpy(g)
    torch_optimizer = torch.optim.AdamW(parameters, lr=4e-3, weight_decay=0.05, eps=1e-8)

    def torch_update():
        torch.nn.utils.clip_grad_norm_(parameters, 1.0)
        torch_optimizer.step()

    for update in (keras_update, torch_update):  # build the states before counting
        update()
    print(f"{len(shapes)} variables, {sum(int(np.prod(s)) for s in shapes):,} values; "
          f"torch {torch.__version__}, keras {keras.__version__}, "
          f"{torch.get_num_threads()} threads, load average {os.getloadavg()[0]:.2f}")
    print("| update | ATen ops (all) | ATen ops (top level) | CPU ms, median |")
    print("|---|---|---|---|")
    for name, update in (("keras AdamW, global_clipnorm=1 (torch backend)", keras_update),
                         ("torch clip_grad_norm_ + AdamW", torch_update)):
        total, top = count(update)
        print(f"| {name} | {total} | {top} | {cpu_ms(update, args.repeats):.2f} |")


if __name__ == "__main__":
    sys.exit(main())
