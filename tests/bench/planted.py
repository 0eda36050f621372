# SPDX-License-Identifier: MIT
"""A small training loop with seven common mistakes planted, for bench_findings.py to run under
three tools and compare what each one names. Each mistake is on a line marked `# PLANTED:<name>`
(bench_findings.py finds the lines by these marks; a mistake is marked where it is made and where
it costs, a line with two mistakes names both):

  dataset      a Dataset that builds each sample in Python, read with DataLoader(num_workers=0)
  sync         .item() and .tolist() every step
  metric       a metric (the mean intersection over union) computed in a Python loop
  foreach      Adam(foreach=False): the optimizer's single-tensor path
  zero_grad    zero_grad(set_to_none=False)
  conv_bias    Conv2d(bias=True) right before BatchNorm2d
  recompile    a torch.compile'd function called with a new shape each step (backend="eager" keeps
               the compilations fast: the mistake is their number, not their cost)

    python tests/bench/planted.py [STEPS]

The model segments 32x32 images into 4 classes. With PLANTED_TRACEML=1 each step runs inside
traceml_ai.trace_step(model), the integration TraceML documents for a loop of one's own; the loop is
otherwise the same.
"""
from __future__ import annotations

import contextlib
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

CLASSES = 4
SIZE = 32
BATCH = 16


class PythonSamples(torch.utils.data.Dataset):
    """Images and masks computed pixel by pixel in Python, each time a sample is read."""

    def __len__(self) -> int:
        return 100_000

    def __getitem__(self, i: int):
        image = [[[math.sin(0.1 * (i + c) * (y + 1) + 0.3 * x) for x in range(SIZE)] for y in range(SIZE)]  # PLANTED:dataset
                 for c in range(3)]
        mask = (torch.arange(SIZE)[:, None] + torch.arange(SIZE) + i) % CLASSES  # PLANTED:dataset
        return torch.tensor(image), mask  # PLANTED:dataset


def model_of() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1, bias=True),  # PLANTED:conv_bias
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Conv2d(16, CLASSES, 1),
    )


def normalize(x: torch.Tensor) -> torch.Tensor:
    return (x - x.mean()) / (x.std() + 1e-5)


def train(steps: int) -> float:
    traced = os.environ.get("PLANTED_TRACEML") == "1"
    if traced:   # TraceML's plain PyTorch integration: init() first, each step in trace_step(model)
        import traceml_ai

        traceml_ai.init(mode="auto")
    torch.manual_seed(0)
    model = model_of()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)  # PLANTED:foreach
    scale = torch.compile(normalize, backend="eager", dynamic=False)  # PLANTED:recompile
    loader = torch.utils.data.DataLoader(PythonSamples(), batch_size=BATCH, num_workers=0)  # PLANTED:dataset
    around_step = (lambda: traceml_ai.trace_step(model)) if traced else contextlib.nullcontext
    ious = []
    total, miou = 0.0, torch.zeros(())
    for step, (images, masks) in enumerate(loader):  # PLANTED:dataset (where the loop waits for it)
        if step == steps:
            break
        with around_step():
            crop = SIZE - step % 8   # a random crop, as augmentations make: a new shape each step
            x = scale(images[:, :, :crop, :crop])  # PLANTED:recompile
            y = masks[:, :crop, :crop]
            logits = model(x)  # PLANTED:conv_bias (where the convolution runs)
            loss = F.cross_entropy(logits, y)
            optimizer.zero_grad(set_to_none=False)  # PLANTED:zero_grad
            loss.backward()
            optimizer.step()  # PLANTED:foreach
            total += loss.item()  # PLANTED:sync
            predicted = logits.argmax(1).tolist()  # PLANTED:sync
            for image, truths in zip(predicted, y.tolist()):  # PLANTED:metric,sync
                for c in range(CLASSES):   # each image's intersection over union, class by class
                    inter = union = 0
                    for row, truth in zip(image, truths):
                        for p, t in zip(row, truth):
                            inter += p == c and t == c
                            union += p == c or t == c
                    ious.append(inter / union if union else 1.0)
            miou = torch.tensor(ious).mean()  # PLANTED:metric
    print(f"planted.py: mean IoU {float(miou):.3f}")
    return total


if __name__ == "__main__":
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    print(f"planted.py: mean loss {train(steps) / steps:.4f}")
