# SPDX-License-Identifier: MIT
"""Tensor statistics of module calls (tensor_stats): equal to an independent computation on the same
tensors, found where a NaN appears, without changing training and without being recorded."""
import collections
import json
import math
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchwrapper as tw

from models import SETUPS

ALL = {"tensors": ["input", "output", "weight", "grad"]}


def _run(setup, steps, seed=0, hooks=None, profile=None):
    """Trains `steps` steps from a seed (as models.train), optionally under a profile, calling
    hooks(model) after building the model. Returns losses, final parameters and the profile."""
    model_cls, make_optimizer, batch = SETUPS[setup]
    torch.manual_seed(seed)
    model = model_cls()
    optimizer = make_optimizer(model.parameters())
    capture = hooks(model) if hooks else None
    losses = []
    if profile is not None:
        profile.start()
    try:
        for step in range(steps):
            if capture is not None:
                capture.step = step
            x, y = batch()
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            if capture is not None:
                capture.after_backward()
            optimizer.step()
            losses.append(loss.item())
    finally:
        if profile is not None:
            profile.stop()
    return losses, [p.detach().clone() for p in model.parameters()], capture


def _expected(t):
    x = t.detach().double()
    n = t.numel()
    return {"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""), "numel": n,
            "mean": x.mean().item() if n else math.nan, "std": x.std().item() if n > 1 else math.nan,
            "min": x.min().item() if n else math.nan, "max": x.max().item() if n else math.nan,
            "zeros": int((t == 0).sum()), "nan": int(t.isnan().sum()), "inf": int(t.isinf().sum())}


class Capture:
    """Independent statistics of every module call's tensors, taken with torch's own module hooks in
    an unprofiled run: {(step, path, role, name, occurrence): expected}."""

    def __init__(self, model):
        self.step = 0
        self.stats = {}
        self.count = collections.Counter()
        self.seen_weights = set()
        self.called = {}
        root = type(model).__name__   # module paths: the model's class, then named_modules()'s name
        for name, module in model.named_modules():
            path = f"{root}.{name}" if name else root
            module.register_forward_pre_hook(self._pre(path, module), with_kwargs=True)
            module.register_forward_hook(self._post(path))

    def _add(self, path, role, name, t):
        key = (self.step, path, role, name)
        occurrence = self.count[key]
        self.count[key] += 1
        self.stats[key + (occurrence,)] = _expected(t)

    def _tensors(self, obj, prefix=""):
        if isinstance(obj, torch.Tensor):
            yield prefix, obj
        elif isinstance(obj, (tuple, list)):
            for i, item in enumerate(obj):
                yield from self._tensors(item, f"{prefix}.{i}" if prefix else str(i))
        elif isinstance(obj, dict):
            for key, item in obj.items():
                yield from self._tensors(item, f"{prefix}.{key}" if prefix else str(key))

    def _pre(self, path, module):
        def hook(mod, args, kwargs):
            for name, t in self._tensors(args):
                self._add(path, "input", name, t)
            for name, t in self._tensors(kwargs):
                self._add(path, "input", name, t)
            if (self.step, path) not in self.seen_weights:
                self.seen_weights.add((self.step, path))
                for name, p in mod.named_parameters(recurse=False):
                    self._add(path, "weight", name, p)
            self.called[path] = mod
        return hook

    def _post(self, path):
        def hook(mod, args, output):
            for name, t in self._tensors(output):
                self._add(path, "output", name, t)
        return hook

    def after_backward(self):
        for path, mod in self.called.items():
            for name, p in mod.named_parameters(recurse=False):
                if p.grad is not None:
                    self._add(path, "grad", name, p.grad)
        self.called = {}


def _rows(prof):
    columns, rows = prof.stats_rows()
    return [dict(zip(columns, r)) for r in rows]


def _keyed(rows):
    """The same keys as Capture's, occurrences in call order."""
    out = {}
    count = collections.Counter()
    for r in sorted(rows, key=lambda r: (r["call_id"], r["tensor"], r["index"])):
        key = (r["step"], r["module"], r["tensor"], r["name"])
        out[key + (count[key],)] = r
        count[key] += 1
    return out


@pytest.mark.parametrize("batch", [False, True], ids=["direct", "batched"])
@pytest.mark.parametrize("setup", ["alexnet_sgd", "lstm_adam", "encoder_adam"])
def test_statistics_equal_an_independent_computation_and_training_is_unchanged(setup, batch, tmp_path,
                                                                                monkeypatch):
    from torchwrapper import _tensor_stats as _stats

    monkeypatch.setattr(_stats, "BATCH_SMALL_ON_CPU", batch)
    plain_losses, plain_params, capture = _run(setup, 3, hooks=Capture)
    prof = tw.profile(out_dir=str(tmp_path), format="csv", tensor_stats=ALL)
    losses, params, _ = _run(setup, 3, profile=prof)
    # Bit-identical training: statistics use no random numbers, change no tensor, record no grad.
    assert losses == plain_losses
    assert all(torch.equal(a, b) for a, b in zip(params, plain_params))

    got = _keyed(_rows(prof))
    expected = capture.stats
    assert set(got) == set(expected)
    assert {k[2] for k in got} == {"input", "output", "weight", "grad"}
    for key, want in expected.items():
        row = got[key]
        for metric in ("shape", "dtype", "numel", "zeros", "nan", "inf"):
            assert row[metric] == want[metric], (key, metric)
        for metric in ("min", "max"):   # exactly
            assert row[metric] == want[metric] or (math.isnan(row[metric]) and math.isnan(want[metric])), key
        for metric in ("mean", "std"):
            if math.isnan(want[metric]):
                assert row[metric] is None or math.isnan(row[metric]), key
            else:
                assert row[metric] == pytest.approx(want[metric], rel=1e-12, abs=1e-15), (key, metric)


def test_each_row_belongs_to_the_call_it_names(tmp_path):
    prof = tw.profile(out_dir=str(tmp_path), format="json", tensor_stats=ALL)
    _run("alexnet_sgd", 2, profile=prof)
    records = {r.call_id: r for r in prof.records()}
    rows = _rows(prof)
    for row in rows:
        record = records[row["call_id"]]
        if row["tensor"] == "grad":
            assert record.api == "torch.autograd.backward"
        else:
            assert record.api == "torch.nn.Module.__call__" and record.module == row["module"]
    assert {r["step"] for r in rows} == {0, 1}


def test_a_nan_injected_in_one_layer_is_reported_at_that_layer_and_step(tmp_path):
    torch.manual_seed(0)
    model = SETUPS["alexnet_sgd"][0]()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    target = model.features[3]           # the second Conv2d

    def poison(module, args, output):
        if poison.step == 2:
            output = output.clone()
            output[0, 0, 0, 0] = float("nan")
            return output
    poison.step = -1
    target.register_forward_hook(poison)
    with tw.profile(out_dir=str(tmp_path), format="csv", tensor_stats=True) as prof:
        for step in range(4):
            poison.step = step
            optimizer.zero_grad()
            F.cross_entropy(model(torch.randn(2, 3, 32, 32)), torch.tensor([1, 2])).backward()
            optimizer.step()
    rows = _rows(prof)   # in the order the tensors were seen
    first = next(r for r in rows if r["nan"])
    assert (first["step"], first["module"], first["tensor"]) == (2, "AlexNet.features.3", "output")
    assert first["nan"] == 1
    assert all(r["nan"] == 0 for r in rows if r["step"] < 2)
    # The one layer whose input was clean and whose output was not (containers around it aside).
    leaves = {f"AlexNet.{name}" for name, m in model.named_modules() if not list(m.children())}
    clean_in = {r["module"] for r in rows if r["step"] == 2 and r["tensor"] == "input" and not r["nan"]}
    bad_out = {r["module"] for r in rows if r["step"] == 2 and r["tensor"] == "output" and r["nan"]}
    assert clean_in & bad_out & leaves == {"AlexNet.features.3"}


def test_statistics_ops_are_not_recorded_nor_counted(tmp_path):
    def counts(**options):
        prof = tw.profile(**options)
        _run("lstm_adam", 2, profile=prof)
        return collections.Counter(r.api for r in prof.records())

    plain = counts()
    watched = counts(tensor_stats=ALL)
    calls = watched.pop("torch.nn.Module.__call__")
    assert calls == 2 * 4      # model, embed, lstm, head per step
    assert watched == plain


def test_every_n_steps_and_metric_selection():
    prof = tw.profile(tensor_stats={"tensors": ["output"], "every": 2, "metrics": ["shape", "max"],
                                    "modules": ["features.*"]})   # a glob on names in the model
    _run("alexnet_sgd", 5, profile=prof)
    rows = _rows(prof)
    assert {r["step"] for r in rows} == {0, 2, 4}
    assert {r["module"] for r in rows} == {f"AlexNet.features.{i}" for i in range(8)}
    assert all(r["mean"] is None and r["dtype"] is None and r["max"] is not None and r["shape"] for r in rows)


def test_modules_are_chosen_by_class_api_name_too():
    prof = tw.profile(tensor_stats={"tensors": ["output"], "modules": ["torch.nn.Linear*"]})
    _run("alexnet_sgd", 1, profile=prof)
    assert {r["module"] for r in _rows(prof)} == {"AlexNet.classifier.1", "AlexNet.classifier.3"}


def test_module_globs_match_paths_and_names_in_the_model():
    """A glob names a module by its path (the model's class first) or by its named_modules() name."""
    for globs in (["AlexNet.classifier.[13]"], ["classifier.[13]"], ["*.classifier.[13]"]):
        prof = tw.profile(tensor_stats={"tensors": ["output"], "modules": globs})
        with warnings.catch_warnings():
            warnings.simplefilter("error")   # nor does any of them warn that it matches nothing
            _run("alexnet_sgd", 1, profile=prof)
        assert {r["module"] for r in _rows(prof)} == {"AlexNet.classifier.1", "AlexNet.classifier.3"}, globs


def test_custom_metric_functions_give_numbers_and_a_failing_one_is_dropped_with_one_warning():
    def l2(t):
        return {"norm": t.float().norm(), "numel_half": t.numel() / 2}

    def broken(t):
        raise ZeroDivisionError("boom")

    plain_losses, _, _ = _run("alexnet_sgd", 2)
    prof = tw.profile(tensor_stats={"tensors": ["output"], "metrics": ["max", "l2", "broken"],
                                    "modules": ["classifier.*"]},
                      metrics={"l2": l2, "broken": broken})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        losses, _, _ = _run("alexnet_sgd", 2, profile=prof)
    assert losses == plain_losses
    messages = [str(w.message) for w in caught if "broken" in str(w.message)]
    assert len(messages) == 4   # once per module (classifier.0 to .3), not per call
    assert "boom" in messages[0] and "classifier." in messages[0]
    rows = _rows(prof)
    for r in rows:
        assert set(r["custom"]) == {"l2.norm", "l2.numel_half"}
        assert r["custom"]["l2.numel_half"] == r["numel"] / 2
        assert r["custom"]["l2.norm"] > 0


def test_a_glob_that_matches_nothing_warns_with_the_nearest_names():
    prof = tw.profile(tensor_stats={"modules": ["feature.0", "torch.nn.Conv2d"]})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _run("alexnet_sgd", 1, profile=prof)
    messages = [str(w.message) for w in caught if "matches no module" in str(w.message)]
    assert len(messages) == 1
    assert "'feature.0'" in messages[0] and "features.0" in messages[0]


def test_bad_options_name_the_value_and_what_is_accepted():
    with pytest.raises(ValueError, match="'outputs' is not one of: input output weight grad"):
        tw.profile(tensor_stats={"tensors": ["outputs"]})
    with pytest.raises(ValueError, match="metric 'l3' is not known"):
        tw.profile(tensor_stats={"metrics": ["mean", "l3"]})
    with pytest.raises(TypeError, match="not a callable"):
        tw.profile(tensor_stats={"metrics": ["x"]}, metrics={"x": 3})
    with pytest.raises(ValueError, match="did you mean 'every'"):
        tw.profile(tensor_stats={"evry": 3})


def test_json_rows_hold_null_for_nan_and_infinities(tmp_path):
    model = nn.Sequential(nn.Linear(2, 2))
    with tw.profile(out_dir=str(tmp_path), format="json", tensor_stats={"tensors": ["input"]}) as prof:
        model(torch.tensor([[float("nan"), 1.0]]))
    files = [f for f in tmp_path.iterdir() if f.name.endswith(".stats.jsonl")]
    assert len(files) == 1
    rows = [json.loads(line) for line in files[0].read_text().splitlines()]
    assert {r["module"] for r in rows} == {"Sequential", "Sequential.0"}
    assert all(r["mean"] is None and r["nan"] == 1 and r["max"] is None for r in rows)


@pytest.mark.parametrize("numel,batch", [(5, True), (5, False), (40000, True)], ids=["batched", "small", "large"])
def test_edge_values_and_dtypes_on_both_paths(numel, batch, monkeypatch):
    # Small tensors are reduced together at the step's end (on a GPU; here when asked), large ones
    # at once: same results.
    from torchwrapper import _tensor_stats as _stats

    monkeypatch.setattr(_stats, "BATCH_SMALL_ON_CPU", batch)
    torch.manual_seed(1)
    base = torch.randn(numel) * 3 + 0.5
    special = base.clone()
    special[:4] = torch.tensor([float("nan"), float("inf"), 0.0, -0.0])
    cases = {
        "plain": base, "special": special, "posinf": torch.where(base > 0, base, torch.tensor(float("inf"))),
        "ints": torch.randint(-5, 6, (numel,)), "bools": base > 0, "fp16": base.half(), "bf16": base.bfloat16(),
        "f64": base.double() + 1e6, "allzero": torch.zeros(numel), "one": torch.tensor([2.5]),
        "empty": torch.zeros(0), "strided": torch.randn(numel, 3).t(),
    }
    class Each(nn.ModuleDict):
        def forward(self, inputs):
            return [self[key](t) for key, t in inputs.items()]

    model = Each({k: nn.Identity() for k in cases})
    with tw.profile(tensor_stats={"tensors": ["input"], "modules": list(cases)}) as prof:
        model(cases)
    rows = {r["module"]: r for r in _rows(prof)}
    for key, t in cases.items():
        want, got = _expected(t), rows[f"Each.{key}"]
        for metric in ("shape", "dtype", "numel", "zeros", "nan", "inf", "min", "max"):
            w, g = want[metric], got[metric]
            assert g == w or (isinstance(w, float) and math.isnan(w) and math.isnan(g)), (key, metric, g, w)
        for metric in ("mean", "std"):
            w, g = want[metric], got[metric]
            if math.isnan(w) or math.isinf(w):
                assert g is None or g == w or (math.isnan(w) and math.isnan(g)), (key, metric, g, w)
            else:
                assert g == pytest.approx(w, rel=1e-12, abs=1e-15), (key, metric, g, w)
