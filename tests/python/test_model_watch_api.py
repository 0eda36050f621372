# SPDX-License-Identifier: MIT
"""The model watch through the TorchWrapper API: stats(), updates(), modules(), load_*, call_tree."""
import json

import pandas
import pytest
import torch
import torch.nn.functional as F

import torchwrapper as tw
from torchwrapper import TorchWrapper, load_config

from models import SETUPS


def _loop(setup="cnn_adam", steps=2):
    model_cls, make_optimizer, batch = SETUPS[setup]
    torch.manual_seed(0)
    model = model_cls()
    optimizer = make_optimizer(model.parameters())

    def train():
        for _ in range(steps):
            x, y = batch()
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        return model

    return train


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_stats_updates_and_modules_from_the_wrapper_and_from_the_files(tmp_path, fmt):
    config = {"out_dir": str(tmp_path), "format": fmt, "args": "none",
              "tensor_stats": {"tensors": ["output", "grad"]}, "track": ["parameters"]}
    wrapper = TorchWrapper(config)
    model = wrapper.start(_loop())
    stats = wrapper.stats()
    assert list(stats.columns) == tw.STATS_COLUMNS
    assert set(stats["tensor"]) == {"output", "grad"}
    assert set(stats["step"]) == {0, 1}
    conv = stats[(stats["module"] == "CNN.conv1") & (stats["tensor"] == "output")].iloc[0]
    assert conv["shape"] == (8, 8, 16, 16) and conv["dtype"] == "float32" and conv["class"] == "torch.nn.Conv2d"
    pandas.testing.assert_frame_equal(tw.load_stats(str(tmp_path)), stats)

    updates = wrapper.updates()
    assert list(updates.columns) == tw.UPDATES_COLUMNS
    assert set(updates["parameter"]) == {f"CNN.{n}" for n, _ in model.named_parameters()}
    assert set(updates["api"]) == {"torch.Tensor.addcdiv_"}
    pandas.testing.assert_frame_equal(tw.load_updates(str(tmp_path)), updates)

    tree = wrapper.modules()
    assert tree == tw.load_modules(str(tmp_path))
    assert tree["roots"] == [{"path": "CNN", "class": "models.CNN"}]
    by_path = {m["path"]: m for m in tree["modules"]}
    assert set(by_path) == {f"CNN.{n}" if n else "CNN" for n, _ in model.named_modules()}
    assert by_path["CNN.fc"]["parameters"] == {"weight": [10, 256], "bias": [10]}
    assert by_path["CNN.fc"]["calls"] == 2 and by_path["CNN.fc"]["parent"] == "CNN"

    manifest = json.loads((tmp_path / "manifest.json").read_text())
    kinds = {f["kind"] for f in manifest["files"]}
    assert kinds == {"calls", "stats", "updates"}
    assert manifest["config"]["tensor_stats"]["tensors"] == ["output", "grad"]


def test_without_out_dir_results_stay_in_memory():
    prof = tw.profile(tensor_stats=True, track=["parameters"])
    prof.start()
    try:
        _loop("mlp_sgd", 1)()
    finally:
        prof.stop()
    columns, rows = prof.stats_rows()
    assert rows and columns == tw.STATS_COLUMNS
    assert prof.updates_rows()[1]


def test_register_metric_on_the_wrapper(tmp_path):
    wrapper = TorchWrapper(out_dir=str(tmp_path), format="csv",
                           tensor_stats={"tensors": ["output"], "metrics": ["min", "max", "absmax"], "modules": ["fc*"]})
    wrapper.register_metric("absmax", lambda t: {"value": t.abs().max()})   # a tensor: copied with the rest
    wrapper.start(_loop("mlp_sgd", 1))
    stats = wrapper.stats()
    assert set(stats["module"]) == {"MLP.fc1", "MLP.fc2"}   # "fc*" matches their names in the model
    for _, row in stats.iterrows():
        assert row["custom"] == {"absmax.value": max(-row["min"], row["max"])}
    with pytest.raises(TypeError, match="non-empty str and a callable"):
        wrapper.register_metric("", print)


def test_tensor_stats_and_track_from_environment_variables():
    config = load_config({}, environ={"TORCHWRAPPER_TENSOR_STATS": '{"every": 10}', "TORCHWRAPPER_TRACK": "parameters"})
    assert config["tensor_stats"]["every"] == 10 and config["track"] == ["parameters"]
    with pytest.raises(ValueError, match="TORCHWRAPPER_"):
        load_config({}, environ={"TORCHWRAPPER_TRACK": "weights"})


def test_call_tree_prints_one_step_nested_with_module_paths():
    prof = tw.profile(tensor_stats={"tensors": ["output"]})
    prof.start()
    try:
        _loop("cnn_adam", 3)()
    finally:
        prof.stop()
    text = tw.call_tree(prof, step=1)
    lines = text.splitlines()
    assert lines[0].startswith("step 1: ")
    # The model's call, its own forward (a class of the test's: recorded too), the modules inside it
    # one level deeper, then backward and the optimizer.
    assert any(line.startswith("  torch.nn.Module.__call__ [CNN]  ") for line in lines)
    assert any(line.startswith("    models.CNN.forward [CNN]  ") for line in lines)
    assert any(line.startswith("      torch.nn.Module.__call__ [CNN.conv1]") for line in lines)
    assert any(line.startswith("        torch.nn.Conv2d.forward [CNN.conv1]") for line in lines)
    outer = [line for line in lines if line.startswith("  ") and not line.startswith("   ")]
    assert outer[-1].startswith("  torch.optim.Adam.step") and not any("Adam.step" in line for line in outer[:-1])
    # The same from the DataFrame of a TorchWrapper run, and a step that does not exist.
    assert tw.call_tree(prof, step=1, max_depth=1).count("\n") < len(lines)
    with pytest.raises(IndexError, match=r"step 7 is not in the records: steps 0 to 2 "):
        tw.call_tree(prof, step=7)
