# SPDX-License-Identifier: MIT
"""Compressed record files (config compress "gzip"): *.csv.gz / *.jsonl.gz, one gzip member each,
listed in the manifest; read by tw-report, torchwrapper.load() (the C reader), Polars, DuckDB and
torchwrapper.sql() with the same rows as an uncompressed run's; and a profiled child killed with
SIGKILL leaves files that every one of them reads to its last flush."""
import gzip
import json
import os
import signal
import subprocess
import sys
import zlib

import pytest
import torch

import torchwrapper as tw
from torchwrapper import _outdir

BUILD = os.environ.get("top_builddir", os.path.join(os.path.dirname(__file__), "..", ".."))
TW_REPORT = os.path.join(BUILD, "tw-report")
ENGINES = ["pandas", "polars", "duckdb"]

# Two processes (a spawned child), module forwards, argument summaries (text worth compressing).
PROGRAM = """
import multiprocessing as mp, torch

def work(n):
    x = torch.ones(4)
    for _ in range(n):
        x = torch.add(x, 1)
    return x.sum().item()

if __name__ == "__main__":
    torch.manual_seed(0)
    child = mp.get_context("spawn").Process(target=work, args=(70,))
    child.start()
    child.join()
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.ReLU())
    for _ in range(20):
        model(torch.randn(2, 3)).sum().backward()
    print(work(50))
"""

# The columns that are the same in two runs of PROGRAM (times and pids are not).
STABLE = ["api", "call_id", "depth", "parent_id", "error", "args", "module", "step"]


def profile_run(where, fmt, compress):
    where.mkdir(parents=True, exist_ok=True)
    (where / "prog.py").write_text(PROGRAM)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, "-m", "torchwrapper", "run", "--no-report", "-o", "out",
                           "--set", f"format={fmt}", "--set", f"compress={compress}", "--set", "args=summary",
                           "--set", "file_max_size=20000", "prog.py"],
                          cwd=where, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return where / "out"


@pytest.fixture(scope="module", params=["csv", "json"])
def runs(request, tmp_path_factory):
    """(plain out_dir, compressed out_dir) of PROGRAM in one format."""
    where = tmp_path_factory.mktemp(f"compress-{request.param}")
    return (profile_run(where / "plain", request.param, "none"),
            profile_run(where / "gzip", request.param, "gzip"), request.param)


def need(engine):
    if engine != "pandas":
        pytest.importorskip(engine)


def rows_of(out_dir, engine, columns):
    if engine == "pandas":   # (a missing module is NaN in pandas, None in the others)
        frame = tw.load(out_dir)
        return [tuple(None if v != v else v for v in r)
                for r in frame[columns].astype({"api": str}).itertuples(index=False)]
    if engine == "polars":
        return list(tw.load(out_dir, engine="polars").select(columns).collect().iter_rows())
    return tw.load(out_dir, engine="duckdb").select(*columns).fetchall()


def report_totals(out_dir, *options):
    done = subprocess.run([TW_REPORT, "--format", "json", *options, str(out_dir)], capture_output=True, text=True,
                          check=True)
    return {r["key"]: (r["calls"], r["total_ns"], r["self_ns"]) for r in json.loads(done.stdout)["rows"]}


def manifests(out_dir):
    return [json.load(open(os.path.join(out_dir, m))) for m in sorted(os.listdir(out_dir))
            if m.startswith("manifest") and m.endswith(".json")]


def test_files_are_gzip_members_named_gz_under_the_cap_and_listed_complete(runs):
    plain, packed, fmt = runs
    ext = ".csv" if fmt == "csv" else ".jsonl"
    records = [n for n in os.listdir(packed) if n.endswith((".csv", ".jsonl", ".gz"))]
    assert records and all(n.endswith(ext + ".gz") for n in records)
    listed = 0
    for m in manifests(packed):
        assert m["compress"] == "gzip" and m["config"]["compress"] == "gzip"
        for entry in m["files"]:
            path = os.path.join(packed, entry["name"])
            assert entry["complete"] is True and os.path.getsize(path) == entry["bytes"] <= 20000
            data = gzip.decompress(open(path, "rb").read())   # one whole member, alone
            assert data.startswith(b"call_id," if fmt == "csv" else b'{"call_id":')
            listed += 1
    assert listed == len(records)
    assert all(m["compress"] == "none" for m in manifests(plain))
    plain_bytes = sum(m["bytes_written"] for m in manifests(plain))
    assert sum(m["bytes_written"] for m in manifests(packed)) * 3 < plain_bytes


@pytest.mark.parametrize("engine", ENGINES)
def test_every_engine_reads_the_rows_of_the_uncompressed_run(runs, engine):
    need(engine)
    plain, packed, _ = runs
    assert sorted(rows_of(packed, engine, STABLE)) == sorted(rows_of(plain, engine, STABLE))
    # and in the compressed run, every engine the C reader's rows, times included
    everything = STABLE + ["start_ns", "cost_ns", "self_ns", "pid", "tid"]
    assert rows_of(packed, engine, everything) == rows_of(packed, "pandas", everything)


def test_tw_report_and_sql_read_compressed_files_on_any_thread_count(runs):
    pytest.importorskip("duckdb")
    plain, packed, _ = runs
    expected = report_totals(packed)
    assert report_totals(packed, "-j", "2") == expected
    got = tw.sql(packed, "SELECT api, count(*), sum(cost_ns), sum(self_ns) FROM calls GROUP BY api").fetchall()
    assert {api: (n, t, s) for api, n, t, s in got} == expected
    assert {api: n for api, (n, _, _) in expected.items()} == \
        {api: n for api, (n, _, _) in report_totals(plain).items()}


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_tensor_statistics_stream_compressed_reads_as_plain(tmp_path, fmt):
    frames = {}
    for compress in ("none", "gzip"):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU())
        with tw.profile(out_dir=str(tmp_path / compress), format=fmt, compress=compress, tensor_stats=True):
            for _ in range(3):
                model(torch.ones(2, 4)).sum().backward()
        frames[compress] = tw.load_stats(str(tmp_path / compress))
    assert any(n.endswith(".stats." + ("csv" if fmt == "csv" else "jsonl") + ".gz")
               for n in os.listdir(tmp_path / "gzip"))
    assert len(frames["gzip"]) > 0
    assert frames["gzip"].equals(frames["none"])


def test_a_bad_value_names_the_key_and_what_is_accepted():
    with pytest.raises(ValueError, match="compress.*'zip'|compress.*\"zip\"") as error:
        tw.profile(out_dir="never", compress="zip")
    assert "none" in str(error.value) and "gzip" in str(error.value)
    assert json.loads(tw._core.normalize_config("{}"))["compress"] == "none"   # the default


KILLED = """
import sys, time, torch, torchwrapper as tw
prof = tw.profile(out_dir=sys.argv[1], format=sys.argv[2], compress="gzip", file_max_size=30000,
                  flush_interval=0.05)
prof.start()
x = torch.ones(4)
for _ in range(3000):
    x = torch.add(x, 1)
# Calls go on until the writer has written the adds (torch.ones(4) and 3,000 torch.add): the recording
# thread hands its records over, and writes them itself when the writer thread (at SCHED_IDLE, which
# other programs' load starves) is late.
while prof.stats()["records_written"] < 3001:
    torch.ones(1)
# Then no call: the writer writes what was handed over (rotating files, the manifest rewritten at each
# new file), and the kill comes once it has, when no rotation is half done. Killed at a time instead
# (0.5 s), a starved writer had closed one file and created the next but not yet listed them: two files
# looked cut, one of them whole.
while True:
    s = prof.stats()
    if s["records_written"] + s["writer_dropped"] >= s["records"]:
        break
    time.sleep(0.01)
print("flushed", flush=True)
time.sleep(60)
"""


@pytest.fixture(scope="module", params=["csv", "json"])
def killed(request, tmp_path_factory):
    """The out_dir of a profiled child (compress "gzip") killed with SIGKILL after 3,000 torch.add
    calls, once its writer has written every record handed over (the last file cut, as a kill
    leaves the file being written)."""
    out = tmp_path_factory.mktemp(f"killed-{request.param}") / "out"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    child = subprocess.Popen([sys.executable, "-c", KILLED, str(out), request.param], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "flushed\n", child.stderr.read()
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    assert child.returncode == -signal.SIGKILL
    return out


def test_a_profiled_child_killed_with_sigkill_leaves_files_every_reader_reads(killed):
    out = killed
    names = sorted(n for n in os.listdir(out) if n.endswith(".gz"))
    assert len(names) > 1
    complete = {e["name"] for m in manifests(out) for e in m["files"] if e.get("complete")}
    cut = [n for n in names if n not in complete]
    assert len(cut) == 1              # the file being written: no member's end
    with pytest.raises(EOFError):     # which readers of whole gzip files refuse
        gzip.decompress(open(out / cut[0], "rb").read())
    assert not _outdir.gzip_complete(str(out / cut[0]))
    expected = report_totals(out)
    assert expected["torch.add"][0] == 3000
    for engine in ENGINES:
        need(engine)
        got = rows_of(out, engine, ["api", "cost_ns", "self_ns"])
        per_api = {}
        for api, cost, self_ns in got:
            n, t, s = per_api.get(api, (0, 0, 0))
            per_api[api] = (n + 1, t + cost, s + self_ns)
        assert per_api == expected, engine
    got = tw.sql(out, "SELECT count(*) FROM calls WHERE api = 'torch.add'").fetchall()
    assert got == [(3000,)]


def test_a_gzip_file_cut_anywhere_reads_whole_lines_in_python_as_in_c(tmp_path):
    lines = b"".join(b"%d,torch.add,%d\n" % (i, i * 7) for i in range(5000))
    z = zlib.compressobj(1, zlib.DEFLATED, 31)
    data = z.compress(b"call_id,api,start_ns\n") + z.flush(zlib.Z_SYNC_FLUSH)
    for k in range(0, len(lines), 10000):
        data += z.compress(lines[k:k + 10000]) + z.flush(zlib.Z_SYNC_FLUSH)
    for cut in (len(data), len(data) - 3, len(data) // 2, 40):
        path = tmp_path / f"cut-{cut}.csv.gz"
        path.write_bytes(data[:cut])
        inflated = _outdir.open_records(str(path)).read()
        assert (b"call_id,api,start_ns\n" + lines).startswith(inflated)
        copy = _outdir.readable([str(path)])[0]
        whole = open(copy, "rb").read()
        assert whole == inflated[:inflated.rfind(b"\n") + 1] and copy != str(path)
