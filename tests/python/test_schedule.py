# SPDX-License-Identifier: MIT
"""Steps and the schedule (issue #24): which steps leave records, what the summary counts, prof.step(),
summary-only output, and the validator's messages. Real training loops, no timing assertions."""
import json
import os
import subprocess
import sys

import pytest
import torch

import torchwrapper as tw

SCHEDULE = {"wait": 5, "warmup": 2, "active": 3, "repeat": 2}
# Steps count from 0: cycles of 5 waiting, 2 warmup and 3 active steps, twice.
ACTIVE_STEPS = [7, 8, 9, 17, 18, 19]


def _train(steps, mark=None):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(4, 8), torch.tensor([0, 1, 0, 1])
    for _ in range(steps):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        if mark is not None:
            mark()
    return [p.detach().clone() for p in model.parameters()]


def _summary_calls(out_dir):
    with open(os.path.join(out_dir, "summary.json")) as f:
        summary = json.load(f)
    apis = summary["apis"] if isinstance(summary, dict) and "apis" in summary else summary
    if isinstance(apis, dict):
        return {name: a["calls"] for name, a in apis.items()}
    return {a["api"]: a["calls"] for a in apis}


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_a_schedule_leaves_records_of_its_active_steps_only(tmp_path, fmt):
    plain, scheduled = str(tmp_path / "plain"), str(tmp_path / "scheduled")
    with tw.profile():
        _train(2)  # first calls of the process (torch's lazy initialization) in neither run
    with tw.profile(out_dir=plain, format=fmt):
        expected = _train(50)
    with tw.profile(out_dir=scheduled, format=fmt, schedule=SCHEDULE, args="summary") as prof:
        params = _train(50)
    assert all(torch.equal(a, b) for a, b in zip(expected, params))
    assert prof.stats()["step"] == 50
    frame = tw.load(scheduled)
    assert sorted(set(frame["step"])) == ACTIVE_STEPS
    # each active step has the whole step: its optimizer step, ending it, and the forward before it
    for step in ACTIVE_STEPS:
        apis = list(frame[frame["step"] == step]["api"])
        assert apis.count("torch.optim.SGD.step") == 1
        assert apis.count("torch.nn.Linear.forward") == 2
    # every step of the plain run is there, counted from 0
    assert sorted(set(tw.load(plain)["step"])) == list(range(51))  # from 0; 50: the calls after the loop
    # the summary counts every call, as the unscheduled run's does
    assert _summary_calls(scheduled) == _summary_calls(plain)
    # argument summaries are made in active steps
    assert (frame["args"] != "").any()


def test_summary_of_active_steps_only(tmp_path):
    out = str(tmp_path / "out")
    with tw.profile(out_dir=out, schedule=dict(SCHEDULE, summary="active")):
        _train(50)
    frame = tw.load(out)
    assert sorted(set(frame["step"])) == ACTIVE_STEPS
    counts = frame.groupby("api", observed=True).size().to_dict()
    assert _summary_calls(out) == counts
    assert counts["torch.optim.SGD.step"] == len(ACTIVE_STEPS)


def _marked_every_other_iteration(out):
    """12 iterations, prof.step() after every second one, steps 3 and 4 recorded. Optimizer steps
    end steps 0 and 1; the first mark, right after the second optimizer step, ends none (step 2 goes
    on); from then on one step per mark, two optimizer steps each."""
    done = []

    def every_other():
        done.append(1)
        if len(done) % 2 == 0:
            prof.step()

    with tw.profile(out_dir=out, schedule={"skip_first": 3, "active": 2, "repeat": 1}) as prof:
        _train(12, mark=every_other)
    return prof


def test_prof_step_overrides_the_optimizer_boundary(tmp_path):
    out = str(tmp_path / "out")
    prof = _marked_every_other_iteration(out)
    frame = tw.load(out)
    assert sorted(set(frame["step"])) == [3, 4]
    for step in (3, 4):
        assert (frame[frame["step"] == step]["api"] == "torch.optim.SGD.step").sum() == 2
    assert prof.stats()["step"] == 7


def test_the_tree_of_a_step_is_the_step_of_the_step_column(tmp_path):
    # Two optimizer steps per marked step, the records of steps 3 and 4 only: tw-report --tree and
    # call_tree(step=) take step 4 from the step column (counting optimizer steps in the files would
    # find a step 4 elsewhere), and --boundary still counts boundary calls.
    out = str(tmp_path / "out")
    prof = _marked_every_other_iteration(out)
    frame = tw.load(out)
    first_of_4 = frame[(frame["step"] == 4) & (frame["depth"] == 0)]["api"].iloc[0]
    tree = subprocess.run([sys.executable, "-m", "torchwrapper", "report", "--tree", "4", out],
                          capture_output=True, text=True, timeout=300)
    assert tree.returncode == 0, tree.stderr
    roots = [line.strip().split()[0] for line in tree.stdout.splitlines() if line.startswith("  ") and
             not line.startswith("    ")]
    assert roots.count("torch.optim.SGD.step") == 2 and roots[0] == first_of_4
    python_roots = [line.strip().split()[0] for line in tw.call_tree(prof, step=4).splitlines()[1:]
                    if not line.startswith("    ")]
    assert python_roots == roots
    by_boundary = subprocess.run([sys.executable, "-m", "torchwrapper", "report", "--tree", "4", "--boundary",
                                  "torch.optim.*.step", out], capture_output=True, text=True, timeout=300)
    # the files hold 4 optimizer steps (those of steps 3 and 4): counted, there is no 5th
    assert by_boundary.returncode != 0 and "4 step(s)" in by_boundary.stderr


def test_marking_each_iteration_counts_as_optimizer_steps_do(tmp_path):
    out = str(tmp_path / "out")
    with tw.profile(out_dir=out, schedule={"wait": 1, "active": 2, "repeat": 1}) as prof:
        _train(10, mark=lambda: prof.step())
    frame = tw.load(out)
    assert sorted(set(frame["step"])) == [1, 2]
    assert (frame["api"] == "torch.optim.SGD.step").sum() == 2
    assert prof.stats()["step"] == 10


def test_torchwrapper_step_marks_steps_of_the_active_session(tmp_path):
    assert tw.step() == -1  # no session: nothing to do
    out = str(tmp_path / "out")
    with tw.profile(out_dir=out) as prof:
        torch.ones(2).add(1)
        assert tw.step() == 1   # no optimizer step before: the first mark ends step 0
        torch.ones(2).add(1)
        _train(3)  # optimizer steps no longer end steps
        assert prof.stats()["step"] == 1
    assert sorted(set(tw.load(out)["step"])) == [0, 1]


def test_summary_only_writes_no_record_file(tmp_path):
    out = str(tmp_path / "out")
    with tw.profile(out_dir=out, records="summary") as prof:
        _train(5)
    assert prof.files == []
    assert sorted(n for n in os.listdir(out) if n != "modules.json") == ["manifest.json", "summary.json"]
    assert _summary_calls(out)["torch.optim.SGD.step"] == 5
    with open(os.path.join(out, "manifest.json")) as f:
        assert json.load(f)["config"]["records"] == "summary"


def test_in_memory_records_follow_the_schedule():
    with tw.profile(schedule={"skip_first": 2, "active": 1, "repeat": 2}) as prof:
        _train(6)
    assert sorted({r.step for r in prof.records()}) == [2, 3]
    # Memory holds the recorded steps' records only (nothing else needs the others' calls).
    assert prof.stats()["records"] == len(prof.records())


@pytest.mark.parametrize("schedule, message", [
    ({"wait": 5}, "config key 'schedule', key 'active': nothing is not accepted"),
    ({"active": 0}, "key 'active': 0 is not accepted: give a whole number of steps, 1 or more"),
    ({"active": 2, "warmup": -1}, "key 'warmup': -1 is not accepted"),
    ({"active": 2, "repaet": 1}, "unknown key 'repaet'"),
    ({"active": 2, "summary": "none"}, "key 'summary': \"none\" is not accepted"),
    ("often", "config key 'schedule': \"often\" is not accepted"),
])
def test_bad_schedules_name_the_key(schedule, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        tw.profile(schedule=schedule)
    with pytest.raises(ValueError, match="config key 'records': \"none\""):
        tw.profile(records="none")


def test_run_sets_schedule_keys(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import sys\nsys.path.insert(0, %r)\nimport test_schedule\ntest_schedule._train(12)\n"
                      % os.path.dirname(__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    for extra in (["--set", "schedule.active=2", "--set", "schedule.wait=3"],
                  ["--set", 'schedule={"active": 2, "wait": 3}']):
        out = tmp_path / ("out%d" % len(extra))
        subprocess.run([sys.executable, "-m", "torchwrapper", "run", "--no-report", "-o", str(out), *extra,
                        str(script)], check=True, env=env)
        assert sorted(set(tw.load(str(out))["step"])) == [3, 4, 8, 9]


def test_files_without_the_step_column_still_read(tmp_path):
    """Files written before the step column: load() and the row reader give step -1, tw-report reads them."""
    old_csv = tmp_path / "tw-old-0001.csv"
    old_csv.write_text("call_id,api,start_ns,cost_ns,self_ns,gpu_ns,pid,tid,depth,parent_id,error,args,module\n"
                       '1,torch.add,1000,50,50,0,7,7,0,0,0,,""\n2,torch.mul,2000,60,60,0,7,7,0,0,0,,\n')
    old_json = tmp_path / "tw-old-0002.jsonl"
    old_json.write_text('{"call_id":3,"api":"torch.add","start_ns":3000,"cost_ns":5,"self_ns":5,"gpu_ns":0,"pid":7,'
                        '"tid":7,"depth":0,"parent_id":0,"error":false,"args":"","module":null}\n')
    frame = tw.load(str(tmp_path))
    assert list(frame["step"]) == [-1, -1, -1]
    from torchwrapper._files import iter_rows
    rows = list(iter_rows(str(old_csv)))
    assert [r.module for r in rows] == ["", None] and [r.step for r in rows] == [-1, -1]
    report = subprocess.run([sys.executable, "-m", "torchwrapper", "report", "--format", "csv", str(tmp_path)],
                            capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert report.returncode == 0, report.stderr
    assert "torch.add" in report.stdout and "torch.mul" in report.stdout


def test_watch_streams_follow_the_schedule(tmp_path):
    """Tensor statistics and parameter updates are written for the recorded steps only: each row
    names a call whose record is in the files (of active steps), and every active step has rows."""
    out = str(tmp_path / "out")
    with tw.profile(out_dir=out, schedule={"wait": 3, "active": 2, "repeat": 1}, tensor_stats=True,
                    track=["parameters"]):
        _train(8)
    records = tw.load(out)
    assert sorted(records["step"].unique()) == [3, 4]
    recorded = set(records["call_id"])
    stats, updates = tw.load_stats(out), tw.load_updates(out)
    assert len(stats) > 0 and set(stats["call_id"]) <= recorded
    assert len(updates) > 0 and set(updates["call_id"]) <= recorded
    step_of = dict(zip(records["call_id"], records["step"]))
    assert {step_of[c] for c in updates["call_id"]} == {3, 4}
    assert {step_of[c] for c in stats["call_id"]} == {3, 4}
