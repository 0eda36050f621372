# SPDX-License-Identifier: MIT
"""Argument summaries: what they say, and that they never keep a tensor alive nor call user code."""
import gc
import weakref

import pytest
import torch
import torch.nn.functional as F

import torchwrapper as tw


def profiled_args(body, args="summary", **kwargs):
    with tw.profile(args=args, **kwargs) as prof:
        body()
    return [(r.api, r.args) for r in prof.records()]


def test_summaries_describe_tensors_numbers_and_containers():
    a = torch.ones(2, 3)
    b = torch.zeros(4, dtype=torch.int64)
    rows = profiled_args(lambda: (torch.add(a, a, alpha=2), F.softmax(a, dim=1), torch.cat([a, a], 0),
                                  b.sum(dtype=torch.float64), torch.randn(1, 3), a.view(-1), torch.tensor("x" * 40 == "")))
    assert ("torch.add", "((f32[2,3]@cpu, f32[2,3]@cpu), {'alpha': 2})") in rows
    assert ("torch.nn.functional.softmax", "((f32[2,3]@cpu,), {'dim': 1})") in rows
    assert ("torch.cat", "(([f32[2,3]@cpu, f32[2,3]@cpu], 0), {})") in rows
    assert ("torch.Tensor.sum", "((i64[4],), {'dtype': f64})".replace("[4]", "[4]@cpu")) in rows
    assert ("torch.randn", "((1, 3), {})") in rows
    assert ("torch.Tensor.view", "((f32[2,3]@cpu, -1), {})") in rows
    assert ("torch.tensor", "((False,), {})") in rows


class Secret:
    def __repr__(self):
        raise AssertionError("a user __repr__ was called")


def test_summary_never_calls_a_user_repr_and_repr_mode_is_bounded():
    rows = profiled_args(lambda: torch.is_tensor(Secret()), include=["torch.is_tensor"])
    assert rows == [("torch.is_tensor", "((Secret,), {})")]
    values = list(range(2000))
    rows = profiled_args(lambda: torch.tensor(values), args="repr")
    (text,) = [args for api, args in rows if api == "torch.tensor"]
    assert text.startswith("(([0, 1, 2, 3,") and text.endswith("...") and len(text.encode()) <= 512


def test_a_wrapper_given_as_an_argument_is_named_as_what_it_stands_for():
    # torch.add is the profiler's wrapper while profiling: its summary reads as without the profiler
    rows = profiled_args(lambda: torch.is_tensor(torch.add), include=["torch.is_tensor", "torch.add"])
    assert type(torch.add).__name__ == "builtin_function_or_method"  # put back after the session
    assert rows == [("torch.is_tensor", "((builtin_function_or_method,), {})")]


def test_no_tensor_is_kept_alive_by_a_record(tmp_path):
    refs = []

    def body():
        for _ in range(50):
            t = torch.ones(1000)
            refs.append(weakref.ref(t))
            torch.add(t, t)

    with tw.profile(args="summary", out_dir=str(tmp_path)):
        body()
        gc.collect()
        assert all(r() is None for r in refs)  # while profiling, too
    assert all(r() is None for r in refs)


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_text_with_commas_quotes_newlines_and_unicode_reads_back_identical(tmp_path, fmt):
    equations = ["a,b", 'say "hi"', "line\nbreak", "ünï名", " padded "]
    x = torch.ones(1)
    with tw.profile(args="summary", out_dir=str(tmp_path), format=fmt) as prof:
        for eq in equations:
            try:
                torch.einsum(eq, x)
            except RuntimeError:
                pass  # not valid equations: recorded all the same, as errors
    got = [(r.args, r.error) for r in prof.records() if r.api == "torch.einsum"]
    assert got == [(f"(('{eq}', f32[1]@cpu), {{}})", True) for eq in equations]


def test_bad_args_mode_is_refused():
    with pytest.raises(ValueError, match="config key 'args': \"all\" is not accepted: give one of: summary none repr"):
        tw.profile(args="all")


SUMMARY_PROGRAM = """
import json, sys, torch, torchwrapper as tw
import torchwrapper._profile as profile_module
if sys.argv[1] == "python":   # no libtorch layer: the summaries come from torch's Python getters
    profile_module._torch_layer = lambda: (None, None)

class Sub(torch.Tensor):
    pass

class Shaped(torch.Tensor):   # a subclass that overrides a getter: read through it
    @property
    def shape(self):
        return torch.Size([7, 7])

tensors = [torch.ones(2, 3), torch.zeros(()), torch.empty(0, 5), torch.ones(1, 2, 3, 4, 5, 6, dtype=torch.float16),
           torch.zeros(3, dtype=torch.bfloat16), torch.arange(4), torch.ones(2, dtype=torch.int32),
           torch.ones(2, dtype=torch.int16), torch.ones(2, dtype=torch.int8), torch.ones(2, dtype=torch.uint8),
           torch.ones(2, dtype=torch.bool), torch.ones(2, dtype=torch.complex64), torch.ones(2, dtype=torch.complex128),
           torch.ones(2, dtype=torch.float64), torch.ones(2, dtype=torch.uint16), torch.ones(8, 8).t(),
           torch.ones(4, 4)[::2], torch.nn.Parameter(torch.ones(3)), torch.ones(2).as_subclass(Sub),
           torch.ones(2).as_subclass(Shaped), torch.ones(2, device="meta"), torch.nested.nested_tensor([torch.ones(2)]),
           torch.empty(123456, 0, 10, 99, 100, 1000), torch.empty(999, 9999, 10000, 1001, device="meta"),
           torch.empty(*[1] * 12, device="meta"),
           torch.empty(2 ** 62, dtype=torch.bool, device="meta"), torch.ones(3, 4)[:, 1], torch.ones(2, requires_grad=True) * 2]
small = torch.ones(2, 3)
containers = [[small, [small, (small, torch.ones(1, dtype=torch.float64))]], (small,), [[small] * 9],
              {"a": small}]
with tw.profile(args="summary", include=["torch.is_tensor"]) as prof:
    for t in tensors + containers:
        torch.is_tensor(t)
    for args, kwargs in (((), {"obj": small}), ([torch.empty(100000, 100000, 0, 100000, 100000)] * 16, {})):  # the last past 512 bytes
        try:
            torch.is_tensor(*args, **kwargs)
        except TypeError:
            pass   # recorded all the same, as an error
print(json.dumps([r.args for r in prof.records()]))
"""


def test_tensor_summaries_read_by_the_libtorch_layer_equal_torch_s_getters():
    """The layer reads dtype, sizes and device from the tensor itself (no Python object per call);
    what it writes is what the Python getters give, for every dtype, odd shapes, views, Parameters,
    subclasses (one overriding a getter), the meta device and nested tensors (left to Python)."""
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))

    def summaries(mode):
        done = subprocess.run([sys.executable, "-c", SUMMARY_PROGRAM, mode], capture_output=True, text=True, env=env,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.splitlines()[-1])

    layer, python = summaries("layer"), summaries("python")
    cut_layer, cut_python = layer.pop(), python.pop()
    assert layer == python
    assert layer[:4] == ["((f32[2,3]@cpu,), {})", "((f32[]@cpu,), {})", "((f32[0,5]@cpu,), {})",
                         "((f16[1,2,3,4,5,6]@cpu,), {})"]
    assert "((f32[7,7]@cpu,), {})" in layer and "((f32[2]@meta,), {})" in layer
    assert "((f32[999,9999,10000,1001]@meta,), {})" in layer  # each way the layer writes a size, at its bounds
    assert "((f32[123456,0,10,99,100,1000]@cpu,), {})" in layer and "((bool[4611686018427387904]@meta,), {})" in layer
    assert "(([f32[2,3]@cpu, [f32[2,3]@cpu, tuple]],), {})" in layer  # two levels of containers, then a type name
    assert "(((f32[2,3]@cpu,),), {})" in layer and "(({'a': 1},), {})".replace("{'a': 1}", "dict") in layer
    assert "(([[f32[2,3]@cpu, f32[2,3]@cpu, f32[2,3]@cpu, f32[2,3]@cpu, f32[2,3]@cpu, f32[2,3]@cpu, f32[2,3]@cpu, "\
           "f32[2,3]@cpu, ... 9 items]],), {})" in layer   # past 8 items, the length (a list that grows shows)
    assert "((), {'obj': f32[2,3]@cpu})" in layer
    # A text longer than 512 bytes is cut there and marked "...": what is kept is the whole text's
    # beginning (the layer cuts inside a tensor's text, the Python path before a number it cannot
    # write whole: both were so before the layer wrote straight into the text).
    whole = "((" + ", ".join(["f32[100000,100000,0,100000,100000]@cpu"] * 16) + "), {})"
    for cut in (cut_layer, cut_python):
        assert cut.endswith("...") and len(cut) <= 512 and whole.startswith(cut[:-3]) and len(cut) > 400
