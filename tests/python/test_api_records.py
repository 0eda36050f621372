# SPDX-License-Identifier: MIT
"""The original tool's results compared value by value with the files they come from: callRecords,
dataframe() and summary(), for CSV and JSON, for files written before the step and site columns and
for a file of a future version with a column appended; detailedAPIName resolves to the callable."""
import csv
import importlib
import json
import os
import shutil

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from torchwrapper import TorchWrapper, getAPIName, getAttributes, load
from torchwrapper._api import call_records
from torchwrapper._files import read_rows

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
FIELDS_INT = ("call_id", "start_ns", "cost_ns", "self_ns", "gpu_ns", "pid", "tid", "depth", "parent_id")


def raw_calls(paths):
    """The calls of record files parsed on their own (csv.DictReader, json.loads), as dicts, in the
    order the calls started: what the files say, independently of the package's reader."""
    calls = []
    for path in paths:
        with open(path, newline="", encoding="utf-8") as f:
            if path.endswith(".csv"):
                for row in csv.DictReader(f):
                    calls.append(dict(row, **{k: int(row[k]) for k in FIELDS_INT}))
            else:
                calls.extend(json.loads(line) for line in f)
    calls.sort(key=lambda c: (c["start_ns"], c["pid"], c["call_id"]))
    return calls


def by_api(calls):
    grouped = {}
    for c in calls:
        grouped.setdefault(c["api"], []).append(c)
    return grouped


def assert_call_records_match(records, calls, detailed=None):
    """Every entry of callRecords holds its call's values from the files, numbered in call order."""
    grouped = by_api(calls)
    assert list(records) == list(grouped)   # APIs in the order of their first call
    for api, api_calls in grouped.items():
        entry = records[api]
        assert sorted(k for k in entry if k != "TotalTime(ms)") == list(range(1, len(api_calls) + 1))
        for number, call in enumerate(api_calls, 1):
            assert entry[number] == {
                "detailedAPIName": (detailed or {}).get(api, api),
                "StartTimestamp": call["start_ns"],
                "CostTime(ms)": call["cost_ns"] / 1e6,
                "Arguments": call["args"],
            }, (api, number)
        assert entry["TotalTime(ms)"] == sum(c["cost_ns"] for c in api_calls) / 1e6


def my_code():
    a = torch.randn(1, 3)
    b = torch.randn(2, 3, dtype=torch.float64)
    model = nn.Linear(3, 2)
    c = F.relu(model(a + a))
    torch.add(b, b, alpha=2)
    return c.sum() + b.sum()


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_call_records_hold_each_calls_values_from_the_files(tmp_path, fmt):
    wrapper = TorchWrapper({"out_dir": str(tmp_path), "format": fmt})
    wrapper.start(my_code)
    calls = raw_calls(wrapper.files)
    records = wrapper.callRecords
    assert_call_records_match(records, calls, wrapper._profile.detailed_names())
    # what the manual's reader looks at first: the arguments of each call, as given
    assert records["torch.randn"][1]["Arguments"] == "((1, 3), {})"
    assert records["torch.randn"][2]["Arguments"] == "((2, 3), {'dtype': f64})"
    assert records["torch.add"][1]["Arguments"] == "((f64[2,3]@cpu, f64[2,3]@cpu), {'alpha': 2})"
    assert records["torch.nn.Linear.forward"][1]["Arguments"] == "((Linear, f32[1,3]@cpu), {})"

    # dataframe(): the same values for the same call, as the original columns
    frame = wrapper.dataframe()
    assert len(frame) == len(calls)
    for row in frame.to_dict("records"):
        entry = records[row["API Name"]][row["Call Number"]]
        assert row["Arguments"] == entry["Arguments"]
        assert row["Start Timestamp"] == entry["StartTimestamp"]
        assert row["Cost Time (ms)"] == entry["CostTime(ms)"]
        assert row["Total Time (ms)"] == pytest.approx(records[row["API Name"]]["TotalTime(ms)"], rel=1e-12)

    # summary(): the writer's per-API totals are those of the calls in the files
    summary = wrapper.summary().set_index("api")
    for api, api_calls in by_api(calls).items():
        row = summary.loc[api]
        costs = [c["cost_ns"] for c in api_calls]
        assert row["calls"] == len(api_calls)
        assert row["total_ms"] == sum(costs) / 1e6
        assert row["self_ms"] == sum(c["self_ns"] for c in api_calls) / 1e6
        assert (row["min_ms"], row["max_ms"]) == (min(costs) / 1e6, max(costs) / 1e6)
        assert row["errors"] == 0


def test_detailed_api_name_is_a_path_that_resolves_to_the_callable(tmp_path):
    """detailedAPIName says where a callable is defined, as a dotted path a user can import and
    follow back to it: torch.randn is torch._C._VariableFunctions.randn (its __module__ and
    __qualname__ would say torch._VariableFunctionsClass.randn, which does not exist)."""
    wrapper = TorchWrapper({"out_dir": str(tmp_path), "format": "csv"})
    wrapper.start(my_code)
    detailed = {api: entry[1]["detailedAPIName"] for api, entry in wrapper.callRecords.items()}
    assert detailed["torch.randn"] == "torch._C._VariableFunctions.randn"
    assert detailed["torch.nn.Linear.forward"] == "torch.nn.modules.linear.Linear.forward"
    assert detailed["torch.nn.functional.relu"] == "torch.nn.functional.relu"
    assert detailed["torch.Tensor.__add__"] == "torch._C.TensorBase.__add__"
    for api, path in detailed.items():
        module_name, obj = None, None
        parts = path.split(".")
        for cut in range(len(parts) - 1, 0, -1):   # the longest importable prefix, then attributes
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            module_name = ".".join(parts[:cut])
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
            break
        assert module_name is not None, path
        assert getAPIName(obj) == api, (api, path)


def copy_without_columns(src, dst, dropped):
    """src as a file of an older version: the same rows without the dropped columns."""
    if src.endswith(".csv"):
        with open(src, newline="") as f:
            rows = list(csv.reader(f))
        keep = [i for i, name in enumerate(rows[0]) if name not in dropped]
        with open(dst, "w", newline="") as f:
            csv.writer(f, lineterminator="\n").writerows([[r[i] for i in keep] for r in rows])
    else:
        with open(src) as f, open(dst, "w") as out:
            for line in f:
                o = json.loads(line)
                out.write(json.dumps({k: v for k, v in o.items() if k not in dropped}) + "\n")


@pytest.mark.parametrize("name", ["calls-before-step.csv", "calls-before-step.jsonl"])
def test_files_written_before_the_step_and_site_columns_give_the_same_call_records(name):
    """A fixture written by a version before the step and site columns (its module column is last)."""
    path = os.path.join(DATA, name)
    calls = raw_calls([path])
    assert "step" not in calls[0] and "site" not in calls[0]
    rows = read_rows([path])
    assert_call_records_match(call_records(rows, {}), calls)
    assert [r.step for r in rows] == [-1] * len(rows) and [r.site for r in rows] == [0] * len(rows)
    assert [r.module for r in rows] == [None, None, None, "", None, None]   # the model itself is ""
    frame = load(path, original_names=True)
    assert list(frame["Arguments"]) == [c["args"] for c in calls]
    assert list(frame["Step"]) == [-1] * len(calls)


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_a_file_of_a_future_version_with_a_column_appended_reads_the_same(tmp_path, fmt):
    wrapper = TorchWrapper({"out_dir": str(tmp_path / "out"), "format": fmt})
    wrapper.start(my_code)
    (path,) = wrapper.files
    future = str(tmp_path / ("future" + os.path.splitext(path)[1]))
    if fmt == "csv":
        with open(path, newline="") as f:
            lines = f.read().splitlines()
        assert all(line.count('"') % 2 == 0 for line in lines)   # one physical line a record
        with open(future, "w", newline="") as f:   # a text column with a comma, quoted, after the others
            f.write("".join(line + (',future_column\n' if n == 0 else ',"1,5"\n') for n, line in enumerate(lines)))
    else:
        with open(path) as f, open(future, "w") as out:
            for line in f:
                out.write(json.dumps(dict(json.loads(line), future_column=[1, 5])) + "\n")
    expected = call_records(read_rows([path]), {})
    assert call_records(read_rows([future]), {}) == expected
    assert_call_records_match(expected, raw_calls([path]))
    modules = [r.module for r in read_rows([path])]
    assert [r.module for r in read_rows([future])] == modules and "Linear" in modules and None in modules
    assert list(load(future)["args"]) == list(load(path)["args"])


def test_an_older_file_made_from_a_run_keeps_its_arguments(tmp_path):
    """The same calls, written by today's writer and as an older one wrote them: equal call records."""
    wrapper = TorchWrapper({"out_dir": str(tmp_path / "out"), "format": "csv"})
    wrapper.start(my_code)
    (path,) = wrapper.files
    old = str(tmp_path / "old.csv")
    copy_without_columns(path, old, {"step", "site"})
    assert call_records(read_rows([old]), {}) == call_records(read_rows([path]), {})
    older = str(tmp_path / "older.csv")
    copy_without_columns(path, older, {"step", "site", "module"})
    assert call_records(read_rows([older]), {}) == call_records(read_rows([path]), {})
    shutil.rmtree(tmp_path / "out")


def test_get_attributes_lists_exactly_the_public_callables():
    names = getAttributes(torch.optim.Adam)
    expected = sorted(f"torch.optim.Adam.{a}" for a in dir(torch.optim.Adam)
                      if not a.startswith("_") and callable(getattr(torch.optim.Adam, a)))
    assert names == expected
    assert "torch.optim.Adam.step" in names and "torch.optim.Adam.zero_grad" in names
    assert "torch.optim.Adam.defaults" not in names   # not callable
