# SPDX-License-Identifier: MIT
"""Nothing the profiler keeps grows with the run's length: modules made at every step (a loss, a
dropout, a class defined in a loop), models re-made in a search loop and DataLoaders re-made each
epoch leave the module tables, the roots, modules.json and the walks of the model as they were
after the first steps. Counts, never timings."""
import gc
import json
import os
import re
import weakref

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchwrapper as tw
from torchwrapper import _core

FAST_FLUSH = 0.001   # modules.json may be written at every change: a count then bounds the writes


def snapshot(prof):
    """What the model watch holds now: every table whose size must not depend on the number of steps."""
    watch = prof.model_watch
    gc.collect()   # classes and modules in reference cycles: what is left is what something holds
    return {
        "roots": len(watch._live_roots()),
        "root_paths": len(watch._root_classes),
        "paths": len(watch._path),
        "refs": len(watch._refs),
        "owners": len(watch._owner),
        "described": len(watch._info),
        "kinds": len(watch._resolved_kinds),
        "class_names": len(watch._class_names),
        "table": _core.table_size("modules"),
        "transients": len(_core.transient_calls()),
        "contains_walks": watch.counters["contains_walks"],
        "modules_writes": watch.counters["modules_writes"],
    }


def tree_without_calls(out_dir):
    with open(os.path.join(out_dir, "modules.json")) as f:
        tree = json.load(f)
    for entry in tree["modules"]:
        entry.pop("calls")
    return tree


def modules_json_size_without_counts(out_dir):
    """modules.json's size, the digits of its call counts left out (they count the steps)."""
    with open(os.path.join(out_dir, "modules.json")) as f:
        return len(re.sub(r'"calls": \d+', '"calls": ', f.read()))


def train_and_snapshot(loss_of_step, opt, steps, at_step, **config):
    """steps optimizer steps of loss_of_step() under tw.profile(**config): the profile, and the
    snapshot and registered-module count after at_step steps and after the last."""
    with tw.profile(flush_interval=FAST_FLUSH, **config) as prof:
        for step in range(steps):
            opt.zero_grad()
            loss_of_step().backward()
            opt.step()
            if step + 1 == at_step:
                early = snapshot(prof), prof.model_watch.counters["registered_modules"]
        late = snapshot(prof), prof.model_watch.counters["registered_modules"]
    return prof, early, late


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))

    def forward(self, x):
        return self.net(x)


def run_top_level_loss(out_dir, steps, at_step=None):
    """The common idiom nn.CrossEntropyLoss()(model(x), y): a new loss module every step, called at
    the top level. Returns the profile and the snapshot taken after at_step steps."""
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(4, 8), torch.randint(0, 4, (4,))
    taken = None
    with tw.profile(out_dir=out_dir, format="csv", flush_interval=FAST_FLUSH) as prof:
        for step in range(steps):
            opt.zero_grad()
            nn.CrossEntropyLoss()(model(x), y).backward()
            opt.step()
            if step + 1 == at_step:
                taken = snapshot(prof)
        last = snapshot(prof)
    return prof, taken, last


def test_a_loss_made_at_every_step_keeps_every_table_as_after_fifty_steps(tmp_path):
    prof, after_50, after_2000 = run_top_level_loss(str(tmp_path / "long"), 2000, at_step=50)
    assert after_2000 == after_50
    assert after_50["roots"] == 1 and after_50["root_paths"] == 2   # the model; the loss's root died
    assert after_50["paths"] <= 6 and after_50["table"][0] <= 6   # live modules: 5 of the model, 1 loss
    assert after_50["table"][1] <= 64               # slots: tombstones of dead losses are reused
    assert after_50["contains_walks"] <= 4          # the model is walked while the loss kind is new
    records = prof.records()
    losses = [r for r in records if r.api == "torch.nn.CrossEntropyLoss.forward"]
    assert len(losses) == 2000 and {r.module for r in losses} == {"CrossEntropyLoss"}
    # each step's loss takes the root the last one was, without a walk of the Python stack
    assert prof.model_watch.counters["stack_walks"] == 2   # the model's and the first loss's
    assert {r.module for r in records if r.api == "torch.nn.Linear.forward"} == {"MLP.net.0", "MLP.net.2"}

    run_top_level_loss(str(tmp_path / "short"), 50)
    assert tree_without_calls(str(tmp_path / "long")) == tree_without_calls(str(tmp_path / "short"))
    assert modules_json_size_without_counts(str(tmp_path / "long")) == \
        modules_json_size_without_counts(str(tmp_path / "short"))
    with open(tmp_path / "long" / "modules.json") as f:
        tree = json.load(f)
    assert tree["roots"] == [{"path": "MLP", "class": "__main__.MLP" if MLP.__module__ == "__main__" else
                              f"{MLP.__module__}.MLP"},
                             {"path": "CrossEntropyLoss", "class": "torch.nn.CrossEntropyLoss"}]
    (loss,) = [m for m in tree["modules"] if m["path"] == "CrossEntropyLoss"]
    assert loss["calls"] == 2000


class Layer(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.dense = nn.Linear(width, width)

    def forward(self, x):
        # a dropout made at every call, as some user code does
        return nn.Dropout(0.0)(torch.relu(self.dense(x)))


class BertStyle(nn.Module):
    """An encoder classifier whose forward makes its loss, as transformers' BERT does."""

    def __init__(self, width=16, layers=3, labels=3):
        super().__init__()
        self.embed = nn.Linear(8, width)
        self.layers = nn.ModuleList(Layer(width) for _ in range(layers))
        self.classifier = nn.Linear(width, labels)

    def forward(self, x, labels):
        h = self.embed(x)
        for layer in self.layers:
            h = layer(h)
        logits = self.classifier(h)
        loss_fct = nn.CrossEntropyLoss()
        return loss_fct(logits, labels), logits


def test_a_model_whose_forward_makes_its_loss_is_walked_once(tmp_path):
    torch.manual_seed(0)
    model = BertStyle()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(4, 8), torch.randint(0, 3, (4,))
    out = str(tmp_path / "out")
    prof, (after_50, registered_50), (after_2000, registered_2000) = train_and_snapshot(
        lambda: model(x, y)[0], opt, 2000, 50, out_dir=out, format="json")
    assert after_2000 == after_50
    assert after_50["roots"] == 1
    # after the first steps nothing is put in the table: each step's new loss and three dropouts take
    # the paths their kinds got under their parents in the wrappers (no Python run, no table entry,
    # no weak reference), and the model is not walked again
    assert registered_2000 - registered_50 == 0
    assert prof.model_watch.counters["resolves"] == 5   # the first step's; none reaches Python after
    live_modules = len(list(model.modules()))
    assert after_50["paths"] <= live_modules + 4 and after_50["table"][0] <= live_modules + 4
    records = prof.records()
    paths = {(r.api, r.module) for r in records if r.module is not None}
    assert ("torch.nn.CrossEntropyLoss.forward", "BertStyle.(CrossEntropyLoss)") in paths
    assert {m for a, m in paths if a == "torch.nn.Dropout.forward"} == \
        {f"BertStyle.layers.{i}.(Dropout)" for i in range(3)}
    assert sum(r.api == "torch.nn.CrossEntropyLoss.forward" for r in records) == 2000
    # each step's new loss and dropouts take their paths without a walk of the Python stack: the
    # walks are the first step's (the model, the loss, three dropouts), not one a module a step
    assert prof.model_watch.counters["stack_walks"] == 5
    tree = tw.load_modules(out)
    assert [r["path"] for r in tree["roots"]] == ["BertStyle"]
    by_path = {m["path"]: m for m in tree["modules"]}
    loss = by_path["BertStyle.(CrossEntropyLoss)"]
    assert loss["parent"] == "BertStyle" and loss["calls"] == 2000
    assert by_path["BertStyle.layers.1.(Dropout)"]["parent"] == "BertStyle.layers.1"


def test_the_calls_of_transients_found_in_the_wrappers_are_counted_as_the_run_goes(tmp_path):
    """modules.json's calls of a module made in each forward, counted in the wrappers' transient
    entries: right at every step, and kept when the entries are emptied (the model grew at step 15)."""
    torch.manual_seed(0)
    model = BertStyle()
    x, y = torch.randn(4, 8), torch.randint(0, 3, (4,))
    with tw.profile(out_dir=str(tmp_path / "out")) as prof:
        for step in range(30):
            if step == 15:
                model.extra = nn.Identity()   # grown: the transients are found by a walk again
            model(x, y)
            calls = {m["path"]: m["calls"] for m in prof.model_watch.modules()["modules"]}
            assert calls["BertStyle.(CrossEntropyLoss)"] == step + 1
            assert calls["BertStyle.layers.2.(Dropout)"] == step + 1
            assert len(_core.transient_calls()) == 4   # the loss's and the three dropouts' kinds
        # the first step's walks (the model, four transients), then the transients' again at step 15
        assert prof.model_watch.counters["stack_walks"] == 5 + 4
    tree = {m["path"]: m["calls"] for m in tw.load_modules(str(tmp_path / "out"))["modules"]}
    assert tree["BertStyle.(CrossEntropyLoss)"] == 30 and tree["BertStyle.layers.0.(Dropout)"] == 30
    assert _core.transient_calls() == []   # emptied at stop


def test_a_child_added_to_a_running_model_gets_its_own_path(tmp_path):
    """The registration hook: a module attached to a model after its walk is named as its child,
    not as a transient."""
    import torch.nn.modules.module as module_module

    hooks_before = dict(module_module._global_module_registration_hooks)
    model = BertStyle()
    x, y = torch.randn(4, 8), torch.randint(0, 3, (4,))
    with tw.profile(out_dir=str(tmp_path)) as prof:
        model(x, y)
        assert len(module_module._global_module_registration_hooks) == len(hooks_before) + 1
        model.layers.append(Layer(16))
        model(x, y)
    assert module_module._global_module_registration_hooks == hooks_before   # ours is gone
    paths = {r.module for r in prof.records() if r.api == "torch.nn.Linear.forward"}
    assert "BertStyle.layers.3.dense" in paths
    assert not any("(" in p and "Linear" in p for p in paths)


def test_classes_defined_in_a_loop_leave_no_state_behind(tmp_path):
    model = MLP()
    x = torch.randn(4, 8)
    alive = []
    with tw.profile(out_dir=str(tmp_path), flush_interval=FAST_FLUSH) as prof:
        for step in range(600):
            class Head(nn.Linear):   # a new class object each time, as code in a loop makes
                pass

            alive.append(weakref.ref(Head))
            Head(4, 2)(model(x))
            if step == 49:
                after_50 = snapshot(prof)
        after_600 = snapshot(prof)
    assert after_600 == after_50
    gc.collect()
    assert sum(ref() is not None for ref in alive) <= 2   # the profiler keeps none of them alive
    assert {r.module for r in prof.records() if r.api == "torch.nn.Linear.forward"} >= {"MLP.net.0", "Head"}


def test_models_remade_in_a_search_loop_keep_one_root(tmp_path):
    x, y = torch.randn(4, 8), torch.randint(0, 4, (4,))
    out = str(tmp_path / "out")
    with tw.profile(out_dir=out, flush_interval=FAST_FLUSH) as prof:
        for trial in range(300):
            model = MLP()
            opt = torch.optim.Adam(model.parameters(), lr=10 ** -(1 + trial % 3))
            for _ in range(2):
                opt.zero_grad()
                F.cross_entropy(model(x), y).backward()
                opt.step()
            if trial == 9:
                after_10, resolves_10 = snapshot(prof), prof.model_watch.counters["resolves"]
        after_300, resolves_300 = snapshot(prof), prof.model_watch.counters["resolves"]
    # each new model is resolved once, when its first module is called (its own forward, recorded:
    # so no other model is walked to find it); nothing else changes
    assert resolves_300 - resolves_10 == 290
    assert after_300 == after_10
    assert after_10["roots"] == 1 and after_10["root_paths"] == 1
    assert after_10["paths"] <= 2 * 5   # this trial's model, and the last one's until it is freed
    assert {r.module for r in prof.records() if r.api == "torch.nn.Linear.forward"} == {"MLP.net.0", "MLP.net.2"}
    tree = tw.load_modules(out)
    assert len(tree["modules"]) == 5 and tree["roots"] == [{"path": "MLP", "class": tree["modules"][0]["class"]}]


def test_dataloaders_remade_each_epoch_leave_no_state_behind(tmp_path):
    model = MLP()
    data = [(torch.randn(8), torch.tensor(i % 4)) for i in range(8)]
    with tw.profile(out_dir=str(tmp_path), flush_interval=FAST_FLUSH, sites="all") as prof:
        for epoch in range(300):
            for x, y in torch.utils.data.DataLoader(data, batch_size=4):
                F.cross_entropy(model(x), y)
            if epoch == 9:
                after_10 = snapshot(prof)
                sites_10 = prof.session.stats()["sites"]
        after_300 = snapshot(prof)
        sites_300 = prof.session.stats()["sites"]
    assert after_300 == after_10
    assert sites_300 == sites_10   # call sites are places in the code, not iterations


@pytest.mark.parametrize("steps", [50, 2000])
def test_modules_json_is_written_only_when_the_tree_changed(tmp_path, steps):
    """With a flush interval longer than the run, modules.json is written once while recording
    (the first model) and once at stop, whatever the number of steps."""
    torch.manual_seed(0)
    model = MLP()
    x, y = torch.randn(4, 8), torch.randint(0, 4, (4,))
    with tw.profile(out_dir=str(tmp_path), flush_interval=3600.0) as prof:
        for _ in range(steps):
            nn.CrossEntropyLoss()(model(x), y)
        writes_while_recording = prof.model_watch.counters["modules_writes"]
    assert writes_while_recording == 1
    assert prof.model_watch.counters["modules_writes"] == 2
    assert {m["path"] for m in tw.load_modules(str(tmp_path))["modules"]} == {
        "MLP", "MLP.net", "MLP.net.0", "MLP.net.1", "MLP.net.2", "CrossEntropyLoss"}


def test_transformers_bert_makes_its_loss_at_every_step_and_nothing_grows(tmp_path):
    """The real thing: transformers' BertForSequenceClassification builds CrossEntropyLoss() in its
    forward at every call. Its loss is named under the model, and the model is walked once."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=200, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=32, num_labels=3)
    model = transformers.BertForSequenceClassification(config)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids, labels = torch.randint(0, 200, (2, 16)), torch.randint(0, 3, (2,))
    out = str(tmp_path / "out")
    prof, (after_20, registered_20), (after_60, registered_60) = train_and_snapshot(
        lambda: model(input_ids=ids, labels=labels).loss, opt, 60, 20, out_dir=out)
    assert after_60 == after_20
    assert after_20["roots"] == 1
    # each step's new loss takes its path in the wrappers: nothing put in the table, no Python run
    assert registered_60 == registered_20
    loss_calls = [r for r in prof.records() if r.api == "torch.nn.CrossEntropyLoss.forward"]
    root = "BertForSequenceClassification"
    assert len(loss_calls) == 60 and {r.module for r in loss_calls} == {f"{root}.(CrossEntropyLoss)"}
    assert prof.model_watch.counters["stack_walks"] == 2   # the model and the first loss; then none
    tree = tw.load_modules(out)
    assert tree["roots"] == [{"path": root, "class": f"transformers.models.bert.modeling_bert.{root}"}]
    (loss,) = [m for m in tree["modules"] if m["path"] == f"{root}.(CrossEntropyLoss)"]
    assert loss["parent"] == root and loss["calls"] == 60


class AttachesLate(nn.Module):
    """Makes a ReLU in each forward; from step 5 on it keeps it as a child before calling it."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        act = nn.ReLU()
        if self.calls > 5:
            self.act = act   # a child now: the registration hook marks the model grown
        return act(self.fc(x))


def test_a_module_made_in_forward_takes_its_child_path_once_it_is_kept(tmp_path):
    """The path found again for each step's new transient (no stack walk) is not used once the
    model may hold the module: kept as a child, it is named as one."""
    model = AttachesLate()
    x = torch.randn(2, 4)
    with tw.profile(out_dir=str(tmp_path)) as prof:
        for _ in range(10):
            model(x)
    paths = [r.module for r in prof.records() if r.api == "torch.nn.ReLU.forward"]
    assert paths == ["AttachesLate.(ReLU)"] * 5 + ["AttachesLate.act"] * 5
