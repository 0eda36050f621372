# SPDX-License-Identifier: MIT
"""What a wrapped call costs outside the schedule's active steps, against inside them and unwrapped.

Everything under torch is wrapped (profile()); each configuration times CALLS calls of
torch.add(a, b) on 10-element tensors and CALLS of ``a + b`` (Tensor.__add__), interleaved (the
order rotates each repetition); per-call figures are medians over REPS repetitions of the
thread's CPU time (time.thread_time_ns: the writer thread's work is not in it), minus the
unwrapped call's.

  unwrapped     no profiler
  active        recording, args "none", records to files (no schedule: every step is active)
  idle-all      outside active steps, "summary": "all" (the default): the call is timed and counted
                for summary.json, no argument summary, no record written
  idle-active   outside active steps, "summary": "active": the wrapper calls through (one check)
  summary-only  records "summary": every call timed and counted for summary.json, no record file

Then a whole training run (an MLP, STEPS steps), the same configurations and a schedule that
records 3 steps in 10, interleaved, REPS_RUN times: the training loop's wall time as a ratio against
the unprofiled run (median; start and stop are timed by bench_training.py), and the bytes written
per step (record files, from the manifests).

Prints the tables, then one JSON line of the figures; `make bench` keeps them in build/bench-schedule.txt.
Run: PYTHONPATH=build/python python tests/bench/bench_schedule.py (about 20 s); by `make bench`.
BENCH=smoke: one repetition of a few calls and of 10 steps (tests/bench/modes.py).
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time

import torch

import torchwrapper as tw

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from modes import sized  # noqa: E402  (this folder's: BENCH)

CALLS = sized(1_000, 100_000, 100_000)
REPS = sized(1, 7, 7)
NEVER = 10 ** 9  # steps of waiting: the loop never reaches an active step

CONFIGS = {
    "unwrapped": None,
    "active": {},
    "idle-all": {"schedule": {"wait": NEVER, "active": 1}},
    "idle-active": {"schedule": {"wait": NEVER, "active": 1, "summary": "active"}},
    "summary-only": {"records": "summary"},
}
RUN_CONFIGS = dict(CONFIGS, **{"3-in-10": {"schedule": {"wait": 5, "warmup": 2, "active": 3}}})
STEPS = sized(10, 200, 200)   # 10: the 3-in-10 schedule reaches its active steps
REPS_RUN = sized(1, 9, 9)


def _time(fn) -> int:
    a, b = torch.randn(10), torch.randn(10)
    fn(a, b)
    t0 = time.thread_time_ns()
    for _ in range(CALLS):
        fn(a, b)
    return time.thread_time_ns() - t0


def main() -> None:
    torch.set_num_threads(1)
    results = {name: {"torch.add": [], "a + b": []} for name in CONFIGS}
    names = list(CONFIGS)
    for rep in range(REPS):
        for name in names[rep % len(names):] + names[:rep % len(names)]:
            config = CONFIGS[name]
            with tempfile.TemporaryDirectory(prefix="tw-bench-schedule-") as out:
                prof = None
                if config is not None:
                    prof = tw.profile(out_dir=out, gpu="off", **config).start()
                try:
                    results[name]["torch.add"].append(_time(lambda a, b: torch.add(a, b)) / CALLS)
                    results[name]["a + b"].append(_time(lambda a, b: a + b) / CALLS)
                finally:
                    if prof is not None:
                        prof.stop()
    base = {op: statistics.median(v) for op, v in results["unwrapped"].items()}
    print(f"per call, median of {REPS} x {CALLS} calls (thread CPU time), torch {torch.__version__}")
    print(f"{'config':<12} {'torch.add':>14} {'a + b':>14}")
    per_call = {}
    for name in names:
        cells = []
        per_call[name] = {}
        for op in ("torch.add", "a + b"):
            median = statistics.median(results[name][op])
            # the unwrapped call's time; for the others, what they add to it
            per_call[name][op] = round(median if name == "unwrapped" else median - base[op], 1)
            cells.append(f"{median:7.0f} ns" if name == "unwrapped" else f"{median - base[op]:+7.0f} ns")
        print(f"{name:<12} {cells[0]:>14} {cells[1]:>14}")
    sys.stdout.flush()
    print(json.dumps({"bench_schedule": {"calls": CALLS, "reps": REPS, "per_call_ns": per_call,
                                         "whole_run": whole_run()}, "torch": torch.__version__}))


def _train(steps: int) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                torch.nn.ReLU(), torch.nn.Linear(256, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(64, 128), torch.randint(0, 10, (64,))
    for _ in range(steps):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()


def _bytes_written(out_dir: str) -> int:
    import glob
    import json
    total = 0
    for path in glob.glob(f"{out_dir}/manifest*.json"):
        with open(path) as f:
            total += json.load(f)["bytes_written"]
    return total


def whole_run() -> dict:
    _train(sized(2, 20, 20))  # warm-up
    names = list(RUN_CONFIGS)
    seconds = {name: [] for name in names}
    per_step = {}
    for rep in range(REPS_RUN):
        for name in names[rep % len(names):] + names[:rep % len(names)]:
            config = RUN_CONFIGS[name]
            with tempfile.TemporaryDirectory(prefix="tw-bench-schedule-") as out:
                prof = tw.profile(out_dir=out, gpu="off", **config) if config is not None else None
                if prof is not None:
                    prof.start()
                try:
                    t0 = time.perf_counter()
                    _train(STEPS)
                    seconds[name].append(time.perf_counter() - t0)
                finally:
                    if prof is not None:
                        prof.stop()
                if prof is not None:
                    per_step[name] = _bytes_written(out) / STEPS
    base = statistics.median(seconds["unwrapped"])
    print(f"\nwhole run: {STEPS} steps of an MLP with Adam ({base * 1e3 / STEPS:.2f} ms a step unprofiled), median of "
          f"{REPS_RUN} interleaved runs (the training loop; start and stop not included)")
    print(f"{'config':<12} {'ratio':>8} {'bytes/step':>12}")
    rows = {}
    for name in names:
        ratio = statistics.median(seconds[name]) / base
        written = f"{per_step[name]:12.0f}" if name in per_step else f"{'':>12}"
        print(f"{name:<12} {ratio:7.3f}x {written}")
        rows[name] = {"ratio": round(ratio, 4), "bytes_per_step": per_step.get(name)}
    return {"steps": STEPS, "reps": REPS_RUN, "ms_per_step_unprofiled": round(base * 1e3 / STEPS, 3), "configs": rows}


if __name__ == "__main__":
    main()
