# SPDX-License-Identifier: MIT
"""Inside backward on a real GPU (#35), side by side with torch.profiler, in one run:

  nodes      the GPT-2-class loop of tests/python/gpu_loops.py, GPU timing and backward nodes on:
             the GPU time of each node name (the kernels a node launched, and what the engine did
             right after it) against torch.profiler's kernels under that node's
             "autograd::engine::evaluate_function: NAME" (a fresh process each); per module, forward
             and backward GPU time as torchwrapper charges them;
  views      tw-report's charged stacks of that run (nodes run on autograd's device thread, whose
             records reach the files apart from the forward thread's): node time found under its
             forward call's frame, and what is left below "(not recorded)";
  operators  aten "all" with GPU timing on: operators recorded per thread against torch.profiler's
             aten events, and the loop's results unchanged;
  overhead   the loop's time with aten off, backward and all (GPU timing on), interleaved blocks
             against the unprofiled one, median of ROUNDS.

python3 tests/gpu/backward.py OUT.json [--small --device cpu]: --small --device cpu runs the same
code on the CPU with a tiny model, to check it where there is no GPU. Each section is kept apart:
one that fails is written as its error and the others go on."""
from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
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

PREFIX = "autograd::engine::evaluate_function: "
ROUNDS = 5
STEPS = 5


def tw_report():
    top = os.environ.get("top_builddir") or os.path.join(HERE, "..", "..")
    return os.path.join(top, "tw-report")


class ModuleRanges:
    """Global module hooks that open a record_function("module:PATH") range around each module's
    forward (paths as torchwrapper names them: the outermost module entered by its class, then
    named_modules()'s path), so that torch.profiler's events can be charged to modules the way
    torchwrapper charges its calls: the innermost module, the model itself included, "-" for none."""

    def __init__(self):
        from torch.nn.modules import module as nn_module
        self.paths, self.open = {}, []
        self.handles = [nn_module.register_module_forward_pre_hook(self.enter),
                        nn_module.register_module_forward_hook(self.leave)]

    def enter(self, module, _inputs):
        if not self.open and id(module) not in self.paths:   # an outermost module: name its tree
            root = type(module).__name__
            self.paths.update((id(m), f"{root}.{path}" if path else root) for path, m in module.named_modules())
        path = self.paths.get(id(module))
        ctx = torch.autograd.profiler.record_function(f"module:{path}") if path else None
        if ctx is not None:
            ctx.__enter__()
        self.open.append(ctx)

    def leave(self, _module, _inputs, _output):
        ctx = self.open.pop()
        if ctx is not None:
            ctx.__exit__(None, None, None)

    def remove(self):
        for handle in self.handles:
            handle.remove()


def event_module(event):
    """The innermost "module:PATH" range around a CPU event, "-" for none."""
    while event is not None:
        if event.name.startswith("module:"):
            return event.name[len("module:"):]
        event = event.cpu_parent
    return "-"


def kernels_below(event):
    """GPU time (ns) of the kernels launched under a CPU event, at any depth."""
    total, pending = 0.0, [event]
    while pending:
        e = pending.pop()
        total += sum(kernel.duration for kernel in e.kernels) * 1000.0
        pending.extend(e.cpu_children)
    return total


def profiler_nodes(args):
    """torch.profiler: GPU time of the kernels under each node's evaluate_function, aten events, and
    per module the forward kernels under its range and the backward kernels of the nodes whose
    forward operator (same sequence number) ran in it."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    run = gpu_loops.LOOPS["gpt2"](args.device, args.small)
    run(2)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device == "cuda" else [])
    ranges = ModuleRanges()
    try:
        with profile(activities=activities) as prof:
            run(STEPS)
    finally:
        ranges.remove()
    by_node = collections.defaultdict(float)
    by_module = collections.defaultdict(lambda: {"forward_ns": 0.0, "backward_ns": 0.0})
    aten = collections.Counter()
    events = [e for e in prof.events() if e.device_type == DeviceType.CPU]
    # the module of each forward operator that made autograd nodes, by its thread and sequence number
    seq_module = {(e.thread, e.sequence_nr): event_module(e) for e in events
                  if e.sequence_nr >= 0 and not e.name.startswith(PREFIX) and e.name.startswith("aten::")}
    for event in events:
        if event.name.startswith("aten::"):
            aten[event.name] += 1
        if event.name.startswith(PREFIX):
            ns = kernels_below(event)
            by_node[event.name[len(PREFIX):]] += ns
            module = seq_module.get((event.fwd_thread, event.sequence_nr), "-")
            by_module[module]["backward_ns"] += ns
        elif event.kernels and not any(a.name.startswith(PREFIX) for a in _ancestors(event)):
            by_module[event_module(event)]["forward_ns"] += sum(k.duration for k in event.kernels) * 1000.0
    return {"by_node_ns": dict(by_node), "by_module_ns": dict(by_module), "aten_events": sum(aten.values()),
            "aten_names": len(aten)}


def _ancestors(event):
    event = event.cpu_parent
    while event is not None:
        yield event
        event = event.cpu_parent


def ours(args, out, aten="backward"):
    run = gpu_loops.LOOPS["gpt2"](args.device, args.small)
    run(2)
    gpu = "on" if args.device == "cuda" else "off"
    with tw.profile(out_dir=out + "-warmup", format="csv", gpu=gpu, aten=aten):
        run(1)
    with tw.profile(out_dir=out, format="csv", gpu=gpu, aten=aten) as prof:
        run(STEPS)
    calls = {int(r["call_id"]): r for r in gpu_loops.read_kind(out, "calls")}
    gpu_rows = gpu_loops.read_kind(out, "gpu") if args.device == "cuda" else []
    return prof, calls, gpu_rows


def section_nodes(args, results):
    theirs_json = subprocess.run([sys.executable, __file__, "--profiler-child", *child_args(args)],
                                 capture_output=True, text=True, timeout=600)
    if theirs_json.returncode != 0:
        results["nodes"] = {"error": theirs_json.stderr[-3000:]}
        return
    theirs = json.loads(theirs_json.stdout.splitlines()[-1])
    out = tempfile.mkdtemp(prefix="tw-gpu-backward-")
    _, calls, gpu_rows = ours(args, out)
    by_node = collections.defaultdict(float)
    by_module = collections.defaultdict(lambda: {"forward_ns": 0, "backward_ns": 0})

    for row in gpu_rows:
        call = calls.get(int(row["call_id"]))
        if call is None:
            continue
        ns = gpu_loops.duration(row)
        fwd = int(call.get("fwd_call_id") or 0)
        if fwd or call["api"].endswith(("Backward0", "Backward1", "AccumulateGrad")):
            by_node[call["api"]] += ns
            if fwd in calls:
                by_module[gpu_loops.call_module(calls, calls[fwd])]["backward_ns"] += ns
        else:
            by_module[gpu_loops.call_module(calls, call)]["forward_ns"] += ns
    modules = {}
    theirs_modules = theirs.get("by_module_ns", {})
    for name in sorted(set(by_module) | set(theirs_modules)):
        a = by_module.get(name, {"forward_ns": 0, "backward_ns": 0})
        b = theirs_modules.get(name, {"forward_ns": 0, "backward_ns": 0})
        both_a, both_b = a["forward_ns"] + a["backward_ns"], b["forward_ns"] + b["backward_ns"]
        modules[name] = {"torchwrapper": dict(a), "torch_profiler": b,
                         "ratio": both_a / both_b if both_b else None}
    big_modules = {n: m for n, m in modules.items() if m["torch_profiler"]["forward_ns"]
                   + m["torch_profiler"]["backward_ns"] >= 50_000}
    compared = {}
    for name in sorted(set(by_node) | set(theirs["by_node_ns"])):
        a, b = by_node.get(name, 0.0), theirs["by_node_ns"].get(name, 0.0)
        compared[name] = {"torchwrapper_ns": a, "torch_profiler_ns": b, "ratio": a / b if b else None}
    big = {n: c for n, c in compared.items() if c["torch_profiler_ns"] >= 50_000}
    results["nodes"] = {"out": out, "compared": compared,
                        "within_5pct": sum(1 for c in big.values() if c["ratio"] and abs(c["ratio"] - 1) <= 0.05),
                        "compared_over_50us": len(big), "by_module_ns": dict(by_module),
                        "modules": modules, "modules_over_50us": len(big_modules),
                        "modules_within_5pct": sum(1 for m in big_modules.values()
                                                   if m["ratio"] and abs(m["ratio"] - 1) <= 0.05),
                        "total_backward_ns": {"torchwrapper": sum(by_node.values()),
                                              "torch_profiler": sum(theirs["by_node_ns"].values())}}
    print(f"[nodes] {results['nodes']['within_5pct']} of {len(big)} node names within 5% of torch.profiler; "
          f"backward GPU time {results['nodes']['total_backward_ns']}", flush=True)
    print(f"[nodes] per module, forward + backward GPU time: {results['nodes']['modules_within_5pct']} of "
          f"{len(big_modules)} modules within 5% of torch.profiler's kernels under the same ops", flush=True)
    for name, m in sorted(big_modules.items()):
        print(f"  {name:40} ours fwd {m['torchwrapper']['forward_ns'] / 1e3:10.1f} us bwd "
              f"{m['torchwrapper']['backward_ns'] / 1e3:10.1f} us | torch.profiler fwd "
              f"{m['torch_profiler']['forward_ns'] / 1e3:10.1f} us bwd {m['torch_profiler']['backward_ns'] / 1e3:10.1f} us",
              flush=True)


def section_views(args, results):
    out = (results.get("nodes") or {}).get("out")
    if out is None:
        out = tempfile.mkdtemp(prefix="tw-gpu-views-")
        ours(args, out)
    calls = {int(r["call_id"]): r for r in gpu_loops.read_kind(out, "calls")}
    node_ns = sum(int(r["self_ns"]) for r in calls.values() if int(r.get("fwd_call_id") or 0))
    threads = {r["tid"] for r in calls.values() if int(r.get("fwd_call_id") or 0)}
    folded = os.path.join(out, "..", os.path.basename(out) + ".folded")
    done = subprocess.run([tw_report(), "--folded", folded, out], capture_output=True, text=True)
    if done.returncode != 0:
        results["views"] = {"error": done.stderr[-2000:]}
        return
    charged = not_recorded = 0
    with open(folded) as f:
        for line in f:
            stack, ns = line.rsplit(" ", 1)
            frames = stack.split(";")
            if frames[0] == "(not recorded)":
                not_recorded += int(ns)
            elif len(frames) > 1 and frames[-1].endswith(("Backward0", "Backward1")) and \
                    not any(f.startswith("torch.autograd.backward") for f in frames):
                charged += int(ns)
    results["views"] = {"node_self_ns": node_ns, "charged_ns": charged, "not_recorded_ns": not_recorded,
                        "node_threads": len(threads)}
    print(f"[views] {results['views']}", flush=True)


def section_operators(args, results):
    theirs_json = subprocess.run([sys.executable, __file__, "--profiler-child", *child_args(args)],
                                 capture_output=True, text=True, timeout=600)
    theirs = json.loads(theirs_json.stdout.splitlines()[-1]) if theirs_json.returncode == 0 else {}
    out = tempfile.mkdtemp(prefix="tw-gpu-aten-all-")
    prof, calls, gpu_rows = ours(args, out, aten="all")
    ops = [r for r in calls.values() if r["api"].startswith("aten::")]
    by_thread = collections.Counter(r["tid"] for r in ops)
    unattributed = sum(1 for r in gpu_rows if int(r["call_id"]) not in calls)
    results["operators"] = {"operators": len(ops), "names": len({r["api"] for r in ops}),
                            "by_thread": dict(by_thread), "torch_profiler_aten_events": theirs.get("aten_events"),
                            "gpu_activities": len(gpu_rows), "unattributed": unattributed,
                            "stats": {k: v for k, v in prof.stats().items() if k.startswith(("backward", "records"))}}
    print(f"[operators] {results['operators']}", flush=True)


def section_overhead(args, results):
    run = gpu_loops.LOOPS["gpt2"](args.device, args.small)
    run(3)
    gpu = "on" if args.device == "cuda" else "off"

    def timed():
        t0 = time.perf_counter()
        run(STEPS)
        return time.perf_counter() - t0

    def profiled(aten):
        with tw.profile(out_dir=tempfile.mkdtemp(prefix=f"tw-gpu-ovh-{aten}-"), format="csv", gpu=gpu, aten=aten):
            run(1)
            return timed()

    ratios = {m: [] for m in ("off", "backward", "all")}
    for i in range(ROUNDS):
        plain = timed()
        for m in (list(ratios) if i % 2 == 0 else list(reversed(ratios))):
            ratios[m].append(profiled(m) / plain)
    results["overhead"] = {f"aten {m}": statistics.median(v) for m, v in ratios.items()}
    print(f"[overhead] {results['overhead']}", flush=True)


def child_args(args):
    return ["--device", args.device] + (["--small"] if args.small else [])


SECTIONS = {"nodes": section_nodes, "views": section_views, "operators": section_operators,
            "overhead": section_overhead}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out", nargs="?")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--sections", default=",".join(SECTIONS))
    parser.add_argument("--profiler-child", action="store_true")
    args = parser.parse_args()
    if args.profiler_child:
        print(json.dumps(profiler_nodes(args)))
        return
    results = {"torch": torch.__version__, "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu"}
    for name in args.sections.split(","):
        try:
            SECTIONS[name](args, results)
        except Exception:
            results[name] = {"error": traceback.format_exc()[-3000:]}
            print(f"[{name}] failed:\n{results[name]['error']}", flush=True)
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1, default=str)


if __name__ == "__main__":
    main()
