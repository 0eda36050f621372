# SPDX-License-Identifier: MIT
"""torchwrapper.lightning.TorchWrapperProfiler as a real Lightning Trainer's profiler (2 epochs of a
small LightningModule on the CPU): Lightning's actions as records with the torch calls inside them
nested right, the summary table, training bit-identical, torch restored."""
import os

import pytest
import torch

pl = pytest.importorskip("lightning.pytorch")

import torchwrapper as tw  # noqa: E402
from torchwrapper.lightning import TorchWrapperProfiler  # noqa: E402


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit(tmp_path, name, profiler=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(32, 8, generator=g), torch.randint(0, 2, (32,), generator=g))
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    model = Model()
    trainer = pl.Trainer(max_epochs=2, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, profiler=profiler,
                         default_root_dir=str(tmp_path / name))
    trainer.fit(model, loader)
    return [p.detach().clone() for p in model.parameters()]


def test_lightning_s_actions_are_records_with_the_torch_calls_inside_them(tmp_path):
    plain = fit(tmp_path, "plain")
    profiler = TorchWrapperProfiler(format="csv", top=40)
    profiled = fit(tmp_path, "profiled", profiler)
    assert all(torch.equal(a, b) for a, b in zip(plain, profiled))   # bit-identical
    assert tw._core.active_session() is None and type(torch.mm).__name__ == "builtin_function_or_method"
    frame = tw.load(profiler.recording.out_dir)
    by_id = frame.set_index("call_id")
    for action, count in (("[Strategy]SingleDeviceStrategy.training_step", 8), ("run_training_batch", 8),
                          ("[LightningModule]Model.optimizer_step", 8), ("run_training_epoch", 2),
                          ("[LightningModule]Model.on_train_epoch_end", 2)):
        assert (frame["api"] == action).sum() == count, action   # 4 batches x 2 epochs
    # the model's forward runs inside the strategy's training_step (which calls the module's)
    forwards = frame[frame["api"] == "torch.nn.Sequential.forward"]
    assert len(forwards) == 8
    for parent in forwards["parent_id"]:
        assert by_id.loc[parent, "api"] == "[Strategy]SingleDeviceStrategy.training_step"
    # and the optimizer's step inside the LightningModule's optimizer_step hook
    for parent in frame[frame["api"] == "torch.optim.SGD.step"]["parent_id"]:
        chain = []
        while parent:
            chain.append(by_id.loc[parent, "api"])
            parent = by_id.loc[parent, "parent_id"]
        assert "[LightningModule]Model.optimizer_step" in chain and chain[-1] == "run_training_epoch", chain
    backward = frame[frame["api"] == "torch.Tensor.backward"]
    assert len(backward) == 8
    for parent in backward["parent_id"]:   # inside the strategy's backward action
        chain = []
        while parent:
            chain.append(by_id.loc[parent, "api"])
            parent = by_id.loc[parent, "parent_id"]
        assert any(name.startswith("[Strategy]") and name.endswith(".backward") for name in chain), chain
    # the summary Lightning prints at the end: tw-report's table, actions and APIs
    summary = profiler.summary()
    assert "[Strategy]SingleDeviceStrategy.training_step" in summary and "torch.nn.Sequential.forward" in summary
    assert profiler.recording.out_dir in summary


def test_a_second_profiler_is_refused_with_one_line(tmp_path):
    with tw.profile():
        with pytest.raises(RuntimeError, match="another profiling session is already recording; stop it first"):
            fit(tmp_path, "second", TorchWrapperProfiler(format="csv"))


def test_bad_values_are_named():
    with pytest.raises(ValueError, match="top=0 is not accepted: give a whole number >= 1"):
        TorchWrapperProfiler(top=0)
