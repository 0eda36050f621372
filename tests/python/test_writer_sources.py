# SPDX-License-Identifier: MIT
"""Every record stream goes the way call records go (#36): GPU rows, tensor statistics and parameter
updates follow the schedule and land in a capture's directory, one memory budget bounds every byte
waiting for the writer (argument text included), and the manifest counts each kind's drops in one
scheme."""
import collections
import csv
import json
import os
import signal

import pytest
import torch

import torchwrapper as tw
from torchwrapper._files import record_files

from test_gpu_fake import cpu_only, fake, needs_fake  # noqa: F401 - fake is a fixture

SCHEDULE = {"wait": 1, "active": 1}   # steps 1, 3, 5, 7 recorded
RECORDED = {1, 3, 5, 7}
CAPTURED = {4, 5}                      # SIGUSR2 during step 3: the capture holds steps 4 and 5


def rows(out_dir, kind):
    """The rows of one kind in out_dir (CSV), as dicts of text."""
    found = []
    for path in record_files(str(out_dir), kind=kind):
        with open(path, newline="") as f:
            found.extend(csv.DictReader(f))
    return found


def manifest(out_dir):
    with open(os.path.join(out_dir, "manifest.json")) as f:
        return json.load(f)


@pytest.fixture
def control_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHWRAPPER_CONTROL_DIR", str(tmp_path / "ctl"))
    previous = signal.getsignal(signal.SIGUSR2)
    yield
    assert signal.getsignal(signal.SIGUSR2) == previous


def capture_during_step_3(step):
    if step == 3:
        os.kill(os.getpid(), signal.SIGUSR2)   # the capture begins at the next boundary


@cpu_only
@needs_fake
def test_gpu_rows_follow_the_schedule_and_land_in_the_capture_of_their_launch_step(fake, tmp_path, control_dir):
    def launch(step):
        t = fake.fake_cupti_now()
        # launched in this step, run "later" on the GPU: the launch's step is the row's step
        fake.fake_cupti_launch(0, f"kernel_{step}".encode(), 0, t + 50_000_000, t + 50_001_000, 0, 7)

    launch_w = tw.wrap(launch, "my.launch")
    session = tw.Session(out_dir=str(tmp_path / "out"), format="csv", gpu="on", gpu_device=True, schedule=SCHEDULE,
                         on_demand={"steps": 2, "dir": str(tmp_path / "cap")})
    session.start()
    for step in range(8):
        capture_during_step_3(step)
        launch_w(step)
        session.step()
    session.stop()
    # CUPTI records in the steps recorded and the one after each: step 0 (waiting) has no kernel
    assert session.stats()["gpu_kernels"] == 7
    out, cap = tmp_path / "out", tmp_path / "cap"
    assert sorted(r["name"] for r in rows(out, "gpu")) == sorted(f"kernel_{s}" for s in RECORDED)
    assert sorted(r["name"] for r in rows(cap, "gpu")) == sorted(f"kernel_{s}" for s in CAPTURED)
    # each GPU row names a call of the same directory's records
    for directory in (out, cap):
        calls = {int(r["call_id"]) for r in rows(directory, "calls")}
        assert {int(r["call_id"]) for r in rows(directory, "gpu")} <= calls
    # the capture's manifest lists its GPU file, out_dir's lists it among the capture's files
    cap_files = [f["name"] for f in manifest(cap)["files"] if f["kind"] == "gpu"]
    assert len(cap_files) == 1 and cap_files[0] in manifest(out)["captures"][0]["files"]
    # one drop scheme for every kind
    records = manifest(out)["records"]
    assert set(records) == {"calls", "gpu"}
    assert {k: set(v) for k, v in records.items()}["calls"] == set(records["gpu"])
    no_drops = dict.fromkeys(["full", "invalid", "closed", "write", "upstream"], 0)
    assert records["gpu"]["dropped_by"] == records["calls"]["dropped_by"] == no_drops
    assert records["gpu"]["written"] == 4 and records["gpu"]["dropped"] == 0
    assert records["calls"]["written"] == len(rows(out, "calls"))
    # per-API GPU totals count the recorded steps' kernels (the summary counts every call), not those of
    # the steps after them, where CUPTI is still on
    with open(out / "summary.json") as f:
        summary = {a["api"]: a for a in json.load(f)["apis"]}
    assert summary["my.launch"]["calls"] == 8 and summary["my.launch"]["gpu_ns"] == 4 * 1000


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(6, 8)
        self.b = torch.nn.Linear(8, 2)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def test_tensor_statistics_and_updates_follow_the_schedule_and_the_capture(tmp_path, control_dir):
    torch.manual_seed(0)
    model = Model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 6), torch.randn(16, 2)
    out, cap = tmp_path / "out", tmp_path / "cap"
    with tw.profile(out_dir=str(out), format="csv", schedule=SCHEDULE, tensor_stats=True, track=["parameters"],
                    on_demand={"steps": 2, "dir": str(cap)}, gpu="off"):
        for step in range(8):
            capture_during_step_3(step)
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()   # ends the step
    for directory, steps in ((out, RECORDED), (cap, CAPTURED)):
        call_step = {int(r["call_id"]): int(r["step"]) for r in rows(directory, "calls")}
        assert set(call_step.values()) == steps
        for kind in ("stats", "updates"):
            found = rows(directory, kind)
            assert found, (directory, kind)
            # every row belongs to a call of a step this directory holds, and every such step has rows
            per_step = collections.Counter(call_step[int(r["call_id"])] for r in found)
            assert set(per_step) == steps, (directory, kind, per_step)
            assert len(set(per_step.values())) == 1, per_step   # the same rows every step
    records = manifest(out)["records"]
    assert set(records) == {"calls", "stats", "updates"}
    for kind, counts in records.items():
        assert counts["dropped"] == 0 and counts["written"] == len(rows(out, kind)), (kind, counts)


def test_bytes_waiting_for_the_writer_never_exceed_buffer_size_with_argument_text(tmp_path):
    """Argument text is charged with its records (it was left out: twice the memory asked for)."""
    budget = 512 * 1024   # four chunks of records with their text
    big = torch.randn(64, 64)
    out = tmp_path / "out"
    with tw.profile(out_dir=str(out), format="json", args="repr", buffer_size=budget, flush_interval=5,
                    gpu="off") as prof:
        for _ in range(6_000):   # ~4 MB of records: eight budgets (a repr of 64x64 takes ~1 ms)
            torch.add(big, 1.0)   # a long argument text each
    m = manifest(out)
    assert m["memory"]["budget_bytes"] == budget
    assert 0 < m["memory"]["peak_bytes"] <= budget
    calls = m["records"]["calls"]
    assert calls["written"] + calls["dropped"] >= 6_000   # nothing unaccounted for
    assert calls["dropped"] == calls["dropped_by"]["full"]
    assert prof.stats()["records"] >= calls["written"]
