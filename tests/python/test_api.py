# SPDX-License-Identifier: MIT
"""The original TorchWrapper API: the manual's example, callRecords and DataFrame shapes,
getAPIName and getAttributes, and every configuration error."""
import json
import os

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchwrapper as tw
from torchwrapper import TorchWrapper, getAPIName, getAttributes


def test_the_manuals_example_runs_verbatim(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = {"out_dir": "./output", "format": "csv", "file_max_size": "10MB", "file_name_spec": "timestamp"}
    wrapper = TorchWrapper(config)

    def myCode():
        a = torch.randn(1, 3); b = torch.randn(1, 3); c = a + b  # noqa: E702 - as in the manual
        return c

    c = wrapper.start(myCode)
    assert c.shape == (1, 3)
    files = os.listdir(tmp_path / "output")
    assert "manifest.json" in files and "summary.json" in files
    assert any(f.startswith("tw-") and f.endswith(".csv") for f in files)

    records = wrapper.callRecords
    assert list(records) == ["torch.randn", "torch.Tensor.__add__"]
    randn = records["torch.randn"]
    assert set(randn) == {"TotalTime(ms)", 1, 2}
    assert randn["TotalTime(ms)"] == pytest.approx(randn[1]["CostTime(ms)"] + randn[2]["CostTime(ms)"])
    assert set(randn[1]) == {"detailedAPIName", "StartTimestamp", "CostTime(ms)", "Arguments"}
    assert isinstance(randn[1]["StartTimestamp"], int) and randn[1]["StartTimestamp"] > 1_600_000_000 * 10**9
    assert randn[1]["StartTimestamp"] < randn[2]["StartTimestamp"] < records["torch.Tensor.__add__"][1]["StartTimestamp"]

    frame = wrapper.dataframe()
    assert list(frame.columns[:6]) == ["API Name", "Total Time (ms)", "Call Number", "Start Timestamp",
                                       "Cost Time (ms)", "Arguments"]
    assert list(frame.columns[6:]) == ["Self Time (ms)", "GPU Time (ms)", "Thread", "PID", "Depth", "Call ID",
                                       "Parent ID", "Error", "Module", "Step", "Forward Call ID", "Forward API"]
    assert list(frame["API Name"]) == ["torch.randn", "torch.randn", "torch.Tensor.__add__"]
    assert list(frame["Call Number"]) == [1, 2, 1]
    assert frame["Start Timestamp"].dtype == "int64"
    assert frame["Total Time (ms)"][0] == pytest.approx(randn["TotalTime(ms)"])

    summary = wrapper.summary()
    row = summary[summary.api == "torch.randn"].iloc[0]
    assert row.calls == 2 and row.total_ms == pytest.approx(randn["TotalTime(ms)"], rel=1e-6)


def test_start_stop_with_and_decorator(tmp_path):
    config = {"out_dir": str(tmp_path / "a"), "format": "json"}
    x = torch.ones(2)
    wrapper = TorchWrapper(config)
    assert wrapper.start() is wrapper
    torch.add(x, x)
    wrapper.stop()
    assert list(wrapper.callRecords) == ["torch.add"]

    with TorchWrapper(dict(config, out_dir=str(tmp_path / "b"))) as w:
        torch.mul(x, x)
    assert list(w.callRecords) == ["torch.mul"]

    @TorchWrapper(dict(config, out_dir=str(tmp_path / "c")))
    def step(a, scale=1.0):
        return F.relu(a) * scale

    assert torch.equal(step(x, scale=2.0), x * 2)
    assert torch.equal(step(x), x)  # each call is its own run
    assert len([f for f in os.listdir(tmp_path / "c") if f.endswith(".jsonl")]) == 2

    with pytest.raises(TypeError, match="start\\(\\) needs a callable to run, not 'int'"):
        TorchWrapper(config).start(42)


def test_results_and_exceptions_pass_through(tmp_path):
    wrapper = TorchWrapper({"out_dir": str(tmp_path)})

    def fails():
        torch.ones(1)
        raise KeyError("no")

    with pytest.raises(KeyError):
        wrapper.start(fails)
    assert not isinstance(torch.ones, tw.Wrapper)  # stopped all the same
    assert list(wrapper.callRecords) == ["torch.ones"]


API_NAMES = [
    (torch.optim.Adam, "torch.optim.Adam"),
    (torch.optim.SGD, "torch.optim.SGD"),
    (torch.optim.Adam.step, "torch.optim.Adam.step"),
    (torch.optim.Optimizer.zero_grad, "torch.optim.Optimizer.zero_grad"),
    (torch.nn.Linear, "torch.nn.Linear"),
    (torch.nn.Linear.forward, "torch.nn.Linear.forward"),
    (torch.nn.Conv2d, "torch.nn.Conv2d"),
    (torch.nn.Module, "torch.nn.Module"),
    (torch.nn.functional.relu, "torch.nn.functional.relu"),
    (torch.nn.functional.cross_entropy, "torch.nn.functional.cross_entropy"),
    (torch.nn.functional.linear, "torch.nn.functional.linear"),
    (torch.Tensor, "torch.Tensor"),
    (torch.Tensor.add, "torch.Tensor.add"),
    (torch.Tensor.__add__, "torch.Tensor.__add__"),
    (torch.Tensor.view, "torch.Tensor.view"),
    (torch.Tensor.backward, "torch.Tensor.backward"),
    (torch.add, "torch.add"),
    (torch.randn, "torch.randn"),
    (torch.stft, "torch.stft"),
    (torch.matmul, "torch.matmul"),
    (torch.utils.data.DataLoader, "torch.utils.data.DataLoader"),
    (torch.utils.data.Dataset, "torch.utils.data.Dataset"),
    (torch.optim.lr_scheduler.StepLR, "torch.optim.lr_scheduler.StepLR"),
    (torch.optim.lr_scheduler.LRScheduler.step, "torch.optim.lr_scheduler.LRScheduler.step"),
    (torch.nn.init.xavier_uniform_, "torch.nn.init.xavier_uniform_"),
    (torch.autograd.grad, "torch.autograd.grad"),
    (torch.linalg.norm, "torch.linalg.norm"),
    (torch.nn.LSTM, "torch.nn.LSTM"),
    (torch.nn.TransformerEncoderLayer, "torch.nn.TransformerEncoderLayer"),
    (torch.no_grad, "torch.no_grad"),
    (torch.nn.utils.clip_grad_norm_, "torch.nn.utils.clip_grad_norm_"),
    (torch.nn.functional, "torch.nn.functional"),
]


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs GPU timing to be unavailable")
def test_a_session_whose_start_fails_is_rolled_back_to_new(tmp_path):
    session = tw.Session(out_dir=str(tmp_path), format="csv", gpu="on")
    for _ in range(2):   # what the first start began (model watch, writer) was undone: the second fails alike
        with pytest.raises(RuntimeError, match='gpu="on": GPU timing is unavailable: no CUDA device'):
            session.start()
        assert tw._core.active_session() is None and not session.active
    with pytest.raises(RuntimeError, match="this session was never started"):
        session.stop()
    assert session.stats()["gpu"] == "off"
    other = tw.Session(args="none")   # the next session starts and stops as usual
    other.start()
    other.stop()
    assert not other.active


@pytest.mark.parametrize("obj, name", API_NAMES, ids=[n for _, n in API_NAMES])
def test_getAPIName_gives_the_shortest_public_name(obj, name):
    import torch  # noqa: F401  (for eval)

    assert getAPIName(obj) == name
    # The object at that name is obj, or a decorator of it that torch installed since (the first
    # construction of an optimizer class hooks its step): both have the name.
    current = eval(name)
    assert _decorates(current, obj)
    assert getAPIName(current) == name


def _decorates(outer, inner):
    """inner is outer, or in the __wrapped__ chain that functools.wraps leaves."""
    seen = outer
    while seen is not None:
        if seen is inner:
            return True
        seen = getattr(seen, "__wrapped__", None)
    return False


def test_getAPIName_of_a_method_torch_decorates_at_run_time_is_its_own_name():
    original = torch.optim.Adagrad.__dict__["step"]
    if getattr(original, "hooked", False):   # an earlier test built an Adagrad already
        original = original.__wrapped__
    before = getAPIName(original)
    torch.optim.Adagrad(nn.Linear(2, 1).parameters())   # torch hooks Adagrad.step (once per process)
    hooked = torch.optim.Adagrad.step
    assert hooked.hooked and _decorates(hooked, original)
    assert before == getAPIName(original) == getAPIName(hooked) == "torch.optim.Adagrad.step"


def test_getAPIName_of_bound_methods_wrappers_and_foreign_objects():
    x = torch.ones(2)
    model = nn.Linear(2, 2)
    assert getAPIName(x.add) == "torch.Tensor.add"
    assert getAPIName(model.forward) == "torch.nn.Linear.forward"
    assert getAPIName(tw.wrap(torch.add, "torch.add")) == "torch.add"
    assert getAPIName(json.dumps) == "json.dumps"
    assert getAPIName(len) == "builtins.len"
    with tw.profile():
        assert getAPIName(torch.add) == "torch.add"


def test_getAttributes_lists_callable_names_under_an_object():
    names = getAttributes(torch.optim.Adam)
    assert "torch.optim.Adam.step" in names and "torch.optim.Adam.zero_grad" in names
    assert all(n.startswith("torch.optim.Adam.") for n in names)
    functional = getAttributes(torch.nn.functional)
    assert "torch.nn.functional.relu" in functional and "torch.nn.functional.Tensor" in functional
    assert names == sorted(names)


@pytest.mark.parametrize("config, message", [
    ({"fromat": "csv"}, "unknown config key 'fromat': did you mean 'format'?"),
    ({"out_dri": "x"}, "did you mean 'out_dir'?"),
    ({"zzz": 1}, "unknown config key 'zzz' (accepted: out_dir, format,"),
    ({"format": "xml"}, "config key 'format': \"xml\" is not accepted: give one of: json csv"),
    ({"format": 3}, "config key 'format': 3 is not accepted"),
    ({"file_max_size": "10XB"}, "config key 'file_max_size': \"10XB\" is not a size"),
    ({"file_max_size": 100}, "config key 'file_max_size': 100 is too small"),
    ({"file_max_size": -5}, "config key 'file_max_size': -5 is not a size"),
    ({"file_name_spec": "{epoch}"}, "unknown field {epoch}"),
    ({"file_name_spec": "../up"}, "would leave out_dir"),
    ({"out_dir": ""}, "config key 'out_dir': \"\" is not accepted: give a non-empty path string"),
    ({"modules": []}, "config key 'modules': [] is not accepted: give a list of non-empty strings"),
    ({"modules": ""}, "config key 'modules': \"\" is not accepted"),
    ({"include": [1]}, "config key 'include': [1] is not accepted"),
    ({"exclude": [1]}, "or null for the default list"),
    ({"exclude": ["+x", "y"]}, "config key 'exclude': [\"+x\",\"y\"] is not accepted: give globs that all start"),
    ({"args": "all"}, "config key 'args': \"all\" is not accepted: give one of: summary none repr"),
    ({"gpu": True}, "config key 'gpu': true is not accepted: give one of: auto on off"),
    ({"max_files": -1}, "config key 'max_files': -1 is not accepted: give a whole number"),
    ({"max_files": 1.5}, "config key 'max_files': 1.5 is not accepted"),
    ({"max_total_size": 5000}, "config key 'max_total_size': 5000 is too small: give 0 (every file kept) or at "
                               "least 8192 bytes"),
    ({"max_total_size": "-1GB"}, "config key 'max_total_size': \"-1GB\" is not a size"),
    ({"flush_interval": 0}, "config key 'flush_interval': 0 is not accepted: give a number of seconds"),
    ({"buffer_size": "lots"}, "config key 'buffer_size': \"lots\" is not a size"),
    ({"on_full": "block"}, "config key 'on_full': \"block\" is not accepted: give one of: drop wait"),
    ({"out_dir": object()}, "is not accepted: give strings, numbers, lists or null"),
])
def test_every_config_error_names_key_value_and_what_is_accepted(config, message):
    with pytest.raises(ValueError) as error:
        TorchWrapper(config)
    assert message in str(error.value)


def test_config_from_file_and_environment(tmp_path, monkeypatch):
    path = tmp_path / "tw.json"
    path.write_text(json.dumps({"format": "csv", "max_files": 4}))
    assert TorchWrapper(str(path)).config["format"] == "csv"
    monkeypatch.setenv("TORCHWRAPPER_CONFIG", str(path))
    monkeypatch.setenv("TORCHWRAPPER_MAX_FILES", "7")
    monkeypatch.setenv("TORCHWRAPPER_INCLUDE", "torch.Tensor.__hash__, torch.is_grad_enabled")
    config = TorchWrapper({"out_dir": str(tmp_path / "o")}).config
    assert config["format"] == "csv"            # from the file
    assert config["max_files"] == 7             # the environment wins over the file
    assert config["include"] == ["torch.Tensor.__hash__", "torch.is_grad_enabled"]
    assert config["out_dir"] == str(tmp_path / "o")  # the dict wins over both
    assert config["file_max_size"] == 128_000_000   # defaults of the original tool
    assert config["file_name_spec"] == "timestamp"
    monkeypatch.setenv("TORCHWRAPPER_MAX_FILE", "7")
    with pytest.raises(ValueError, match="unknown config key 'max_file': did you mean 'max_files'.*environment"):
        TorchWrapper()
    monkeypatch.delenv("TORCHWRAPPER_MAX_FILE")
    monkeypatch.setenv("TORCHWRAPPER_CONFIG", str(tmp_path / "missing.json"))
    with pytest.raises(ValueError, match="cannot read the config file"):
        TorchWrapper()
    path.write_text("[1, 2]")
    monkeypatch.setenv("TORCHWRAPPER_CONFIG", str(path))
    with pytest.raises(ValueError, match="must hold a JSON object"):
        TorchWrapper()


def test_defaults_are_the_original_tools():
    config = tw.load_config({}, environ={})
    assert (config["out_dir"], config["format"], config["file_max_size"], config["file_name_spec"]) == \
        ("./output", "json", 128_000_000, "timestamp")


def test_profile_and_torchwrapper_take_their_defaults_from_the_one_validator():
    """The defaults that differ on purpose (records in memory, no argument text and all the detail for
    profile()) come from the C validator's table, as does every other; a bad value gets the
    validator's message."""
    prof = tw.profile()
    expected = json.loads(tw._core.normalize_config("{}", defaults="profile"))
    assert prof.config == expected
    assert prof.config["out_dir"] is None and prof.config["args"] == "none" and prof.out_dir is None
    wrapper = json.loads(tw._core.normalize_config("{}"))
    assert wrapper["out_dir"] == "./output" and wrapper["args"] == "summary"
    # (detail: TorchWrapper's and run's defaults sample it, to cost little enough to leave on)
    assert wrapper["detail"] == "sampled" and prof.config["detail"] == "all"
    assert {k for k in expected if expected[k] != wrapper[k]} == {"out_dir", "args", "detail"}
    with pytest.raises(ValueError, match="config key 'on_full': \"block\" is not accepted: give one of: drop wait"):
        tw.profile(on_full="block")
    with pytest.raises(ValueError, match="config key 'flush_interval': 0 is not accepted"):
        tw.Session(flush_interval=0)


def test_a_region_is_a_record_with_the_calls_inside_it_as_children():
    import torchwrapper as tw

    x = torch.ones(3)
    with tw.region("outside a session"):   # records nothing, and does not fail
        x.sum()
    with tw.profile() as prof:
        with tw.region("data loading"):
            torch.ones(2)
            with tw.region("inner"):
                x.sum()
        x.mean()
    records = {r.api: r for r in prof.records()}
    assert "outside a session" not in records
    outer, inner = records["data loading"], records["inner"]
    assert outer.parent_id == 0 and records["torch.ones"].parent_id == outer.call_id
    assert inner.parent_id == outer.call_id and records["torch.Tensor.sum"].parent_id == inner.call_id
    assert records["torch.Tensor.mean"].parent_id == 0
    assert outer.self_ns <= outer.cost_ns - records["torch.ones"].cost_ns - inner.cost_ns + 1000
