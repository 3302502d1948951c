"""Accuracy and wall time of ``keras-vit train`` runs (default: the no-argument run).

Runs the command line in a subprocess, times it from the outside, and prints one line per run
with the test accuracy, the wall time, the process CPU time and the machine's load average (other
processes sharing the CPU slow the wall time down; CPU time / cores is the unshared estimate).

    KERAS_BACKEND=jax python benchmarks/accuracy.py                      # the README number
    KERAS_BACKEND=jax python benchmarks/accuracy.py -- --model BiT-R26x1 --image-size 32
"""

import json
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(extra, output):
    command = [sys.executable, "-m", "keras_vit", "train", "--verbose", "2", "--output", output,
               *extra]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    load_before = os.getloadavg()
    started = time.time()
    subprocess.run(command, check=True, cwd=ROOT, env=env)
    wall = time.time() - started
    with open(os.path.join(output, "metrics.json")) as f:
        metrics = json.load(f)
    return {
        "args": extra,
        "backend": metrics["backend"],
        "test_accuracy": metrics["test_accuracy"],
        "wall_time_s": round(wall, 1),
        "cpu_time_s": metrics.get("cpu_time_s"),
        "train_time_s": metrics["train_time_s"],
        "num_params": metrics["num_params"],
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "cpu_count": os.cpu_count(),
    }


def main(argv):
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    name = "default" if not extra else "-".join(a.strip("-").replace("/", "") for a in extra)[:80]
    output = os.path.join(ROOT, "runs", f"benchmark-{name}")
    shutil.rmtree(output, ignore_errors=True)  # timed from scratch: never resume an old run
    result = run(extra, output)
    print(json.dumps(result, indent=2))
    verdict = "meets" if result["test_accuracy"] >= 0.90 and result["wall_time_s"] <= 600 else \
        "misses"
    print(f"test accuracy {result['test_accuracy']:.4f} in {result['wall_time_s']:.0f} s wall "
          f"({verdict} the >= 90% in 10 minutes target); load average "
          f"{result['load_average_before'][0]:.1f} -> {result['load_average_after'][0]:.1f} "
          f"on {result['cpu_count']} cores")
    with open(os.path.join(output, "benchmark.json"), "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main(sys.argv[1:])
