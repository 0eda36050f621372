# SPDX-License-Identifier: MIT
"""torchwrapper.load(engine="polars"|"duckdb") and torchwrapper.sql() against tw-report on a real
two-process run, in both formats; skipped where the engine is not installed."""
import json
import os
import subprocess
import sys
from collections import defaultdict

import pytest
import torch

import torchwrapper as tw

BUILD = os.environ.get("top_builddir", os.path.join(os.path.dirname(__file__), "..", ".."))
TW_REPORT = os.path.join(BUILD, "tw-report")
ENGINES = ["pandas", "polars", "duckdb"]

PROGRAM = """
import multiprocessing as mp, torch

def work(n):
    x = torch.ones(4)
    for _ in range(n):
        x = torch.add(x, 1)
    return x.sum().item()

if __name__ == "__main__":
    child = mp.get_context("spawn").Process(target=work, args=(7,))
    child.start()
    child.join()
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.ReLU())
    print(work(5), model(torch.randn(2, 3)).sum().item())
"""


@pytest.fixture(scope="module", params=["csv", "json"])
def run_dir(request, tmp_path_factory):
    """A program and its spawned child profiled by python -m torchwrapper run."""
    where = tmp_path_factory.mktemp(f"engines-{request.param}")
    (where / "prog.py").write_text(PROGRAM)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, "-m", "torchwrapper", "run", "--no-report", "-o", "out", "--set",
                           f"format={request.param}", "prog.py"], cwd=where, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    out = where / "out"
    assert len({json.load(open(out / m))["pid"] for m in os.listdir(out) if m.startswith("manifest")}) == 2
    return out


def need(engine):
    if engine != "pandas":
        pytest.importorskip(engine)


def report_totals(out_dir):
    done = subprocess.run([TW_REPORT, "--format", "json", str(out_dir)], capture_output=True, text=True, check=True)
    return {r["key"]: (r["calls"], r["total_ns"], r["self_ns"]) for r in json.loads(done.stdout)["rows"]}


def rows_of(out_dir, engine):
    """(api, cost_ns, self_ns, pid, call_id, gpu_ns, module) of every call, as the engine reads them."""
    columns = ["api", "cost_ns", "self_ns", "pid", "call_id", "gpu_ns", "module"]
    if engine == "pandas":
        frame = tw.load(out_dir)
        return [tuple(r) for r in frame[columns].astype({"api": str}).itertuples(index=False)]
    if engine == "polars":
        return list(tw.load(out_dir, engine="polars").select(columns).collect().iter_rows())
    return tw.load(out_dir, engine="duckdb").select(*columns).fetchall()


def totals(rows):
    out = defaultdict(lambda: [0, 0, 0])
    for api, cost, self_ns, *_ in rows:
        t = out[api]
        t[0] += 1
        t[1] += cost
        t[2] += self_ns
    return {api: tuple(t) for api, t in out.items()}


@pytest.mark.parametrize("engine", ENGINES)
def test_every_engine_gives_tw_reports_per_api_totals(run_dir, engine):
    need(engine)
    expected = report_totals(run_dir)
    rows = rows_of(run_dir, engine)
    assert totals(rows) == expected
    assert len({pid for _, _, _, pid, *_ in rows}) == 2
    assert expected["torch.add"][0] == 12          # 7 in the child, 5 in the parent
    # in start order, with the module paths of forwards (the model itself named by its class)
    assert [r[0] for r in rows] == [r[0] for r in rows_of(run_dir, "pandas")]
    modules = {r[0]: r[6] for r in rows if r[6]}
    assert modules["torch.nn.Linear.forward"] == "Sequential.0"
    assert {r[6] for r in rows if r[0] == "torch.nn.Sequential.forward"} == {"Sequential"}


@pytest.mark.parametrize("engine", ["polars", "duckdb"])
def test_the_engines_types_are_the_schemas(run_dir, engine):
    need(engine)
    columns = [c["name"] for c in tw.schema()["kinds"]["calls"]["columns"]]
    if engine == "polars":
        import polars as pl
        schema = tw.load(run_dir, engine="polars").collect_schema()
        assert list(schema) == columns
        assert schema["start_ns"] == pl.Int64 and schema["error"] == pl.Boolean and schema["api"] == pl.String
    else:
        relation = tw.load(run_dir, engine="duckdb")
        assert relation.columns == columns
        types = dict(zip(relation.columns, map(str, relation.types)))
        assert types["start_ns"] == "BIGINT" and types["error"] == "BOOLEAN" and types["api"] == "VARCHAR"


def test_sql_queries_a_calls_view(run_dir):
    pytest.importorskip("duckdb")
    expected = report_totals(run_dir)
    got = tw.sql(run_dir, "SELECT api, count(*), sum(total), sum(self) FROM "
                          "(SELECT api, cost_ns AS total, self_ns AS self FROM calls) GROUP BY api").fetchall()
    assert {api: (n, t, s) for api, n, t, s in got} == expected
    assert tw.sql(run_dir, "SELECT count(DISTINCT pid) FROM calls").fetchall() == [(2,)]


GPU_FILES = {
    "csv": ("call_id,api,start_ns,cost_ns,self_ns,gpu_ns,pid,tid,depth,parent_id,error,args,module\n"
            "2,torch.matmul,1000,500,500,0,42,42,1,1,0,,\n"
            "1,torch.nn.Linear.forward,900,800,300,0,42,42,0,0,0,\"((f32[2]@cpu,), {})\",\"\"\n"
            "3,torch.add,20",
            "call_id,api,kind,name,start_ns,end_ns,device,stream,correlation_id,pid\n"
            "2,torch.matmul,kernel,gemm,1200,1450,0,7,5,42\n"
            "2,torch.matmul,memcpy,,1460,1470,0,7,6,42\n"
            "0,,kernel,stray,1500,1600,0,7,7,42\n"),
    "json": ('{"call_id":2,"api":"torch.matmul","start_ns":1000,"cost_ns":500,"self_ns":500,"gpu_ns":0,"pid":42,'
             '"tid":42,"depth":1,"parent_id":1,"error":false,"args":"","module":null}\n'
             '{"call_id":1,"api":"torch.nn.Linear.forward","start_ns":900,"cost_ns":800,"self_ns":300,"gpu_ns":0,'
             '"pid":42,"tid":42,"depth":0,"parent_id":0,"error":false,"args":"((f32[2]@cpu,), {})","module":""}\n'
             '{"call_id":3,"api":"torch.a',
             '{"call_id":2,"api":"torch.matmul","kind":"kernel","name":"gemm","start_ns":1200,"end_ns":1450,'
             '"device":0,"stream":7,"correlation_id":5,"pid":42}\n'
             '{"call_id":2,"api":"torch.matmul","kind":"memcpy","name":"","start_ns":1460,"end_ns":1470,'
             '"device":0,"stream":7,"correlation_id":6,"pid":42}\n'
             '{"call_id":0,"api":"","kind":"kernel","name":"stray","start_ns":1500,"end_ns":1600,"device":0,'
             '"stream":7,"correlation_id":7,"pid":42}\n'),
}


@pytest.mark.filterwarnings("ignore:torchwrapper.load. skipped")
@pytest.mark.parametrize("fmt", ["csv", "json"])
@pytest.mark.parametrize("engine", ENGINES)
def test_gpu_time_is_joined_and_a_torn_last_line_skipped(tmp_path, engine, fmt):
    need(engine)
    calls, gpu = GPU_FILES[fmt]
    ext = ".csv" if fmt == "csv" else ".jsonl"
    (tmp_path / f"tw-1-0001{ext}").write_text(calls)
    (tmp_path / f"tw-1-0001.gpu{ext}").write_text(gpu)
    rows = rows_of(tmp_path, engine)
    assert [(api, gpu_ns, module if isinstance(module, str) else "") for api, _, _, _, _, gpu_ns, module in rows] == \
        [("torch.nn.Linear.forward", 0, ""), ("torch.matmul", 260, "")]
    if engine == "duckdb":
        assert tw.sql(tmp_path, "SELECT count(*) FROM gpu").fetchall() == [(3,)]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_files_of_an_older_version_and_newer_ones_read_together(tmp_path, engine, fmt):
    # the hand-written files predate the step column; a real run's files have it: both in one load
    need(engine)
    calls, _ = GPU_FILES[fmt]
    ext = ".csv" if fmt == "csv" else ".jsonl"
    (tmp_path / f"old-0001{ext}").write_text(calls)
    with tw.profile(out_dir=str(tmp_path), format=fmt, file_name_spec="new-{index}") as prof:
        torch.ones(2).add(1)
    assert prof.stats()["records"] > 0
    if engine == "pandas":
        with pytest.warns(UserWarning, match="torn last line"):   # the hand-written file's last line
            frame = tw.load(tmp_path)
        pairs = list(zip(frame["api"], frame["step"]))
    elif engine == "polars":
        pairs = list(tw.load(tmp_path, engine="polars").select("api", "step").collect().iter_rows())
    else:
        pairs = tw.load(tmp_path, engine="duckdb").select("api", "step").fetchall()
    steps = {api: step for api, step in pairs}
    assert steps["torch.matmul"] == -1          # a file without the column: unknown step
    assert steps["torch.Tensor.add"] == 0       # the first step of the run


def test_an_unknown_engine_is_refused():
    with pytest.raises(ValueError, match="engine='spark' is not accepted: give 'pandas', 'polars' or 'duckdb'"):
        tw.load(".", engine="spark")


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_sql_has_the_watch_streams_and_the_summary_typed_by_the_schema(tmp_path, fmt):
    pytest.importorskip("duckdb")
    out = str(tmp_path / "out")
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.ReLU())
    with tw.profile(out_dir=out, format=fmt, tensor_stats={"tensors": ["output"]}, track=["parameters"]):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            model(torch.randn(2, 3)).sum().backward()
            optimizer.step()
    stats, updates = tw.load_stats(out), tw.load_updates(out)
    assert len(stats) > 0 and len(updates) > 0
    assert tw.sql(out, "SELECT count(*) FROM stats").fetchall() == [(len(stats),)]
    assert tw.sql(out, "SELECT count(*) FROM updates").fetchall() == [(len(updates),)]
    # typed from the schema, not inferred: the shape is a list of integers
    assert tw.sql(out, "SELECT DISTINCT typeof(shape), typeof(numel), typeof(mean) FROM stats").fetchall() == \
        [("BIGINT[]", "BIGINT", "DOUBLE")]
    assert sorted(tuple(s) for (s,) in tw.sql(out, "SELECT DISTINCT shape FROM stats").fetchall()) == \
        sorted({tuple(s) for s in stats["shape"]})
    with open(os.path.join(out, "summary.json")) as f:
        summary = {a["api"]: a["calls"] for a in json.load(f)["apis"]}
    assert dict(tw.sql(out, "SELECT api, calls FROM summary").fetchall()) == summary
    # and through Polars, with the schema's types
    pytest.importorskip("polars")
    lazy = tw.load_stats(out, engine="polars")
    assert lazy.collect_schema().names() == tw.STATS_COLUMNS
    frame = lazy.collect()
    assert frame.height == len(stats) and str(frame.schema["numel"]) == "Int64"
    assert sorted(frame["mean"].to_list()) == sorted(stats["mean"].to_list())
    assert tw.load_updates(out, engine="polars").collect().height == len(updates)


SPARSE = [c["name"] for c in tw.schema()["kinds"]["calls"]["columns"] if c.get("sparse")]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_sparse_columns_read_as_their_missing_value_where_a_record_has_none(tmp_path, engine, fmt):
    # flops, mem_*: an empty CSV field / a key left out of a JSON line in the records that carry none
    # (x.dim() here); every engine reads them as the schema's missing value (0), never as null
    need(engine)
    with tw.profile(out_dir=str(tmp_path), format=fmt, memory=True):
        x = torch.nn.Linear(8, 4)(torch.randn(2, 8))
        x.dim()
    if engine == "pandas":
        rows = tw.load(tmp_path)[["api"] + SPARSE].astype({"api": str}).itertuples(index=False)
    elif engine == "polars":
        rows = tw.load(tmp_path, engine="polars").select("api", *SPARSE).collect().iter_rows()
    else:
        rows = tw.load(tmp_path, engine="duckdb").select("api", *SPARSE).fetchall()
    by_api = {api: tuple(values) for api, *values in rows}
    assert by_api["torch.Tensor.dim"] == (0,) * len(SPARSE)
    assert by_api["torch.nn.functional.linear"][SPARSE.index("flops")] == 2 * 2 * 8 * 4
    assert all(v is not None for values in by_api.values() for v in values), by_api
