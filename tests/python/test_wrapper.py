# SPDX-License-Identifier: MIT
"""The C wrapper type: timing, exceptions, binding, nesting, threads, attributes, pickling."""
import copy
import gc
import inspect
import pickle
import sys
import threading
import time
import weakref

import pytest
import torch
import torch.nn.functional as F

import torchwrapper as tw
from torchwrapper import _core

from conftest import stop_and_read


def test_sleep_is_timed_plausibly(session):
    sleep = tw.wrap(time.sleep, "time.sleep")
    outer = []   # each call's interval as the test itself sees it, around the wrapper
    for _ in range(3):
        before = time.time_ns()
        t0 = time.perf_counter_ns()
        sleep(0.01)
        outer.append((before, time.perf_counter_ns() - t0, time.time_ns()))
    records = stop_and_read(session)
    assert [r.api for r in records] == ["time.sleep"] * 3
    for r, (before, elapsed, after) in zip(records, outer):
        # a sleep is never shorter than asked; the record never longer than the call around it
        # (a loaded machine stretches both alike: no fixed upper bound)
        assert 10_000_000 <= r.cost_ns <= elapsed + 100_000, (r, elapsed)
        assert r.self_ns == r.cost_ns
        # start timestamps are epoch ns, inside the call as time.time_ns() saw it (1 ms for the
        # two clocks' calibration)
        assert before - 1_000_000 <= r.start_ns <= after + 1_000_000, (r, before, after)
    assert records[1].start_ns - records[0].start_ns >= 10_000_000
    assert records[2].start_ns > records[1].start_ns


def test_exceptions_pass_through_unchanged_and_mark_the_record(session):
    add = tw.wrap(torch.add, "torch.add")
    a = torch.ones(2)
    with pytest.raises(TypeError) as wrapped_error:
        add(a, "x")
    with pytest.raises(TypeError) as plain_error:
        torch.add(a, "x")
    assert str(wrapped_error.value) == str(plain_error.value)

    def fails():
        raise KeyError("missing")

    w = tw.wrap(fails, "fails")
    with pytest.raises(KeyError) as e:
        w()
    assert e.value.args == ("missing",)
    assert torch.equal(add(a, a), a + a)
    records = stop_and_read(session)
    assert [(r.api, r.error) for r in records] == [("torch.add", True), ("fails", True), ("torch.add", False)]


def test_builtins_without_a_vectorcall_entry_get_their_arguments_as_passed(session):
    # torch.add, torch.full, torch.clamp are METH_VARARGS builtins: a recording wrapper calls them through
    # tp_call itself (_PyObject_MakeTpCall), positional and keyword arguments rebuilt from the vector
    add, full, clamp = (tw.wrap(f, f"torch.{f.__name__}") for f in (torch.add, torch.full, torch.clamp))
    a, b = torch.arange(4.0), torch.ones(4)
    assert torch.equal(add(a, b, alpha=2), torch.add(a, b, alpha=2))
    assert torch.equal(add(a, other=b), a + b)
    x = full((2, 3), 7.0, dtype=torch.float64)
    assert x.dtype == torch.float64 and x.shape == (2, 3) and x[1, 2].item() == 7.0
    assert torch.equal(clamp(a, min=1.0, max=2.0), torch.tensor([1.0, 1.0, 2.0, 2.0]))
    with pytest.raises(TypeError) as wrapped_error:
        add(a, b, alpah=2)
    with pytest.raises(TypeError) as plain_error:
        torch.add(a, b, alpah=2)
    assert str(wrapped_error.value) == str(plain_error.value)
    records = stop_and_read(session)
    assert [(r.api, r.error) for r in records] == [("torch.add", False), ("torch.add", False), ("torch.full", False),
                                                   ("torch.clamp", False), ("torch.add", True)]


def test_wrapping_a_non_callable_names_its_type():
    with pytest.raises(TypeError, match="cannot wrap a 'int' object: it is not callable"):
        tw.wrap(3, "three")
    with pytest.raises(TypeError, match="api_name must be a str, not 'bytes'"):
        tw.wrap(len, b"len")
    with pytest.raises(ValueError, match="invalid api_name ''"):
        tw.wrap(len, "")
    with pytest.raises(TypeError, match="unexpected keyword argument 'bnd'"):
        tw.wrap(len, "len", bnd=True)
    with pytest.raises(TypeError, match="use torchwrapper._core.wrap"):
        tw.Wrapper()


class Widget:
    scale = 3

    def method(self, x):
        return x * self.scale

    @staticmethod
    def static(x):
        return x + 1

    @classmethod
    def klass(cls, x):
        return (cls.__name__, x)


class SubWidget(Widget):
    scale = 5


def test_calls_through_instances_classes_staticmethods_and_classmethods(session):
    patcher = tw.Patcher()
    for attr in ("method", "static", "klass"):
        patcher.install(Widget, attr, f"Widget.{attr}")
    try:
        assert isinstance(Widget.__dict__["static"], staticmethod)
        assert isinstance(Widget.__dict__["klass"], classmethod)
        w, s = Widget(), SubWidget()
        assert w.method(2) == 6
        assert s.method(2) == 10
        assert Widget.method(s, 2) == 10
        assert Widget.static(1) == 2
        assert w.static(1) == 2
        assert Widget.klass(7) == ("Widget", 7)
        assert s.klass(7) == ("SubWidget", 7)
        bound = w.method
        assert bound(4) == 12
    finally:
        patcher.restore()
    records = stop_and_read(session)
    assert [r.api for r in records] == ["Widget.method"] * 3 + ["Widget.static"] * 2 + \
        ["Widget.klass"] * 2 + ["Widget.method"]
    assert Widget.__dict__["static"].__func__(1) == 2


def test_nested_calls_give_depth_parent_and_self_time_that_add_up(session):
    def leaf():
        time.sleep(0.002)

    w_leaf = tw.wrap(leaf, "leaf")

    def middle():
        w_leaf()
        w_leaf()
        time.sleep(0.001)

    w_middle = tw.wrap(middle, "middle")

    def top():
        w_middle()
        w_leaf()

    w_top = tw.wrap(top, "top")
    w_top()
    records = stop_and_read(session)
    by_id = {r.call_id: r for r in records}
    assert len(records) == 5
    root = next(r for r in records if r.api == "top")
    assert (root.depth, root.parent_id) == (0, 0)
    mid = next(r for r in records if r.api == "middle")
    assert (mid.depth, mid.parent_id) == (1, root.call_id)
    leaves = [r for r in records if r.api == "leaf"]
    assert sorted(by_id[r.parent_id].api for r in leaves) == ["middle", "middle", "top"]
    assert all(r.depth == (2 if by_id[r.parent_id].api == "middle" else 1) for r in leaves)
    # each call's self time is its cost minus its children's cost, and all self times sum to the root
    for r in records:
        children = sum(c.cost_ns for c in records if c.parent_id == r.call_id)
        assert abs(r.self_ns - (r.cost_ns - children)) <= 2, r
    assert abs(sum(r.self_ns for r in records) - root.cost_ns) <= 10
    # children lie inside their parent's interval
    for r in records:
        if r.parent_id:
            p = by_id[r.parent_id]
            assert p.start_ns <= r.start_ns and r.start_ns + r.cost_ns <= p.start_ns + p.cost_ns + 1


def test_eight_threads_record_every_call_exactly_once(session):
    numel = tw.wrap(torch.Tensor.numel, "torch.Tensor.numel")
    t = torch.ones(4)
    calls = 100_000
    barrier = threading.Barrier(8)

    def work():
        barrier.wait()
        for _ in range(calls):
            numel(t)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    session.stop()
    stats = session.stats()
    assert stats["records"] == 8 * calls
    assert stats["dropped"] == 0
    records = session.records()
    assert len(records) == 8 * calls
    assert len({r[0] for r in records}) == 8 * calls  # call ids unique
    assert {r[6] for r in records} == {th.native_id for th in threads}


def test_threads_switching_inside_nested_calls_keep_their_own_stacks(session):
    """The wrappers find the calling thread's state from the interpreter's current thread (no TLS
    lookup): with the GIL handed over every few microseconds, inside calls that nest, each record's
    parent is a call of its own thread, one level up."""
    numel = tw.wrap(torch.Tensor.numel, "torch.Tensor.numel")
    t = torch.ones(4)

    def outer():
        total = 0
        for _ in range(20):
            total += numel(t)
            total += sum(range(50))  # Python work between the calls: room for a switch
        return total

    w_outer = tw.wrap(outer, "outer")
    barrier = threading.Barrier(4)

    def work():
        barrier.wait()
        for _ in range(300):
            w_outer()

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work) for _ in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        sys.setswitchinterval(interval)
    records = stop_and_read(session)
    by_id = {r.call_id: r for r in records}
    assert len(records) == 4 * 300 * 21
    outers = [r for r in records if r.api == "outer"]
    inners = [r for r in records if r.api == "torch.Tensor.numel"]
    assert all((r.depth, r.parent_id) == (0, 0) for r in outers)
    for r in inners:
        parent = by_id[r.parent_id]
        assert (parent.api, parent.tid, r.depth) == ("outer", r.tid, 1), (r, parent)
    assert {r.tid for r in records} == {th.native_id for th in threads}
    assert len({r.tid for r in outers}) == 4


def test_method_descriptor_binds_without_a_bound_method(session):
    patcher = tw.Patcher()
    patcher.install(torch.Tensor, "view", "torch.Tensor.view")
    patcher.install(torch.Tensor, "__add__", "torch.Tensor.__add__")
    try:
        assert isinstance(torch.Tensor.__dict__["view"], tw.MethodWrapper)
        x = torch.arange(6.0)
        assert torch.equal(x.view(2, 3), x.reshape(2, 3))
        assert torch.equal(torch.Tensor.view(x, 3, 2), x.reshape(3, 2))
        y = x + x
        assert torch.equal(y, x * 2)
    finally:
        patcher.restore()
    records = stop_and_read(session)
    assert [r.api for r in records] == ["torch.Tensor.view", "torch.Tensor.view", "torch.Tensor.__add__"]
    assert "__add__" not in torch.Tensor.__dict__  # inherited from TensorBase: deleted again


def test_wrapper_reads_like_the_original():
    relu = tw.wrap(F.relu, "torch.nn.functional.relu")
    add = tw.wrap(torch.add, "torch.add")
    assert relu.__wrapped__ is F.relu
    assert (relu.__name__, relu.__qualname__, relu.__module__) == ("relu", "relu", "torch.nn.functional")
    assert relu.__doc__ == F.relu.__doc__
    assert add.__name__ == "add" and add.__doc__ == torch.add.__doc__
    assert inspect.signature(relu) == inspect.signature(F.relu)
    assert relu.api_name == "torch.nn.functional.relu"
    assert _core.api_name(relu.api_id) == "torch.nn.functional.relu"
    # unknown attributes read through to the original; our own stay ours
    F.relu.torchwrapper_probe = "through"
    try:
        assert relu.torchwrapper_probe == "through"
    finally:
        del F.relu.torchwrapper_probe
    relu.hooked = True
    assert relu.hooked is True and not hasattr(F.relu, "hooked")
    relu.__doc__ = "mine"
    assert relu.__doc__ == "mine" and F.relu.__doc__ != "mine"
    with pytest.raises(AttributeError):
        relu.no_such_attribute
    # weak references (torch._dynamo.allow_in_graph keeps them) and copies
    ref = weakref.ref(relu)
    assert ref() is relu
    assert copy.copy(relu) is relu and copy.deepcopy(relu) is relu
    assert "profiled" in repr(relu) and "relu" in repr(relu)
    help_text = pydoc_text(relu)
    assert "relu" in help_text


def pydoc_text(obj):
    import pydoc
    return pydoc.render_doc(obj, renderer=pydoc.plaintext)


def test_wrappers_are_freed():
    def f():
        return 1

    w = tw.wrap(f, "f")
    ref = weakref.ref(w)
    original = weakref.ref(f)
    del w, f
    gc.collect()
    assert ref() is None and original() is None


def test_pickling_gives_back_the_original():
    for original, name in [(F.relu, "torch.nn.functional.relu"), (torch.add, "torch.add"),
                           (torch.Tensor.view, "torch.Tensor.view")]:
        w = tw.wrap(original, name)
        for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1):
            assert pickle.loads(pickle.dumps(w, protocol=protocol)) is original


def test_an_installed_wrapper_pickles_to_the_originals_bytes():
    import torch.nn.functional as functional
    before = pickle.dumps(functional.relu)
    patcher = tw.Patcher()
    patcher.install(functional, "relu", "torch.nn.functional.relu")
    try:
        assert pickle.dumps(functional.relu) == before
        assert pickle.loads(before) is functional.relu  # the wrapper, while installed
    finally:
        patcher.restore()
    assert pickle.loads(before) is F.relu


def test_wrappers_pass_through_when_no_session_records():
    add = tw.wrap(torch.add, "torch.add")
    a = torch.ones(3)
    s = tw.Session()
    s.start()
    add(a, a)
    s.stop()
    assert torch.equal(add(a, a), a + a)  # after stop: a plain call
    assert len(s.records()) == 1
    s2 = tw.Session()
    s2.start()
    add(a, a)
    add(a, a)
    s2.stop()
    assert len(s2.records()) == 2 and len(s.records()) == 1


def test_stop_inside_a_profiled_call_is_safe():
    s = tw.Session()

    def stopper():
        s.stop()
        return 42

    w = tw.wrap(stopper, "stopper")
    s.start()
    assert w() == 42
    assert not s.active
    assert s.records() == []  # the call that ended the session is not recorded


def test_paused_threads_do_not_record(session):
    add = tw.wrap(torch.add, "torch.add")
    a = torch.ones(1)
    add(a, a)
    session.pause_thread()
    add(a, a)
    session.resume_thread()
    add(a, a)
    assert len(stop_and_read(session)) == 2


def test_one_session_at_a_time():
    s1, s2 = tw.Session(), tw.Session()
    s1.start()
    try:
        with pytest.raises(RuntimeError, match="already recording"):
            s2.start()
        assert _core.active_session() is s1
    finally:
        s1.stop()
    with pytest.raises(RuntimeError, match="already stopped"):
        s1.stop()
    with pytest.raises(RuntimeError, match="cannot be restarted"):
        s1.start()
    with pytest.raises(RuntimeError, match="call stop"):
        s2.records()
    assert _core.active_session() is None


def test_recursion_deeper_than_the_stack_is_counted(session):
    def down(n):
        return 0 if n == 0 else 1 + w(n - 1)

    w = tw.wrap(down, "down")
    depth = _core.MAX_DEPTH + 20
    import sys
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * depth))
    try:
        assert w(depth) == depth
    finally:
        sys.setrecursionlimit(limit)
    session.stop()
    stats = session.stats()
    assert stats["records"] == _core.MAX_DEPTH
    assert stats["dropped"] == depth + 1 - _core.MAX_DEPTH


def test_each_session_reports_its_own_hook_error(monkeypatch):
    """A failing model watch hook is reported once per session, not once per process: the second session's
    error is not silenced by the first's."""

    class FailingModelWatch:
        kinds = tw._core.KIND_BOUNDARY

        def boundary_enter(self, subject, api_id):
            raise RuntimeError("hook failed")

    reported = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: reported.append(u.exc_value))
    step = tw.wrap(lambda: 7, "step", kind=tw._core.KIND_BOUNDARY)
    for n in (1, 2):
        s = tw.Session(model_watch=FailingModelWatch())
        s.start()
        assert step() == 7 and step() == 7  # the hook's error never reaches the caller
        s.stop()
        assert len(reported) == n, reported  # once per session
        assert isinstance(reported[-1], RuntimeError) and "hook failed" in str(reported[-1])
