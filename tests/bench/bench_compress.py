# SPDX-License-Identifier: MIT
"""Compressed record files (config compress "gzip") on the models of the `transformers` package
(BertForSequenceClassification, GPT2LMHeadModel; random initialisation, nothing downloaded), each
trained with AdamW as tests/bench/bench_hf.py's worker does, profiled through
`python -m torchwrapper run`:

  bytes per call record: the calls' bytes on disk over their count (the manifests'), for CSV and JSON
    lines, args "summary" (run's default) and "none", compress none and gzip; and what 100,000 steps
    of such a run would write;
  the wall cost: blocks of steps under tw.profile (run's defaults: JSON lines, args summary) with
    compress none and with gzip, each over a plain block beside it, the order rotating, median over
    the repetitions; and the same for the process's CPU time (every thread's: the writer thread's
    deflating is in it).

On a 2-core machine the writer thread's CPU is taken from the training's (torch runs a thread per
core): the figure that decides compress's default. Prints a table, then one JSON line; `make bench`
keeps it in build/bench-compress.txt. Without `transformers` it prints a SKIP line (and a JSON line
saying so) and exits 0. BENCH=quick (the default), full (more repetitions, longer runs) or smoke (one
model, a few steps: checks that it runs; its figures mean nothing).
"""
from __future__ import annotations

import glob
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from modes import MODE, sized  # noqa: E402  (this folder's: BENCH)

MODELS = ["bert", "gpt2"][:sized(1, 2, 2)]
SIZE_STEPS = sized(2, 20, 50)          # steps of a run measured for bytes per record
COST = dict(steps=sized(2, 20, 20), reps=sized(1, 15, 31))
RUN_STEPS = 100_000                    # the run the issue sizes (a BERT fine-tuning)
WORKER = [os.path.join(HERE, "bench_hf.py"), "--worker"]


def child_env() -> Dict[str, str]:
    """This environment without torchwrapper's variables (the plain worker stays plain)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("TORCHWRAPPER_")}


def run(cmd: List[str]) -> Tuple[List[dict], float]:
    """One process: its blocks ({"block", "ns", ...}) and the CPU seconds it and its children used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(cmd, capture_output=True, text=True, env=child_env(), timeout=3600)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")], cpu


def profiled(out: str, *settings: str) -> List[str]:
    cmd = [sys.executable, "-m", "torchwrapper", "run", "--no-report", "-o", out]
    for setting in settings:
        cmd += ["--set", setting]
    return cmd + ["--"]


def call_bytes(out: str) -> Tuple[int, int]:
    """(call records written, their bytes on disk) from the manifests of out."""
    records = size = 0
    for path in glob.glob(os.path.join(out, "manifest*.json")):
        with open(path) as f:
            calls = json.load(f)["records"]["calls"]
        records += calls["written"]
        size += calls["bytes_written"]
    return records, size


def sizes(model: str, tmp: str) -> dict:
    """Bytes per call record, by format, args and compress."""
    row: dict = {}
    for fmt in ("csv", "json"):
        for args in ("summary", "none"):
            for compress in ("none", "gzip"):
                out = os.path.join(tmp, "sizes")
                shutil.rmtree(out, ignore_errors=True)
                run(profiled(out, f"format={fmt}", f"args={args}", f"compress={compress}") +
                    WORKER + [model, str(SIZE_STEPS), "1"])
                records, size = call_bytes(out)
                row[f"{fmt}, args {args}, {compress}"] = {"bytes_per_record": round(size / records, 1),
                                                          "records_per_step": round(records / SIZE_STEPS, 1)}
    shutil.rmtree(os.path.join(tmp, "sizes"), ignore_errors=True)
    return row


def cost(model: str, tmp: str) -> dict:
    """The wall time and the process's CPU time (every thread's: the writer's deflating is in it) of
    a block of steps under tw.profile (the run's defaults: JSON lines, args summary) with compress
    none and gzip, each over a plain block beside it; the order of the three rotates, median over
    the repetitions. In-process: more blocks than processes would give in the time, on a machine
    whose other jobs make single figures noisy."""
    import bench_hf
    import torchwrapper as tw

    step = bench_hf.make_step(bench_hf.import_transformers(), model)
    steps = COST["steps"]
    for _ in range(2):
        bench_hf.timed(step, steps)
    out = os.path.join(tmp, "cost")

    def block(compress: Optional[str]) -> Tuple[int, float]:
        if compress is None:
            c0, t0 = time.process_time(), time.perf_counter_ns()
            bench_hf.timed(step, steps)
            return time.perf_counter_ns() - t0, time.process_time() - c0
        shutil.rmtree(out, ignore_errors=True)
        with tw.profile(out_dir=out, format="json", args="summary", compress=compress):
            bench_hf.timed(step, steps)     # warm-up: first calls, first chunks
            c0, t0 = time.process_time(), time.perf_counter_ns()
            bench_hf.timed(step, steps)
            return time.perf_counter_ns() - t0, time.process_time() - c0

    modes = [None, "none", "gzip"]
    wall: Dict[str, List[float]] = {"none": [], "gzip": []}
    cpu: Dict[str, List[float]] = {"none": [], "gzip": []}
    plains: List[int] = []
    for rep in range(COST["reps"]):
        got = {m: block(m) for m in modes[rep % 3:] + modes[:rep % 3]}
        plain_ns, plain_cpu = got[None]
        plains.append(plain_ns)
        for m in ("none", "gzip"):
            wall[m].append(got[m][0] / plain_ns)
            cpu[m].append(got[m][1] / plain_cpu)
    shutil.rmtree(out, ignore_errors=True)
    row: dict = {"plain_ms_per_step": round(statistics.median(plains) / steps / 1e6, 2), "steps": steps,
                 "reps": COST["reps"]}
    for m in ("none", "gzip"):
        row[f"compress {m}"] = {"ratio": round(statistics.median(wall[m]), 4),
                                "cpu_ratio": round(statistics.median(cpu[m]), 4)}
    row["gzip_over_none"] = round(statistics.median(g / n for g, n in zip(wall["gzip"], wall["none"])), 4)
    row["gzip_over_none_cpu"] = round(statistics.median(g / n for g, n in zip(cpu["gzip"], cpu["none"])), 4)
    return row


def main() -> None:
    import bench_hf   # this folder's: the models and their training steps

    if bench_hf.import_transformers() is None:   # the package, not this folder's transformers.py
        print("SKIP bench_compress: the transformers package is not installed (pip install transformers)")
        print(json.dumps({"skipped": "transformers not installed"}))
        return
    load = os.getloadavg()[0]
    result: dict = {"mode": MODE, "cpus": os.cpu_count(), "load_start": round(load, 2), "models": {}}
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="tw-bench-compress-") as tmp:
        for model in MODELS:
            row = {"sizes": sizes(model, tmp), "cost": cost(model, tmp)}
            result["models"][model] = row
            print(f"  {model}: bytes per call record (records/step "
                  f"{row['sizes']['csv, args none, none']['records_per_step']:.0f}), plain -> gzip:")
            for fmt in ("csv", "json"):
                for args in ("summary", "none"):
                    plain = row["sizes"][f"{fmt}, args {args}, none"]["bytes_per_record"]
                    packed = row["sizes"][f"{fmt}, args {args}, gzip"]["bytes_per_record"]
                    per_step = row["sizes"][f"{fmt}, args {args}, none"]["records_per_step"]
                    print(f"    {fmt:4} args {args:8} {plain:6.1f} -> {packed:5.1f} bytes ({plain / packed:.1f}x); "
                          f"{RUN_STEPS:,} steps: {plain * per_step * RUN_STEPS / 1e9:.1f} -> "
                          f"{packed * per_step * RUN_STEPS / 1e9:.1f} GB")
            c = row["cost"]
            print(f"    tw.profile (JSON, args summary), {c['steps']}-step blocks over plain ones "
                  f"({c['plain_ms_per_step']:.1f} ms/step), wall / CPU: compress none "
                  f"{c['compress none']['ratio']:.3f}x / {c['compress none']['cpu_ratio']:.3f}x, gzip "
                  f"{c['compress gzip']['ratio']:.3f}x / {c['compress gzip']['cpu_ratio']:.3f}x (gzip / none "
                  f"{c['gzip_over_none']:.3f}x / {c['gzip_over_none_cpu']:.3f}x)", flush=True)
    result["load_end"] = round(os.getloadavg()[0], 2)
    result["wall_s"] = round(time.time() - t0, 1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
