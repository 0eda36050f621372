# SPDX-License-Identifier: MIT
"""make bench: what profiling costs, measured against the unprofiled run in the same process.

Per-call overhead: blocks of N plain calls and N profiled calls alternate (which comes first
alternates too), many times; the figure is the median over repetitions of the per-call difference.
Short blocks and many repetitions keep this VM's frequent disturbances out of the median. The
session is restarted every RESTART repetitions so that record chunks are recycled, as the writer
thread will do, instead of being faulted in fresh.

BENCH=quick (default), full or smoke (tests/bench/modes.py) sets the number of repetitions; BENCH_JSON the
result file.
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
import time

import torch
import torch.nn.functional as F

import torchwrapper as tw

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from modes import MODE, sized  # noqa: E402  (this folder's: BENCH)

REPS = sized(3, 301, 1501)
N = 1000
RESTART = 100


def loop2(f, a, b, n=N):
    t0 = time.perf_counter_ns()
    for _ in range(n):
        f(a, b)
    return time.perf_counter_ns() - t0


def loop1(f, a, n=N):
    t0 = time.perf_counter_ns()
    for _ in range(n):
        f(a)
    return time.perf_counter_ns() - t0


def loop_add(a, b, n=N):
    t0 = time.perf_counter_ns()
    for _ in range(n):
        a + b
    return time.perf_counter_ns() - t0


def interleave(plain, profiled, begin, end):
    """Median per-call time of plain and median per-call difference (profiled - plain).

    begin()/end() bracket each group of RESTART repetitions (start and stop a session)."""
    base, diffs = [], []
    gc.collect()
    for group in range(0, REPS, RESTART):
        begin()
        for rep in range(group, min(group + RESTART, REPS)):
            if rep % 2:
                p = plain()
                q = profiled()
            else:
                q = profiled()
                p = plain()
            base.append(p / N)
            diffs.append((q - p) / N)
        end()
    return statistics.median(base), statistics.median(diffs)


def session_brackets(**options):
    """begin/end for interleave(): a fresh Session(**options) for each group of repetitions."""
    holder = {}

    def begin():
        holder["s"] = tw.Session(**options)
        holder["s"].start()

    def end():
        holder.pop("s").stop()

    return begin, end


def row(name, base, overhead, target=None):
    if target is None:
        print(f"  {name:30} {base:9.0f} ns {overhead:+8.1f} ns")
    else:
        status = "ok" if overhead <= target else "MISSED"
        print(f"  {name:30} {base:9.0f} ns {overhead:+8.1f} ns {target:6d} ns  {status}")
    return {"call": name, "unprofiled_ns": round(base, 1), "overhead_ns": round(overhead, 1), "target_ns": target}


def bench_single_wrappers(a, b):
    """One wrapper per measured API (tw.wrap), in a bare session."""
    print(f"per-call overhead, one API wrapped (median of {REPS} interleaved blocks of {N} calls):")
    print(f"  {'call':30} {'unprofiled':>12} {'overhead':>11} {'target':>9}")
    begin, end = session_brackets()

    w = {name: tw.wrap(obj, name) for name, obj in [("torch.add", torch.add), ("relu", F.relu),
                                                      ("view", torch.Tensor.view), ("dim", torch.Tensor.dim)]}
    rows = []
    cases = [
        ("torch.add (10 elements)", lambda: loop2(torch.add, a, b), lambda: loop2(w["torch.add"], a, b), 30),
        ("F.relu (Python function)", lambda: loop1(F.relu, a), lambda: loop1(w["relu"], a), 80),
        ("x.view(-1)", lambda: loop2(torch.Tensor.view, a, -1), lambda: loop2(w["view"], a, -1), 30),
        ("x.dim() (near-empty call)", lambda: loop1(torch.Tensor.dim, a), lambda: loop1(w["dim"], a), 30),
    ]
    for name, plain, profiled, target in cases:
        rows.append(row(name, *interleave(plain, profiled, begin, end), target))

    # a + b: Tensor.__add__ installed for the profiled blocks only.
    patcher = tw.Patcher()

    def profiled_add():
        patcher.install(torch.Tensor, "__add__", "torch.Tensor.__add__")
        try:
            return loop_add(a, b)
        finally:
            patcher.restore()

    rows.append(row("a + b (Tensor.__add__)", *interleave(lambda: loop_add(a, b), profiled_add, begin, end), 30))
    return rows


def bench_args(a, b):
    """args="summary": a call with two tensor arguments (the summary reads dtype, shape, device), the
    tensors read by torch's Python getters (no libtorch layer), then by the libtorch layer as
    TorchWrapper and run do. Python's first: once loaded, the layer stays for the process."""
    from torchwrapper._profile import _torch_layer

    print(f"per-call overhead with argument summaries (median of {REPS} interleaved blocks):")
    rows = []
    w = tw.wrap(torch.add, "torch.add")
    overhead = {}
    for mode, name, options, target in (("none", "args=none", {}, 30), ("summary", "summary (Py)", {}, 400),
                                        ("summary", "args=summary", {"torch_layer": _torch_layer()}, 90)):
        begin, end = session_brackets(args=mode, **options)
        rows.append(row(f"torch.add(a, b), {name}",
                        *interleave(lambda: loop2(torch.add, a, b), lambda: loop2(w, a, b), begin, end), target))
        overhead[name] = rows[-1]["overhead_ns"]
    per_tensor = (overhead["args=summary"] - overhead["args=none"]) / 2
    print(f"  {'args summary per tensor argument':30} {'':12} {per_tensor:+8.1f} ns {30:6d} ns  "
          f"{'ok' if per_tensor <= 30 else 'MISSED'}")
    rows.append({"call": "args summary per tensor argument ((summary - none) / 2)",
                 "unprofiled_ns": rows[0]["unprofiled_ns"], "overhead_ns": round(per_tensor, 1), "target_ns": 30})
    return rows


def bench_everything_wrapped(a, b):
    """tw.profile(): everything under torch wrapped. Plain blocks call the originals (__wrapped__)."""
    print(f"per-call overhead, everything under torch wrapped (median of {REPS} interleaved blocks):")
    holder = {}

    def begin():
        holder["p"] = tw.profile().start()

    def end():
        holder.pop("p").stop()

    rows = []
    add_w, relu_w = tw.wrap(torch.add, "x"), tw.wrap(F.relu, "y")  # just for their originals below
    add, relu = add_w.__wrapped__, relu_w.__wrapped__
    cases = [
        ("torch.add (10 elements)", lambda: loop2(add, a, b), lambda: loop2(torch.add, a, b), 30),
        ("F.relu (Python function)", lambda: loop1(relu, a), lambda: loop1(F.relu, a), 80),
    ]
    for name, plain, profiled, target in cases:
        rows.append(row(name, *interleave(plain, profiled, begin, end), target))

    def begin_defaults():
        # `run`'s defaults (args "summary", detail "sampled") in a step without the detail: the path
        # most of a long run's calls take (steps 10.. but one in 20)
        holder["p"] = tw.profile(args="summary", detail="sampled").start()
        for _ in range(11):
            holder["p"].session.step()

    rows.append(row("torch.add, run's defaults, a step without detail",
                    *interleave(cases[0][1], cases[0][2], begin_defaults, end), 30))
    return rows


def python_decorator(fn, name, log):
    """The technique of the pure-Python wrappers this tool replaces, minimally: time each call with
    perf_counter_ns and append to a dict of lists."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter_ns()
        try:
            return fn(*args, **kwargs)
        finally:
            log.setdefault(name, []).append((t0, time.perf_counter_ns() - t0))
    return wrapper


def bench_alternatives(a, b):
    """The same calls under torch.profiler (cost inside the block, and paid at its exit) and under
    a pure-Python decorator, against torchwrapper's figure for the same call."""
    import torch.profiler as tp

    print(f"the alternatives, same calls (median of {REPS // 3} interleaved blocks of {N} calls):")
    rows = []
    reps = REPS // 3
    log: dict = {}
    dec_add = python_decorator(torch.add, "torch.add", log)
    plain = lambda: loop2(torch.add, a, b)  # noqa: E731
    w = tw.wrap(torch.add, "torch.add")
    begin, end = session_brackets()
    base, ours = interleave(plain, lambda: loop2(w, a, b), begin, end)
    rows.append(row("torch.add: torchwrapper", base, ours, 30))
    base, dec = interleave(plain, lambda: (log.clear(), loop2(dec_add, a, b))[1], lambda: None, lambda: None)
    rows.append(row("torch.add: Python decorator", base, dec))
    inside, exits = [], []
    for rep in range(reps):
        p0 = loop2(torch.add, a, b)
        prof = tp.profile(activities=[tp.ProfilerActivity.CPU], record_shapes=bool(rep % 2))
        prof.__enter__()
        q = loop2(torch.add, a, b)
        t0 = time.perf_counter_ns()
        prof.__exit__(None, None, None)
        exits.append((time.perf_counter_ns() - t0) / N)
        inside.append((q - p0) / N)
    prof_inside, prof_exit = statistics.median(inside), statistics.median(exits)
    print(f"  {'torch.add: torch.profiler':30} {base:9.0f} ns {prof_inside:+8.1f} ns in the block, "
          f"{prof_exit:+.1f} ns per call at exit")
    rows.append({"call": "torch.add: torch.profiler", "unprofiled_ns": round(base, 1),
                 "overhead_ns": round(prof_inside, 1), "exit_ns_per_call": round(prof_exit, 1)})
    for name, other in (("torch.profiler (block + exit)", prof_inside + prof_exit), ("Python decorator", dec)):
        print(f"  torchwrapper's overhead is {other / max(ours, 1e-9):.1f}x lower than {name}'s "
              f"(target: at least 10x)")
    return rows


def bench_with_files(a, b):
    """Everything wrapped, CSV files written, args none and summary: the calls of a training step.
    Each repetition starts a profile, runs a block, stops it (outside the timing), then runs the
    same block unprofiled, so both blocks run the very same code."""
    import tempfile

    reps = sized(1, 61, 301)
    n = 200
    lin = torch.nn.Linear(64, 64)
    x = torch.randn(8, 64)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    model(torch.randn(4, 32)).sum().backward()
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    cases = [
        ("torch.add (10 elements)", lambda: loop2(torch.add, a, b, n), 1),
        ("a + b", lambda: loop_add(a, b, n), 1),
        ("x.view(-1)", lambda: loop2(torch.Tensor.view, a, -1, n), 1),
        ("F.relu (Python function)", lambda: loop1(F.relu, a, n), 1),
        ("nn.Linear(64, 64) forward", lambda: loop1(lin, x, n), None),
        ("optimizer.step() (SGD, 4 tensors)", lambda: loop1(lambda _: opt.step(), None, n), None),
    ]
    print(f"per-call overhead, everything wrapped, CSV files on (median of {reps} interleaved blocks of {n}):")
    print(f"  {'call':34} {'unprofiled':>10} {'args=none':>10} {'args=summary':>13} {'records/call':>13}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="tw-bench-") as out_dir:
        for name, block, _ in cases:
            block()
            figures = {}
            for mode in ("none", "summary"):
                base, diffs, records = [], [], 0
                for rep in range(reps):
                    prof = tw.profile(out_dir=out_dir, format="csv", args=mode)
                    # Each timed block follows an untimed one in the same state: after start,
                    # the session's first record chunks are faulted in (once per session, not per
                    # call), and after stop, the unwrapped callables are warm again.
                    if rep % 2:
                        block()
                        p = block()
                        prof.start()
                        block()
                        q = block()
                        prof.stop()
                    else:
                        prof.start()
                        block()
                        q = block()
                        prof.stop()
                        block()
                        p = block()
                    records = prof.stats()["records"]
                    base.append(p / n)
                    diffs.append((q - p) / n)
                figures[mode] = statistics.median(diffs)
            unprofiled = statistics.median(base)
            per_call = records / (2 * n)  # the untimed block and the timed one
            print(f"  {name:34} {unprofiled:8.0f} ns {figures['none']:+8.0f} ns {figures['summary']:+11.0f} ns "
                  f"{per_call:13.1f}")
            rows.append({"call": name, "unprofiled_ns": round(unprofiled, 1), "args_none_ns": round(figures["none"], 1),
                         "args_summary_ns": round(figures["summary"], 1), "records_per_call": per_call})
    return rows


FIRST_START = """
import json, torch, torch.nn, torch.optim, torchwrapper as tw
p = tw.profile(); p.start(); p.stop()
print(json.dumps(p.stats()))
"""


def bench_wrapping():
    """Wrap and unwrap times: a first start in a fresh interpreter (import excluded), and later ones."""
    env = dict(os.environ)
    firsts = []
    for _ in range(sized(1, 5, 15)):
        out = subprocess.run([sys.executable, "-c", FIRST_START], capture_output=True, text=True, env=env,
                             check=True).stdout
        firsts.append(json.loads(out.strip().splitlines()[-1]))
    counts = firsts[0]
    first = {k: statistics.median(f[k] * 1e3 for f in firsts) for k in ("discover_s", "install_s", "restore_s")}
    later = {"discover_s": [], "install_s": [], "restore_s": []}
    starts = sized(2, 21, 21)
    for _ in range(starts):
        p = tw.profile()
        p.start()
        p.stop()
        for k in later:
            later[k].append(p.timings[k] * 1e3)
    later = {k: statistics.median(v) for k, v in later.items()}
    distinct = sum(counts[k] for k in ("function", "builtin", "method", "tensor", "staticmethod", "classmethod"))
    wrap_first = first["discover_s"] + first["install_s"]
    print(f"everything under torch: {distinct} distinct callables at {counts['places']} places "
          f"({counts['function']} Python functions, {counts['builtin']} builtins, {counts['tensor']} Tensor C "
          f"methods, {counts['method'] + counts['staticmethod'] + counts['classmethod']} class methods); "
          f"{counts['skipped']} skipped, {counts['excluded']} excluded")
    print(f"  first start (median of {len(firsts)} fresh interpreters): discover {first['discover_s']:.1f} ms + "
          f"install {first['install_s']:.1f} ms = wrap {wrap_first:.1f} ms (target 50: "
          f"{'ok' if wrap_first <= 50 else 'MISSED'}); unwrap {first['restore_s']:.1f} ms (target 10: "
          f"{'ok' if first['restore_s'] <= 10 else 'MISSED'})")
    print(f"  later starts (plan reused, median of {starts}): wrap {later['discover_s'] + later['install_s']:.1f} ms, "
          f"unwrap {later['restore_s']:.1f} ms")
    return {"distinct": distinct, "places": counts["places"], "first_ms": first, "later_ms": later}


def bench_whole_run():
    sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))
    import train_mlp

    steps = sized(5, 60, 60)
    train_mlp.train(5)
    ratios, records = [], 0
    for rep in range(sized(1, 15, 41)):
        gc.collect()
        p = tw.profile()

        def plain():
            t0 = time.perf_counter_ns()
            train_mlp.train(steps)
            return time.perf_counter_ns() - t0

        def profiled():
            p.start()
            t0 = time.perf_counter_ns()
            train_mlp.train(steps)
            elapsed = time.perf_counter_ns() - t0
            p.stop()
            return elapsed

        if rep % 2:
            base, prof = plain(), profiled()
        else:
            prof, base = profiled(), plain()
        ratios.append(prof / base)
        records = p.stats()["records"]
    ratio = statistics.median(ratios)
    print(f"whole run: examples/train_mlp.py, {steps} steps, everything wrapped ({records} calls recorded): "
          f"{ratio:.3f}x (median of {len(ratios)} interleaved pairs; target 1.03x: "
          f"{'ok' if ratio <= 1.03 else 'MISSED'})")
    return {"ratio": ratio, "records": records, "pairs": len(ratios)}


CALL_LOOP = """
import sys, torch, torchwrapper as tw
mode, n, out_dir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
x, y = torch.ones(10), torch.ones(10)
p = None
if mode == "profiled":   # `run`'s defaults (JSON Lines files), in a step without the detail
    p = tw.profile(out_dir=out_dir, args="summary", detail="sampled", flush_interval=3600).start()
    for _ in range(11):
        p.session.step()
add = torch.add
for _ in range(n):
    add(x, y)
if p is not None:
    p.stop()   # the writer formats and writes every record before the process ends: counted
"""
# Instructions a call under callgrind: BENCH=smoke counts them only when asked (four processes that
# import torch under valgrind take a few minutes), and only where valgrind is installed.
CALL_CALLGRIND = (os.environ.get("BENCH_CALL_CALLGRIND", sized("0", "1", "1")) == "1"
                  and shutil.which("valgrind") is not None)


def bench_call_instructions():
    """torch.add's instructions a call on `run`'s defaults in a step without detail, against plain:
    (instructions of a process making 2N calls - one making N) / N, every thread's (the writer's
    formatting and writing of each record included). Wall time cannot see a few ns a call on this
    VM (its noise between runs is larger); instructions count the same on any run."""
    if not CALL_CALLGRIND:
        print("instructions a torch.add call: not counted (BENCH_CALL_CALLGRIND=1 and valgrind)")
        return None
    import tempfile

    n = sized(2_000, 10_000, 20_000)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONHASHSEED="0")
    per_call = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("plain", "profiled"):   # the two sizes side by side: counts do not depend on the load
            outs = [os.path.join(tmp, f"cg-{mode}-{calls}") for calls in (n, 2 * n)]
            runs = [subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
                                      "-c", CALL_LOOP, mode, str(calls), os.path.join(tmp, f"out-{calls}")],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
                    for out, calls in zip(outs, (n, 2 * n))]
            for run in runs:
                _, err = run.communicate()
                if run.returncode != 0:
                    raise RuntimeError(f"callgrind of the torch.add loop failed ({run.returncode}): {err[-2000:]!r}")
            totals = []
            for out in outs:
                with open(out) as f:
                    totals.append(next(int(line.split()[1]) for line in f if line.startswith("totals:")))
            per_call[mode] = (totals[1] - totals[0]) / n
    extra = per_call["profiled"] - per_call["plain"]
    print(f"instructions a torch.add call (callgrind, {n:,} more calls, every thread): plain {per_call['plain']:,.0f}, "
          f"`run`'s defaults in a step without detail {per_call['profiled']:,.0f} ({extra:+,.0f}: the wrapper "
          f"and the writer's record)")
    return {"plain": round(per_call["plain"]), "profiled": round(per_call["profiled"]), "extra": round(extra)}


MEMORY_RUN = """
import resource, sys, torch, torchwrapper as tw
calls, mode, out_dir = int(sys.argv[1]), sys.argv[2], sys.argv[3]
x = torch.ones(2)
dim = torch.Tensor.dim
for _ in range(1000):
    x.dim()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
prof = tw.profile(out_dir=out_dir, format="csv", file_max_size="64MB", max_files=2) if mode == "profiled" else None
if prof:
    prof.start()
for _ in range(calls):
    x.dim()
if prof:
    prof.stop()
    stats = prof.stats()
    print(stats["records_written"], stats["dropped"])
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def bench_memory():
    """Peak memory of a long run, profiled vs not (separate interpreters, ru_maxrss)."""
    import tempfile

    calls = sized(100_000, 5_000_000, 50_000_000)
    peaks = {}
    for mode in ("plain", "profiled"):
        with tempfile.TemporaryDirectory() as out_dir:
            out = subprocess.run([sys.executable, "-c", MEMORY_RUN, str(calls), mode, out_dir], capture_output=True,
                                 text=True, check=True).stdout.split()
        peaks[mode] = int(out[-1]) / 1024
        if mode == "profiled":
            written, dropped = int(out[0]), int(out[1])
    extra = peaks["profiled"] - peaks["plain"]
    print(f"peak memory of {calls:,} x.dim() calls, CSV files capped (64MB x 2 kept): plain {peaks['plain']:.0f} MB, "
          f"profiled {peaks['profiled']:.0f} MB (+{extra:.0f} MB; target under 64 MB: "
          f"{'ok' if extra < 64 else 'MISSED'}); {written:,} records written, {dropped:,} dropped")
    return {"calls": calls, "plain_mb": peaks["plain"], "profiled_mb": peaks["profiled"], "extra_mb": extra,
            "written": written, "dropped": dropped}


def main():
    a = torch.ones(10)
    b = torch.ones(10)
    print(f"torchwrapper {tw.__version__}, torch {torch.__version__}, Python {platform.python_version()}, "
          f"clock {tw._core.clock_source()}, {os.cpu_count()} CPUs, BENCH={MODE}")
    results = {"single": bench_single_wrappers(a, b), "args": bench_args(a, b),
               "alternatives": bench_alternatives(a, b),
               "everything": bench_everything_wrapped(a, b), "with_files": bench_with_files(a, b),
               "wrapping": bench_wrapping(), "whole_run": bench_whole_run(), "memory": bench_memory(),
               "call_instructions": bench_call_instructions()}
    out = os.environ.get("BENCH_JSON", os.path.join(os.environ.get("top_builddir", "."), "build", "bench.json"))
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "w") as f:
        json.dump({"mode": MODE, "reps": REPS, "calls_per_block": N, "machine": platform.machine(),
                   "cpu_count": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
                   "results": results}, f, indent=2)
    print(f"results: {out}")


if __name__ == "__main__":
    main()
