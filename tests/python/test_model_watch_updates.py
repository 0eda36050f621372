# SPDX-License-Identifier: MIT
"""Parameter updates (track): each in-place update of a parameter or gradient is an event with the
parameter's name, the API and call that made it, and the tensor's version counter."""
import collections

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchwrapper as tw

from models import SETUPS


def _events(prof):
    columns, rows = prof.updates_rows()
    return [dict(zip(columns, r)) for r in rows]


def _train(setup, steps, make_optimizer=None, **options):
    model_cls, default_optimizer, batch = SETUPS[setup]
    torch.manual_seed(0)
    model = model_cls()
    optimizer = (make_optimizer or default_optimizer)(model.parameters())
    prof = tw.profile(**options) if options else None
    losses = []
    if prof is not None:
        prof.start()
    try:
        for _ in range(steps):
            x, y = batch()
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    finally:
        if prof is not None:
            prof.stop()
    return model, losses, prof


@pytest.mark.parametrize("setup,make_optimizer", [
    ("alexnet_sgd", None),                                                     # single-tensor: param.add_
    ("lstm_adam", None),                                                       # single-tensor: param.addcdiv_
    ("alexnet_sgd", lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9, foreach=True)),   # _foreach_add_
    ("encoder_adam", lambda p: torch.optim.Adam(p, lr=1e-3, foreach=True)),
], ids=["sgd", "adam", "sgd-foreach", "adam-foreach"])
def test_every_update_of_an_optimizer_step_is_attributed_to_that_step(setup, make_optimizer, tmp_path):
    model, losses, prof = _train(setup, 3, make_optimizer, out_dir=str(tmp_path), format="csv",
                                 track=["parameters"])
    _, plain_losses, _ = _train(setup, 3, make_optimizer)
    assert losses == plain_losses
    names = [f"{type(model).__name__}.{n}" for n, _ in model.named_parameters()]   # as module paths
    steps = [r for r in prof.records() if r.api.endswith(".step") and r.api.startswith("torch.optim.")
             and r.depth == 0]
    assert len(steps) == 3
    events = [e for e in _events(prof) if e["tensor"] == "parameter"]
    for step in steps:
        inside = [e for e in events if e["outer_call_id"] == step.call_id]
        assert sorted(e["parameter"] for e in inside) == sorted(names)   # each parameter once per step
    assert len(events) == 3 * len(names)                                  # and nothing outside steps
    # The version of each parameter's last event is its version now.
    last = {e["parameter"]: e["version"] for e in events}
    assert last == {f"{type(model).__name__}.{n}": p._version for n, p in model.named_parameters()}
    records = {r.call_id: r for r in prof.records()}
    for e in events:
        assert records[e["call_id"]].api == e["api"]


def test_manual_updates_and_assignments_are_events_with_their_call():
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 1))
    with tw.profile(track=["parameters"]) as prof:
        model(torch.randn(2, 3)).sum().backward()
        with torch.no_grad():
            model[0].weight.add_(model[0].weight.grad, alpha=-0.1)     # p.add_
            model[2].bias -= 0.1 * model[2].bias.grad                  # __isub__
            nn.init.zeros_(model[2].weight)                            # a public in-place function
        model[0].bias = nn.Parameter(torch.ones(3))                    # module attribute assignment
        with torch.no_grad():
            model[0].bias.mul_(2)                                      # the new tensor is tracked
        model[0].weight.requires_grad_(True)                           # no data change: no event
    events = _events(prof)
    records = {r.call_id: r for r in prof.records()}
    got = [(e["api"], records[e["outer_call_id"]].api if e["outer_call_id"] else None, e["parameter"], e["version"],
            e["attribute"]) for e in events]
    # (nn.Linear's initialization left its parameters at version 1.) The innermost call that made
    # the change is named; the outermost one beside it (nn.init.zeros_ calls Tensor.zero_).
    assert got == [
        ("torch.Tensor.add_", "torch.Tensor.add_", "Sequential.0.weight", 2, None),
        ("torch.Tensor.__isub__", "torch.Tensor.__isub__", "Sequential.2.bias", 2, None),
        ("torch.Tensor.zero_", "torch.nn.init.zeros_", "Sequential.2.weight", 2, None),
        ("torch.nn.Module.__setattr__", None, "Sequential.0.bias", 0, "bias"),
        ("torch.Tensor.mul_", "torch.Tensor.mul_", "Sequential.0.bias", 1, None),
    ]
    for e in events:
        if e["api"] != "torch.nn.Module.__setattr__":
            assert records[e["call_id"]].api == e["api"]
    assert nn.Module.__dict__["__setattr__"].__qualname__ == "Module.__setattr__"
    assert not hasattr(nn.Module.__dict__["__setattr__"], "__wrapped__")   # put back at stop


def test_gradients_are_tracked_from_backward_to_zero_grad(tmp_path):
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with tw.profile(out_dir=str(tmp_path), track=["parameters", "grads"]) as prof:
        for _ in range(2):
            optimizer.zero_grad()
            model(torch.randn(3, 4)).sum().backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)
            optimizer.step()
    records = {r.call_id: r for r in prof.records()}
    grads = [(records[e["call_id"]].api, e["parameter"], e["version"]) for e in _events(prof) if e["tensor"] == "grad"]
    per_step = [("torch.autograd.backward", "Linear.weight", 0), ("torch.autograd.backward", "Linear.bias", 0),
                ("torch.nn.utils.clip_grads_with_norm_", "Linear.weight", 1),
                ("torch.nn.utils.clip_grads_with_norm_", "Linear.bias", 1)]
    cleared = [("torch.optim.Optimizer.zero_grad", "Linear.weight", None),
               ("torch.optim.Optimizer.zero_grad", "Linear.bias", None)]
    assert grads == per_step + cleared + per_step


def test_nothing_is_tracked_or_hooked_without_track():
    with tw.profile() as prof:
        torch.ones(2).add_(1)
    kinds = {w.api_name: w.watch_kind for w in prof.patcher.wrappers.values()}
    # an optimizer's step is marked only as one that ends a step (steps and the schedule)
    assert kinds["torch.Tensor.add_"] == 0 and kinds["torch.optim.SGD.step"] == tw._core.KIND_STEP
    with pytest.raises(RuntimeError, match="track="):
        prof.updates_rows()
    with tw.profile(track=["parameters"]) as prof:
        pass
    kinds = {w.api_name: w.watch_kind for w in prof.patcher.wrappers.values()}
    assert kinds["torch.Tensor.add_"] and kinds["torch.Tensor.__iadd__"] and kinds["torch.optim.SGD.step"]
    assert kinds["torch.Tensor.add"] == 0
