# SPDX-License-Identifier: MIT
"""Run by tests/check-tsan.sh under ThreadSanitizer: backward passes on four threads (autograd
releases the GIL, so the nodes' hooks run without it) while the main thread starts and stops
sessions, so that stops land in the middle of nodes. Exits non-zero if a check fails; TSan's
reports are read by the script."""
import threading

import torch
import torch.nn as nn

import torchwrapper as tw

torch.set_num_threads(1)
stop = threading.Event()
errors = []


def train(seed: int) -> None:
    try:
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))
        x = torch.randn(16, 32)
        while not stop.is_set():
            model(x).pow(2).mean().backward()
    except Exception as error:  # noqa: BLE001 - reported by the main thread
        errors.append(error)


workers = [threading.Thread(target=train, args=(seed,)) for seed in range(4)]
for w in workers:
    w.start()
nodes = 0
for round_ in range(30):
    with tw.profile() as prof:
        for _ in range(3):
            torch.ones(4, requires_grad=True).sum().backward()
    nodes += sum(r.api == "AddmmBackward0" for r in prof.records())
    assert prof.session.stats()["backward"] == "on", prof.session.stats()
stop.set()
for w in workers:
    w.join()
if errors:
    raise SystemExit(f"a training thread failed: {errors[0]!r}")
if nodes == 0:
    raise SystemExit("no backward node was recorded on the training threads")
print(f"tsan_backward: {nodes} AddmmBackward0 nodes recorded across 30 sessions")
