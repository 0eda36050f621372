# SPDX-License-Identifier: MIT
"""Config detail (#58): under TorchWrapper's and `run`'s defaults ("sampled") the costly detail
(argument summaries, autograd nodes, FLOPs) is in steps 0-9 and one in 20 after, while every call is
still timed in every step; what a user sets (args, aten, flops) keeps every step; the tables, the
findings and the page still work on such a run and say so."""
import glob
import json
import os
import subprocess

import pytest
import torch
import torch.nn as nn

import torchwrapper as tw

BUILD = os.environ.get("top_builddir", os.path.join(os.path.dirname(__file__), "..", ".."))
TW_REPORT = os.path.join(BUILD, "tw-report")
STEPS = 45
DETAIL_STEPS = set(range(10)) | {20, 40}


def train(steps=STEPS):
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        loss = model(torch.randn(8, 16)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def profiled(out, config):
    wrapper = tw.TorchWrapper(dict({"out_dir": out, "format": "csv"}, **config))
    wrapper.start(train)
    return wrapper


def steps_with(out, where):
    return {s for (s,) in tw.sql(out, f"SELECT DISTINCT step FROM calls WHERE {where}").fetchall()}


NODE = "(api LIKE 'torch::autograd::%' OR fwd_call_id > 0)"
SUMMARY = "(args IS NOT NULL AND args <> '')"


@pytest.fixture(scope="module")
def sampled(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("sampled") / "out")
    wrapper = profiled(out, {})
    return out, wrapper


def test_the_defaults_sample_the_detail_and_time_every_call(sampled):
    out, wrapper = sampled
    assert wrapper.config["detail"] == "sampled"
    every = steps_with(out, "api = 'torch.nn.functional.linear'")
    assert every == set(range(STEPS))                               # every call, every step
    assert steps_with(out, SUMMARY) == DETAIL_STEPS
    assert steps_with(out, NODE) == DETAIL_STEPS
    assert steps_with(out, "flops > 0") == DETAIL_STEPS
    (manifest,) = glob.glob(os.path.join(out, "manifest*.json"))
    with open(manifest) as f:
        m = json.load(f)
    assert m["detail"] == {"sampled": True, "first": 10, "every": 20}
    rates = m["own_cost"]["call_ns"]
    assert rates["detail"] > 0 and rates["plain"] > 0             # both kinds of step measured
    # --by step charges each step at the rate of its kind: the steps the recorder gave the detail
    rows = json.loads(subprocess.run([TW_REPORT, out, "--by", "step", "--format", "json"], capture_output=True,
                                     text=True, check=True).stdout)["rows"]
    nodes = dict(tw.sql(out, f"SELECT step, count(*) FROM calls WHERE {NODE} GROUP BY step").fetchall())
    for row in rows:
        step = int(row["key"])
        n = nodes.get(step, 0)
        rate = rates["detail"] if step in DETAIL_STEPS else rates["plain"]
        expected = rate * (row["calls"] - n) + m["own_cost"]["node_ns"] * n
        assert abs(row["own_ns"] - expected) <= 0.5 + 1e-9 * expected, row


@pytest.mark.parametrize("config", [{"args": "summary"}, {"aten": "backward"}, {"flops": True}, {"detail": "all"}])
def test_what_a_user_sets_keeps_every_step(tmp_path, config):
    out = str(tmp_path / "out")
    wrapper = profiled(out, config)
    assert wrapper.config["detail"] == "all"
    assert steps_with(out, NODE) == set(range(STEPS))
    if config.get("args") == "summary" or "detail" in config:
        assert steps_with(out, SUMMARY) == set(range(STEPS))


def test_a_bad_value_names_the_key_and_what_is_accepted():
    with pytest.raises(ValueError, match="detail") as error:
        tw.TorchWrapper({"detail": "some"})
    assert "sampled" in str(error.value) and "all" in str(error.value)


def test_every_table_and_the_findings_work_and_say_the_detail_was_sampled(sampled, tmp_path):
    out, _ = sampled
    for by in ("api", "step", "shape", "site", "module", "thread"):
        table = subprocess.run([TW_REPORT, out, "--by", by], capture_output=True, text=True, check=True).stdout
        assert "one in 20 after (detail \"sampled\"" in table, by
    shapes = subprocess.run([TW_REPORT, out, "--by", "shape", "--format", "json"], capture_output=True, text=True,
                            check=True).stdout
    keys = [row["key"] for row in json.loads(shapes)["rows"]]
    assert any(k.startswith("torch.nn.functional.linear [") for k in keys)   # shapes from the detail steps
    api = json.loads(subprocess.run([TW_REPORT, out, "--format", "json"], capture_output=True, text=True,
                                    check=True).stdout)["rows"]
    linear = next(r for r in api if r["key"] == "torch.nn.functional.linear")
    assert linear["calls"] == 2 * STEPS and linear["bwd_ns"] > 0   # timed in every step, nodes charged
    findings = tw._findings.findings_output(out, "json")
    assert findings["anatomy"]["step_ms"] > 0
    page = tmp_path / "page.html"
    subprocess.run([TW_REPORT, out, "--html", str(page)], capture_output=True, check=True)
    assert "one in 20 after" in page.read_text()


def test_a_schedule_keeps_the_detail_in_the_steps_it_records(tmp_path):
    out = str(tmp_path / "out")
    wrapper = profiled(out, {"schedule": {"wait": 11, "warmup": 0, "active": 3, "repeat": 1}})
    # the few steps a schedule records are the ones asked for: all of their detail
    assert wrapper.config["detail"] == "all"
    assert steps_with(out, "true") == {11, 12, 13}
    assert steps_with(out, SUMMARY) == steps_with(out, NODE) == {11, 12, 13}


def test_a_step_without_detail_leaves_no_callback_in_torch(tmp_path):
    # A disabled callback still costs torch on every thread switch (tw_torch.cpp): the steps without
    # detail remove them, the detail steps add them back, and a stop leaves none.
    from torchwrapper import _core
    held = []

    def train_and_look():
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for _ in range(STEPS):
            held.append(_core.torch_callbacks())
            loss = model(torch.randn(8, 16)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()

    out = str(tmp_path / "out")
    tw.TorchWrapper({"out_dir": out, "format": "csv"}).start(train_and_look)
    assert {i for i, n in enumerate(held) if n} == DETAIL_STEPS and max(held) == 1   # nodes, not operators
    assert steps_with(out, NODE) == DETAIL_STEPS         # and the detail steps still see their nodes
    assert _core.torch_callbacks() == 0
