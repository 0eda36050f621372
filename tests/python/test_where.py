# SPDX-License-Identifier: MIT
"""Where each call is charged (#47): a program's own lines, never the profiler's; every forward of a
model recorded, the first included; paths that read like the code.

On real models: the transformers package's GPT-2 and BERT (random init, no download), a module defined
in the script, and a GRU, trained through ``python -m torchwrapper run`` and in-process."""
import csv
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn

import torchwrapper as tw

transformers = pytest.importorskip("transformers")

BUILD = os.environ.get("top_builddir", os.path.join(os.path.dirname(__file__), "..", ".."))
TW_REPORT = os.path.join(BUILD, "tw-report")
PACKAGE_DIR = os.path.dirname(os.path.abspath(tw.__file__))
STEPS = 4

TRAIN = textwrap.dedent(f"""
    import torch, torch.nn as nn
    from transformers import BertConfig, BertForSequenceClassification, GPT2Config, GPT2LMHeadModel

    class Recurrent(nn.Module):   # defined after the profile starts (run starts it first)
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv1d(8, 16, 3)
            self.gru = nn.GRU(16, 16, batch_first=True)
            self.head = nn.Linear(16, 4)

        def forward(self, x):
            out, _ = self.gru(self.conv(x).transpose(1, 2))
            return self.head(out[:, -1])

    torch.manual_seed(0)
    gpt = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16))
    bert = BertForSequenceClassification(BertConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=2,
                                                    intermediate_size=64, vocab_size=64, max_position_embeddings=16))
    net = Recurrent()
    opt = torch.optim.SGD([*gpt.parameters(), *bert.parameters(), *net.parameters()], lr=1e-3)
    for step in range({STEPS}):
        ids = torch.randint(0, 64, (2, 8))
        loss = gpt(ids, labels=ids).loss  # LINE:gpt
        loss = loss + bert(ids, labels=torch.tensor([0, 1])).loss  # LINE:bert
        loss = loss + net(torch.randn(2, 8, 12)).sum()  # LINE:net
        opt.zero_grad()
        loss.backward()
        opt.step()
""")

MODEL_FORWARDS = ["transformers.models.gpt2.modeling_gpt2.GPT2LMHeadModel.forward",
                  "transformers.models.bert.modeling_bert.BertForSequenceClassification.forward",
                  "__main__.Recurrent.forward"]


def report(*args):
    done = subprocess.run([TW_REPORT, *map(str, args)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    """The script profiled through run: (its directory, out_dir, {mark: line})."""
    where = tmp_path_factory.mktemp("where")
    (where / "train.py").write_text(TRAIN)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, "-m", "torchwrapper", "run", "--no-report", "-o", "out", "train.py"],
                          cwd=where, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    lines = {m.group(1): i for i, line in enumerate(TRAIN.splitlines(), 1)
             for m in [re.search(r"# LINE:(\w+)", line)] if m}
    return where, where / "out", lines


def names_the_profiler(text):
    """Whether text names a file of the torchwrapper package (by its path, or as a module path)."""
    return PACKAGE_DIR in text or re.search(r"torchwrapper[/.]_\w+", text) is not None


def test_no_output_names_a_file_of_the_profiler(program, tmp_path):
    where, out, _ = program
    outputs = {"--by site": report("--by", "site", out), "--tree": report("--tree", "1", out)}
    for flag, name in [("--folded", "stacks.folded"), ("--trace", "trace.json"), ("--html", "report.html"),
                       ("--flamegraph", "flame.svg")]:
        report(flag, tmp_path / name, out)
        outputs[flag] = (tmp_path / name).read_text()
    frame = tw.load(str(out))
    outputs["load() site_text"] = "\n".join(frame["site_text"].dropna().astype(str))
    for name in os.listdir(out):
        if name.startswith("sites") and name.endswith(".json"):
            outputs[name] = (out / name).read_text()
    assert outputs["--folded"].count("\n") > 50 and "GPT2Attention" in outputs["--folded"]
    assert not [flag for flag, text in outputs.items() if names_the_profiler(text)]


def test_each_models_forward_is_recorded_once_a_step_the_first_included(program):
    _, out, lines = program
    frame = tw.load(str(out))
    for api in MODEL_FORWARDS:
        calls = frame[frame["api"] == api]
        assert len(calls) == STEPS, api
        # the model's call is the line of the script that called it, not the profiler's shim
        assert set(calls["site_text"]) == {f"train.py:{lines[api_mark(api)]} <module>"}, api


def api_mark(api):
    return {"GPT2LMHeadModel": "gpt", "BertForSequenceClassification": "bert", "Recurrent": "net"}[api.split(".")[-2]]


def test_calls_torch_makes_are_charged_to_the_line_that_entered_torch(program):
    _, out, _ = program
    rows = list(csv.DictReader(report("--by", "site", "--format", "csv", out).splitlines()))
    key = "site: APIs called there"
    total = sum(int(r["self_ns"]) for r in rows)
    unsited = sum(int(r["self_ns"]) for r in rows if r[key].startswith("(no site"))
    assert total > 0 and unsited < 0.05 * total
    top = max(rows, key=lambda r: int(r["self_ns"]))
    assert not top[key].startswith("(")


def test_sites_read_as_the_code_names_its_files(program):
    where, out, _ = program
    texts = set(tw.load(str(out))["site_text"].dropna().astype(str))
    files = {text.split(":", 1)[0] for text in texts}
    assert "train.py" in files                                     # the script, from the working directory
    assert "transformers/models/gpt2/modeling_gpt2.py" in files    # a library, as it is imported
    assert not [f for f in files if f.startswith("/")]
    sites = json.loads((out / "sites.json").read_text())["sites"].values()
    assert any(os.path.isabs(s["file"]) and s["file"].endswith("modeling_gpt2.py") for s in sites)  # full path kept


class _Before(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x).relu()


def test_in_process_every_forward_is_recorded_for_classes_made_before_and_during_the_profile():
    gpt = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=32,
                                                               n_positions=8))
    before = _Before()
    with tw.profile() as prof:
        class During(nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = _Before()

            def forward(self, x):
                return self.inner(x) * 2

        during = During()
        for _ in range(3):
            gpt(torch.randint(0, 32, (1, 4)))
            before(torch.randn(2, 4))
            during(torch.randn(2, 4))
    apis = [r.api for r in prof.records()]
    assert apis.count("transformers.models.gpt2.modeling_gpt2.GPT2LMHeadModel.forward") == 3
    assert apis.count(f"{__name__}._Before.forward") == 6     # its own model's 3 and During's 3
    assert apis.count(f"{__name__}.{During.__qualname__}.forward") == 3
    assert not getattr(During.__dict__["forward"], "_torchwrapper_forward", False)   # restored at stop
