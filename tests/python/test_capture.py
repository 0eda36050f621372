# SPDX-License-Identifier: MIT
"""On-demand capture (#24): a running profiled process records the next N steps into a directory
of their own when asked (`python -m torchwrapper capture PID`, or SIGUSR2), whatever its schedule."""
import collections
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

import torchwrapper
from torchwrapper._files import iter_rows, record_files

# Trains until the file named by argv[1] exists; every step makes the same calls.
LOOP = """
import os, sys, time, torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 8), torch.randn(32, 4)
step = 0
while not os.path.exists(sys.argv[1]) and step < 1000000:
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
    time.sleep(0.002)
print("steps", step)
"""

DDP_LOOP = """
import os, sys, time, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
dist.init_process_group("gloo")
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(4, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
done = torch.zeros(1)
while done.item() == 0:
    opt.zero_grad()
    model(torch.randn(8, 4)).pow(2).mean().backward()
    opt.step()
    done = torch.tensor([float(os.path.exists(sys.argv[1]))])
    dist.all_reduce(done)   # the ranks stop at the same step
    time.sleep(0.002)
dist.destroy_process_group()
"""


def wait_for(predicate, what, timeout=120.0):
    """Polls predicate until it returns something true (generous: the machine may be loaded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def control_files(ctl, stepping=True):
    """The control files in ctl (of processes that have made a step, with stepping)."""
    found = []
    for name in os.listdir(ctl) if os.path.isdir(ctl) else []:
        if name.endswith(".json"):
            try:
                with open(os.path.join(ctl, name)) as f:
                    state = json.load(f)
            except ValueError:
                continue
            if state["step"] > 0 or not stepping:
                found.append(state)
    return found


def steps_of(out_dir):
    """call ids by step, of every record file of out_dir (all processes)."""
    by_step = collections.defaultdict(set)
    for path in record_files(str(out_dir)):
        for row in iter_rows(path):
            by_step[row.step].add((row.pid, row.call_id))
    return by_step


def capture_cli(args, env):
    return subprocess.run([sys.executable, "-m", "torchwrapper", "capture"] + [str(a) for a in args], env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def job_env(env, tmp_path):
    env = dict(env, TORCHWRAPPER_CONTROL_DIR=str(tmp_path / "ctl"))
    return env


def start_run(tmp_path, env, script, extra=()):
    (tmp_path / "train.py").write_text(script)
    return subprocess.Popen([sys.executable, "-m", "torchwrapper", "run", "--no-report", "-o", str(tmp_path / "out"),
                             "--set", "on_demand=true", "--set", "format=csv", *extra, "train.py",
                             str(tmp_path / "stop")], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(process, tmp_path):
    (tmp_path / "stop").write_text("")
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    return out, err


def test_a_capture_of_a_running_run_process_records_exactly_the_next_steps(tmp_path, job_env):
    process = start_run(tmp_path, job_env, LOOP)
    try:
        state = wait_for(lambda: control_files(tmp_path / "ctl"), "the first step")[0]
        assert state["pid"] == process.pid and state["run_pid"] == process.pid
        first = capture_cli([process.pid, "--steps", 4, "--wait"], job_env)
        assert first.returncode == 0, first.stderr
        assert f"process {process.pid}: capture 1: steps " in first.stdout
        assert "capture 1 written" in first.stdout
        # A second capture, long, into a directory given; a third asked while it records is refused.
        second = capture_cli([process.pid, "--steps", 1000000, "--dir", tmp_path / "second"], job_env)
        assert second.returncode == 0, second.stderr
        third = capture_cli([process.pid, "--steps", 2], job_env)
        assert third.returncode == 1
        assert "refused: capture 2 (steps" in third.stderr and "is still recording" in third.stderr
    finally:
        finish(process, tmp_path)
    out = tmp_path / "out"
    everything = steps_of(out)  # no schedule: out_dir has every call of every step
    with open(out / "manifest.json") as f:
        captures = json.load(f)["captures"]
    assert [c["id"] for c in captures] == [1, 2]
    assert captures[0]["dir"] == str(out / "capture-1") and captures[1]["dir"] == str(tmp_path / "second")
    for c in captures:
        assert c["state"] == "done" and c["records_late"] == 0 and c["files"]
        captured = steps_of(c["dir"])
        first_step, last_step = c["steps"]
        assert sorted(captured) == list(range(first_step, last_step + 1))  # the capture's steps, no other
        for step, calls in captured.items():
            assert calls == everything[step]  # every call of each of them
        assert c["records_written"] == sum(len(calls) for calls in captured.values())
        with open(os.path.join(c["dir"], "manifest.json")) as f:
            own = json.load(f)
        assert own["capture"]["steps"] == c["steps"] and own["end_ns"] is not None
    assert captures[0]["steps"][1] - captures[0]["steps"][0] == 3
    assert captures[1]["steps"][0] > captures[0]["steps"][1]
    # The second ran until the program ended: its steps are those it holds, to the program's last.
    assert captures[1]["steps_asked"] == 1000000 and captures[1]["steps"][1] == max(everything)
    assert captures[0]["steps_asked"] == 4
    assert not os.listdir(tmp_path / "ctl")  # the control file goes with the process


def test_sigusr2_captures_the_steps_after_the_next_boundary_whatever_the_schedule(tmp_path):
    previous = signal.getsignal(signal.SIGUSR2)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    wrapper = torchwrapper.TorchWrapper({"out_dir": str(tmp_path / "out"), "format": "csv",
                                         "schedule": {"wait": 1000, "active": 1},  # nothing recorded by it
                                         "on_demand": {"steps": 2, "dir": str(tmp_path / "cap")},
                                         "gpu": "off"})
    os.environ["TORCHWRAPPER_CONTROL_DIR"] = str(tmp_path / "ctl")
    try:
        wrapper.start()
        for step in range(8):
            if step == 3:
                os.kill(os.getpid(), signal.SIGUSR2)  # during step 3: the capture begins with step 4
            opt.zero_grad()
            model(torch.randn(3, 4)).sum().backward()
            opt.step()
        wrapper.stop()
    finally:
        del os.environ["TORCHWRAPPER_CONTROL_DIR"]
    assert signal.getsignal(signal.SIGUSR2) == previous
    by_step = steps_of(tmp_path / "cap")
    assert sorted(by_step) == [4, 5]
    assert len(by_step[4]) == len(by_step[5]) > 0
    assert record_files(str(tmp_path / "out")) == []  # the schedule's own steps: none
    with open(tmp_path / "out" / "manifest.json") as f:
        (c,) = json.load(f)["captures"]
    assert c["steps"] == [4, 5] and c["dir"] == str(tmp_path / "cap")
    with open(tmp_path / "cap" / "summary.json") as f:
        summary = {a["api"]: a["calls"] for a in json.load(f)["apis"]}
    assert summary["torch.optim.SGD.step"] == 2


@pytest.mark.parametrize("set_by_the_program", ["before start", "while profiling"])
def test_the_programs_own_sigusr2_handler_is_there_after_stop(tmp_path, set_by_the_program):
    """One set before start is put back at stop; one set while profiling (a checkpoint handler,
    say) stays."""
    got = []
    previous = signal.getsignal(signal.SIGUSR2)
    os.environ["TORCHWRAPPER_CONTROL_DIR"] = str(tmp_path / "ctl")
    try:
        if set_by_the_program == "before start":
            signal.signal(signal.SIGUSR2, lambda signum, frame: got.append(signum))
        wrapper = torchwrapper.TorchWrapper({"out_dir": str(tmp_path / "out"), "on_demand": True, "gpu": "off"})
        wrapper.start()
        if set_by_the_program == "while profiling":
            signal.signal(signal.SIGUSR2, lambda signum, frame: got.append(signum))
        wrapper.stop()
        os.kill(os.getpid(), signal.SIGUSR2)
        wait_for(lambda: got, "the program's handler", timeout=10)
    finally:
        del os.environ["TORCHWRAPPER_CONTROL_DIR"]
        signal.signal(signal.SIGUSR2, previous)
    assert got == [signal.SIGUSR2]


def test_one_command_captures_every_rank_of_a_run_launched_ddp_job(tmp_path, job_env):
    # --standalone: the rendezvous store listens on a port the kernel picks as it binds (a port found
    # free beforehand could be taken by another test's job before torchrun binds it)
    torchrun = ["-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone"]
    (tmp_path / "train.py").write_text(DDP_LOOP)
    process = subprocess.Popen([sys.executable, "-m", "torchwrapper", "run", "--no-report", "-o", str(tmp_path / "out"),
                                "--set", "on_demand=true", "--set", "format=csv", *torchrun, "train.py",
                                str(tmp_path / "stop")], cwd=tmp_path, env=job_env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        ranks = wait_for(lambda: len(control_files(tmp_path / "ctl")) == 2 and control_files(tmp_path / "ctl"),
                         "both ranks' first steps", timeout=240)
        assert {r["rank"] for r in ranks} == {0, 1}
        assert {r["run_pid"] for r in ranks} == {process.pid}  # the launcher names the job
        result = capture_cli([process.pid, "--steps", 3, "--wait"], job_env)
        assert result.returncode == 0, result.stderr
        assert result.stdout.count("capture 1: steps") == 2, result.stdout
    finally:
        finish(process, tmp_path)
    capture_dir = tmp_path / "out" / "capture-1"
    by_pid = collections.defaultdict(set)
    for path in record_files(str(capture_dir)):
        for row in iter_rows(path):
            by_pid[row.pid].add(row.step)
    assert sorted(by_pid) == sorted(r["pid"] for r in ranks)
    for steps in by_pid.values():
        assert len(steps) == 3 and max(steps) - min(steps) == 2


def test_bad_on_demand_values_and_requests_are_named(tmp_path, job_env):
    for value, words in [({"steps": 0}, "'steps': 0 is not accepted"), ({"step": 3}, "unknown key 'step'"),
                         ("often", '"often" is not accepted')]:
        with pytest.raises(ValueError, match="config key 'on_demand'") as error:
            torchwrapper.TorchWrapper({"on_demand": value})
        assert words in str(error.value)
    with pytest.raises(ValueError, match="'on_demand' needs out_dir"):
        torchwrapper.profile(on_demand=True)
    # A process that is not profiled with on-demand capture (this test's own pid).
    result = capture_cli([os.getpid()], job_env)
    assert result.returncode == 2
    assert f"process {os.getpid()} is not profiled with on-demand capture" in result.stderr
    result = capture_cli([os.getpid(), "--steps", "0"], job_env)
    assert result.returncode == 2 and "--steps 0 is not accepted" in result.stderr


def test_a_stale_control_file_or_an_unsafe_directory_signals_nobody(tmp_path, job_env):
    """A file left by a killed process whose pid was given to another process, and a control
    directory others can write to: the command refuses, and the other process gets no signal
    (SIGUSR2's default action would end it)."""
    ctl = tmp_path / "ctl"
    ctl.mkdir(mode=0o700)
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        (ctl / f"{bystander.pid}.json").write_text(json.dumps(
            {"pid": bystander.pid, "start_time": 1, "run_pid": None, "step": 7, "capture": None, "requests": 0}))
        result = capture_cli([bystander.pid], job_env)
        assert result.returncode == 2 and "is not profiled with on-demand capture" in result.stderr
        os.chmod(ctl, 0o777)
        result = capture_cli([bystander.pid], job_env)
        assert result.returncode == 2 and "others can write to it" in result.stderr
        assert bystander.poll() is None  # still running: never signalled
    finally:
        bystander.kill()
        bystander.wait()
