# SPDX-License-Identifier: MIT
"""Small real models and training loops for the tests (no torchvision here)."""
from __future__ import annotations

from typing import List, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(32, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


class CNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.fc = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(torch.flatten(x, 1))


class LSTMModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, 16)
        self.lstm = nn.LSTM(16, 32, batch_first=True)
        self.head = nn.Linear(32, 50)

    def forward(self, tokens):
        out, _ = self.lstm(self.embed(tokens))
        return self.head(out[:, -1])


class TransformerModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.1,
                                                batch_first=True)
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        return self.head(self.layer(x).mean(dim=1))


class AlexNet(nn.Module):
    """AlexNet's shape (features, avgpool, classifier), small enough for 32x32 inputs."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, kernel_size=5, stride=2, padding=2), nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=2),
            nn.Conv2d(16, 32, kernel_size=3, padding=1), nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=2),
            nn.Conv2d(32, 32, kernel_size=3, padding=1), nn.ReLU(inplace=True),
        )
        self.avgpool = nn.AdaptiveAvgPool2d((2, 2))
        self.classifier = nn.Sequential(
            nn.Dropout(p=0.5), nn.Linear(32 * 2 * 2, 64), nn.ReLU(inplace=True),
            nn.Linear(64, num_classes),
        )

    def forward(self, x):
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


class EncoderModel(nn.Module):
    """A Transformer encoder (two layers) and a head: paths like encoder.layers.1.self_attn."""

    def __init__(self) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        return self.head(self.encoder(x).mean(dim=1))


def _mlp_batch():
    return torch.randn(16, 32), torch.randint(0, 10, (16,))


def _cnn_batch():
    return torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,))


def _lstm_batch():
    return torch.randint(0, 50, (8, 12)), torch.randint(0, 50, (8,))


def _transformer_batch():
    return torch.randn(8, 6, 32), torch.randint(0, 10, (8,))


def _alexnet_batch():
    return torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))


SETUPS = {
    "mlp_sgd": (MLP, lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9), _mlp_batch),
    "cnn_adam": (CNN, lambda p: torch.optim.Adam(p, lr=1e-3), _cnn_batch),
    "lstm_adam": (LSTMModel, lambda p: torch.optim.Adam(p, lr=1e-3), _lstm_batch),
    "transformer_adamw": (TransformerModel, lambda p: torch.optim.AdamW(p, lr=1e-3), _transformer_batch),
    "alexnet_sgd": (AlexNet, lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9), _alexnet_batch),
    "encoder_adam": (EncoderModel, lambda p: torch.optim.Adam(p, lr=1e-3), _transformer_batch),
}


def train(setup: str, steps: int, seed: int = 0) -> Tuple[List[float], List[torch.Tensor]]:
    """Trains from a seed; returns the losses and the final parameters."""
    model_cls, make_optimizer, batch = SETUPS[setup]
    torch.manual_seed(seed)
    model = model_cls()
    optimizer = make_optimizer(model.parameters())
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10, gamma=0.9)
    losses = []
    for _ in range(steps):
        x, y = batch()
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
    return losses, [p.detach().clone() for p in model.parameters()]
