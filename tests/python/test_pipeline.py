# SPDX-License-Identifier: MIT
"""Records to files: size cap, exact counts, and nothing lost at exit, on signals and across fork."""
import json
import os
import signal
import shutil
import subprocess
import sys
import textwrap
import time

import pytest
import torch

import torchwrapper as tw
from torchwrapper._files import iter_rows, record_files

HERE = os.path.dirname(os.path.abspath(__file__))


def script(code: str) -> list:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE] + sys.path))
    return [sys.executable, "-c", textwrap.dedent(code)], env


def rows_by_pid(out_dir):
    by_pid = {}
    for name in os.listdir(out_dir):
        if name.endswith((".csv", ".jsonl")):
            for row in iter_rows(os.path.join(out_dir, name)):
                by_pid.setdefault(row.pid, []).append(row)
    return by_pid


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_a_million_calls_fill_capped_files_with_exactly_one_row_each(tmp_path, fmt):
    calls = 1_000_000
    x = torch.ones(2)
    # A loop of near-empty calls outruns the writer: on_full="wait" makes the count exact (the
    # default, "drop", counts what it drops: see test_when_the_writer_falls_behind_drops_are_counted).
    with tw.profile(out_dir=str(tmp_path), format=fmt, file_max_size="1MB", on_full="wait") as prof:
        for _ in range(calls):
            x.dim()
    files = [f for f in os.listdir(tmp_path) if f.endswith((".csv", ".jsonl"))]
    assert len(files) > 30
    assert max(os.path.getsize(tmp_path / f) for f in files) <= 1_000_000
    rows = [row for path in prof.files for row in iter_rows(path)]
    assert len(rows) == calls
    assert {row.api for row in rows} == {"torch.Tensor.dim"}
    assert len({row.call_id for row in rows}) == calls
    with open(tmp_path / "manifest.json") as f:
        manifest = json.load(f)
    assert manifest["records_written"] == calls and manifest["records_dropped"] == 0
    assert sum(entry["records"] for entry in manifest["files"]) == calls
    assert manifest["torch"] == torch.__version__ and manifest["config"]["format"] == fmt
    with open(tmp_path / "summary.json") as f:
        summary = json.load(f)
    (dim,) = [a for a in summary["apis"] if a["api"] == "torch.Tensor.dim"]
    assert dim["calls"] == calls and dim["min_ns"] <= dim["p50_ns"] <= dim["p99_ns"] <= dim["max_ns"]
    if fmt == "json":
        import pandas
        frame = pandas.read_json(prof.files[0], lines=True)
        assert list(frame.columns) == ["call_id", "api", "start_ns", "cost_ns", "self_ns", "gpu_ns", "pid", "tid",
                                       "depth", "parent_id", "error", "args", "module", "step", "site", "fwd_call_id",
                                       "fwd_api"]


MADE = 50_000   # the loops below say "made" after this many calls

LOOP = """
    import os, sys, torch, torchwrapper as tw
    MADE = %d
    x = torch.ones(2)
    prof = tw.profile(out_dir=sys.argv[1], format="csv", file_max_size="1MB", flush_interval=0.05,
                      on_full=sys.argv[2])
    prof.start()
    print("started", flush=True)
    i = 0
    while True:
        x.dim()
        i += 1
        if i == MADE:
            print("made", i, flush=True)
        {body}
""" % MADE


def contiguous_calls(out_dir):
    ids = sorted(row.call_id for path in record_files(out_dir) for row in iter_rows(path))
    assert ids, "no records"
    assert ids == list(range(1, len(ids) + 1)), "a call is missing"
    return len(ids)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_mid_run_loses_nothing(tmp_path, sig):
    argv, env = script(LOOP.format(body="pass"))
    child = subprocess.Popen(argv + [str(tmp_path), "wait"], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "started"
    # the signal lands mid-loop, after MADE calls whatever the machine's speed
    assert child.stdout.readline().split() == ["made", str(MADE)]
    child.send_signal(sig)
    try:
        _, err = child.communicate(timeout=60)
    except subprocess.TimeoutExpired:   # say where it waits (once: the writer thread left starved)
        stacks = subprocess.run(["gdb", "-p", str(child.pid), "-batch", "-ex", "thread apply all bt 20"],
                                capture_output=True, text=True).stdout if shutil.which("gdb") else "(no gdb)"
        child.kill()
        pytest.fail(f"the child did not exit 60 s after {sig!r}; its threads:\n{stacks}")
    assert child.returncode == -sig, err  # as without the profiler (Python re-raises SIGINT at exit)
    calls = contiguous_calls(str(tmp_path))
    assert calls >= MADE
    with open(tmp_path / "manifest.json") as f:
        manifest = json.load(f)
    assert manifest["records_written"] == calls and manifest["records_dropped"] == 0
    assert manifest["end_ns"] is not None


@pytest.mark.parametrize("ending, code", [("sys.exit(3)", 3), ("raise RuntimeError('boom')", 1), ("break", 0)])
def test_exit_without_stop_loses_nothing(tmp_path, ending, code):
    body = f"if i == 123456:\n            {ending}"
    argv, env = script(LOOP.format(body=body))
    result = subprocess.run(argv + [str(tmp_path), "wait"], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == code, result.stderr
    assert contiguous_calls(str(tmp_path)) == 123456


def test_when_the_writer_falls_behind_drops_are_counted(tmp_path):
    # A tight loop of near-empty calls outruns the writer; with on_full="drop" (the default) the
    # program is not slowed down, and every call is either in the files or counted as dropped.
    argv, env = script(LOOP.format(body="if i == 3_000_000:\n            break").replace(
        'flush_interval=0.05,', 'flush_interval=0.05, buffer_size="2MiB",'))
    result = subprocess.run(argv + [str(tmp_path), "drop"], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    ids = sorted(row.call_id for path in record_files(str(tmp_path)) for row in iter_rows(path))
    with open(tmp_path / "manifest.json") as f:
        manifest = json.load(f)
    assert manifest["records_written"] == len(ids)
    assert manifest["records_written"] + manifest["records_dropped"] == 3_000_000
    assert len(set(ids)) == len(ids)


def csv_lines_on_disk(out_dir):
    """Complete record lines in out_dir's CSV files now (headers not counted)."""
    total = 0
    for path in out_dir.iterdir():
        if path.suffix == ".csv":
            with open(path, "rb") as f:
                total += max(f.read().count(b"\n") - 1, 0)
    return total


def test_kill_9_leaves_files_that_parse_and_at_most_a_flush_interval_at_risk(tmp_path):
    argv, env = script(LOOP.format(body="pass"))
    child = subprocess.Popen(argv + [str(tmp_path), "wait"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "started"
        assert child.stdout.readline().split() == ["made", str(MADE)]
        # Records reach the disk every flush_interval (0.05 s) while the program runs, without a
        # stop: the first MADE calls appear while the loop goes on making more. (The deadline is
        # only a margin for a loaded machine; a writer that waits for stop never gets there.)
        deadline = time.monotonic() + 60
        while csv_lines_on_disk(tmp_path) < MADE and time.monotonic() < deadline:
            time.sleep(0.05)
        assert csv_lines_on_disk(tmp_path) >= MADE
    finally:
        child.kill()   # mid-write: the writer is busy with the calls still being made
        child.wait(timeout=60)
    # "timestamp" names sort in creation order (modification times can tie)
    files = sorted(p for p in tmp_path.iterdir() if p.suffix == ".csv")
    assert files
    total = 0
    for path in files:
        lines = path.read_text().split("\n")
        if path == files[-1] and lines == [""]:
            continue  # killed between creating the newest file and writing its header
        assert lines[0].startswith("call_id,api,")
        body = lines[1:]
        torn_tail = body[-1]  # "" after a final newline; else the one line a kill may cut
        for line in body[:-1]:
            assert len(line.split(",")) == 23, line  # no torn record inside a file
        assert torn_tail == "" or path == files[-1]
        total += len(body) - 1
    assert total >= MADE
    with open(tmp_path / "manifest.json") as f:
        json.load(f)  # replaced atomically: complete JSON even after kill -9


def test_a_forked_child_writes_its_own_files(tmp_path):
    argv, env = script("""
        import os, sys, torch, torchwrapper as tw
        x = torch.ones(2)
        with tw.profile(out_dir=sys.argv[1], format="json", file_max_size="1MB"):
            for _ in range(1000):
                x.dim()
            pid = os.fork()
            if pid == 0:
                for _ in range(777):
                    x.dim()
                sys.exit(0)   # atexit flushes the child's records into its own files
            for _ in range(500):
                x.dim()
            os.waitpid(pid, 0)
        print(pid)
    """)
    result = subprocess.run(argv + [str(tmp_path)], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    child = int(result.stdout.split()[-1])
    by_pid = rows_by_pid(str(tmp_path))
    parent = [p for p in by_pid if p != child]
    assert len(by_pid[child]) == 777
    assert len(parent) == 1 and len(by_pid[parent[0]]) == 1500  # none of the parent's written twice
    assert os.path.exists(tmp_path / f"manifest-{child}.json")
    assert all(str(child) in name for name in os.listdir(tmp_path)
               if name.endswith(".jsonl") and any(r.pid == child for r in iter_rows(str(tmp_path / name))))


def test_dataloader_fork_workers_write_their_records(tmp_path):
    argv, env = script("""
        import sys, torch, torchwrapper as tw
        class Squares(torch.utils.data.Dataset):
            def __len__(self):
                return 32
            def __getitem__(self, i):
                return torch.tensor([float(i)]).pow(2)
        with tw.profile(out_dir=sys.argv[1], format="csv", file_max_size="1MB"):
            loader = torch.utils.data.DataLoader(Squares(), batch_size=4, num_workers=2,
                                                 multiprocessing_context="fork")
            total = sum(batch.sum().item() for batch in loader)
        print(total)
    """)
    result = subprocess.run(argv + [str(tmp_path)], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert float(result.stdout.split()[-1]) == sum(float(i * i) for i in range(32))
    by_pid = rows_by_pid(str(tmp_path))
    assert len(by_pid) == 3  # the main process and two workers
    workers = [rows for rows in by_pid.values() if any(r[1] == "torch.tensor" for r in rows)]
    assert len(workers) == 2
    assert sum(sum(1 for r in rows if r[1] == "torch.tensor") for rows in workers) == 32


def test_bad_output_settings_name_the_value(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    with pytest.raises(OSError, match=f"out_dir '{blocker}/sub' cannot be created: Not a directory"):
        tw.profile(out_dir=str(blocker / "sub")).start()
    assert not isinstance(torch.add, tw.Wrapper)  # nothing left installed
    with pytest.raises(ValueError, match="config key 'file_max_size': \"10XB\" is not a size.*\"512KiB\""):
        tw.profile(out_dir=str(tmp_path), file_max_size="10XB")
    with pytest.raises(ValueError, match="config key 'file_max_size': 100 is too small"):
        tw.profile(out_dir=str(tmp_path), file_max_size=100).start()
    with pytest.raises(ValueError, match=r"config key 'format': \"xml\" is not accepted: give one of: json csv"):
        tw.profile(out_dir=str(tmp_path), format="xml")
    with pytest.raises(ValueError, match=r"unknown field \{epoch\}"):
        tw.profile(out_dir=str(tmp_path), file_name_spec="run-{epoch}")
    with pytest.raises(ValueError, match="would leave out_dir"):
        tw.profile(out_dir=str(tmp_path), file_name_spec="../x-{index}")
    with pytest.raises(ValueError, match="config key 'on_full': \"never\" is not accepted"):
        tw.profile(out_dir=str(tmp_path), on_full="never")
