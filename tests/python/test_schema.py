# SPDX-License-Identifier: MIT
"""torchwrapper.schema() against the files the writers really write: every kind's CSV header and
JSON keys, in both formats, and the readers' columns and types taken from it."""
import csv
import ctypes
import json
import os

import pytest
import torch

import torchwrapper as tw
from torchwrapper import _files, _schema

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE = os.environ.get("FAKE_CUPTI") or os.path.join(HERE, "..", "c", ".libs", "fake_cupti.so")
TYPES = {"int64", "float64", "bool", "string", "list<int64>", "object"}


def test_the_schema_is_plain_json_data_with_every_kind_described():
    s = tw.schema()
    assert json.loads(json.dumps(s)) == s
    assert s["schema_version"] == _schema.SCHEMA_VERSION
    assert set(s["kinds"]) == {"calls", "gpu", "stats", "updates"}
    for kind, k in s["kinds"].items():
        assert isinstance(k["version"], int) and k["description"] and set(k["files"]) == {"csv", "json"}
        names = [c["name"] for c in k["columns"]]
        assert len(names) == len(set(names)), kind
        for c in k["columns"]:
            assert c["type"] in TYPES and isinstance(c["nullable"], bool) and c["description"], (kind, c)
            # times end in _ns; memory columns (mem_*) are in bytes; nothing else has a unit
            assert c["unit"] in (None, "ns", "bytes"), (kind, c)
            assert (c["unit"] == "ns") == c["name"].endswith("_ns"), (kind, c)
            assert (c["unit"] == "bytes") == c["name"].startswith("mem_"), (kind, c)
    s["kinds"]["calls"]["columns"].clear()   # a copy: the readers' schema is untouched
    assert tw.schema()["kinds"]["calls"]["columns"]


def test_load_adds_the_derived_columns_after_the_files_columns(tmp_path):
    """calls' "derived" columns are not in the files (the writers' headers are the columns), and
    load() gives them, in the schema's order, after those of the files."""
    derived = tw.schema()["kinds"]["calls"]["derived"]
    assert [c["name"] for c in derived] == ["site_text", "input_shapes"]
    for c in derived:
        assert c["type"] in TYPES and c["description"] and c["unit"] is None and not c["nullable"]
    a, b = torch.ones(2, 3), torch.ones(3, 4)
    with tw.profile(out_dir=str(tmp_path), args="summary"):
        torch.mm(a, b)
    frame = tw.load(str(tmp_path))
    assert list(frame.columns) == tw._schema.columns("calls") + [c["name"] for c in derived]
    assert list(frame[frame["api"] == "torch.mm"]["input_shapes"]) == ["[[2, 3], [3, 4]]"]


def test_the_readers_take_their_columns_from_the_schema():
    s = tw.schema()["kinds"]
    assert list(_files.CALL_DTYPES) == [c["name"] for c in s["calls"]["columns"]]
    assert list(_files.GPU_DTYPES) == [c["name"] for c in s["gpu"]["columns"]]
    assert tw.STATS_COLUMNS == [c["name"] for c in s["stats"]["columns"]]
    assert tw.UPDATES_COLUMNS == [c["name"] for c in s["updates"]["columns"]]


def train():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        optimizer.zero_grad()
        model(torch.randn(3, 4)).pow(2).mean().backward()
        optimizer.step()


def files_of(out_dir):
    with open(os.path.join(out_dir, "manifest.json")) as f:
        return [(e["kind"], os.path.join(out_dir, e["name"])) for e in json.load(f)["files"]]


def written_columns(path):
    """The columns as written: the CSV header, or the keys of every JSON line (in order)."""
    with open(path, newline="") as f:
        if path.endswith(".csv"):
            return [next(csv.reader(f))]
        return [list(json.loads(line)) for line in f]


def check_types(kind, path):
    """Every JSON value has the schema's type (null only where nullable)."""
    if not path.endswith(".jsonl"):
        return
    columns = {c["name"]: c for c in tw.schema()["kinds"][kind]["columns"]}
    python = {"int64": int, "float64": (float, int), "bool": bool, "string": str, "list<int64>": list,
              "object": dict}
    with open(path) as f:
        for line in f:
            for name, value in json.loads(line).items():
                c = columns[name]
                if value is None:
                    assert c["nullable"], (kind, name)
                else:
                    assert isinstance(value, python[c["type"]]), (kind, name, value)
                    assert c["type"] == "bool" or not isinstance(value, bool), (kind, name, value)


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_the_schema_matches_what_the_writers_write(tmp_path, fmt):
    out = tmp_path / fmt
    wrapper = tw.TorchWrapper({"out_dir": str(out), "format": fmt, "gpu": "off", "tensor_stats": True,
                               "track": ["parameters", "grads"]})
    wrapper.start(train)
    s = tw.schema()["kinds"]
    seen = set()
    for kind, path in files_of(out):
        expected = [c["name"] for c in s[kind]["columns"]]
        dense = [c["name"] for c in s[kind]["columns"] if not c.get("sparse")]
        for columns in written_columns(path):
            # a JSON line leaves out the sparse columns of a record that carries none of them
            assert columns == expected or (fmt == "json" and columns == dense), (kind, path)
        check_types(kind, path)
        seen.add(kind)
    assert seen == {"calls", "stats", "updates"}


@pytest.mark.skipif(torch.cuda.is_available() or not os.path.exists(FAKE),
                    reason="GPU files from the fake CUPTI that make check builds, on a machine without a GPU")
@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_the_gpu_schema_matches_what_the_gpu_writer_writes(tmp_path, monkeypatch, fmt):
    monkeypatch.setenv("TW_CUPTI_LIBRARY", os.path.abspath(FAKE))
    fake = ctypes.CDLL(os.path.abspath(FAKE))
    fake.fake_cupti_launch.restype = ctypes.c_uint32
    fake.fake_cupti_launch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint64,
                                       ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint32]
    fake.fake_cupti_now.restype = ctypes.c_uint64
    fake.fake_cupti_reset()

    def launch():
        t = fake.fake_cupti_now()
        return fake.fake_cupti_launch(0, b"a_kernel", 0, t, t + 100, 0, 7)

    wrapped = tw.wrap(launch, "my.launch")
    session = tw.Session(out_dir=str(tmp_path), format=fmt, gpu="on", gpu_device=True)
    session.start()
    wrapped()
    session.stop()
    fake.fake_cupti_reset()
    gpu = [path for kind, path in files_of(tmp_path) if kind == "gpu"]
    assert gpu
    expected = [c["name"] for c in tw.schema()["kinds"]["gpu"]["columns"]]
    for path in gpu:
        columns = written_columns(path)
        assert columns and all(c == expected for c in columns)
        check_types("gpu", path)
