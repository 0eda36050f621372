# SPDX-License-Identifier: MIT
"""torchwrapper.load() and iter_rows() on a run of ~1M call records, CSV and JSON lines, against
pandas.read_csv (the reader load() was built on before #36) on the same files. Run by `make bench`
(BENCH=quick: 1M rows a format; BENCH=full: 4M; BENCH=smoke: 20,000, once); writes build/bench-load.json.

The record set is a real profiled training loop's rows (module paths of the forwards, argument summaries),
repeated with fresh call ids and times, in four files a format; each measure is the median of
REPS runs, the readers interleaved so that a noisy neighbour costs each alike.
"""
from __future__ import annotations

import csv
import gc
import json
import os
import statistics
import sys
import tempfile
import time

import torch

import torchwrapper as tw
from torchwrapper._files import iter_rows

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from modes import sized  # noqa: E402  (this folder's: BENCH)

ROWS = sized(20_000, 1_000_000, 4_000_000)
FILES = 4
REPS = sized(1, 3, 5)
BUILD = os.environ.get("top_builddir", ".")


def real_lines(tmp, fmt):
    """The header (CSV; None for JSON) and record lines of a real MLP training loop."""
    def train():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
        optimizer = torch.optim.Adam(model.parameters())
        for _ in range(20):
            loss = torch.nn.functional.cross_entropy(model(torch.randn(32, 64)), torch.randint(0, 10, (32,)))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    out = os.path.join(tmp, f"run-{fmt}")
    tw.TorchWrapper({"out_dir": out, "format": fmt}).start(train)
    header, lines = None, []
    for name in sorted(os.listdir(out)):
        if name.endswith((".csv", ".jsonl")) and ".stats." not in name and ".updates." not in name:
            with open(os.path.join(out, name), encoding="utf-8") as f:
                first = f.readline()
                if fmt == "csv":
                    header = first
                else:
                    lines.append(first)
                lines += f.readlines()
    return header, lines


def write_set(directory, fmt, header, lines):
    """FILES files of ROWS rows in all: the lines repeated, call ids and start times shifted."""
    os.makedirs(directory)
    if fmt == "csv":
        rows = list(csv.reader(lines))
    else:
        rows = [json.loads(line) for line in lines]
    ids = max(int(r[0]) if fmt == "csv" else r["call_id"] for r in rows)
    starts = [int(r[2]) if fmt == "csv" else r["start_ns"] for r in rows]
    span = max(starts) - min(starts) + 1
    per_file = ROWS // FILES
    block = 0
    for i in range(FILES):
        with open(os.path.join(directory, f"tw-{i:04d}.{'csv' if fmt == 'csv' else 'jsonl'}"), "w",
                  newline="", encoding="utf-8") as f:
            if fmt == "csv":
                f.write(header)
                writer = csv.writer(f, lineterminator="\n")
            written = 0
            while written < per_file:
                for r in rows[:per_file - written]:
                    if fmt == "csv":
                        r = list(r)
                        r[0] = str(int(r[0]) + block * ids)
                        r[2] = str(int(r[2]) + block * span)
                        writer.writerow(r)
                    else:
                        r = dict(r, call_id=r["call_id"] + block * ids, start_ns=r["start_ns"] + block * span)
                        f.write(json.dumps(r, separators=(",", ":")) + "\n")
                written += min(len(rows), per_file - written)
                block += 1


def timed(fn):
    gc.collect()
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def pandas_read_csv(paths):
    """What load()'s pandas path did before #36 for each CSV file: read_csv as text, then typed; the
    sparse columns (flops, mem_*: an empty field where a record has none) given their missing value
    first, as load() gives it (an empty field does not cast to int64)."""
    import pandas

    dtypes = {c: t for c, t in tw._files.CALL_DTYPES.items() if t != "str"}
    sparse = {c["name"]: str(c["missing"]) for c in tw.schema()["kinds"]["calls"]["columns"] if c.get("sparse")}
    frames = []
    for path in paths:
        frame = pandas.read_csv(path, dtype=str, keep_default_na=False, na_filter=False, engine="c")
        frame["error"] = frame["error"] == "1"
        for column, missing in sparse.items():
            if column in frame:
                frame[column] = frame[column].mask(frame[column] == "", missing)
        frames.append(frame.astype(dtypes))
    return pandas.concat(frames, ignore_index=True)


def main():
    results = {"rows": ROWS, "files": FILES, "reps": REPS, "formats": {}}
    with tempfile.TemporaryDirectory(prefix="tw-bench-load-") as tmp:
        for fmt in ("csv", "json"):
            header, lines = real_lines(tmp, fmt)
            directory = os.path.join(tmp, fmt)
            write_set(directory, fmt, header, lines)
            paths = sorted(os.path.join(directory, n) for n in os.listdir(directory))
            size = sum(os.path.getsize(p) for p in paths)
            loads, rows, reads = [], [], []
            for _ in range(REPS):   # interleaved
                seconds, frame = timed(lambda: tw.load(directory))
                loads.append(seconds)
                assert len(frame) == ROWS, (len(frame), ROWS)
                del frame
                seconds, count = timed(lambda: sum(1 for p in paths for _ in iter_rows(p)))
                rows.append(seconds)
                assert count == ROWS, (count, ROWS)
                if fmt == "csv":
                    seconds, frame = timed(lambda: pandas_read_csv(paths))
                    reads.append(seconds)
                    del frame
            entry = {"mb": round(size / 1e6, 1),
                     "load_s": round(statistics.median(loads), 3),
                     "load_rows_per_s": round(ROWS / statistics.median(loads)),
                     "iter_rows_s": round(statistics.median(rows), 3),
                     "iter_rows_rows_per_s": round(ROWS / statistics.median(rows))}
            if reads:
                entry["pandas_read_csv_s"] = round(statistics.median(reads), 3)
            results["formats"][fmt] = entry
            print(f"{fmt}: {ROWS} rows, {entry['mb']} MB: load() {entry['load_s']} s, iter_rows "
                  f"{entry['iter_rows_s']} s" + (f", pandas.read_csv {entry['pandas_read_csv_s']} s" if reads else ""),
                  flush=True)
    os.makedirs(os.path.join(BUILD, "build"), exist_ok=True)
    with open(os.path.join(BUILD, "build", "bench-load.json"), "w") as f:
        json.dump(results, f, indent=1)
    json.dump(results, sys.stdout)
    print()


if __name__ == "__main__":
    main()
