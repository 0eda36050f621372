# SPDX-License-Identifier: MIT
"""The overhead on real training: a GPT-2-class decoder LM and a BERT-class encoder classifier
(tests/bench/transformers.py: 2 layers, hidden 128, seq 32, batch 4; AdamW, clip_grad_norm_, an LR
scheduler), profiled every way a user would, side by side in one run, interleaved, median of
REPS repetitions, each as a ratio to the unprofiled block of the same repetition:

  in-process, tw.profile(), blocks of STEPS steps after a warm-up block in the same session:
    files (CSV) args none  |  files args summary  |  records kept in memory, args none
  first block: a fresh session started inside the timed code (start + STEPS steps)
  torch.profiler (CPU activities; its exit counted)
  process level: `python -m torchwrapper run` vs `python transformers.py`, loop time as the
    program itself measures it (steady blocks; the session is started before the program runs)

and the cost per record in each ((profiled - plain) / records), next to the micro figure of
run.py (build/bench.json) when it was run before. Beside each wall-clock ratio, the ratio of the
training thread's own CPU time (time.thread_time_ns): it leaves out the writer thread and the time
the thread waited for a core, so it holds still on a shared VM where wall time does not.
Run by `make bench`; BENCH=full for more, smoke for one repetition of a few steps (tests/bench/modes.py).
"""
from __future__ import annotations

import gc
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import torch

import torchwrapper as tw

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from transformers import FACTORIES  # noqa: E402  (this folder's module, not the PyPI package)
from modes import sized  # noqa: E402  (this folder's: BENCH)

REPS = int(os.environ.get("BENCH_REPS", 0)) or sized(1, 9, 21)
STEPS = sized(2, 10, 10)
MODELS = ("gpt", "bert")
PROCESS_MODELS = MODELS[:sized(1, 2, 2)]   # through `run` (each process imports torch): smoke, the first
THREADS = 1      # torch on one core, the other left to the writer thread (as bench_training.py)
BUILD = os.environ.get("top_builddir", ".")


CPU = {}   # the training thread's CPU time of the last timed() block, by mode (see in_process)


def timed(step, steps=STEPS, cpu_key=None):
    c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
    for _ in range(steps):
        step()
    elapsed = time.perf_counter_ns() - t0
    if cpu_key is not None:
        CPU[cpu_key] = time.thread_time_ns() - c0
    return elapsed


def in_process(name, tmp):
    step = FACTORIES[name]()
    for _ in range(3):
        timed(step)
    records = {}

    def session(key, first=False, **options):
        def run():
            out = options.get("out_dir")
            if out:
                shutil.rmtree(out, ignore_errors=True)
            prof = tw.profile(**options)
            if first:   # the session's start and its first block, inside the timed code
                c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
                prof.start()
                for _ in range(STEPS):
                    step()
                elapsed = time.perf_counter_ns() - t0
                CPU["profiled"] = time.thread_time_ns() - c0
            else:
                prof.start()
                timed(step)          # warm-up block in the session: first calls, first chunks
                elapsed = timed(step, cpu_key="profiled")
            prof.stop()
            records[key] = prof.stats()["records"] / (1 if first else 2)
            return elapsed
        return run

    def profiler():
        import torch.profiler as tp
        c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
        with tp.profile(activities=[tp.ProfilerActivity.CPU]):
            for _ in range(STEPS):
                step()
        elapsed = time.perf_counter_ns() - t0
        CPU["profiled"] = time.thread_time_ns() - c0
        return elapsed

    files = os.path.join(tmp, "files")
    modes = [("files, args none", session("files, args none", out_dir=files, format="csv", args="none")),
             ("files, args summary", session("files, args summary", out_dir=files, format="csv", args="summary")),
             ("memory, args none", session("memory, args none", args="none")),
             ("first block (start inside)", session("first block (start inside)", first=True, out_dir=files,
                                                    format="csv", args="none")),
             ("torch.profiler", profiler)]
    ratios = {m: [] for m, _ in modes}
    cpu_ratios = {m: [] for m, _ in modes}
    extra = {m: [] for m, _ in modes}
    plains = []
    for rep in range(REPS):
        gc.collect()
        order = modes[rep % len(modes):] + modes[:rep % len(modes)]
        for mode, fn in order:
            # each mode against its own plain block, adjacent, which one first alternating
            if rep % 2:
                plain, profiled = timed(step, cpu_key="plain"), fn()
            else:
                profiled, plain = fn(), timed(step, cpu_key="plain")
            plains.append(plain)
            ratios[mode].append(profiled / plain)
            cpu_ratios[mode].append(CPU["profiled"] / CPU["plain"])
            extra[mode].append(profiled - plain)
    out = {"plain_ms_per_step": round(statistics.median(plains) / STEPS / 1e6, 3)}
    for mode in ratios:
        row = {"ratio": round(statistics.median(ratios[mode]), 4),
               "cpu_ratio": round(statistics.median(cpu_ratios[mode]), 4),
               "extra_ms_per_block": round(statistics.median(extra[mode]) / 1e6, 3)}
        if mode in records:
            row["records_per_step"] = round(records[mode] / STEPS, 1)
            row["ns_per_record"] = round(statistics.median(extra[mode]) / records[mode], 1)
        out[mode] = row
    return out


def process_level(name, tmp):
    """Plain program vs the same program under `python -m torchwrapper run`, loop time as it prints
    it: blocks 1.. of BLOCKS (block 0 warms up), interleaved processes, median of REPS."""
    blocks = sized(2, 4, 4)
    script = os.path.join(HERE, "transformers.py")
    env = dict(os.environ)
    plain_cmd = [sys.executable, script, name, str(STEPS), str(blocks), str(THREADS)]
    out_dir = os.path.join(tmp, "run")
    runs = {"plain": [], "run, args none": [], "run, default args": []}
    cmds = {"plain": plain_cmd,
            "run, args none": [sys.executable, "-m", "torchwrapper", "run", "--no-report", "-o", out_dir,
                               "--set", "format=csv", "--set", "args=none", *plain_cmd[1:]],
            "run, default args": [sys.executable, "-m", "torchwrapper", "run", "--no-report", "-o", out_dir,
                                  "--set", "format=csv", *plain_cmd[1:]]}
    for rep in range(REPS):
        keys = list(cmds)
        keys = keys[rep % len(keys):] + keys[:rep % len(keys)]
        for key in keys:
            shutil.rmtree(out_dir, ignore_errors=True)
            result = subprocess.run(cmds[key], capture_output=True, text=True, env=env, timeout=600)
            if result.returncode != 0:
                raise RuntimeError(f"{cmds[key]} failed: {result.stderr[-2000:]}")
            lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
            runs[key].append(sum(line["ns"] for line in lines[1:]))
    plain = runs.pop("plain")
    return {key: round(statistics.median(v / p for v, p in zip(values, plain)), 4) for key, values in runs.items()}


def micro_figure():
    """run.py's per-call overhead of torch.add, everything wrapped, CSV files on, args none (ns)."""
    path = os.path.join(BUILD, "build", "bench.json")
    try:
        with open(path) as f:
            rows = json.load(f)["results"]["with_files"]
        return next(r["args_none_ns"] for r in rows if r["call"].startswith("torch.add"))
    except (OSError, ValueError, KeyError, StopIteration):
        return None


def main():
    torch.set_num_threads(THREADS)
    results = {"reps": REPS, "steps_per_block": STEPS, "python": platform.python_version(),
               "torch": torch.__version__, "cpu": _cpu(), "micro_ns_per_call_csv": micro_figure(), "models": {}}
    with tempfile.TemporaryDirectory(prefix="tw-bench-transformer-") as tmp:
        for name in MODELS:
            row = in_process(name, tmp)
            if name in PROCESS_MODELS:
                row["process"] = process_level(name, tmp)
            results["models"][name] = row
            print(f"  {name}: plain {row['plain_ms_per_step']:.2f} ms/step")
            for mode, v in row.items():
                if isinstance(v, dict) and "ratio" in v:
                    per = f", {v['ns_per_record']:.0f} ns/record ({v['records_per_step']:.0f} records/step)" \
                        if "ns_per_record" in v else ""
                    print(f"    {mode:28} {v['ratio']:.3f}x (thread CPU {v['cpu_ratio']:.3f}x){per}")
            for mode, ratio in row.get("process", {}).items():
                print(f"    python -m torchwrapper {mode:11} {ratio:.3f}x (loop time, separate processes)")
    out = os.environ.get("BENCH_TRANSFORMER_JSON", os.path.join(BUILD, "build", "bench-transformer.json"))
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(results, f, indent=1)
    return results


def _cpu():
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor()


if __name__ == "__main__":
    print(f"transformer training, overhead per way of profiling (median of {REPS} interleaved repetitions, "
          f"{STEPS} steps per block, targets: files+args none <= 1.03x, args summary <= 1.10x):")
    main()
