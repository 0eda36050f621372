# SPDX-License-Identifier: MIT
"""The model watch: module instance paths on module calls, and the module tree (modules.json)."""
import gc
import json
import os

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchwrapper as tw
from torchwrapper import _core
from torchwrapper._patch import WRAPPER_TYPES

from models import SETUPS, AlexNet, EncoderModel, LSTMModel


def _train_steps(model, optimizer, batch, steps):
    for _ in range(steps):
        x, y = batch()
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()


def _path(model, name=""):
    """The path of model's module named name by named_modules(): the model's class, then the name."""
    return f"{type(model).__name__}.{name}" if name else type(model).__name__


def _expected_paths(model):
    """path -> API name of the wrapped forward, for the modules whose forward is recorded (read while
    the wrappers are installed)."""
    out = {}
    for name, module in model.named_modules():
        forward = type(module).forward
        # torch's forwards are wrappers; a model's own classes' are Python shims around one
        if isinstance(forward, WRAPPER_TYPES) or getattr(forward, "_torchwrapper_forward", False):
            out[_path(model, name)] = forward.api_name
    return out


@pytest.mark.parametrize("setup", ["alexnet_sgd", "lstm_adam", "encoder_adam"])
def test_each_module_forward_carries_its_instance_path(setup):
    model_cls, make_optimizer, batch = SETUPS[setup]
    torch.manual_seed(0)
    model = model_cls()
    optimizer = make_optimizer(model.parameters())
    with tw.profile() as prof:
        expected = _expected_paths(model)
        _train_steps(model, optimizer, batch, 3)
    records = prof.records()
    seen = {}
    for r in records:
        if r.module is not None and r.fwd_call_id == 0:   # autograd nodes carry their forward's module
            seen.setdefault(r.module, set()).add(r.api)
    # Every module that ran under a recorded forward is there, under its model's class and its
    # named_modules() path, and the API of its class's forward; nothing else carries a path.
    assert {path: {api} for path, api in expected.items() if path in seen} == seen
    assert set(seen) <= {_path(model, name) for name, _ in model.named_modules()}
    assert len(seen) >= {"alexnet_sgd": 12, "lstm_adam": 3, "encoder_adam": 10}[setup]
    records = [r for r in records if r.fwd_call_id == 0]   # autograd nodes carry their forward's module
    for r in records:
        if not r.api.endswith(".forward"):
            assert r.module is None, r
    calls = {r.module: 0 for r in records if r.module is not None}
    for r in records:
        if r.module is not None:
            calls[r.module] += 1
    tree = {m["path"]: m for m in prof.module_tree()["modules"]}
    for path, n in calls.items():
        assert tree[path]["calls"] == n


def test_paths_nest_like_the_model():
    torch.manual_seed(0)
    model = AlexNet()
    with tw.profile() as prof:
        model(torch.randn(2, 3, 32, 32))
    by_id = {r.call_id: r for r in prof.records()}
    # features.0 (a Conv2d) runs inside features (a Sequential), and its parent record says so.
    conv = next(r for r in by_id.values() if r.module == "AlexNet.features.0")
    parent = by_id[conv.parent_id]
    assert parent.module == "AlexNet.features" and parent.api == "torch.nn.Sequential.forward"
    assert conv.depth == parent.depth + 1


def test_a_recorded_model_is_the_root_named_by_its_class(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    for fmt in ("csv", "json"):
        out = tmp_path / fmt
        with tw.profile(out_dir=str(out), format=fmt) as prof:
            model(torch.randn(2, 4))
            torch.add(torch.ones(1), 1)
        records = prof.records()
        modules = {r.api: r.module for r in records}
        assert modules["torch.nn.Sequential.forward"] == "Sequential"   # the root: its class
        assert modules["torch.nn.Linear.forward"] == "Sequential.0"
        assert modules["torch.nn.ReLU.forward"] == "Sequential.1"
        assert modules["torch.add"] is None
        saved = json.loads((out / "modules.json").read_text())
        assert saved["roots"] == [{"path": "Sequential", "class": "torch.nn.Sequential"}]
        assert [(m["path"], m["class"], m["parent"], m["parameters"]) for m in saved["modules"]] == [
            ("Sequential", "torch.nn.Sequential", None, {}),
            ("Sequential.0", "torch.nn.Linear", "Sequential", {"weight": [4, 4], "bias": [4]}),
            ("Sequential.1", "torch.nn.ReLU", "Sequential", {}),
        ]


def test_csv_module_column_follows_args_and_site_ends_the_row(tmp_path):
    model = nn.Linear(3, 3)
    with tw.profile(out_dir=str(tmp_path), format="csv", args="summary") as prof:
        model(torch.randn(1, 3))
        torch.zeros(2)
    with open(prof.files[0]) as f:
        header = f.readline().strip().split(",")
    assert header == ["call_id", "api", "start_ns", "cost_ns", "self_ns", "gpu_ns", "pid", "tid", "depth",
                      "parent_id", "error", "args", "module", "step", "site", "fwd_call_id", "fwd_api", "flops",
                      "flops_total", "mem_alloc", "mem_self", "mem_freed", "mem_peak"]
    import pandas

    frame = pandas.read_csv(prof.files[0], keep_default_na=False)
    assert frame.set_index("api").loc["torch.nn.Linear.forward", "module"] == "Linear"
    assert frame.set_index("api").loc["torch.zeros", "args"] == "((2,), {})"


def test_a_loss_called_on_its_own_is_a_second_root_named_by_its_class(tmp_path):
    torch.manual_seed(0)
    model = LSTMModel()
    criterion = nn.CrossEntropyLoss()
    with tw.profile(out_dir=str(tmp_path)) as prof:
        x, y = torch.randint(0, 50, (4, 5)), torch.randint(0, 50, (4,))
        criterion(model(x), y).backward()
    modules = {(r.api, r.module) for r in prof.records() if r.module is not None}
    assert ("torch.nn.CrossEntropyLoss.forward", "CrossEntropyLoss") in modules
    assert ("torch.nn.LSTM.forward", "LSTMModel.lstm") in modules
    roots = json.loads((tmp_path / "modules.json").read_text())["roots"]
    assert roots == [{"path": "LSTMModel", "class": "models.LSTMModel"},
                     {"path": "CrossEntropyLoss", "class": "torch.nn.CrossEntropyLoss"}]


def test_a_submodule_called_first_takes_its_path_once_the_model_runs():
    torch.manual_seed(0)
    model = EncoderModel()
    x = torch.randn(2, 3, 32)
    with tw.profile() as prof:
        model.head(x[:, 0])       # outside any call of model: a model of its own for now
        model(x)
        model.head(x[:, 0])       # now known as part of model
        model.encoder.layers[1](x)
    heads = [(r.module, r.depth) for r in prof.records() if r.api == "torch.nn.Linear.forward"
             and r.module in ("Linear", "EncoderModel.head")]
    # a model of its own (its class), then inside EncoderModel.forward, then on its own again
    assert heads == [("Linear", 0), ("EncoderModel.head", 1), ("EncoderModel.head", 0)]
    attn = [r.module for r in prof.records() if r.api == "torch.nn.MultiheadAttention.forward"]
    assert attn == ["EncoderModel.encoder.layers.0.self_attn", "EncoderModel.encoder.layers.1.self_attn",
                    "EncoderModel.encoder.layers.1.self_attn"]


def test_a_model_built_around_a_module_already_seen_takes_it_over():
    layer = nn.Linear(2, 2)
    with tw.profile() as prof:
        layer(torch.randn(1, 2))                  # a model of its own so far: the root
        model = nn.Sequential(nn.ReLU(), layer)
        model(torch.randn(1, 2))                  # now part of a model: that model's path
    paths = [(r.api, r.module) for r in prof.records() if r.module is not None]
    assert paths == [("torch.nn.Linear.forward", "Linear"), ("torch.nn.Sequential.forward", "Sequential"),
                     ("torch.nn.ReLU.forward", "Sequential.0"), ("torch.nn.Linear.forward", "Sequential.1")]
    assert prof.module_tree()["roots"] == [{"path": "Sequential", "class": "torch.nn.Sequential"}]


def test_module_paths_follow_instances_that_come_and_go():
    # A new model per iteration (as in a test suite): each is the root in turn, under the same name
    # (the one before died), and the table does not keep entries (or paths) of dead instances.
    with tw.profile() as prof:
        for _ in range(5):
            model = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.Linear(2, 2)))
            model(torch.randn(1, 2))
            del model
            gc.collect()
        assert _core.table_clear("modules") == []
    paths = [r.module for r in prof.records() if r.module is not None]
    assert paths == ["Sequential", "Sequential.0", "Sequential.1", "Sequential.1.0"] * 5


def test_a_module_that_is_not_in_the_stack_resolves_on_its_own():
    layer = nn.Linear(2, 2)
    with tw.profile() as prof:
        nn.Linear.forward(layer, torch.randn(1, 2))   # not through __call__
    assert [r.module for r in prof.records() if r.api == "torch.nn.Linear.forward"] == ["Linear"]


def test_paths_cost_nothing_outside_module_forwards():
    assert _core.KIND_MODULE_FORWARD == 1
    with tw.profile() as prof:
        pass
    kinds = {w.api_name: w.watch_kind for w in prof.patcher.wrappers.values()}
    assert kinds["torch.nn.Linear.forward"] == _core.KIND_MODULE_FORWARD
    assert kinds["torch.add"] == 0 and kinds["torch.Tensor.add_"] == 0   # nothing asked for updates


def test_wrap_rejects_an_unknown_kind():
    with pytest.raises(ValueError, match="kind=64 is not a combination"):
        tw.wrap(torch.add, "torch.add", kind=64)


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.scale = nn.Parameter(torch.ones(8, 8))

    def forward(self, x):
        return torch.matmul(F.gelu(self.fc(x)), self.scale)   # matmul: in the block, no torch module


class _Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([_Block(), _Block()])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def test_a_models_own_module_classes_are_frames_with_their_paths_and_are_restored():
    """Module classes defined outside torch (a model's blocks) have their forwards recorded, under
    the API module.Qualname.forward with the instance's path: calls inside them (a matmul of the
    block's own) nest under them and their backward nodes are charged to the block's path; at stop
    the class holds its own function again, and a second profile installs the same wrapper."""
    torch.manual_seed(0)
    model, x = _Stack(), torch.randn(4, 8)
    originals = (_Block.__dict__["forward"], _Stack.__dict__["forward"])
    installed = []
    for _ in range(2):
        with tw.profile() as prof:
            installed.append(_Block.__dict__["forward"])
            model(x).sum().backward()
        assert (_Block.__dict__["forward"], _Stack.__dict__["forward"]) == originals
    assert installed[0] is installed[1] and installed[0].__wrapped__ is originals[0]
    records = prof.records()
    by_id = {r.call_id: r for r in records}
    block_api = f"{__name__}._Block.forward"
    blocks = [r for r in records if r.api == block_api]
    assert [r.module for r in blocks] == ["_Stack.blocks.0", "_Stack.blocks.1"]
    assert {by_id[r.parent_id].api for r in blocks} == {f"{__name__}._Stack.forward"}
    matmuls = [r for r in records if r.api == "torch.matmul"]
    assert [by_id[r.parent_id].module for r in matmuls] == ["_Stack.blocks.0", "_Stack.blocks.1"]
    matmul_ids = {r.call_id for r in matmuls}
    nodes = [r for r in records if r.fwd_call_id in matmul_ids]
    assert nodes and {r.module for r in nodes} == {"_Stack.blocks.0", "_Stack.blocks.1"}


def test_a_module_class_made_while_profiling_is_recorded_from_its_first_call():
    with tw.profile() as prof:
        class Late(nn.Module):   # defined after the start: wrapped when the class is made
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(2, 2)

            def forward(self, x):
                return self.fc(x) * 2

        original = Late.__dict__["forward"].__wrapped__
        model = Late()
        model(torch.randn(1, 2))
        model(torch.randn(1, 2))
    assert Late.__dict__["forward"] is original
    assert "__init_subclass__" not in nn.Module.__dict__   # the class hook is gone with the session
    lates = [r for r in prof.records() if r.api.endswith(".Late.forward")]
    assert [r.module for r in lates] == ["Late", "Late"]
    fcs = [r for r in prof.records() if r.api == "torch.nn.Linear.forward"]
    assert [r.parent_id for r in fcs] == [r.call_id for r in lates]   # nested in them, both times

    class After(nn.Module):   # made after the stop: left as it is
        def forward(self, x):
            return x
    assert not getattr(After.__dict__["forward"], "_torchwrapper_forward", False)


def test_exclude_globs_leave_a_models_own_forward_unwrapped():
    """The config's exclude globs name a model's own forwards as they name torch's APIs."""
    model, x = _Stack(), torch.randn(2, 8)
    with tw.profile(exclude=[f"+{__name__}._Block.*"]) as prof:
        assert not getattr(_Block.__dict__["forward"], "_torchwrapper_forward", False)
        model(x)
    apis = {r.api for r in prof.records()}
    assert f"{__name__}._Stack.forward" in apis and f"{__name__}._Block.forward" not in apis
    assert "torch.nn.Linear.forward" in apis
