# SPDX-License-Identifier: MIT
"""A small CNN that tells four kinds of blurred shapes apart: the model keeps its layers as attributes,
the images come from its own Dataset through a DataLoader, and a plain loop trains it, validating
every few steps.

A generalisation program for tw-report --findings (tests/python/test_findings_general.py): the
lines marked `# PLANTED:<kind>` make a common performance mistake (or are where it costs);
`--fixed` runs the same training with every one of them fixed."""
import argparse
import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser()
parser.add_argument("--fixed", action="store_true", help="the same training without the planted mistakes")
parser.add_argument("--epochs", type=int, default=2)
ARGS = parser.parse_args()
FIXED = ARGS.fixed

SIZE, CLASSES = 24, 4


def shape_params(index):
    """Where the blob of image `index` sits, how wide and which kind it is (a seeded draw per index)."""
    rnd = random.Random(index)
    label = rnd.randrange(CLASSES)
    return label, rnd.uniform(7, SIZE - 7), rnd.uniform(7, SIZE - 7), rnd.uniform(1.5, 3.5), rnd.random() * math.pi


class Shapes(Dataset):
    """Blurred discs, bars, crosses and rings at random places, rendered from their parameters."""

    def __init__(self, n, first=0):
        self.n, self.first = n, first
        if FIXED:   # rendered once, as tensor operations
            params = [shape_params(first + i) for i in range(n)]
            self.labels = torch.tensor([p[0] for p in params])
            label, cx, cy, width, angle = (torch.tensor([p[k] for p in params], dtype=torch.float32)
                                           for k in range(5))
            ys, xs = torch.meshgrid(torch.arange(SIZE, dtype=torch.float32),
                                    torch.arange(SIZE, dtype=torch.float32), indexing="ij")
            dx = xs[None] - cx[:, None, None]
            dy = ys[None] - cy[:, None, None]
            self.images = render(label[:, None, None], dx, dy, width[:, None, None], angle[:, None, None])[:, None]

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        if FIXED:
            return self.images[index], self.labels[index]
        label, cx, cy, width, angle = shape_params(self.first + index)
        pixels = [[render_pixel(label, x - cx, y - cy, width, angle) for x in range(SIZE)]  # PLANTED:input_bound
                  for y in range(SIZE)]
        return torch.tensor(pixels).unsqueeze(0), label  # PLANTED:input_bound


def render_pixel(label, dx, dy, width, angle):
    """One pixel's intensity, as the shape's formula says (the per-pixel version of render)."""
    u = dx * math.cos(angle) + dy * math.sin(angle)
    v = -dx * math.sin(angle) + dy * math.cos(angle)
    r = math.sqrt(u * u + v * v)
    if label == 0:
        d = r - width
    elif label == 1:
        d = max(abs(u) - 2.5 * width, abs(v) - 0.5 * width)
    elif label == 2:
        d = min(max(abs(u) - 2 * width, abs(v) - 0.5 * width), max(abs(v) - 2 * width, abs(u) - 0.5 * width))
    else:
        d = abs(r - 1.5 * width) - 0.6
    return 1.0 / (1.0 + math.exp(min(2.0 * d, 60.0)))


def render(label, dx, dy, width, angle):
    """render_pixel over whole images at once."""
    u = dx * torch.cos(angle) + dy * torch.sin(angle)
    v = -dx * torch.sin(angle) + dy * torch.cos(angle)
    r = torch.sqrt(u * u + v * v)
    disc = r - width
    bar = torch.maximum(u.abs() - 2.5 * width, v.abs() - 0.5 * width)
    cross = torch.minimum(torch.maximum(u.abs() - 2 * width, v.abs() - 0.5 * width),
                          torch.maximum(v.abs() - 2 * width, u.abs() - 0.5 * width))
    ring = (r - 1.5 * width).abs() - 0.6
    d = torch.where(label == 0, disc, torch.where(label == 1, bar, torch.where(label == 2, cross, ring)))
    return torch.sigmoid(-(2.0 * d).clamp(max=60.0))


class ShapeNet(nn.Module):
    def __init__(self):
        super().__init__()
        if FIXED:
            self.conv1 = nn.Conv2d(1, 16, 3, padding=1, bias=False)
            self.conv2 = nn.Conv2d(16, 32, 3, padding=1, bias=False)
        else:
            self.conv1 = nn.Conv2d(1, 16, 3, padding=1)  # PLANTED:conv_bias_bn
            self.conv2 = nn.Conv2d(16, 32, 3, padding=1)  # PLANTED:conv_bias_bn
        self.bn1 = nn.BatchNorm2d(16)
        self.bn2 = nn.BatchNorm2d(32)
        self.conv3 = nn.Conv2d(32, 32, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.dropout = nn.Dropout(0.2)
        self.hidden = nn.Linear(32 * 3 * 3, 128)
        self.classifier = nn.Linear(128, CLASSES)

    def forward(self, x):
        x = self.pool(F.relu(self.bn1(self.conv1(x))))  # PLANTED:conv_bias_bn
        x = self.pool(F.relu(self.bn2(self.conv2(x))))
        x = self.pool(F.relu(self.conv3(x)))
        features = self.dropout(torch.flatten(x, 1))
        if FIXED:
            hidden = self.hidden(features)
        else:   # the head as it was first written, for one image
            hidden = torch.cat([self.hidden(features[i:i + 1]) for i in range(features.shape[0])])  # PLANTED:per_sample
        return self.classifier(F.relu(hidden))


def main():
    torch.manual_seed(0)
    train_set, val_set = Shapes(768), Shapes(128, first=100_000)
    loader = DataLoader(train_set, batch_size=32, shuffle=True, num_workers=0)
    val_x = torch.stack([val_set[i][0] for i in range(128)])
    val_y = torch.tensor([int(val_set[i][1]) for i in range(128)])
    model = ShapeNet()
    hyper = dict(lr=2e-3, weight_decay=1e-4)
    if FIXED:
        optimizer = torch.optim.AdamW(model.parameters(), **hyper, foreach=True)
    else:
        optimizer = torch.optim.AdamW(model.parameters(), **hyper, foreach=False)  # PLANTED:foreach_off
    step, running = 0, torch.zeros(()) if FIXED else 0.0
    for epoch in range(ARGS.epochs):
        model.train()
        for images, labels in loader:  # PLANTED:input_bound
            loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()  # PLANTED:foreach_off
            if FIXED:
                running += loss.detach()
            else:
                running += loss.item()  # PLANTED:host_sync
            step += 1
            if step % 8 == 0:
                model.eval()
                if FIXED:
                    with torch.no_grad():
                        val_logits = model(val_x)
                else:
                    val_logits = model(val_x)  # PLANTED:eval_with_grad
                accuracy = (val_logits.argmax(1) == val_y).float().mean()
                model.train()
                print(f"epoch {epoch} step {step}: loss {float(running) / 8:.3f}, "
                      f"validation accuracy {float(accuracy):.2f}")
                running = torch.zeros(()) if FIXED else 0.0


if __name__ == "__main__":
    main()
