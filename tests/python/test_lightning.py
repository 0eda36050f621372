# SPDX-License-Identifier: MIT
"""torchwrapper.lightning.TorchWrapperProfiler as a real Lightning Trainer's profiler (2 epochs of a
small LightningModule on the CPU): Lightning's actions as records with the torch calls inside them
nested right, the summary table, training bit-identical, torch restored. Lightning ships as two
packages, lightning (lightning.pytorch) and the standalone pytorch_lightning: each test runs with
each installed one's Trainer and LightningModule, and a child process imports the profiler with
only one of them importable."""
import importlib
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torchwrapper as tw  # noqa: E402

PACKAGES = ("lightning.pytorch", "pytorch_lightning")


def importable(name):
    try:
        importlib.import_module(name)
        return True
    except ImportError:
        return False


INSTALLED = [name for name in PACKAGES if importable(name)]
if not INSTALLED:
    pytest.skip("neither lightning nor pytorch_lightning is installed", allow_module_level=True)

from torchwrapper.lightning import TorchWrapperProfiler  # noqa: E402


def model_class(pl):
    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Model


@pytest.fixture(params=PACKAGES)
def pl(request):
    """The Lightning package under test (each one that is installed)."""
    if request.param not in INSTALLED:
        pytest.skip(f"{request.param} is not installed")
    return importlib.import_module(request.param)


def fit(pl, tmp_path, name, profiler=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(32, 8, generator=g), torch.randint(0, 2, (32,), generator=g))
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    model = model_class(pl)()
    trainer = pl.Trainer(max_epochs=2, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, profiler=profiler,
                         default_root_dir=str(tmp_path / name))
    trainer.fit(model, loader)
    return [p.detach().clone() for p in model.parameters()]


def test_lightning_s_actions_are_records_with_the_torch_calls_inside_them(pl, tmp_path):
    plain = fit(pl, tmp_path, "plain")
    profiler = TorchWrapperProfiler(format="csv", top=40)
    assert isinstance(profiler, pl.profilers.Profiler)   # a Profiler of this package
    profiled = fit(pl, tmp_path, "profiled", profiler)
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


def test_a_second_profiler_is_refused_with_one_line(pl, tmp_path):
    with tw.profile():
        with pytest.raises(RuntimeError, match="another profiling session is already recording; stop it first"):
            fit(pl, tmp_path, "second", TorchWrapperProfiler(format="csv"))


def test_bad_values_are_named():
    with pytest.raises(ValueError, match="top=0 is not accepted: give a whole number >= 1"):
        TorchWrapperProfiler(top=0)


@pytest.mark.parametrize("only", PACKAGES)
def test_the_profiler_works_with_either_package_alone(tmp_path, only):
    """With the other package not importable (a machine with only pytorch_lightning, or only lightning),
    torchwrapper.lightning imports, and that package's Trainer records its actions with it."""
    if only not in INSTALLED:
        pytest.skip(f"{only} is not installed")
    other = [name.split(".")[0] for name in PACKAGES if name != only]
    program = textwrap.dedent(f"""
        import sys
        for name in {other!r}:
            sys.modules[name] = None   # not importable
        import importlib, torch
        pl = importlib.import_module({only!r})
        from torchwrapper.lightning import TorchWrapperProfiler
        import torchwrapper as tw
        assert [base.__module__.split(".")[0] for base in TorchWrapperProfiler.__bases__] == [{only.split(".")[0]!r}]

        class Model(pl.LightningModule):
            def __init__(self):
                super().__init__()
                self.net = torch.nn.Linear(8, 2)

            def training_step(self, batch, batch_idx):
                return self.net(batch[0]).pow(2).mean()

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.1)

        data = torch.utils.data.TensorDataset(torch.randn(16, 8))
        profiler = TorchWrapperProfiler(format="csv")
        pl.Trainer(max_epochs=1, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                   enable_progress_bar=False, enable_model_summary=False, profiler=profiler,
                   default_root_dir=sys.argv[1]).fit(Model(), torch.utils.data.DataLoader(data, batch_size=8))
        apis = set(tw.load(profiler.recording.out_dir)["api"].astype(str))
        print("run_training_epoch" in apis, "torch.optim.SGD.step" in apis)
    """)
    done = subprocess.run([sys.executable, "-c", program, str(tmp_path)], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-2:] == ["True", "True"]


def test_without_either_package_the_import_says_what_to_install():
    program = textwrap.dedent("""
        import sys
        sys.modules["lightning"] = sys.modules["pytorch_lightning"] = None
        try:
            import torchwrapper.lightning
        except ImportError as e:
            print(e)
    """)
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ("torchwrapper.lightning needs lightning >= 2.0 or pytorch-lightning >= 2.0 "
                                   "(neither is installed): pip install -U lightning")
