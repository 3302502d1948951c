"""benchmarks/gpu_other_half.py, the second GPU benchmark, runs whole at toy size on the CPU:
between the rare lends of a GPU it must not rot."""

import json
import os
import subprocess
import sys
import types

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import gpu_other_half  # noqa: E402


def _positive(values):
    return all(isinstance(v, (int, float)) and v > 0 for v in values)


def test_the_toy_run_measures_every_part_and_writes_its_json(tmp_path):
    out = tmp_path / "other_half.json"
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("KERAS_BACKEND", None)  # each worker sets its own
    done = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "gpu_other_half.py"),
                           "--size", "toy", "--out", str(out)], capture_output=True, text=True,
                          env=env, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    results = json.loads(out.read_text())
    toy = gpu_other_half.SIZES["toy"]

    assert results["count"]["status"] == "ok"
    assert _positive(results["count"]["vit"][str(s)] for s, _ in toy["inference"])
    assert _positive(results["count"]["axial"].values())
    assert list(results["memory"]) == [label for label, *_ in toy["memory"]]
    for row in results["memory"].values():
        assert row["status"] == "ok", row
        peak, xla = row["peak"], row["xla"]
        assert peak["too_large"] == [] and peak["batch"] == row["batch_asked"]
        assert peak["peak_bytes"] is None and peak["memory_stats"] is None  # a CPU has none
        assert _positive([peak["count_bytes"], xla["xla_bytes"], xla["count_over_xla"]])
        assert sum(peak["count_parts"].values()) == peak["count_bytes"]
    assert results["matmul_tflops"] > 0
    speed = results["speed"]
    assert list(speed) == list(gpu_other_half.SPEED)
    assert speed["vit-jax-flash"]["status"].startswith("skipped")
    for name in ("vit-jax-xla", "vit-timm"):
        row = speed[name]
        assert row["status"] == "ok" and not row["errors"], (name, row)
        assert sorted(row["time"]) == sorted(str(s) for s, _ in toy["inference"])
        assert _positive(t[k] for t in row["time"].values()
                         for k in ("seconds", "images_per_s", "share_of_matmul"))
    axial = speed["axial"]
    assert axial["status"] == "ok" and not axial["errors"], axial
    assert sorted(axial["time"]) == sorted(toy["axial"]["models"])
    assert axial["time"]["AxialResNet50"]["batch"] == axial["time"]["BiT-R50x1"]["batch"]
    assert axial["axial_over_bit"] == (axial["time"]["AxialResNet50"]["seconds"]
                                       / axial["time"]["BiT-R50x1"]["seconds"])
    assert "AxialResNet50 / BiT-R50x1" in done.stdout and "peak / count" in done.stdout


def test_shares_use_the_best_matmul_rate_of_the_run():
    run = types.SimpleNamespace(results={
        "count": {"vit": {"224": 10**11}, "axial": {"AxialResNet50": 10**10,
                                                     "BiT-R50x1": 10**10}},
        "matmul_tflops": None,
        "speed": {"vit-jax-xla": {"matmul": {"tflops": 500.0},
                                  "time": {"224": {"images_per_s": 1000.0}}},
                  "vit-timm": {"matmul": {"tflops": 400.0},
                               "time": {"224": {"images_per_s": 2000.0}}},
                  "axial": {"time": {"AxialResNet50": {"seconds": 3.0, "images_per_s": 1.0},
                                     "BiT-R50x1": {"seconds": 2.0, "images_per_s": 1.0}}}}})
    gpu_other_half.Run.derive(run)
    speed = run.results["speed"]
    assert run.results["matmul_tflops"] == 500.0
    assert speed["vit-jax-xla"]["time"]["224"]["share_of_matmul"] == 0.2
    assert speed["vit-timm"]["time"]["224"]["share_of_matmul"] == 0.4
    assert speed["axial"]["axial_over_bit"] == 1.5
