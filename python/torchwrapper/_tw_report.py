# SPDX-License-Identifier: MIT
"""Asking tw-report from Python: call_tree(), flops_table() and memory_table() read its JSON (--tree,
--by), so that the program and the functions compute the same thing once, in C; and an output
directory's text table and page (report_text, Report), which a profile shows in a notebook and the
integrations print.

tw-report reads record files. A source that is already files (an out_dir, a record file, a profile
that wrote some) goes to it as it is; records held in memory (a profile without out_dir, a list of
Records, a load() or dataframe() DataFrame, perhaps filtered) are written to a temporary JSON-lines
record file first, which tw-report reads as it reads the files the writer makes.
"""
from __future__ import annotations

import contextlib
import html
import json
import os
import tempfile
from typing import Any, Iterator, List, Optional

from . import _core, _schema

# The call records' columns, in file order (the schema's): what a temporary record file holds.
_CALL_COLUMNS = _schema.columns("calls")

# dataframe()'s column (the original tool's names and units) -> the record's field, and its scale to ns.
_ORIGINAL = {"Call ID": ("call_id", 0), "API Name": ("api", 0), "Start Timestamp": ("start_ns", 0),
             "Cost Time (ms)": ("cost_ns", 1e6), "Self Time (ms)": ("self_ns", 1e6),
             "GPU Time (ms)": ("gpu_ns", 1e6), "Thread": ("tid", 0), "PID": ("pid", 0), "Depth": ("depth", 0),
             "Parent ID": ("parent_id", 0), "Error": ("error", 0), "Arguments": ("args", 0),
             "Module": ("module", 0), "Step": ("step", 0), "Forward Call ID": ("fwd_call_id", 0),
             "Forward API": ("fwd_api", 0)}


class ReportError(RuntimeError):
    """tw-report could not make the output asked for (its message says why)."""


def report_json(argv: List[str]) -> Any:
    """tw-report's JSON output for argv (argv[0]: the caller's name), run in this process through
    torchwrapper._core. ReportError naming tw-report when it is not built in, or when it fails (with
    its message: usage errors name the option, others the file and what is wrong)."""
    run = getattr(_core, "report_output", None)
    if run is None:
        raise ReportError(f"{argv[0]}: tw-report is not in this build of torchwrapper._core (it computes "
                          "this); rebuild the package")
    status, output, messages = run(argv)
    if status != 0 or not output:
        why = messages.strip().replace("\n(tw-report --help lists the options)", "").replace("tw-report: ", "")
        raise ReportError(f"{argv[0]}: tw-report failed (exit status {status}): {why or 'no output'}")
    return json.loads(output)


def _is_paths(source: Any) -> bool:
    if isinstance(source, (str, os.PathLike)):
        return True
    return isinstance(source, (list, tuple)) and bool(source) and all(
        isinstance(item, (str, os.PathLike)) for item in source)


def _path_list(source: Any) -> List[str]:
    paths = [os.fspath(item) for item in ([source] if isinstance(source, (str, os.PathLike)) else source)]
    for path in paths:
        if not os.path.exists(path):
            raise FileNotFoundError(f"no such record file or directory: {path}")
    return paths


def _original_rows(frame: Any) -> Iterator[dict]:
    """A dataframe() frame's rows as records' fields (times back to ns)."""
    names = [(column, *_ORIGINAL[column]) for column in frame.columns if column in _ORIGINAL]
    for values in frame[[column for column, _, _ in names]].itertuples(index=False):
        row = {}
        for (_, field, scale), value in zip(names, values):
            row[field] = int(round(value * scale)) if scale else value
        yield row


def _json_value(value: Any) -> Any:
    """A value as a JSON line holds it: numpy scalars as Python's, NaN (pandas' missing) as null."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return None if value != value else value
    item = getattr(value, "item", None)   # numpy scalars
    return _json_value(item()) if item is not None else value


def _write_rows(path: str, rows: Iterator[dict]) -> int:
    """rows as a JSON-lines record file at path, in the order the writer writes them: as the calls
    ended, a call's inner calls before it (records in memory come in start order; tw-report's tree
    takes a step's calls as they come, until the outermost one). Returns how many."""
    lines = [{name: _json_value(row[name]) for name in _CALL_COLUMNS if name in row} for row in rows]
    lines.sort(key=lambda line: (line["start_ns"] + line["cost_ns"], -line["depth"]))
    with open(path, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps(line, separators=(",", ":")) + "\n")
    return len(lines)


def _in_memory_rows(source: Any) -> Iterator[dict]:
    if hasattr(source, "columns"):                       # a DataFrame
        if "Call ID" in source.columns:                   # dataframe(): the original tool's names
            return _original_rows(source)
        frame = source[[name for name in _CALL_COLUMNS if name in source.columns]]
        if "api" in frame.columns:
            frame = frame.assign(api=frame["api"].astype(str))
        return (dict(zip(frame.columns, values)) for values in frame.itertuples(index=False))
    return (record._asdict() if hasattr(record, "_asdict") else dict(record) for record in source)


def in_memory(source: Any) -> Any:
    """source's records when they are in memory (a list of Records, a DataFrame; a profile without
    out_dir: its records), else None (files: an out_dir, a record file, a profile that wrote some)."""
    if hasattr(source, "_profile") and hasattr(source, "callRecords"):   # a TorchWrapper
        source = source._need_profile()
    if hasattr(source, "records") and callable(source.records):          # a Profile
        return None if getattr(source, "out_dir", None) is not None else source.records()
    return None if _is_paths(source) else source


def first_tid(records: Any) -> Optional[int]:
    """The thread of the call that started first among records in memory (None: no records)."""
    if hasattr(records, "columns"):
        start, thread = ("Start Timestamp", "Thread") if "Call ID" in records.columns else ("start_ns", "tid")
        return None if records.empty else int(records[thread].iloc[records[start].reset_index(drop=True).idxmin()])
    first = min(records, key=lambda r: (r.start_ns, r.call_id), default=None)
    return None if first is None else first.tid


@contextlib.contextmanager
def record_paths(source: Any) -> Iterator[Optional[List[str]]]:
    """The record files holding source (see the module's text), for as long as the block runs:
    None when source holds no records."""
    records = in_memory(source)
    if records is None:
        if hasattr(source, "_profile") and hasattr(source, "callRecords"):
            source = source._need_profile()
        if hasattr(source, "records") and callable(source.records):
            yield list(source.files) or None
        else:
            yield _path_list(source)
        return
    with tempfile.TemporaryDirectory(prefix="torchwrapper-report-") as folder:
        path = os.path.join(folder, "records.jsonl")
        yield [path] if _write_rows(path, _in_memory_rows(records)) else None


# ---- tw-report's text and page of an output directory (the notebook, the trainers' summaries) ---------

TOP = 15   # rows of the per-API table a report shows unless asked otherwise


def report_text(out_dir: str, top: int) -> str:
    """tw-report's per-API table of the files in out_dir, its top rows (or what tw-report said
    instead): read by the C reader, streaming, whatever the run's length."""
    status, output, messages = _core.report_output(["tw-report", "--top", str(top), out_dir])
    if status != 0:
        return messages
    from ._findings import summary_text

    found = summary_text(out_dir)
    return output + ("\n" + found if found else "")


class Report:
    """What a profiled cell recorded (files in ``out_dir``), shown as text or as HTML."""

    def __init__(self, out_dir: str, top: int = TOP) -> None:
        self.out_dir = out_dir
        self.top = top

    def text(self) -> str:
        return report_text(self.out_dir, self.top)

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        with tempfile.TemporaryDirectory(prefix="torchwrapper-page-") as scratch:   # not in out_dir: its files
            page = os.path.join(scratch, "report.html")                               # are the run's records
            status, _, messages = _core.report_output(["tw-report", "--html", page, "--top", str(self.top),
                                                       self.out_dir])
            if status != 0:
                return f"<pre>{html.escape(messages)}</pre>"
            with open(page, encoding="utf-8") as f:
                document = f.read()
        # the page in a frame of its own: its styles and scripts stay out of the notebook's
        return (f'<iframe srcdoc="{html.escape(document, quote=True)}" style="width:100%;height:720px;border:0" '
                f'title="torchwrapper report" sandbox="allow-scripts"></iframe>'
                f"<p>torchwrapper: {html.escape(self.out_dir)}</p>")
