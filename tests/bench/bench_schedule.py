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

Run: PYTHONPATH=build/python python tests/bench/bench_schedule.py (about 20 s).
"""
from __future__ import annotations

import statistics
import sys
import tempfile
import time

import torch

import torchwrapper as tw

CALLS = 100_000
REPS = 7
NEVER = 10 ** 9  # steps of waiting: the loop never reaches an active step

CONFIGS = {
    "unwrapped": None,
    "active": {},
    "idle-all": {"schedule": {"wait": NEVER, "active": 1}},
    "idle-active": {"schedule": {"wait": NEVER, "active": 1, "summary": "active"}},
}


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
            prof = None
            if config is not None:
                prof = tw.profile(out_dir=tempfile.mkdtemp(prefix="tw-bench-schedule-"), gpu="off", **config).start()
            try:
                results[name]["torch.add"].append(_time(lambda a, b: torch.add(a, b)) / CALLS)
                results[name]["a + b"].append(_time(lambda a, b: a + b) / CALLS)
            finally:
                if prof is not None:
                    prof.stop()
    base = {op: statistics.median(v) for op, v in results["unwrapped"].items()}
    print(f"per call, median of {REPS} x {CALLS} calls (thread CPU time), torch {torch.__version__}")
    print(f"{'config':<12} {'torch.add':>14} {'a + b':>14}")
    for name in names:
        cells = []
        for op in ("torch.add", "a + b"):
            median = statistics.median(results[name][op])
            cells.append(f"{median:7.0f} ns" if name == "unwrapped" else f"{median - base[op]:+7.0f} ns")
        print(f"{name:<12} {cells[0]:>14} {cells[1]:>14}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
