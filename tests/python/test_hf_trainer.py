# SPDX-License-Identifier: MIT
"""torchwrapper.hf.TorchWrapperCallback in a real transformers.Trainer (a tiny random-init BERT on
the CPU, no download): the trainer's global steps as the step column, gradient accumulation
included; training results unchanged; a schedule counts those steps; the top APIs in its log."""
import logging
import os

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

import torchwrapper as tw  # noqa: E402
from torchwrapper.hf import TorchWrapperCallback  # noqa: E402

MAX_STEPS, ACCUMULATION, BATCH = 10, 2, 2


def dataset():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 100, (MAX_STEPS * ACCUMULATION * BATCH, 12), generator=g)
    labels = torch.randint(0, 2, (len(ids),), generator=g)
    return [{"input_ids": i, "attention_mask": torch.ones_like(i), "labels": y} for i, y in zip(ids, labels)]


def train(tmp_path, name, callbacks=()):
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=16)
    model = transformers.BertForSequenceClassification(config)
    args = transformers.TrainingArguments(output_dir=str(tmp_path / name), max_steps=MAX_STEPS,
                                          per_device_train_batch_size=BATCH,
                                          gradient_accumulation_steps=ACCUMULATION, learning_rate=1e-3,
                                          logging_strategy="no", save_strategy="no", report_to=[], use_cpu=True,
                                          dataloader_num_workers=0, seed=0, disable_tqdm=True)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=dataset(), callbacks=list(callbacks))
    trainer.train()
    return trainer, [p.detach().clone() for p in model.parameters()]


class Kept(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def test_the_step_column_is_the_trainer_s_global_step_and_training_is_unchanged(tmp_path):
    _, plain = train(tmp_path, "plain")
    callback = TorchWrapperCallback(format="csv")
    trainer_log = logging.getLogger("transformers.trainer")   # transformers' loggers do not propagate
    kept, level = Kept(), trainer_log.level
    trainer_log.addHandler(kept)
    trainer_log.setLevel(logging.INFO)
    try:
        trainer, profiled = train(tmp_path, "profiled", [callback])
    finally:
        trainer_log.removeHandler(kept)
        trainer_log.setLevel(level)
    assert trainer.state.global_step == MAX_STEPS
    assert all(torch.equal(a, b) for a, b in zip(plain, profiled))   # bit-identical training
    out = tmp_path / "profiled" / "torchwrapper"   # under the trainer's output_dir
    frame = tw.load(str(out))
    assert sorted(set(frame["step"])) == list(range(MAX_STEPS))
    # each global step holds its ACCUMULATION forward passes and one optimizer step
    forwards = frame[frame["api"] == "torch.nn.Embedding.forward"]
    assert forwards.groupby("step").size().tolist() == [3 * ACCUMULATION] * MAX_STEPS   # word, position, type
    outer = frame[(frame["depth"] == 0) & frame["api"].str.startswith("torch.optim.")]
    # (the Trainer's AdamW, named after its class whatever was made before: test_optimizer_names.py)
    assert "torch.optim.Adam.step" not in set(outer["api"])
    for kind in ("torch.optim.AdamW.step", "lr_scheduler."):   # one optimizer step and one scheduler step, in each step
        calls = outer[outer["api"].str.contains(kind, regex=False) & outer["api"].str.endswith(".step")]
        assert calls.groupby("step").size().tolist() == [1] * MAX_STEPS, sorted(set(outer["api"]))
    assert callback.profile is None and tw._core.active_session() is None   # stopped at train end
    (message,) = [m for m in kept.messages if m.startswith("torchwrapper: ")]
    assert message.endswith(callback.table) and str(out) in message
    header, *rows = callback.table.split("\n\n")[0].splitlines()   # tw-report's table, then its footer
    assert header.split()[:3] == ["api", "calls", "total"]
    assert len(rows) == 10   # the top 10 APIs by total time, the largest first
    assert rows[0].split()[0] == frame.groupby("api")["cost_ns"].sum().idxmax()
    # then the findings, as tw-report --findings gives them
    found = tw.findings(str(out))
    shown = [f["kind"] for f in found if f["severity"] in ("high", "medium")] or [f["kind"] for f in found]
    assert all(kind in callback.table for kind in shown[:3]) and (not found or "Findings:" in callback.table)


def test_a_schedule_counts_the_trainer_s_steps(tmp_path):
    train(tmp_path, "scheduled", [TorchWrapperCallback(format="csv", top=0, schedule={"wait": 3, "active": 4, "repeat": 1})])
    frame = tw.load(str(tmp_path / "scheduled" / "torchwrapper"))
    assert sorted(set(frame["step"])) == [3, 4, 5, 6]


def test_a_train_that_raised_is_stopped_by_the_next_one(tmp_path):
    class Boom(transformers.TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 3:
                raise RuntimeError("boom")

    callback = TorchWrapperCallback(format="csv", top=0)
    with pytest.raises(RuntimeError, match="boom"):
        train(tmp_path, "raised", [callback, Boom()])
    assert tw._core.active_session() is not None   # nothing told the callback
    train(tmp_path, "again", [callback])
    assert tw._core.active_session() is None
    assert sorted(set(tw.load(str(tmp_path / "again" / "torchwrapper"))["step"])) == list(range(MAX_STEPS))


def test_a_second_profiler_and_an_old_transformers_are_refused_with_one_line(tmp_path):
    with tw.profile():   # another session records already: the trainer does not start
        with pytest.raises(RuntimeError, match="another profiling session is already recording; stop it first"):
            train(tmp_path, "second", [TorchWrapperCallback(format="csv", top=0)])
    import torchwrapper.hf as hf
    assert hf.version_tuple("4.29.2") < hf.OLDEST <= hf.version_tuple(transformers.__version__)


def test_bad_values_are_named(tmp_path):
    with pytest.raises(ValueError, match="top=-1 is not accepted: give a whole number >= 0"):
        TorchWrapperCallback(top=-1)
    callback = TorchWrapperCallback(format="xml")
    with pytest.raises(ValueError, match="format"):
        train(tmp_path, "bad", [callback])
    assert tw._core.active_session() is None


DISTRIBUTED = """
import os, sys, torch, transformers
sys.path.insert(0, os.path.dirname(sys.argv[2]))
from test_hf_trainer import BATCH, dataset
from torchwrapper.hf import TorchWrapperCallback
torch.manual_seed(0)
config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                 intermediate_size=64, max_position_embeddings=16)
model = transformers.BertForSequenceClassification(config)
args = transformers.TrainingArguments(output_dir=sys.argv[1], max_steps=4, per_device_train_batch_size=BATCH,
                                      logging_strategy="no", save_strategy="no", report_to=[], use_cpu=True,
                                      ddp_backend="gloo", seed=0, disable_tqdm=True)
callback = TorchWrapperCallback(format="csv", top=0)
transformers.Trainer(model=model, args=args, train_dataset=dataset(), callbacks=[callback]).train()
# both ranks leave together: gloo aborts a rank whose peer has gone (seen once)
torch.distributed.barrier()
torch.distributed.destroy_process_group()
"""


def test_each_process_of_a_distributed_trainer_writes_its_own_files(tmp_path):
    """torchrun, two processes, DDP with gloo on the CPU: one file set per rank, each with the
    trainer's 4 global steps."""
    import subprocess
    import sys

    script = tmp_path / "ddp_train.py"
    script.write_text(DISTRIBUTED)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           str(script), str(tmp_path / "out"), os.path.abspath(__file__)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = tmp_path / "out" / "torchwrapper"
    names = sorted((n for n in os.listdir(out) if n.endswith(".csv")), key=lambda n: "rank1" in n)
    assert [("rank0" in n, "rank1" in n) for n in names] == [(True, False), (False, True)], names
    for name in names:
        frame = tw.load(str(out / name))
        assert sorted(set(frame["step"])) == [0, 1, 2, 3]
        assert (frame["api"] == "torch.optim.AdamW.step").sum() == 4
