# SPDX-License-Identifier: MIT
"""Run in a fresh interpreter by test_optimizer_names.py: trains one model per optimizer and prints,
as JSON, what a profile recorded for their steps, what getAPIName says, how often torch's global
step pre-hooks ran and the parameters trained.

    python optimizer_names_probe.py '{"before": [...], "during": [...], "sessions": N, "profile": true}'
before: optimizer classes (names in torch.optim, or "Mine": a subclass of AdamW defined here) made
before the first profile begins; during: made inside it, in that order; between: made after the
first profile, before the second. Each trains STEPS steps in every session from the one it was made
for (none when profile is false: the reference parameters). torch replaces a class's step by a hook
at the class's first construction, so the order of constructions is what differs.
"""
import json
import sys

import torch
import torch.nn.functional as F
from torch.optim.optimizer import register_optimizer_step_pre_hook

import torchwrapper as tw
from models import MLP

STEPS = 3


class Mine(torch.optim.AdamW):
    """A model's own optimizer class: AdamW's step, inherited twice over."""


plan = json.loads(sys.argv[1])
hooks = []
register_optimizer_step_pre_hook(lambda optimizer, args, kwargs: hooks.append(type(optimizer).__name__))


def make(name):
    torch.manual_seed(0)
    model = MLP()
    cls = Mine if name == "Mine" else getattr(torch.optim, name)
    return model, cls(model.parameters(), lr=1e-2)


def train(model, optimizer):
    generator = torch.Generator().manual_seed(1)
    for _ in range(STEPS):
        x, y = torch.randn(8, 32, generator=generator), torch.randint(0, 10, (8,), generator=generator)
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()


made = {name: make(name) for name in plan.get("before", [])}
out = {"sessions": []}
if not plan.get("profile", True):
    for name in plan.get("during", []):
        made[name] = make(name)
    for model, optimizer in made.values():
        train(model, optimizer)
for session in range(plan.get("sessions", 1) if plan.get("profile", True) else 0):
    if session == 1:
        for name in plan.get("between", []):
            made[name] = make(name)
    hooks.clear()
    with tw.profile() as prof:
        if session == 0:
            for name in plan.get("during", []):
                made[name] = make(name)
        for model, optimizer in made.values():
            train(model, optimizer)
        inside = {name: tw.getAPIName(optimizer.step) for name, (_, optimizer) in made.items()}
    recorded = {}
    for r in prof.records():
        if r.depth == 0 and r.api.startswith("torch.optim.") and r.api.endswith(".step"):
            recorded[r.api] = recorded.get(r.api, 0) + 1
    out["sessions"].append({"trained": list(made), "recorded": recorded, "getAPIName": inside, "hooks": len(hooks)})
out["getAPIName"] = {name: tw.getAPIName(optimizer.step) for name, (_, optimizer) in made.items()}
out["params"] = {name: [p.detach().double().sum().item() for p in model.parameters()]
                 for name, (model, _) in made.items()}
print(json.dumps(out))
