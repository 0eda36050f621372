# SPDX-License-Identifier: MIT
"""make bench: per-call overhead of the wrapper, interleaved against the unwrapped call.

Each repetition times a loop of N plain calls and a loop of N profiled calls back to back (in
alternating order), in this process; the figure is the median over repetitions of the per-call
difference. BENCH=quick (default) or BENCH=full sets the number of repetitions.
"""
from __future__ import annotations

import gc
import json
import os
import platform
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import torchwrapper as tw

MODE = os.environ.get("BENCH", "quick")
REPS = {"quick": 101, "full": 501}.get(MODE)
if REPS is None:
    sys.exit(f"BENCH={MODE!r}: accepted values are 'quick' and 'full'")
N = 5_000


def loop_call(f, a, b, n=N):
    t0 = time.perf_counter_ns()
    for _ in range(n):
        f(a, b)
    return time.perf_counter_ns() - t0


def loop_call1(f, a, n=N):
    t0 = time.perf_counter_ns()
    for _ in range(n):
        f(a)
    return time.perf_counter_ns() - t0


def loop_add_operator(a, b, n=N):
    t0 = time.perf_counter_ns()
    for _ in range(n):
        a + b
    return time.perf_counter_ns() - t0


def interleaved(plain, profiled, reps=REPS):
    """Median per-call ns of plain, of profiled, and of their difference, interleaved."""
    plain_ns, diffs = [], []
    for rep in range(reps):
        gc.collect()
        if rep % 2:
            p = plain()
            q = profiled()
        else:
            q = profiled()
            p = plain()
        plain_ns.append(p / N)
        diffs.append((q - p) / N)
    return statistics.median(plain_ns), statistics.median(diffs)


def with_session(body):
    def run():
        s = tw.Session()
        s.start()
        try:
            return body()
        finally:
            s.stop()
            assert s.stats()["records"] >= N
    return run


def main():
    a = torch.ones(10)
    b = torch.ones(10)
    wadd = tw.wrap(torch.add, "torch.add")
    wrelu = tw.wrap(F.relu, "torch.nn.functional.relu")
    relu = F.relu
    add = torch.add
    for _ in range(3):  # warm up both paths
        loop_call(add, a, b)
        with_session(lambda: loop_call(wadd, a, b))()

    def profiled_operator():
        patcher = tw.Patcher()
        patcher.install(torch.Tensor, "__add__", "torch.Tensor.__add__")
        try:
            return with_session(lambda: loop_add_operator(a, b))()
        finally:
            patcher.restore()

    rows = []
    wdim = tw.wrap(torch.Tensor.dim, "torch.Tensor.dim")
    wview = tw.wrap(torch.Tensor.view, "torch.Tensor.view")
    dim, view = torch.Tensor.dim, torch.Tensor.view
    targets = {"torch.add (10 elements)": 30, "a + b (Tensor.__add__)": 30, "F.relu (Python function)": 80,
               "x.view(-1)": 30, "x.dim() (near-empty call)": 30}
    cases = [
        ("torch.add (10 elements)", lambda: loop_call(add, a, b), with_session(lambda: loop_call(wadd, a, b))),
        ("a + b (Tensor.__add__)", lambda: loop_add_operator(a, b), profiled_operator),
        ("F.relu (Python function)", lambda: loop_call1(relu, a), with_session(lambda: loop_call1(wrelu, a))),
        ("x.view(-1)", lambda: loop_call(view, a, -1), with_session(lambda: loop_call(wview, a, -1))),
        ("x.dim() (near-empty call)", lambda: loop_call1(dim, a), with_session(lambda: loop_call1(wdim, a))),
    ]
    print(f"per-call overhead, median of {REPS} interleaved repetitions of {N} calls "
          f"(clock: {tw._core.clock_source()}, torch {torch.__version__}, Python {platform.python_version()})")
    print(f"{'call':28} {'unprofiled':>12} {'overhead':>10} {'target':>8}")
    for name, plain, profiled in cases:
        base, overhead = interleaved(plain, profiled)
        ok = "ok" if overhead <= targets[name] else "MISSED"
        print(f"{name:28} {base:10.0f}ns {overhead:+8.1f}ns {targets[name]:>6}ns {ok}")
        rows.append({"call": name, "unprofiled_ns": base, "overhead_ns": overhead, "target_ns": targets[name]})
    out = os.environ.get("BENCH_JSON", "build/bench-overhead.json")
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "w") as f:
        json.dump({"mode": MODE, "reps": REPS, "calls_per_rep": N, "machine": platform.machine(),
                   "cpu_count": os.cpu_count(), "results": rows}, f, indent=2)
    print(f"results: {out}")


if __name__ == "__main__":
    main()
