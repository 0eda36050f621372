# SPDX-License-Identifier: MIT
"""What torchwrapper costs inside the trainers users run: transformers.Trainer with and without
torchwrapper.hf.TorchWrapperCallback, and Lightning's Trainer with and without
torchwrapper.lightning.TorchWrapperProfiler (a small BERT and a small MLP on the CPU, torch's default
threads), interleaved in one process, the order alternating: the median over REPS of the profiled
run's train() time over the plain one's beside it (CSV files, args none; the defaults' args too).
Skips what is not installed. BENCH=quick (default), full (more repetitions) or smoke (tests/bench/modes.py)."""
from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from modes import MODE, sized  # noqa: E402  (this folder's: BENCH)
# this folder's transformers.py (the bench's own models) must not hide the transformers package
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
sys.path.insert(0, os.path.join(HERE, "..", "python"))
REPS = int(os.environ.get("BENCH_REPS", 0)) or sized(1, 5, 11)
STEPS = sized(4, 60, 120)


def hf_run(tmp, callbacks):
    import transformers
    from test_hf_trainer import dataset

    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=100, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=256, max_position_embeddings=16)
    model = transformers.BertForSequenceClassification(config)
    args = transformers.TrainingArguments(output_dir=tmp, max_steps=STEPS, per_device_train_batch_size=4,
                                          logging_strategy="no", save_strategy="no", report_to=[], use_cpu=True,
                                          seed=0, disable_tqdm=True)
    data = (dataset() * (STEPS * 4 // len(dataset()) + 1))[:STEPS * 4]
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=callbacks)
    t0 = time.perf_counter()
    trainer.train()
    return time.perf_counter() - t0


def lightning_run(tmp, profiler):
    import lightning.pytorch as pl
    from test_lightning import Model

    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(STEPS * 8, 8), torch.randint(0, 2, (STEPS * 8,)))
    trainer = pl.Trainer(max_epochs=1, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, profiler=profiler,
                         default_root_dir=tmp)
    model = Model()
    t0 = time.perf_counter()
    trainer.fit(model, torch.utils.data.DataLoader(data, batch_size=8))
    return time.perf_counter() - t0


def ratios(run, profiled_arg, plain_arg):
    tmp = tempfile.mkdtemp(prefix="tw-bench-trainer-")
    try:
        run(tmp, plain_arg())   # warm-up
        values = []
        for rep in range(REPS):
            order = (True, False) if rep % 2 == 0 else (False, True)
            times = {}
            for profiled in order:
                shutil.rmtree(os.path.join(tmp, "torchwrapper"), ignore_errors=True)
                times[profiled] = run(tmp, profiled_arg() if profiled else plain_arg())
            values.append(times[True] / times[False])
        return statistics.median(values)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    results = {}
    try:
        from torchwrapper.hf import TorchWrapperCallback
        for args in ("none", "summary"):
            results[f"transformers.Trainer, args {args}"] = ratios(
                hf_run, lambda: [TorchWrapperCallback(format="csv", args=args, top=0)], lambda: [])
    except ImportError as error:
        print(f"SKIP transformers.Trainer: {error}")
    try:
        from torchwrapper.lightning import TorchWrapperProfiler
        for args in ("none", "summary"):
            results[f"Lightning Trainer, args {args}"] = ratios(
                lightning_run, lambda: TorchWrapperProfiler(format="csv", args=args), lambda: None)
    except ImportError as error:
        print(f"SKIP Lightning: {error}")
    for name, ratio in results.items():
        print(f"  {name}: {ratio:.3f}x ({STEPS} steps, median of {REPS}, interleaved)")
    print(json.dumps({"bench": "trainer", "mode": MODE, "steps": STEPS, "reps": REPS, "ratios": results,
                      "torch_threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
