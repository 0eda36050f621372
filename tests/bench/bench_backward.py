# SPDX-License-Identifier: MIT
"""What recording backward nodes (config aten "backward") and every operator (aten "all") cost,
against aten "off" in the same process, interleaved, medians of REPS repetitions:

  per node: a chain of NODES small element-wise ops (each a node: MulBackward0), forward and
    backward timed in blocks; (backward - off) / nodes. The forward ops' sequence-number links are
    paid in the forward, the nodes' records in the backward: both are counted, per node. And
    (all - backward) / operators: what each operator's record costs (torch's RecordFunction for it
    included: it builds one per operator only when a FUNCTION-scope callback is registered).
  whole training: the GPT-2-class and BERT-class loops of tests/bench/transformers.py (files on,
    CSV, args none), each profiling mode as a ratio to the unprofiled block of the same
    repetition: aten off, backward and all, and torch.profiler (CPU) for reference.

Run by `make bench`; BENCH=full for more repetitions, smoke for one of a few steps (tests/bench/modes.py).
"""
from __future__ import annotations

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
from transformers import FACTORIES  # noqa: E402  (this folder's module, not the PyPI package)
import modes  # noqa: E402  (this folder's: the interleaved training-loop modes)

REPS = int(os.environ.get("BENCH_REPS", 0)) or modes.sized(1, 15, 41)
NODES = 400
CHAIN_BLOCK = modes.sized(2, 20, 20)   # forward+backward passes of the chain per timed block
STEPS = modes.sized(2, 10, 10)         # training steps per timed block


def chain_block(x):
    t0 = time.perf_counter_ns()
    for _ in range(CHAIN_BLOCK):
        y = x
        for _ in range(NODES):
            y = y * 1.0001
        y.sum().backward()
    return time.perf_counter_ns() - t0


def per_node(tmp):
    torch.set_num_threads(1)
    x = torch.ones(8, requires_grad=True)
    chain_block(x)
    diffs, off_ns, op_diffs = [], [], []
    ops = None
    for rep in range(REPS):
        times = {}
        for aten in (("off", "backward", "all") if rep % 2 == 0 else ("all", "backward", "off")):
            out = os.path.join(tmp, f"chain-{aten}")
            shutil.rmtree(out, ignore_errors=True)
            with tw.profile(out_dir=out, format="csv", args="none", aten=aten) as prof:
                chain_block(x)   # warm: chunks and rings in place
                times[aten] = chain_block(x)
            if aten == "all" and ops is None:   # operators per pass, counted once
                ops = sum(1 for r in prof.records() if r.api.startswith("aten::")) / (2 * CHAIN_BLOCK)
        diffs.append((times["backward"] - times["off"]) / (CHAIN_BLOCK * (NODES + 1)))
        off_ns.append(times["off"] / (CHAIN_BLOCK * (NODES + 1)))
        op_diffs.append((times["all"] - times["backward"]) / (CHAIN_BLOCK * ops))
    return {"per_node_ns": statistics.median(diffs), "per_op_off_ns": statistics.median(off_ns),
            "per_operator_ns": statistics.median(op_diffs), "operators_per_pass": ops, "reps": REPS}


def training(name, tmp):
    torch.set_num_threads(1)
    step = FACTORIES[name]()
    for _ in range(3):
        step()

    timed = modes.block_timer(step, STEPS)

    def torch_profiler():
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
            return timed()

    each = {f"aten {aten}": modes.profiled(step, timed, modes.out_dir(tmp, name, aten), aten=aten)
            for aten in ("off", "backward", "all")}
    each["torch.profiler"] = torch_profiler
    return modes.interleaved(timed, each, REPS)[0]


def main() -> None:
    tmp = tempfile.mkdtemp(prefix="tw-bench-backward-")
    try:
        node = per_node(tmp)
        print(f"backward nodes: +{node['per_node_ns']:.1f} ns per node (aten backward - off; a node and its forward "
              f"op's link), chain op at aten off {node['per_op_off_ns']:.0f} ns; operators: "
              f"+{node['per_operator_ns']:.1f} ns per operator (aten all - backward, "
              f"{node['operators_per_pass']:.0f} a pass), median of {node['reps']}")
        results = {"per_node": node}
        for name in ("gpt", "bert"):
            r = training(name, tmp)
            results[name] = r
            print(f"{name}: " + ", ".join(f"{m} {v:.3f}x" for m, v in r.items()) + f" (median of {REPS}, one thread)")
        print(json.dumps({"bench_backward": results, "torch": torch.__version__}))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
