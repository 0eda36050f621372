# SPDX-License-Identifier: MIT
"""A training script that knows nothing of torchwrapper: DistributedDataParallel on CPU (gloo),
data from a DataLoader with worker processes. Plain runs:

    .venv/bin/python examples/train_ddp.py                      # one process
    .venv/bin/torchrun --nproc_per_node=2 examples/train_ddp.py  # two ranks

Profiled, unchanged (README.md, "Profiling an existing training script"):

    .venv/bin/python -m torchwrapper run -o ./output examples/train_ddp.py --workers 2
    .venv/bin/python -m torchwrapper run -o ./output -m torch.distributed.run --nproc_per_node=2 examples/train_ddp.py
"""
from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler


class Blobs(Dataset):
    """Points around 4 centres in 16 dimensions, labelled by centre (made from the index alone)."""

    def __len__(self) -> int:
        return 2048

    def __getitem__(self, i: int):
        g = torch.Generator().manual_seed(i)
        label = i % 4
        centre = torch.zeros(16)
        centre[label * 4:(label + 1) * 4] = 3.0
        return centre + torch.randn(16, generator=g), label


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2, help="DataLoader worker processes")
    parser.add_argument("--start-method", default="spawn", choices=["spawn", "fork", "forkserver"])
    args = parser.parse_args()

    distributed = "RANK" in os.environ  # started by torchrun
    if distributed:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if distributed else 0
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
    if distributed:
        model = DistributedDataParallel(model)  # gradients all-reduced over gloo in backward()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    data = Blobs()
    sampler = DistributedSampler(data, seed=0) if distributed else None
    loader = DataLoader(data, batch_size=64, sampler=sampler, shuffle=sampler is None,
                        num_workers=args.workers,
                        multiprocessing_context=args.start_method if args.workers else None)
    for epoch in range(args.epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        total, batches = torch.zeros(1), 0
        for x, y in loader:
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            total += loss.detach()
            batches += 1
        if distributed:
            dist.all_reduce(total)  # the mean loss over every rank
            total /= dist.get_world_size()
        if rank == 0:
            print(f"epoch {epoch}: mean loss {total.item() / batches:.4f}", flush=True)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
