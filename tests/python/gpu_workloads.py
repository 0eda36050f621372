# SPDX-License-Identifier: MIT
"""CUDA workloads of tests/python/test_gpu.py. Run as a script (python gpu_workloads.py NAME), runs
the workload NAME under torch.profiler in this fresh process and prints, as JSON, the GPU time it
saw: per kernel (or copy, memset) name, in total, and per aten op for the ops the test compares.

torch.profiler runs in its own process because its CUPTI client (Kineto) may keep CUPTI for the
rest of the process once used, and torchwrapper then declines GPU timing (another subscriber)."""
from __future__ import annotations

import json
import sys
from collections import defaultdict

import torch
import torch.nn.functional as F


def matmul(steps: int = 20) -> None:
    a = torch.randn(2048, 2048, device="cuda")
    for _ in range(steps):
        torch.matmul(a, a)
    torch.cuda.synchronize()


def conv(steps: int = 20) -> None:
    x = torch.randn(16, 64, 56, 56, device="cuda")
    w = torch.randn(64, 64, 3, 3, device="cuda")
    for _ in range(steps):
        torch.conv2d(x, w, padding=1)
    torch.cuda.synchronize()


def training(steps: int = 10) -> float:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(8),
                                torch.nn.Flatten(), torch.nn.Linear(32 * 64, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 3, 64, 64, device="cuda")
    y = torch.randint(0, 10, (64,), device="cuda")
    for _ in range(steps):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    return loss.item()


WORKLOADS = {"matmul": matmul, "conv": conv, "training": training}
# aten ops whose GPU time (their kernels and their children's) the test compares with the calls'
COMPARED_OPS = ("aten::matmul", "aten::conv2d")


def profiler_times(name: str) -> dict:
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    torch.backends.cudnn.benchmark = False
    WORKLOADS[name]()  # warm up: cuBLAS/cuDNN handles, allocator, lazy modules
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        WORKLOADS[name]()
    by_name: dict = defaultdict(float)
    for event in prof.events():
        if event.device_type == DeviceType.CUDA:  # kernels, memcpys, memsets; times in us
            by_name[event.name] += (event.time_range.end - event.time_range.start) * 1000.0
    ops = {}
    for avg in prof.key_averages():
        if avg.key in COMPARED_OPS:
            total_us = getattr(avg, "device_time_total", None)
            if total_us is None:  # torch before 2.4
                total_us = avg.cuda_time_total
            ops[avg.key] = total_us * 1000.0
    return {"kernels": dict(by_name), "total_ns": sum(by_name.values()), "ops": ops}


if __name__ == "__main__":
    print(json.dumps(profiler_times(sys.argv[1])))
