# SPDX-License-Identifier: MIT
"""Module paths (#47, item 5): one rule for every model of a program, the one torch's module tracker
(FlopCounterMode's keys) follows: the model's class, then the path named_modules() gives
(``GPT2LMHeadModel.transformer.h.0.attn``; the model itself ``GPT2LMHeadModel``; a second live model
of a class already taken ``GPT2LMHeadModel#2``). The first model used to have plain paths ("" for
itself) and the second ``BertForSequenceClassification:bert...``: a name depended on which model
ran first, and neither matched FlopCounterMode's.

On the transformers package's GPT-2 and BERT (random init, tiny configs, no download), trained
together in one program: the records, modules.json, tw-report --by module and flops_table all name
both models' modules by the rule, and per-module FLOPs equal FlopCounterMode's under the same keys."""
import csv
import json
import os
import subprocess

import pytest
import torch
import torch.nn as nn

import torchwrapper as tw

from test_flops import LAYER, counter

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.skipif(not os.path.exists(LAYER), reason="the libtorch layer was not built (configure)")

BUILD = os.environ.get("top_builddir", os.path.join(os.path.dirname(__file__), "..", ".."))
TW_REPORT = os.path.join(BUILD, "tw-report")
GPT, BERT = "GPT2LMHeadModel", "BertForSequenceClassification"


def models():
    torch.manual_seed(0)
    gpt = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64,
                                                               n_positions=16))
    bert = transformers.BertForSequenceClassification(transformers.BertConfig(
        num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64, vocab_size=64,
        max_position_embeddings=16))
    return {GPT: gpt, BERT: bert}


def losses(nets, order=(GPT, BERT)):
    """Each model's loss on one batch (BERT builds its CrossEntropyLoss inside its forward)."""
    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(1))
    batch = {GPT: {"labels": ids}, BERT: {"labels": torch.tensor([0, 1])}}
    return [nets[name](ids, **batch[name]).loss for name in order]


def names_in(model):
    return {name for name, _ in model.named_modules()}


def follows_the_rule(path, nets):
    """Whether path is a module of one of nets by the rule: its class, then its named_modules() name,
    or a transient one (its class in parentheses) under such a path."""
    root, _, name = path.partition(".")
    if root not in nets:
        return False
    if name.endswith(")"):
        name = name.rpartition("(")[0].rstrip(".")
    return name in names_in(nets[root])


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One step of both models under FlopCounterMode (forward apart, then forward and backward),
    and the same step profiled into out: (models, FlopCounterMode's forward counts, its forward and
    backward counts, the records, out)."""
    nets = models()
    with counter() as forward:
        pending = losses(nets)
    for loss in pending:
        loss.backward()
    with counter() as both:
        for loss in losses(nets):
            loss.backward()   # one model's backward at a time: the tracker's sets do not mix them
    for net in nets.values():
        net.zero_grad()
    out = tmp_path_factory.mktemp("paths") / "out"
    with tw.profile(out_dir=str(out), format="json") as prof:
        for loss in losses(nets):
            loss.backward()
    totals = [{name: sum(ops.values()) for name, ops in mode.get_flop_counts().items() if name != "Global"}
              for mode in (forward, both)]
    return nets, totals[0], totals[1], prof.records(), out


def test_both_models_modules_are_named_by_their_class_and_their_path(run):
    nets, _, _, records, out = run
    paths = {r.module for r in records if r.module is not None}
    assert {GPT, BERT, f"{GPT}.transformer.h.0.attn", f"{BERT}.bert.encoder.layer.0.attention.self"} <= paths
    assert f"{BERT}.(CrossEntropyLoss)" in paths   # the loss BERT's forward makes at every call
    assert [p for p in paths if not follows_the_rule(p, nets)] == []
    # the model's own forward carries its class, as every module inside it starts
    for name in nets:
        forwards = [r for r in records if r.api.endswith(f".{name}.forward")]
        assert [r.module for r in forwards] == [name]

    tree = json.loads((out / "modules.json").read_text())
    assert tree["roots"] == [{"path": GPT, "class": f"transformers.models.gpt2.modeling_gpt2.{GPT}"},
                             {"path": BERT, "class": f"transformers.models.bert.modeling_bert.{BERT}"}]
    by_path = {m["path"]: m for m in tree["modules"]}
    for name, net in nets.items():
        assert {f"{name}.{n}" if n else name for n in names_in(net)} <= set(by_path)
    for path, entry in by_path.items():
        assert follows_the_rule(path, nets), path
        assert entry["parent"] == (path.rpartition(".")[0] or None), path


def test_names_do_not_depend_on_which_model_runs_first(run):
    nets, _, _, records, _ = run
    with tw.profile() as prof:
        for loss in losses(nets, order=(BERT, GPT)):
            loss.backward()
    for net in nets.values():
        net.zero_grad()
    assert {r.module for r in prof.records()} == {r.module for r in records}
    assert [r["path"] for r in prof.module_tree()["roots"]] == [BERT, GPT]


def test_per_module_flops_equal_flop_counter_modes_under_the_same_names(run):
    """FlopCounterMode's get_flop_counts() keys are our module paths: forward FLOPs equal per module
    of both models, from the records, from flops_table and from tw-report --by module. With
    backward: each model's total, and every module of GPT-2; BERT's query, key and value (and each
    residual's dense) run beside one another, and the tracker counts the nodes of one such branch
    under the others too (see test_flops.py), so those are left out."""
    nets, forward, both, records, out = run
    ours = {}
    for r in records:
        if r.module is not None and r.fwd_call_id == 0 and r.api.endswith(".forward"):
            ours[r.module] = ours.get(r.module, 0) + r.flops_total
    counted = {name for name, n in ours.items() if n}
    assert counted == {name for name, n in forward.items() if n}
    assert {name: ours[name] for name in counted} == {name: forward[name] for name in counted}
    assert {GPT, BERT, f"{GPT}.transformer.h.1.mlp.c_fc", f"{BERT}.classifier"} <= counted

    table = tw.flops_table(str(out), by="module")
    assert {name: int(n) for name, n in table["flops"].items()} == {name: forward[name] for name in counted}
    report = subprocess.run([TW_REPORT, "--by", "module", "--format", "csv", str(out)], capture_output=True,
                            text=True, check=True).stdout
    rows = {row["module"]: row for row in csv.DictReader(report.splitlines())}
    assert {name: int(rows[name]["flops"]) for name in counted} == {name: forward[name] for name in counted}
    for name in counted:
        assert int(rows[name]["flops"]) + int(rows[name]["bwd_flops"]) == table.loc[name, "total_flops"], name

    assert table.loc[GPT, "total_flops"] == both[GPT] and table.loc[BERT, "total_flops"] == both[BERT]
    gpt = [name for name in counted if name.startswith(GPT)]
    assert {name: table.loc[name, "total_flops"] for name in gpt} == {name: both[name] for name in gpt}


class _Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 2)

    def forward(self, x):
        return self.fc(x)


def test_a_second_live_model_of_a_class_is_numbered_and_a_later_one_takes_the_name_again():
    first, second = _Tiny(), _Tiny()
    x = torch.randn(1, 2)
    with tw.profile() as prof:
        first(x)
        second(x)
        first(x)
        del first, second
        _Tiny()(x)   # the others are gone: the plain name is free again
    paths = [r.module for r in prof.records() if r.api == "torch.nn.Linear.forward"]
    assert paths == ["_Tiny.fc", "_Tiny#2.fc", "_Tiny.fc", "_Tiny.fc"]
