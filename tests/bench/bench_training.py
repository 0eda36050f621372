# SPDX-License-Identifier: MIT
"""Whole-run slowdown of three training loops (an MLP, a small CNN, an LSTM language model, on
generated data): profiled by torchwrapper (everything under torch wrapped, CSV files written), by
torch.profiler (CPU activities; the time of its exit counted), and by a pure-Python decorator over
the same callables, each as a ratio to the unprofiled run of the same repetition (the order of the
four rotates), median over repetitions. Installing and removing wrappers (torchwrapper's and the
decorator's) is a one-off cost per run, reported by run.py, and left out here; torch.profiler's
exit is counted, as it grows with the number of calls. Run by `make bench`; BENCH=full for more repetitions,
smoke for one of a few steps (tests/bench/modes.py).
"""
from __future__ import annotations

import gc
import json
import os
import platform
import statistics
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import torchwrapper as tw
from modes import sized  # this folder's: BENCH
from run import python_decorator  # the same minimal decorator as the per-call comparison
from torchwrapper._discover import MISSING

REPS = sized(1, 9, 31)
BUILD = os.environ.get("top_builddir", ".")


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(64, 256), nn.Linear(256, 256), nn.Linear(256, 10)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Linear(32 * 8 * 8, 10)

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1))


class LSTMLanguageModel(nn.Module):
    def __init__(self, vocab=1000):
        super().__init__()
        self.embed = nn.Embedding(vocab, 64)
        self.lstm = nn.LSTM(64, 128, batch_first=True)
        self.out = nn.Linear(128, vocab)

    def forward(self, tokens):
        hidden, _ = self.lstm(self.embed(tokens))
        return self.out(hidden)


def training_step(model, optimizer, inputs, targets):
    """One step of cross-entropy training, as a closure over the model and its data."""
    def step():
        loss = F.cross_entropy(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return step


def mlp_step_factory():
    model = MLP()
    return training_step(model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9), torch.randn(128, 64),
                         torch.randint(0, 10, (128,)))


def cnn_step_factory():
    model = CNN()
    return training_step(model, torch.optim.Adam(model.parameters(), lr=1e-3), torch.randn(16, 3, 32, 32),
                         torch.randint(0, 10, (16,)))


def lstm_step_factory():
    model = LSTMLanguageModel()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, 1000, (16, 33))

    def step():
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, 1000), tokens[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return step


LOOPS = [("MLP + SGD", mlp_step_factory, sized(2, 40, 40)), ("CNN + Adam", cnn_step_factory, sized(2, 12, 12)),
         ("LSTM LM + Adam", lstm_step_factory, sized(2, 8, 8))]


class Decorator:
    """The pure-Python wrappers' technique, minimally: every callable torchwrapper wraps is replaced
    by a functools.wraps closure that times the call with perf_counter_ns and appends to a dict."""

    def __init__(self):
        self.plan = tw.discover()
        self.log = {}
        self.undo = []

    def wrap(self, fn, name):
        return python_decorator(fn, name, self.log)

    def start(self):
        self.log.clear()
        for target in self.plan.targets:
            if target.kind == "staticmethod":
                replacement = staticmethod(self.wrap(target.obj, target.name))
            elif target.kind == "classmethod":
                replacement = classmethod(self.wrap(getattr(target.obj, "__func__", target.obj), target.name))
            else:
                replacement = self.wrap(target.obj, target.name)
            for owner, attr, raw in target.places:
                try:
                    setattr(owner, attr, replacement)
                except (AttributeError, TypeError):
                    continue
                self.undo.append((owner, attr, raw))

    def stop(self):
        for owner, attr, raw in reversed(self.undo):
            if raw is MISSING:
                delattr(owner, attr)
            else:
                setattr(owner, attr, raw)
        self.undo.clear()


def timed(step, steps):
    t0 = time.perf_counter_ns()
    for _ in range(steps):
        step()
    return time.perf_counter_ns() - t0


def main():
    import torch.profiler as tp

    torch.set_num_threads(1)  # one core per run: the other one is left to the writer thread
    decorator = Decorator()
    results = []
    with tempfile.TemporaryDirectory(prefix="tw-bench-training-") as tmp:
        for name, factory, steps in LOOPS:
            step = factory()
            timed(step, 3)  # warm up
            runs = {"plain": [], "torchwrapper": [], "torch.profiler": [], "Python decorator": []}
            recorded = 0

            def plain():
                return timed(step, steps)

            def ours():
                # Wrapping and unwrapping (10 + 2.4 ms, once per run whatever its length) are
                # outside the timing, as the decorator's are; the writer thread works during it.
                prof = tw.profile(out_dir=os.path.join(tmp, "run"), format="csv")
                prof.start()
                t0 = time.perf_counter_ns()
                for _ in range(steps):
                    step()
                elapsed = time.perf_counter_ns() - t0
                prof.stop()
                nonlocal recorded
                recorded = prof.stats()["records"]
                return elapsed

            def profiler():
                t0 = time.perf_counter_ns()
                with tp.profile(activities=[tp.ProfilerActivity.CPU]):
                    for _ in range(steps):
                        step()
                return time.perf_counter_ns() - t0  # exit (event processing) included

            def decorated():
                decorator.start()
                try:
                    return timed(step, steps)
                finally:
                    decorator.stop()

            each = [("plain", plain), ("torchwrapper", ours), ("torch.profiler", profiler),
                    ("Python decorator", decorated)]
            for rep in range(REPS):
                gc.collect()
                order = each[rep % 4:] + each[:rep % 4]
                times = {mode: fn() for mode, fn in order}
                for mode in runs:
                    runs[mode].append(times[mode] / times["plain"])
            plain_ms = statistics.median([timed(step, steps) for _ in range(sized(1, 3, 3))]) / 1e6
            row = {"loop": name, "steps": steps, "plain_ms": round(plain_ms, 1), "calls_recorded": recorded,
                   **{mode: round(statistics.median(r), 3) for mode, r in runs.items() if mode != "plain"}}
            results.append(row)
            print(f"  {name:16} {steps:3d} steps, {plain_ms:7.1f} ms plain, {recorded:6d} calls: torchwrapper "
                  f"{row['torchwrapper']:.3f}x, torch.profiler {row['torch.profiler']:.3f}x, "
                  f"Python decorator {row['Python decorator']:.3f}x")
    out = os.environ.get("BENCH_TRAINING_JSON", os.path.join(BUILD, "build", "bench-training.json"))
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"reps": REPS, "python": platform.python_version(), "torch": torch.__version__,
                   "loops": results}, f, indent=1)
    return results


if __name__ == "__main__":
    print(f"whole-run slowdown, three training loops (median of {REPS} rotated repetitions; target 1.03x):")
    sys.exit(0 if main() else 1)
