# SPDX-License-Identifier: MIT
"""What counting FLOPs (config flops) costs, against flops off in the same process, interleaved,
medians of REPS repetitions (one thread):

  per call: F.linear on small tensors (the call itself ~2-4 us), BLOCK calls a timed block, in
    no_grad (forward formula only) and with grad (the formula, and the walk from the result's
    grad_fn to its compute node whose backward FLOPs the node's record carries); (on - off) / calls.
  whole training: the GPT-2-class and BERT-class loops of tests/bench/transformers.py (files on,
    CSV, args none, aten backward), each mode as a ratio to the unprofiled block of the same
    repetition: flops off, flops on, and for reference torch.profiler (CPU) with with_flops=True
    (which counts forward operators only) and torch.utils.flop_counter.FlopCounterMode.

Times are this thread's CPU time (time.thread_time_ns; everything runs on it at one thread), so
that other processes on a shared machine, which take the CPU away in turns, do not land in one mode
more than another; BENCH_CLOCK=wall takes time.perf_counter_ns instead. Prints the figures and one
JSON line; `make bench` tees it into build/bench-flops.txt. BENCH=full for more repetitions;
BENCH_REPS overrides.
"""
from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

import torchwrapper as tw

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from transformers import FACTORIES  # noqa: E402  (this folder's module, not the PyPI package)
import modes  # noqa: E402  (this folder's: the interleaved training-loop modes)

REPS = int(os.environ.get("BENCH_REPS", 0)) or modes.sized(1, 15, 41)
BLOCK = modes.sized(500, 5000, 5000)   # calls per timed block
CLOCK = time.perf_counter_ns if os.environ.get("BENCH_CLOCK") == "wall" else time.thread_time_ns
STEPS = modes.sized(2, 10, 10)         # training steps per timed block


def per_call(tmp):
    torch.set_num_threads(1)
    x, w, b = torch.randn(16, 32), torch.randn(32, 32, requires_grad=True), torch.randn(32, requires_grad=True)

    def block(grad):
        t0 = CLOCK()
        with torch.set_grad_enabled(grad):
            for _ in range(BLOCK):
                F.linear(x, w, b)
        return CLOCK() - t0

    out = {}
    for grad in (False, True):
        diffs, base = [], []
        for rep in range(REPS):
            times = {}
            for flops in ((False, True) if rep % 2 == 0 else (True, False)):
                path = os.path.join(tmp, f"call-{grad}-{flops}")
                shutil.rmtree(path, ignore_errors=True)
                with tw.profile(out_dir=path, format="csv", args="none", flops=flops):
                    block(grad)   # warm: chunks and rings in place
                    times[flops] = block(grad)
            diffs.append((times[True] - times[False]) / BLOCK)
            base.append(times[False] / BLOCK)
        out["grad" if grad else "no_grad"] = {"per_call_ns": statistics.median(diffs),
                                             "linear_profiled_ns": statistics.median(base)}
    return out


def training(name, tmp):
    torch.set_num_threads(1)
    step = FACTORIES[name]()
    for _ in range(3):
        step()

    timed = modes.block_timer(step, STEPS, CLOCK)

    def torch_profiler():
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], with_flops=True):
            return timed()

    def flop_counter():
        with FlopCounterMode(display=False):
            return timed()

    each = {"flops off": modes.profiled(step, timed, modes.out_dir(tmp, name, False), flops=False),
            "flops on": modes.profiled(step, timed, modes.out_dir(tmp, name, True), flops=True),
            "torch.profiler with_flops": torch_profiler, "FlopCounterMode": flop_counter}
    ratios = modes.interleaved(timed, each, REPS)[0]
    # what a step counts (the same every step)
    with tw.profile(flops=True) as prof:
        step()
    records = prof.records()
    flops = {"forward": sum(r.flops for r in records if r.fwd_call_id == 0),
             "backward": sum(r.flops for r in records if r.fwd_call_id != 0)}
    return ratios, flops


def main() -> None:
    tmp = tempfile.mkdtemp(prefix="tw-bench-flops-")
    try:
        calls = per_call(tmp)
        print("flops per call (F.linear 16x32 @ 32x32, one thread, median of %d): no_grad +%.1f ns (call %.0f ns), "
              "grad +%.1f ns (call %.0f ns)" % (REPS, calls["no_grad"]["per_call_ns"],
                                                calls["no_grad"]["linear_profiled_ns"], calls["grad"]["per_call_ns"],
                                                calls["grad"]["linear_profiled_ns"]))
        results = {"per_call": calls}
        for name in ("gpt", "bert"):
            r, flops = training(name, tmp)
            results[name] = {"ratios": r, "flops_per_step": flops}
            print(f"{name}: " + ", ".join(f"{m} {v:.3f}x" for m, v in r.items()) +
                  f" (median of {REPS}, one thread); a step: {flops['forward'] / 1e6:.1f} MFLOP forward, "
                  f"{flops['backward'] / 1e6:.1f} MFLOP backward")
        print(modes.result_json("bench_flops", results, CLOCK))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
