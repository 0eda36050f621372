# SPDX-License-Identifier: MIT
"""Where backward nodes show in tw-report's stacks (--folded, --flamegraph, --html) and --tree: by
default charged, under the forward call that created them (a module's frame holds its forward and
its backward), or with --backward timeline where they ran, under the backward call."""
import collections
import os
import subprocess

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchwrapper as tw

LAYER = os.path.join(os.path.dirname(os.path.abspath(tw.__file__)), "_torch.so")
pytestmark = pytest.mark.skipif(not os.path.exists(LAYER), reason="the libtorch layer was not built (configure)")
BUILD = os.environ.get("top_builddir", os.path.join(os.path.dirname(__file__), "..", ".."))
TW_REPORT = os.path.join(BUILD, "tw-report")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 3)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def profiled_run(out, steps=3):
    torch.manual_seed(0)
    model, x = Net(), torch.randn(4, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with tw.profile(out_dir=str(out), format="csv", sites="off") as prof:
        for _ in range(steps):
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
    return prof.records()


def report(*args):
    done = subprocess.run([TW_REPORT, *map(str, args)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def folded(path):
    stacks = collections.Counter()
    for line in open(path):
        stack, ns = line.rsplit(" ", 1)
        stacks[stack] += int(ns)
    return stacks


def stack_of(records, record):
    by_id = {r.call_id: r for r in records}
    names = []
    while record is not None:
        names.append(record.api)
        record = by_id.get(record.parent_id)
    return ";".join(reversed(names))


def test_flame_stacks_charge_each_node_to_its_forward_call_and_timeline_keeps_them_where_they_ran(tmp_path):
    records = profiled_run(tmp_path / "run")
    by_id = {r.call_id: r for r in records}
    nodes = [r for r in records if r.fwd_call_id != 0]
    assert nodes
    expected_charged, expected_timeline = collections.Counter(), collections.Counter()
    for r in records:
        if r.fwd_call_id != 0:
            expected_charged[stack_of(records, by_id[r.fwd_call_id]) + ";" + r.api] += r.self_ns
        else:
            expected_charged[stack_of(records, r)] += r.self_ns
        expected_timeline[stack_of(records, r)] += r.self_ns
    report("--folded", tmp_path / "charged", tmp_path / "run")
    report("--folded", tmp_path / "timeline", "--backward", "timeline", tmp_path / "run")
    assert folded(tmp_path / "charged") == +expected_charged
    assert folded(tmp_path / "timeline") == +expected_timeline
    # Net is the model's own class: its forward is a frame too, so the nodes stand under it
    assert ("test_backward_views.Net.forward;torch.nn.Linear.forward;torch.nn.functional.linear;AddmmBackward0"
            in folded(tmp_path / "charged"))
    # the same time in both: only where the nodes' frames stand differs
    assert sum(folded(tmp_path / "charged").values()) == sum(folded(tmp_path / "timeline").values())


ROOT = "Net"   # the model's frame in --by module: its path, its class


def test_by_module_each_module_frame_holds_its_forward_and_its_backward(tmp_path):
    records = profiled_run(tmp_path / "run")
    report("--folded", tmp_path / "modules", "--by", "module", tmp_path / "run")
    stacks = folded(tmp_path / "modules")
    by_id = {r.call_id: r for r in records}

    def in_forward_of(r, module):   # the module's forward call or a call inside it
        while r is not None and r.module != f"{ROOT}.{module}":
            r = by_id.get(r.parent_id)
        return r is not None

    for module in ("fc1", "fc2"):
        forward = sum(r.self_ns for r in records if r.fwd_call_id == 0 and in_forward_of(r, module))
        backward = sum(r.self_ns for r in records if r.module == f"{ROOT}.{module}" and r.fwd_call_id != 0)
        assert forward > 0 and backward > 0
        assert stacks[f"{ROOT};{ROOT}.{module}"] == forward + backward
    report("--folded", tmp_path / "timeline", "--by", "module", "--backward", "timeline", tmp_path / "run")
    timeline = folded(tmp_path / "timeline")
    assert timeline[f"{ROOT};{ROOT}.fc1"] == sum(r.self_ns for r in records
                                                if r.fwd_call_id == 0 and in_forward_of(r, "fc1"))
    assert timeline[f"torch.Tensor.backward;{ROOT}.fc1"] > 0


def test_nodes_read_before_their_forward_call_are_charged_when_it_comes(tmp_path):
    profiled_run(tmp_path / "run", steps=2)
    (csv_file,) = [p for p in (tmp_path / "run").iterdir() if p.suffix == ".csv"]
    header, *rows = csv_file.read_text().splitlines()
    fwd_column = header.split(",").index("fwd_call_id")
    is_node = [row.split(",")[fwd_column] not in ("", "0") for row in rows]
    assert any(is_node)
    # as another thread's records can: every node's row first, then the rest in their order
    (tmp_path / "moved").mkdir()
    (tmp_path / "moved" / csv_file.name).write_text(
        "\n".join([header] + [r for r, n in zip(rows, is_node) if n] + [r for r, n in zip(rows, is_node) if not n])
        + "\n")
    report("--folded", tmp_path / "in-order", tmp_path / "run")
    report("--folded", tmp_path / "moved.folded", tmp_path / "moved")
    assert folded(tmp_path / "moved.folded") == folded(tmp_path / "in-order")
    # a node whose forward call never comes stays in the stacks, below "(not recorded)"
    (tmp_path / "lost").mkdir()
    (tmp_path / "lost" / "tw-7-0001.csv").write_text(
        header + "\n9,AddmmBackward0,5000,100,100,0,7,8,0,0,0,,fc,0,0,2,torch.nn.functional.linear" +
        "," * (header.count(",") - 16) + "\n")
    report("--folded", tmp_path / "lost.folded", tmp_path / "lost")
    assert folded(tmp_path / "lost.folded") == {"(not recorded);AddmmBackward0": 100}


def test_the_tree_shows_each_node_under_its_forward_call(tmp_path):
    profiled_run(tmp_path / "run")
    charged = report("--tree", 1, tmp_path / "run").splitlines()
    timeline = report("--tree", 1, "--backward", "timeline", tmp_path / "run").splitlines()
    assert len(charged) == len(timeline)   # the same calls, placed differently

    def indent(line):
        return len(line) - len(line.lstrip())

    for i, line in enumerate(charged):
        if line.strip().startswith("AddmmBackward0"):
            assert "(backward)" in line
            # the nearest line above one level up is the forward call that created it
            parent = next(p for p in reversed(charged[:i]) if indent(p) < indent(line))
            assert parent.strip().startswith("torch.nn.functional.linear") and indent(parent) == indent(line) - 2
    backward = next(i for i, line in enumerate(timeline) if line.strip().startswith("torch.autograd.backward"))
    assert timeline[backward + 3].strip().startswith(("MeanBackward0", "PowBackward0", "torch.ones_like"))
    assert sum("(backward)" in line for line in timeline) == 0
    assert sum(line.strip().startswith("AddmmBackward0") for line in charged) == 2


def test_a_bad_view_is_named_with_the_accepted_ones(tmp_path):
    done = subprocess.run([TW_REPORT, "--backward", "forward", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 2
    assert "--backward 'forward' is not accepted: give charged or timeline" in done.stderr
