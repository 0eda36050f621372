# SPDX-License-Identifier: MIT
"""Real GPU training loops for the GPU tests and figures (tests/python/test_gpu.py,
tests/gpu/figures.py): each factory builds its model and data and returns run(steps), which runs
that many steps and waits for the GPU. The same factories run on the CPU (device="cpu", small
sizes) so that the code is checked on machines without a GPU.

Run as a script (python gpu_loops.py NAME [NAME ...] [--cpu-small]), it runs each loop under torch.profiler in
this fresh process (Kineto may keep CUPTI for the rest of a process once used) and prints, as one
JSON line, what the profiler saw per loop: GPU activities by kind, their time, and the GPU time of
each operator (key_averages' device time, children included)."""
from __future__ import annotations

import csv
import json
import os
import sys
from collections import defaultdict
from typing import Callable, Dict

import torch
import torch.nn.functional as F

LOOP_STEPS = 5
# torchwrapper's API -> torch.profiler's operator, for forward calls that are one aten op
FORWARD_OPS = {"torch.nn.functional.linear": "aten::linear", "torch.conv2d": "aten::conv2d",
               "torch.nn.functional.conv2d": "aten::conv2d", "torch.nn.functional.layer_norm": "aten::layer_norm",
               "torch.nn.functional.embedding": "aten::embedding", "torch.matmul": "aten::matmul",
               "torch.mm": "aten::mm", "torch.nn.functional.cross_entropy": "aten::cross_entropy_loss",
               "torch.nn.functional.batch_norm": "aten::batch_norm", "torch.baddbmm": "aten::baddbmm",
               "torch.addmm": "aten::addmm"}


def _sgd_step(model, opt, loss_fn):
    opt.zero_grad(set_to_none=True)
    loss = loss_fn()
    loss.backward()
    opt.step()
    return loss


def cnn(device: str = "cuda", small: bool = False) -> Callable[[int], None]:
    """A small ResNet-like CNN, SGD with momentum: conv, batch norm, pooling, cross entropy."""
    torch.manual_seed(0)
    width, size, batch = (8, 16, 4) if small else (64, 64, 64)

    def block(cin, cout, stride):
        return torch.nn.Sequential(torch.nn.Conv2d(cin, cout, 3, stride, 1, bias=False), torch.nn.BatchNorm2d(cout),
                                   torch.nn.ReLU(inplace=True))

    model = torch.nn.Sequential(block(3, width, 1), block(width, width, 1), block(width, 2 * width, 2),
                                block(2 * width, 2 * width, 1), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                torch.nn.Linear(2 * width, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, 3, size, size, device=device)
    y = torch.randint(0, 10, (batch,), device=device)

    def run(steps):
        for _ in range(steps):
            _sgd_step(model, opt, lambda: F.cross_entropy(model(x), y))
        _sync(device)
    return run


def _gpt2(device, small, dtype=None):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    if small:
        config = GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=128, n_positions=32)
        batch, seq = 2, 16
    else:
        config = GPT2Config(n_layer=4, n_head=8, n_embd=512, vocab_size=8192, n_positions=256)
        batch, seq = 8, 256
    model = GPT2LMHeadModel(config).to(device)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens = torch.randint(0, config.vocab_size, (batch, seq), device=device)

    def loss_fn():
        if dtype is None:
            return model(input_ids=tokens, labels=tokens).loss
        with torch.autocast(device_type=device, dtype=dtype):
            return model(input_ids=tokens, labels=tokens).loss
    return model, opt, loss_fn


def gpt2(device: str = "cuda", small: bool = False) -> Callable[[int], None]:
    """A GPT-2-class LM (transformers, random init), AdamW, gradient clipping."""
    model, opt, loss_fn = _gpt2(device, small)

    def run(steps):
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            loss_fn().backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        _sync(device)
    return run


def gpt2_bf16(device: str = "cuda", small: bool = False) -> Callable[[int], None]:
    """The GPT-2-class LM under bf16 autocast (AMP)."""
    model, opt, loss_fn = _gpt2(device, small, torch.bfloat16)

    def run(steps):
        for _ in range(steps):
            _sgd_step(model, opt, loss_fn)
        _sync(device)
    return run


def compiled(device: str = "cuda", small: bool = False) -> Callable[[int], None]:
    """An MLP under torch.compile: its kernels are launched by the compiled graph's call."""
    torch.manual_seed(0)
    width, batch = (16, 8) if small else (1024, 256)
    model = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width),
                                torch.nn.LayerNorm(width)).to(device)
    step_model = torch.compile(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(batch, width, device=device)

    def run(steps):
        for _ in range(steps):
            _sgd_step(model, opt, lambda: step_model(x).square().mean())
        _sync(device)
    return run


def two_streams(device: str = "cuda", small: bool = False) -> Callable[[int], None]:
    """Two matmul chains on two streams, joined by an event wait."""
    torch.manual_seed(0)
    n = 64 if small else 2048
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    side = torch.cuda.Stream() if device == "cuda" else None

    def run(steps):
        for _ in range(steps):
            if side is not None:
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    c = torch.mm(b, b)
                torch.cuda.current_stream().wait_stream(side)
            else:
                c = torch.mm(b, b)
            d = torch.mm(a, a)
            (c + d).sum()
        _sync(device)
    return run


def copies(device: str = "cuda", small: bool = False) -> Callable[[int], None]:
    """non_blocking copies from pinned memory, a DataLoader with pin_memory feeding a linear model,
    and a copy back to the host."""
    torch.manual_seed(0)
    n, width = (64, 8) if small else (4096, 256)
    pin = device == "cuda"
    data = torch.utils.data.TensorDataset(torch.randn(n, width), torch.randn(n, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=n // 8, pin_memory=pin, num_workers=0)
    model = torch.nn.Linear(width, 1).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    host = torch.randn(n, width).pin_memory() if pin else torch.randn(n, width)

    def run(steps):
        for _ in range(steps):
            staged = host.to(device, non_blocking=True)
            for x, y in loader:
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                _sgd_step(model, opt, lambda: F.mse_loss(model(x + staged[: x.shape[0]]), y))
            model.weight.detach().cpu()
        _sync(device)
    return run


def cuda_graph(device: str = "cuda", small: bool = False) -> Callable[[int], None]:
    """A forward pass captured once in a CUDA graph (warm-up and capture happen here, unprofiled),
    replayed each step."""
    torch.manual_seed(0)
    width = 16 if small else 1024
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width)).to(device)
    x = torch.randn(64, width, device=device)
    if device != "cuda":
        return lambda steps: [model(x) for _ in range(steps)] and None
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(side):
        for _ in range(3):
            model(x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        out = model(x)

    def run(steps):
        for _ in range(steps):
            graph.replay()
        out.sum().item()
    return run


def tiny_kernels(device: str = "cuda", small: bool = False) -> Callable[[int], None]:
    """Many tiny kernels (an in-place add on 16 floats): the most activity records per second."""
    x = torch.zeros(16, device=device)

    def run(steps):
        for _ in range(steps):
            x.add_(1.0)
        _sync(device)
    return run


def _sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


LOOPS: Dict[str, Callable[..., Callable[[int], None]]] = {
    "cnn": cnn, "gpt2": gpt2, "gpt2_bf16": gpt2_bf16, "compiled": compiled, "two_streams": two_streams,
    "copies": copies, "cuda_graph": cuda_graph}


def _compiles() -> int:
    """Graphs torch.compile has compiled in this process so far."""
    dynamo = sys.modules.get("torch._dynamo.utils")
    return int(dynamo.counters["stats"]["unique_graphs"]) if dynamo is not None else 0


def activity_name(name: str) -> str:
    """A GPU activity's name, the same from both profilers: torchwrapper writes copies as "memcpy
    HtoD", torch.profiler as "Memcpy HtoD (Pinned -> Device)"; memsets as "memset" and "Memset (Device)"."""
    if name.startswith(("Memcpy", "memcpy")):
        return "memcpy " + name.split()[1]
    if name.startswith(("Memset", "memset")):
        return "memset"
    return name[:120]


def activity_kind(name: str) -> str:
    """torch.profiler's GPU event name -> kernel | memcpy | memset (torchwrapper's kinds)."""
    if name.startswith("Memcpy"):
        return "memcpy"
    if name.startswith("Memset"):
        return "memset"
    return "kernel"


def profiler_view(name: str, steps: int = LOOP_STEPS, device: str = "cuda", small: bool = False) -> dict:
    """What torch.profiler sees of `steps` steps of loop `name` (built and warmed up unprofiled)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    torch.backends.cudnn.benchmark = False
    run = LOOPS[name](device, small)
    run(2)  # warm up: handles, allocator, compilation
    compiles = -_compiles()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        run(steps)
    counts: Dict[str, int] = defaultdict(int)
    times: Dict[str, float] = defaultdict(float)
    by_name: Dict[str, float] = defaultdict(float)
    count_by_name: Dict[str, int] = defaultdict(int)
    events = prof.events()
    # record_function ranges (Optimizer.step#AdamW.step) also appear on the GPU timeline, as the span
    # of the kernels launched inside: they are not GPU activities
    annotations = {event.name for event in events if event.device_type != DeviceType.CUDA}
    for event in events:
        if event.device_type == DeviceType.CUDA and event.name not in annotations:  # times in us
            ns = (event.time_range.end - event.time_range.start) * 1000.0
            counts[activity_kind(event.name)] += 1
            times[activity_kind(event.name)] += ns
            by_name[event.name[:200]] += ns
            count_by_name[activity_name(event.name)] += 1
    compiles += _compiles()
    ops = {}
    for avg in prof.key_averages():
        total_us = getattr(avg, "device_time_total", None)
        if total_us is None:  # torch before 2.4
            total_us = avg.cuda_time_total
        if total_us > 0:
            ops[avg.key] = {"ns": total_us * 1000.0, "count": avg.count}
    return {"counts": dict(counts), "times_ns": dict(times), "kernels": dict(by_name), "ops": ops,
            "count_by_name": dict(count_by_name), "compiles": compiles}


def read_kind(out_dir, kind):
    """Rows of the files of one kind ("calls", "gpu") that the manifest lists."""
    with open(os.path.join(out_dir, "manifest.json")) as f:
        manifest = json.load(f)
    rows = []
    for entry in manifest["files"]:
        if entry["kind"] == kind:
            with open(os.path.join(out_dir, entry["name"]), newline="") as f:
                rows.extend(csv.DictReader(f))
    return rows


def duration(row):
    end = int(row["end_ns"])
    return end - int(row["start_ns"]) if end else 0


def call_module(calls, call):
    """The module path of a call (a row of the calls files; calls: rows by call id): its own, else its
    nearest caller's (F.linear inside Linear.forward); "-" for none."""
    for _ in range(64):
        if call is None or call.get("module"):
            break
        call = calls.get(int(call.get("parent_id") or 0))
    return (call or {}).get("module") or "-"


def torchwrapper_view(name: str, out: str, device: str = "cuda", small: bool = False, steps: int = LOOP_STEPS) -> dict:
    """What torchwrapper (GPU timing on, backward nodes on) sees of `steps` steps of loop `name`
    (built and warmed up unprofiled), written to out: GPU activities by kind, their time, the GPU time
    of each API, unattributed activities (call_id 0), and backward kernels charged to the forward
    call's module."""
    import torchwrapper as tw

    torch.backends.cudnn.benchmark = False
    run = LOOPS[name](device, small)
    run(2)
    # One profiled step first: a profile's first start makes torch.compile recompile what it compiled
    # (its guards see torch's functions replaced by wrappers); later starts find both versions cached.
    with tw.profile(out_dir=out + "-warmup", format="csv", gpu="on" if device == "cuda" else "off", aten="backward"):
        run(1)
    compiles = -_compiles()
    with tw.profile(out_dir=out, format="csv", gpu="on" if device == "cuda" else "off", aten="backward") as prof:
        run(steps)
    compiles += _compiles()
    stats = prof.stats()
    calls = {int(r["call_id"]): r for r in read_kind(out, "calls")}
    gpu = read_kind(out, "gpu") if device == "cuda" else []
    counts, times = defaultdict(int), defaultdict(int)
    by_api, by_name, count_by_name = defaultdict(int), defaultdict(int), defaultdict(int)
    by_module = defaultdict(lambda: {"forward_ns": 0, "backward_ns": 0})
    unattributed = {"count": 0, "ns": 0, "names": defaultdict(int)}
    backward = {"kernels": 0, "ns": 0, "charged_to_forward": 0}

    def module_of(call):
        return call_module(calls, call)

    for row in gpu:
        ns = duration(row)
        counts[row["kind"]] += 1
        times[row["kind"]] += ns
        by_name[row["name"][:200]] += ns
        count_by_name[activity_name(row["name"])] += 1
        call = calls.get(int(row["call_id"]))
        if call is None:
            unattributed["count"] += 1
            unattributed["ns"] += ns
            unattributed["names"][row["name"][:80]] += 1
            continue
        by_api[call["api"]] += ns
        fwd = int(call.get("fwd_call_id") or 0)
        if call.get("fwd_api") or fwd:
            backward["kernels"] += 1
            backward["ns"] += ns
            owner = calls.get(fwd)
            if owner is not None:
                backward["charged_to_forward"] += 1
                by_module[module_of(owner)]["backward_ns"] += ns
        else:
            by_module[module_of(call)]["forward_ns"] += ns
    unattributed["names"] = dict(sorted(unattributed["names"].items(), key=lambda kv: -kv[1])[:10])
    nodes = sum(1 for c in calls.values() if c.get("fwd_api") or int(c.get("fwd_call_id") or 0))
    calls_by_api: Dict[str, int] = defaultdict(int)
    for c in calls.values():
        calls_by_api[c["api"]] += 1
    return {"counts": dict(counts), "times_ns": dict(times), "by_api_ns": dict(by_api), "kernels": dict(by_name),
            "by_module_ns": dict(by_module), "unattributed": unattributed, "backward": backward,
            "calls": len(calls), "backward_nodes": nodes, "count_by_name": dict(count_by_name), "compiles": compiles,
            "calls_by_api": dict(calls_by_api),
            "stats": {k: v for k, v in stats.items() if k.startswith(("gpu", "backward", "records", "cupti"))}}


def compare(ours, theirs):
    """Per-loop comparison: counts by kind, time by kind, and per operator where one maps to the other."""
    out = {"counts_equal": ours["counts"] == theirs["counts"], "counts": {"torchwrapper": ours["counts"],
                                                                          "torch_profiler": theirs["counts"]}}
    out["time_ratio_by_kind"] = {k: ours["times_ns"].get(k, 0) / v for k, v in theirs["times_ns"].items() if v}
    ops = {}
    for api, ns in ours["by_api_ns"].items():
        # a backward node: what torch.profiler charges to its evaluate_function (the node, and the
        # engine's work on its gradients right after it), as torchwrapper does
        key = f"autograd::engine::evaluate_function: {api}"
        if key not in theirs["ops"]:
            key = FORWARD_OPS.get(api, api)
        ref = theirs["ops"].get(key)
        # only where torch.profiler counts as many calls: under autocast, an op's autocast kernel
        # calls the op again, and torch.profiler's row for it counts both (its kernels twice)
        if ref is not None and ref["ns"] >= 50_000 and ref["count"] == ours["calls_by_api"].get(api):
            ops[f"{api} ~ {key}"] = {"torchwrapper_ns": ns, "torch_profiler_ns": ref["ns"], "ratio": ns / ref["ns"]}
    out["ops"] = ops
    names = set(ours["count_by_name"]) | set(theirs["count_by_name"])
    out["count_differences"] = {n: [ours["count_by_name"].get(n, 0), theirs["count_by_name"].get(n, 0)] for n in names
                                if ours["count_by_name"].get(n, 0) != theirs["count_by_name"].get(n, 0)}
    ratios = [o["ratio"] for o in ops.values()]
    out["ops_within_5pct"] = sum(1 for r in ratios if abs(r - 1) <= 0.05)
    out["ops_compared"] = len(ratios)
    return out



if __name__ == "__main__":
    # --cpu-small: the same code on the CPU with tiny models (tests/gpu/figures.py --device cpu --small)
    cpu = "--cpu-small" in sys.argv
    names = [a for a in sys.argv[1:] if a != "--cpu-small"]
    print(json.dumps({name: profiler_view(name, device="cpu" if cpu else "cuda", small=cpu) for name in names}))
