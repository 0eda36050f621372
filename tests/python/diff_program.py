# SPDX-License-Identifier: MIT
"""A training loop profiled into OUT_DIR, for test_diff.py; one of several runs that take turns.

usage: diff_program.py OUT_DIR VARIANT STEPS READ_FD WRITE_FD

VARIANT: "base" (an MLP with SGD, and each step a product of a 256xK and a Kx256 matrix outside
autograd, K = 256); "slow" (the same with K = 310: one API, torch.mm, ~20% slower, nothing else
changed); "tanh" (base with Tanh in place of ReLU: APIs appear and vanish).

Each step begins when a byte arrives on READ_FD and passes the turn on by writing one to WRITE_FD:
the runs of a test go step by step in turn, so that the load other programs put on the machine falls
on all of them alike (see test_diff.py). The turn is taken outside any profiled call.
"""
import os
import sys

import torch
import torch.nn.functional as F

import torchwrapper as tw

out_dir, variant, steps, read_fd, write_fd = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), \
    int(sys.argv[5])
torch.set_num_threads(1)  # the runs take turns on one core each; two threads would fight over two
# ... and on the same core: left to the scheduler, each run tends to stay on a core of its own, and
# whatever else loads one core (another program, a kernel thread) then slows one run and not the
# other, step after step: "the same program run twice" once showed torch.mm 7% slower in one run.
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def train():
    torch.manual_seed(0)
    activation = torch.nn.Tanh() if variant == "tanh" else torch.nn.ReLU()
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), activation, torch.nn.Linear(64, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    k = 310 if variant == "slow" else 256
    a, b = torch.randn(256, k), torch.randn(k, 256)  # about half of a step's recorded time
    for _ in range(steps):
        if not os.read(read_fd, 1):
            sys.exit("diff_program: the run before this one in the ring has gone")
        x, y = torch.randn(16, 32), torch.randint(0, 10, (16,))
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        with torch.no_grad():
            torch.mm(a, b)  # e.g. a metric on the side: the planted slowdown's API
        optimizer.step()
        os.write(write_fd, b"x")


tw.TorchWrapper({"out_dir": out_dir, "format": "csv"}).start(train)
