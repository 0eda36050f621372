# SPDX-License-Identifier: MIT
"""python -m torchwrapper capture PID [--steps N] [--dir DIR] [--wait] [--timeout S]

Asks a running profiled process (started with "on_demand": true, or `run --set on_demand=true`)
to record its next N steps into a directory of their own, whatever its schedule. PID may be the
`python -m torchwrapper run` process of a job: then every profiled process of that job (each
DDP rank) is asked. The process answers at its next step boundary (src/write/ondemand.c); this command
waits for the answers and says what each process does (--wait: until the captures are written).

The control directory ($TORCHWRAPPER_CONTROL_DIR, else /tmp/torchwrapper-UID) holds each profiled
process's PID.json; a request is PID.request, written before SIGUSR2.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import signal
import stat
import sys
import time
from typing import Any, Dict, List, Optional

USAGE = "python -m torchwrapper capture PID [--steps N] [--dir DIR] [--wait] [--timeout SECONDS]"


def control_dir() -> str:
    return os.environ.get("TORCHWRAPPER_CONTROL_DIR") or f"/tmp/torchwrapper-{os.geteuid()}"


def _start_time(pid: int) -> Optional[int]:
    """Field 22 of /proc/PID/stat (the start time, in clock ticks since boot), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # the command name may hold spaces and ')'
    return int(fields[19]) if len(fields) > 19 else None


def _is_the_profiled_process(state: Dict[str, Any]) -> bool:
    """Whether state's pid is alive and still the process that wrote state (not a later process that
    was given the same pid after the profiled one was killed and left its file behind)."""
    pid = state.get("pid")
    if not isinstance(pid, int) or pid <= 0 or not _alive(pid):
        return False
    start = state.get("start_time")
    now = _start_time(pid)
    return not start or now is None or now == start


def _check_control_dir(directory: str) -> Optional[str]:
    """Why directory must not be trusted (its files choose which processes get signals), or None:
    it must be a real directory of this user's that nobody else can write to."""
    try:
        st = os.lstat(directory)
    except FileNotFoundError:
        return None  # nothing there: no profiled process
    if not stat.S_ISDIR(st.st_mode):
        return f"{directory} is not a directory"
    if st.st_uid != os.geteuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{directory} belongs to another user or others can write to it"
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read(path: str) -> Optional[Dict[str, Any]]:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):  # gone, or being replaced (renames are atomic: try again)
        return None


def targets(pid: int, directory: Optional[str] = None) -> List[Dict[str, Any]]:
    """The profiled processes PID names: itself, and the processes of the job whose `run` it is."""
    directory = directory or control_dir()
    found = []
    for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
        state = _read(path)
        if not isinstance(state, dict) or not _is_the_profiled_process(state):
            continue
        if state["pid"] == pid or state.get("run_pid") == pid:
            found.append(state)
    return found


def _parse(argv: List[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m torchwrapper capture", usage=USAGE,
                                     description=__doc__.split("\n\n")[1])
    parser.add_argument("pid", type=int, metavar="PID", help="a profiled process, or the `run` process of a job")
    parser.add_argument("--steps", type=int, default=None,
                        help="steps to record (default: the process's on_demand steps, 5 unless set)")
    parser.add_argument("--dir", "--out", dest="dir", default=None,
                        help="where the capture's files go (default: OUT_DIR/capture-N of each process)")
    parser.add_argument("--wait", action="store_true", help="return once the captures are written")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds to wait for the answers (default 60; the next step boundary may be far)")
    options = parser.parse_args(argv)
    if options.steps is not None and options.steps < 1:
        parser.error(f"--steps {options.steps} is not accepted: give 1 or more steps")
    if options.pid <= 0:
        parser.error(f"PID {options.pid} is not accepted: give a process id (1 or more)")
    if options.timeout <= 0:
        parser.error(f"--timeout {options.timeout:g} is not accepted: give seconds > 0")
    return options


def capture(argv: List[str]) -> int:
    options = _parse(argv)
    directory = control_dir()
    unsafe = _check_control_dir(directory)
    if unsafe is not None:
        sys.stderr.write(f"torchwrapper capture: refused: {unsafe} (set $TORCHWRAPPER_CONTROL_DIR to a directory "
                         "of your own)\n")
        return 2
    found = targets(options.pid, directory)
    if not found:
        sys.stderr.write(f"torchwrapper capture: process {options.pid} is not profiled with on-demand capture "
                         f"(no live process's file in {directory} names it): start it with "
                         "`python -m torchwrapper run --set on_demand=true ...` or the config {\"on_demand\": true}\n")
        return 2
    # Of a job, the processes that make steps (the ranks), not its launcher or DataLoader workers,
    # which would take the request at a step boundary that never comes.
    stepping = [state for state in found if state.get("step", 0) > 0]
    asked = []
    for state in stepping or found:
        pid = state["pid"]
        name = f"process {pid}" + (f" (rank {state['rank']})" if state.get("rank") is not None else "")
        if state.get("capture") is not None:
            c = state["capture"]
            sys.stderr.write(f"torchwrapper capture: {name}: refused: capture {c['id']} (steps {c['steps'][0]}-"
                             f"{c['steps'][1]}, into {c['dir']}) is still recording; ask again once it ends\n")
            continue
        request = {"steps": options.steps, "dir": os.path.abspath(options.dir) if options.dir else None}
        path = os.path.join(directory, f"{pid}.request")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            sys.stderr.write(f"torchwrapper capture: {name}: refused: a request is already waiting for its next "
                             f"step ({path})\n")
            continue
        with os.fdopen(fd, "w") as f:
            json.dump(request, f)
        try:
            os.kill(pid, signal.SIGUSR2)
        except ProcessLookupError:  # it ended meanwhile
            os.unlink(path)
            sys.stderr.write(f"torchwrapper capture: {name}: ended before it was asked\n")
            continue
        asked.append((name, state))
    # The answers come at each process's next step boundary: its control file counts the requests.
    deadline = time.monotonic() + options.timeout
    started = []
    pending = list(asked)
    while pending and time.monotonic() < deadline:
        for item in list(pending):
            name, before = item
            now = _read(os.path.join(directory, f"{before['pid']}.json"))
            if now is None and not _alive(before["pid"]):
                sys.stderr.write(f"torchwrapper capture: {name}: ended before its next step\n")
                pending.remove(item)
            elif now is not None and now.get("requests", 0) > before.get("requests", 0):
                pending.remove(item)
                last = now.get("last") or {}
                if last.get("result") == "started":
                    print(f"{name}: {last['message']}")
                    started.append((name, dict(now, capture=last["capture"])))
                else:
                    sys.stderr.write(f"torchwrapper capture: {name}: refused: {last.get('message')}\n")
        if pending:
            time.sleep(0.05)
    for name, _ in pending:
        sys.stderr.write(f"torchwrapper capture: {name}: no step boundary within {options.timeout:g} s; the request "
                         "waits for its next step\n")
    if options.wait:
        for name, state in started:
            _wait_done(name, state, deadline=time.monotonic() + max(options.timeout, 1.0) * 10)
    return 0 if started or (pending and not options.wait) else 1


def _wait_done(name: str, state: Dict[str, Any], deadline: float) -> None:
    """Until the capture's manifest is final (the process's writer finished it)."""
    c = state["capture"]
    manifests = os.path.join(c["dir"], "manifest*.json")
    while time.monotonic() < deadline:
        for path in glob.glob(manifests):
            m = _read(path)
            if m and m.get("pid") == state["pid"] and (m.get("capture") or {}).get("id") == c["id"] \
                    and m.get("end_ns") is not None:
                print(f"{name}: capture {c['id']} written: {m.get('records_written', 0)} records in {c['dir']}")
                return
        if not _alive(state["pid"]):
            break
        time.sleep(0.1)
    sys.stderr.write(f"torchwrapper capture: {name}: capture {c['id']} not finished yet ({c['dir']})\n")
