"""Accuracy and wall time of ``keras-vit train`` runs (default: the no-argument run).

Runs the command line in a subprocess, times it from the outside, and prints the test accuracy,
the wall time, the process CPU time, the machine's load average (other processes sharing the CPU
slow the wall time down; CPU time / cores is the unshared estimate) and the run's plan: the step
time it measured before training, the epochs it chose for its ``--time-budget``, the time it
expected and the epochs it trained after its re-plans. The verdict line checks the project's bar:
test accuracy >= 0.91 within the budget.

    python benchmarks/accuracy.py                      # the README's command, 600 s budget
    python benchmarks/accuracy.py -- --time-budget 400 # the bar on an idle machine
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
        "plan": metrics.get("plan"),
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
    plan = result["plan"] or {}
    budget = plan.get("budget_seconds") or 600
    if "costs" in plan:
        costs = plan["costs"]
        print(f"plan: {costs['step_seconds'] * 1e3:.1f} ms a step ({costs['steps_measured']} "
              f"steps measured), {plan['steps_per_epoch']} steps an epoch, {plan['epochs']} "
              f"epochs, expected {plan['expected_seconds']:.0f} s of {budget:g} s; trained "
              f"{plan.get('final_epochs')} after {len(plan.get('replans', []))} re-plans")
    else:
        print(f"plan: {plan}")
    verdict = "meets" if result["test_accuracy"] >= 0.91 and result["wall_time_s"] <= budget \
        else "misses"
    print(f"test accuracy {result['test_accuracy']:.4f} in {result['wall_time_s']:.0f} s wall "
          f"({verdict} the >= 0.91 within {budget:g} s bar); backend {result['backend']}, load "
          f"average {result['load_average_before'][0]:.1f} -> "
          f"{result['load_average_after'][0]:.1f} on {result['cpu_count']} cores, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    with open(os.path.join(output, "benchmark.json"), "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main(sys.argv[1:])
