# SPDX-License-Identifier: MIT
"""tw-report --folded, --flamegraph and --html against an independent reading of the same records
(the browser's view of them is in test_browser.py)."""
import csv
import inspect
import json
import os
import re
import socket
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from html.parser import HTMLParser

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchwrapper as tw

BUILD = os.environ.get("top_builddir", os.path.join(os.path.dirname(__file__), "..", ".."))
TW_REPORT = os.path.join(BUILD, "tw-report")
SVG_FULL_WIDTH = 1180.0  # the graph's 1200 pixels less its padding


def report(*args, check=True):
    done = subprocess.run([TW_REPORT, *map(str, args)], capture_output=True, text=True)
    if check:
        assert done.returncode == 0, done.stderr
    return done


def train(steps):
    """A real training loop with nested torch modules, so that stacks and module paths have depth."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Sequential(nn.Linear(16, 32), nn.ReLU()), nn.Linear(32, 4))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(steps):
        loss = F.cross_entropy(model(torch.randn(8, 16)), torch.randint(0, 4, (8,)))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


@pytest.fixture(scope="module", params=["csv", "json"])
def run_dir(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"flame-{request.param}")
    tw.TorchWrapper({"out_dir": str(out), "format": request.param, "file_max_size": "16KB"}).start(lambda: train(8))
    return out


def records(out_dir):
    """The call records, read with the csv and json modules only. module: None where the record
    names no module (JSON lines tell null from the model's own ""; CSV does not)."""
    rows = []
    for name in sorted(os.listdir(out_dir)):
        path = os.path.join(out_dir, name)
        if name.endswith(".csv"):
            with open(path, newline="") as f:
                rows += [dict(r, module=r["module"] or None) for r in csv.DictReader(f)]
        elif name.endswith(".jsonl"):
            with open(path) as f:
                rows += [json.loads(line) for line in f]
    return [{"api": r["api"], "self": int(r["self_ns"]), "cost": int(r["cost_ns"]), "pid": int(r["pid"]),
             "call_id": int(r["call_id"]), "parent_id": int(r["parent_id"]), "depth": int(r["depth"]),
             "module": r.get("module"), "step": int(r["step"]), "site": int(r.get("site") or 0),
             "fwd_call_id": int(r.get("fwd_call_id") or 0)} for r in rows]


def site_texts(out_dir):
    """(pid, site id) -> "file:line function", from the sites files read with the json module."""
    texts = {}
    for name in os.listdir(out_dir):
        if name.startswith("sites") and name.endswith(".json"):
            with open(os.path.join(out_dir, name)) as f:
                table = json.load(f)
            texts.update({(table["pid"], int(i)): s["text"] for i, s in table["sites"].items()})
    return texts


def frames_of(chain, texts):
    """A call chain's frames: each call's API, below its call site when it has one (an autograd
    node's site is its forward call's: the node's frame is right below that call's)."""
    frames = []
    above = 0
    for c in chain:
        # a call torch's code made carries the site of the call around it: one frame for both
        if c["site"] and not c["fwd_call_id"] and c["site"] != above:
            frames.append(texts[(c["pid"], c["site"])])
        above = c["site"]
        frames.append(c["api"])
    return frames


def chains(rows):
    """Each record with its callers, outermost first, from the parent ids alone; an autograd node's
    caller is the forward call that created it (tw-report's charged view, its default)."""
    by_id = {(r["pid"], r["call_id"]): r for r in rows}
    for r in rows:
        chain = [r]
        while chain[0]["fwd_call_id"] or chain[0]["parent_id"]:
            chain.insert(0, by_id[(r["pid"], chain[0]["fwd_call_id"] or chain[0]["parent_id"])])
        yield r, chain


def read_folded(path):
    stacks = {}
    with open(path) as f:
        for line in f:
            stack, weight = line.rstrip("\n").rsplit(" ", 1)
            assert stack not in stacks, f"two lines for {stack}"
            stacks[stack] = int(weight)
    return stacks


def test_folded_stacks_sum_exactly_to_the_records_self_time(run_dir, tmp_path):
    rows = records(run_dir)
    assert sum(n.endswith((".csv", ".jsonl")) for n in os.listdir(run_dir)) > 2, "the run should have rotated"
    folded = tmp_path / "stacks.folded"
    report("--folded", folded, run_dir)
    stacks = read_folded(folded)
    assert sum(stacks.values()) == sum(r["self"] for r in rows)
    texts = site_texts(run_dir)
    expected = defaultdict(int)
    for r, chain in chains(rows):
        expected[";".join(frames_of(chain, texts))] += r["self"]
    assert stacks == {k: v for k, v in expected.items() if v > 0}
    # the model's call, where train() made it, then the modules inside it
    line = next(i for i, text in enumerate(inspect.getsource(train).splitlines()) if "model(torch.randn" in text)
    site = f"test_flame.py:{train.__code__.co_firstlineno + line} train"
    assert any(stack.split(";")[0].endswith(site) and stack.endswith(
        ";torch.nn.Sequential.forward;torch.nn.Sequential.forward;torch.nn.Linear.forward;torch.nn.functional.linear")
        for stack in stacks), sorted(stacks)[:5]


def test_folded_by_module_has_module_paths_as_frames(run_dir, tmp_path):
    rows = records(run_dir)
    folded = tmp_path / "modules.folded"
    report("--folded", folded, "--by", "module", run_dir)
    stacks = read_folded(folded)
    assert sum(stacks.values()) == sum(r["self"] for r in rows)
    if any(n.endswith(".jsonl") for n in os.listdir(run_dir)):
        # JSON lines say which calls are module forwards, so the frames are their module paths
        # (the model itself named by its class, as every path starts).
        expected = defaultdict(int)
        for r, chain in chains(rows):
            frames = [c["module"] for c in chain if c["module"] is not None and not c["fwd_call_id"]]
            if chain[0]["module"] is None:
                frames.insert(0, chain[0]["api"])  # outside every module: the outermost call's API
            expected[";".join(frames)] += r["self"]
        assert stacks == {k: v for k, v in expected.items() if v > 0}
    assert "Sequential;Sequential.0;Sequential.0.0" in stacks and "Sequential;Sequential.1" in stacks
    assert any(s.startswith("torch.optim.Adam.step") for s in stacks)


def test_filters_keep_the_context_and_count_only_the_kept_calls(run_dir, tmp_path):
    """--steps 2:4: the calls of those steps are counted, in their whole stacks."""
    rows = records(run_dir)
    folded = tmp_path / "steps.folded"
    report("--folded", folded, "--steps", "2:4", run_dir)
    stacks = read_folded(folded)
    assert sum(stacks.values()) == sum(r["self"] for r in rows if 2 <= r["step"] <= 4)
    texts = site_texts(run_dir)
    expected = defaultdict(int)
    for r, chain in chains(rows):
        if 2 <= r["step"] <= 4:
            expected[";".join(frames_of(chain, texts))] += r["self"]
    assert stacks == {k: v for k, v in expected.items() if v > 0}


def test_calls_whose_caller_never_returned_go_below_not_recorded(tmp_path):
    """A process killed inside a call leaves its children's rows without their parent's."""
    out = tmp_path / "killed"
    out.mkdir()
    (out / "a.csv").write_text(
        "call_id,api,start_ns,cost_ns,self_ns,gpu_ns,pid,tid,depth,parent_id,error,args,module\n"
        "3,torch.mul,12,5,5,0,7,7,2,2,0,,\n"
        "2,torch.add,11,9,4,0,7,7,1,1,0,,\n"
        "4,torch.relu,30,6,6,0,7,7,0,0,0,,\n"
        "6,torch.mul,40,3,3,0,7,7,1,5,0,,\n")
    folded = tmp_path / "killed.folded"
    report("--folded", folded, out)
    assert read_folded(folded) == {"(not recorded);torch.add": 4, "(not recorded);torch.add;torch.mul": 5,
                                   "(not recorded);torch.mul": 3, "torch.relu": 6}


def svg_frames(path):
    ns = {"s": "http://www.w3.org/2000/svg"}
    root = ET.parse(path).getroot()
    frames = []
    for g in root.iterfind(".//s:g[@class='twf-f']", ns):
        title = g.find("s:title", ns).text
        rect = g.find("s:rect", ns)
        frames.append({"name": title.split("\n")[0], "title": title, "x": float(rect.get("x")),
                       "y": float(rect.get("y")), "width": float(rect.get("width"))})
    return root, frames


def test_flamegraph_svg_is_well_formed_and_matches_the_folded_stacks(run_dir, tmp_path):
    svg, folded = tmp_path / "flame.svg", tmp_path / "flame.folded"
    report("--flamegraph", svg, "--folded", folded, run_dir)
    root, frames = svg_frames(svg)  # xml.etree raises on anything that is not well-formed XML
    assert root.find("{http://www.w3.org/2000/svg}script") is not None
    stacks = read_folded(folded)
    total = sum(stacks.values())
    bottom = frames[0]
    assert bottom["name"] == "all" and bottom["width"] == pytest.approx(SVG_FULL_WIDTH, abs=0.002)
    rows = records(run_dir)
    assert bottom["title"].startswith(f"all\n{len(rows)} calls, total")
    outermost_calls = defaultdict(int)
    for r in rows:
        outermost_calls[r["api"]] += r["parent_id"] == 0
    # The frames right above "all": one per outermost API, as wide as its stacks' share of the time.
    outermost = defaultdict(int)
    for stack, weight in stacks.items():
        outermost[stack.split(";")[0]] += weight
    level = [f for f in frames if f["y"] == bottom["y"] - 16]
    assert {f["name"] for f in level} == {api for api, w in outermost.items() if w * SVG_FULL_WIDTH / total >= 0.1}
    for f in level:
        assert f["width"] == pytest.approx(outermost[f["name"]] * SVG_FULL_WIDTH / total, abs=0.002)
        calls = outermost_calls[f["name"]]
        assert re.fullmatch(rf"{re.escape(f['name'])}\n{calls} calls?, total [0-9.]+ [mu]s \([0-9.]+%\), "
                            r"self [0-9.]+ [mu]s \([0-9.]+%\)", f["title"]), f["title"]
    # Every frame lies within a frame of the level below it.
    for f in frames[1:]:
        below = [b for b in frames if b["y"] == f["y"] + 16]
        assert any(b["x"] - 0.002 <= f["x"] and f["x"] + f["width"] <= b["x"] + b["width"] + 0.002 for b in below)


class Tables(HTMLParser):
    """The rows of each table of a page, by the table's id, and the page's external references."""

    def __init__(self):
        super().__init__()
        self.tables, self.table, self.row, self.cell = {}, None, None, None
        self.external, self.classes = [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for key in ("src", "href", "xlink:href"):
            if key in attrs and not attrs[key].startswith("#"):
                self.external.append(attrs[key])
        if tag == "table":
            self.table = self.tables.setdefault(attrs.get("id"), [])
        elif tag == "tr" and self.table is not None:
            self.row = []
            self.classes.append((attrs.get("class"), self.row))
        elif tag in ("td", "th") and self.row is not None:
            self.cell = []

    def handle_data(self, data):
        if self.cell is not None:
            self.cell.append(data)

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self.cell is not None:
            self.row.append("".join(self.cell))
            self.cell = None
        elif tag == "tr" and self.row is not None:
            self.table.append(self.row)
            self.row = None
        elif tag == "table":
            self.table = None


def test_html_is_one_small_file_with_the_per_api_table(run_dir, tmp_path):
    page = tmp_path / "report.html"
    report("--html", page, run_dir)
    assert page.stat().st_size < 2 << 20
    text = page.read_text()
    parsed = Tables()
    parsed.feed(text)
    assert parsed.external == []  # no scripts, styles or images from anywhere
    header, *body = parsed.tables["api-table"]
    assert header[:5] == ["api", "calls", "errors", "total ms", "self ms"]
    shown = {r[0]: r for r in body}
    table = list(csv.DictReader(report("--format", "csv", run_dir).stdout.splitlines()))
    assert len(shown) == len(table)
    for row in table:
        cells = shown[row["api"]]
        assert cells[1] == row["calls"] and cells[2] == row["errors"]
        assert cells[3] == f"{int(row['total_ns']) / 1e6:.3f}" and cells[4] == f"{int(row['self_ns']) / 1e6:.3f}"
    # The summary: what the manifest says, and the steps of the records.
    start = text.index('<section id="summary">')   # (the findings' section comes before it)
    summary = text[start:text.index("</section>", start)]
    assert f"<b>{torch.__version__}</b><span>torch</span>" in summary
    assert f"<b>{socket.gethostname()}</b><span>host</span>" in summary
    assert "<b>8</b><span>steps</span>" in summary
    assert f"<b>{len(records(run_dir))}</b><span>records read</span>" in summary
    assert '<svg xmlns="http://www.w3.org/2000/svg" id="tw-flame"' in text
    assert len(re.findall(r"<rect [^>]*><title>step \d+:", text)) == 8  # one bar per step
    modules = {r[0]: r for r in parsed.tables["module-table"][1:]}
    assert set(modules) == {"Sequential", "Sequential.0", "Sequential.0.0", "Sequential.0.1", "Sequential.1"}
    assert all(r[1] == "8" for r in modules.values())


def test_html_compares_processes_and_marks_the_slowest(tmp_path):
    """Two processes (two runs given together): both listed, the busiest marked as the slowest."""
    dirs = []
    for steps in (3, 6):
        out = tmp_path / f"steps{steps}"
        code = ("import sys; sys.path.insert(0, %r); import torchwrapper as tw, test_flame; "
                "tw.TorchWrapper({'out_dir': %r, 'format': 'csv'}).start(lambda: test_flame.train(%d))"
                % (os.path.dirname(__file__), str(out), steps))
        subprocess.run([sys.executable, "-c", code], check=True,
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
        dirs.append(out)
    page = tmp_path / "both.html"
    report("--html", page, *dirs)
    parsed = Tables()
    parsed.feed(page.read_text())
    rows = parsed.tables["process-table"][1:]
    busy = defaultdict(int)
    for d in dirs:
        for r in records(d):
            if r["depth"] == 0:
                busy[r["pid"]] += r["cost"]
    assert {r[0] for r in rows} == {f"pid {pid}" for pid in busy}
    slowest = [row for cls, row in parsed.classes if cls == "slowest"]
    assert len(slowest) == 1 and slowest[0][0] == f"pid {max(busy, key=busy.get)}"
    assert slowest[0][3] == f"{max(busy.values()) / 1e6:.3f}"


def test_html_stays_small_for_a_run_with_many_apis_and_stacks(tmp_path):
    """Thousands of APIs and deep, varied stacks: the page keeps the largest, within 2 MB."""
    out = tmp_path / "wide"
    out.mkdir()
    lines = ["call_id,api,start_ns,cost_ns,self_ns,gpu_ns,pid,tid,depth,parent_id,error,args,module,step"]
    call_id = 0
    for outer in range(3000):  # each outermost call holds a chain of 6 calls of distinct APIs
        chain = []
        for depth in range(6):
            call_id += 1
            chain.append(call_id)
        for depth in reversed(range(6)):
            api = f"user.pkg{outer % 97}.mod{depth}.function_with_a_long_name_{(outer * 7 + depth) % 4000}"
            parent = chain[depth - 1] if depth else 0
            lines.append(f"{chain[depth]},{api},{outer * 1000 + depth},{600 - depth * 100},100,0,1,1,{depth},"
                         f"{parent},0,,,{outer}")
    (out / "a.csv").write_text("\n".join(lines) + "\n")
    page, svg = tmp_path / "wide.html", tmp_path / "wide.svg"
    report("--html", page, "--flamegraph", svg, out)
    assert page.stat().st_size < 2 << 20
    _, frames = svg_frames(svg)
    assert len(frames) > 3000
    parsed = Tables()
    parsed.feed(page.read_text())
    assert 1000 <= len(parsed.tables["api-table"]) - 1 < 4000


def test_bad_values_are_rejected_with_what_is_accepted(run_dir, tmp_path):
    done = report("--folded", "", run_dir, check=False)
    assert done.returncode == 2 and "--folded needs a file name" in done.stderr
    done = report("--by", "module", run_dir, check=False)   # without stacks: the table, a row per module
    assert done.returncode == 0 and done.stdout.startswith("module ")
    done = report("--by", "thread", "--html", tmp_path / "x.html", run_dir, check=False)
    assert done.returncode == 2 and "take --by api (the default) or --by module" in done.stderr
    done = report("--by", "modules", "--folded", tmp_path / "x", run_dir, check=False)
    assert done.returncode == 2 and "--by 'modules' is not accepted: give api, thread, pid, parent, step, site, shape or " \
                                    "module" in done.stderr
    missing = tmp_path / "no" / "such" / "dir" / "x.svg"
    done = report("--flamegraph", missing, run_dir, check=False)
    assert done.returncode == 1 and f"cannot write {missing}: No such file or directory" in done.stderr


def test_html_shows_gpu_time_per_api_from_gpu_records(tmp_path):
    """GPU records (kernels and copies, joined to the calls that launched them) give the GPU
    section; a kernel no call launched is "(not attributed)"."""
    run = tmp_path / "gpu"
    run.mkdir()
    (run / "tw-1-0001.csv").write_text(
        "call_id,api,start_ns,cost_ns,self_ns,gpu_ns,pid,tid,depth,parent_id,error,args\n"
        "2,torch.matmul,1000,500,500,0,42,42,1,1,0,\n"
        "1,torch.nn.Linear.forward,900,800,300,0,42,42,0,0,0,\n")
    (run / "tw-1-0001.gpu.csv").write_text(
        "call_id,api,kind,name,start_ns,end_ns,device,stream,correlation_id,pid\n"
        "2,torch.matmul,kernel,gemm,1200,1450,0,7,5,42\n"
        "2,torch.matmul,memcpy,,1460,1470,0,7,6,42\n"
        "0,,kernel,stray,1500,1600,0,7,7,42\n")
    page = tmp_path / "gpu.html"
    report("--html", page, run)
    parsed = Tables()
    parsed.feed(page.read_text())
    gpu = {r[0]: r for r in parsed.tables["gpu-table"][1:]}
    assert set(gpu) == {"torch.matmul", "(not attributed)"}
    assert gpu["torch.matmul"][1] == f"{260 / 1e6:.3f}" and gpu["(not attributed)"][1] == f"{100 / 1e6:.3f}"
    assert "gpu ms" in parsed.tables["api-table"][0]


def test_site_names_with_separators_and_non_ascii_merge_and_stay_xml(tmp_path):
    """A site whose file name holds ';' and multi-byte characters: one frame however many calls
    (the name is made safe for the folded format once, and found again), and the SVG's cut labels
    keep whole characters (it parses as XML)."""
    source = "def step(torch):\n    for _ in range(300):\n        torch.add(torch.ones(2), 1)\n"
    code = compile(source, "données;é/ünïcödé_" + "é" * 40 + ".py", "exec")
    scope = {}
    exec(code, scope)
    out = tmp_path / "run"
    tw.TorchWrapper({"out_dir": str(out), "format": "csv", "sites": "all"}).start(lambda: scope["step"](torch))
    folded, svg = tmp_path / "s.folded", tmp_path / "s.svg"
    report("--folded", folded, "--flamegraph", svg, out)
    stacks = read_folded(folded)
    add = [s for s in stacks if s.endswith(";torch.add")]
    assert len(add) == 1 and add[0].startswith("données:é/ünïcödé_"), add
    assert sum(stacks.values()) == sum(r["self"] for r in records(out))
    ET.parse(svg)  # well-formed, labels cut at character boundaries
