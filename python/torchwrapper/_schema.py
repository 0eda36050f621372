# SPDX-License-Identifier: MIT
"""The schema of every record file kind (calls, gpu, stats, updates): column names in file order,
types, units, nullability and the version of each kind, as plain data. It is the one description
our readers (_files.py: load(), load_stats(), load_updates(), the polars and DuckDB engines) and the
Python writers of the model watch's streams (stats, updates) take their columns from; the C writer's
headers (src/write/format.h, src/gpu/cupti.c) are checked against it by tests/python/test_schema.py."""
from __future__ import annotations

import copy
from typing import Any, Dict, List, Optional

# Bumped when a kind's columns change (added at the end: readers of an older version ignore them;
# files of an older version lack them, and readers fill in the column's "missing" value).
SCHEMA_VERSION = 1

# Types: "int64", "float64", "bool", "string", "list<int64>" (a JSON array; in CSV its JSON text),
# "object" (a JSON object of numbers; in CSV its JSON text).
_ENCODING = {
    "csv": "RFC 4180 with a header line; a null is an empty field; bool is 0 or 1; list<int64> and "
           "object are JSON text",
    "json": "JSON Lines: one object per line, keyed by column; a null is null (NaN and infinities "
            "too, in stats)",
    "sparse": "a column marked sparse is an empty CSV field and left out of a JSON line in the records "
              "that carry none of it (most): readers give its missing value",
}


def _col(name: str, type_: str, description: str, unit: Optional[str] = None, nullable: bool = False,
         missing: Any = None, sparse: bool = False) -> Dict[str, Any]:
    column = {"name": name, "type": type_, "unit": unit, "nullable": nullable, "description": description}
    if missing is not None:
        column["missing"] = missing   # the value a reader gives when an older file lacks the column
    if sparse:
        column["sparse"] = True       # empty / left out where a record carries none (see _ENCODING)
    return column


_KINDS: Dict[str, Dict[str, Any]] = {
    "calls": {
        "version": 5,
        "description": "one row per profiled call, in the order calls ended",
        "files": {"csv": "NAME.csv", "json": "NAME.jsonl"},
        "columns": [
            _col("call_id", "int64", "the call's id, unique within its process, from 1"),
            _col("api", "string", "the API name (torch.add, torch.nn.Linear.forward, ...)"),
            _col("start_ns", "int64", "when the call started, since the Unix epoch", "ns"),
            _col("cost_ns", "int64", "the call's wall time, calls inside it included", "ns"),
            _col("self_ns", "int64", "cost_ns minus the recorded calls inside it", "ns"),
            _col("gpu_ns", "int64", "0 as written (GPU work ends after its call returns); readers fill it "
                                    "from the gpu files", "ns"),
            _col("pid", "int64", "the process id"),
            _col("tid", "int64", "the thread id (the kernel's)"),
            _col("depth", "int64", "how many recorded calls it ran inside (0: outermost)"),
            _col("parent_id", "int64", "call_id of the recorded call it ran inside, 0 for none"),
            _col("error", "bool", "the call raised"),
            _col("args", "string", "the argument summary (config args), \"\" when off"),
            _col("module", "string", "the nn.Module instance path of a forward: its model's class, then "
                                     "its named_modules() path (GPT2LMHeadModel.transformer.h.0; the model "
                                     "itself GPT2LMHeadModel), as FlopCounterMode names modules; null for "
                                     "other calls (CSV: empty; a quoted \"\" is the path \"\", which older "
                                     "files gave their first model)",
                 nullable=True, missing=""),
            _col("step", "int64", "the training step the call began in, from 0: a step ends when an outermost "
                                  "optimizer.step() returns, or at each prof.step() / torchwrapper.step() once "
                                  "one was called (config schedule)", missing=-1),
            _col("site", "int64", "the program's line the call is charged to, an id in the process's sites file "
                                  "(sites.json, or sites-PID.json beside manifest-PID.json): with config sites "
                                  "\"boundary\" (the default) the caller's line when the program made the call, "
                                  "else the line that entered torch (a call torch's code made takes the site of "
                                  "the call around it); with \"all\" the caller's line, torch's files included; "
                                  "0 for none (no Python frame: autograd's AccumulateGrad nodes; config sites "
                                  "\"off\"; a file older than the column)",
                 missing=0),
            _col("fwd_call_id", "int64", "for an autograd node (config aten \"backward\"; its api is the node's "
                                         "name, AddmmBackward0): the call_id of the forward call that created it, "
                                         "whose module and site the node's module and site are; 0 for other calls, "
                                         "for nodes no forward call made (AccumulateGrad), and in older files",
                 missing=0),
            _col("fwd_api", "string", "that forward call's API name (\"\" when fwd_call_id is 0)", missing=""),
            _col("flops", "int64", "the call's own floating-point operations (config flops: linear, matmul, "
                                   "conv, attention, ...; an autograd node: its backward's), not those of the "
                                   "recorded calls inside it; 0 for none and in older files", missing=0, sparse=True),
            _col("flops_total", "int64", "flops with those of the recorded calls inside it", missing=0, sparse=True),
            _col("mem_alloc", "int64", "bytes the allocator reported allocated on the call's thread while it "
                                       "ran, inside calls included (config memory); 0 when off", "bytes",
                 missing=0, sparse=True),
            _col("mem_self", "int64", "of mem_alloc, the bytes outside the recorded calls inside it", "bytes",
                 missing=0, sparse=True),
            _col("mem_freed", "int64", "bytes freed on the call's thread while it ran", "bytes", missing=0, sparse=True),
            _col("mem_peak", "int64", "the highest allocated total the allocator reported during the call "
                                      "(0: no report)", "bytes", missing=0, sparse=True),
        ],
        # Not in the files: what load() (engine "pandas") computes from them, after the columns above.
        "derived": [
            _col("site_text", "string", "the site as \"file:line function\" from the sites files (\"\" for none)"),
            _col("input_shapes", "string", "the call's input shapes read from args in C, as torch.profiler's "
                                           "input_shapes: one entry per argument (positional, then keyword values), "
                                           "a tensor's sizes, [] for anything else, a tuple or list of tensors as "
                                           "the list of theirs (\"[[4, 8], [8, 16]]\"); \"\" without a summary "
                                           "(args none, autograd nodes)"),
        ],
    },
    "gpu": {
        "version": 2,
        "description": "one row per GPU kernel, memory copy or memset (CUPTI), with the call that launched it",
        "files": {"csv": "NAME.gpu.csv", "json": "NAME.gpu.jsonl"},
        "columns": [
            _col("call_id", "int64", "the innermost profiled call that launched it; 0 for work launched "
                                     "outside any (autograd's threads)"),
            _col("api", "string", "that call's API name, \"\" when call_id is 0"),
            _col("kind", "string", "kernel, memcpy or memset"),
            _col("name", "string", "the demangled kernel name, or memcpy HtoD, ..."),
            _col("start_ns", "int64", "when it started on the device, since the Unix epoch (the calls' clock)",
                 "ns"),
            _col("end_ns", "int64", "when it ended; 0 when still running at stop (duration unknown)", "ns"),
            _col("device", "int64", "the CUDA device index"),
            _col("stream", "int64", "the CUDA stream id"),
            _col("correlation_id", "int64", "CUPTI's correlation id"),
            _col("pid", "int64", "the process id"),
            _col("launch_start_ns", "int64", "when the CUDA API call that launched it began, since the Unix "
                                             "epoch; 0 when CUPTI's record of that call was not seen", "ns",
                 missing=0),
            _col("launch_end_ns", "int64", "when that call ended; 0 when not seen", "ns", missing=0),
            _col("launch", "string", "that call's name as torch.profiler's trace names it (cudaLaunchKernel, "
                                     "cudaMemcpyAsync, ...); \"\" when not seen", missing=""),
        ],
    },
    "stats": {
        "version": 1,
        "description": "tensor statistics of module calls (config tensor_stats)",
        "files": {"csv": "NAME.stats.csv", "json": "NAME.stats.jsonl"},
        "columns": [
            _col("call_id", "int64", "the recorded call the tensors belong to"),
            _col("step", "int64", "the step, from 1 (a step begins with each call of the model)"),
            _col("module", "string", "the module's instance path (the model's class, then its "
                                     "named_modules() path: Net.fc; the model itself Net)"),
            _col("class", "string", "the module's class, as an API name"),
            _col("tensor", "string", "input, output, weight or grad"),
            _col("index", "int64", "the tensor's position among the call's tensors of that role"),
            _col("name", "string", "the parameter's name, or the output's path; \"\" when one tensor",
                 nullable=True),
            _col("shape", "list<int64>", "the tensor's shape; null when the metric is off", nullable=True),
            _col("dtype", "string", "torch dtype (torch.float32); null when the metric is off", nullable=True),
            _col("device", "string", "the tensor's device (cpu, cuda:0)"),
            _col("numel", "int64", "number of elements"),
            _col("mean", "float64", "mean of the elements; null when off", nullable=True),
            _col("std", "float64", "standard deviation (Bessel's correction); null when off", nullable=True),
            _col("min", "float64", "smallest element; null when off", nullable=True),
            _col("max", "float64", "largest element; null when off", nullable=True),
            _col("zeros", "int64", "elements equal to 0; null when off", nullable=True),
            _col("nan", "int64", "NaN elements; null when off", nullable=True),
            _col("inf", "int64", "infinite elements; null when off", nullable=True),
            _col("custom", "object", "results of registered metrics, by name; null when none", nullable=True),
        ],
    },
    "updates": {
        "version": 2,
        "description": "in-place updates of parameters and their gradients (config track)",
        "files": {"csv": "NAME.updates.csv", "json": "NAME.updates.jsonl"},
        "columns": [
            _col("call_id", "int64", "the call that made the update"),
            _col("api", "string", "its API name"),
            _col("outer_call_id", "int64", "the outermost call in progress (an optimizer's step)"),
            _col("parameter", "string", "the parameter's name in its model"),
            _col("tensor", "string", "parameter or grad"),
            _col("version", "int64", "the tensor's version counter after the update; null for an "
                                     "attribute event", nullable=True),
            _col("attribute", "string", "set when module.attribute = ... replaced it", nullable=True),
            _col("site", "int64", "where the program made the outermost call in progress (the line that called "
                                  "optimizer.step(), say): an id in the sites file, as the calls' site; 0 for none",
                 missing=0),
        ],
    },
}

_SCHEMA: Dict[str, Any] = {
    "schema_version": SCHEMA_VERSION,
    "encoding": _ENCODING,
    "kinds": _KINDS,
    "notes": "Files are listed in manifest.json (and manifest-PID.json) with their kind. NAME follows "
             "file_name_spec; CSV files each start with their header line. With compress \"gzip\" each name "
             "ends in .gz (NAME.csv.gz, NAME.jsonl.gz): one gzip member holding what the plain file would, "
             "listed \"complete\": true in the manifest once closed (a killed process's last file is a "
             "member cut short, whole up to its last flush). The files removed by max_files or max_total_size "
             "(the oldest) leave the list: the manifest's records.KIND.removed counts them ({\"files\", "
             "\"records\", \"bytes\", \"by\"}). Readers ignore columns they "
             "do not know (a newer version) and skip a torn last line (a killed process). The site "
             "columns' ids are keys of \"sites\" in sites.json (sites-PID.json), named in the manifest's "
             "\"sites\": {\"file\", \"line\", \"function\", \"text\"} (text: \"train.py:42 train_step\").",
}


def schema() -> Dict[str, Any]:
    """The record files' schema: {"schema_version", "encoding", "kinds": {kind: {"version",
    "description", "files", "columns": [{"name", "type", "unit", "nullable", "description"}, ...]}},
    "notes"} for the kinds calls, gpu, stats and updates; calls also has "derived": the columns load()
    adds, computed from the files' (site_text, input_shapes). Plain data (json.dumps takes it); a copy,
    so changing it changes nothing here."""
    return copy.deepcopy(_SCHEMA)


def columns(kind: str) -> List[str]:
    """The column names of a kind, in file order."""
    return [c["name"] for c in _KINDS[kind]["columns"]]


_PANDAS = {"int64": "int64", "float64": "float64", "bool": "bool", "string": "str", "list<int64>": "object",
           "object": "object"}


def pandas_dtypes(kind: str) -> Dict[str, str]:
    """{column: pandas dtype} of a kind ("str" for text)."""
    return {c["name"]: _PANDAS[c["type"]] for c in _KINDS[kind]["columns"]}


_POLARS = {"int64": "Int64", "float64": "Float64", "bool": "Boolean", "string": "String"}
_DUCKDB = {"int64": "BIGINT", "float64": "DOUBLE", "bool": "BOOLEAN", "string": "VARCHAR", "list<int64>": "BIGINT[]",
           "object": "JSON"}


def polars_schema(kind: str, csv: bool = False) -> Dict[str, Any]:
    """{column: polars dtype} of a kind (needs polars). In CSV a bool is 0/1: read as Int64."""
    import polars as pl

    def dtype(type_: str) -> Any:
        if type_ == "bool" and csv:
            return pl.Int64
        if type_ == "list<int64>":
            return pl.String if csv else pl.List(pl.Int64)
        if type_ == "object":
            return pl.String
        return getattr(pl, _POLARS[type_])

    return {c["name"]: dtype(c["type"]) for c in _KINDS[kind]["columns"]}


def duckdb_columns(kind: str) -> Dict[str, str]:
    """{column: DuckDB type} of a kind, for read_csv / read_json's columns."""
    return {c["name"]: _DUCKDB[c["type"]] for c in _KINDS[kind]["columns"]}


def missing_value(kind: str, column: str) -> Any:
    """What a reader gives for a column an older file lacks."""
    for c in _KINDS[kind]["columns"]:
        if c["name"] == column:
            return c.get("missing", "" if c["type"] == "string" else 0)
    raise KeyError(column)


__all__ = ["SCHEMA_VERSION", "columns", "duckdb_columns", "missing_value", "pandas_dtypes", "polars_schema", "schema"]
