# SPDX-License-Identifier: MIT
"""Compressed record files (config compress "gzip") on the models of the `transformers` package
(BertForSequenceClassification, GPT2LMHeadModel; random initialisation, nothing downloaded), each
trained with AdamW as tests/bench/bench_hf.py's worker does, profiled through
`python -m torchwrapper run`:

  bytes per call record: the calls' bytes on disk over their count (the manifests'), for CSV and JSON
    lines, args "summary" (run's default) and "none", compress none and gzip; and what 100,000 steps
    of such a run would write;
  the cost: blocks of steps under tw.profile (run's defaults: JSON lines, args summary) with
    compress none and with gzip, and plain blocks, the order rotating, median over the repetitions
    (see cost()): the writer thread's CPU a step, gzip's extra as a share of a step's CPU, and the
    wall time over plain.

On a 2-core machine the writer thread's CPU is taken from the training's (torch runs a thread per
core): gzip's extra CPU a step is the figure that decides compress's default, measured as CPU time,
which holds still on a shared machine where wall time moves by tens of percent. Prints a table,
then one JSON line; `make bench` keeps it in build/bench-compress.txt. Without `transformers` it
prints a SKIP line (and a JSON line saying so) and exits 0. BENCH=quick (the default), full (more
repetitions) or smoke (one model, a few steps: checks that it runs; its figures mean nothing).
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
ARGS = ("summary", "none")[:sized(1, 2, 2)]   # smoke: run's default only (each setting is a process)
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
        for args in ARGS:
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
    """What compress costs the run: torch on one thread (so that the CPU time below is work, not
    OpenMP threads spinning for a core another job holds), blocks of STEPS steps, the order of plain,
    compress none and gzip rotating, medians over the repetitions of:
      the profiled block's wall time over the plain block's (the second block of a session: the
        first warms it up);
      the CPU time of the session's other threads (the writer's formatting, writing and deflating;
        every thread's CPU time less the training thread's, from start to stop: every record of
        both blocks written) per step, and gzip's extra over none as a share of a plain step's CPU:
        what a machine whose cores torch keeps busy gives up to deflating."""
    import bench_hf
    import torch

    import torchwrapper as tw

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    step = bench_hf.make_step(bench_hf.import_transformers(), model)
    steps = COST["steps"]
    for _ in range(2):
        bench_hf.timed(step, steps)
    out = os.path.join(tmp, "cost")

    def block(compress: Optional[str]) -> Tuple[int, float, float]:
        """(wall ns of the timed block, CPU s of the training thread a step, of the others a step)."""
        shutil.rmtree(out, ignore_errors=True)
        if compress is None:
            c0, t0 = time.thread_time(), time.perf_counter_ns()
            bench_hf.timed(step, steps)
            return time.perf_counter_ns() - t0, (time.thread_time() - c0) / steps, 0.0
        p0, c0 = time.process_time(), time.thread_time()
        with tw.profile(out_dir=out, format="json", args="summary", compress=compress):
            bench_hf.timed(step, steps)     # warm-up: first calls, first chunks
            t0 = time.perf_counter_ns()
            bench_hf.timed(step, steps)
            wall = time.perf_counter_ns() - t0
        mine = time.thread_time() - c0
        return wall, mine / (2 * steps), (time.process_time() - p0 - mine) / (2 * steps)

    modes = [None, "none", "gzip"]
    wall: Dict[str, List[float]] = {"none": [], "gzip": []}
    writer: Dict[str, List[float]] = {"none": [], "gzip": []}
    plains: List[int] = []
    plain_cpu: List[float] = []
    extra: List[float] = []
    try:
        for rep in range(COST["reps"]):
            got = {m: block(m) for m in modes[rep % 3:] + modes[:rep % 3]}
            plains.append(got[None][0])
            plain_cpu.append(got[None][1])
            for m in ("none", "gzip"):
                wall[m].append(got[m][0] / got[None][0])
                writer[m].append(got[m][2])
            extra.append((got["gzip"][2] - got["none"][2]) / got[None][1])
    finally:
        torch.set_num_threads(threads)
    shutil.rmtree(out, ignore_errors=True)
    row: dict = {"plain_ms_per_step": round(statistics.median(plains) / steps / 1e6, 2),
                 "plain_cpu_ms_per_step": round(statistics.median(plain_cpu) * 1e3, 2),
                 "steps": steps, "reps": COST["reps"], "torch_threads": 1}
    for m in ("none", "gzip"):
        row[f"compress {m}"] = {"ratio": round(statistics.median(wall[m]), 4),
                                "writer_cpu_ms_per_step": round(statistics.median(writer[m]) * 1e3, 3)}
    row["gzip_over_none"] = round(statistics.median(g / n for g, n in zip(wall["gzip"], wall["none"])), 4)
    row["gzip_extra_cpu_share"] = round(statistics.median(extra), 4)
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
                  f"{row['sizes']['csv, args summary, none']['records_per_step']:.0f}), plain -> gzip:")
            for fmt in ("csv", "json"):
                for args in ARGS:
                    plain = row["sizes"][f"{fmt}, args {args}, none"]["bytes_per_record"]
                    packed = row["sizes"][f"{fmt}, args {args}, gzip"]["bytes_per_record"]
                    per_step = row["sizes"][f"{fmt}, args {args}, none"]["records_per_step"]
                    print(f"    {fmt:4} args {args:8} {plain:6.1f} -> {packed:5.1f} bytes ({plain / packed:.1f}x); "
                          f"{RUN_STEPS:,} steps: {plain * per_step * RUN_STEPS / 1e9:.1f} -> "
                          f"{packed * per_step * RUN_STEPS / 1e9:.1f} GB")
            c = row["cost"]
            none, gz = c["compress none"], c["compress gzip"]
            print(f"    tw.profile (JSON, args summary), torch on 1 thread ({c['plain_cpu_ms_per_step']:.1f} ms of "
                  f"CPU a step): the writer's CPU a step, compress none {none['writer_cpu_ms_per_step']:.2f} ms, "
                  f"gzip {gz['writer_cpu_ms_per_step']:.2f} ms: gzip's extra "
                  f"{100 * c['gzip_extra_cpu_share']:.1f}% of a step's CPU; wall over plain, none "
                  f"{c['compress none']['ratio']:.3f}x, gzip {c['compress gzip']['ratio']:.3f}x (gzip / none "
                  f"{c['gzip_over_none']:.3f}x)", flush=True)
    result["load_end"] = round(os.getloadavg()[0], 2)
    result["wall_s"] = round(time.time() - t0, 1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
