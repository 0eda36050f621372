# SPDX-License-Identifier: MIT
"""A small MLP trained with SGD on generated data, profiled with torchwrapper.

Run it with ./quickstart (which builds torchwrapper first), or with
PYTHONPATH=build/python .venv/bin/python examples/train_mlp.py
It trains twice from the same seed, once plain and once with every callable under torch profiled,
checks that the results are bit-identical, and prints what the profiler measured per API.
"""
from __future__ import annotations

import argparse
import time
from collections import defaultdict

import torch
import torch.nn as nn
import torch.nn.functional as F

import torchwrapper as tw

class MLP(nn.Module):
    def __init__(self, width: int = 256) -> None:
        super().__init__()
        self.fc1 = nn.Linear(64, width)
        self.fc2 = nn.Linear(width, width)
        self.fc3 = nn.Linear(width, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x)) + x * 0.5
        return self.fc3(x)


def train(steps: int, seed: int = 0):
    torch.manual_seed(seed)
    model = MLP()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for _ in range(steps):
        x = torch.randn(128, 64)
        y = torch.randint(0, 10, (128,))
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, [p.detach().clone() for p in model.parameters()]


def report(records: list, wall_ns: int, top: int) -> None:
    """Per API: calls, total and self time, and "bwd ms": the autograd nodes of the backward passes
    charged to that API's calls (the forward call that created each node). The nodes' own rows are
    summed into that column, not listed."""
    totals = defaultdict(lambda: [0, 0, 0, float("inf"), 0, 0])
    nodes = [r for r in records if is_node(r)]
    for r in records:
        if is_node(r):
            if r.fwd_call_id:
                totals[r.fwd_api][5] += r.cost_ns
            continue
        t = totals[r.api]
        t[0] += 1
        t[1] += r.cost_ns
        t[2] += r.self_ns
        t[3] = min(t[3], r.cost_ns)
        t[4] = max(t[4], r.cost_ns)
    print(f"\n{'API':36} {'calls':>7} {'total ms':>9} {'self ms':>9} {'bwd ms':>8} {'mean us':>9} {'min us':>8} "
          f"{'max us':>9}")
    rows = sorted(totals.items(), key=lambda kv: -(kv[1][2] + kv[1][5]))[:top]
    for api, (calls, total, self_ns, low, high, bwd) in rows:
        print(f"{api:36} {calls:7d} {total / 1e6:9.2f} {self_ns / 1e6:9.2f} {bwd / 1e6:8.2f} "
              f"{total / max(calls, 1) / 1e3:9.2f} {low / 1e3:8.2f} {high / 1e3:9.2f}")
    if nodes:
        charged = sum(r.cost_ns for r in nodes if r.fwd_call_id)
        print(f"\nbackward: {len(nodes)} autograd nodes, {sum(r.cost_ns for r in nodes) / 1e6:.2f} ms; "
              f"{charged / 1e6:.2f} ms charged to the forward calls that made them (bwd ms), the rest is "
              f"AccumulateGrad (gradients into parameters)")
    print(f"\n{len(records)} records of {len(totals)} APIs (top {top} by self + bwd time above); "
          f"outermost calls cover {sum(r.cost_ns for r in records if r.depth == 0) / wall_ns:.0%} of the "
          f"profiled run's {wall_ns / 1e6:.0f} ms")


def is_node(record) -> bool:
    """An autograd node of a backward pass (recorded with config aten "backward", the default)."""
    return record.fwd_call_id != 0 or record.api == "torch::autograd::AccumulateGrad" or \
        record.api.endswith(("Backward0", "Backward1"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="training steps (default 300)")
    parser.add_argument("--top", type=int, default=15, help="rows of the report (default 15)")
    args = parser.parse_args()

    train(10)  # warm-up, so that neither run pays first-call costs
    # Plain and profiled runs alternate (three pairs), so that both see the same machine state.
    plain_times, profiled_times = [], []
    for _ in range(3):
        t0 = time.perf_counter_ns()
        plain_losses, plain_params = train(args.steps)
        plain_times.append(time.perf_counter_ns() - t0)
        with tw.profile() as prof:  # every callable under torch
            t0 = time.perf_counter_ns()
            losses, params = train(args.steps)
            profiled_times.append(time.perf_counter_ns() - t0)
    plain_ns, profiled_ns = sorted(plain_times)[1], sorted(profiled_times)[1]
    records = prof.records()

    identical = losses == plain_losses and all(torch.equal(a, b) for a, b in zip(params, plain_params))
    print(f"torchwrapper {tw.__version__}: {args.steps} steps of an MLP with SGD, torch {torch.__version__}, "
          f"clock {tw._core.clock_source()}")
    print(f"final loss {losses[-1]:.4f}; losses and parameters bit-identical to the plain run: {identical}")
    print(f"wall time (median of 3 alternating runs): plain {plain_ns / 1e6:.0f} ms, profiled "
          f"{profiled_ns / 1e6:.0f} ms ({profiled_ns / plain_ns:.3f}x; make bench measures this more carefully)")
    stats = prof.stats()
    own = stats["own_cost"]   # what the profiler measured of its own time (one call in 64, every node's share)
    if own["run_ns"] > 0:
        print(f"its own estimate of that cost: {1 / (1 - own['total_ns'] / own['run_ns']):.3f}x "
              f"({own['call_ns']['detail']:.0f} ns a call, measured on 1 in {own['sample_every']}; "
              "its own work only: torch's code also runs a little slower beside it, which no clock in it sees)")
    print(f"wrapped {len(prof.wrapped)} torch callables in {(stats['discover_s'] + stats['install_s']) * 1e3:.0f} ms, "
          f"restored them in {stats['restore_s'] * 1e3:.1f} ms")
    if stats["dropped"]:
        print(f"warning: {stats['dropped']} records dropped")
    report(records, profiled_times[-1], args.top)  # the records are the last profiled run's
    if not identical:
        raise SystemExit("profiling changed the training results")


if __name__ == "__main__":
    main()
