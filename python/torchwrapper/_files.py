# SPDX-License-Identifier: MIT
"""Reading record files back (CSV or JSON lines), as written by the C writer: call records, GPU
records, the model watch's streams (stats, updates) and the module tree; and Record, one call.

Call and GPU records are read by the C reader (_core.RecordReader: tw-report's), which hands over
batches of columns: its kind detection, torn-line skipping and counters are the ones here. Which
files are which is _outdir's business."""
from __future__ import annotations

import csv
import itertools
import json
import os
import warnings
from typing import Any, Dict, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union

from . import _core, _outdir, _schema
from ._outdir import MODULES_FILE, RECORD_EXTENSIONS, SITES_FILE_RE, record_files

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
    module: Optional[str] = None  # instance path of an nn.Module forward (the model's class first)
    step: int = -1                # the step the call began in, from 0 (-1: a file older than the column)
    site: int = 0                 # where the program made the call: an id of the sites file (0: none)
    pid: int = 0                  # the process that made the call
    fwd_call_id: int = 0          # an autograd node's forward call (its call_id; 0: none, or not a node)
    fwd_api: str = ""             # that forward call's API
    flops: int = 0                # the call's own floating-point operations (config flops; 0: none)
    flops_total: int = 0          # with those of the recorded calls inside it
    mem_alloc: int = 0            # bytes allocated during the call, inside calls included (config memory)
    mem_self: int = 0             # of which outside the recorded calls inside it
    mem_freed: int = 0            # bytes freed during the call
    mem_peak: int = 0             # the highest allocated total the allocator reported during it

    # Fields are read by name, never by position: columns were appended before (step, site) and will
    # be again, and a row unpacked by position silently shifts (callRecords' Arguments became the step).


def records(session: Any) -> List[Record]:
    """The records of a stopped session as ``Record`` tuples, in the order the calls started.

    (The session holds them in the order the calls ended, children before their parents.)
    """
    fields, pid = _core.RECORD_FIELDS, os.getpid()
    rows = [Record(**dict(zip(fields, row)), pid=pid) for row in session.records()]
    rows.sort(key=lambda r: (r.start_ns, r.call_id))
    return rows


def iter_rows(path: str) -> Iterator[Record]:
    """The call records of one file as Records, each field read by its column's name (a file of an
    older version lacks some columns: the schema's missing value; a newer one may add columns: they
    are left out).

    module is the instance path of an nn.Module forward (``Net.fc``; the model itself ``Net``), else
    None; step the step the call began in (from 0), -1 in files written before the column; site the
    call site's id in the process's sites file, 0 for none and in files written before the column. A
    line torn by a killed process, and a row whose fields do not parse, are skipped. ValueError
    naming the file when it does not hold call records.
    """
    for _, kind, columns in _core.RecordReader(path):
        if kind != "calls":
            raise ValueError(f"{path} holds {kind} records, not call records")
        yield from map(Record._make, zip(*(_values(columns[name], name) for name in _FIELDS)))


def _values(column: Any, name: str) -> Any:
    """A batch's column as values: numbers come as bytes of int64 (error: of 0/1), text as a list."""
    if isinstance(column, bytes):
        return memoryview(column).cast("?" if name == "error" else "q").tolist()
    return column


# The fields of a Record, each from the column of that name (the schema's "calls"); a column a file
# lacks reads as the schema's missing value for it; the in-memory session has no pid column.
_FIELDS = tuple(Record._fields)
_ABSENT: Dict[str, Any] = {c["name"]: c["missing"] for c in _schema.schema()["kinds"]["calls"]["columns"]
                           if "missing" in c}
_ABSENT["module"] = None      # a file older than the module column: no module known
assert set(_FIELDS) == set(_schema.columns("calls")), "Record and the schema's calls columns differ"


def read_rows(paths: List[str]) -> List[Record]:
    """Every call record of the files (see iter_rows), in the order the calls started."""
    rows = [row for path in paths for row in iter_rows(path)]
    rows.sort(key=lambda r: (r.start_ns, r.pid, r.call_id))
    return rows


def load_sites(out_dir: str) -> Dict[Tuple[int, int], Dict[str, Any]]:
    """The call sites written in out_dir: {(pid, site id): {"file", "line", "function", "text"}} from
    every process's sites file (sites.json, sites-PID.json). The record's site column is the id."""
    sites: Dict[Tuple[int, int], Dict[str, Any]] = {}
    for path in _outdir.sites_files(out_dir):
        pid, found = _core.read_sites(path)
        for key, site in found.items():
            sites[pid, key] = site
    return sites


def _site_texts(paths: List[str], frame: Any) -> Any:
    """The site_text column of frame: each call's site as "file:line function" from the sites files
    beside its record files, "" for none."""
    import numpy
    import pandas

    sites: Dict[Tuple[int, int], Dict[str, Any]] = {}
    for directory in _outdir.directories(paths):
        sites.update(load_sites(directory))
    texts = numpy.full(len(frame), "", dtype=object)
    if not sites or frame.empty:
        return texts
    by_pid: Dict[int, Dict[int, str]] = {}
    for (pid, key), site in sites.items():
        by_pid.setdefault(pid, {})[key] = site.get("text", "")
    pids, ids = frame["pid"].to_numpy(), frame["site"].to_numpy()
    for pid, text in by_pid.items():   # a few processes: one vectorised lookup each
        rows = (pids == pid) & (ids != 0)
        if rows.any():
            texts[rows] = pandas.Series(ids[rows]).map(text).fillna("").to_numpy(dtype=object)
    return texts


def _columns(chunks: Dict[str, List[Any]], kind: str) -> Dict[str, Any]:
    """One kind's batches (_core.RecordReader's) as {column: array} of the schema's pandas types."""
    import numpy

    data: Dict[str, Any] = {}
    for name, type_ in _schema.pandas_dtypes(kind).items():
        parts = chunks.get(name, [])
        if type_ == "str":
            data[name] = numpy.fromiter(itertools.chain.from_iterable(parts), dtype=object,
                                        count=sum(map(len, parts)))
        else:   # bytes of int64 (or of 0/1): one copy, writable (a frame's users may assign into it)
            data[name] = numpy.frombuffer(bytearray().join(parts), dtype=numpy.bool_ if type_ == "bool" else numpy.int64)
    return data


def load(source: Union[str, os.PathLike, Iterable[Union[str, os.PathLike]]], *, original_names: bool = False,
         engine: str = "pandas", connection: Any = None):
    """Every call record in source (an out_dir, a record file, or a list of them; all processes and
    ranks) as one pandas DataFrame, in the order the calls started.

    engine="polars" gives a Polars LazyFrame instead (scan_csv / scan_ndjson with the schema's types),
    engine="duckdb" a DuckDB relation (read_csv / read_json with explicit columns; in ``connection``
    if given): the same columns and rows, read lazily, for runs larger than memory; api is a plain
    string there, and module is null for calls that are not module forwards.

    Columns: call_id, api, start_ns, cost_ns, self_ns, gpu_ns, pid, tid, depth, parent_id, error, args,
    module, step and site, and site_text, flops, flops_total, memory and input_shapes (typed: int64, bool,
    str; api is categorical; module is the instance path of an nn.Module
    forward, its model's class first (``GPT2LMHeadModel.transformer.h.0``, the model itself
    ``GPT2LMHeadModel``: FlopCounterMode's names), and None for other calls, in CSV files as in JSON
    ones (the reader tells a quoted "", older files' first model, from an empty field); files of an
    older version lack it: ""), step (the step the call began in, counted from 0;
    -1 in files written before the column), site (where the program made the call: an id of the sites
    file, 0 for none; config sites) and site_text, that site as "file:line function" from the sites
    files (sites.json, sites-PID.json) beside the record files ("" for none; the polars and duckdb
    engines give the site id only: join load_sites()). input_shapes: the call's input shapes in
    torch.profiler's form ("[[4, 8], [8, 16]]"; [] for a non-tensor argument, a list of tensors as a list
    of their shapes; "" without an argument summary), read in C from args: group by it as
    key_averages(group_by_input_shape=True) does (pandas engine only). The model watch's streams in the directory
    (stats, updates) are not records: see load_stats() and load_updates(). When the directory holds GPU records, gpu_ns is the
    GPU time of the kernels, copies and memsets each call launched itself. A torn last line (a killed
    process) and a row whose fields do not parse are skipped, with one warning giving the counts. original_names=True gives the original
    TorchWrapper's columns instead (API Name, Total Time (ms), Call Number, ...)."""
    if engine != "pandas":
        if engine not in ("polars", "duckdb"):
            raise ValueError(f"engine={engine!r} is not accepted: give 'pandas', 'polars' or 'duckdb'")
        if original_names:
            raise ValueError("original_names=True is for engine='pandas'")
        from . import _engines

        return _engines.load_polars(source) if engine == "polars" else _engines.load_duckdb(source, connection)
    import pandas

    paths = _outdir.paths(source)
    records = [path for path in paths if _outdir.kind(path) in ("calls", "gpu")]   # not empty, nor a stream
    chunks: Dict[str, Dict[str, List[Any]]] = {"calls": {}, "gpu": {}}
    # files older than the module column: "" (the schema's missing value), as before the column
    reader = _core.RecordReader(records, batch_rows=1 << 16, module_missing="", input_shapes=True)
    for _, kind, columns in reader:
        for name, values in columns.items():
            chunks[kind].setdefault(name, []).append(values)
    if reader.truncated or reader.malformed:
        skipped = [f"{reader.truncated} torn last line(s) (a process killed while writing)"] if reader.truncated else []
        if reader.malformed:
            skipped.append(f"{reader.malformed} row(s) whose fields do not parse")
        warnings.warn(f"torchwrapper.load: skipped {' and '.join(skipped)}", stacklevel=2)
    frame = pandas.DataFrame(_columns(chunks["calls"], "calls"))
    shapes = chunks["calls"].get("input_shapes", [])   # computed by the reader, in C (tw_args_shapes)
    if chunks["gpu"]:
        gpu = pandas.DataFrame(_columns(chunks["gpu"], "gpu"))
        gpu = gpu[gpu["call_id"] != 0]
        per_call = (gpu["end_ns"] - gpu["start_ns"]).clip(lower=0).groupby([gpu["pid"], gpu["call_id"]]).sum()
        per_call.name = "gpu_from_records"
        frame = frame.join(per_call, on=["pid", "call_id"])
        frame["gpu_ns"] = frame.pop("gpu_from_records").fillna(0).astype("int64")
    import numpy

    frame["input_shapes"] = numpy.fromiter(itertools.chain.from_iterable(shapes), dtype=object,
                                           count=sum(map(len, shapes)))
    frame = frame.sort_values(["start_ns", "pid", "call_id"], kind="stable").reset_index(drop=True)
    frame["api"] = frame["api"].astype("category")
    frame["site_text"] = _site_texts(paths, frame)
    frame["input_shapes"] = frame.pop("input_shapes")   # last: the schema's derived columns' order
    if original_names:
        return original_frame(frame)
    # the peak MFU is measured against (config peak_flops, or the GPU's): torchwrapper.flops_table()
    frame.attrs["peak_flops"] = _outdir.manifest_peak(records)
    return frame


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
    """The rows of a stream file (CSV with a header, or JSON lines; gzip or not) as dicts of text
    (CSV) or values."""
    if _outdir.record_format(path) == "csv":
        with _outdir.open_text(path) as f:
            for row in csv.DictReader(f):
                if None in row or any(v is None for v in row.values()):
                    continue  # a torn line
                yield row
    else:
        with _outdir.open_text(path) as f:
            for line in f:
                try:
                    yield json.loads(line)
                except ValueError:
                    continue


# ---- the model watch's streams: stats, updates, the module tree ---------------------------------

_TEXT_COLUMNS = frozenset(["module", "class", "tensor", "name", "dtype", "device", "api", "parameter", "attribute"])


def _decode(text: Optional[str], column: str) -> Any:
    """A CSV field of a stats or updates row as its value."""
    if text is None or column in ("module", "name"):   # "": an older file's model, an output that is one tensor
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
        csv_file = _outdir.record_format(path) == "csv"
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
    from ._engines import _import, _polars_kind, readable_files

    pl = _import("polars")
    frame = _polars_kind(pl, readable_files(out_dir, (kind,)), kind)
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
