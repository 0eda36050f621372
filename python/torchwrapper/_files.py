# SPDX-License-Identifier: MIT
"""Reading record files back (CSV or JSON lines), as written by the C writer."""
from __future__ import annotations

import csv
import json
import os
from typing import Iterator, List, Optional

RECORD_EXTENSIONS = (".csv", ".jsonl")


def record_files(out_dir: str, pid: Optional[int] = None, kind: str = "calls") -> List[str]:
    """The record files in out_dir (of one process if pid is given), oldest first per manifest.

    kind: "calls" for call records, or a stream's kind ("stats", "updates", "gpu").
    """
    names = []
    for manifest in sorted(f for f in os.listdir(out_dir) if f.startswith("manifest") and f.endswith(".json")):
        with open(os.path.join(out_dir, manifest)) as f:
            m = json.load(f)
        if pid is not None and m.get("pid") != pid:
            continue
        names.extend(entry["name"] for entry in m.get("files", [])
                     if not entry.get("removed_by_max_files") and entry.get("kind", "calls") == kind)
    return [os.path.join(out_dir, n) for n in names if os.path.exists(os.path.join(out_dir, n))]


def iter_rows(path: str) -> Iterator[tuple]:
    """(call_id, api, start_ns, cost_ns, self_ns, gpu_ns, pid, tid, depth, parent_id, error, args, module).

    module is the instance path of an nn.Module forward ("" for the model itself), else None.
    """
    if path.endswith(".csv"):
        with open(path, newline="", encoding="utf-8") as f:
            last = [""]

            def lines() -> Iterator[str]:
                # The csv module reads "" and an empty field alike, and the root module is written
                # "" (no module: empty): the last physical line of each row tells them apart.
                for line in f:
                    last[0] = line
                    yield line

            reader = csv.reader(lines())
            header = next(reader, None) or []
            has_module = len(header) > 12 and header[12] == "module"
            for row in reader:
                try:
                    module = None
                    if has_module:
                        module = row[12] if row[12] else ("" if last[0].rstrip("\r\n").endswith('""') else None)
                    yield (int(row[0]), row[1], int(row[2]), int(row[3]), int(row[4]), int(row[5]), int(row[6]),
                           int(row[7]), int(row[8]), int(row[9]), row[10] == "1", row[11], module)
                except (IndexError, ValueError):
                    continue  # a line torn by a killed process
    else:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    o = json.loads(line)
                except ValueError:
                    continue  # a line torn by a killed process
                yield (o["call_id"], o["api"], o["start_ns"], o["cost_ns"], o["self_ns"], o["gpu_ns"], o["pid"],
                       o["tid"], o["depth"], o["parent_id"], o["error"], o["args"], o.get("module"))


def read_rows(paths: List[str]) -> List[tuple]:
    """Every row of the files (see iter_rows), in the order the calls started."""
    rows = [row for path in paths for row in iter_rows(path)]
    rows.sort(key=lambda r: (r[2], r[0]))  # start_ns, then call_id
    return rows




def iter_stream_rows(path: str) -> Iterator[dict]:
    """The rows of a stream file (CSV with a header, or JSON lines) as dicts of text (CSV) or values."""
    if path.endswith(".csv"):
        with open(path, newline="", encoding="utf-8") as f:
            for row in csv.DictReader(f):
                if None in row or any(v is None for v in row.values()):
                    continue  # a torn line
                yield row
    else:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    yield json.loads(line)
                except ValueError:
                    continue


__all__ = ["RECORD_EXTENSIONS", "iter_rows", "iter_stream_rows", "read_rows", "record_files"]
