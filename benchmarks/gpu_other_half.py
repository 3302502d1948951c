"""The other half of a GPU lend: the memory model against jax's peak, ViT-L/16 inference beside
timm, and AxialResNet50 against BiT-R50x1, in one run of at most ``--budget`` seconds (185).

On a lent GPU, from the repository root, with the wheels of benchmarks/gpu_wheels.sh in .whl/
(named in the run's carry), keras_vit coming from the checkout:

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 && set -o pipefail && python3 benchmarks/gpu_other_half.py --out $OUT/other_half.json 2>&1 | tee $OUT/other_half.log

On a CPU, everything at toy size (tests/benchmarks/test_gpu_other_half.py runs it):

    python benchmarks/gpu_other_half.py --size toy --out /tmp/other_half.json

Every measurement runs in a subprocess of its own, with a time limit within the run's budget,
so that one hang or crash cannot take the run; a part that fails says why and the run goes on.
Results are printed as they come, and the JSON (``--out``) is rewritten after each one. The
workers reuse benchmarks/gpu.py (its ``KerasRow`` and ``TimmRow``, the matmul rate, the
interleaved medians, the halving of a batch that does not fit) and benchmarks/train_step.py (the
training step of `keras-vit train`).

1. ``memory`` (first, within ``LIMIT_S["memory"]`` of the start): for each configuration of
   ``MEMORY`` (ViT-Ti/16 to ViT-H/14 at 224 px, a training step and an inference step), a jax
   process of its own under ``mixed_bfloat16`` (jax's peak cannot be reset, so one process is
   one measurement; ``XLA_PYTHON_CLIENT_PREALLOCATE=false``, and ``MEMORY_JOBS`` of them share
   the card at a time; each process's statistics are its own). A training step is
   train_step.keras_training's ``model.fit`` (AdamW, clipping, label smoothing) of one step; an
   inference step is ``predict_on_batch`` of a batch already on the device, twice. Measured:
   ``jax.devices()[0].memory_stats()["peak_bytes_in_use"]`` after the step (compilation and
   XLA's autotuning included, as a user's run has them); counted: ``keras_vit.memory(model,
   224, batch, training=..., dtype="mixed_bfloat16", optimizer="adamw")``; the ratio
   measured / count. Then, in the same process, ``keras_vit.costs.memory.xla_memory`` (what
   XLA:GPU's compiled step allocates, by ``memory_analysis()``) and count / XLA, as
   benchmarks/memory.py ``--xla`` does on the CPU. A batch that did not fit is halved (the
   peak is then that of the failed try or more, and the row says so).
2. ``speed`` (after the memory part, the rest of the budget): processes for ViT-L/16 inference
   on jax with ``attention_implementation`` ``"xla"`` and ``"flash"`` (gpu.py's ``KerasRow``,
   ``mixed_bfloat16``), timm's ``vit_large_patch16_224`` (``pretrained=False``,
   ``img_size=384`` for 384 px) under bf16 autocast, eager (gpu.py's ``TimmRow``), and
   AxialResNet50 beside BiT-R50x1 (jax, ``mixed_bfloat16``, same batch). All of them build and
   compile at once (``XLA_PYTHON_CLIENT_PREALLOCATE=false``), then time one at a time, the others
   waiting (when the card is free, the first ready one in the order of ``SPEED``): first the bf16 matmul rate through the framework
   (gpu.py's: products of random 8192 x 8192 matrices), then the median seconds of interleaved
   rounds of one batch per size or model (``keras_vit.evaluation.speed.median_seconds``, each
   call ending on the logits in host memory). Reported: images/s, the share of the matmul rate
   (images/s x ``keras_vit.flops`` of an image over the best matmul rate of the run), and
   AxialResNet50 / BiT-R50x1 seconds per batch.

``--size toy`` is the same code on the CPU with tiny models (a two-layer ViT, one-unit-a-stage
AxialResNet and BiT at 32 px), the matmul at 256, ``--xla_backend_optimization_level=0``; jax
reports no memory statistics on a CPU (the peak is None there, the XLA count is not), and the
flash process does not run (``CPU_SKIPS``).
"""  # noqa: E501 -- the device command is one line, to be copied whole

import argparse
import concurrent.futures
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu  # noqa: E402
import train_step  # noqa: E402

ROOT = gpu.ROOT
GIB = gpu.GIB
POLICY = "mixed_bfloat16"
IMAGENET = dict(channels=3, num_classes=1000, image_size=224)
TOY_VIT = dict(name="ViT-Ti/8", image_size=32, channels=3, num_classes=10, hidden_size=32,
               num_layers=2, num_heads=2, mlp_dim=64, classifier="token")
SIZES = {
    "full": dict(
        device="gpu", budget=185, rounds=10, matmul=8192, matmul_repeats=10,
        # (label, spec, training, batch): smallest first, ViT-H/14 last (it runs if time is left)
        memory=[(f"{name} {'train' if training else 'infer'}", dict(IMAGENET, name=name),
                 training, batches[training])
                for training in (False, True)
                for name, batches in (("ViT-Ti/16", (256, 256)), ("ViT-S/16", (256, 128)),
                                      ("ViT-B/16", (256, 64)), ("ViT-L/16", (128, 64)),
                                      ("ViT-H/14", (64, 32)))],
        vit=dict(IMAGENET, name="ViT-L/16", timm="vit_large_patch16_224"),
        inference=((224, 128), (384, 64)),
        axial=dict(models={"AxialResNet50": {}, "BiT-R50x1": {}}, image_size=224, batch=64,
                   num_classes=1000)),
    "toy": dict(
        device="cpu", budget=300, rounds=3, matmul=256, matmul_repeats=4,
        memory=[("toy ViT train", TOY_VIT, True, 8), ("toy ViT infer", TOY_VIT, False, 16)],
        vit=TOY_VIT, inference=((32, 8), (48, 8)),
        axial=dict(models={"AxialResNet50": dict(block_units=(1, 1), width_factor=0.5,
                                                 num_heads=2),
                           "BiT-R50x1": dict(block_units=(1, 1), width_factor=0.5)},
                   image_size=32, batch=2, num_classes=10)),
}
# Seconds from the start of the run by which each part must end (each also within --budget).
LIMIT_S = {"memory": 90, "count": 60}
TOY_LIMIT_S = {"memory": 200, "count": 120}
MEMORY_JOBS = {"full": 5, "toy": 2}
# The speed processes, in the order they time.
SPEED = {
    "vit-jax-xla": dict(kind="keras", backend="jax", options={"attention_implementation": "xla"},
                        label="keras_vit, jax, XLA attention"),
    "vit-jax-flash": dict(kind="keras", backend="jax",
                          options={"attention_implementation": "flash"},
                          label="keras_vit, jax, flash attention"),
    "vit-timm": dict(kind="timm", backend="torch", label="timm, bf16 autocast, eager"),
    "axial": dict(kind="axial", backend="jax", label="AxialResNet50 vs BiT-R50x1, jax"),
}
CPU_SKIPS = {"vit-jax-flash": gpu.CPU_SKIPS["jax-flash"]}


def _args_for(args, spec):
    """The namespace gpu.py's rows read (spec, device, matmul size)."""
    return types.SimpleNamespace(spec=spec, device=args.device, matmul=args.matmul,
                                 matmul_repeats=args.matmul_repeats, compile_backend=None,
                                 compile_note=None)


# ---------------------------------------------------------------------------------------------
# Workers: each prints "@@" JSON lines (train_step._reply) as it measures.


def _memory_stats():
    import jax

    stats = jax.devices()[0].memory_stats()  # None on a CPU
    return {k: stats.get(k) for k in ("peak_bytes_in_use", "bytes_in_use", "bytes_limit")} \
        if stats else None


def memory_worker(args):
    """One configuration's step, its peak against keras_vit.memory, then against XLA's count."""
    import keras

    from keras_vit import memory
    from keras_vit.costs.memory import xla_memory

    label, spec, training, batch = args.memory[args.index]
    row = gpu.KerasRow(_args_for(args, spec), {})
    if gpu._measured("setup", row.setup) is None:
        return 1
    train_step._reply({"part": "before", "memory_stats": _memory_stats()})

    def step(size):
        if training:
            options = {"dtype_policy": POLICY}
            step_args = types.SimpleNamespace(device=args.device, batch=size, steps=1)
            model, run = train_step.keras_training(spec, options, step_args)
            run()
        else:
            model, _, call = row.inference(spec["image_size"], size)
            call()
        return model

    def peak():
        model, too_large = gpu.with_lowered_batch(step, batch, row.free)
        used = batch // 2 ** len(too_large)
        stats = _memory_stats()
        count = memory(model, spec["image_size"], used, training=training, dtype=POLICY,
                       optimizer="adamw")
        measured = stats and stats["peak_bytes_in_use"]
        peak.model, peak.batch, peak.count = model, used, count
        return {"batch": used, "too_large": too_large, "training": training,
                "memory_stats": stats, "peak_bytes": measured, "count_bytes": int(count),
                "count_parts": count.parts, "peak_over_count": measured and measured / count}

    if gpu._measured("peak", peak) is None:
        return 1
    keras.config.set_dtype_policy(POLICY)

    def xla():
        compiled = xla_memory(peak.model, peak.batch, training=training, optimizer="adamw")
        return {"xla_bytes": compiled, "count_over_xla": peak.count / compiled}

    gpu._measured("xla", xla)
    train_step._reply({"part": "done"})
    return 0


def count_worker(args):
    """keras_vit.flops of an image for each speed measurement (by name, nothing built)."""
    from keras_vit import flops

    vit = {k: args.vit[k] for k in train_step.SHAPE_KEYS if k in args.vit}
    vit["num_classes"] = args.vit["num_classes"]
    train_step._reply({"part": "vit", **{str(s): int(flops(args.vit["name"], s, **vit))
                                        for s, _ in args.inference}})
    axial = args.axial
    train_step._reply({"part": "axial", **{
        name: int(flops(name, axial["image_size"], num_classes=axial["num_classes"], **extra))
        for name, extra in axial["models"].items()}})
    train_step._reply({"part": "done"})
    return 0


class AxialRow:
    """AxialResNet50 and BiT-R50x1 under jax ``mixed_bfloat16``, one batch each."""

    def __init__(self, args):
        self.args = args
        self.keras_row = gpu.KerasRow(_args_for(args, args.vit), {})

    def setup(self):
        return self.keras_row.setup()

    def matmul(self):
        return self.keras_row.matmul()

    def prepare(self):
        import keras

        from keras_vit import create_model

        axial, calls = self.args.axial, {}
        keras.config.set_dtype_policy(POLICY)
        images = keras.ops.convert_to_tensor(gpu._images(axial["batch"], axial["image_size"],
                                                         channels_last=True))
        for name, extra in axial["models"].items():
            try:
                model = create_model(name, image_size=axial["image_size"],
                                     num_classes=axial["num_classes"], **extra)
                model.predict_on_batch(images)  # compiles
            except Exception as error:  # noqa: BLE001 -- reported; the other model still runs
                train_step._reply({"part": name, "error": gpu.error_text(error)})
                continue
            calls[name] = (lambda m=model: m.predict_on_batch(images))
            train_step._reply({"part": f"compiled-{name}"})
        return {name: (call, axial["batch"], []) for name, call in calls.items()}


def _prepare_vit(impl, args):
    prepared = {}
    for size, batch in args.inference:
        try:
            (_, _, call), too_large = gpu.with_lowered_batch(
                lambda b, s=size: impl.inference(s, b), batch, impl.free)
        except Exception as error:  # noqa: BLE001 -- reported; the other size still runs
            train_step._reply({"part": f"inference-{size}", "error": gpu.error_text(error)})
            continue
        prepared[str(size)] = (call, batch // 2 ** len(too_large), too_large)
        train_step._reply({"part": f"compiled-{size}"})
    return prepared


def speed_worker(args):
    """Build and compile, say "ready", wait for "go" on stdin, then time: the matmul rate, and
    the interleaved medians of the prepared calls."""
    kind = SPEED[args.worker]["kind"]
    if kind == "keras":
        impl = gpu.KerasRow(_args_for(args, args.vit), dict(SPEED[args.worker]["options"]))
    elif kind == "timm":
        train_step._import_timm()
        impl = gpu.TimmRow(_args_for(args, args.vit), compiled=False)
    else:
        impl = AxialRow(args)
    if gpu._measured("setup", impl.setup) is not None:
        prepared = impl.prepare() if kind == "axial" else _prepare_vit(impl, args)
        train_step._reply({"part": "ready"})
        sys.stdin.readline()  # "go": the card is ours
        gpu._measured("matmul", impl.matmul)
        try:
            seconds = gpu._median_seconds()({k: p[0] for k, p in prepared.items()},
                                            rounds=args.rounds)
        except Exception as error:  # noqa: BLE001
            train_step._reply({"part": "timing", "error": gpu.error_text(error)})
            seconds = {}
        for key, value in seconds.items():
            _, batch, too_large = prepared[key]
            train_step._reply({"part": f"time-{key}", "seconds": value, "batch": batch,
                               "images_per_s": batch / value, "too_large": too_large})
    train_step._reply({"part": "done"})
    return 0


# ---------------------------------------------------------------------------------------------
# The orchestrator.


def environment(args, backend, device=None):
    env = dict(os.environ, PYTHONUNBUFFERED="1", KERAS_BACKEND=backend)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    # keras_vit from this checkout, whatever the caller's PYTHONPATH.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (ROOT, env.get("PYTHONPATH"))))
    # Several processes share the card: each takes what it uses (its peak is its own).
    env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    env.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    if (device or args.device) == "cpu":
        env.update(JAX_PLATFORMS="cpu", CUDA_VISIBLE_DEVICES="")
    if args.size == "toy":
        env["XLA_FLAGS"] = env.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0"
    return env


def _command(args, worker, index=None):
    command = [sys.executable, os.path.abspath(__file__), "--worker", worker, "--size", args.size]
    return command + (["--index", str(index)] if index is not None else [])


class Run:
    """The results as they stand, printed and written as they come."""

    def __init__(self, args):
        self.args, self.start, self.lock = args, time.monotonic(), threading.Lock()
        self.results = {
            "size": args.size, "budget_s": args.budget,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "environment": train_step.environment(),
            "card": gpu.card() if args.device == "gpu" else None,
            "count": None, "speed": {}, "matmul_tflops": None,
            "memory": {label: {"status": "not run yet"} for label, *_ in args.memory}}

    def left(self, part_limit=None):
        elapsed = time.monotonic() - self.start
        left = self.args.budget - elapsed
        return left if part_limit is None else min(left, part_limit - elapsed)

    def record(self, section, key, value, line=None):
        with self.lock:
            if key is None:
                self.results[section] = value
            else:
                self.results[section][key] = value
            self.derive()
            if line:
                print(f"[{time.monotonic() - self.start:5.0f} s] {line}", flush=True)
            self.results["wall_s"] = round(time.monotonic() - self.start, 1)
            if self.args.out:
                gpu.write(self.results, self.args.out)

    def derive(self):
        """The best matmul rate, shares of it, and the axial / BiT ratio, as they stand."""
        speed, flops = self.results["speed"], self.results["count"] or {}
        rates = [(row.get("matmul") or {}).get("tflops") for row in speed.values()]
        rate = self.results["matmul_tflops"] = max(filter(None, rates), default=None)
        for name, row in speed.items():
            counts = flops.get("axial" if name == "axial" else "vit") or {}
            for key, timed in (row.get("time") or {}).items():
                if rate and key in counts:
                    timed["gflops_per_image"] = counts[key] / 1e9
                    timed["share_of_matmul"] = timed["images_per_s"] * counts[key] / (
                        rate * 1e12)
        timed = (speed.get("axial") or {}).get("time") or {}
        if "AxialResNet50" in timed and "BiT-R50x1" in timed:
            speed["axial"]["axial_over_bit"] = (timed["AxialResNet50"]["seconds"]
                                                / timed["BiT-R50x1"]["seconds"])


def _parts(messages):
    parts = {}
    for message in messages:
        parts[message.pop("part")] = message
    parts.pop("done", None)
    return parts


def _memory_line(label, row):
    peak = row.get("peak") or {}
    xla = row.get("xla") or {}
    text = f"memory {label}: {row['status']}"
    if "count_bytes" in peak:
        text += (f"; batch {peak['batch']}, peak {gpu._gib(peak['peak_bytes'])} GiB, count "
                 f"{gpu._gib(peak['count_bytes'])} GiB")
        if peak.get("peak_over_count"):
            text += f", peak/count {peak['peak_over_count']:.2f}"
    if "xla_bytes" in xla:
        text += f"; XLA {gpu._gib(xla['xla_bytes'])} GiB, count/XLA {xla['count_over_xla']:.2f}"
    errors = {k: v["error"] for k, v in row.items() if isinstance(v, dict) and "error" in v}
    if row.get("log_tail"):
        errors["log"] = row["log_tail"].strip().splitlines()[-1] if row["log_tail"].strip() else ""
    if errors:
        text += "; " + "; ".join(f"{k}: {' '.join(e.split())[:300]}" for k, e in errors.items())
    return text


def memory_part(run):
    args = run.args
    limit = (LIMIT_S if args.size == "full" else TOY_LIMIT_S)["memory"]

    def one(index):
        label, _, _, batch = args.memory[index]
        left = run.left(limit)
        if left < 10:
            run.record("memory", label, {"status": "skipped: the memory part's time was spent"},
                       f"memory {label}: skipped")
            return
        messages, stopped, log = gpu.run_worker(_command(args, "memory", index),
                                                environment(args, "jax"), left)
        row = {"status": stopped or "ok", "batch_asked": batch, **_parts(messages)}
        if stopped:
            row["log_tail"] = log
        run.record("memory", label, row, _memory_line(label, row))

    with concurrent.futures.ThreadPoolExecutor(MEMORY_JOBS[args.size]) as pool:
        list(pool.map(one, range(len(args.memory))))


def count_part(run):
    args = run.args
    limit = (LIMIT_S if args.size == "full" else TOY_LIMIT_S)["count"]
    messages, stopped, log = gpu.run_worker(_command(args, "count"),
                                            environment(args, "jax", device="cpu"),
                                            run.left(limit))
    counts = _parts(messages)
    counts["status"] = stopped or "ok"
    if stopped:
        counts["log_tail"] = log
    run.record("count", None, counts, f"count: {counts}")


class Worker:
    """A speed process: its "@@" messages go to ``events`` as (name, message), None at its
    end."""

    def __init__(self, name, command, env, events):
        self.name = name
        self.log = tempfile.TemporaryFile(mode="w+")
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=self.log, text=True, env=env, cwd=ROOT,
                                        start_new_session=True)

        def read():
            for line in self.process.stdout:
                if line.startswith("@@"):
                    events.put((name, json.loads(line[2:])))
            events.put((name, None))

        threading.Thread(target=read, daemon=True).start()

    def go(self):
        try:
            self.process.stdin.write("go\n")
            self.process.stdin.flush()
        except OSError:
            pass

    def stop(self):
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()
        self.log.seek(0)
        return self.log.read()[-3000:]


def _speed_line(name, row):
    parts = [f"{k} {v['images_per_s']:,.1f} images/s (batch {v['batch']}"
             + (f", {v['share_of_matmul']:.1%} of matmul" if "share_of_matmul" in v else "")
             + ")" for k, v in (row.get("time") or {}).items()]
    text = f"speed {name}: {row['status']}; " + "; ".join(parts)
    if row.get("log_tail", "").strip():
        text += "; log: " + row["log_tail"].strip().splitlines()[-1][:300]
    if row.get("axial_over_bit"):
        text += f"; AxialResNet50 / BiT-R50x1 {row['axial_over_bit']:.2f}"
    if row.get("errors"):
        text += "; " + "; ".join(f"{k}: {' '.join(e.split())[:300]}"
                                 for k, e in row["errors"].items())
    return text


def speed_part(run):
    args = run.args
    events, workers, rows = queue.Queue(), {}, {}
    for name, how in SPEED.items():
        rows[name] = {"label": how["label"], "status": "starting", "time": {}, "errors": {}}
        if args.device == "cpu" and name in CPU_SKIPS:
            rows[name]["status"] = "skipped: " + CPU_SKIPS[name]
        elif run.left() < 20:
            rows[name]["status"] = "skipped: the run's budget was spent"
        else:
            workers[name] = Worker(name, _command(args, name), environment(args, how["backend"]),
                                   events)
        run.record("speed", name, rows[name])
    ready, finished, timing = set(), set(SPEED) - set(workers), None
    deadline = time.monotonic() + max(0.0, run.left())
    while len(finished) < len(SPEED):
        if timing is None:  # the card is free: the first ready process in SPEED's order times
            timing = next((n for n in SPEED if n in ready and n not in finished), None)
            if timing:
                rows[timing]["status"] = "timing"
                workers[timing].go()
        try:
            name, message = events.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            break
        row = rows[name]
        if name in finished:
            continue
        if message is None or message.get("part") == "done":
            finished.add(name)
            if message is None and row["status"] != "ok":
                row["status"] = "ended early"
                row["log_tail"] = workers[name].stop()
            elif message is not None:
                row["status"] = "ok"
            timing = None if timing == name else timing
            run.record("speed", name, row, _speed_line(name, row))
            continue
        part = message.pop("part")
        if "error" in message:
            row["errors"][part] = message["error"]
        elif part == "ready":
            ready.add(name)
            row["status"] = "ready"
        elif part.startswith("time-"):
            row["time"][part[5:]] = message
        else:
            row[part] = message
        run.record("speed", name, row, f"speed {name}: {part} {json.dumps(message)[:300]}")
    for name, worker in workers.items():
        tail = worker.stop()
        if name not in finished:
            rows[name]["status"] = f"timed out ({rows[name]['status']} when the budget ended)"
            rows[name]["log_tail"] = tail
            run.record("speed", name, rows[name], _speed_line(name, rows[name]))


def summary(results):
    lines = [f"other half ({results['size']} size) on "
             f"{(results['card'] or {}).get('name', 'the CPU')}, {results['date']}, "
             f"{results['wall_s']} s; {results['environment']}",
             f"bf16 matmul, best TFLOP/s: {results['matmul_tflops']}",
             "| configuration | batch | peak GiB | count GiB | peak / count | XLA GiB | "
             "count / XLA | status |", "|---|---|---|---|---|---|---|---|"]
    for label, row in results["memory"].items():
        peak, xla = row.get("peak") or {}, row.get("xla") or {}
        ratio = peak.get("peak_over_count")
        over = xla.get("count_over_xla")
        lines.append(f"| {label} | {peak.get('batch', '-')} | {gpu._gib(peak.get('peak_bytes'))}"
                     f" | {gpu._gib(peak.get('count_bytes'))} | "
                     f"{f'{ratio:.2f}' if ratio else '-'} | {gpu._gib(xla.get('xla_bytes'))} | "
                     f"{f'{over:.2f}' if over else '-'} | {row['status']} |")
    for name, row in results["speed"].items():
        lines.append(_speed_line(name, row))
    return "\n".join(lines)


def orchestrate(args):
    run = Run(args)
    print(f"card: {run.results['card']}; budget {args.budget:.0f} s", flush=True)
    counting = threading.Thread(target=count_part, args=(run,))
    counting.start()
    memory_part(run)
    speed_part(run)
    counting.join()
    run.record("speed", None, run.results["speed"])
    print(summary(run.results), flush=True)
    return run.results


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="full",
                        help="full: the ViT sizes on a GPU (default); toy: tiny models on the CPU")
    parser.add_argument("--budget", type=float, help="seconds for the whole run (default 185; "
                        "300 at toy size)")
    parser.add_argument("--out", help="write every number to this JSON file (after each one)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--index", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    return gpu.with_size_defaults(args, SIZES[args.size])


def main(argv=None):
    args = parse(argv)
    if args.worker == "memory":
        return memory_worker(args)
    if args.worker == "count":
        return count_worker(args)
    if args.worker:
        return speed_worker(args)
    orchestrate(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
