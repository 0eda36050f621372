# SPDX-License-Identifier: MIT
"""What call sites (config sites) cost: "boundary" (the default) and "all" against "off".

Micro: everything under torch wrapped, records to CSV files, args "none"; each configuration times
CALLS calls, interleaved (the order rotates each repetition), per-call figures are medians over REPS
repetitions of the thread's CPU time (time.thread_time_ns: the writer thread is not in it):

  torch.add(a, b)   called from this file: one cache probe, a site
  a + b             Tensor.__add__, the same
  nn.Linear(x)      Module.__call__ (torch's code) calls the wrapped forward (an outermost call whose
                    caller is torch's: the walk out to this file), which calls F.linear (torch's
                    caller: no site); two records per call

Whole run: the GPT-2-class and BERT-class training steps of transformers.py (as bench_transformer.py),
blocks of STEPS steps in a session that records to CSV files, "boundary" and "all" each against an
"off" block adjacent to it, median of the ratios over REPS repetitions; and the extra per record.

Run: PYTHONPATH=build/python python tests/bench/bench_sites.py (about 1 minute); by `make bench`.
"""
from __future__ import annotations

import gc
import json
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
from transformers import FACTORIES  # noqa: E402  (this folder's module)
from modes import sized  # noqa: E402  (this folder's: BENCH)

CALLS = sized(1_000, 20_000, 20_000)
REPS = sized(1, 15, 41)
STEPS = sized(2, 10, 10)
WHOLE_REPS = sized(1, 9, 21)
BUILD = os.environ.get("top_builddir", ".")
SITES = ("off", "boundary", "all")


def _time(fn, *args) -> int:
    fn(*args)
    t0 = time.thread_time_ns()
    for _ in range(CALLS):
        fn(*args)
    return time.thread_time_ns() - t0


def micro(tmp):
    a, b = torch.randn(10), torch.randn(10)
    linear, x = torch.nn.Linear(4, 4), torch.randn(2, 4)
    calls = {"torch.add(a, b)": (lambda: torch.add(a, b)), "a + b": (lambda: a + b),
             "nn.Linear(x)": (lambda: linear(x))}
    results = {s: {c: [] for c in calls} for s in SITES}
    for rep in range(REPS):
        gc.collect()
        for sites in SITES[rep % 3:] + SITES[:rep % 3]:
            out = os.path.join(tmp, "micro")
            shutil.rmtree(out, ignore_errors=True)
            prof = tw.profile(out_dir=out, format="csv", args="none", gpu="off", sites=sites).start()
            try:
                for name, fn in calls.items():
                    results[sites][name].append(_time(fn) / CALLS)
            finally:
                prof.stop()
    rows = {}
    for name in calls:
        base = results["off"][name]
        rows[name] = {"off_ns": round(statistics.median(base), 1)}
        for sites in SITES[1:]:
            rows[name][f"{sites}_extra_ns"] = round(statistics.median(
                [v - b for v, b in zip(results[sites][name], base)]), 1)
    return rows


def whole_run(name, tmp):
    step = FACTORIES[name]()
    for _ in range(3):
        step()
    records = {}

    def block(sites):
        out = os.path.join(tmp, "whole")
        shutil.rmtree(out, ignore_errors=True)
        prof = tw.profile(out_dir=out, format="csv", args="none", gpu="off", sites=sites).start()
        for _ in range(STEPS):   # warm-up block in the session: first calls, first sites
            step()
        c0 = time.thread_time_ns()
        for _ in range(STEPS):
            step()
        elapsed = time.thread_time_ns() - c0
        prof.stop()
        records[sites] = prof.stats()["records"] / 2
        return elapsed

    ratios = {s: [] for s in SITES[1:]}
    extra = {s: [] for s in SITES[1:]}
    for rep in range(WHOLE_REPS):
        gc.collect()
        for sites in (SITES[1:] if rep % 2 else SITES[:0:-1]):
            if rep % 2:
                off, on = block("off"), block(sites)
            else:
                on, off = block(sites), block("off")
            ratios[sites].append(on / off)
            extra[sites].append(on - off)
    out = {"records_per_step": round(records["off"] / STEPS, 1)}
    for sites in SITES[1:]:
        out[sites] = {"ratio": round(statistics.median(ratios[sites]), 4),
                      "ns_per_record": round(statistics.median(extra[sites]) / records["off"], 1)}
    return out


def main():
    torch.set_num_threads(1)
    results = {"calls": CALLS, "reps": REPS, "torch": torch.__version__, "python": sys.version.split()[0]}
    with tempfile.TemporaryDirectory(prefix="tw-bench-sites-") as tmp:
        results["micro"] = micro(tmp)
        print(f"call sites, per call over sites \"off\" (median of {REPS} x {CALLS} calls, thread CPU time)")
        for name, row in results["micro"].items():
            print(f"  {name:18} off {row['off_ns']:7.0f} ns   boundary {row['boundary_extra_ns']:+6.1f} ns"
                  f"   all {row['all_extra_ns']:+6.1f} ns")
        results["whole_run"] = {}
        for name in ("gpt", "bert"):
            row = whole_run(name, tmp)
            results["whole_run"][name] = row
            print(f"  {name} training step ({row['records_per_step']:.0f} records/step): "
                  f"boundary {row['boundary']['ratio']:.4f}x ({row['boundary']['ns_per_record']:+.1f} ns/record), "
                  f"all {row['all']['ratio']:.4f}x ({row['all']['ns_per_record']:+.1f} ns/record) over \"off\"")
    path = os.environ.get("BENCH_SITES_JSON", os.path.join(BUILD, "build", "bench-sites.json"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
