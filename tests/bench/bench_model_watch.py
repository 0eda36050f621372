# SPDX-License-Identifier: MIT
"""make bench: what the model watch costs, on a CNN training loop, against the unprofiled run.

Configurations, interleaved (the order rotates every repetition), each timing STEPS training
steps of an AlexNet-shaped CNN (batch 16, 3x32x32; SGD) in the same process; figures are medians
over repetitions of the difference to the run it is compared with. Times are the process's CPU
time (all its threads: the writer's too), with torch on one thread: on a machine shared with other
work, wall time varies by 2x from run to run while CPU time does not.

  plain        no profiler
  no-paths     everything under torch profiled, module paths off (the profiler before the model watch)
  profiled     everything profiled, module paths on, tensor_stats off
  stats        the same with tensor_stats on: input, output, weight and grad statistics of every
               module call, every step (to CSV files; the last step's flush is inside the timing)
  ops          the statistics' own tensor ops alone, on tensors of one step captured beforehand:
               a snapshot per call, the reductions and the host copy per step
  item         the older per-number technique, written minimally here: each module's forward
               replaced by a closure that computes each statistic of each tensor with its own op
               and .item(), and appends each record to a log file opened for it; grads after
               backward the same way

Targets: profiled - no-paths: not measurable; stats - profiled <= 2 x ops;
item - plain >= 5 x (stats - profiled).

BENCH=quick (default), full or smoke (tests/bench/modes.py) sets the repetitions; BENCH_MODEL_WATCH_JSON
(default build/bench-model-watch.json in the build tree) the result file.
"""
from __future__ import annotations

import gc
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from typing import Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

import torchwrapper as tw

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from models import AlexNet  # noqa: E402
sys.path.insert(0, HERE)
from modes import MODE, sized  # noqa: E402  (this folder's: BENCH)

REPS = sized(1, 21, 81)
STEPS = sized(2, 10, 10)
BATCH = 16


class Trainer:
    """One model, optimizer and fixed batches; each configuration trains from the same state."""

    def __init__(self) -> None:
        torch.manual_seed(0)
        self.model = AlexNet()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.batches = [(torch.randn(BATCH, 3, 32, 32), torch.randint(0, 10, (BATCH,))) for _ in range(STEPS)]

    def steps(self, after_backward=None) -> None:
        model, optimizer = self.model, self.optimizer
        for x, y in self.batches:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            if after_backward is not None:
                after_backward()
            optimizer.step()


# ---- the per-number .item() technique -------------------------------------------------------------

class ItemLogger:
    """What older pure-Python tools did: forward replaced by a closure per module, one op and one
    .item() per statistic, the log file reopened for every record."""

    def __init__(self, model: nn.Module, path: str) -> None:
        self.model = model
        self.path = path
        self.originals = []

    @staticmethod
    def numbers(t: torch.Tensor) -> str:
        x = t.detach()
        xf = x.float()
        return (f"{list(x.shape)} {x.dtype} mean={xf.mean().item()} std={xf.std().item()} min={xf.min().item()} "
                f"max={xf.max().item()} zeros={(x == 0).sum().item()} nan={torch.isnan(xf).sum().item()} "
                f"inf={torch.isinf(xf).sum().item()}")

    def log(self, name: str, role: str, t: torch.Tensor) -> None:
        line = f"{name} {role} {self.numbers(t)}\n"
        with open(self.path, "a") as f:
            f.write(line)

    def install(self) -> None:
        for name, module in self.model.named_modules():
            original = module.forward

            def forward(*args, __name=name, __module=module, __original=original, **kwargs):
                with torch.no_grad():
                    for t in args:
                        if isinstance(t, torch.Tensor):
                            self.log(__name, "input", t)
                    for pname, p in __module.named_parameters(recurse=False):
                        self.log(__name, f"weight {pname}", p)
                out = __original(*args, **kwargs)
                with torch.no_grad():
                    if isinstance(out, torch.Tensor):
                        self.log(__name, "output", out)
                return out

            module.forward = forward
            self.originals.append(module)

    def grads(self) -> None:
        with torch.no_grad():
            for name, p in self.model.named_parameters():
                if p.grad is not None:
                    self.log(name, "grad", p.grad)

    def remove(self) -> None:
        for module in self.originals:
            del module.forward
        self.originals = []


# ---- the statistics' own ops, alone ---------------------------------------------------------------

def capture_step(trainer: Trainer):
    """The tensors tensor_stats looks at in one step, per call (inputs and weights, outputs), and
    the gradients after backward; copies, taken with module hooks in an unprofiled step."""
    calls = []
    handles = []
    seen = set()

    def pre(module, args):
        group = [a.detach().clone() for a in args if isinstance(a, torch.Tensor)]
        if id(module) not in seen:
            seen.add(id(module))
            group += [p.detach().clone() for p in module.parameters(recurse=False)]
        if group:
            calls.append(group)

    def post(module, args, out):
        if isinstance(out, torch.Tensor):
            calls.append([out.detach().clone()])

    for module in trainer.model.modules():
        handles.append(module.register_forward_pre_hook(pre))
        handles.append(module.register_forward_hook(post))
    x, y = trainer.batches[0]
    trainer.optimizer.zero_grad()
    F.cross_entropy(trainer.model(x), y).backward()
    for h in handles:
        h.remove()
    # Gradients are taken per module after backward: one snapshot per module.
    grads = [[p.grad.detach().clone() for p in m.parameters(recurse=False) if p.grad is not None]
             for m in trainer.model.modules()]
    trainer.optimizer.zero_grad()
    return calls, [g for g in grads if g]


def ops_alone(engine, calls, grads) -> None:
    """The tensor ops tensor_stats runs for one step of these tensors (its own functions, without
    its bookkeeping of rows), STEPS times: on a GPU, small tensors copied per call and reduced
    together; large ones (and every CPU tensor) reduced at once; one host copy per step."""
    from torchwrapper import _tensor_stats as _stats

    seg = torch.segment_reduce
    empty = torch.empty(0)
    for _ in range(STEPS):
        buffers, lengths, direct = [], [], []
        for group in calls + grads:
            small = []
            for t in group:
                if t.numel() >= _stats.DIRECT_NUMEL or (t.device.type == "cpu" and not _stats.BATCH_SMALL_ON_CPU):
                    direct.append(engine._reduce_one(t))
                else:
                    small.append(t)
            if small:
                buffers.append(torch._C._nn.flatten_dense_tensors(small if len(small) > 1 else small + [empty]))
                lengths.extend(t.numel() for t in small)
        parts = [torch.cat(direct)] if direct else []
        if buffers:
            x = torch.cat(buffers).to(torch.float64)
            lens = torch.tensor(lengths)
            total = seg(x, "sum", lengths=lens)
            dev = x - torch.repeat_interleave(total / lens.clamp(min=1), lens, output_size=x.numel())
            sums = torch.stack((total, seg(dev * dev, "sum", lengths=lens), seg(x, "min", lengths=lens),
                                seg(x, "max", lengths=lens)), 1)
            nonzero, nonfinite, infs = engine._indicator_sums(x, lens)
            counts = torch.stack((lens.to(torch.float64) - nonzero - (nonfinite - infs), nonfinite - infs, infs), 1)
            parts.append(torch.cat((sums, counts), 1).reshape(-1))
        torch.cat(parts).to("cpu").tolist()


# ---- the module path probe, per call ----------------------------------------------------------------

def bench_path_probe() -> Tuple[float, float]:
    """Median per-call time of a module call (nn.Identity: the least work around the forward)
    wrapped without and with the module-path probe, and the median difference: blocks of N calls
    alternate, in one session that has a model watch."""
    from torchwrapper import _core
    from torchwrapper._model_watch import ModelWatch

    n, reps = 1000, sized(3, 301, 1501)
    layer = nn.Identity()
    x = torch.randn(1, 8)
    original = nn.Identity.__dict__["forward"]
    plain = _core.wrap(original, "torch.nn.Identity.forward", kind=0)
    probed = _core.wrap(original, "torch.nn.Identity.forward", kind=_core.KIND_MODULE_FORWARD)

    def block(wrapper):
        nn.Identity.forward = wrapper
        t0 = time.perf_counter_ns()
        for _ in range(n):
            layer(x)
        return time.perf_counter_ns() - t0

    base, diffs = [], []
    watch = ModelWatch()
    session = _core.Session(model_watch=watch)
    session.start()
    try:
        for rep in range(reps):
            if rep % 2:
                a, b = block(plain), block(probed)
            else:
                b, a = block(probed), block(plain)
            base.append(a / n)
            diffs.append((b - a) / n)
    finally:
        session.stop()
        watch.close()
        nn.Identity.forward = original
    return statistics.median(base), statistics.median(diffs)


# ---- the benchmark ---------------------------------------------------------------------------------

def clock() -> int:
    return time.process_time_ns()


def main() -> None:
    torch.set_num_threads(1)
    print(f"torchwrapper {tw.__version__}, torch {torch.__version__}, Python {platform.python_version()}, "
          f"{os.cpu_count()} CPUs, BENCH={MODE}")
    trainer = Trainer()
    trainer.steps()   # warm up: first-call costs of every kernel
    out = tempfile.mkdtemp(prefix="tw-bench-model-watch-")
    times = {k: [] for k in ("plain", "no-paths", "profiled", "stats", "ops", "item")}
    calls, grads = capture_step(trainer)
    n_tensors = sum(len(g) for g in calls + grads)
    rows_per_step = None

    def run_plain():
        t0 = clock()
        trainer.steps()
        return clock() - t0

    def run_profiled(paths=True, stats=False):
        nonlocal rows_per_step
        directory = tempfile.mkdtemp(dir=out)
        options = dict(out_dir=directory, format="csv", gpu="off")
        if stats:
            options["tensor_stats"] = {"tensors": ["input", "output", "weight", "grad"]}
        prof = tw.profile(**options)
        if not paths:
            prof.model_watch.kinds = 0   # (bench only) the profiler without the model watch
        prof.start()
        try:
            t0 = clock()
            trainer.steps()
            prof.model_watch.finish()   # the last step's statistics
            elapsed = clock() - t0
        finally:
            prof.stop()
        if stats and rows_per_step is None:
            rows_per_step = len(prof.stats_rows()[1]) / STEPS
        shutil.rmtree(directory)
        return elapsed

    from torchwrapper._model_watch import StatsOptions, ModelWatch, _StatsEngine

    engine = _StatsEngine(StatsOptions({"tensors": ["input"], "metrics": ["mean"], "modules": ["*"]}), ModelWatch())

    def run_ops():
        t0 = clock()
        ops_alone(engine, calls, grads)
        return clock() - t0

    def run_item():
        log = os.path.join(out, "item.log")
        logger = ItemLogger(trainer.model, log)
        logger.install()
        try:
            t0 = clock()
            trainer.steps(after_backward=logger.grads)
            elapsed = clock() - t0
        finally:
            logger.remove()
        os.unlink(log)
        return elapsed

    runs = [("plain", run_plain), ("no-paths", lambda: run_profiled(paths=False)), ("profiled", run_profiled),
            ("stats", lambda: run_profiled(stats=True)), ("ops", run_ops), ("item", run_item)]
    gc.collect()
    for rep in range(REPS):
        order = runs[rep % len(runs):] + runs[:rep % len(runs)]
        for name, fn in order:
            times[name].append(fn() / STEPS / 1e3)   # us per step
    shutil.rmtree(out, ignore_errors=True)

    med = {k: statistics.median(v) for k, v in times.items()}
    probe_base, probe_cost = bench_path_probe()

    def diff(a, b):
        return statistics.median(x - y for x, y in zip(times[a], times[b]))

    paths_cost = diff("profiled", "no-paths")
    stats_extra = diff("stats", "profiled")
    ops = med["ops"]
    item_extra = diff("item", "plain")
    print(f"CNN training step (AlexNet-shaped, batch {BATCH}, SGD), {STEPS} steps per run, median of {REPS} "
          f"interleaved runs, us per step:")
    print(f"  unprofiled                               {med['plain']:9.0f}")
    print(f"  profiled, module paths off               {med['no-paths']:9.0f}  ({med['no-paths'] / med['plain']:.3f}x)")
    print(f"  profiled (paths on, tensor_stats off)    {med['profiled']:9.0f}  paths cost {paths_cost:+.0f} us "
          f"per step ({paths_cost / med['no-paths'] * 100:+.1f}%)")
    print(f"  module path probe, per module forward: {probe_cost:+.1f} ns (call: {probe_base:.0f} ns; wall time, "
          f"interleaved blocks)")
    print(f"  profiled, tensor_stats on (all 4 kinds)  {med['stats']:9.0f}  extra {stats_extra:+.0f} us per step "
          f"({n_tensors} tensors, {rows_per_step or 0:.0f} rows per step)")
    print(f"  the statistics' own tensor ops alone     {ops:9.0f}  extra / ops = {stats_extra / ops:.2f} (target <= 2)")
    print(f"  per-number .item() technique             {med['item']:9.0f}  extra {item_extra:+.0f} us per step, "
          f"{item_extra / max(stats_extra, 1e-9):.1f}x tensor_stats' extra (target >= 5)")
    result = {"probe_ns": probe_cost, "probe_call_ns": probe_base, "steps": STEPS, "reps": REPS, "tensors_per_step": n_tensors, "rows_per_step": rows_per_step,
              "us_per_step": med, "paths_cost_us": paths_cost, "stats_extra_us": stats_extra, "ops_us": ops,
              "item_extra_us": item_extra, "extra_over_ops": stats_extra / ops,
              "item_over_stats": item_extra / max(stats_extra, 1e-9)}
    path = os.environ.get("BENCH_MODEL_WATCH_JSON", os.path.join(os.environ.get("top_builddir", "."), "build",
                                                           "bench-model-watch.json"))
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print(f"results: {path}")


if __name__ == "__main__":
    main()
