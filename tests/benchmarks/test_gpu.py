"""benchmarks/gpu.py, the GPU benchmark, runs whole at toy size on the CPU: on machines without
a GPU it must not rot."""

import json
import os
import subprocess
import sys
import time
import types

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import gpu  # noqa: E402


def _positive(values):
    return all(isinstance(v, (int, float)) and v > 0 for v in values)


def test_the_toy_run_measures_every_row_and_writes_its_json(tmp_path):
    out = tmp_path / "gpu.json"
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("KERAS_BACKEND", None)  # each worker sets its own
    done = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "gpu.py"),
                           "--size", "toy", "--out", str(out), "--profile"], capture_output=True,
                          text=True, env=env, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(out.read_text())
    sizes = [str(s) for s in gpu.SIZES["toy"]["inference_sizes"]]

    assert results["plan"]["status"] == "ok", results["plan"]
    assert _positive(results["plan"]["flops"][s] for s in sizes)
    assert _positive(results["plan"]["memory"]["per_example_parts"][k]
                     for k in ("inputs", "activations", "attention"))
    assert results["batch"] == gpu.SIZES["toy"]["batch"] and results["matmul_tflops"] > 0
    assert list(results["rows"]) == list(gpu.ROWS)
    for name, row in results["rows"].items():
        missing = gpu.missing_packages(name)
        if missing:  # a framework this machine lacks: the row says so, and names the install
            assert row["status"] == "not installed" and missing[0] in row["reason"], row
            continue
        if name in gpu.CPU_SKIPS:
            assert row["status"] == "skipped" and row["reason"] == gpu.CPU_SKIPS[name]
            continue
        assert row["status"] == "ok", (name, row)
        train = row["train"]
        assert train["batch"] == results["batch"] and train["too_large"] == []
        assert len(train["seconds_per_step"]) == gpu.SIZES["toy"]["rounds"]
        assert _positive(train["seconds_per_step"] + [train["images_per_s"],
                                                      train["share_of_matmul"],
                                                      train["vs_reference"],
                                                      train["memory_count_bytes"]])
        assert train["peak_bytes"] is None  # no device memory statistics on a CPU
        # --profile: where the step's time went (a CPU's operations here), and torch's count.
        shares = dict(row["profile"]["shares"])
        assert shares and all(0 < share <= 1 for share in shares.values()), row["profile"]
        torch_row = gpu.ROWS[name]["framework"] == "timm" or gpu.ROWS[name]["backend"] == "torch"
        assert (row["profile"].get("aten_ops_per_step", 0) > 10) == torch_row, row["profile"]
        assert 0 < row["profile"]["busy"] and _positive([row["profile"]["kernel_seconds_per_step"]])
        assert "syncs" not in row["profile"]  # the card's waits: on a GPU only
        if gpu.ROWS[name].get("training_only"):  # a variant of a row's step: no more parts
            assert row["inference"] == {} and row["matmul"] is None and row["logits"] is None
            continue
        assert sorted(row["inference"]) == sorted(sizes)
        assert _positive(i[k] for i in row["inference"].values()
                         for k in ("seconds", "images_per_s", "share_of_matmul"))
        assert row["matmul"]["tflops"] > 0
        # bf16 against float32 logits of the same weights: bf16's rounding, not 0, not noise.
        assert 1e-4 < row["logits"]["max_relative_difference"] < 0.1, row["logits"]
    assert results["rows"]["timm-compile"]["setup"]["compile_backend"] == "aot_eager"

    lines = done.stdout.strip().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| row | training"))
    table = lines[start + 2:start + 2 + len(gpu.ROWS)]
    profiles = lines[start + 2 + len(gpu.ROWS):]
    for line, row in zip(table, results["rows"].values(), strict=True):
        assert line.startswith(f"| {row['label']} |")
    assert profiles[1] == "Where a training step's time goes (one profiled round):"
    for line, row in zip(profiles[2:], results["rows"].values(), strict=True):
        assert line.startswith(f"- {row['label']}: ")
        if row.get("profile"):
            kind, share = row["profile"]["shares"][0]
            assert f"{kind} {share:.0%}" in line


def test_the_toy_run_of_the_other_parts_measures_each_and_writes_its_json(tmp_path):
    out = tmp_path / "gpu.json"
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("KERAS_BACKEND", None)  # each worker sets its own
    done = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "gpu.py"),
                           "--size", "toy", "--parts", "memory", "vit-l16", "axial", "--out",
                           str(out)], capture_output=True, text=True, env=env, timeout=600,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    results = json.loads(out.read_text())
    toy = gpu.SIZES["toy"]

    assert results["parts"] == ["memory", "vit-l16", "axial"] and results["rows"] == {}
    assert results["count"]["status"] == "ok"
    assert _positive(results["count"]["vit"][str(s)] for s, _ in toy["vit_l_inference"])
    assert _positive(results["count"]["axial"].values())
    assert list(results["memory"]) == [label for label, *_ in toy["memory"]]
    for row in results["memory"].values():
        assert row["status"] == "ok", row
        peak, xla = row["peak"], row["xla"]
        assert peak["too_large"] == [] and peak["batch"] == row["batch_asked"]
        assert peak["peak_bytes"] is None and peak["memory_stats"] is None  # a CPU has none
        assert _positive([peak["count_bytes"], xla["xla_bytes"], xla["count_over_xla"]])
        assert sum(peak["count_parts"].values()) == peak["count_bytes"]
    assert results["speed_matmul_tflops"] > 0
    speed = results["speed"]
    assert list(speed) == list(gpu.SPEED)
    assert speed["vit-l16-jax-flash"]["status"].startswith("skipped")
    for name in ("vit-l16-jax-xla", "vit-l16-timm"):
        row = speed[name]
        assert row["status"] == "ok" and not row["errors"], (name, row)
        assert sorted(row["time"]) == sorted(str(s) for s, _ in toy["vit_l_inference"])
        assert _positive(t[k] for t in row["time"].values()
                         for k in ("seconds", "images_per_s", "share_of_matmul"))
    axial = speed["axial"]
    assert axial["status"] == "ok" and not axial["errors"], axial
    assert sorted(axial["time"]) == sorted(toy["axial"]["models"])
    assert axial["time"]["AxialResNet50"]["batch"] == axial["time"]["BiT-R50x1"]["batch"]
    assert axial["axial_over_bit"] == (axial["time"]["AxialResNet50"]["seconds"]
                                       / axial["time"]["BiT-R50x1"]["seconds"])
    assert "AxialResNet50 / BiT-R50x1" in done.stdout and "peak / count" in done.stdout
    assert "| row | training" not in done.stdout  # the ViT-B/16 rows were not asked for


def test_the_inference_shares_use_the_best_matmul_rate_of_the_processes():
    results = {
        "count": {"vit": {"224": 10**11}, "axial": {"AxialResNet50": 10**10,
                                                     "BiT-R50x1": 10**10}},
        "speed_matmul_tflops": None,
        "speed": {"vit-l16-jax-xla": {"matmul": {"tflops": 500.0},
                                      "time": {"224": {"images_per_s": 1000.0}}},
                  "vit-l16-timm": {"matmul": {"tflops": 400.0},
                                   "time": {"224": {"images_per_s": 2000.0}}},
                  "axial": {"time": {"AxialResNet50": {"seconds": 3.0, "images_per_s": 1.0},
                                     "BiT-R50x1": {"seconds": 2.0, "images_per_s": 1.0}}}}}
    gpu.add_speed_shares(results)
    speed = results["speed"]
    assert results["speed_matmul_tflops"] == 500.0
    assert speed["vit-l16-jax-xla"]["time"]["224"]["share_of_matmul"] == 0.2
    assert speed["vit-l16-timm"]["time"]["224"]["share_of_matmul"] == 0.4
    assert speed["axial"]["axial_over_bit"] == 1.5


def test_the_parts_share_the_budget():
    args = gpu.parse(["--parts", "all"])
    assert args.parts == list(gpu.PARTS) and args.budget == 840 and args.rows_budget == 450
    args = gpu.parse(["--parts", "axial", "vit-b16", "--budget", "600"])
    assert args.parts == ["vit-b16", "axial"] and args.rows_budget == 540
    assert gpu.parse([]).parts == ["vit-b16"] and gpu.parse([]).budget == 450


def test_the_places_that_wait_for_the_card_are_counted_by_their_callers():
    import warnings

    def blocking_read():  # stands for torch's warning at a synchronizing operation
        warnings.warn("called a synchronizing CUDA operation", UserWarning, stacklevel=1)

    def step():
        for _ in range(3):
            blocking_read()
        blocking_read()

    places = gpu.blocking_calls(step, depth=2)
    assert [count for count, _ in places] == [3, 1]
    first, second = (place.split(" <- ") for _, place in places)
    # The same blocking line, reached from two places of the step.
    assert first[0].startswith("test_gpu.py:") and first[0] == second[0]
    assert first[1] != second[1]
    assert gpu.blocking_calls(lambda: None) == []


def test_a_batch_that_does_not_fit_is_halved_until_it_does():
    freed = []

    def measure(batch):
        if batch > 100:
            raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
                               f"{batch}")
        return {"batch": batch}

    result, too_large = gpu.with_lowered_batch(measure, 512, lambda: freed.append(1))
    assert result == {"batch": 64} and too_large == [512, 256, 128] and len(freed) == 3
    with pytest.raises(ValueError, match="not memory"):  # other errors are not retried
        gpu.with_lowered_batch(lambda b: (_ for _ in ()).throw(ValueError("not memory")), 8,
                               lambda: None)


def test_the_table_says_when_a_batch_was_lowered_and_compares_with_timm_compile():
    results = {
        "inference_sizes": [224], "spec": {"image_size": 224}, "plan": {
            "flops": {"224": 35e9}, "memory": {
                "fixed_parts": {"weights": GIB, "attention": 0},
                "per_example_parts": {"weights": 0, "attention": GIB // 8}}},
        "rows": {
            "timm-compile": {"label": "timm + torch.compile", "status": "ok", "train": {
                "batch": 512, "images_per_s": 4000.0, "too_large": [], "peak_bytes": 40 * GIB}},
            "jax-xla": {"label": "keras_vit, jax, XLA attention", "status": "ok", "train": {
                "batch": 256, "images_per_s": 3000.0, "too_large": [512],
                "peak_bytes": 60 * GIB}, "inference": {"224": {
                    "batch": 512, "images_per_s": 10000.0, "too_large": []}},
                "logits": {"max_relative_difference": 0.004}},
        }}
    results["rows"]["timm-compile"]["matmul"] = {"tflops": 800.0}
    gpu.add_shares(results)
    text = gpu.table(results)
    assert ("| keras_vit, jax, XLA attention | 3,000 (39.4%), batch 256 | 0.75 | 10,000 (43.8%) "
            "| 60.00 (33.00; 1.00) | 4.0e-03 | batch 512 did not fit, 256 did |") in text
    assert results["matmul_tflops"] == 800.0


def test_a_framework_that_is_missing_makes_its_row_say_not_installed(monkeypatch, tmp_path,
                                                                     capsys):
    real = gpu.importlib.util.find_spec
    monkeypatch.setattr(gpu.importlib.util, "find_spec",
                        lambda name, *a: None if name == "timm" else real(name, *a))
    monkeypatch.setattr(gpu, "run_plan", lambda args, limit: {"status": "ok"})
    monkeypatch.setattr(gpu, "run_row", lambda *a: pytest.fail("a row without timm ran"))
    args = gpu.parse(["--size", "toy", "--rows", "timm", "timm-compile", "--out",
                      str(tmp_path / "gpu.json")])
    results = gpu.orchestrate(args)
    for name in ("timm", "timm-compile"):
        row = results["rows"][name]
        assert row["status"] == "not installed" and "timm (pip install timm)" in row["reason"]
    assert "| timm, eager | - | - |" in capsys.readouterr().out
    assert json.loads((tmp_path / "gpu.json").read_text())["rows"]["timm"] == results["rows"][
        "timm"]


def test_a_hung_worker_is_stopped_and_what_it_sent_is_kept():
    hang = ("import time; print('@@{\"part\": \"setup\", \"device\": \"x\"}', flush=True); "
            "time.sleep(120)")
    start = time.monotonic()
    messages, stopped, _ = gpu.run_worker([sys.executable, "-c", hang], dict(os.environ), 3)
    assert messages == [{"part": "setup", "device": "x"}]
    assert stopped == "timed out after 3 s" and time.monotonic() - start < 30


def test_the_card_is_read_from_nvidia_smi(monkeypatch):
    answer = types.SimpleNamespace(stdout="NVIDIA H100 80GB HBM3, 81559\n")
    monkeypatch.setattr(gpu.subprocess, "run", lambda *a, **k: answer)
    assert gpu.card() == {"name": "NVIDIA H100 80GB HBM3", "memory_bytes": 81559 * 2**20}

    def absent(*a, **k):
        raise FileNotFoundError("nvidia-smi")

    monkeypatch.setattr(gpu.subprocess, "run", absent)
    assert gpu.card() is None


def test_keras_wrapping_is_taken_off_a_layer_error():
    error = ValueError("Exception encountered when calling MultiHeadSelfAttention.call().\n\n"
                       "\x1b[1mattention_implementation='flash' is not available on a CPU.\x1b[0m"
                       "\n\nArguments received by MultiHeadSelfAttention.call():\n  • x=1")
    assert gpu.error_text(error) == (
        "ValueError: attention_implementation='flash' is not available on a CPU.")


GIB = 2**30
