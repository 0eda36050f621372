# SPDX-License-Identifier: MIT
"""torchwrapper.spark.read() against tw-report on a real two-process run, in both formats, Spark in
local mode. Skipped without pyspark or a Java runtime: `make check-engines` installs both (.ci/run)."""
import shutil

import pytest

from test_compress import killed, runs  # noqa: F401  (fixtures: compressed runs, and a killed one)
from test_engines import report_totals, run_dir  # noqa: F401  (the fixture: a real two-process run)

pyspark = pytest.importorskip("pyspark")
if shutil.which("java") is None:
    pytest.skip("Spark needs a Java runtime (make check-engines installs default-jre-headless)",
                allow_module_level=True)

import torchwrapper.spark as tw_spark  # noqa: E402


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession
    session = (SparkSession.builder.master("local[1]").appName("torchwrapper-tests")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def test_spark_gives_tw_reports_per_api_totals(spark, run_dir):  # noqa: F811
    from pyspark.sql import functions as F
    calls = tw_spark.read(spark, run_dir)
    assert calls.columns == tw_spark._schema.columns("calls")
    types = dict(calls.dtypes)
    assert types["start_ns"] == "bigint" and types["error"] == "boolean" and types["step"] == "bigint"
    rows = calls.groupBy("api").agg(F.count("*").alias("calls"), F.sum("cost_ns").alias("total"),
                                    F.sum("self_ns").alias("self")).collect()
    assert {r["api"]: (r["calls"], r["total"], r["self"]) for r in rows} == report_totals(run_dir)
    assert calls.select("pid").distinct().count() == 2        # both processes
    modules = {r["module"] for r in calls.where(F.col("api") == "torch.nn.Sequential.forward").collect()}
    assert modules == {"Sequential"}                           # the root module: its class


def test_an_unknown_kind_is_refused(spark, tmp_path):
    with pytest.raises(ValueError, match="kind='stats' is not accepted: give 'calls' or 'gpu'"):
        tw_spark.read(spark, tmp_path, kind="stats")


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_sparse_columns_read_as_their_missing_value_where_a_record_has_none(spark, tmp_path, fmt):
    # flops, mem_*: an empty CSV field / a key left out of a JSON line where a record carries none
    import torch

    import torchwrapper as tw
    sparse = [c["name"] for c in tw.schema()["kinds"]["calls"]["columns"] if c.get("sparse")]
    with tw.profile(out_dir=str(tmp_path), format=fmt, memory=True):
        torch.nn.Linear(8, 4)(torch.randn(2, 8)).dim()
    by_api = {r["api"]: tuple(r[c] for c in sparse) for r in tw_spark.read(spark, tmp_path).collect()}
    assert by_api["torch.Tensor.dim"] == (0,) * len(sparse)
    assert by_api["torch.nn.functional.linear"][sparse.index("flops")] == 2 * 2 * 8 * 4


def test_spark_reads_compressed_files_as_the_uncompressed_run(spark, runs):  # noqa: F811
    # complete gzip members through Hadoop's codec: the same rows as the plain run (times apart)
    plain, packed, _ = runs
    stable = ["api", "call_id", "depth", "parent_id", "error", "args", "module", "step"]
    rows = sorted(tuple(r) for r in tw_spark.read(spark, packed).select(*stable).collect())
    assert rows == sorted(tuple(r) for r in tw_spark.read(spark, plain).select(*stable).collect())
    from pyspark.sql import functions as F
    totals = tw_spark.read(spark, packed).groupBy("api").agg(F.count("*").alias("calls"), F.sum("cost_ns"),
                                                              F.sum("self_ns")).collect()
    assert {r[0]: (r[1], r[2], r[3]) for r in totals} == report_totals(packed)


def test_spark_reads_a_killed_processs_compressed_files_to_their_last_flush(spark, killed):  # noqa: F811
    # the last file, a member cut short, through a copy of its whole lines
    from pyspark.sql import functions as F
    totals = tw_spark.read(spark, killed).groupBy("api").agg(F.count("*"), F.sum("cost_ns"), F.sum("self_ns")).collect()
    assert {r[0]: (r[1], r[2], r[3]) for r in totals} == report_totals(killed)
