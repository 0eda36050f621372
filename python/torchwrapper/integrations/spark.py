# SPDX-License-Identifier: MIT
"""The record files as Spark DataFrames, for runs that outgrow one machine (many ranks, terabytes).

    from pyspark.sql import SparkSession, functions as F
    import torchwrapper.spark

    spark = SparkSession.builder.getOrCreate()
    calls = torchwrapper.spark.read(spark, ["run/rank0", "run/rank1"])          # every process, typed
    calls.groupBy("api").agg(F.count("*"), F.sum("cost_ns")).show()

Columns and types come from the one schema (torchwrapper.schema()): Spark infers nothing. Files of
an older version (without a newer column) get the schema's missing value for it, as load() gives.
pyspark is not a dependency: it is imported when read() is called.
"""
from __future__ import annotations

import os
from typing import Any, Iterable, Union

from .. import _schema
from .._engines import _absent, _filled_json, _sparse, readable_files
from .._outdir import csv_by_header

Source = Union[str, os.PathLike, Iterable[Union[str, os.PathLike]]]

_SPARK = {"int64": "LongType", "float64": "DoubleType", "bool": "BooleanType", "string": "StringType"}


def spark_schema(kind: str = "calls", csv: bool = False) -> Any:
    """The pyspark StructType of a kind's columns (in CSV a bool is written 0/1: read as a long)."""
    from pyspark.sql import types as T

    def spark_type(type_: str) -> Any:
        if type_ == "bool" and csv:
            return T.LongType()
        if type_ not in _SPARK:   # lists and objects (tensor statistics): their text
            return T.StringType()
        return getattr(T, _SPARK[type_])()

    return T.StructType([T.StructField(c["name"], spark_type(c["type"]), True)
                         for c in _schema.schema()["kinds"][kind]["columns"]])


def read(spark: Any, source: Source, kind: str = "calls") -> Any:
    """A Spark DataFrame of every record of kind ("calls" or "gpu") in source: a directory (or
    several) of record files, or the files themselves, of any number of processes and ranks. The
    columns are the schema's, in its order (no GPU join: join the "gpu" kind on pid and call_id)."""
    try:
        from pyspark.sql import functions as F
        from pyspark.sql import types as T
    except ImportError as error:
        raise ImportError("torchwrapper.spark needs pyspark: pip install pyspark (and a Java runtime)") from error
    if kind not in ("calls", "gpu"):
        raise ValueError(f"kind={kind!r} is not accepted: give 'calls' or 'gpu'")
    # complete gzip files (compress "gzip") as they are, through Hadoop's codec; one cut short by a
    # killed writer as a copy of its whole lines on the driver (local mode reads it; a cluster needs
    # the directory it is in shared, as it needs the run's)
    files = readable_files(source, (kind,))
    columns = _schema.columns(kind)
    types = {f.name: f.dataType for f in spark_schema(kind, csv=True).fields}
    parts = []
    for header, paths in csv_by_header(files.get((kind, "csv"), [])).items():
        # The file's own columns in its order (a newer version's unknown ones as text), the quote
        # and escape of RFC 4180, and a quoted "" (the path "", older files' first model) kept apart
        # from an empty field.
        file_schema = T.StructType([T.StructField(c, types.get(c, T.StringType()), True) for c in header])
        # Spark reads a quoted "" and an empty field alike (null) unless emptyValue names the quoted
        # one: it then arrives as the two characters "", put back to "" below.
        frame = spark.read.csv(paths, header=True, schema=file_schema, quote='"', escape='"', mode="DROPMALFORMED",
                               emptyValue='""')
        last = "step" if header and header[-1] == "step" else ("error" if kind == "calls" else "pid")
        frame = frame.where(F.col(last).isNotNull())   # a line torn by a killed process
        for column, value in _absent(kind, header).items():
            frame = frame.withColumn(column, F.lit(value).cast(types[column]))
        for column, value in _sparse(kind, header).items():   # empty where a record has none (flops)
            frame = frame.withColumn(column, F.coalesce(F.col(column), F.lit(value).cast(types[column])))
        for column, type_ in types.items():
            if column in header and isinstance(type_, T.StringType):
                frame = frame.withColumn(column, F.when(F.col(column) == '""', F.lit("")).otherwise(F.col(column)))
        if kind == "calls":
            frame = frame.withColumn("error", F.col("error") == 1).withColumn("args", F.coalesce("args", F.lit("")))
        parts.append(frame.select(*columns))
    if (kind, "json") in files:
        frame = spark.read.json(files[kind, "json"], schema=spark_schema(kind), mode="DROPMALFORMED")
        frame = frame.where(F.col("error" if kind == "calls" else "pid").isNotNull())
        for column, value in _filled_json(kind).items():
            frame = frame.withColumn(column, F.coalesce(F.col(column), F.lit(value)))
        parts.append(frame.select(*columns))
    if not parts:
        return spark.createDataFrame([], spark_schema(kind))
    out = parts[0]
    for part in parts[1:]:
        out = out.unionByName(part)
    return out


__all__ = ["read", "spark_schema"]
