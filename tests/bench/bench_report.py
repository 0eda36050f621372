# SPDX-License-Identifier: MIT
"""tw-report throughput, against pandas.read_csv + groupby on the same files, and its memory as the
input grows. Run by `make bench` (BENCH=quick: 256 MB; BENCH=full: 1 GB; BENCH=smoke: 8 MB, once).

The record set is a real profiled training loop's rows, repeated with fresh call ids and times until
it reaches the size; the files are hard links to one 128 MB file (the page cache holds one copy, so
both readers are measured on warm data, as a second look at a run would be).
"""
from __future__ import annotations

import csv
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

import torchwrapper as tw

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from modes import sized  # noqa: E402  (this folder's: BENCH)

TOTAL_MB = sized(8, 256, 1024)
FILE_MB = sized(4, 128, 128)
REPS = sized(1, 3, 5)
BUILD = os.environ.get("top_builddir", ".")
TW_REPORT = os.path.join(BUILD, "tw-report")


def real_rows(tmp):
    """The rows of a real MLP training loop, profiled with argument summaries."""
    def train():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
        optimizer = torch.optim.Adam(model.parameters())
        for _ in range(50):
            loss = torch.nn.functional.cross_entropy(model(torch.randn(32, 64)), torch.randint(0, 10, (32,)))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    out = os.path.join(tmp, "run")
    tw.TorchWrapper({"out_dir": out, "format": "csv"}).start(train)
    rows = []
    for name in sorted(os.listdir(out)):
        if name.endswith(".csv"):
            with open(os.path.join(out, name), newline="") as f:
                reader = csv.reader(f)
                header = next(reader)
                rows += list(reader)
    return header, rows


def make_file(path, header, rows, size, shift_steps=False):
    """Repeats rows (call ids and times shifted, and with shift_steps their steps: a longer run)
    until the file holds size bytes."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    span = max(int(r[2]) for r in rows) - min(int(r[2]) for r in rows) + 1
    ids = max(int(r[0]) for r in rows)
    step = header.index("step")
    steps = max(int(r[step]) for r in rows) + 1 if shift_steps else 0
    block = 0
    with open(path, "w", newline="") as f:
        while f.tell() < size:
            for r in rows:
                r = list(r)
                r[0] = str(int(r[0]) + block * ids)
                r[2] = str(int(r[2]) + block * span)
                if r[9] != "0":
                    r[9] = str(int(r[9]) + block * ids)
                if steps:
                    r[step] = str(int(r[step]) + block * steps)
                writer.writerow(r)
            f.write(buf.getvalue())
            buf.seek(0)
            buf.truncate()
            block += 1


def run_report(paths, extra=(), fmt="csv"):
    """(wall s, cpu s, max RSS MB or None) of one tw-report run over paths (extra: more options;
    fmt: its --format, None for the default table)."""
    # The maximum RSS comes from GNU time, whose child is forked from a small process: a child
    # forked (or vforked) from this big Python process starts with its pages counted.
    with tempfile.NamedTemporaryFile("r") as rss:
        timer = ["/usr/bin/time", "-f", "%M", "-o", rss.name] if os.path.exists("/usr/bin/time") else []
        devnull = os.open(os.devnull, os.O_WRONLY)
        argv = timer + [TW_REPORT, *(("--format", fmt) if fmt else ()), *extra, *paths]
        start = time.perf_counter()
        pid = os.posix_spawn(argv[0], argv, os.environ, file_actions=[(os.POSIX_SPAWN_DUP2, devnull, 1)])
        _, status, usage = os.wait4(pid, 0)
        wall = time.perf_counter() - start
        os.close(devnull)
        assert status == 0, f"tw-report failed with status {status}"
        text = rss.read().strip()
    return wall, usage.ru_utime + usage.ru_stime, int(text) / 1024 if timer and text else None


def pandas_report(paths):
    import pandas

    start = time.perf_counter()
    frame = pandas.concat([pandas.read_csv(p, usecols=["api", "cost_ns", "self_ns"]) for p in paths],
                          ignore_index=True)
    grouped = frame.groupby("api")["cost_ns"]
    table = grouped.agg(["count", "sum", "min", "max", "mean"])
    table["self"] = frame.groupby("api")["self_ns"].sum()
    for q in (0.5, 0.95, 0.99):
        table[f"p{int(q * 100)}"] = grouped.quantile(q)
    return time.perf_counter() - start


# The same per-API table (calls, total, self, min, max, p50/p95/p99) through torchwrapper's engines,
# each in a process of its own (a small one: torchwrapper does not import torch), timed by itself
# (the aggregation only, not the interpreter's start) and its peak memory taken by GNU time.
ENGINE_SCRIPT = """
import sys, time
import torchwrapper as tw
engine, paths = sys.argv[1], sys.argv[2:]
start = time.perf_counter()
if engine == "duckdb":
    rows = tw.sql(paths, "SELECT api, count(*), sum(cost_ns), sum(self_ns), min(cost_ns), max(cost_ns), "
                         "quantile_cont(cost_ns, [0.5, 0.95, 0.99]) FROM calls GROUP BY api").fetchall()
else:
    import polars as pl
    cost = pl.col("cost_ns")
    rows = (tw.load(paths, engine="polars").group_by("api")
            .agg(pl.len(), cost.sum().alias("total"), pl.col("self_ns").sum().alias("self"),
                 cost.min().alias("min"), cost.max().alias("max"), cost.quantile(0.5).alias("p50"),
                 cost.quantile(0.95).alias("p95"), cost.quantile(0.99).alias("p99")).collect().rows())
print(time.perf_counter() - start, len(rows))
"""


def engine_report(engine, paths):
    """(seconds, peak RSS MB or None) of the per-API table through engine, or None when it is not installed."""
    try:
        __import__(engine)
    except ImportError:
        return None
    with tempfile.NamedTemporaryFile("r") as rss:
        timer = ["/usr/bin/time", "-f", "%M", "-o", rss.name] if os.path.exists("/usr/bin/time") else []
        done = subprocess.run(timer + [sys.executable, "-c", ENGINE_SCRIPT, engine, *paths], capture_output=True,
                              text=True)
        if done.returncode != 0:
            raise RuntimeError(f"the {engine} per-API table failed: {done.stderr[-2000:]}")
        text = rss.read().strip()
    # The script's last words are its time and row count (DuckDB may print a progress bar before them).
    return float(done.stdout.split()[-2]), (int(text) / 1024 if timer and text else None)


def jobs_throughput(paths, reps=REPS):
    """tw-report -j 1 against -j 2 (and -j 4 where there are 4 CPUs), interleaved, on the same files:
    {"all_files" | "one_file": {jobs: MB/s wall (median), "max_rss_mb": {jobs: MB}}}. One file is cut
    into 32 MiB ranges, read on the threads as the files are."""
    counts = [1, 2] + ([4] if (os.cpu_count() or 1) >= 4 else [])
    results = {}
    for name, chosen in (("all_files", paths), ("one_file", paths[:1])):
        mb = sum(os.path.getsize(p) for p in chosen) / 1e6
        runs = {jobs: [] for jobs in counts}
        for _ in range(reps):
            for jobs in counts:
                runs[jobs].append(run_report(chosen, ("-j", str(jobs))))
        results[name] = {"input_mb": round(mb, 1), "reps": reps,
                         "mb_s_wall": {jobs: round(mb / statistics.median(r[0] for r in runs[jobs]), 1) for jobs in counts},
                         "mb_s_cpu": {jobs: round(mb / statistics.median(r[1] for r in runs[jobs]), 1) for jobs in counts},
                         "max_rss_mb": {jobs: runs[jobs][0][2] and round(max(r[2] for r in runs[jobs]), 1)
                                        for jobs in counts}}
    return results


def print_jobs(jobs):
    for name, row in jobs.items():
        rates = ", ".join(f"-j {j}: {mbs:.0f} MB/s wall, {row['mb_s_cpu'][j]:.0f} MB/s of CPU time, max RSS "
                          f"{row['max_rss_mb'][j]} MB" for j, mbs in row["mb_s_wall"].items())
        print(f"  tw-report -j N on {name.replace('_', ' ')} ({row['input_mb']:.0f} MB, median of {row['reps']}, "
              f"interleaved): {rates}")


def main():
    results = {}
    with tempfile.TemporaryDirectory(prefix="tw-bench-report-") as tmp:
        header, rows = real_rows(tmp)
        base = os.path.join(tmp, "base.csv")
        make_file(base, header, rows, FILE_MB << 20)
        size = os.path.getsize(base)
        data = os.path.join(tmp, "data")
        os.mkdir(data)
        paths = []
        for i in range(max(1, TOTAL_MB // FILE_MB)):
            paths.append(os.path.join(data, f"tw-{i:04d}.csv"))
            os.link(base, paths[-1])
        # Memory as the input grows: one file, then all of them.
        _, _, rss_small = run_report(paths[:1])
        _, _, rss_large = run_report(paths)
        report_walls, report_cpus, pandas_walls = [], [], []
        pandas_paths = paths[:2]  # pandas holds everything in memory: compare MB/s on 256 MB
        for _ in range(REPS):  # interleaved
            wall, cpu, _ = run_report(paths)
            report_walls.append(wall)
            report_cpus.append(cpu)
            pandas_walls.append(pandas_report(pandas_paths))
        # --diff: the same files as BASE and as NEW (each run read once: twice the bytes).
        diff_options = [arg for p in paths for arg in ("--diff", p)]
        diff_runs = [run_report(paths, diff_options) for _ in range(REPS)]
        diff_mbs = 2 * size * len(paths) / 1e6 / statistics.median(r[0] for r in diff_runs)
        engines = {}
        for engine in ("duckdb", "polars"):
            runs = [engine_report(engine, paths) for _ in range(REPS)]
            if runs[0] is not None:
                engines[engine] = {"mb_s_wall": round(size * len(paths) / 1e6 / statistics.median(r[0] for r in runs), 1),
                                   "max_rss_mb": runs[0][1] and round(max(r[1] for r in runs), 1)}
        total = size * len(paths) / 1e6
        # --folded, --flamegraph and --html (#25): the stacks are built as the rows stream by;
        # memory on one file and on all of them shows whether it stays flat.
        views = {}
        for name, option, target in (("folded", "--folded", "stacks.folded"),
                                     ("flamegraph", "--flamegraph", "flame.svg"), ("html", "--html", "report.html")):
            extra = (option, os.path.join(tmp, target))
            _, _, view_rss_small = run_report(paths[:1], extra)
            runs = [run_report(paths, extra) for _ in range(REPS)]
            views[name] = {"mb_s_wall": round(total / statistics.median(r[0] for r in runs), 1),
                           "mb_s_cpu": round(total / statistics.median(r[1] for r in runs), 1),
                           "max_rss_mb_one_file": view_rss_small and round(view_rss_small, 1),
                           "max_rss_mb_all_files": runs[0][2] and round(max(r[2] for r in runs), 1),
                           "output_kb": round(os.path.getsize(os.path.join(tmp, target)) / 1024, 1)}
        # -j N (#39): the same files on 1 and on 2 threads.
        jobs = jobs_throughput(paths)
        report_mbs = total / statistics.median(report_walls)
        report_cpu_mbs = total / statistics.median(report_cpus)
        pandas_mbs = size * len(pandas_paths) / 1e6 / statistics.median(pandas_walls)
        results = {
            "input_mb": round(total, 1), "files": len(paths), "reps": REPS,
            "tw_report_mb_s_wall": round(report_mbs, 1), "tw_report_mb_s_cpu": round(report_cpu_mbs, 1),
            "pandas_mb_s_wall": round(pandas_mbs, 1), "speedup_vs_pandas": round(report_mbs / pandas_mbs, 1),
            "max_rss_mb_one_file": rss_small and round(rss_small, 1),
            "max_rss_mb_all_files": rss_large and round(rss_large, 1),
            "engines": engines,
            "views": views,
            "jobs": jobs,
            "diff_mb_s_wall": round(diff_mbs, 1), "diff_max_rss_mb": diff_runs[0][2] and round(max(r[2] for r in diff_runs), 1),
        }
    print(f"tw-report on {results['input_mb']:.0f} MB ({results['files']} files, median of {REPS}, default -j: "
          f"{os.cpu_count()} CPUs): "
          f"{results['tw_report_mb_s_wall']:.0f} MB/s wall, {results['tw_report_mb_s_cpu']:.0f} MB/s of CPU time; "
          f"pandas.read_csv + groupby: {results['pandas_mb_s_wall']:.0f} MB/s -> {results['speedup_vs_pandas']}x; "
          f"max RSS {results['max_rss_mb_one_file']} MB on {FILE_MB} MB, "
          f"{results['max_rss_mb_all_files']} MB on {results['input_mb']:.0f} MB (GNU time)")
    print(f"tw-report --diff, the {results['input_mb']:.0f} MB as BASE and as NEW: {results['diff_mb_s_wall']:.0f} MB/s "
          f"wall over both, max RSS {results['diff_max_rss_mb']} MB")
    for engine, row in results["engines"].items():
        print(f"  the same table through torchwrapper.{'sql' if engine == 'duckdb' else 'load'} with {engine}, "
              f"on all {results['input_mb']:.0f} MB: {row['mb_s_wall']:.0f} MB/s, max RSS {row['max_rss_mb']} MB")
    for name, row in results["views"].items():
        print(f"  tw-report --{name} on all {results['input_mb']:.0f} MB: {row['mb_s_wall']:.0f} MB/s wall, "
              f"{row['mb_s_cpu']:.0f} MB/s of CPU time; max RSS {row['max_rss_mb_one_file']} MB on {FILE_MB} MB, "
              f"{row['max_rss_mb_all_files']} MB on {results['input_mb']:.0f} MB; output {row['output_kb']} KB")
    print_jobs(results["jobs"])
    out = os.environ.get("BENCH_REPORT_JSON", os.path.join(BUILD, "build", "bench-report.json"))
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(results, f, indent=1)
    return results


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
