# SPDX-License-Identifier: MIT
"""What measuring memory (config memory) costs, in one process, interleaved, medians of REPS
repetitions (one thread):

  per allocation: torch.empty(64) in a loop (an allocation and a free each, ~0.5-1 us), BLOCK calls
    a timed block, profiled with memory off and on; (on - off) / calls. With memory on, the CPU
    allocator looks up the thread's reporter and updates its own table of live blocks under a lock
    on every allocation and free (c10's ProfiledCPUMemoryReporter), then our hook counts it.
  whole training: the transformers models of bench_hf.py (BertForSequenceClassification,
    GPT2LMHeadModel, LlamaForCausalLM: small configs, random init, AdamW), or without the
    `transformers` package the GPT-2-class and BERT-class loops of tests/bench/transformers.py;
    each mode as a ratio to the unprofiled block of the same repetition (files on, CSV, args none,
    aten backward): memory off, memory on, and for reference torch.profiler (CPU) without and with
    profile_memory=True.

Times are this thread's CPU time (time.thread_time_ns; everything runs on it at one thread), so
that other processes on a shared machine, which take the CPU away in turns, do not land in one mode
more than another; BENCH_CLOCK=wall takes time.perf_counter_ns instead. Prints the figures and one
JSON line; `make bench` tees it into build/bench-memory.txt. BENCH=full for more repetitions,
smoke to check the script runs; BENCH_REPS overrides; BENCH_MEMORY_MODELS=bert,gpt2 picks models.
"""
from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time

import torch

import torchwrapper as tw

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_hf  # noqa: E402  (the transformers models, and the import that skips this folder's module)
import modes  # noqa: E402  (this folder's: the interleaved training-loop modes)

REPS = int(os.environ.get("BENCH_REPS", 0)) or modes.sized(1, 15, 41)
BLOCK = modes.sized(500, 5000, 5000)   # calls per timed block
STEPS = modes.sized(2, 10, 10)         # training steps per timed block
CLOCK = time.perf_counter_ns if os.environ.get("BENCH_CLOCK") == "wall" else time.thread_time_ns


def per_allocation(tmp):
    torch.set_num_threads(1)

    def block():
        t0 = CLOCK()
        for _ in range(BLOCK):
            torch.empty(64)
        return CLOCK() - t0

    diffs, base = [], []
    for rep in range(REPS):
        times = {}
        for memory in ((False, True) if rep % 2 == 0 else (True, False)):
            path = os.path.join(tmp, f"alloc-{memory}")
            shutil.rmtree(path, ignore_errors=True)
            with tw.profile(out_dir=path, format="csv", args="none", memory=memory):
                block()   # warm: chunks in place
                times[memory] = block()
        diffs.append((times[True] - times[False]) / BLOCK)
        base.append(times[False] / BLOCK)
    return {"per_call_ns": statistics.median(diffs), "empty_profiled_ns": statistics.median(base)}


def workloads():
    """(name, step factory): the transformers package's models, else this folder's."""
    hf = bench_hf.import_transformers()
    if hf is not None:
        names = os.environ.get("BENCH_MEMORY_MODELS", "bert,gpt2,llama").split(",")
        return [(bench_hf.TITLES[n], lambda n=n: bench_hf.make_step(hf, n)) for n in names]
    sys.path.insert(0, HERE)
    sys.modules.pop("transformers", None)
    from transformers import FACTORIES   # this folder's module
    return [(f"{n} (tests/bench/transformers.py)", FACTORIES[n]) for n in ("gpt", "bert")]


def training(name, factory, tmp):
    torch.set_num_threads(1)
    step = factory()
    for _ in range(3):
        step()

    timed = modes.block_timer(step, STEPS, CLOCK)

    def torch_profiler(memory):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=memory):
            return timed()

    each = {"memory off": modes.profiled(step, timed, modes.out_dir(tmp, "train", False), memory=False),
            "memory on": modes.profiled(step, timed, modes.out_dir(tmp, "train", True), memory=True),
            "torch.profiler": lambda: torch_profiler(False),
            "torch.profiler profile_memory": lambda: torch_profiler(True)}
    ratios, plains = modes.interleaved(timed, each, REPS)
    # what a step allocates (the same every step): the outermost calls' bytes, and the peak
    with tw.profile(memory=True) as prof:
        step()
    top = [r for r in prof.records() if r.depth == 0]
    step_bytes = {"allocated": sum(r.mem_alloc for r in top), "freed": sum(r.mem_freed for r in top),
                  "records": len(prof.records())}
    return (ratios, step_bytes,
            statistics.median(plains) / STEPS / 1e6)


def main() -> None:
    tmp = tempfile.mkdtemp(prefix="tw-bench-memory-")
    try:
        alloc = per_allocation(tmp)
        print("memory per allocation (torch.empty(64), one thread, median of %d): +%.0f ns (the call profiled with "
              "memory off: %.0f ns)" % (REPS, alloc["per_call_ns"], alloc["empty_profiled_ns"]))
        results = {"per_allocation": alloc}
        for name, factory in workloads():
            r, step_bytes, step_ms = training(name, factory, tmp)
            results[name] = {"ratios": r, "step": step_bytes, "unprofiled_step_ms": step_ms}
            print(f"{name}: " + ", ".join(f"{m} {v:.3f}x" for m, v in r.items()) +
                  f" (median of {REPS}, one thread; unprofiled step {step_ms:.1f} ms); a step allocates "
                  f"{step_bytes['allocated'] / 2**20:.1f} MiB in {step_bytes['records']} records")
        print(modes.result_json("bench_memory", results, CLOCK))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
