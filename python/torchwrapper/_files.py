# SPDX-License-Identifier: MIT
"""Reading record files back (CSV or JSON lines), as written by the C writer: call records, GPU
records, the streams of tracing (stats, updates) and the module tree; and Record, one call."""
from __future__ import annotations

import csv
import io
import json
import os
import re
import warnings
from typing import Any, Dict, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union

from . import _schema

RECORD_EXTENSIONS = (".csv", ".jsonl")
MODULES_FILE = "modules.json"   # the module tree (modules-PID.json in a forked child)

# Columns and types of every kind, from the one schema (_schema.py; torchwrapper.schema()): the
# Python writers of the "stats" and "updates" streams take their columns from here too.
STATS_COLUMNS = _schema.columns("stats")
UPDATES_COLUMNS = _schema.columns("updates")
CALL_DTYPES = _schema.pandas_dtypes("calls")
GPU_DTYPES = _schema.pandas_dtypes("gpu")


class Record(NamedTuple):
    """One call, as read back from a session (times in nanoseconds)."""

    call_id: int
    api: str
    start_ns: int
    cost_ns: int
    self_ns: int
    gpu_ns: int
    tid: int
    depth: int
    parent_id: int
    error: bool
    args: str = ""
    module: Optional[str] = None  # instance path of an nn.Module forward ("" for the model itself)
    step: int = -1                # the step the call began in, from 0 (-1: a file older than the column)
    site: int = 0                 # where the program made the call: an id of the sites file (0: none)
    pid: int = 0                  # the process that made the call
    fwd_call_id: int = 0          # an autograd node's forward call (its call_id; 0: none, or not a node)
    fwd_api: str = ""             # that forward call's API

    # Fields are read by name, never by position: columns were appended before (step, site) and will
    # be again, and a row unpacked by position silently shifts (callRecords' Arguments became the step).


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


def iter_rows(path: str) -> Iterator[Record]:
    """The call records of one file as Records, each field read by its column's name (a file of an
    older version lacks some columns: the schema's missing value; a newer one may add columns: they
    are left out).

    module is the instance path of an nn.Module forward ("" for the model itself), else None; step
    the step the call began in (from 0), -1 in files written before the column; site the call site's
    id in the process's sites file, 0 for none and in files written before the column. A line torn by
    a killed process is skipped.
    """
    if path.endswith(".csv"):
        yield from _iter_csv_rows(path)
        return
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                o = json.loads(line)
                yield Record(**{field: o[field] if field in o else _ABSENT[field] for field in _FIELDS})
            except (ValueError, KeyError, TypeError):
                continue  # a line torn by a killed process


def _iter_csv_rows(path: str) -> Iterator[Record]:
    with open(path, newline="", encoding="utf-8") as f:
        raw: List[str] = []

        def lines() -> Iterator[str]:
            # The csv module reads "" and an empty field alike, and the root module is written ""
            # (no module: empty): the record's own text tells them apart. The reader takes exactly
            # the physical lines of one record before it yields it.
            for line in f:
                raw.append(line)
                yield line

        reader = csv.reader(lines())
        header = next(reader, None) or []
        at = {name: i for i, name in enumerate(header)}   # by name: other versions add columns
        missing = [name for name in _FIELDS if name not in at and name not in _ABSENT]
        if missing:
            raise ValueError(f"{path}: no column {missing[0]!r} in its header {header!r}")
        present = [(name, at[name], _CSV_DECODE[name]) for name in _FIELDS if name in at and name != "module"]
        absent = {name: _ABSENT[name] for name in _FIELDS if name not in at}
        m = at.get("module")
        raw.clear()
        for row in reader:
            text = "".join(raw)
            raw.clear()
            try:
                values = {name: decode(row[i]) for name, i, decode in present}
                if m is not None:
                    values["module"] = row[m] if row[m] else ("" if _csv_field_quoted(text, m) else None)
                yield Record(**values, **absent)
            except (IndexError, ValueError):
                continue  # a line torn by a killed process


def _csv_field_quoted(text: str, index: int) -> bool:
    """Whether field index of one CSV record's text was written quoted (RFC 4180: a quoted field
    starts with a quote, and its quotes are doubled inside)."""
    at = 0
    for _ in range(index):
        if text.startswith('"', at):
            at += 1
            while True:   # to the quote that ends the field: a doubled one is part of it
                at = text.find('"', at)
                if at < 0:
                    return False
                if not text.startswith('"', at + 1):
                    break
                at += 2
            at += 1
        at = text.find(",", at)
        if at < 0:
            return False
        at += 1
    return text.startswith('"', at)


# The fields of a Record, each from the column of that name (the schema's "calls"); a column a file
# lacks reads as the schema's missing value for it; the in-memory session has no pid column.
_FIELDS = tuple(Record._fields)
_ABSENT: Dict[str, Any] = {c["name"]: c["missing"] for c in _schema.schema()["kinds"]["calls"]["columns"]
                           if "missing" in c}
_ABSENT["module"] = None      # a file older than the module column: no module known
_CSV_DECODE: Dict[str, Any] = {name: int for name in _FIELDS}
_CSV_DECODE.update(api=str, args=str, module=str, fwd_api=str, error=lambda text: text == "1")
assert set(_FIELDS) == set(_schema.columns("calls")), "Record and the schema's calls columns differ"


def read_rows(paths: List[str]) -> List[Record]:
    """Every call record of the files (see iter_rows), in the order the calls started."""
    rows = [row for path in paths for row in iter_rows(path)]
    rows.sort(key=lambda r: (r.start_ns, r.pid, r.call_id))
    return rows


def _kind(path: str) -> Optional[str]:
    """'calls' or 'gpu' from a file's first line; None for an empty file. ValueError if not ours."""
    with open(path, "rb") as f:
        first = f.readline(1 << 16)
    if not first.strip():
        return None
    if first.lstrip().startswith(b"{"):
        try:
            keys = set(json.loads(first))
        except ValueError:
            keys = {k for k in ("call_id", "cost_ns", "end_ns") if f'"{k}"'.encode() in first}  # a torn first line
    else:
        keys = set(first.decode("utf-8", "replace").strip().split(","))
    if {"call_id", "api", "start_ns", "cost_ns"} <= keys:
        return "calls"
    if {"call_id", "kind", "start_ns", "end_ns"} <= keys:
        return "gpu"
    if {"call_id", "step", "module", "tensor"} <= keys:
        return "stats"     # tensor statistics (tracing): see load_stats()
    if {"call_id", "parameter", "version"} <= keys:
        return "updates"   # parameter updates (tracing): see load_updates()
    raise ValueError(f"{path} is not a TorchWrapper record file: its first line is {first[:120]!r} (expected the "
                     "columns call_id,api,start_ns,cost_ns,... or call_id,api,kind,name,start_ns,end_ns,...)")


def _whole_lines(path: str) -> Tuple[bytes, int]:
    """The file's bytes up to its last line end, and 1 if a torn last line (a killed process) was cut."""
    with open(path, "rb") as f:
        data = f.read()
    if not data or data.endswith(b"\n"):
        return data, 0
    cut = data.rfind(b"\n") + 1
    return data[:cut], int(bool(data[cut:].strip()))


def _frame(path: str, kind: str):
    import pandas

    dtypes = _schema.pandas_dtypes(kind)
    data, torn = _whole_lines(path)
    columns = list(dtypes)
    try:
        if path.endswith(".jsonl"):
            frame = pandas.read_json(io.BytesIO(data), lines=True, dtype=False) if data.strip() else \
                pandas.DataFrame(columns=columns)
        else:
            frame = pandas.read_csv(io.BytesIO(data), dtype=str, keep_default_na=False, na_filter=False,
                                    engine="c")
        for column in columns:  # a file written by an older version may lack a column
            if column not in frame:
                frame[column] = _schema.missing_value(kind, column)
        frame = frame[columns]  # columns of a newer version are left out
        if not path.endswith(".jsonl"):
            frame["error"] = frame["error"] == "1" if "error" in frame else False
        frame = frame.astype({c: t for c, t in dtypes.items() if t != "str"})
    except (ValueError, pandas.errors.ParserError):
        # A corrupt row somewhere: the tolerant row reader skips it (calls only).
        if kind != "calls":
            raise ValueError(f"{path}: a row does not parse as a GPU record")
        # (iter_rows gives every column of the schema, those an older file lacks included)
        frame = pandas.DataFrame([row._asdict() for row in iter_rows(path)], columns=list(_FIELDS))
        frame = frame[columns].astype({c: t for c, t in dtypes.items() if t != "str"})
    return frame, torn


SITES_FILE_RE = re.compile(r"^sites(-\d+)?\.json$")   # sites.json, or sites-PID.json beside manifest-PID.json


def load_sites(out_dir: str) -> Dict[Tuple[int, int], Dict[str, Any]]:
    """The call sites written in out_dir: {(pid, site id): {"file", "line", "function", "text"}} from
    every process's sites file (sites.json, sites-PID.json). The record's site column is the id."""
    sites: Dict[Tuple[int, int], Dict[str, Any]] = {}
    for name in sorted(os.listdir(out_dir)):
        if not SITES_FILE_RE.match(name):
            continue
        with open(os.path.join(out_dir, name), encoding="utf-8") as f:
            data = json.load(f)
        pid = int(data.get("pid", -1))
        for key, site in data.get("sites", {}).items():
            sites[pid, int(key)] = site
    return sites


def _site_texts(paths: List[str], frame: Any) -> Any:
    """The site_text column of frame: each call's site as "file:line function" from the sites files
    beside its record files, "" for none."""
    sites: Dict[Tuple[int, int], Dict[str, Any]] = {}
    for directory in sorted({os.path.dirname(os.path.abspath(p)) for p in paths}):
        sites.update(load_sites(directory))
    if not sites or frame.empty:
        return [""] * len(frame)
    text = {key: site.get("text", "") for key, site in sites.items()}
    return [text.get((pid, site), "") if site else "" for pid, site in zip(frame["pid"].tolist(),
                                                                           frame["site"].tolist())]


def _paths(source: Union[str, os.PathLike, Iterable[Union[str, os.PathLike]]]) -> List[str]:
    if isinstance(source, (str, os.PathLike)):
        source = [source]
    paths: List[str] = []
    for item in source:
        item = os.fspath(item)
        if os.path.isdir(item):
            found = sorted(os.path.join(item, n) for n in os.listdir(item) if n.endswith(RECORD_EXTENSIONS))
            if not found:
                raise ValueError(f"{item} holds no record files (*.csv or *.jsonl written by TorchWrapper)")
            paths.extend(found)
        elif os.path.exists(item):
            paths.append(item)
        else:
            raise FileNotFoundError(f"no such record file or directory: {item}")
    return paths


def load(source: Union[str, os.PathLike, Iterable[Union[str, os.PathLike]]], *, original_names: bool = False,
         engine: str = "pandas", connection: Any = None):
    """Every call record in source (an out_dir, a record file, or a list of them; all processes and
    ranks) as one pandas DataFrame, in the order the calls started.

    engine="polars" gives a Polars LazyFrame instead (scan_csv / scan_ndjson with the schema's types),
    engine="duckdb" a DuckDB relation (read_csv / read_json with explicit columns; in ``connection``
    if given): the same columns and rows, read lazily, for runs larger than memory; api is a plain
    string there, and module is null for calls that are not module forwards.

    Columns: call_id, api, start_ns, cost_ns, self_ns, gpu_ns, pid, tid, depth, parent_id, error, args,
    module, step and site, and site_text (typed: int64, bool, str; api is categorical; module is the instance path of an nn.Module
    forward, "" for the model itself and, in CSV files, for other calls, which JSON files give as
    None; files of an older version lack it: ""), step (the step the call began in, counted from 0;
    -1 in files written before the column), site (where the program made the call: an id of the sites
    file, 0 for none; config sites) and site_text, that site as "file:line function" from the sites
    files (sites.json, sites-PID.json) beside the record files ("" for none; the polars and duckdb
    engines give the site id only: join load_sites()). Tracing streams in the directory (stats, updates)
    are not records: see load_stats() and load_updates(). When the directory holds GPU records, gpu_ns is the
    GPU time of the kernels, copies and memsets each call launched itself. A torn last line (a killed
    process) is skipped, with one warning giving the count. original_names=True gives the original
    TorchWrapper's columns instead (API Name, Total Time (ms), Call Number, ...)."""
    if engine != "pandas":
        if engine not in ("polars", "duckdb"):
            raise ValueError(f"engine={engine!r} is not accepted: give 'pandas', 'polars' or 'duckdb'")
        if original_names:
            raise ValueError("original_names=True is for engine='pandas'")
        from . import _engines

        return _engines.load_polars(source) if engine == "polars" else _engines.load_duckdb(source, connection)
    import pandas

    calls, gpus, torn = [], [], 0
    paths = _paths(source)
    for path in paths:
        kind = _kind(path)
        if kind not in ("calls", "gpu"):
            continue   # empty, or a tracing stream
        frame, cut = _frame(path, kind)
        torn += cut
        (calls if kind == "calls" else gpus).append(frame)
    if torn:
        warnings.warn(f"torchwrapper.load: skipped {torn} torn last line(s) (a process killed while writing)",
                      stacklevel=2)
    frame = pandas.concat(calls, ignore_index=True) if calls else pandas.DataFrame(
        {c: pandas.Series(dtype=t if t != "str" else object) for c, t in CALL_DTYPES.items()})
    if gpus:
        gpu = pandas.concat(gpus, ignore_index=True)
        gpu = gpu[gpu["call_id"] != 0]
        per_call = (gpu["end_ns"] - gpu["start_ns"]).clip(lower=0).groupby([gpu["pid"], gpu["call_id"]]).sum()
        per_call.name = "gpu_from_records"
        frame = frame.join(per_call, on=["pid", "call_id"])
        frame["gpu_ns"] = frame.pop("gpu_from_records").fillna(0).astype("int64")
    frame = frame.sort_values(["start_ns", "pid", "call_id"], kind="stable").reset_index(drop=True)
    frame["api"] = frame["api"].astype("category")
    frame["site_text"] = _site_texts(paths, frame)
    return original_frame(frame) if original_names else frame


# The original tool's DataFrame columns first, then ours.
ORIGINAL_COLUMNS = ["API Name", "Total Time (ms)", "Call Number", "Start Timestamp", "Cost Time (ms)", "Arguments",
                    "Self Time (ms)", "GPU Time (ms)", "Thread", "PID", "Depth", "Call ID", "Parent ID", "Error",
                    "Module", "Step", "Forward Call ID", "Forward API"]


def original_frame(frame):
    """A frame of load() with the original TorchWrapper's column names and units (ms)."""
    import pandas

    api = frame["api"].astype(str)
    return pandas.DataFrame({
        "API Name": api,
        "Total Time (ms)": frame.groupby(api)["cost_ns"].transform("sum") / 1e6,
        "Call Number": frame.groupby(api).cumcount() + 1,
        "Start Timestamp": frame["start_ns"],
        "Cost Time (ms)": frame["cost_ns"] / 1e6,
        "Arguments": frame["args"],
        "Self Time (ms)": frame["self_ns"] / 1e6,
        "GPU Time (ms)": frame["gpu_ns"] / 1e6,
        "Thread": frame["tid"],
        "PID": frame["pid"],
        "Depth": frame["depth"],
        "Call ID": frame["call_id"],
        "Parent ID": frame["parent_id"],
        "Error": frame["error"],
        "Module": frame["module"],
        "Step": frame["step"],
        # autograd nodes (config aten "backward"): the forward call that created them; 0 and "" else
        "Forward Call ID": frame["fwd_call_id"] if "fwd_call_id" in frame else 0,
        "Forward API": frame["fwd_api"] if "fwd_api" in frame else "",
    }, columns=ORIGINAL_COLUMNS)


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


# ---- the streams of tracing: stats, updates, the module tree --------------------------------------

_TEXT_COLUMNS = frozenset(["module", "class", "tensor", "name", "dtype", "device", "api", "parameter", "attribute"])


def _decode(text: Optional[str], column: str) -> Any:
    """A CSV field of a stats or updates row as its value."""
    if text is None or column in ("module", "name"):   # "": the model itself, an output that is one tensor
        return text
    if text == "":
        return None
    if column in _TEXT_COLUMNS:
        return text
    if text[0] in "[{":
        return json.loads(text)
    try:
        return int(text)
    except ValueError:
        return float(text)


def read_stream(out_dir: str, kind: str, columns: Sequence[str], pid: Optional[int] = None) -> List[tuple]:
    """The rows of a stream ("stats", "updates") of out_dir's files (of one process if pid is given),
    as tuples of values in the order of columns; JSON nulls and empty CSV fields are None."""
    rows = []
    # columns a file of an older version lacks: the schema's missing value (site: 0), else None
    absent = {c["name"]: c["missing"] for c in _schema.schema()["kinds"][kind]["columns"] if "missing" in c}
    for path in record_files(out_dir, pid, kind=kind):
        csv_file = path.endswith(".csv")
        for row in iter_stream_rows(path):
            rows.append(tuple((_decode(row[c], c) if csv_file else row[c]) if c in row else absent.get(c)
                              for c in columns))
    return rows


def load_stats(out_dir: str, pid: Optional[int] = None, engine: str = "pandas") -> Any:
    """The tensor statistics written in out_dir (all processes, or one) as a DataFrame (columns:
    STATS_COLUMNS; shape as a tuple). engine="polars": a Polars LazyFrame of all processes, typed
    from the schema (shape a list of integers in JSON files, its text in CSV ones)."""
    if engine != "pandas":
        return _stream_engine(out_dir, pid, engine, "stats")
    import pandas

    frame = pandas.DataFrame(read_stream(out_dir, "stats", STATS_COLUMNS, pid), columns=STATS_COLUMNS)
    frame["shape"] = frame["shape"].map(lambda s: tuple(s) if isinstance(s, list) else s)
    return frame


def load_updates(out_dir: str, pid: Optional[int] = None, engine: str = "pandas") -> Any:
    """The parameter updates written in out_dir (all processes, or one) as a DataFrame (columns:
    UPDATES_COLUMNS); engine="polars": a Polars LazyFrame of all processes, typed from the schema."""
    if engine != "pandas":
        return _stream_engine(out_dir, pid, engine, "updates")
    import pandas

    return pandas.DataFrame(read_stream(out_dir, "updates", UPDATES_COLUMNS, pid), columns=UPDATES_COLUMNS)


def _stream_engine(out_dir: str, pid: Optional[int], engine: str, kind: str) -> Any:
    if engine != "polars" or pid is not None:
        raise ValueError(f"engine={engine!r} (pid={pid!r}) is not accepted for {kind}: give engine 'pandas', or "
                         "'polars' for all processes (DuckDB: torchwrapper.sql's views)")
    from ._engines import _files, _import, _polars_kind

    pl = _import("polars")
    frame = _polars_kind(pl, _files(out_dir, (kind,)), kind)
    return frame if frame is not None else pl.LazyFrame(schema=_schema.polars_schema(kind))


def load_modules(out_dir: str, pid: Optional[int] = None) -> Dict[str, Any]:
    """The module tree in out_dir/modules.json (modules-PID.json for a forked child's pid)."""
    name = MODULES_FILE if pid is None else f"modules-{pid}.json"
    path = os.path.join(out_dir, name)
    if pid is not None and not os.path.exists(path):
        path = os.path.join(out_dir, MODULES_FILE)
    with open(path) as f:
        return json.load(f)


__all__ = ["iter_rows", "iter_stream_rows", "load", "load_modules", "load_sites", "SITES_FILE_RE", "load_stats", "load_updates", "MODULES_FILE",
           "ORIGINAL_COLUMNS", "original_frame", "read_rows", "read_stream", "Record", "RECORD_EXTENSIONS",
           "record_files", "STATS_COLUMNS", "UPDATES_COLUMNS"]
