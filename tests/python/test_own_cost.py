# SPDX-License-Identifier: MIT
"""The profiler's own cost, measured in every run (#58): what the calling threads spent in its code
(one recorded call in 64 measured, the model watch's hooks, the autograd node hooks), the writer's
part, in stats(), the manifest, `run`'s summary, tw-report's tables, --by step and the HTML page.
Sums and counts are checked, never a time against a bound."""
import glob
import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn

import torchwrapper as tw

BUILD = os.environ.get("top_builddir", os.path.join(os.path.dirname(__file__), "..", ".."))
TW_REPORT = os.path.join(BUILD, "tw-report")
STEPS = 40

LOOP = """
import torch, torch.nn as nn
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range({steps}):
    x = torch.randn(8, 16)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def train(steps=STEPS):
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        loss = model(torch.randn(8, 16)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def manifest_of(out):
    (path,) = glob.glob(os.path.join(out, "manifest*.json"))
    with open(path) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("own") / "out")
    with tw.profile(out_dir=out, format="csv", args="summary", aten="backward") as prof:
        train()
    return out, prof.session.stats()


def test_the_manifest_says_what_the_profiler_cost_and_its_parts_add_up(run_dir):
    out, stats = run_dir
    own = manifest_of(out)["own_cost"]
    assert own["total_ns"] == own["calls_ns"] + own["hooks_ns"] + own["nodes_ns"]
    assert own["sample_every"] == 64 and own["samples"] > 0 and own["calls_ns"] > 0
    assert own["run_ns"] > own["total_ns"]
    rows = tw.sql(out, "SELECT count(*) FROM calls WHERE api NOT LIKE 'torch::autograd::%' "
                       "AND (fwd_call_id IS NULL OR fwd_call_id = 0)").fetchall()  # the wrappers' calls
    calls = rows[0][0]
    # The samples stand for the recorded calls up to the last full period of 64.
    assert calls - 64 < own["calls"] <= calls
    writer = manifest_of(out)["writer"]
    assert set(writer) == {"helped", "help_ns", "thread_cpu_ns", "close_ns"}
    assert writer["thread_cpu_ns"] > 0
    # stats() holds the same figures, its rates unrounded (the manifest's have one decimal)
    rates = ("call_ns", "node_ns")
    assert {k: v for k, v in stats["own_cost"].items() if k not in rates} == \
        {k: v for k, v in own.items() if k not in rates}
    assert round(stats["own_cost"]["node_ns"], 1) == own["node_ns"]


def test_every_autograd_node_recorded_is_counted(run_dir):
    out, _ = run_dir
    own = manifest_of(out)["own_cost"]
    nodes = tw.sql(out, "SELECT count(*) FROM calls WHERE api LIKE 'torch::autograd::%' OR fwd_call_id > 0")
    assert own["nodes"] == nodes.fetchall()[0][0] > 0
    assert own["nodes_ns"] > 0 and own["node_ns"] > 0


def test_stats_say_the_cost_so_far_while_recording_and_none_before():
    prof = tw.profile()  # records in memory: no manifest, stats() still say it
    assert prof.session.stats()["own_cost"] is None
    prof.start()
    try:
        train(10)
        during = prof.session.stats()["own_cost"]
        assert during["samples"] > 0 and during["nodes"] == 0  # the node hooks' part once stopped
    finally:
        prof.stop()
    after = prof.session.stats()["own_cost"]
    assert after["samples"] >= during["samples"] and after["nodes"] > 0
    assert after["total_ns"] == after["calls_ns"] + after["hooks_ns"] + after["nodes_ns"]


def test_by_step_gives_each_step_its_part_at_the_measured_rates(run_dir):
    out, _ = run_dir
    own = manifest_of(out)["own_cost"]
    rows = json.loads(subprocess.run([TW_REPORT, out, "--by", "step", "--format", "json"], capture_output=True,
                                     text=True, check=True).stdout)["rows"]
    assert len(rows) >= STEPS
    nodes = dict(tw.sql(out, "SELECT step, count(*) FROM calls WHERE api LIKE 'torch::autograd::%' "
                             "OR fwd_call_id > 0 GROUP BY step").fetchall())
    for row in rows:
        n = nodes.get(int(row["key"]), 0)
        expected = own["call_ns"]["detail"] * (row["calls"] - n) + own["node_ns"] * n
        assert abs(row["own_ns"] - expected) <= 0.5 + 1e-9 * expected, row
    table = subprocess.run([TW_REPORT, out, "--by", "step"], capture_output=True, text=True, check=True).stdout
    assert "own ms" in table.splitlines()[0]
    assert "torchwrapper's own cost: " in table and "autograd nodes" in table


def test_the_html_page_and_every_terminal_table_show_it(run_dir, tmp_path):
    out, _ = run_dir
    page = tmp_path / "page.html"
    subprocess.run([TW_REPORT, out, "--html", str(page)], capture_output=True, check=True)
    html = page.read_text()
    assert 'id="own-cost"' in html and "the profiler&#39;s own cost" in html or "the profiler's own cost" in html
    for by in ("api", "site", "thread"):
        table = subprocess.run([TW_REPORT, out, "--by", by], capture_output=True, text=True, check=True).stdout
        assert "torchwrapper's own cost: " in table, by
        assert "own ms" not in table  # a column of --by step only
    csv = subprocess.run([TW_REPORT, out, "--format", "csv"], capture_output=True, text=True, check=True).stdout
    assert "own cost" not in csv  # machine-readable output stays rows only


def test_run_prints_it_in_its_summary(tmp_path):
    script = tmp_path / "loop.py"
    script.write_text(LOOP.format(steps=20))
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "torchwrapper", "run", "-o", str(out), str(script)],
                          capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stderr.splitlines() if x.startswith("torchwrapper's own cost: "))
    assert "% of the recording" in line and "a call" in line and "writer thread" in line
    assert "; not counted: torch's own code slowed beside it (caches they share)" in line
    own = manifest_of(str(out))["own_cost"]
    assert f"{own['call_ns']['detail']:.0f} ns a call" in line
    # the very line tw-report prints under its tables (one formatter: the figures agree to the digit)
    table = subprocess.run([TW_REPORT, str(out)], capture_output=True, text=True, check=True).stdout
    assert line in table.splitlines()


def test_a_second_session_counts_from_zero(tmp_path):
    firsts = []
    for i in range(2):
        out = str(tmp_path / f"out{i}")
        with tw.profile(out_dir=out, format="csv"):
            train(5 if i == 0 else 20)
        firsts.append(manifest_of(out)["own_cost"])
    assert firsts[1]["nodes"] > firsts[0]["nodes"]
    assert firsts[0]["nodes"] * 3 < firsts[1]["nodes"] < firsts[0]["nodes"] * 5 + 10
