# SPDX-License-Identifier: MIT
"""Input shapes: tw-report --by shape and load()'s input_shapes against torch.profiler's
key_averages(group_by_input_shape=True) and its trace's "Input Dims", on the same loop.

The loop calls APIs whose Python call is one aten operator, with shapes that vary from one
iteration to the next. torch.profiler records the operator's schema arguments, defaulted ones
included; torchwrapper records the arguments as the program passed them. So the two are compared
after two normalisations, each what one side cannot know:
- trailing [] entries are dropped on both sides: torch lists a defaulted scalar (torch.add's alpha,
  torch.cat's dim) that the program did not pass, and a view's size list (SymInt[]) as one [] where
  the program passed its sizes as separate ints;
- key_averages writes a tensor list (torch.cat's) as [], where its trace's Input Dims, and
  torchwrapper, list the tensors' shapes: compared as [] with key_averages, whole with Input Dims.
"""
import collections
import json
import os
import subprocess

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

import torchwrapper as tw

BUILD = os.environ.get("top_builddir", os.path.join(os.path.dirname(__file__), "..", ".."))
TW_REPORT = os.path.join(BUILD, "tw-report")

# The API the program calls -> the one aten operator torch.profiler records for it.
OPERATORS = {"torch.mm": "aten::mm", "torch.add": "aten::add", "torch.nn.functional.relu": "aten::relu",
             "torch.cat": "aten::cat", "torch.Tensor.view": "aten::view", "torch.bmm": "aten::bmm"}


def loop():
    torch.manual_seed(0)
    for rows in (3, 5, 3, 8, 5, 3):
        a, b = torch.randn(rows, 8), torch.randn(8, 16)
        c = torch.mm(a, b)
        torch.add(c, c)
        torch.add(c, 2.0)
        torch.add(a, a, alpha=3)
        F.relu(c)
        torch.cat([a, a])
        torch.cat((a, a, torch.randn(rows, 2)), 1)
        c.view(-1)
        c.view(2, rows * 8)
        torch.bmm(torch.randn(2, rows, 4), torch.randn(2, 4, 6))


def normalised(shapes, lists_as_empty):
    """shapes (a list, or its text) without trailing [] entries; tensor lists as [] if asked."""
    if isinstance(shapes, str):
        shapes = json.loads(shapes)
    entries = [[] if lists_as_empty and e and isinstance(e[0], list) else e for e in shapes]
    while entries and entries[-1] == []:
        entries.pop()
    return json.dumps(entries)


def torch_profiler_counts():
    """{(operator, shapes): calls} from key_averages(group_by_input_shape=True), and the same from
    the trace's Input Dims (tensor lists whole)."""
    import tempfile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        loop()
    grouped = collections.Counter()
    for event in prof.key_averages(group_by_input_shape=True):
        if event.key in OPERATORS.values():
            grouped[event.key, normalised(event.input_shapes, True)] += event.count
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    dims = collections.Counter((e["name"], normalised(e["args"]["Input Dims"], False)) for e in events
                               if e.get("name") in OPERATORS.values() and "Input Dims" in e.get("args", {}))
    return grouped, dims


def test_by_shape_groups_count_as_torch_profiler_groups_by_input_shape(tmp_path):
    grouped, dims = torch_profiler_counts()
    assert len(grouped) >= 15   # the loop's shapes do vary, for every operator
    assert {op for op, _ in grouped} == set(OPERATORS.values())

    with tw.profile(out_dir=str(tmp_path), args="summary"):
        loop()
    done = subprocess.run([TW_REPORT, "--by", "shape", "--format", "json", str(tmp_path)], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["group_by"] == "shape"
    ours_grouped, ours_dims = collections.Counter(), collections.Counter()
    for row in report["rows"]:
        api, _, shapes = row["key"].partition(" ")
        if api in OPERATORS:
            ours_grouped[OPERATORS[api], normalised(shapes, True)] += row["calls"]
            ours_dims[OPERATORS[api], normalised(shapes, False)] += row["calls"]
    assert ours_grouped == grouped
    assert ours_dims == dims

    # load(): the same shapes, call by call
    frame = tw.load(str(tmp_path))
    calls = frame[frame["api"].isin(list(OPERATORS))]
    from_load = collections.Counter((OPERATORS[api], normalised(shapes, False))
                                    for api, shapes in zip(calls["api"].astype(str), calls["input_shapes"]))
    assert from_load == dims
    mm = calls[calls["api"] == "torch.mm"]
    assert list(mm["input_shapes"][:2]) == ["[[3, 8], [8, 16]]", "[[5, 8], [8, 16]]"]
    cat = calls[calls["api"] == "torch.cat"]
    assert list(cat["input_shapes"][:2]) == ["[[[3, 8], [3, 8]]]", "[[[3, 8], [3, 8], [3, 2]], []]"]
    add = calls[calls["api"] == "torch.add"]
    assert list(add["input_shapes"][:3]) == ["[[3, 16], [3, 16]]", "[[3, 16], []]", "[[3, 8], [3, 8], []]"]


def test_calls_without_a_summary_have_no_shapes(tmp_path):
    """args "none": input_shapes is "" and tw-report --by shape groups such calls by API alone."""
    a = torch.ones(2, 2)
    with tw.profile(out_dir=str(tmp_path), args="none"):
        for _ in range(3):
            torch.mm(a, a)
    frame = tw.load(str(tmp_path))
    assert set(frame["input_shapes"]) == {""}
    done = subprocess.run([TW_REPORT, "--by", "shape", "--format", "csv", str(tmp_path)], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("api [input shapes],calls,")
    assert any(line.startswith("torch.mm,3,") for line in lines)
