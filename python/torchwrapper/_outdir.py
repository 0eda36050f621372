# SPDX-License-Identifier: MIT
"""Which files of an output directory are what: the record files of a source (a directory, a file,
or a list of them) by kind (calls, gpu, stats, updates) and format, a process's files from its
manifest, the sites and summary files beside them, and what a manifest says of the run that readers
need (the peak_flops MFU is measured against). The one place every reader finds its files:
load()'s pandas path (_files.py), Polars and DuckDB (_engines.py) and Spark (spark.py) import it,
and it imports none of them. A file's kind comes from the C reader (_core.record_kind), as
tw-report decides it. (Not to be confused with _discover.py, which finds torch's APIs.)

Compressed files (config compress "gzip": *.csv.gz, *.jsonl.gz, one gzip member each) are read by
every engine's own reader when complete: the manifest beside them says so ("complete": true) once
the writer closed them. The last file of a killed process is a member cut short, which those readers
refuse: it is read through a copy of its whole lines (readable()), in a temporary directory of this
process, as the C reader reads it (up to its last flush)."""
from __future__ import annotations

import atexit
import csv
import io
import json
import os
import re
import shutil
import tempfile
import zlib
from typing import BinaryIO, Dict, Iterable, List, Optional, Tuple, Union

from . import _core

Source = Union[str, os.PathLike, Iterable[Union[str, os.PathLike]]]

RECORD_EXTENSIONS = (".csv", ".jsonl", ".csv.gz", ".jsonl.gz")
GZIP_MAGIC = b"\x1f\x8b"
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
                     if entry.get("kind", "calls") == kind)
    return [os.path.join(out_dir, n) for n in names if os.path.exists(os.path.join(out_dir, n))]


def paths(source: Source) -> List[str]:
    """The record files (*.csv, *.jsonl, *.csv.gz, *.jsonl.gz) of source: each directory's in name
    order, files as given.
    ValueError for a directory without any, FileNotFoundError for a path that does not exist."""
    if isinstance(source, (str, os.PathLike)):
        source = [source]
    found: List[str] = []
    for item in source:
        item = os.fspath(item)
        if os.path.isdir(item):
            names = sorted(os.path.join(item, n) for n in os.listdir(item) if n.endswith(RECORD_EXTENSIONS))
            if not names:
                raise ValueError(f"{item} holds no record files (*.csv, *.jsonl, *.csv.gz or *.jsonl.gz "
                                 "written by TorchWrapper)")
            found.extend(names)
        elif os.path.exists(item):
            found.append(item)
        else:
            raise FileNotFoundError(f"no such record file or directory: {item}")
    return found


def record_format(path: str) -> str:
    """"csv" for *.csv and *.csv.gz, else "json" (*.jsonl, *.jsonl.gz)."""
    return "csv" if path.endswith((".csv", ".csv.gz")) else "json"


def is_gzip(path: str) -> bool:
    """Whether the file is gzip (its first bytes), whatever its name."""
    with open(path, "rb") as f:
        return f.read(2) == GZIP_MAGIC


class _Inflated(io.RawIOBase):
    """What a gzip file inflates to, member after member; a member cut short (a killed writer's last
    file) ends where its data ends, as the C reader reads it. ``complete``: whether the file ended at
    the end of a member (known once read to its end)."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self._file = open(path, "rb")
        self._z: Optional["zlib._Decompress"] = None   # the member being inflated
        self._input = b""      # compressed bytes read and not yet given to a member
        self._pending = b""    # inflated bytes not yet returned
        self._at = 0
        self.complete = True

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: "memoryview") -> int:  # type: ignore[override]
        while self._at == len(self._pending):
            if not self._input:
                self._input = self._file.read(1 << 18)
                if not self._input and self._z is None:
                    return 0
                if not self._input:   # inside a member: one cut short, inflated to its data's end
                    self._pending, self._at, self._z = self._z.flush(), 0, None
                    self.complete = False
                    continue
            if self._z is None:
                self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)   # a member starts
            self._pending, self._at = self._z.decompress(self._input, 1 << 20), 0
            if self._z.eof:   # the member's end: what follows it starts the next one
                self._input, self._z = self._z.unused_data, None
            else:
                self._input = self._z.unconsumed_tail
        n = min(len(buffer), len(self._pending) - self._at)
        buffer[:n] = self._pending[self._at:self._at + n]
        self._at += n
        return n

    def close(self) -> None:
        self._file.close()
        super().close()


def open_records(path: str) -> BinaryIO:
    """The file's bytes, inflated when it is gzip (a member cut short read up to its data's end)."""
    if is_gzip(path):
        return io.BufferedReader(_Inflated(path), 1 << 18)  # type: ignore[return-value]
    return open(path, "rb")


def open_text(path: str) -> io.TextIOWrapper:
    """open_records() as text (UTF-8, newlines as written)."""
    return io.TextIOWrapper(open_records(path), encoding="utf-8", newline="")


def _complete_in_manifests(directory: str) -> frozenset:
    """The names of the compressed files the manifests of directory say are complete."""
    names = set()
    try:
        listed = os.listdir(directory)
    except OSError:
        return frozenset()
    for manifest in listed:
        if not (manifest.startswith("manifest") and manifest.endswith(".json")):
            continue
        try:
            with open(os.path.join(directory, manifest)) as f:
                entries = json.load(f).get("files", [])
        except (OSError, ValueError, AttributeError):
            continue
        names.update(e["name"] for e in entries if isinstance(e, dict) and e.get("complete") and "name" in e)
    return frozenset(names)


def gzip_complete(path: str, complete_names: Optional[frozenset] = None) -> bool:
    """Whether a gzip file ends at the end of a member: the manifest beside it says so (the writer
    closed it), else the file is inflated to its end to see."""
    if complete_names is None:
        complete_names = _complete_in_manifests(os.path.dirname(os.path.abspath(path)))
    if os.path.basename(path) in complete_names:
        return True
    raw = _Inflated(path)
    try:
        while raw.read(1 << 20):
            pass
        return raw.complete
    finally:
        raw.close()


_copies: Dict[Tuple[str, int, int], str] = {}   # (path, size, mtime_ns) -> a copy of its whole lines
_copy_dir: Optional[str] = None


def _whole_copy(path: str) -> str:
    """A copy (uncompressed, in a temporary directory removed when this process exits) of the whole
    lines of a gzip file cut short; made once for a file as it stands."""
    global _copy_dir
    st = os.stat(path)
    key = (os.path.abspath(path), st.st_size, st.st_mtime_ns)
    if key in _copies and os.path.exists(_copies[key]):
        return _copies[key]
    if _copy_dir is None:
        _copy_dir = tempfile.mkdtemp(prefix="torchwrapper-whole-")
        atexit.register(shutil.rmtree, _copy_dir, True)
    copy = os.path.join(_copy_dir, f"{len(_copies)}-{os.path.basename(path)[:-len('.gz')]}")
    with open_records(path) as src, open(copy, "wb") as dst:
        tail = b""
        while True:
            block = src.read(1 << 20)
            if not block:
                break
            block = tail + block
            cut = block.rfind(b"\n") + 1
            dst.write(block[:cut])
            tail = block[cut:]
    _copies[key] = copy
    return copy


def readable(paths: List[str]) -> List[str]:
    """The paths as other engines' readers (Polars, DuckDB, Spark) can read them: a plain file or a
    complete gzip file as it is; a gzip file cut short (a killed writer's last, or one being written)
    as a copy of its whole lines (_whole_copy)."""
    out = []
    complete: Dict[str, frozenset] = {}
    for path in paths:
        if not path.endswith(".gz"):   # (those readers tell compression by the name too)
            out.append(path)
            continue
        directory = os.path.dirname(os.path.abspath(path))
        if directory not in complete:
            complete[directory] = _complete_in_manifests(directory)
        out.append(path if gzip_complete(path, complete[directory]) else _whole_copy(path))
    return out


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
            found.setdefault((k, record_format(path)), []).append(path)
    return found


def csv_by_header(csv_paths: List[str]) -> Dict[Tuple[str, ...], List[str]]:
    """CSV files grouped by their header: files of an older version lack the newer columns."""
    groups: Dict[Tuple[str, ...], List[str]] = {}
    for path in csv_paths:
        with open_text(path) as f:
            header = tuple(next(csv.reader([f.readline()]), []))
        groups.setdefault(header, []).append(path)
    return groups


def whole_lines(path: str) -> Tuple[bytes, int]:
    """The file's bytes up to its last line end, and 1 if a torn last line (a killed process) was cut
    (for the engines whose readers stop at a torn line). A gzip file: what it inflates to."""
    with open_records(path) as f:
        data = f.read()
    if not data or data.endswith(b"\n"):
        return data, 0
    cut = data.rfind(b"\n") + 1
    return data[:cut], int(bool(data[cut:].strip()))


def ends_whole(path: str) -> bool:
    """Whether the file is empty or ends with a line end (not a torn line). A gzip file: what it
    inflates to (read to its end)."""
    if is_gzip(path):
        with open_records(path) as f:
            last = b""
            for block in iter(lambda: f.read(1 << 20), b""):
                last = block
            return not last or last.endswith(b"\n")
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


def manifest_peak(record_paths: Iterable[str]) -> Optional[float]:
    """The peak_flops of the first manifest beside the record files that names one, or None."""
    for folder in dict.fromkeys(os.path.dirname(os.path.abspath(p)) for p in record_paths):
        for name in sorted(os.listdir(folder)):
            if name.startswith("manifest") and name.endswith(".json"):
                try:
                    with open(os.path.join(folder, name)) as f:
                        peak = json.load(f).get("peak_flops")
                except (OSError, ValueError):
                    continue
                if isinstance(peak, (int, float)) and peak > 0:
                    return float(peak)
    return None


__all__ = ["csv_by_header", "directories", "ends_whole", "files_by_kind", "GZIP_MAGIC", "gzip_complete", "is_gzip",
           "kind", "manifest_peak", "MODULES_FILE", "open_records", "open_text", "paths", "readable",
           "RECORD_EXTENSIONS", "record_files", "record_format", "sites_files", "SITES_FILE_RE", "summary_files",
           "whole_lines"]
