# SPDX-License-Identifier: MIT
"""The C reader as Python sees it (_core.RecordReader, record_kind, read_sites) and the readers built
on it: batches, counters, the root module told from no module, errors that name the file, and one
module that finds the files (no import circle between the readers)."""
import ast
import os

import pytest

import torchwrapper as tw
from torchwrapper import _core, _files, _outdir, _schema

CALLS_HEADER = "call_id,api,start_ns,cost_ns,self_ns,gpu_ns,pid,tid,depth,parent_id,error,args,module\n"
CALLS_CSV = (CALLS_HEADER +
             '1,torch.nn.Sequential.forward,100,50,10,0,7,8,0,0,0,"",""\n'        # the root module: ""
             '2,torch.nn.Linear.forward,110,30,20,0,7,8,1,1,0,"((f32[2]@cpu,), {})",0\n'
             '3,torch.add,120,5,5,0,7,8,2,2,1,"say ""hi"", x",\n'               # no module: empty
             "4,torch.mul,130,")                                                  # torn by a killed process
CALLS_JSON = ('{"call_id":1,"api":"torch.nn.Sequential.forward","start_ns":100,"cost_ns":50,"self_ns":10,"gpu_ns":0,'
              '"pid":7,"tid":8,"depth":0,"parent_id":0,"error":false,"args":"","module":""}\n'
              '{"call_id":2,"api":"torch.nn.Linear.forward","start_ns":110,"cost_ns":30,"self_ns":20,"gpu_ns":0,'
              '"pid":7,"tid":8,"depth":1,"parent_id":1,"error":false,"args":"((f32[2]@cpu,), {})","module":"0"}\n'
              '{"call_id":3,"api":"torch.add","start_ns":120,"cost_ns":5,"self_ns":5,"gpu_ns":0,'
              '"pid":7,"tid":8,"depth":2,"parent_id":2,"error":true,"args":"say \\"hi\\", x","module":null}\n'
              '{"call_id":4,"api":"torch.mul","start_')
GPU_CSV = ("call_id,api,kind,name,start_ns,end_ns,device,stream,correlation_id,pid\n"
           "2,torch.nn.Linear.forward,kernel,gemm,115,125,0,7,5,7\n")


@pytest.fixture(params=["csv", "json"])
def calls_file(request, tmp_path):
    path = tmp_path / ("tw-7-0001.csv" if request.param == "csv" else "tw-7-0001.jsonl")
    path.write_text(CALLS_CSV if request.param == "csv" else CALLS_JSON)
    return str(path)


def test_batches_have_the_schemas_columns_in_its_order(calls_file, tmp_path):
    (tmp_path / "tw-7-0001.gpu.csv").write_text(GPU_CSV)
    reader = _core.RecordReader([calls_file, str(tmp_path / "tw-7-0001.gpu.csv")])
    batches = list(reader)
    assert [(kind, list(columns)) for _, kind, columns in batches] == \
        [("calls", _schema.columns("calls")), ("gpu", _schema.columns("gpu"))]
    calls = batches[0][2]
    assert memoryview(calls["call_id"]).cast("q").tolist() == [1, 2, 3]
    assert memoryview(calls["error"]).cast("?").tolist() == [False, False, True]
    assert calls["module"] == ["", "0", None]
    assert calls["args"][2] == 'say "hi", x'
    assert calls["step"] == (-1).to_bytes(8, "little", signed=True) * 3   # files older than the column
    assert batches[1][0] == str(tmp_path / "tw-7-0001.gpu.csv")
    assert (reader.rows, reader.truncated, reader.malformed) == (4, 1, 0)


def test_batch_size_changes_the_batches_not_the_rows(calls_file):
    whole = [row for _, _, c in _core.RecordReader(calls_file) for row in zip(c["api"], c["module"])]
    small = list(_core.RecordReader(calls_file, batch_rows=2))
    assert [len(c["api"]) for _, _, c in small] == [2, 1]
    assert [row for _, _, c in small for row in zip(c["api"], c["module"])] == whole
    with pytest.raises(ValueError, match="batch_rows=0 is not accepted"):
        _core.RecordReader(calls_file, batch_rows=0)


def test_the_root_module_is_told_from_no_module_in_both_formats(calls_file):
    rows = list(_files.iter_rows(calls_file))
    assert [(r.call_id, r.module) for r in rows] == [(1, ""), (2, "0"), (3, None)]
    assert rows[2].error is True and rows[2].args == 'say "hi", x'
    with pytest.warns(UserWarning, match="skipped 1 torn last line"):
        frame = tw.load(calls_file)
    assert frame["module"].tolist()[:2] == ["", "0"] and frame["module"].isna().tolist() == [False, False, True]


def test_a_file_older_than_the_module_column(tmp_path):
    path = tmp_path / "old.csv"
    path.write_text("call_id,api,start_ns,cost_ns,self_ns,gpu_ns,pid,tid,depth,parent_id,error,args\n"
                    "1,torch.add,100,5,5,0,7,8,0,0,0,\n")
    assert [r.module for r in _files.iter_rows(str(path))] == [None]     # Record: no module known
    assert tw.load(str(path))["module"].tolist() == [""]                 # load(): the schema's missing value


def test_rows_that_do_not_parse_are_skipped_counted_and_warned(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text(CALLS_HEADER + "1,torch.add,100,5,5,0,7,8,0,0,0,,\nx,torch.add,1,1,1,0,7,8,0,0,0,,\n")
    reader = _core.RecordReader(str(path))
    assert sum(len(c["api"]) for _, _, c in reader) == 1 and reader.malformed == 1
    with pytest.warns(UserWarning, match="skipped 1 row.s. whose fields do not parse"):
        assert len(tw.load(str(path))) == 1


def test_kinds_of_files(tmp_path, calls_file):
    cases = {"gpu.csv": (GPU_CSV, "gpu"), "empty.csv": ("", None),
             "s.stats.csv": ("call_id,step,module,class,tensor,index\n1,1,,M,input,0\n", "stats"),
             "u.updates.jsonl": ('{"call_id": 1, "api": "torch.add_", "outer_call_id": 0, "parameter": "w", '
                                 '"tensor": "parameter", "version": 2}\n', "updates")}
    for name, (text, kind) in cases.items():
        (tmp_path / name).write_text(text)
        assert _outdir.kind(str(tmp_path / name)) == kind, name
    assert _core.record_kind(calls_file) == "calls"
    found = _outdir.files_by_kind(str(tmp_path), ("calls", "gpu", "stats", "updates"))
    assert {k: [os.path.basename(p) for p in v] for k, v in found.items()} == {
        ("calls", "csv" if calls_file.endswith(".csv") else "json"): [os.path.basename(calls_file)],
        ("gpu", "csv"): ["gpu.csv"], ("stats", "csv"): ["s.stats.csv"], ("updates", "json"): ["u.updates.jsonl"]}
    # a stream is no call records: refused by the record reader, naming the file
    with pytest.raises(ValueError, match="s.stats.csv is not a TorchWrapper record file"):
        list(_core.RecordReader(str(tmp_path / "s.stats.csv")))
    with pytest.raises(ValueError, match="gpu.csv holds gpu records, not call records"):
        list(_files.iter_rows(str(tmp_path / "gpu.csv")))


def test_errors_name_the_bad_path(tmp_path):
    missing = str(tmp_path / "nope.csv")
    with pytest.raises(FileNotFoundError, match="nope.csv"):
        list(_core.RecordReader(missing))
    with pytest.raises(FileNotFoundError, match="nope.csv"):
        _core.record_kind(missing)
    with pytest.raises(FileNotFoundError, match="nope.csv"):
        tw.load(missing)
    other = tmp_path / "other.csv"
    other.write_text("time,value\n1,2\n")
    with pytest.raises(ValueError, match="other.csv is not a TorchWrapper record file: its first line is 'time,value'"):
        tw.load(str(other))
    with pytest.raises(ValueError, match="other.csv is not a TorchWrapper record file"):
        list(_files.iter_rows(str(other)))
    sites = tmp_path / "sites.json"
    sites.write_text('{"pid": 7, "sites": {"1": {"file": "a.py"}}}')
    with pytest.raises(ValueError, match="sites.json: site '1' is not"):
        tw.load_sites(str(tmp_path))


def test_sites_files_are_read_by_the_c_parser(tmp_path):
    (tmp_path / "sites.json").write_text('{"sites_version": 1, "pid": 7, "sites": {"1": {"file": "t.py", "line": 3, '
                                         '"function": "f", "text": "t.py:3 f"}}}')
    (tmp_path / "sites-8.json").write_text('{"sites_version": 1, "pid": 8, "sites": {}}')
    assert tw.load_sites(str(tmp_path)) == {(7, 1): {"file": "t.py", "line": 3, "function": "f", "text": "t.py:3 f"}}
    assert _core.read_sites(str(tmp_path / "sites-8.json")) == (8, {})


def imports(module):
    """The torchwrapper modules a module's source imports (at any depth of its code); module is dotted
    under the package (integrations.spark), whose own modules it imports with as many dots."""
    path = os.path.join(os.path.dirname(tw.__file__), *module.split(".")) + ".py"
    tree = ast.parse(open(path).read())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == module.count(".") + 1:
            found.update([node.module] if node.module else [alias.name for alias in node.names])
    return found


def test_one_module_finds_the_files_and_the_readers_import_no_circle():
    assert imports("_outdir") <= {"_core"}
    for reader in ("_engines", "integrations.spark"):
        assert "_files" not in imports(reader) and "_outdir" in imports(reader), reader
    assert "_outdir" in imports("_files")
