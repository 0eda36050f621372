# SPDX-License-Identifier: MIT
"""Which files of an output directory are what: the record files of a source (a directory, a file,
or a list of them) by kind (calls, gpu, stats, updates) and format, a process's files from its
manifest, the sites and summary files beside them. The one place every reader finds its files:
load()'s pandas path (_files.py), Polars and DuckDB (_engines.py) and Spark (spark.py) import it,
and it imports none of them. A file's kind comes from the C reader (_core.record_kind), as
tw-report decides it. (Not to be confused with _discover.py, which finds torch's APIs.)"""
from __future__ import annotations

import csv
import json
import os
import re
from typing import Dict, Iterable, List, Optional, Tuple, Union

from . import _core

Source = Union[str, os.PathLike, Iterable[Union[str, os.PathLike]]]

RECORD_EXTENSIONS = (".csv", ".jsonl")
MODULES_FILE = "modules.json"   # the module tree (modules-PID.json in a forked child)
SITES_FILE_RE = re.compile(r"^sites(-\d+)?\.json$")   # sites.json, or sites-PID.json beside manifest-PID.json


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


def paths(source: Source) -> List[str]:
    """The record files (*.csv, *.jsonl) of source: each directory's in name order, files as given.
    ValueError for a directory without any, FileNotFoundError for a path that does not exist."""
    if isinstance(source, (str, os.PathLike)):
        source = [source]
    found: List[str] = []
    for item in source:
        item = os.fspath(item)
        if os.path.isdir(item):
            names = sorted(os.path.join(item, n) for n in os.listdir(item) if n.endswith(RECORD_EXTENSIONS))
            if not names:
                raise ValueError(f"{item} holds no record files (*.csv or *.jsonl written by TorchWrapper)")
            found.extend(names)
        elif os.path.exists(item):
            found.append(item)
        else:
            raise FileNotFoundError(f"no such record file or directory: {item}")
    return found


def kind(path: str) -> Optional[str]:
    """'calls', 'gpu', 'stats' or 'updates' from a file's first line; None for an empty file (or one
    torn line). ValueError naming the file when it is not one of ours."""
    return _core.record_kind(path)


def files_by_kind(source: Source, kinds: Tuple[str, ...] = ("calls", "gpu")) -> Dict[Tuple[str, str], List[str]]:
    """{(kind, "csv"|"json"): paths} of the record files of those kinds in source."""
    found: Dict[Tuple[str, str], List[str]] = {}
    for path in paths(source):
        k = kind(path)
        if k in kinds:
            found.setdefault((k, "csv" if path.endswith(".csv") else "json"), []).append(path)
    return found


def csv_by_header(csv_paths: List[str]) -> Dict[Tuple[str, ...], List[str]]:
    """CSV files grouped by their header: files of an older version lack the newer columns."""
    groups: Dict[Tuple[str, ...], List[str]] = {}
    for path in csv_paths:
        with open(path, encoding="utf-8", newline="") as f:
            header = tuple(next(csv.reader([f.readline()]), []))
        groups.setdefault(header, []).append(path)
    return groups


def whole_lines(path: str) -> Tuple[bytes, int]:
    """The file's bytes up to its last line end, and 1 if a torn last line (a killed process) was cut
    (for the engines whose readers stop at a torn line)."""
    with open(path, "rb") as f:
        data = f.read()
    if not data or data.endswith(b"\n"):
        return data, 0
    cut = data.rfind(b"\n") + 1
    return data[:cut], int(bool(data[cut:].strip()))


def ends_whole(path: str) -> bool:
    """Whether the file is empty or ends with a line end (not a torn line)."""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        if f.tell() == 0:
            return True
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


def directories(record_paths: Iterable[str]) -> List[str]:
    """The directories of record files, each once, in name order."""
    return sorted({os.path.dirname(os.path.abspath(p)) for p in record_paths})


def sites_files(directory: str) -> List[str]:
    """The sites files of a directory (sites.json, sites-PID.json), in name order."""
    return [os.path.join(directory, n) for n in sorted(os.listdir(directory)) if SITES_FILE_RE.match(n)]


def summary_files(source: Source) -> List[str]:
    """The summary.json / summary-PID.json files of the directories in source."""
    dirs = [source] if isinstance(source, (str, os.PathLike)) else list(source)
    found = []
    for d in dirs:
        d = os.fspath(d)
        if os.path.isdir(d):
            found += sorted(os.path.join(d, n) for n in os.listdir(d)
                            if n.startswith("summary") and n.endswith(".json"))
    return found


__all__ = ["csv_by_header", "directories", "ends_whole", "files_by_kind", "kind", "MODULES_FILE", "paths",
           "RECORD_EXTENSIONS", "record_files", "sites_files", "SITES_FILE_RE", "summary_files", "whole_lines"]
