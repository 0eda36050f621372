# SPDX-License-Identifier: MIT
"""The call records of a run through Polars (a LazyFrame) or DuckDB (a relation, and SQL over a
`calls` view), typed from the one schema (_schema.py), with each call's GPU time taken from the GPU
record files as load() does with pandas. Neither library is a dependency: each is imported when
asked for, with an ImportError that says what to install."""
from __future__ import annotations

import io
from typing import Any, Dict, Iterable, List, Optional, Tuple

from . import _schema
from ._outdir import Source, csv_by_header, ends_whole, files_by_kind, readable, summary_files, whole_lines


def readable_files(source: Source, kinds: Tuple[str, ...] = ("calls", "gpu")) -> Dict[Tuple[str, str], List[str]]:
    """files_by_kind() with each path as the engines' readers can read it (_outdir.readable: a
    compressed file cut short by a killed writer as a copy of its whole lines)."""
    return {key: readable(paths) for key, paths in files_by_kind(source, kinds).items()}


def _import(name: str) -> Any:
    try:
        return __import__(name)
    except ImportError as error:
        raise ImportError(f"engine={name!r} needs the {name} package: pip install {name}") from error


# ---- Polars ----------------------------------------------------------------------------------------

def _absent(kind: str, present: Iterable[str]) -> Dict[str, Any]:
    """{column: the value readers give} for the schema's columns of kind that a file lacks."""
    have = set(present)
    return {c: _schema.missing_value(kind, c) for c in _schema.columns(kind) if c not in have}


def _filled_json(kind: str) -> Dict[str, Any]:
    """Columns that a JSON line of an older version lacks and that are never null: what they read as."""
    return {c["name"]: c["missing"] for c in _schema.schema()["kinds"][kind]["columns"]
            if "missing" in c and not c["nullable"]}


def _sparse(kind: str, header: Iterable[str]) -> Dict[str, Any]:
    """{column: its missing value} for the sparse columns of kind in a CSV file's header: an empty
    field there is a record that carries none (flops, mem_*), read as the missing value, not null."""
    present = set(header)
    return {c["name"]: c["missing"] for c in _schema.schema()["kinds"][kind]["columns"]
            if c.get("sparse") and c["name"] in present}


def _whole_row(kind: str, header: Tuple[str, ...]) -> str:
    """The column that is null in a CSV line torn by a killed process and never in a whole one: the
    last written when it is never null (step, site), else the one the readers always used (the model
    watch's streams: a column that is never null)."""
    if header and header[-1] in ("step", "site"):
        return header[-1]
    return {"calls": "error", "gpu": "pid", "stats": "numel", "updates": "tensor"}[kind]


def _polars_kind(pl: Any, files: Dict[Tuple[str, str], List[str]], kind: str) -> Optional[Any]:
    columns = _schema.columns(kind)
    parts = []
    types = _schema.polars_schema(kind, csv=True)
    for header, paths in csv_by_header(files.get((kind, "csv"), [])).items():
        frame = pl.scan_csv(paths, schema_overrides={c: t for c, t in types.items() if c in header},
                            ignore_errors=True)
        # a torn last line (a killed process) reads with nulls up to its end
        frame = frame.filter(pl.col(_whole_row(kind, header)).is_not_null())
        if kind == "calls":
            frame = frame.with_columns(pl.col("error") == 1, pl.col("args").fill_null(""))
        sparse = _sparse(kind, header)
        if sparse:
            frame = frame.with_columns(*(pl.col(c).fill_null(v) for c, v in sparse.items()))
        absent = _absent(kind, header)
        if absent:
            frame = frame.with_columns(*(pl.lit(v, dtype=types[c]).alias(c) for c, v in absent.items()))
        parts.append(frame.select(columns))
    fill = [pl.col(c).fill_null(v) for c, v in _filled_json(kind).items()]
    if (kind, "json") in files:
        # scan_ndjson stops at a torn last line (a killed process) even with ignore_errors: such a
        # file (one per killed process) is read up to its last whole line, the others are scanned.
        schema = _schema.polars_schema(kind)
        # (a complete gzip file holds whole lines: the writer's, closed; readable() copied the others)
        whole = [p for p in files[kind, "json"] if p.endswith(".gz") or ends_whole(p)]
        torn = [p for p in files[kind, "json"] if p not in whole]
        if whole:
            parts.append(pl.scan_ndjson(whole, schema=schema, ignore_errors=True).with_columns(*fill)
                         .select(columns))
        for path in torn:
            data = whole_lines(path)[0]
            if data.strip():
                parts.append(pl.read_ndjson(io.BytesIO(data), schema=schema, ignore_errors=True).lazy()
                             .with_columns(*fill).select(columns))
    return pl.concat(parts, how="vertical") if parts else None


def load_polars(source: Source) -> Any:
    """A Polars LazyFrame of every call record in source (see torchwrapper.load)."""
    pl = _import("polars")
    files = readable_files(source)
    calls = _polars_kind(pl, files, "calls")
    if calls is None:
        return pl.LazyFrame(schema=_schema.polars_schema("calls"))
    gpu = _polars_kind(pl, files, "gpu")
    if gpu is not None:
        per_call = (gpu.filter(pl.col("call_id") != 0)
                    .group_by("pid", "call_id")
                    .agg(((pl.col("end_ns") - pl.col("start_ns")).clip(lower_bound=0)).sum().alias("_gpu")))
        calls = (calls.join(per_call, on=["pid", "call_id"], how="left")
                 .with_columns(pl.col("_gpu").fill_null(0).cast(pl.Int64).alias("gpu_ns"))
                 .drop("_gpu"))
    return calls.sort("start_ns", "pid", "call_id", maintain_order=True)


# ---- DuckDB ----------------------------------------------------------------------------------------

def _sql_text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _sql_value(value: Any) -> str:
    return _sql_text(value) if isinstance(value, str) else "NULL" if value is None else str(int(value))


def _sql_list(paths: List[str]) -> str:
    return "[" + ", ".join(_sql_text(p) for p in paths) + "]"


def _sql_struct(columns: Dict[str, str]) -> str:
    return "{" + ", ".join(f"{_sql_text(name)}: {_sql_text(type_)}" for name, type_ in columns.items()) + "}"


def _duckdb_kind(files: Dict[Tuple[str, str], List[str]], kind: str) -> Optional[str]:
    """A SELECT of every record of a kind, typed from the schema; None when there are none."""
    columns = _schema.duckdb_columns(kind)
    names = ", ".join(f'"{c}"' for c in columns)
    parts = []
    for header, paths in csv_by_header(files.get((kind, "csv"), [])).items():
        # Explicit dialect and columns (no sniffing); allow_quoted_nulls=false keeps a quoted "" (an
        # older file's first model) apart from an empty field (null); a torn or malformed line is skipped. A file of
        # an older version gets the columns it lacks as the schema's missing values.
        present = {c: columns.get(c, "VARCHAR") for c in header}   # the file's own order; unknown: text
        absent, sparse = _absent(kind, header), _sparse(kind, header)
        select = ", ".join(f'CAST({_sql_value(absent[c])} AS {t}) AS "{c}"' if c in absent else
                           f'coalesce("{c}", {_sql_value(sparse[c])}) AS "{c}"' if c in sparse else f'"{c}"'
                           for c, t in columns.items())
        parts.append(f"SELECT {select} FROM read_csv({_sql_list(paths)}, columns={_sql_struct(present)}, "
                     f"header=true, auto_detect=false, delim=',', quote='\"', escape='\"', "
                     f"allow_quoted_nulls=false, ignore_errors=true, null_padding=false) "
                     f"WHERE {_whole_row(kind, header)} IS NOT NULL")
    if (kind, "json") in files:
        filled = _filled_json(kind)
        select = ", ".join(f'coalesce("{c}", {_sql_value(filled[c])}) AS "{c}"' if c in filled else f'"{c}"'
                           for c in columns)
        # a torn last line (a killed process) does not parse: a row of nulls
        parts.append(f"SELECT {select} FROM read_json({_sql_list(files[kind, 'json'])}, "
                     f"format='newline_delimited', columns={_sql_struct(columns)}, ignore_errors=true) "
                     f"WHERE \"{_whole_row(kind, ())}\" IS NOT NULL")
    return " UNION ALL ".join(parts) if parts else None


def _calls_sql(files: Dict[Tuple[str, str], List[str]]) -> Tuple[str, Optional[str]]:
    """SELECTs of the call records (GPU time joined in) and of the GPU records (or None)."""
    columns = _schema.duckdb_columns("calls")
    calls = _duckdb_kind(files, "calls")
    if calls is None:
        calls = "SELECT " + ", ".join(f'CAST(NULL AS {t}) AS "{c}"' for c, t in columns.items()) + " WHERE false"
    select = ", ".join('coalesce(c."args", \'\') AS "args"' if c == "args" else f'c."{c}"' for c in columns)
    gpu = _duckdb_kind(files, "gpu")
    if gpu is None:
        return f"SELECT {select} FROM ({calls}) AS c ORDER BY start_ns, pid, call_id", None
    select = select.replace('c."gpu_ns"', 'coalesce(g.gpu, 0)::BIGINT AS "gpu_ns"')
    return (f"SELECT {select} FROM ({calls}) AS c LEFT JOIN (SELECT pid, call_id, "
            f"sum(greatest(end_ns - start_ns, 0)) AS gpu FROM ({gpu}) WHERE call_id <> 0 GROUP BY pid, call_id) AS g "
            f"USING (pid, call_id) ORDER BY start_ns, pid, call_id"), gpu


def load_duckdb(source: Source, connection: Any = None) -> Any:
    """A DuckDB relation of every call record in source (see torchwrapper.load)."""
    duckdb = _import("duckdb")
    connection = connection if connection is not None else duckdb.connect()
    return connection.sql(_calls_sql(readable_files(source))[0])


def sql(source: Source, query: str, connection: Any = None) -> Any:
    """Runs a DuckDB SQL query over the run in source, with the views ``calls`` (every call record, as
    torchwrapper.load gives them) and, where the run has them, ``gpu``, ``stats``, ``updates`` (the
    model watch's streams) and ``summary`` (summary.json: one row per process and API); returns the DuckDB
    relation (``.df()``, ``.pl()``, ``.fetchall()``). A connection may be given (the views are
    created in it, replacing views of those names); otherwise a new in-memory one is used."""
    duckdb = _import("duckdb")
    connection = connection if connection is not None else duckdb.connect()
    files = readable_files(source, ("calls", "gpu", "stats", "updates"))
    calls, gpu = _calls_sql(files)
    connection.execute(f"CREATE OR REPLACE TEMP VIEW calls AS {calls}")
    if gpu is not None:
        connection.execute(f"CREATE OR REPLACE TEMP VIEW gpu AS {gpu}")
    for kind in ("stats", "updates"):   # the model watch's streams, typed from the schema too
        select = _duckdb_kind(files, kind)
        if select is not None:
            connection.execute(f"CREATE OR REPLACE TEMP VIEW {kind} AS {select}")
    summaries = summary_files(source)
    if summaries:   # summary.json of each process: one row per API, with the file it came from
        connection.execute("CREATE OR REPLACE TEMP VIEW summary AS SELECT filename AS file, "
                           "unnest(apis, recursive := true) FROM read_json("
                           f"{_sql_list(summaries)}, filename = true, format = 'auto')")
    return connection.sql(query)


__all__ = ["load_duckdb", "load_polars", "readable_files", "sql"]
