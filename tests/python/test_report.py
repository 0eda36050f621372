# SPDX-License-Identifier: MIT
"""tw-report and torchwrapper.load against an independent reading of the same files."""
import csv
import gzip
import json
import math
import os
import re
import subprocess
import sys
from collections import defaultdict

import pytest
import torch

import torchwrapper as tw
from torchwrapper._files import read_rows
from torchwrapper._outdir import record_files

from models import MLP

BUILD = os.environ.get("top_builddir", os.path.join(os.path.dirname(__file__), "..", ".."))
TW_REPORT = os.path.join(BUILD, "tw-report")


def train(steps=15):
    torch.manual_seed(0)
    model = MLP()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(steps):
        loss = model(torch.randn(32, 32)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


@pytest.fixture(scope="module", params=["csv", "json"])
def run_dir(request, tmp_path_factory):
    """A real training loop profiled into small rotating files."""
    out = tmp_path_factory.mktemp(f"report-{request.param}")
    tw.TorchWrapper({"out_dir": str(out), "format": request.param, "file_max_size": "8KB"}).start(train)
    return out


def report(*args, check=True):
    done = subprocess.run([TW_REPORT, *map(str, args)], capture_output=True, text=True)
    if check:
        assert done.returncode == 0, done.stderr
    return done


def independent_rows(out_dir):
    """The call records, read with the csv and json modules only."""
    rows = []
    for name in sorted(os.listdir(out_dir)):
        path = os.path.join(out_dir, name)
        if name.endswith(".csv"):
            with open(path, newline="") as f:
                rows += [dict(r) for r in csv.DictReader(f)]
        elif name.endswith(".jsonl"):
            with open(path) as f:
                rows += [json.loads(line) for line in f]
    return [{"api": r["api"], "cost": int(r["cost_ns"]), "self": int(r["self_ns"]), "pid": int(r["pid"]),
             "tid": int(r["tid"]), "start": int(r["start_ns"]), "call_id": int(r["call_id"]),
             "parent_id": int(r["parent_id"])} for r in rows]


def nearest_rank(values, q):
    values = sorted(values)
    return values[max(1, math.ceil(q * len(values))) - 1]


def test_totals_counts_and_percentiles_match_an_independent_computation(run_dir):
    rows = independent_rows(run_dir)
    assert sum(n.endswith((".csv", ".jsonl")) for n in os.listdir(run_dir)) > 3, "the run should have rotated"
    by_api = defaultdict(list)
    for r in rows:
        by_api[r["api"]].append(r)
    got = {g["key"]: g for g in json.loads(report("--format", "json", run_dir).stdout)["rows"]}
    assert set(got) == set(by_api)
    all_self = sum(r["self"] for r in rows)
    for api, calls in by_api.items():
        g = got[api]
        costs = [r["cost"] for r in calls]
        assert g["calls"] == len(calls)
        assert g["total_ns"] == sum(costs)
        assert g["self_ns"] == sum(r["self"] for r in calls)
        assert g["min_ns"] == min(costs) and g["max_ns"] == max(costs)
        assert g["mean_ns"] == sum(costs) // len(costs)
        for q, key in ((0.5, "p50_ns"), (0.95, "p95_ns"), (0.99, "p99_ns")):
            exact = nearest_rank(costs, q)
            assert abs(g[key] - exact) <= 0.01 * exact + 1, (api, key, g[key], exact)
        assert g["share"] == pytest.approx(100.0 * g["self_ns"] / all_self, abs=1e-3)


def test_csv_output_sorts_filters_and_limits(run_dir):
    lines = report("--format", "csv", "--sort", "calls", "--top", "3", "--api", "torch.nn.*", run_dir).stdout
    table = list(csv.DictReader(lines.splitlines()))
    assert len(table) == 3
    assert all(r["api"].startswith("torch.nn.") for r in table)
    calls = [int(r["calls"]) for r in table]
    assert calls == sorted(calls, reverse=True)
    expected = defaultdict(int)
    for r in independent_rows(run_dir):
        expected[r["api"]] += 1
    assert calls[0] == max(n for api, n in expected.items() if api.startswith("torch.nn."))


def test_grouping_by_thread_pid_and_parent(run_dir):
    rows = independent_rows(run_dir)
    by_pid = json.loads(report("--format", "json", "--by", "pid", run_dir).stdout)["rows"]
    assert [(g["key"], g["calls"]) for g in by_pid] == [(str(rows[0]["pid"]), len(rows))]
    by_thread = json.loads(report("--format", "json", "--by", "thread", run_dir).stdout)["rows"]
    assert by_thread[0]["key"] == f"{rows[0]['pid']}/{rows[0]['tid']}"
    # caller > callee pairs, from the parent ids
    api_of = {r["call_id"]: r["api"] for r in rows}
    pairs = defaultdict(int)
    for r in rows:
        pairs[f"{api_of[r['parent_id']]} > {r['api']}" if r["parent_id"] else r["api"]] += 1
    by_parent = {g["key"]: g["calls"] for g in json.loads(report("--format", "json", "--by", "parent",
                                                                  run_dir).stdout)["rows"]}
    assert by_parent == dict(pairs)


def test_window_keeps_the_calls_that_start_inside_it(run_dir):
    rows = independent_rows(run_dir)
    with open(os.path.join(run_dir, "manifest.json")) as f:
        origin = json.load(f)["start_ns"]
    starts = sorted(r["start"] for r in rows)
    middle = (starts[len(starts) // 2] - origin) / 1e9
    got = json.loads(report("--format", "json", "--by", "pid", "--window", f"{middle}:", run_dir).stdout)["rows"]
    expected = sum(1 for r in rows if r["start"] >= origin + int(middle * 1e9))
    assert abs(got[0]["calls"] - expected) <= 1  # the boundary call, within float rounding of the bound


def test_processes_and_ranks_merge(tmp_path, run_dir):
    """Two processes (here: a copy of one run's files with another pid) read together."""
    other = tmp_path / "rank1"
    other.mkdir()
    for name in os.listdir(run_dir):
        if name.endswith((".csv", ".jsonl")):
            text = (run_dir / name).read_text()
            pid = str(independent_rows(run_dir)[0]["pid"])
            (other / name).write_text(text.replace(f",{pid},", ",999999,").replace(f'"pid":{pid},', '"pid":999999,'))
    rows = independent_rows(run_dir)
    merged = json.loads(report("--format", "json", "--by", "pid", run_dir, other).stdout)["rows"]
    assert sorted((g["key"], g["calls"]) for g in merged) == sorted([(str(rows[0]["pid"]), len(rows)),
                                                                    ("999999", len(rows))])
    by_api = json.loads(report("--format", "json", run_dir, other).stdout)["rows"]
    assert sum(g["calls"] for g in by_api) == 2 * len(rows)


def nested_per_thread(events):
    """Asserts that the complete events of each (pid, tid) nest strictly: each starts after and ends
    before the one open around it (Perfetto mis-draws overlapping slices of one thread)."""
    threads = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            threads[(e["pid"], e["tid"])].append(e)
    for track in threads.values():
        track.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in track:
            # (times are whole nanoseconds in microseconds: compared within a thousandth of one)
            while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"] - 1e-6:
                stack.pop()
            if stack:
                assert e["ts"] + e["dur"] <= stack[-1]["ts"] + stack[-1]["dur"] + 1e-6, (e, stack[-1])
            stack.append(e)
    return threads


def test_trace_file_is_valid_and_nested_per_thread(run_dir, tmp_path):
    trace_path = tmp_path / "trace.json.gz"
    report("--trace", trace_path, run_dir)
    with gzip.open(trace_path, "rt") as f:
        first_line = f.readline()
        f.seek(0)
        trace = json.load(f)
    # torch.profiler's layout (Kineto's output_json.cpp): a lone process is rank 0 of 1, said in the
    # first line, where HTA looks for a file's rank
    assert re.search(r'"rank":\s+0\b', first_line)
    assert trace["distributedInfo"] == {"rank": 0, "world_size": 1}
    assert trace["baseTimeNanoseconds"] == trace["otherData"]["origin_ns"]
    calls = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] in ("cpu_op", "python_function")]
    rows = independent_rows(run_dir)
    assert len(calls) == len(rows)
    by_id = {e["args"]["call_id"]: e for e in calls}
    for e in calls:
        assert {"ts", "dur", "pid", "tid", "name"} <= set(e)
        assert e["dur"] >= 0 and e["ts"] >= 0
        assert e["args"]["External id"] == e["args"]["call_id"]
        # a module's forward is a Python function's event, as torch.profiler's with_modules ones
        assert (e["cat"] == "python_function") == e["name"].endswith(".forward"), e
        if e["args"]["parent_id"]:   # inside its parent, on its thread
            parent = by_id[e["args"]["parent_id"]]
            assert parent["tid"] == e["tid"]
            assert parent["ts"] <= e["ts"] and e["ts"] + e["dur"] <= parent["ts"] + parent["dur"] + 1e-9
    names = {(e["pid"], e["tid"]) for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    threads = nested_per_thread(trace["traceEvents"])
    assert set(threads) <= names
    # the steps, from the step column: one ProfilerStep#N a step, each lasting until the next begins
    steps = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["name"].startswith("ProfilerStep#")]
    assert [e["name"] for e in steps] == [f"ProfilerStep#{n}" for n in range(15)]
    assert {e["cat"] for e in steps} == {"user_annotation"} and len({e["tid"] for e in steps}) == 1
    for a, b in zip(steps, steps[1:]):
        assert a["ts"] + a["dur"] == pytest.approx(b["ts"], abs=1e-6)
    for e in calls:
        if e["args"]["depth"] == 0:   # the outermost calls lie in the step they began in
            s = steps[e["args"]["step"]]
            assert s["ts"] <= e["ts"] < s["ts"] + s["dur"] + 1e-9
    limited = tmp_path / "limited.json"
    out = report("--trace", limited, "--limit", "10", run_dir).stdout
    assert "(--limit reached)" in out
    events = json.loads(limited.read_text())["traceEvents"]
    assert sum(1 for e in events if e["ph"] == "X" and e["cat"] == "cpu_op") == 10


def test_trace_clips_what_does_not_nest(tmp_path):
    """Records that overlap (a child past its parent's end, a sibling before the one before it ended,
    a child whose parent came later in another file) are clipped into their parents: no event of a
    thread overlaps another but by nesting."""
    (tmp_path / "tw-1-0001.csv").write_text(
        "call_id,api,start_ns,cost_ns,self_ns,gpu_ns,pid,tid,depth,parent_id,error,args,step\n"
        "3,grandchild,1150,400,400,0,42,42,2,2,0,,0\n"     # ends at 1550, after its parent (1500)
        "2,child,1100,400,0,0,42,42,1,1,0,,0\n"
        "4,sibling,1450,200,200,0,42,42,1,1,0,,0\n"        # begins before child ended
        "5,late,950,100,100,0,42,42,1,1,0,,0\n"            # begins before its parent
        "1,outer,1000,1000,300,0,42,42,0,0,0,,0\n"
        "6,next,1900,300,300,0,42,42,0,0,0,,1\n")           # begins before outer ended
    trace = tmp_path / "t.json"
    report("--trace", trace, tmp_path)
    events = json.loads(trace.read_text())["traceEvents"]
    nested_per_thread(events)
    got = {e["name"]: (round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000)) for e in events
           if e["ph"] == "X" and e["cat"] == "cpu_op"}
    # the origin is the first call's start (950): times in ns after it
    assert got == {"outer": (50, 1050), "late": (50, 100), "child": (150, 550), "grandchild": (200, 550),
                   "sibling": (550, 700), "next": (1050, 1250)}


def test_gpu_records_are_attributed_and_drawn_on_their_own_tracks(tmp_path):
    (tmp_path / "tw-1-0001.csv").write_text(
        "call_id,api,start_ns,cost_ns,self_ns,gpu_ns,pid,tid,depth,parent_id,error,args\n"
        "2,torch.matmul,1000,500,500,0,42,42,1,1,0,\n"
        "1,torch.nn.Linear.forward,900,800,300,0,42,42,0,0,0,\n")
    (tmp_path / "tw-1-0001.gpu.csv").write_text(
        "call_id,api,kind,name,start_ns,end_ns,device,stream,correlation_id,pid\n"
        "2,torch.matmul,kernel,gemm,1200,1450,0,7,5,42\n"
        "2,torch.matmul,memcpy,,1460,1470,0,7,6,42\n"
        "0,,kernel,stray,1500,1600,0,7,7,42\n")
    got = {g["key"]: g for g in json.loads(report("--format", "json", tmp_path).stdout)["rows"]}
    assert got["torch.matmul"]["gpu_ns"] == 260
    assert got["torch.matmul"]["calls"] == 1
    assert got["(not attributed)"]["gpu_ns"] == 100
    frame = tw.load(tmp_path)
    assert dict(zip(frame["api"].astype(str), frame["gpu_ns"])) == {"torch.matmul": 260,
                                                                    "torch.nn.Linear.forward": 0}
    trace = tmp_path / "t.json"
    report("--trace", trace, tmp_path)
    events = json.loads(trace.read_text())["traceEvents"]
    # as Kineto draws them: on pid = device, tid = stream, with the call's id and CUPTI's correlation
    gpu = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    assert [(e["cat"], e["name"], e["pid"], e["tid"]) for e in gpu] == [
        ("kernel", "gemm", 0, 7), ("gpu_memcpy", "Memcpy", 0, 7), ("kernel", "stray", 0, 7)]
    assert [e["args"].get("External id") for e in gpu] == [2, 2, None]
    assert [(e["args"]["correlation"], e["args"]["stream"]) for e in gpu] == [(5, 7), (6, 7), (7, 7)]
    # files older than the launch columns: an arrow from the call that launched the work to it
    starts = [e for e in events if e["ph"] == "s"]
    finishes = [e for e in events if e["ph"] == "f"]
    assert [e["id"] for e in starts] == ["42.2"] and {e["id"] for e in finishes} == {"42.2"}
    assert starts[0]["tid"] == 42 and {e["cat"] for e in starts + finishes} == {"ac2g"}
    assert not [e for e in events if e.get("cat") == "cuda_runtime"]


def test_gpu_work_s_cuda_calls_are_drawn_inside_the_calls_that_made_them(tmp_path):
    (tmp_path / "tw-1-0001.csv").write_text(
        "call_id,api,start_ns,cost_ns,self_ns,gpu_ns,pid,tid,depth,parent_id,error,args\n"
        "2,torch.matmul,1000,500,500,0,42,42,1,1,0,\n"
        "1,torch.nn.Linear.forward,900,800,300,0,42,42,0,0,0,\n")
    (tmp_path / "tw-1-0001.gpu.csv").write_text(
        "call_id,api,kind,name,start_ns,end_ns,device,stream,correlation_id,pid,launch_start_ns,launch_end_ns,"
        "launch\n"
        "2,torch.matmul,kernel,gemm,1600,1850,0,7,5,42,1100,1150,cudaLaunchKernel\n"
        "2,torch.matmul,memset,memset,1860,1870,0,7,6,42,1200,1230,cudaMemsetAsync\n"
        "1,torch.nn.Linear.forward,memcpy,memcpy HtoD,1880,1890,0,7,8,42,1600,1660,cudaMemcpyAsync\n")
    trace = tmp_path / "t.json"
    report("--trace", trace, tmp_path)
    events = json.loads(trace.read_text())["traceEvents"]
    nested_per_thread(events)
    runtime = {e["args"]["correlation"]: e for e in events if e.get("cat") == "cuda_runtime"}
    assert {c: (e["name"], e["tid"], e["args"]["External id"], round(e["ts"] * 1000), round(e["dur"] * 1000))
            for c, e in runtime.items()} == {5: ("cudaLaunchKernel", 42, 2, 200, 50),
                                             6: ("cudaMemsetAsync", 42, 2, 300, 30),
                                             8: ("cudaMemcpyAsync", 42, 1, 700, 60)}
    gpu = {e["args"]["correlation"]: e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")}
    assert gpu[8]["name"] == "Memcpy HtoD" and gpu[6]["name"] == "Memset"
    # an ac2g arrow from each CUDA call to its work
    flows = [e for e in events if e.get("cat") == "ac2g"]
    pairs = {e["id"]: {} for e in flows}
    for e in flows:
        pairs[e["id"]][e["ph"]] = e
    assert sorted((p["s"]["ts"], p["f"]["ts"], p["f"]["pid"], p["f"]["tid"]) for p in pairs.values()) == sorted(
        (runtime[c]["ts"], gpu[c]["ts"], 0, 7) for c in runtime)


def test_torn_lines_unknown_columns_and_bad_files(tmp_path):
    good = tmp_path / "run"
    good.mkdir()
    (good / "a.csv").write_text(
        "call_id,api,start_ns,cost_ns,self_ns,gpu_ns,pid,tid,depth,parent_id,error,args,module\n"
        "1,torch.add,10,5,5,0,1,1,0,0,0,\"x, y\",encoder.0\n"
        "2,torch.add,20,7,7,0,1,1,0,0,0,,\n"
        "3,torch.add,30,9,9,0,1,1,0,0,0,\"cut")
    (good / "b.jsonl").write_text('{"call_id":4,"api":"torch.mul","start_ns":40,"cost_ns":3,"self_ns":3,"gpu_ns":0,'
                                  '"pid":1,"tid":1,"depth":0,"parent_id":0,"error":true,"args":"","new":[1,2]}\n')
    done = report("--format", "csv", good)
    table = {r["api"]: r for r in csv.DictReader(done.stdout.splitlines())}
    assert table["torch.add"]["calls"] == "2" and table["torch.add"]["total_ns"] == "12"
    assert table["torch.mul"]["errors"] == "1"
    assert "1 torn last line" in done.stderr
    with pytest.warns(UserWarning, match="1 torn last line"):
        frame = tw.load(good)
    assert list(frame["call_id"]) == [1, 2, 4]
    assert list(frame["error"]) == [False, False, True]
    assert list(frame.columns) == ["call_id", "api", "start_ns", "cost_ns", "self_ns", "gpu_ns", "pid", "tid",
                                   "depth", "parent_id", "error", "args", "module", "step", "site", "fwd_call_id",
                                   "fwd_api", "flops", "flops_total", "mem_alloc", "mem_self", "mem_freed",
                                   "mem_peak", "site_text", "input_shapes"]

    stray = tmp_path / "notes.csv"
    stray.write_text("name,age\nbob,42\n")
    done = report(stray, check=False)
    assert done.returncode == 1
    assert f"{stray} is not a TorchWrapper record file" in done.stderr
    with pytest.raises(ValueError, match="notes.csv is not a TorchWrapper record file"):
        tw.load(stray)

    empty = tmp_path / "empty"
    empty.mkdir()
    done = report(empty, check=False)
    assert done.returncode == 1 and f"{empty} holds no record files" in done.stderr
    with pytest.raises(ValueError, match="holds no record files"):
        tw.load(empty)

    done = report("--by", "file", good, check=False)
    assert done.returncode == 2 and "--by 'file' is not accepted: give api, thread, pid, parent, step, site, shape or " \
        "module" in done.stderr
    done = report("--window", "5:1", good, check=False)
    assert done.returncode == 2 and "--window '5:1'" in done.stderr
    assert report(check=False).returncode == 2


def test_load_matches_the_files_and_the_original_columns(run_dir):
    rows = independent_rows(run_dir)
    frame = tw.load(run_dir)
    assert len(frame) == len(rows)
    assert frame["start_ns"].is_monotonic_increasing
    assert sorted(frame["call_id"]) == sorted(r["call_id"] for r in rows)
    assert frame["cost_ns"].sum() == sum(r["cost"] for r in rows)
    assert str(frame["cost_ns"].dtype) == "int64" and str(frame["error"].dtype) == "bool"
    original = tw.load(run_dir, original_names=True)
    assert list(original.columns[:6]) == ["API Name", "Total Time (ms)", "Call Number", "Start Timestamp",
                                          "Cost Time (ms)", "Arguments"]
    first = original[original["API Name"] == "torch.nn.functional.relu"]
    assert list(first["Call Number"]) == list(range(1, len(first) + 1))


def test_python_m_torchwrapper_report_is_the_same_report(run_dir):
    plain = report("--format", "csv", "--by", "parent", run_dir).stdout
    env = dict(os.environ)
    done = subprocess.run([sys.executable, "-m", "torchwrapper", "report", "--format", "csv", "--by", "parent",
                           str(run_dir)], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == plain
    done = subprocess.run([sys.executable, "-m", "torchwrapper", "report", "--top", "x", str(run_dir)],
                          capture_output=True, text=True, env=env)
    assert done.returncode == 2 and "--top 'x' is not a count" in done.stderr


def test_table_and_markdown_are_aligned(run_dir):
    table = report("--top", "5", run_dir).stdout.splitlines()
    assert table[0].split()[0] == "api" and len(table[1:6]) == 5
    assert len({len(line) for line in table[:6]}) == 1  # aligned columns
    assert "records from" in table[-2] and table[-1].startswith("torchwrapper's own cost: ")  # the footer
    markdown = report("--format", "markdown", "--top", "3", run_dir).stdout.splitlines()
    assert markdown[0].startswith("| api") and set(markdown[1]) <= set("|-:")
    assert len(markdown) == 5


def test_tree_prints_one_step_nested_with_sites(run_dir):
    """tw-report --tree STEP: the calls of one training step, nested, with module paths and where the
    program made them; --max-depth keeps the outer levels; a missing step says which there are."""
    lines = report("--tree", "2", run_dir).stdout.splitlines()
    assert lines[0].startswith("step 2 (pid ")
    assert any("  @ " in line for line in lines)   # the site of a call the program made
    assert any(line.startswith("  torch.optim.SGD.step") for line in lines)
    assert any("[MLP.fc1]" in line for line in lines)
    depth_one = report("--tree", "2", "--max-depth", "1", run_dir).stdout.splitlines()
    assert all(line.startswith("  ") and not line.startswith("   ") for line in depth_one[1:])
    assert len(depth_one) < len(lines)
    missing = report("--tree", "999", run_dir, check=False)
    assert missing.returncode == 1 and "step 999 is not in the records: steps 0 to 14" in missing.stderr


def test_tree_json_holds_the_calls_of_the_step_as_the_text_shows_them(run_dir):
    """--tree STEP --format json: the calls in the order the text shows them, each with its level
    (the text's indent), and the step's calls are the records' of that step and thread; --tree all:
    every call of the thread."""
    frame = tw.load(run_dir)
    text = report("--tree", "2", run_dir).stdout.splitlines()
    tree = json.loads(report("--tree", "2", "--format", "json", run_dir).stdout)
    assert tree["step"] == 2 and tree["shown"] == len(tree["calls"]) == len(text) - 1
    calls = frame[(frame["step"] == 2) & (frame["tid"] == tree["tid"]) & (frame["pid"] == tree["pid"])]
    assert sorted(c["call_id"] for c in tree["calls"]) == sorted(calls["call_id"])
    assert tree["total_ns"] == calls["cost_ns"][calls["depth"] == 0].sum()
    for line, call in zip(text[1:], tree["calls"]):
        assert line == " " * (2 * call["level"] + 2) + call["api"] + line.lstrip(" ")[len(call["api"]):]
        assert f"  {call['cost_ns'] / 1e6:.3f} ms  (self {call['self_ns'] / 1e6:.3f} ms)" in line
        assert (call["site"] is not None) == ("  @ " in line)
    levels = [c["level"] for c in tree["calls"]]   # a call is one level below the call before it at most
    assert levels[0] == 0 and all(b <= a + 1 for a, b in zip(levels, levels[1:]))
    whole = json.loads(report("--tree", "all", "--format", "json", run_dir).stdout)
    assert whole["step"] is None
    assert len(whole["calls"]) == len(frame[(frame["tid"] == whole["tid"]) & (frame["pid"] == whole["pid"])])
    assert report("--tree", "all", run_dir).stdout.startswith("all calls (pid ")
    bad = report("--tree", "every", run_dir, check=False)
    assert bad.returncode == 2 and "--tree 'every' is not a count (a whole number >= 0) nor all" in bad.stderr


def test_call_tree_prints_the_step_from_files_records_and_frames_alike(run_dir):
    """torchwrapper.call_tree: the step's calls as tw-report finds them, without sites; the same text
    from the files, their records and both DataFrames; max_depth levels at most."""
    frame = tw.load(run_dir)
    text = tw.call_tree(run_dir, step=2)
    lines = text.splitlines()
    tree = json.loads(report("--tree", "2", "--format", "json", run_dir).stdout)
    calls = frame[(frame["step"] == 2) & (frame["tid"] == tree["tid"])]
    roots = calls[calls["depth"] == 0]
    assert lines[0] == f"step 2: {len(calls)} calls shown, {roots['cost_ns'].sum() / 1e6:.3f} ms"
    assert len(lines) == len(calls) + 1 and not any("  @ " in line for line in lines)
    assert any(line.startswith("  torch.optim.SGD.step") for line in lines)
    assert any(line.startswith("    torch.nn.Linear.forward [MLP.fc1]  ") for line in lines)
    # in memory, in start order (as Profile.records() gives them), not as the files hold them
    records = sorted(read_rows(record_files(str(run_dir))), key=lambda r: (r.start_ns, r.call_id))
    assert tw.call_tree(records, step=2) == text
    assert tw.call_tree(frame, step=2) == text
    assert tw.call_tree(tw.load(run_dir, original_names=True), step=2) == text
    two = tw.call_tree(run_dir, step=2, max_depth=2).splitlines()
    assert len(two) < len(lines) and all(not line.startswith("      ") for line in two[1:])
    assert any(line.startswith("    ") for line in two[1:])
    with pytest.raises(IndexError, match="step 99 is not in the records: steps 0 to 14"):
        tw.call_tree(run_dir, step=99)


def test_call_tree_names_tw_report_when_it_cannot_read_the_files(tmp_path):
    notes = tmp_path / "notes.csv"
    notes.write_text("hello,world\n")
    with pytest.raises(RuntimeError, match=r"torchwrapper.call_tree: tw-report failed \(exit status 1\): .*notes.csv "
                                           "is not a TorchWrapper record file"):
        tw.call_tree(str(notes), step=0)
    with pytest.raises(ValueError, match="max_depth=0 is not accepted"):
        tw.call_tree(str(notes), max_depth=0)


def test_steps_filter_and_by_step_match_load(run_dir):
    """--steps A:B keeps the calls of those steps (both ends included); --by step has one row per step."""
    frame = tw.load(str(run_dir))
    assert sorted(set(frame["step"])) == list(range(15))   # 15 optimizer steps (no call after the last)
    rows = json.loads(report("--format", "json", "--steps", "3:5", run_dir).stdout)["rows"]
    chosen = frame[frame["step"].between(3, 5)]
    assert {r["key"]: r["calls"] for r in rows} == chosen.groupby("api", observed=True).size().to_dict()
    rows = json.loads(report("--format", "json", "--by", "step", "--sort", "name", run_dir).stdout)
    assert rows["group_by"] == "step"
    assert [r["key"] for r in rows["rows"]] == [str(s) for s in range(15)]
    assert [r["calls"] for r in rows["rows"]] == list(frame.groupby("step").size())
    assert json.loads(report("--format", "json", "--steps", "14:", "--by", "step", run_dir).stdout)["rows"][0]["key"] \
        == "14"
    assert "no step" not in report("--by", "step", run_dir).stdout
    bad = report("--steps", "5:3", run_dir, check=False)
    assert bad.returncode == 2 and "--steps '5:3' is not accepted" in bad.stderr


def test_trace_dir_writes_a_file_per_rank_and_the_unranked_beside_them(tmp_path):
    """--trace DIR/: a file per rank (70 here: more than are kept open at once, so that files closed
    early are appended to as more gzip members), each naming its rank and the world size first;
    a process without a rank (a launcher) in unranked/, where HTA does not look."""
    inputs = []
    for rank in range(70):
        d = tmp_path / f"r{rank}"
        d.mkdir()
        pid = 1000 + rank
        (d / f"tw-{pid}-0001.csv").write_text(
            "call_id,api,start_ns,cost_ns,self_ns,gpu_ns,pid,tid,depth,parent_id,error,args,step\n"
            f"2,torch.mm,{1100 + rank},100,100,0,{pid},{pid},1,1,0,,0\n"
            f"1,train_step,{1000 + rank},400,300,0,{pid},{pid},0,0,0,,0\n")
        (d / "manifest.json").write_text(json.dumps({"pid": pid, "rank": rank, "start_ns": 1000}))
        inputs.append(d)
    launcher = tmp_path / "launcher"
    launcher.mkdir()
    (launcher / "tw-5-0001.csv").write_text(
        "call_id,api,start_ns,cost_ns,self_ns,gpu_ns,pid,tid,depth,parent_id,error,args\n"
        "1,torch.distributed.run,900,2000,2000,0,5,5,0,0,0,\n")
    (launcher / "manifest.json").write_text(json.dumps({"pid": 5, "start_ns": 900}))
    traces = tmp_path / "traces"
    out = report("--trace", f"{traces}/", *inputs, launcher).stdout
    assert f"trace: 141 calls in {traces}/ (71 files)" in out
    assert sorted(os.listdir(traces)) == sorted([f"rank{r}.pt.trace.json.gz" for r in range(70)] + ["unranked"])
    assert os.listdir(traces / "unranked") == ["pid5.pt.trace.json.gz"]
    for rank in range(70):
        with gzip.open(traces / f"rank{rank}.pt.trace.json.gz", "rt") as f:
            first = f.readline()
            f.seek(0)
            trace = json.load(f)
        assert first.startswith('{"distributedInfo": {"rank": %d, "world_size": 70}' % rank)
        events = trace["traceEvents"]
        assert [e["name"] for e in events if e["ph"] == "X"] == ["train_step", "torch.mm", "ProfilerStep#0"]
        assert {e["pid"] for e in events if e["ph"] == "X"} == {1000 + rank}
    with gzip.open(traces / "unranked" / "pid5.pt.trace.json.gz", "rt") as f:
        trace = json.load(f)
    assert "distributedInfo" not in trace
    assert [e["name"] for e in trace["traceEvents"] if e["ph"] == "X"] == ["torch.distributed.run"]


def test_trace_of_a_call_around_more_calls_than_are_held_is_complete_and_nested(tmp_path):
    """A thread's calls are held until the outermost call around them comes (to clip them into it):
    past 131,072 (a range around a whole epoch), they are written as they are, and nothing is lost."""
    n = 140_000
    lines = ["call_id,api,start_ns,cost_ns,self_ns,gpu_ns,pid,tid,depth,parent_id,error,args,step"]
    lines += [f"{i + 2},torch.add,{1000 + 10 * i},5,5,0,42,42,1,1,0,,{i // 1000}" for i in range(n)]
    lines.append(f"1,run_training_epoch,900,{10 * n + 200},{5 * n + 200},0,42,42,0,0,0,,0")
    (tmp_path / "tw-1-0001.csv").write_text("\n".join(lines) + "\n")
    trace = tmp_path / "t.json"
    report("--trace", trace, "--limit", "0", tmp_path)
    events = json.loads(trace.read_text())["traceEvents"]
    nested_per_thread(events)
    calls = [e for e in events if e["ph"] == "X" and e["cat"] == "cpu_op"]
    assert len(calls) == n + 1
    steps = [e["name"] for e in events if e["ph"] == "X" and e["cat"] == "user_annotation"]
    assert steps == [f"ProfilerStep#{s}" for s in range(n // 1000)]
