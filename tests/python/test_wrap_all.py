# SPDX-License-Identifier: MIT
"""Wrapping everything under torch: names, behaviour kept, exact restoration."""
import copy
import gc
import inspect
import io
import os
import pickle
import pydoc
import subprocess
import sys
import textwrap
import threading

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchwrapper as tw
from models import MLP, SETUPS, train

HERE = os.path.dirname(os.path.abspath(__file__))


def run_python(code: str) -> str:
    """Runs code in a fresh interpreter (a clean torch) and returns its stdout."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE] + sys.path))
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                            env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout


def test_records_of_a_training_loop_name_the_public_apis():
    with tw.profile() as prof:
        train("cnn_adam", 2)
        a = torch.ones(3)
        a + a
    names = {r.api for r in prof.records()}
    for expected in ["torch.nn.Linear.forward", "torch.nn.Conv2d.forward", "torch.Tensor.backward",
                     "torch.optim.Adam.step", "torch.Tensor.__add__", "torch.nn.functional.relu",
                     "torch.nn.functional.cross_entropy", "torch.optim.lr_scheduler.LRScheduler.step",
                     "torch.randn", "torch.Tensor.item", "torch.flatten"]:
        assert expected in names, expected
    assert not any(n.startswith("torch._") or "._" in n.replace(".__", ".") for n in names), names
    stats = prof.stats()
    assert stats["dropped"] == 0
    assert stats["records"] == len(prof.records())


def test_one_wrapper_per_callable_at_every_alias():
    assert torch.stft is torch.functional.stft
    with tw.profile() as prof:
        assert torch.stft is torch.functional.stft
        assert isinstance(torch.stft, tw.MethodWrapper)
        assert torch.stft.api_name == "torch.stft"
        assert torch.nn.functional.relu.api_name == "torch.nn.functional.relu"
        assert torch.optim.Adam.__dict__["step"].api_name == "torch.optim.Adam.step"
    assert not isinstance(torch.stft, tw.MethodWrapper)
    assert len(prof.wrapped) == len(set(prof.wrapped)) > 3000


def test_names_imported_by_user_modules_are_patched_and_restored():
    import types
    user = types.ModuleType("user_module_for_test")
    exec("from torch import add\nfrom torch.nn.functional import relu\ndef f(a):\n    return relu(add(a, a))",
         user.__dict__)
    sys.modules[user.__name__] = user
    try:
        original_add = user.add
        x = torch.ones(2)
        with tw.profile() as prof:
            assert isinstance(user.add, tw.Wrapper)
            user.f(x)
        assert user.add is original_add
        assert [r.api for r in prof.records()] == ["torch.add", "torch.nn.functional.relu", "torch.relu"]
    finally:
        del sys.modules[user.__name__]


def test_skipped_and_excluded_are_listed_with_reasons():
    prof = tw.profile(exclude=["torch.nn.functional.*"], include=["torch.nn.functional.relu"])
    with prof:
        pass
    assert "torch.nn.functional.relu" in prof.wrapped
    assert "torch.nn.functional.gelu" not in prof.wrapped
    assert ("torch.nn.functional.gelu", "torch.nn.functional.*") in prof.excluded
    reasons = dict(prof.skipped)
    assert reasons["torch.Tensor.__torch_function__"].startswith("dispatch protocol")
    assert any("immutable C type" in why for why in reasons.values())
    counts = prof.stats()
    assert counts["tensor"] > 400 and counts["method"] > 1000 and counts["places"] >= len(prof.wrapped)


def test_default_exclude_leaves_bookkeeping_unwrapped():
    prof = tw.profile().start()
    try:
        assert "torch.Tensor.__hash__" not in prof.wrapped
        assert "torch.Tensor.__hash__" in dict(prof.excluded)
        assert "torch.is_grad_enabled" not in prof.wrapped
    finally:
        prof.stop()
    prof = tw.profile(include=["torch.Tensor.__hash__"]).start()
    try:
        assert "torch.Tensor.__hash__" in prof.wrapped
        {torch.ones(1): 1}
    finally:
        prof.stop()
    assert [r.api for r in prof.records()] == ["torch.ones", "torch.Tensor.__hash__"]


def test_generator_functions_are_left_out_unless_included():
    # model.parameters() only creates a generator: the call's time is not the work, and optimizers
    # and hooks call such functions hundreds of times a step.
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())
    with tw.profile() as prof:
        params = list(model.parameters())
        model(torch.ones(1, 2))
    excluded = dict(prof.excluded)
    for name in ("torch.nn.Module.parameters", "torch.nn.Module.named_modules", "torch.nn.Module.children"):
        assert excluded[name] == "<generator functions>" and name not in prof.wrapped
    assert "torch.nn.Module.parameters" not in {r.api for r in prof.records()}
    assert "torch.nn.Linear.forward" in {r.api for r in prof.records()}   # ordinary methods stay
    with tw.profile(include=["torch.nn.Module.parameters"]) as prof:
        assert list(model.parameters()) == params
    assert [r.api for r in prof.records()] == ["torch.nn.Module.parameters"]
    # an explicit exclude list replaces the defaults, generator functions included
    with tw.profile(exclude=[]) as prof:
        list(model.parameters())
    assert "torch.nn.Module.parameters" in {r.api for r in prof.records()}


@pytest.mark.parametrize("setup", sorted(SETUPS))
def test_training_results_are_bit_identical(setup):
    steps = 60
    plain_losses, plain_params = train(setup, steps)
    with tw.profile() as prof:
        losses, params = train(setup, steps)
    assert losses == plain_losses
    assert all(torch.equal(a, b) for a, b in zip(params, plain_params))
    assert prof.stats()["records"] > steps * 20


def test_autograd_exceptions_signatures_and_help_while_wrapped():
    with tw.profile():
        x = torch.randn(3, requires_grad=True)
        y = (x * x).sum()
        (grad,) = torch.autograd.grad(y, x)
        assert torch.equal(grad, 2 * x.detach())
        with pytest.raises(RuntimeError) as wrapped_error:
            torch.matmul(torch.ones(2, 3), torch.ones(2, 3))
        with pytest.raises(TypeError, match="must be Tensor"):
            torch.add(torch.ones(1), "x")
        sig = inspect.signature(F.relu)
        text = pydoc.render_doc(F.relu, renderer=pydoc.plaintext)
        text_method = pydoc.render_doc(nn.Linear.forward, renderer=pydoc.plaintext)
    with pytest.raises(RuntimeError) as plain_error:
        torch.matmul(torch.ones(2, 3), torch.ones(2, 3))
    assert str(wrapped_error.value) == str(plain_error.value)
    assert sig == inspect.signature(F.relu)
    assert "relu(input" in text and "forward" in text_method


def test_pickle_deepcopy_and_torch_save_of_models_and_optimizer_state():
    torch.manual_seed(0)
    model = MLP()
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(2, 32)).sum().backward()
    optimizer.step()
    with tw.profile():
        clone = copy.deepcopy(model)
        restored = pickle.loads(pickle.dumps(model))
        buffer = io.BytesIO()
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "whole": model}, buffer)
        buffer.seek(0)
        loaded = torch.load(buffer, weights_only=False)
        relu_bytes = pickle.dumps(F.relu)
        add_bytes = pickle.dumps(torch.add)
        view_bytes = pickle.dumps(torch.Tensor.view)
    x = torch.randn(4, 32)
    for other in (clone, restored, loaded["whole"]):
        assert torch.equal(other(x), model(x))
    assert loaded["optimizer"]["state"][0]["step"] == optimizer.state_dict()["state"][0]["step"]
    # wrappers pickled while installed load as the originals once profiling stopped
    assert pickle.loads(relu_bytes) is F.relu
    assert pickle.loads(add_bytes) is torch.add
    assert pickle.loads(view_bytes) is torch.Tensor.view
    assert relu_bytes == pickle.dumps(F.relu)


def test_torchscript_compiles_a_model_while_wrapped():
    class Small(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            return F.relu(self.fc(x)) + torch.add(x, 1)

    model = Small()
    x = torch.randn(2, 4)
    plain_graph = str(torch.jit.script(Small()).graph)
    with tw.profile():
        scripted = torch.jit.script(model)
        out = scripted(x)
    assert torch.equal(out, model(x))
    assert str(scripted.graph) == plain_graph
    assert torch.equal(torch.jit.script(model)(x), out)  # and after stop


def test_torch_compile_keeps_its_graphs_and_output():
    out = run_python("""
        import torch, torch.nn as nn, torch.nn.functional as F, torchwrapper as tw
        class M(nn.Module):
            def __init__(s):
                super().__init__(); s.a = nn.Linear(8, 16); s.b = nn.Linear(16, 4)
            def forward(s, x):
                return torch.add(s.b(F.relu(s.a(x))), x.sum() * 2)
        torch.manual_seed(0); m = M(); x = torch.randn(3, 8)
        plain = torch._dynamo.explain(m)(x)
        torch._dynamo.reset()
        with tw.profile() as prof:
            wrapped = torch._dynamo.explain(m)(x)
            compiled = torch.compile(m, backend="eager")
            out = compiled(x)
        print(plain.graph_count, plain.graph_break_count, wrapped.graph_count, wrapped.graph_break_count,
              torch.equal(out, m(x)))
    """)
    assert out.split() == ["1", "0", "1", "0", "True"]


def test_torch_compile_imported_while_profiling():
    # torch._dynamo imported for the first time inside the profiled code sees wrappers in the
    # modules it imports from; its config module checks their types.
    out = run_python("""
        import sys, torch, torchwrapper as tw
        assert "torch._dynamo" not in sys.modules
        f = lambda x: torch.relu(x) + 1
        with tw.profile():
            out = torch.compile(f, backend="eager")(torch.ones(3))
        import torch._dynamo.config as config
        leftovers = [k for k, v in vars(sys.modules["torch._dynamo.config"]).items()
                     if isinstance(v, (tw.Wrapper, tw.MethodWrapper))]
        print(out.tolist(), leftovers)
    """)
    assert out.strip() == "[2.0, 2.0, 2.0] []"


def test_dataloader_with_workers_under_profiling():
    dataset = torch.utils.data.TensorDataset(torch.arange(64.0).reshape(32, 2))
    with tw.profile() as prof:
        loader = torch.utils.data.DataLoader(dataset, batch_size=4, num_workers=2)
        total = sum(batch[0].sum().item() for batch in loader)
    assert total == torch.arange(64.0).sum().item()
    assert any(r.api == "torch.utils.data.DataLoader.__iter__" for r in prof.records())


def test_sixteen_threads_run_torch_ops_at_once():
    errors = []
    barrier = threading.Barrier(16)

    def work(seed):
        try:
            g = torch.Generator().manual_seed(seed)
            barrier.wait()
            a = torch.randn(8, 8, generator=g)
            for _ in range(200):
                a = torch.tanh(a @ a.T + 1)
            results[seed] = a
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    results = {}
    with tw.profile() as prof:
        threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors
    expected = {}
    for seed in range(16):
        g = torch.Generator().manual_seed(seed)
        a = torch.randn(8, 8, generator=g)
        for _ in range(200):
            a = torch.tanh(a @ a.T + 1)
        expected[seed] = a
    assert all(torch.equal(results[s], expected[s]) for s in range(16))
    records = prof.records()
    assert len({r.tid for r in records}) == 16
    per_thread = {}
    for r in records:
        if r.api == "torch.tanh":
            per_thread[r.tid] = per_thread.get(r.tid, 0) + 1
    assert sorted(per_thread.values()) == [200] * 16


def live_wrappers():
    """The wrapper objects alive now (after a full collection, so that wrappers other tests left in
    garbage cycles are not counted)."""
    gc.collect()
    return [o for o in gc.get_objects() if type(o) in (tw.Wrapper, tw.MethodWrapper)]


def test_start_stop_a_hundred_times_leaves_nothing_behind():
    """A hundred starts and stops: torch as it was after each, and no wrapper made after the first.
    Wrappers hold no session state and are made once per process, then installed again by every
    start (a function torch.compile compiled keeps its guards valid: test_compile.py)."""
    x = torch.ones(4)
    original_add = torch.add
    with tw.profile():
        torch.add(x, x)
        first_add = torch.add
    # Holding the wrappers alive now (other tests' included) keeps their ids unique, so "created
    # after this and still alive" is exactly "an id not in before".
    before = {id(o): o for o in live_wrappers()}
    assert len(before) > 1000
    for i in range(100):
        with tw.profile() as prof:
            torch.add(x, x)
            assert torch.add is first_add  # the same wrapper object, start after start
        assert torch.add is original_add
        assert [r.api for r in prof.records()] == ["torch.add"]
        del prof
    assert [o for o in live_wrappers() if id(o) not in before] == []


SNAPSHOT = """
    import sys, types, torch
    def snapshot():
        seen, out = set(), {}
        for name, module in list(sys.modules.items()):
            if type(module) is not types.ModuleType or not (name == "torch" or name.startswith("torch.")):
                continue
            for attr, value in list(vars(module).items()):
                out[(name, attr)] = id(value)
                if isinstance(value, type) and id(value) not in seen:
                    seen.add(id(value))
                    for k, v in list(vars(value).items()):
                        out[(value.__module__ + "." + value.__qualname__, k)] = id(v)
        return out
"""


NAMESPACE_RUN = SNAPSHOT + """
    import torchwrapper as tw
    # torch initialises a few things lazily on the first optimizer step: let that happen first
    warm = torch.nn.Linear(3, 1)
    torch.optim.SGD(warm.parameters(), lr=0.1).step()
    original_step = torch.optim.Adagrad.__dict__["step"]
    assert not getattr(original_step, "hooked", False)
    before = snapshot()
    prof = tw.profile() if PROFILED else None
    if prof:
        prof.start()
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.Adagrad(model.parameters())   # first construction: torch hooks Adagrad.step
    model(torch.ones(2, 3)).sum().backward()
    opt.step()
    if prof:
        prof.stop()
    after = snapshot()
    changed = sorted(k for k in before if after.get(k) != before[k])
    hooked = torch.optim.Adagrad.__dict__["step"]
    cells = [c.cell_contents for c in hooked.__closure__ if not isinstance(c.cell_contents, type)]
    print(changed)
    print(hooked.hooked, hooked.__wrapped__ is original_step, original_step in cells)
    names = set(r.api for r in prof.records()) if prof else set()
    print(sorted(names & {"torch.optim.Adagrad.step", "torch.nn.Linear.forward"}))
"""


def test_namespaces_after_stop_are_as_without_profiling_even_when_torch_patched_itself():
    plain = run_python(NAMESPACE_RUN.replace("PROFILED", "False")).strip().splitlines()
    profiled = run_python(NAMESPACE_RUN.replace("PROFILED", "True")).strip().splitlines()
    # Every attribute of every torch module and class is the identical object, except what torch
    # changed itself, as it does without the profiler (Adagrad.step, hooked on first construction).
    assert profiled[0] == plain[0]
    assert "('torch.optim.adagrad.Adagrad', 'step')" in plain[0]
    # The hook torch installed around our wrapper now calls the original, as without us.
    assert profiled[1] == plain[1] == "True True True"
    assert profiled[2] == "['torch.nn.Linear.forward', 'torch.optim.Adagrad.step']"
