# SPDX-License-Identifier: MIT
"""GPU timing's figures on a real GPU, side by side with torch.profiler (Kineto), in one run:

  loops      each training loop of tests/python/gpu_loops.py under torchwrapper (GPU timing on,
             backward nodes on) and, in a fresh process, under torch.profiler: GPU activities by
             kind (counts, time), per-operator GPU time, what is unattributed (call_id 0), and
             backward kernels charged to their node and the forward call's module;
  overhead   whole training loops: plain, torchwrapper GPU timing off and on, with the defaults and
             lean (args none, sites off, aten off) (one process), plain and torch.profiler CPU+CUDA
             (another): interleaved blocks, median of ROUNDS;
  launch     what one launch of a tiny kernel costs: plain, torchwrapper GPU timing off and on,
             torch.profiler;
  drops      CUPTI's buffers under a loop of many tiny kernels, at the defaults;
  conflict   torch.profiler started while torchwrapper holds CUPTI.

python3 tests/gpu/figures.py OUT.json [--small --device cpu]: --small --device cpu runs the same
code on the CPU with tiny models, to check it where there is no GPU. Every section is kept apart:
one that fails is written as its error and the others go on."""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import torch  # noqa: E402

import gpu_loops  # noqa: E402
import torchwrapper as tw  # noqa: E402

ROUNDS = 5


def section_loops(args, results):
    names = [n for n in gpu_loops.LOOPS if n in args.loops]
    ours = {}
    for name in names:
        try:
            ours[name] = gpu_loops.torchwrapper_view(name, tempfile.mkdtemp(prefix=f"tw-gpu-{name}-"),
                                                     args.device, args.small)
        except Exception:
            ours[name] = {"error": traceback.format_exc()[-2000:]}
        print(f"[loops] {name}: torchwrapper {summary_line(ours[name])}", flush=True)
    results["loops"] = {"torchwrapper": ours}
    cmd = [sys.executable, os.path.join(HERE, "..", "python", "gpu_loops.py"), *names]
    if args.device != "cuda":
        cmd.append("--cpu-small")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode != 0:
        results["loops"]["torch_profiler_error"] = proc.stderr[-3000:]
        return
    theirs = json.loads(proc.stdout.splitlines()[-1])
    results["loops"]["torch_profiler"] = theirs
    results["loops"]["compared"] = {n: gpu_loops.compare(ours[n], theirs[n]) for n in names
                                    if "error" not in ours[n] and n in theirs}
    for n, c in results["loops"]["compared"].items():
        print(f"[loops] {n}: counts equal {c['counts_equal']} {c['counts']}; time by kind "
              f"{ {k: round(v, 4) for k, v in c['time_ratio_by_kind'].items()} }; ops within 5% "
              f"{c['ops_within_5pct']}/{c['ops_compared']}", flush=True)


def summary_line(view):
    if "error" in view:
        return "ERROR " + view["error"].strip().splitlines()[-1]
    return (f"{view['counts']} unattributed {view['unattributed']['count']} backward kernels "
            f"{view['backward']['kernels']} (charged {view['backward']['charged_to_forward']}), "
            f"{view['calls']} calls, {view['backward_nodes']} nodes")


OVERHEAD_CHILD = r"""
import json, os, statistics, sys, tempfile, time
sys.path.insert(0, sys.argv[1])
import torch, gpu_loops, torchwrapper as tw
name, modes, rounds, steps, device, small = sys.argv[2], sys.argv[3].split(","), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6], sys.argv[7] == "1"
run = (gpu_loops.LOOPS.get(name) or getattr(gpu_loops, name))(device, small)
run(3)
times = {m: [] for m in modes}
tmp = tempfile.mkdtemp(prefix="tw-overhead-")
def timed(mode, r):
    if mode == "plain":
        t0 = time.perf_counter(); run(steps); return time.perf_counter() - t0
    if mode == "torch.profiler":
        from torch.profiler import ProfilerActivity, profile
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
        with profile(activities=acts):
            t0 = time.perf_counter(); run(steps); t = time.perf_counter() - t0
        return t
    gpu = "on" if mode.startswith("tw_gpu_on") and device == "cuda" else "off"
    lean = dict(args="none", sites="off", aten="off") if mode.endswith("_lean") else {}
    with tw.profile(out_dir=os.path.join(tmp, f"{mode}-{r}"), format="csv", gpu=gpu, **lean):
        t0 = time.perf_counter(); run(steps); t = time.perf_counter() - t0
    return t
for m in modes:  # each mode once before timing: first-session costs (names, sites) are not per step
    timed(m, -1)
for r in range(rounds):
    order = modes[r % len(modes):] + modes[:r % len(modes)]
    for m in order:
        times[m].append(timed(m, r))
med = {m: statistics.median(v) for m, v in times.items()}
print(json.dumps({"median_s": med, "ratio": {m: med[m] / med["plain"] for m in modes}, "times": times}))
"""


def timed_modes(args, loop, modes, steps):
    """OVERHEAD_CHILD in a fresh process: loop's blocks of steps in each of modes (comma-separated),
    interleaved; its JSON ({"median_s", "ratio", "times"}), or {"error": its stderr's end}."""
    cmd = [sys.executable, "-c", OVERHEAD_CHILD, os.path.join(HERE, "..", "python"), loop, modes, str(args.rounds),
           str(steps), args.device, "1" if args.small else "0"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode != 0:
        return {"error": proc.stderr[-3000:]}
    return json.loads(proc.stdout.splitlines()[-1])


def section_overhead(args, results):
    out = {}
    for name in ("gpt2", "cnn"):
        if name not in args.loops:
            continue
        out[name] = {}
        for label, modes in (("torchwrapper", "plain,tw_gpu_off,tw_gpu_on,tw_gpu_off_lean,tw_gpu_on_lean"),
                             ("torch_profiler", "plain,torch.profiler")):
            res = out[name][label] = timed_modes(args, name, modes, args.steps)
            print(f"[overhead] {name} {label}: " + (str({m: round(v, 4) for m, v in res['ratio'].items()})
                                                     if "ratio" in res else "ERROR " + res["error"][-400:]), flush=True)
    results["overhead"] = out


def section_launch(args, results):
    """What one launch of a tiny kernel costs: plain, torchwrapper GPU timing off and on, torch.profiler."""
    out = {}
    steps = 20_000
    for label, modes in (("torchwrapper", "plain,tw_gpu_off,tw_gpu_on"), ("torch_profiler", "plain,torch.profiler")):
        res = out[label] = timed_modes(args, "tiny_kernels", modes, steps)
        if "error" in res:
            continue
        res["ns_per_launch"] = {m: s * 1e9 / steps for m, s in res["median_s"].items()}
        print(f"[launch] {label}: ns per launch {({m: round(v) for m, v in res['ns_per_launch'].items()})}", flush=True)
    results["launch"] = out


def section_drops(args, results):
    run = gpu_loops.tiny_kernels(args.device, args.small)
    run(100)
    n = args.tiny
    out = tempfile.mkdtemp(prefix="tw-gpu-drops-")
    t0 = time.perf_counter()
    with tw.profile(out_dir=out, format="csv", gpu="on" if args.device == "cuda" else "off") as prof:
        run(n)
    elapsed = time.perf_counter() - t0
    stats = prof.stats()
    results["drops"] = {"launches": n, "seconds": elapsed, "launches_per_s": n / elapsed,
                        "stats": {k: v for k, v in stats.items() if k.startswith(("gpu", "records"))}}
    print(f"[drops] {n} tiny kernels in {elapsed:.2f} s: kernels {stats.get('gpu_kernels')} dropped "
          f"{stats.get('gpu_dropped')} records {stats.get('records_written')}", flush=True)


CONFLICT_CHILD = r"""
import json, sys, tempfile, torch, torchwrapper as tw
from torch.profiler import ProfilerActivity, profile
x = torch.randn(256, 256, device="cuda")
out = tempfile.mkdtemp(prefix="tw-conflict-")
result = {}
with tw.profile(out_dir=out, format="csv", gpu="on") as prof:
    torch.mm(x, x)
    try:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as kineto:
            torch.mm(x, x)
            torch.cuda.synchronize()
        result["kineto_gpu_events"] = sum(1 for e in kineto.events() if str(e.device_type).endswith("CUDA"))
    except Exception as e:
        result["kineto_error"] = repr(e)
    torch.mm(x, x)
    torch.cuda.synchronize()
result["tw_stats"] = {k: v for k, v in prof.stats().items() if k.startswith("gpu")}
# and the other way round: torchwrapper asked for GPU timing while torch.profiler holds CUPTI
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
    with tw.profile(out_dir=out + "-2", format="csv", gpu="auto") as prof2:
        torch.mm(x, x)
        torch.cuda.synchronize()
result["tw_inside_kineto"] = {k: v for k, v in prof2.stats().items() if k.startswith("gpu")}
print(json.dumps(result))
"""


def section_conflict(args, results):
    if args.device != "cuda":
        return
    proc = subprocess.run([sys.executable, "-c", CONFLICT_CHILD], capture_output=True, text=True, timeout=args.timeout)
    results["conflict"] = {"returncode": proc.returncode, "stderr": proc.stderr[-3000:],
                           "result": json.loads(proc.stdout.splitlines()[-1]) if proc.returncode == 0 else None}
    print(f"[conflict] rc {proc.returncode}: {results['conflict']['result']} stderr: {proc.stderr[-600:]}", flush=True)


def environment():
    env = {"date": time.strftime("%Y-%m-%d"), "python": platform.python_version(), "torch": torch.__version__,
           "cuda": torch.version.cuda, "torchwrapper": getattr(tw, "__version__", None)}
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(0)
        try:
            env["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                           capture_output=True, text=True, timeout=60).stdout.strip()
        except OSError as e:
            env["driver"] = repr(e)
    from torchwrapper._profile import cupti_candidates
    env["cupti_candidates"] = cupti_candidates()
    return env


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--sections", default="loops,overhead,drops,conflict")
    parser.add_argument("--loops", default=",".join(gpu_loops.LOOPS))
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--tiny", type=int, default=300_000)
    parser.add_argument("--timeout", type=int, default=300)
    args = parser.parse_args()
    args.loops = args.loops.split(",")
    results = {"environment": environment()}
    print(f"[env] {results['environment']}", flush=True)
    sections = {"loops": section_loops, "overhead": section_overhead, "launch": section_launch, "drops": section_drops,
                "conflict": section_conflict}
    for name in args.sections.split(","):
        t0 = time.perf_counter()
        try:
            sections[name](args, results)
        except Exception:
            results[f"{name}_error"] = traceback.format_exc()[-3000:]
            print(f"[{name}] ERROR {results[f'{name}_error']}", flush=True)
        results.setdefault("seconds", {})[name] = time.perf_counter() - t0
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1, default=str)
    env = results["environment"]
    if results.get("loops"):
        first = next(iter(results["loops"]["torchwrapper"].values()), {})
        env["cupti_version"] = first.get("stats", {}).get("gpu_cupti_version")
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1, default=str)


if __name__ == "__main__":
    main()
