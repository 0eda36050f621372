# SPDX-License-Identifier: MIT
"""A small image classifier trained with seven common mistakes, for tw-report --findings to name:

    .venv/bin/python -m torchwrapper run -o ./output examples/mistakes.py
    .venv/bin/tw-report --findings ./output

Each mistake is marked with its fix; the program trains correctly, only slowly."""
import math

import torch
import torch.nn as nn


class Shapes(torch.utils.data.Dataset):
    """Samples built in Python, pixel by pixel (fix: tensors made once, or workers)."""

    def __len__(self):
        return 512

    def __getitem__(self, i):
        image = torch.zeros(3, 32, 32)
        for row in range(32):
            for column in range(32):
                image[:, row, column] = math.sin(i + row * column)
        return image, i % 4


def main(steps=24):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, bias=True),   # fix: bias=False before a BatchNorm
                          nn.BatchNorm2d(16), nn.ReLU(), nn.Flatten(), nn.Linear(16 * 30 * 30, 4))
    loader = torch.utils.data.DataLoader(Shapes(), batch_size=16, num_workers=0)   # fix: num_workers=4
    optimizer = torch.optim.Adam(model.parameters(), foreach=False)   # fix: foreach=True or fused=True
    augment = torch.compile(lambda x: x * 1.01, backend="eager")      # fix: dynamic=True
    for step, (images, labels) in enumerate(loader):
        if step == steps:
            break
        images = augment(images[: 8 + step % 8])   # a new shape every step: compiled again
        logits = model(images)
        loss = nn.functional.cross_entropy(logits, labels[: images.shape[0]])
        optimizer.zero_grad(set_to_none=False)     # fix: set_to_none=True (the default)
        loss.backward()
        optimizer.step()
        confidence = 0.0
        for value in logits.softmax(1).max(1).values:   # a metric in Python (fix: .mean() on the tensor)
            confidence += float(value)
        print(f"step {step}: loss {loss.item():.3f}, confidence {confidence / len(logits):.2f}")  # fix: every N steps


if __name__ == "__main__":
    main()
