# SPDX-License-Identifier: MIT
"""tw-report -j N: the table read on N threads is byte for byte the one thread's, on many small files
and on one file cut into byte ranges (TW_REPORT_RANGE_BYTES, a test knob, makes the ranges small),
and every record is counted once, whatever the range boundaries cut through."""
import csv
import json
import os
import re
import subprocess
from collections import Counter

import pytest
import torch

import torchwrapper as tw

from test_report import train  # the same real training loop as the one-thread report tests

BUILD = os.environ.get("top_builddir", os.path.join(os.path.dirname(__file__), "..", ".."))
TW_REPORT = os.path.join(BUILD, "tw-report")


@pytest.fixture(scope="module", params=["csv", "json"])
def runs(request, tmp_path_factory):
    """A real training loop profiled twice: into small rotating files, and into one file."""
    many = tmp_path_factory.mktemp(f"jobs-many-{request.param}")
    tw.TorchWrapper({"out_dir": str(many), "format": request.param, "file_max_size": "8KB"}).start(lambda: train(10))
    one = tmp_path_factory.mktemp(f"jobs-one-{request.param}")
    tw.TorchWrapper({"out_dir": str(one), "format": request.param}).start(lambda: train(40))
    (record,) = [p for p in os.listdir(one) if p.endswith((".csv", ".jsonl"))]
    return request.param, many, one / record


def report(*args, jobs, range_bytes=None):
    """tw-report's stdout and stderr, the footer's timing (which varies from run to run) left out."""
    env = dict(os.environ)
    env.pop("TW_REPORT_RANGE_BYTES", None)
    if range_bytes is not None:
        env["TW_REPORT_RANGE_BYTES"] = str(range_bytes)
    done = subprocess.run([TW_REPORT, "-j", str(jobs), *map(str, args)], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    strip = re.compile(r" in [\d.]+ s \(\d+ MB/s\)")
    return strip.sub("", done.stdout), strip.sub("", done.stderr)


def api_rows(path):
    """The call records' APIs, read with the csv and json modules only."""
    with open(path, newline="") as f:
        if str(path).endswith(".csv"):
            return [r["api"] for r in csv.DictReader(f)]
        return [json.loads(line)["api"] for line in f if line.endswith("\n")]


def calls_per_api(stdout):
    return {r["api"]: int(r["calls"]) for r in csv.DictReader(stdout.splitlines())}


OPTIONS = [(), ("--by", "thread"), ("--by", "pid"), ("--by", "step"), ("--by", "shape"), ("--sort", "p95"),
           ("--api", "torch.nn.*", "--steps", "2:7"), ("--format", "json"), ("--format", "markdown", "--top", "5")]


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: " ".join(o) or "default")
def test_many_files_on_several_threads_give_the_one_thread_table(runs, options):
    _, many, _ = runs
    assert len([p for p in os.listdir(many) if p.endswith((".csv", ".jsonl"))]) > 4
    one_thread = report(*options, many, jobs=1)
    assert len(one_thread[0].splitlines()) >= 3  # a header and groups
    for jobs in (2, 4):
        assert report(*options, many, jobs=jobs) == one_thread


@pytest.mark.parametrize("range_bytes", [1000, 1777, 4096, 65536])
def test_one_file_cut_into_ranges_counts_every_record_once(runs, range_bytes):
    _, _, record = runs
    assert os.path.getsize(record) > 20 * range_bytes or range_bytes == 65536
    one_thread = report("--format", "csv", record, jobs=1)
    for jobs in (2, 4):
        assert report("--format", "csv", record, jobs=jobs, range_bytes=range_bytes) == one_thread
    # Ranges of odd sizes cut through records: none lost, none counted twice.
    assert calls_per_api(one_thread[0]) == dict(Counter(api_rows(record)))
    table = report(record, jobs=4, range_bytes=range_bytes)
    assert table == report(record, jobs=1)
    assert f"{len(api_rows(record))} records from 1 file" in table[0]


def test_a_torn_last_line_is_skipped_once(runs, tmp_path):
    fmt, _, record = runs
    torn = tmp_path / record.name
    data = record.read_bytes()
    line = data.split(b"\n")[1]
    torn.write_bytes(data + line[:len(line) // 2])  # a record cut short by a killed process
    one_thread = report("--format", "csv", torn, jobs=1)
    assert "1 torn last line" in one_thread[1]
    for range_bytes in (1000, 4096, len(data) - 50, len(data)):
        assert report("--format", "csv", torn, jobs=4, range_bytes=range_bytes) == one_thread
    assert calls_per_api(one_thread[0]) == dict(Counter(api_rows(record)))


def test_quoted_line_ends_at_a_cut_are_read_as_one_thread_would(runs, tmp_path):
    """A CSV field may hold line ends in quotes: a range cut inside one is seen (the ranges do not
    chain) and the file read again on one thread; the table is the one thread's all the same."""
    fmt, _, record = runs
    if fmt != "csv":
        pytest.skip("JSON strings hold no raw line end")
    with open(record, newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        rows = list(reader)
    args = header.index("args")
    for i, row in enumerate(rows):
        if i % 3 == 0:
            row[args] = "a\nb,c\n" * 40 + "\"quoted\""  # long enough that small ranges cut inside
    odd = tmp_path / "quoted.csv"
    with open(odd, "w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)
    one_thread = report("--format", "csv", odd, jobs=1)
    assert calls_per_api(one_thread[0]) == dict(Counter(r[header.index("api")] for r in rows))
    for range_bytes in (1000, 1777, 65536):
        assert report("--format", "csv", odd, jobs=3, range_bytes=range_bytes) == one_thread


@pytest.mark.parametrize("options", [("--by", "parent"), ("--by", "site"), ("--tree", "1")])
def test_outputs_read_in_file_order_are_the_one_thread_ones(runs, options):
    _, many, record = runs
    assert report(*options, many, jobs=4) == report(*options, many, jobs=1)
    assert report(*options, record, jobs=4, range_bytes=4096) == report(*options, record, jobs=1)


@pytest.mark.parametrize("value", ["0", "-1", "abc", "1025", "2x", ""])
def test_bad_job_counts_are_refused(runs, value):
    _, many, _ = runs
    for argv in (["-j", value], [f"--jobs={value}"]):
        done = subprocess.run([TW_REPORT, *argv, str(many)], capture_output=True, text=True)
        assert done.returncode == 2, done.stderr
        assert f"'{value}' is not accepted: give a number of threads from 1 to 1024" in done.stderr
    assert subprocess.run([TW_REPORT, "-j3", str(many)], capture_output=True).returncode == 0
    help_text = subprocess.run([TW_REPORT, "--help"], capture_output=True, text=True).stdout
    assert "-j, --jobs N" in help_text
