# SPDX-License-Identifier: MIT
"""tw-report --ranks and torchwrapper.ranks() on real torchrun DDP runs (4 ranks, gloo, CPU), and the
alignment of the ranks' clocks (clock_sync in the manifests) with an offset planted on one rank.

The runs: DDP training in which rank 2 does extra work in one API every step (a larger
torch.matmul, or torch.cumsum), and the same training with no extra work. The report must name
rank 2, its steps and the planted API first, name no one in the run without it, and never blame the
other ranks for the time they wait for rank 2 in DDP's allreduce."""
import csv
import itertools
import json
import math
import os
import random
import statistics
import subprocess
import sys

import pytest

import torchwrapper as tw
from torchwrapper._files import iter_rows, record_files

from conftest import PTH, STAGE

BUILD = os.environ.get("top_builddir", os.path.join(os.path.dirname(__file__), "..", ".."))
TW_REPORT = os.path.join(BUILD, "tw-report")

TRAIN = """
import os, sys
if os.environ.get("PLANT_CLOCK_RANK") == os.environ["RANK"]:
    # before torch is imported: the profiler starts (and reads its clock) at that import
    os.environ["TORCHWRAPPER_DEBUG_CLOCK_OFFSET_NS"] = "37000000"
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

torch.set_num_threads(1)
dist.init_process_group("gloo")
rank = dist.get_rank()
plant = os.environ.get("PLANT", "")
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(),
                                                    torch.nn.Linear(32, 4)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
big = torch.randn(192, 192)
x = torch.randn(16, 32)
for step in range(int(os.environ.get("STEPS", "20"))):
    opt.zero_grad()
    if rank == 2 and plant == "matmul":
        for _ in range(12):
            torch.matmul(big, big)
    if rank == 2 and plant == "cumsum":
        for _ in range(6):
            torch.cumsum(big.repeat(4, 4), 0)
    loss = model(x).pow(2).mean()
    loss.backward()          # DDP's allreduce: the other ranks wait here for rank 2
    opt.step()
for _ in range(int(os.environ.get("BARRIERS", "0"))):
    dist.barrier()
dist.destroy_process_group()
"""


def torchrun(directory, outside=False, **variables):
    """Runs TRAIN under torchrun with 4 ranks, profiled by `python -m torchwrapper run` in each rank (or,
    outside: run around torchrun, the ranks profiled from their first import of torch); the output dir."""
    directory.mkdir()
    (directory / "site").mkdir()
    (directory / "site" / "sitecustomize.py").write_text(f"import site\nsite.addsitedir({STAGE!r})\n")
    (directory / "train.py").write_text(TRAIN)
    assert os.path.exists(PTH)
    environ = dict(os.environ, PYTHONPATH=os.pathsep.join([str(directory / "site")] + sys.path), OMP_NUM_THREADS="1",
                   **variables)
    for key in [k for k in environ if k.startswith("TORCHWRAPPER_") or k in ("RANK", "WORLD_SIZE")]:
        del environ[key]
    # --standalone: the rendezvous store listens on a port the kernel picks as it binds (a port found
    # free beforehand could be taken by another test's job before torchrun binds it)
    launch = ["-m", "torch.distributed.run", "--nproc_per_node=4", "--standalone"]
    ours = ["-m", "torchwrapper", "run", "--no-report", "-o", "out", "--set", "format=csv"]
    args = [sys.executable] + (ours + launch if outside else launch + ours) + ["train.py"]
    result = subprocess.run(args, cwd=directory, env=environ, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return directory / "out"


STEPS = 40


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The three runs, made once for the module's tests (each takes ~25 s on two cores)."""
    base = tmp_path_factory.mktemp("ranks")
    # 40 steps: the paired test's p value can then fall far below --alpha, so that a few steps that a
    # loaded machine turns the other way (4 ranks on 2 CPUs beside other work) do not hide rank 2
    return {plant: torchrun(base / plant, PLANT=plant, STEPS=str(STEPS)) for plant in ("matmul", "cumsum", "none")}


@pytest.fixture(scope="module")
def short_runs(tmp_path_factory):
    """The matmul run with 10 steps (8 or 9 compared: too few for p < 0.001), and 15."""
    base = tmp_path_factory.mktemp("short")
    return {steps: torchrun(base / f"matmul{steps}", PLANT="matmul", STEPS=str(steps)) for steps in (10, 15)}


def report(*args):
    result = subprocess.run([TW_REPORT, *map(str, args)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("plant, api", [("matmul", "torch.matmul"), ("cumsum", "torch.cumsum")])
def test_ranks_names_the_straggler_its_steps_and_the_planted_api_first(runs, plant, api):
    frame = tw.ranks(runs[plant])
    ranks = {r["rank"]: r for r in frame.attrs["ranks"]}
    assert sorted(ranks) == [0, 1, 2, 3]
    assert [r["rank"] for r in frame.attrs["ranks"] if r["straggler"]] == [2]
    assert frame.attrs["ranks"][0]["rank"] == 2  # the most often slowest first
    assert ranks[2]["apis"][0]["api"] == api, ranks[2]["apis"]
    # the steps: rank 2 is the slowest of most steps compared (from 1: the last step holds what follows
    # the loop)
    steps = frame.attrs["steps"]
    assert [s["step"] for s in steps] == list(range(1, STEPS))
    assert sum(s["slowest_rank"] == 2 for s in steps) > len(steps) * 3 // 4
    assert len(frame) == 4 * len(steps)
    assert (frame.groupby("step").slowest.sum() == 1).all()
    # the others wait for it in DDP's allreduce (inside backward), shown as wait, blamed on no one: step by
    # step, each waits longer than rank 2. Compared within each step, not as each rank's median over the
    # steps: a loaded machine's delays (ms, against rank 2's ~1 ms of extra work) fall on a step's ranks
    # alike and cancel in the difference, while the medians of different steps' waits had rank 0's below
    # rank 2's (4.76 ms against 4.82) with rank 0 waiting longer in 30 of 39 steps, by a median 0.93 ms.
    wait = frame.pivot(index="step", columns="rank", values="wait_ns")
    for other in (0, 1, 3):
        assert not ranks[other]["straggler"] and ranks[other]["apis"] == []
        assert (wait[other] - wait[2]).median() > 0, (wait / 1e6).round(2).to_string()
    assert not any(a["api"].startswith("torch.distributed") or "backward" in a["api"] for a in ranks[2]["apis"])
    text = report("--ranks", runs[plant])
    assert "Rank 2 is slower than the others beyond noise" in text
    explained = text.split("Rank 2 is slower")[1].splitlines()
    assert explained[2].split()[0] == api  # the header, then the planted API first
    assert "Rank 0 is" not in text and "Rank 1 is" not in text and "Rank 3 is" not in text


@pytest.mark.parametrize("steps", [10, 15])
def test_a_short_real_run_names_the_straggler_and_its_api_by_default(short_runs, steps):
    # 15 steps: rank 2 slowest in all 13 or 14 compared, a straggler (the normal approximation said
    # p 0.0017 and named no one); 10 steps: p cannot reach 0.001, rank 2 is a likely straggler with
    # the steps it needs. A loaded machine may turn a step or two the other way: either verdict, but
    # rank 2 and torch.matmul, and no one else.
    ranks = tw.ranks(short_runs[steps]).attrs["ranks"]
    named = [(r["rank"], "straggler" if r["straggler"] else "likely") for r in ranks if r["straggler"] or r["likely"]]
    assert [rank for rank, _ in named] == [2], named
    rank2 = next(r for r in ranks if r["rank"] == 2)
    assert rank2["apis"][0]["api"] == "torch.matmul"
    if steps == 10:
        assert named == [(2, "likely")] and rank2["more_steps"] > 0
    text = report("--ranks", short_runs[steps])
    assert "Rank 2 is slower than the others beyond noise" in text or "Likely straggler: rank 2 slowest in" in text


def test_the_same_run_without_planted_work_names_no_straggler(runs):
    frame = tw.ranks(runs["none"])
    assert sorted(r["rank"] for r in frame.attrs["ranks"]) == [0, 1, 2, 3]
    assert [r["rank"] for r in frame.attrs["ranks"] if r["straggler"]] == []
    assert "No rank is slower than the others beyond noise" in report("--ranks", runs["none"])


def wilcoxon_p(x, y):
    """The two-sided signed-rank p value, normal approximation with tie and continuity corrections,
    zero differences dropped: written here apart from the C code, to check it."""
    d = [a - b for a, b in zip(x, y) if a != b]
    order = sorted(range(len(d)), key=lambda i: abs(d[i]))
    ranks = [0.0] * len(d)
    ties = 0.0
    i = 0
    while i < len(order):
        j = i
        while j < len(order) and abs(d[order[j]]) == abs(d[order[i]]):
            j += 1
        for k in range(i, j):
            ranks[order[k]] = (i + 1 + j) / 2
        ties += (j - i) ** 3 - (j - i)
        i = j
    n = len(d)
    if n == 0:
        return 1.0
    w = sum(r for r, v in zip(ranks, d) if v > 0)
    sd = math.sqrt(n * (n + 1) * (2 * n + 1) / 24 - ties / 48)
    return min(1.0, math.erfc(max(abs(w - n * (n + 1) / 4) - 0.5, 0) / sd / math.sqrt(2)))


def exact_wilcoxon_p(x, y):
    """The two-sided signed-rank p value over all 2^m sign patterns of the m differences (mean ranks
    for ties, zero differences dropped), counted one by one: apart from the C code's recurrence."""
    d = [a - b for a, b in zip(x, y) if a != b]
    size = sorted(abs(v) for v in d)
    rank = {v: (size.index(v) + 1 + len(size) - size[::-1].index(v)) / 2 for v in size}
    ranks = [rank[abs(v)] for v in d]
    total = sum(ranks)
    w = sum(r for r, v in zip(ranks, d) if v > 0)
    far = max(w, total - w)
    extreme = sum(sum(r for r, s in zip(ranks, signs) if s) >= far for signs in itertools.product((0, 1), repeat=len(d)))
    return min(1.0, 2 * extreme / 2 ** len(d)) if d else 1.0


def test_each_ranks_p_value_is_the_signed_rank_test_of_its_busy_time_against_the_others_median(runs):
    frame = tw.ranks(runs["matmul"])
    busy = frame.pivot(index="step", columns="rank", values="busy_ns")
    for r in frame.attrs["ranks"]:
        others = busy.drop(columns=r["rank"]).median(axis=1)
        expected = wilcoxon_p(list(busy[r["rank"]]), list(others))
        assert r["p_value"] == pytest.approx(expected, rel=1e-5), r["rank"]


def test_ranks_output_is_the_same_on_one_and_two_threads(runs):
    for fmt in ("table", "json", "csv"):
        one = report("--ranks", "-j", 1, "--format", fmt, runs["matmul"])
        two = report("--ranks", "-j", 2, "--format", fmt, runs["matmul"])
        assert one == two, fmt


def test_ranks_in_the_html_page(runs, tmp_path):
    page = tmp_path / "report.html"
    text = report("--ranks", "--html", page, runs["cumsum"])
    assert "Rank 2 is slower" in text and not text.startswith("api")  # the ranks, not the per-API table
    html = page.read_text()
    assert '<section id="ranks">' in html and "Rank 2: its extra time by API" in html
    assert html.index("torch.cumsum") < html.index('<section id="modules">')


def test_ranks_of_files_without_ranks_or_steps_say_what_is_missing(tmp_path):
    (tmp_path / "old.csv").write_text("call_id,api,start_ns,cost_ns,self_ns,gpu_ns,pid,tid,depth,parent_id,error,args\n"
                                      "1,torch.add,100,10,10,0,7,7,0,0,0,\n")
    result = subprocess.run([TW_REPORT, "--ranks", tmp_path / "old.csv"], capture_output=True, text=True)
    assert result.returncode == 1 and "carry no step" in result.stderr
    result = subprocess.run([TW_REPORT, "--ranks", "--tree", "1", tmp_path / "old.csv"], capture_output=True, text=True)
    assert result.returncode == 2 and "--ranks" in result.stderr and "--tree" in result.stderr


def test_a_planted_clock_offset_is_measured_back_and_removed_from_the_trace(tmp_path):
    # outside: each rank's profiling starts at its first import of torch, after train.py planted the offset
    out = torchrun(tmp_path / "clock", outside=True, PLANT="none", STEPS="3", BARRIERS="5", PLANT_CLOCK_RANK="1")
    manifests = {}
    for name in os.listdir(out):
        if name.startswith("manifest"):
            with open(out / name) as f:
                m = json.load(f)
            if "rank" in m:  # not the launcher's
                manifests[m["rank"]] = m
    assert sorted(manifests) == [0, 1, 2, 3]
    planted = -37_000_000  # rank 0's clock less rank 1's
    for rank, m in manifests.items():
        sync = m["clock_sync"]
        assert set(sync) == {"start", "stop"}, sync  # after init_process_group, before destroy_process_group
        for when in ("start", "stop"):
            expected = planted if rank == 1 else 0
            # within the stated error; 50 us more for the processes' own clocks (each anchors its tick
            # counter to CLOCK_REALTIME by itself, to within microseconds)
            assert abs(sync[when]["offset_ns"] - expected) <= sync[when]["error_ns"] + 50_000, (rank, sync)
    trace_path = tmp_path / "trace.json"
    report("--trace", trace_path, out)
    with open(trace_path) as f:
        trace = json.load(f)
    pids = {m["pid"]: rank for rank, m in manifests.items()}
    origin = trace["otherData"]["origin_ns"]
    assert trace["otherData"]["clock_error_ns"] == max(min(s["error_ns"] for s in m["clock_sync"].values())
                                                       for m in manifests.values())
    # each barrier's end, per rank, in ns after the origin: in the records rank 1's are ~37 ms late;
    # in the trace, aligned
    recorded, traced = {}, {}
    for path in record_files(str(out)):
        for row in iter_rows(path):
            if row.api == "torch.distributed.barrier" and row.pid in pids:
                recorded.setdefault(pids[row.pid], []).append(row.start_ns + row.cost_ns - origin)
    for event in trace["traceEvents"]:
        if event.get("ph") == "X" and event["name"] == "torch.distributed.barrier" and event["pid"] in pids:
            traced.setdefault(pids[event["pid"]], []).append(round((event["ts"] + event["dur"]) * 1000))
    offset = next(min(m["clock_sync"].values(), key=lambda s: s["error_ns"])["offset_ns"]
                  for r, m in manifests.items() if r == 1)
    for rank in (0, 1, 2, 3):
        assert len(recorded[rank]) == len(traced[rank]) == 5
    # exactly the measured offset is removed from rank 1's times (the trace's microseconds are exact to 1 ns)
    assert [t - r for t, r in zip(sorted(traced[1]), sorted(recorded[1]))] == [offset] * 5
    raw = statistics.median(b - a for a, b in zip(sorted(recorded[0]), sorted(recorded[1])))
    aligned = statistics.median(b - a for a, b in zip(sorted(traced[0]), sorted(traced[1])))
    assert raw > 37_000_000 / 2 > abs(aligned)  # ranks leave a barrier together
    text = report("--ranks", "--steps", "0:2", out)
    assert "Clocks: 4 of 4 ranks' times moved to rank 0's clock, within" in text


@pytest.mark.parametrize("plant, api", [("matmul", "torch.matmul"), ("none", None)])
def test_a_straggler_is_a_finding(runs, plant, api):
    found = [f for f in tw.findings(runs[plant]) if f["kind"] == "straggler"]
    if api is None:
        assert found == []
        return
    (finding,) = found
    assert finding["where"][:2] == ["rank 2", api]
    assert finding["evidence"]["slowest_steps"] > finding["evidence"]["steps"] * 3 // 4
    assert "rank 2 is slower" in finding["message"] and api in finding["message"]


# ---- short runs: record files written here, as the writer writes them ---------------------------------

HEADER = ["call_id", "api", "start_ns", "cost_ns", "self_ns", "gpu_ns", "pid", "tid", "depth", "parent_id", "error",
          "args", "module", "step", "site", "fwd_call_id", "fwd_api", "flops", "flops_total", "mem_alloc", "mem_self",
          "mem_freed", "mem_peak"]
STEP_NS = 5_300_000


def short_run(directory, steps, slow=2, extra_ns=1_450_000, seed=0):
    """The files of 4 ranks that each run steps steps of ~0.65 ms of torch.nn.functional.linear and
    wait for the slowest in torch.distributed.all_reduce until 5.3 ms; rank slow (None: none) also runs
    extra_ns of torch.matmul a step. The directory."""
    directory.mkdir()
    rng = random.Random(seed)
    origin = 1_800_000_000_000_000_000
    rows = {rank: [] for rank in range(4)}
    for step in range(steps):
        start = origin + step * 10_000_000
        for rank in range(4):
            calls = [("torch.nn.functional.linear", int(650_000 * rng.uniform(0.9, 1.1)))]
            if rank == slow:
                calls.append(("torch.matmul", extra_ns))
            t = start
            for api, ns in calls:
                rows[rank].append((api, t, ns, step))
                t += ns
            rows[rank].append(("torch.distributed.all_reduce", t, start + STEP_NS - t, step))
    for rank, calls in rows.items():
        pid = 1000 + rank
        name = f"tw-20270101-000000.000000000-rank{rank}-{pid}-0001.csv"
        with open(directory / name, "w", newline="") as f:
            writer = csv.writer(f, lineterminator="\n")
            writer.writerow(HEADER)
            for call_id, (api, start, ns, step) in enumerate(calls, 1):
                writer.writerow([call_id, api, start, ns, ns, 0, pid, pid, 0, 0, 0, "", "", step, 0, 0] + [""] * 7)
        (directory / f"manifest-{pid}.json").write_text(json.dumps({
            "manifest_version": 1, "format": "csv", "pid": pid, "rank": rank, "start_ns": origin,
            "files": [{"name": name, "kind": "calls", "records": len(calls)}]}))
    return directory


def test_a_rank_slowest_in_every_step_of_a_short_run_is_named_by_default(tmp_path):
    # 15 steps, 13 compared: rank 2 slowest in all, busy ~2.1 ms against ~0.65 ms (+27% of a 5.3 ms
    # step). The normal approximation gave p 0.0017, over the default --alpha 0.001: "no rank is
    # slower"; exactly, only all positive and all negative are as extreme: p = 2 / 2^13
    run = short_run(tmp_path / "short", 15)
    frame = tw.ranks(run)
    ranks = {r["rank"]: r for r in frame.attrs["ranks"]}
    assert [r["rank"] for r in frame.attrs["ranks"] if r["straggler"]] == [2]
    assert ranks[2]["slowest_steps"] == 13 and ranks[2]["p_value"] == pytest.approx(2 / 2 ** 13, rel=1e-5)
    assert 25 < ranks[2]["change_pct"] < 30
    assert [a["api"] for a in ranks[2]["apis"]] == ["torch.matmul"]
    assert not any(r["likely"] for r in frame.attrs["ranks"])
    text = report("--ranks", run)
    assert "Rank 2 is slower than the others beyond noise" in text and "No rank is slower" not in text
    assert text.split("Rank 2 is slower")[1].splitlines()[2].split()[0] == "torch.matmul"


@pytest.mark.parametrize("steps", [6, 12, 15])
def test_each_ranks_p_value_on_a_short_run_is_the_exact_signed_rank_distribution(tmp_path, steps):
    run = short_run(tmp_path / "short", steps, extra_ns=60_000)  # small: signs of both kinds
    frame = tw.ranks(run)
    busy = frame.pivot(index="step", columns="rank", values="busy_ns")
    for r in frame.attrs["ranks"]:
        others = busy.drop(columns=r["rank"]).median(axis=1)
        expected = exact_wilcoxon_p(list(busy[r["rank"]]), list(others))
        assert r["p_value"] == pytest.approx(expected, rel=1e-5), r["rank"]  # JSON's 6 digits


def steps_for_significance(x, y, alpha=0.001):
    """The fewest steps at which the exact test of the steps repeated in their order passes alpha."""
    m = len(x) + 1
    while exact_wilcoxon_p([x[k % len(x)] for k in range(m)], [y[k % len(y)] for k in range(m)]) >= alpha:
        m += 1
    return m


@pytest.mark.parametrize("steps", [6, 10])
def test_too_few_steps_for_significance_name_a_likely_straggler_and_the_steps_it_needs(tmp_path, steps):
    compared = steps - 2
    run = short_run(tmp_path / "short", steps)
    frame = tw.ranks(run)
    ranks = {r["rank"]: r for r in frame.attrs["ranks"]}
    assert not any(r["straggler"] for r in frame.attrs["ranks"])
    assert [r["rank"] for r in frame.attrs["ranks"] if r["likely"]] == [2]
    # slowest in every step: 4 ranks, each slowest of a step with probability 1/4 by chance
    assert ranks[2]["sign_p"] == pytest.approx(4 * 0.25 ** compared, rel=1e-5)
    busy = frame.pivot(index="step", columns="rank", values="busy_ns")
    x, y = list(busy[2]), list(busy.drop(columns=2).median(axis=1))
    needed = steps_for_significance(x, y)
    assert needed == 11  # all of one sign: 2 / 2^11 < 0.001
    assert ranks[2]["more_steps"] == needed - compared
    assert ranks[0]["more_steps"] is None
    text = report("--ranks", run)
    assert "No rank is slower than the others beyond noise" in text
    assert (f"Likely straggler: rank 2 slowest in {compared} of {compared} steps; about {needed - compared} more "
            f"steps for significance") in text
    if compared >= 6:  # 2 / 2^6 < 0.05: torch.matmul alone can reach the likely level
        assert [a["api"] for a in ranks[2]["apis"]] == ["torch.matmul"]
        assert text.split("Likely straggler")[1].splitlines()[2].split()[0] == "torch.matmul"
    else:
        assert ranks[2]["apis"] == [] and "no API below p 0.05 on its own yet" in text
    # and that many more steps of the same kind make it a straggler
    longer = short_run(tmp_path / "longer", needed + 2)
    assert [r["rank"] for r in tw.ranks(longer).attrs["ranks"] if r["straggler"]] == [2]
    html = tmp_path / "page.html"
    report("--ranks", "--html", html, run)
    assert "Likely straggler: rank 2 slowest in" in html.read_text()


def test_a_short_run_without_a_slow_rank_names_no_one(tmp_path):
    for steps in (6, 15):
        run = short_run(tmp_path / f"even{steps}", steps, slow=None)
        ranks = tw.ranks(run).attrs["ranks"]
        assert not any(r["straggler"] or r["likely"] for r in ranks)
        text = report("--ranks", run)
        assert "No rank is slower than the others beyond noise" in text and "Likely" not in text


def test_the_page_steps_are_the_ranks_not_a_dataloaders_workers(runs, tmp_path):
    """A DataLoader's worker processes record too, each in the one step it was forked in: the page's steps
    were the mean over every process (a 15 ms step shown as 0.4 ms beside sixteen workers). The step times
    are the processes that step: the training process's here, the mean of the four ranks' in a DDP run."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    out = tmp_path / "out"
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    model = torch.nn.Linear(8, 1)
    with tw.profile(out_dir=str(out)):
        for epoch in range(3):
            for x, y in DataLoader(data, batch_size=16, num_workers=1):
                torch.nn.functional.mse_loss(model(x), y).backward()
                tw.step()
    by_pid = {}
    for path in record_files(str(out)):
        for row in iter_rows(path):
            by_pid.setdefault(row.pid, []).append(row)
    assert len(by_pid) >= 2, sorted(by_pid)   # the workers recorded
    main = {pid for pid, rows in by_pid.items() if len({r.step for r in rows}) > 1}
    assert main == {os.getpid()}
    steps = {}
    for row in by_pid[os.getpid()]:
        if (row.depth == 0 or row.parent_id == 0) and row.step >= 0:   # (as the page counts them)
            steps[row.step] = steps.get(row.step, 0) + row.cost_ns
    spans = [steps.get(s, 0) for s in range(max(steps) + 1)]
    median = sorted(spans)[len(spans) // 2]
    page = tmp_path / "page.html"
    report("--html", page, out)
    html = page.read_text()
    assert f"outermost calls. Median step: {median / 1e6:.3f} ms" in html
    ranks_page = tmp_path / "ranks.html"
    report("--html", ranks_page, runs["none"])
    assert "the mean over the processes" in ranks_page.read_text()
