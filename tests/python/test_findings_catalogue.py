# SPDX-License-Identifier: MIT
"""The findings' catalogue beyond the first rules (docs/findings.md, #56): each rule fires on a training
loop with its mistake planted, at the line that makes it, and stays silent on the same loop fixed; the
step's anatomy splits a step into its parts and names its costly lines; every rule of `tw-report
--rules` is in docs/findings.md with its source."""
import contextlib
import json
import copy
import inspect
import multiprocessing
import os
import re
import subprocess

import pytest
import torch
import torch.nn as nn

import torchwrapper as tw

BUILD = os.environ.get("top_builddir", os.path.join(os.path.dirname(__file__), "..", ".."))
SOURCE = os.environ.get("top_srcdir", os.path.join(os.path.dirname(__file__), "..", ".."))
TW_REPORT = os.path.join(BUILD, "tw-report")
HERE = os.path.basename(__file__)


def line_of(marker):
    """'test_findings_catalogue.py:N' of the line holding `# FINDING:marker` in this file."""
    lines, _ = inspect.getsourcelines(inspect.getmodule(line_of))
    for number, text in enumerate(lines, 1):
        if f"# FINDING:{marker}" in text:
            return f"{HERE}:{number} "
    raise AssertionError(marker)


def report_of(loop, tmp_path, **options):
    """The findings' JSON of loop profiled as `run` profiles (argument summaries, autograd nodes); options:
    more of the profile's keys."""
    out = tmp_path / "out"
    with tw.profile(out_dir=str(out), args="summary", aten="backward", **options):
        loop()
    return tw._findings.findings_output(str(out), "json")


def findings_of(loop, tmp_path, **options):
    return {f["kind"]: f for f in report_of(loop, tmp_path, **options)["findings"]}


def named_at(found, kind, marker):
    """The finding of kind, asserted to name the marked line."""
    assert kind in found, sorted(found)
    assert any(w.startswith(line_of(marker)) for w in found[kind]["where"]), found[kind]
    return found[kind]


class Net(nn.Module):
    """A model that holds its layers as attributes."""

    def __init__(self, width=64):
        super().__init__()
        self.inp = nn.Linear(32, width)
        self.out = nn.Linear(width, 4)

    def forward(self, x):
        return self.out(torch.relu(self.inp(x)))  # FINDING:net_forward


def train(steps=24, *, model=None, before_step=None, after_step=None, batch=16):
    """A plain loop: the planted mistakes go in before_step/after_step (called with the step, model
    and optimizer)."""
    torch.manual_seed(0)
    model = model or Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(steps):
        x, y = torch.randn(batch, 32), torch.randint(0, 4, (batch,))
        if before_step:
            before_step(step, model, opt)
        loss = nn.functional.cross_entropy(model(x), y)  # FINDING:model_call
        opt.zero_grad()
        loss.backward()
        opt.step()
        if after_step:
            after_step(step, model, opt)


# ---- the step's anatomy ---------------------------------------------------------------------------------


def test_the_anatomy_splits_a_typical_step_into_parts_that_add_up(tmp_path):
    result = report_of(lambda: train(steps=12), tmp_path)
    anatomy = result["anatomy"]
    assert anatomy["steps"] == 11   # the first step, a warm-up, left out
    parts = anatomy["parts_ms"]
    assert set(parts) == {"data", "forward", "backward", "optimizer", "evaluation", "other torch", "Python"}
    assert parts["forward"] > 0 and parts["backward"] > 0 and parts["optimizer"] > 0
    assert parts["evaluation"] == 0 and parts["data"] == 0
    assert anatomy["step_ms"] == pytest.approx(sum(parts.values()), rel=1e-4)   # (printed to 6 digits)


def test_the_anatomy_names_a_costly_line_with_what_it_runs_there(tmp_path):
    def sort_a_lot(step, model, opt):
        torch.randn(400_000).sort()  # FINDING:sort
    result = report_of(lambda: train(steps=12, after_step=sort_a_lot), tmp_path)
    lines = result["anatomy"]["lines"]
    line = next(l for l in lines if l["where"].startswith(line_of("sort")))
    assert line["runs"] == "torch.Tensor.sort" and line["share"] > 0.05
    # no rule knows a sort's cause: the costly line says where it is, ranked low
    costly = [f for f in result["findings"] if f["kind"] == "costly_line" and f["where"][0].startswith(line_of("sort"))]
    assert len(costly) == 1 and costly[0]["severity"] == "low", result["findings"]


def test_an_evaluation_is_a_part_of_its_own(tmp_path):
    def evaluate(step, model, opt):
        model.eval()
        with torch.no_grad():
            model(torch.randn(512, 32))
        model.train()
    result = report_of(lambda: train(steps=12, after_step=evaluate), tmp_path)
    assert result["anatomy"]["parts_ms"]["evaluation"] > 0
    assert "eval_with_grad" not in {f["kind"] for f in result["findings"]}


# ---- one planted mistake a rule, and its fixed twin --------------------------------------------------------


@pytest.mark.parametrize("fixed", [False, True])
def test_a_line_whose_cost_grows_every_step(tmp_path, fixed):
    history = [torch.zeros(0)]

    def keep(step, model, opt):
        if fixed:
            history[0] = torch.randn(200_000)
        else:
            history[0] = torch.cat([history[0], torch.randn(200_000)])  # FINDING:grow
    found = findings_of(lambda: train(steps=40, after_step=keep), tmp_path)
    if fixed:
        assert "growing_line" not in found
        return
    finding = named_at(found, "growing_line", "grow")
    # the tensors it is given grow (what the time does depends on the machine's load)
    assert finding["evidence"]["last_elements_per_step"] > 3 * finding["evidence"]["first_elements_per_step"]
    assert "torch.cat" in finding["message"] and "elements a step" in finding["message"]


def test_a_list_grown_every_step_and_cleared_every_epoch(tmp_path):
    seen = []

    def score(step, model, opt):
        if step % 12 == 0:   # a new epoch
            seen.clear()
        seen.append(torch.randn(2000))
        torch.cat(seen).sort()  # FINDING:epoch_grow
    found = findings_of(lambda: train(steps=48, after_step=score), tmp_path)
    finding = named_at(found, "growing_line", "epoch_grow")
    assert "more tensors than the step before" in finding["message"], finding


def test_a_batch_size_that_cycles_is_no_growth(tmp_path):
    """Batches of 8 to 15 samples in turn grow in seven steps of eight, and never three times over."""
    def loop():
        torch.manual_seed(0)
        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for step in range(48):
            loss = model(torch.randn(8 + step % 8, 32)).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    found = findings_of(loop, tmp_path)
    assert "growing_line" not in found, found


@pytest.mark.parametrize("start", [20, 30, 36])
def test_a_cost_that_starts_late_in_the_run_is_no_growth(tmp_path, start):
    """An average of the weights kept from step `start` on (after a warm-up): a line that costs nothing,
    then the same every step, steps up once and grows no more."""
    shadow = []

    def average(step, model, opt):
        if step == start:
            shadow.extend(p.detach().clone() for p in model.parameters())
        if step >= start:
            with torch.no_grad():
                for p, kept in zip(model.parameters(), shadow):
                    kept.lerp_(p, 0.01)
                torch.randn(300_000).sort()
    found = findings_of(lambda: train(steps=48, after_step=average), tmp_path)
    assert "growing_line" not in found, found["growing_line"]


@pytest.mark.parametrize("switch", [24, 36])
def test_a_curriculum_that_lengthens_its_inputs_once_is_no_growth(tmp_path, switch):
    def loop():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for step in range(48):
            length = 16 if step < switch else 64
            loss = model(torch.randn(8, length, 32)).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    found = findings_of(loop, tmp_path)
    assert "growing_line" not in found, found["growing_line"]


def spin():
    while True:
        pass


def findings_on_a_busier_machine(tmp_path, model, validate=False, **options):
    """The findings of 48 steps training model on 32 images of 24x24, with busy processes started at
    each quarter of the run (killed after it); validate: a no-grad pass over four batches every eight
    steps. options: more of the profile's keys."""
    busy = []

    def loop():
        torch.manual_seed(0)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for step in range(48):
            if step in (12, 24, 36):
                for _ in range(min(os.cpu_count() or 1, 8)):
                    busy.append(multiprocessing.get_context("fork").Process(target=spin, daemon=True))
                    busy[-1].start()
            logits = model(torch.randn(32, 1, 24, 24))
            loss = nn.functional.cross_entropy(logits, torch.randint(0, 4, (32,)))
            opt.zero_grad()
            loss.backward()
            opt.step()
            if validate and (step + 1) % 8 == 0:   # in the step that the next one begins: 8, 16, ..., 40
                with torch.no_grad():
                    model(torch.randn(128, 1, 24, 24))
    try:
        return findings_of(loop, tmp_path, **options)
    finally:
        for process in busy:
            process.kill()
            process.join()


def test_a_machine_busier_every_quarter_is_no_growth(tmp_path):
    """Busy processes started at each quarter of the run: every call waits more for torch's preempted
    intra-op threads, a short convolution most of all (0.5 ms a step at first, 79 ms at the end in one
    run here), while its tensors stay the same: the machine's, not a line's."""
    model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1),
                          nn.Flatten(), nn.Linear(16 * 24 * 24, 4))
    found = findings_on_a_busier_machine(tmp_path, model)
    assert "growing_line" not in found, found["growing_line"]


def test_a_machine_busier_every_quarter_is_no_growth_where_a_sampled_step_validates(tmp_path):
    """The same busy machine under `run`'s sampled detail, with a validation of four batches every eight
    steps: the tensors are measured in steps 0-9, 20 and 40 only, and step 40 validates, so the last
    quarter's median of the elements is half a validation's more than the first's (the fixed
    attr_model.py was named growing at its first pooling line that way, under load). Tensors that grew
    with no trend explain no time."""
    model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(16, 16, 3, padding=1),
                          nn.Flatten(), nn.Linear(16 * 12 * 12, 4))
    found = findings_on_a_busier_machine(tmp_path, model, validate=True, detail="sampled")
    assert "growing_line" not in found, found["growing_line"]


def test_a_python_list_made_a_tensor_every_step_grows_in_time_alone(tmp_path):
    """No tensor goes in (a Python list does): the time says what the elements cannot."""
    values = []

    def mean_so_far(step, model, opt):
        values.extend(float(i) for i in range(20_000))
        torch.tensor(values).mean()  # FINDING:list_grow
    found = findings_of(lambda: train(steps=40, after_step=mean_so_far), tmp_path)
    named_at(found, "growing_line", "list_grow")


class PerSample(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(32, 64)
        self.out = nn.Linear(64, 4)

    def forward(self, x, fixed=False):
        if fixed:
            h = self.enc(x)
        else:
            h = torch.cat([self.enc(x[i:i + 1]) for i in range(x.shape[0])])  # FINDING:per_sample
        return self.out(torch.relu(h))


@pytest.mark.parametrize("fixed", [False, True])
def test_a_module_called_once_per_sample(tmp_path, fixed):
    class Model(PerSample):
        def forward(self, x):
            return super().forward(x, fixed)
    found = findings_of(lambda: train(model=Model(), batch=32), tmp_path)
    if fixed:
        assert "repeated_module" not in found and "per_tensor_loop" not in found
        return
    finding = named_at(found, "repeated_module", "per_sample")
    assert finding["evidence"]["most_in_one_call"] == 32
    assert "one sample at a time" in finding["message"] and "Model.enc" in finding["message"]
    assert "per_tensor_loop" not in found   # x[i:i + 1] is the same loop, named once


class Shared(nn.Module):
    """One layer applied twelve times (weights shared, as ALBERT's): a loop the model needs."""

    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(32, 32)
        self.out = nn.Linear(32, 4)

    def forward(self, x):
        for _ in range(12):
            x = torch.relu(self.layer(x))  # FINDING:shared
        return self.out(x)


def test_a_layer_applied_again_and_again_is_said_at_low(tmp_path):
    found = findings_of(lambda: train(model=Shared()), tmp_path)
    finding = named_at(found, "repeated_module", "shared")
    assert finding["severity"] == "low" and "share weights" in finding["message"], finding


@pytest.mark.parametrize("fixed", [False, True])
def test_a_python_loop_over_the_parameters(tmp_path, fixed):
    def clip(step, model, opt):
        if fixed:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        else:
            for p in model.parameters():
                p.grad.clamp_(-1, 1)  # FINDING:per_parameter
    model = nn.Sequential(*[nn.Linear(32, 32) for _ in range(6)], nn.Linear(32, 4))
    found = findings_of(lambda: train_with_clip(model, clip), tmp_path)
    if fixed:
        assert "per_tensor_loop" not in found
        return
    finding = named_at(found, "per_tensor_loop", "per_parameter")
    assert "torch.Tensor.clamp_" in finding["message"] and finding["evidence"]["most_in_one_call"] == 14


def train_with_clip(model, clip, steps=24):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        loss = nn.functional.cross_entropy(model(torch.randn(16, 32)), torch.randint(0, 4, (16,)))
        opt.zero_grad()
        loss.backward()
        clip(0, model, opt)
        opt.step()


def train_with_closure(loss_of, steps=24, batch=24):
    """An optimizer stepped with a closure (as LBFGS, or Lightning's training_step): the forward and the loss
    run inside the optimizer's step, not at the top of the loop."""
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        x, y = torch.randn(batch, 32), torch.randint(0, 4, (batch,))

        def closure():
            opt.zero_grad()
            loss = loss_of(model(x), y)
            loss.backward()
            return loss
        opt.step(closure)


@pytest.mark.parametrize("fixed", [False, True])
def test_a_loss_computed_sample_by_sample(tmp_path, fixed):
    """A margin loss summed over the samples one at a time, inside an optimizer's closure (written after the
    rule, which came from a cross-entropy loop at the top of a step): named at its line, once; the same loss
    on the whole batch is not."""
    def loss_of(out, y):
        if fixed:
            return nn.functional.multi_margin_loss(out, y)
        return sum(nn.functional.multi_margin_loss(out[i:i + 1], y[i:i + 1])  # FINDING:per_sample_loss
                   for i in range(len(y))) / len(y)
    found = findings_of(lambda: train_with_closure(loss_of), tmp_path)
    if fixed:
        assert "per_sample_loop" not in found and "per_tensor_loop" not in found, found
        return
    finding = named_at(found, "per_sample_loop", "per_sample_loss")
    assert "torch.nn.functional.multi_margin_loss" in finding["message"], finding
    assert "once per sample" in finding["message"] and finding["evidence"]["most_in_one_call"] == 24
    assert "per_tensor_loop" not in found   # out[i:i + 1] is the same loop, named once


def test_a_loop_as_long_as_no_batch_is_no_per_sample_loop(tmp_path):
    """Twenty single-row tensors made and reduced every step (a sliding window, say) while the model's batch
    is 16: calls on a leading 1, 8 or more a step, but no loop over a batch's samples. (A window as long as
    the batch would be named: the records hold no more than the two counts.)"""
    def windows(step, model, opt):
        for k in range(20):
            torch.randn(1, 8).sum()
    found = findings_of(lambda: train(after_step=windows), tmp_path)
    assert "per_sample_loop" not in found, found["per_sample_loop"]


@pytest.mark.parametrize("fixed", [False, True])
def test_a_validation_every_step(tmp_path, fixed):
    """The held-out set evaluated after every step, in eval mode under inference_mode (written after the rule,
    which came from a no_grad validation at the top of a loop): a pointer at its line, at low (a teacher's
    forward under no_grad is the step's own); every eight steps, as a user fixes it, it is not. The model's
    forward, written here, is no costly line of its own: its layers' calls are the forward's part."""
    held_out = torch.randn(4096, 32)

    def validate(step, model, opt):
        if fixed and step % 8:
            return
        model.eval()
        with torch.inference_mode():
            model(held_out).argmax(1)  # FINDING:validation
        model.train()
    found = findings_of(lambda: train(after_step=validate), tmp_path)
    named = [f for f in found.values() if any(w.startswith(line_of("validation")) for w in f["where"])]
    if fixed:
        assert named == [], named
        return
    finding = named_at(found, "evaluation_every_step", "validation")
    assert finding["severity"] == "low" and "Net.forward" in finding["message"], finding
    assert finding["evidence"]["evaluation_steps"] >= 22, finding
    assert "costly_line" not in found, found["costly_line"]


@pytest.mark.parametrize("fixed", [False, True])
def test_a_loader_whose_workers_start_again_every_epoch(tmp_path, fixed):
    """Six short epochs of a TensorDataset through one worker process, `enumerate` over the loader (written
    after the rule, which came from a Dataset of the program's own with two workers): every epoch starts a
    worker and shuts it down, which persistent_workers=True does once. The batches come from a worker, so
    the wait for them is no main process's building."""
    from torch.utils.data import DataLoader, TensorDataset
    data = TensorDataset(torch.randn(64, 32), torch.randint(0, 4, (64,)))

    def loop():
        torch.manual_seed(0)
        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        loader = DataLoader(data, batch_size=16, num_workers=1, persistent_workers=fixed)
        for epoch in range(6):
            for i, (x, y) in enumerate(loader):  # FINDING:epochs
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
    found = findings_of(loop, tmp_path)
    if "input_bound" in found:
        assert "main process" not in found["input_bound"]["message"], found["input_bound"]
    if fixed:
        assert "loader_workers_restarted" not in found, found["loader_workers_restarted"]
        return
    finding = named_at(found, "loader_workers_restarted", "epochs")
    assert finding["evidence"]["epochs"] == 6, finding
    assert finding["evidence"]["later_epoch_start_ms"] >= finding["evidence"]["first_epoch_start_ms"] / 2, finding


class NormedOnTheFly(nn.Module):
    """A norm made for the hidden size it is given, in forward (written after the rule, which came from a
    projection head built in forward): new weights every call, never trained."""

    def __init__(self, fixed):
        super().__init__()
        self.inp = nn.Linear(32, 64)
        self.out = nn.Linear(64, 4)
        self.norm = nn.LayerNorm(64) if fixed else None

    def forward(self, x):
        h = self.inp(x)
        norm = self.norm if self.norm is not None else nn.LayerNorm(h.shape[-1])  # FINDING:built
        return self.out(norm(h))


@pytest.mark.parametrize("fixed", [False, True])
def test_a_layer_built_in_forward(tmp_path, fixed):
    def loop():
        model = NormedOnTheFly(fixed)
        train(model=model)
    found = findings_of(loop, tmp_path)
    if fixed:
        assert "module_built_every_step" not in found, found["module_built_every_step"]
        return
    # at the line that calls the model: the layer's construction is torch's code inside the forward called there
    finding = named_at(found, "module_built_every_step", "model_call")
    assert finding["severity"] == "medium" and finding["evidence"]["steps_with_calls"] >= 20, finding


@pytest.mark.parametrize("fixed", [False, True])
def test_a_checkpoint_every_step(tmp_path, fixed):
    def save(step, model, opt):
        if not fixed or step % 100 == 99:
            torch.save(model.state_dict(), tmp_path / "checkpoint.pt")  # FINDING:save
    found = findings_of(lambda: train(after_step=save), tmp_path)
    if fixed:
        assert "checkpoint_every_step" not in found
        return
    finding = named_at(found, "checkpoint_every_step", "save")
    assert finding["evidence"]["steps_with_calls"] >= 20


@pytest.mark.parametrize("fixed", [False, True])
def test_a_model_deep_copied_every_step(tmp_path, fixed):
    average = {}

    def ema(step, model, opt):
        if fixed:
            if "model" not in average:
                average["model"] = torch.optim.swa_utils.AveragedModel(
                    model, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(0.99))
            average["model"].update_parameters(model)
        else:
            average["model"] = copy.deepcopy(model)  # FINDING:deepcopy
    found = findings_of(lambda: train(after_step=ema), tmp_path)
    if fixed:
        assert "model_copied_every_step" not in found
        return
    named_at(found, "model_copied_every_step", "deepcopy")


@pytest.mark.parametrize("fixed", [False, True])
def test_an_optimizer_built_every_step(tmp_path, fixed):
    def loop():
        torch.manual_seed(0)
        model = Net()
        opt = torch.optim.Adam(model.parameters())
        for step in range(24):
            if not fixed:
                opt = torch.optim.Adam(model.parameters())  # FINDING:rebuilt
            loss = model(torch.randn(16, 32)).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    found = findings_of(loop, tmp_path)
    if fixed:
        assert "optimizer_rebuilt" not in found
        return
    named_at(found, "optimizer_rebuilt", "rebuilt")


@pytest.mark.parametrize("fixed", [False, True])
def test_a_model_moved_every_step(tmp_path, fixed):
    def move(step, model, opt):
        if not fixed:
            model.to("cpu")  # FINDING:move
    found = findings_of(lambda: train(before_step=move), tmp_path)
    if fixed:
        assert "module_moved_every_step" not in found
        return
    named_at(found, "module_moved_every_step", "move")


@pytest.mark.parametrize("fixed", [False, True])
def test_the_allocator_cache_emptied_every_step(tmp_path, fixed):
    def empty(step, model, opt):
        if not fixed:
            torch.cuda.empty_cache()  # FINDING:empty_cache
    found = findings_of(lambda: train(after_step=empty), tmp_path)
    if fixed:
        assert "cache_emptied_every_step" not in found
        return
    named_at(found, "cache_emptied_every_step", "empty_cache")


@pytest.mark.parametrize("fixed", [False, True])
def test_many_small_operations(tmp_path, fixed):
    def bookkeeping(step, model, opt):
        counts = torch.zeros(1000)
        if fixed:
            counts += 1
        else:
            for i in range(1000):
                counts[i].add_(1)  # FINDING:small_ops
    # At one torch thread: at two, beside busy processes, each op that runs on torch's thread pool waited
    # for a preempted worker (cross_entropy and its backward 10-20 ms a call instead of 0.05, in
    # make check-load), which shrank the planted loop's share of the step to the rule's 5%.
    with restored_settings():
        torch.set_num_threads(1)
        found = findings_of(lambda: train(after_step=bookkeeping), tmp_path)
    if fixed:
        assert "many_small_ops" not in found
        return
    finding = named_at(found, "many_small_ops", "small_ops")
    assert finding["evidence"]["small_ops_per_step"] >= 200


@contextlib.contextmanager
def restored_settings():
    """The process-wide settings a test switches, as they were."""
    anomaly, deterministic, threads = torch.is_anomaly_enabled(), torch.are_deterministic_algorithms_enabled(), \
        torch.get_num_threads()
    try:
        yield
    finally:
        torch.autograd.set_detect_anomaly(anomaly)
        torch.use_deterministic_algorithms(deterministic)
        torch.set_num_threads(threads)


@pytest.mark.parametrize("fixed", [False, True])
def test_anomaly_detection_left_on(tmp_path, fixed):
    def loop():
        with restored_settings():
            torch.autograd.set_detect_anomaly(not fixed)  # FINDING:anomaly
            train()
    found = findings_of(loop, tmp_path)
    if fixed:
        assert "anomaly_detection" not in found
        return
    finding = named_at(found, "anomaly_detection", "anomaly")
    assert finding["evidence"]["steps_on"] == finding["evidence"]["steps"] > 0


def test_anomaly_detection_in_a_few_steps_is_counted_in_those(tmp_path):
    def loop():
        torch.manual_seed(0)
        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for step in range(24):
            with torch.autograd.detect_anomaly() if step < 6 else contextlib.nullcontext():  # FINDING:detect
                loss = model(torch.randn(16, 32)).square().mean()
                opt.zero_grad()
                loss.backward()
            opt.step()
    with restored_settings():
        found = findings_of(loop, tmp_path)
    finding = named_at(found, "anomaly_detection", "detect")
    assert finding["evidence"]["steps_on"] == 5   # steps 1 to 5: the first is left out


@pytest.mark.parametrize("fixed", [False, True])
def test_deterministic_algorithms_required(tmp_path, fixed):
    def loop():
        with restored_settings():
            torch.use_deterministic_algorithms(not fixed)  # FINDING:deterministic
            train()
    found = findings_of(loop, tmp_path)
    if fixed:
        assert "deterministic_algorithms" not in found
        return
    named_at(found, "deterministic_algorithms", "deterministic")


@pytest.mark.parametrize("fixed", [False, True])
def test_torch_on_one_thread(tmp_path, fixed):
    def loop():
        with restored_settings():
            torch.set_num_threads(2 if fixed else 1)  # FINDING:threads
            train()
    found = findings_of(loop, tmp_path)
    if fixed:
        assert "one_thread" not in found
        return
    named_at(found, "one_thread", "threads")


@pytest.mark.parametrize("fixed", [False, True])
def test_more_torch_threads_than_cpus(tmp_path, fixed):
    cpus = len(os.sched_getaffinity(0))

    def loop():
        with restored_settings():
            torch.set_num_threads(cpus if fixed else 2 * cpus + 1)  # FINDING:oversubscribed
            train(steps=8)
    found = findings_of(loop, tmp_path)
    if fixed:
        assert "too_many_threads" not in found and "one_thread" not in found
        return
    finding = named_at(found, "too_many_threads", "oversubscribed")
    assert finding["evidence"]["steps_on"] == finding["evidence"]["steps"] > 0


@pytest.mark.parametrize("fixed", [False, True])
def test_torch_profiler_left_on(tmp_path, fixed):
    def loop():
        with torch.profiler.profile() if not fixed else contextlib.nullcontext():  # FINDING:profiler
            train(steps=12)
    found = findings_of(loop, tmp_path)
    if fixed:
        assert "profiler_left_on" not in found
        return
    named_at(found, "profiler_left_on", "profiler")


@pytest.mark.parametrize("fixed", [False, True])
def test_float64_compute(tmp_path, fixed):
    def loop():
        model = Net(width=256)
        if not fixed:
            model = model.double()  # FINDING:double
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for _ in range(24):
            x = torch.randn(64, 32, dtype=torch.float32 if fixed else torch.float64)
            loss = model(x).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    found = findings_of(loop, tmp_path)
    if fixed:
        assert "float64_compute" not in found
        return
    finding = named_at(found, "float64_compute", "net_forward")   # where the matrix products are
    assert finding["where"][0].startswith(line_of("double"))      # and first where float64 was asked for


@pytest.mark.parametrize("fixed", [False, True])
def test_an_evaluation_with_autograd_on(tmp_path, fixed):
    def evaluate(step, model, opt):
        if step % 4:
            return
        model.eval()
        with torch.no_grad() if fixed else contextlib.nullcontext():
            model(torch.randn(256, 32))  # FINDING:eval
        model.train()
    found = findings_of(lambda: train(after_step=evaluate), tmp_path)
    if fixed:
        assert "eval_with_grad" not in found
        return
    finding = named_at(found, "eval_with_grad", "eval")
    # after the optimizer steps of loops 0, 4, ..., 20: steps 1, 5, ..., 21 (none in the first, left out)
    assert finding["evidence"]["forwards"] == 6


def test_a_frozen_submodule_in_eval_mode_leaves_the_model_training(tmp_path):
    def freeze(step, model, opt):
        if step == 0:
            model.inp.eval()   # (a frozen part: the model trains)
    found = findings_of(lambda: train(before_step=freeze), tmp_path)
    assert "eval_with_grad" not in found


class ConvBn(nn.Module):
    """Both as attributes, called as self.bn(self.conv(x)): the norm's input is the conv's output."""

    def __init__(self, bias):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=bias)
        self.bn = nn.BatchNorm2d(8)
        self.act = nn.ReLU()
        self.other = nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=True)
        self.head = nn.Linear(8 * 8 * 8, 4)

    def forward(self, x):
        y = self.bn(self.conv(x))  # FINDING:conv_bn
        z = torch.relu(self.other(x))   # a conv with a bias, its output not normalized
        return self.head((y + z).flatten(1))


@pytest.mark.parametrize("bias", [True, False])
def test_a_convolution_bias_followed_through_the_data(tmp_path, bias):
    def loop():
        torch.manual_seed(0)
        model = ConvBn(bias)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for _ in range(6):
            loss = model(torch.randn(4, 3, 16, 16)).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    found = findings_of(loop, tmp_path)
    if not bias:   # the other conv's bias feeds a ReLU, not a norm: silent
        assert "conv_bias_before_batchnorm" not in found
        return
    finding = found["conv_bias_before_batchnorm"]   # at the convolution's line, with its module
    assert finding["where"] == [f"{line_of('conv_bn')}ConvBn.forward", "module ConvBn.conv"], finding
    assert finding["evidence"]["convolutions"] == 1


# ---- the catalogue ------------------------------------------------------------------------------------------


def test_every_rule_is_in_the_catalogue_page_with_its_source():
    rules = subprocess.run([TW_REPORT, "--rules"], capture_output=True, text=True, check=True).stdout.splitlines()
    kinds = [line.split()[0] for line in rules]
    assert len(kinds) >= 25 and len(set(kinds)) == len(kinds)
    with open(os.path.join(SOURCE, "docs", "findings.md")) as page:
        text = page.read()
    for kind, line in zip(kinds, rules):
        assert re.search(rf"^\| `{kind}` \|.*\| [^|]+ \|$", text, re.M), kind   # a row with a source
        assert line.split(None, 1)[1].strip(), line


# ---- the GPU rules: the fake CUPTI's records (tests/c/fake_cupti.c), and argument summaries ----------------

# the fake CUPTI and its fixture, as the GPU tests load it (tests/c/fake_cupti.c, built by make check)
from test_gpu_fake import cpu_only, fake, needs_fake  # noqa: E402,F401 (fake: a fixture)


def gpu_findings(fake, tmp_path, monkeypatch, kernels_of_step):
    """A training loop whose steps 'launch' the kernels kernels_of_step(start, end) gives (start and
    end: the step's on the fake's clock), profiled as if torch had found a device."""
    import torchwrapper._profile as profile_module
    monkeypatch.setattr(profile_module, "_cuda_available", lambda: True)
    with tw.profile(out_dir=str(tmp_path / "out"), gpu="on", args="summary"):
        torch.manual_seed(0)
        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for _ in range(16):
            start = fake.fake_cupti_now()
            loss = model(torch.randn(16, 32)).square().mean()
            opt.zero_grad()
            loss.backward()
            for begin, end in kernels_of_step(start, fake.fake_cupti_now()):
                fake.fake_cupti_launch(0, b"kernel", 0, begin, end, 0, 7)
            opt.step()
    return {f["kind"]: f for f in tw.findings(str(tmp_path / "out"))}


def busy_from_the_last_kernel(split):
    """Kernels that keep the GPU busy from where the last one ended to now, split in that many."""
    last = []

    def kernels(start, end):
        begin = last[0] if last else start
        last[:] = [end]
        width = (end - begin) // split
        return [(begin + k * width, begin + (k + 1) * width) for k in range(split)]
    return kernels


@cpu_only
@needs_fake
@pytest.mark.parametrize("fixed", [False, True])
def test_a_gpu_idle_between_its_kernels(fake, tmp_path, monkeypatch, fixed):
    def kernels(start, end):   # one short kernel a step (fixed: the GPU busy all along)
        return [(end - 2000, end - 1000)]
    if fixed:
        kernels = busy_from_the_last_kernel(1)
    found = gpu_findings(fake, tmp_path, monkeypatch, kernels)
    if fixed:
        assert "gpu_idle" not in found, found
        return
    finding = found["gpu_idle"]
    assert finding["evidence"]["gpu_busy_share"] < 0.5 and finding["share"] > 0.5
    assert "tiny_kernels" not in found   # one a step is no launch-bound step


@cpu_only
@needs_fake
@pytest.mark.parametrize("fixed", [False, True])
def test_many_tiny_kernels(fake, tmp_path, monkeypatch, fixed):
    def kernels(start, end):   # 200 kernels of 2 us a step (fixed: 4 that keep the GPU busy)
        return [(start + k * 3000, start + k * 3000 + 2000) for k in range(200)]
    if fixed:
        kernels = busy_from_the_last_kernel(4)
    found = gpu_findings(fake, tmp_path, monkeypatch, kernels)
    if fixed:
        assert "tiny_kernels" not in found and "gpu_idle" not in found, found
        return
    assert found["tiny_kernels"]["evidence"]["tiny_kernels_per_step"] == 200


@pytest.mark.parametrize("fixed", [False, True])
def test_float32_matrix_products_on_a_gpu(tmp_path, fixed):
    """Records as a CUDA run writes them (argument summaries of CUDA tensors), written here: this
    machine has no GPU to make them."""
    rows, call, t = [], 0, 1_800_000_000_000_000_000
    if fixed:
        rows.append(("torch.set_float32_matmul_precision", "(('high',), {})", 0))
    for step in range(12):
        rows.append(("torch.nn.functional.linear", "((f32[64,512]@cuda:0, f32[512,512]@cuda:0, f32[512]@cuda:0), {})",
                     step))
        rows.append(("torch.Tensor.backward", "((f32[]@cuda:0,), {})", step))
        rows.append(("torch.optim.SGD.step", "((SGD,), {})", step))
    path = tmp_path / "calls.jsonl"
    with open(path, "w") as f:
        for api, args, step in rows:
            call += 1
            f.write(json.dumps({"call_id": call, "api": api, "start_ns": t, "cost_ns": 100_000, "self_ns": 100_000,
                                "gpu_ns": 0, "pid": 1, "tid": 1, "depth": 0, "parent_id": 0, "error": False,
                                "args": args, "module": None, "step": step, "site": 0}) + "\n")
            t += 150_000
    found = {f["kind"]: f for f in tw.findings(str(path))}
    if fixed:
        assert "fp32_matmul_gpu" not in found
        return
    finding = found["fp32_matmul_gpu"]
    assert finding["evidence"]["calls"] == 11 and "torch.nn.functional.linear" in finding["message"]  # after the first step
