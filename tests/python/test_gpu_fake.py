# SPDX-License-Identifier: MIT
"""GPU timing without a GPU: the message when it is unavailable, and the wrappers' part of GPU
attribution (pushing each call's external correlation id) against the fake CUPTI that make check
builds (tests/c/fake_cupti.c), loaded through TW_CUPTI_LIBRARY as the real one would be."""
import csv
import ctypes
import json
import os
import subprocess
import sys
import textwrap
import threading

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import torchwrapper as tw

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE = os.environ.get("FAKE_CUPTI") or os.path.join(HERE, "..", "c", ".libs", "fake_cupti.so")
CUSTOM2 = 5  # CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2, the kind torchwrapper pushes
needs_fake = pytest.mark.skipif(not os.path.exists(FAKE), reason="the fake CUPTI is built by make check "
                                                                  "(a build with CUPTI headers)")
# On a GPU machine the real CUPTI may be loaded in this process first: tests/python/test_gpu.py is
# the test there.
cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="the fake CUPTI is for machines without a GPU")

TRAIN = """
import sys, torch, torchwrapper as tw
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(32, 8), torch.randn(32, 1)

def train(steps):
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    return loss.item()

out = sys.argv[1]
for i in range(3):
    with tw.profile(out_dir=out, format="csv") as prof:
        train(5)
    assert prof.stats()["gpu"] == "off", prof.stats()
with tw.profile() as prof:  # records in memory
    train(2)
print(tw.TorchWrapper({"out_dir": out}).start(train, 5))
print(prof.stats()["gpu_unavailable"])
"""


def run_program(tmp_path, program, env=None):
    (tmp_path / "prog.py").write_text(textwrap.dedent(program))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), TW_CUPTI_LIBRARY=FAKE) | (env or {})
    result = subprocess.run([sys.executable, "prog.py", str(tmp_path / "out")], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    return result


@cpu_only
def test_no_cuda_device_is_not_said_but_kept_in_stats_and_manifest_and_cpu_profiling_goes_on(tmp_path):
    # #26: "GPU timing unavailable" was the first line of every CPU-only run
    result = run_program(tmp_path, TRAIN)
    assert "GPU timing unavailable" not in result.stderr
    assert result.stdout.splitlines()[-1] == "no CUDA device (torch.cuda.is_available() is False)"
    names = os.listdir(tmp_path / "out")
    assert not [n for n in names if ".gpu." in n]
    with open(tmp_path / "out" / "manifest.json") as f:
        manifest = json.load(f)
    assert manifest["records_written"] > 0
    assert {entry["kind"] for entry in manifest["files"]} == {"calls"}
    assert manifest["gpu_unavailable"] == "no CUDA device (torch.cuda.is_available() is False)"
    assert manifest["config"]["gpu"] == "auto"


@cpu_only
def test_gpu_timing_unavailable_with_a_device_is_said_exactly_once(tmp_path):
    program = """
    import sys, torch, torchwrapper as tw
    for i in range(3):
        session = tw.Session(out_dir=sys.argv[1] + str(i), gpu="auto", gpu_device=True)
        session.start()
        torch.add(torch.ones(2), 1)
        session.stop()
        print(session.stats()["gpu"], session.stats()["gpu_unavailable"] is not None)
    """
    result = run_program(tmp_path, program, env={"TW_CUPTI_LIBRARY": str(tmp_path / "no-such-libcupti.so")})
    said = [line for line in result.stderr.splitlines() if "GPU timing unavailable" in line]
    assert len(said) == 1 and said[0].startswith("torchwrapper: GPU timing unavailable: ")
    assert said[0].endswith("; profiling CPU time only")
    assert result.stdout.splitlines() == ["off True"] * 3


@cpu_only
def test_gpu_off_says_nothing(tmp_path):
    result = run_program(tmp_path, TRAIN.replace('tw.profile(out_dir=out, format="csv")',
                                                 'tw.profile(out_dir=out, format="csv", gpu="off")')
                         .replace("tw.profile()", 'tw.profile(gpu="off")'),
                         env={"TORCHWRAPPER_GPU": "off"})
    assert "GPU timing" not in result.stderr


@cpu_only
def test_gpu_on_without_a_gpu_is_an_error_that_says_why(tmp_path):
    prof = tw.profile(out_dir=str(tmp_path), gpu="on")
    original = torch.add
    with pytest.raises(RuntimeError, match=r'gpu="on": GPU timing is unavailable: no CUDA device'):
        prof.start()
    assert torch.add is original  # nothing left installed
    assert tw._core.active_session() is None
    with pytest.raises(ValueError, match="config key 'gpu': \"yes\" is not accepted: give one of: auto on off"):
        tw.profile(gpu="yes")


# ---- the wrappers' part, against the fake ------------------------------------------------------


@pytest.fixture
def fake(monkeypatch):
    """The fake CUPTI, loaded by the profiler on its first GPU session in this process."""
    monkeypatch.setenv("TW_CUPTI_LIBRARY", os.path.abspath(FAKE))
    lib = ctypes.CDLL(os.path.abspath(FAKE))
    lib.fake_cupti_launch.restype = ctypes.c_uint32
    lib.fake_cupti_launch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64,
                                      ctypes.c_uint32, ctypes.c_uint32]
    lib.fake_cupti_now.restype = ctypes.c_uint64
    lib.fake_cupti_depth.restype = ctypes.c_uint
    lib.fake_cupti_set_busy.argtypes = [ctypes.c_int]
    lib.fake_cupti_reset()
    yield lib
    lib.fake_cupti_reset()


def gpu_session(out_dir, **options):
    """A session with GPU timing on, as if torch had found a device."""
    return tw.Session(out_dir=str(out_dir), format="csv", gpu="on", gpu_device=True, **options)


def read_csv(out_dir, kind):
    with open(os.path.join(out_dir, "manifest.json")) as f:
        manifest = json.load(f)
    rows = []
    for entry in manifest["files"]:
        if entry["kind"] == kind:
            with open(os.path.join(out_dir, entry["name"]), newline="") as f:
                rows.extend(csv.DictReader(f))
    return rows


@cpu_only
@needs_fake
def test_kernels_are_attributed_to_the_innermost_wrapped_call(fake, tmp_path):
    def kernel(name, duration):
        t = fake.fake_cupti_now()
        return fake.fake_cupti_launch(0, name.encode(), 0, t, t + duration, 0, 7)

    def inner():
        return kernel("inner_kernel", 1000)

    def outer():
        before = kernel("outer_before", 10)
        nested = inner_w()
        return before, nested, kernel("outer_after", 20)

    def failing():
        kernel("failing_kernel", 5)
        raise KeyError("boom")

    inner_w, outer_w, failing_w = tw.wrap(inner, "my.inner"), tw.wrap(outer, "my.outer"), tw.wrap(failing, "my.fail")
    session = gpu_session(tmp_path)
    session.start()
    correlations = [outer_w() for _ in range(3)]
    with pytest.raises(KeyError):
        failing_w()
    assert fake.fake_cupti_depth(CUSTOM2) == 0  # every push popped, the exception's too
    session.stop()
    stats = session.stats()
    assert stats["gpu"] == "on" and stats["gpu_kernels"] == 10 and stats["gpu_unattributed"] == 0
    calls = {int(r["call_id"]): r for r in read_csv(tmp_path, "calls")}
    gpu = {int(r["correlation_id"]): r for r in read_csv(tmp_path, "gpu")}
    for before, nested, after in correlations:
        outer_call = int(gpu[before]["call_id"])
        assert calls[outer_call]["api"] == "my.outer"
        assert int(gpu[after]["call_id"]) == outer_call
        inner_call = int(gpu[nested]["call_id"])
        assert calls[inner_call]["api"] == "my.inner" and int(calls[inner_call]["parent_id"]) == outer_call
        assert gpu[nested]["api"] == "my.inner" and gpu[nested]["name"] == "inner_kernel"
        # the kernel ran while its call ran (CUPTI's clock calibrated against ours)
        start = int(calls[inner_call]["start_ns"])
        assert start <= int(gpu[nested]["start_ns"]) <= start + int(calls[inner_call]["cost_ns"])
    failed = [r for r in gpu.values() if r["name"] == "failing_kernel"]
    assert len(failed) == 1 and calls[int(failed[0]["call_id"])]["error"] == "1"
    with open(tmp_path / "summary.json") as f:
        summary = {a["api"]: a for a in json.load(f)["apis"]}
    assert summary["my.outer"]["gpu_ns"] == 3 * 30  # exclusive: inner's kernels are inner's
    assert summary["my.inner"]["gpu_ns"] == 3 * 1000
    # the readers join the GPU files to the calls
    frame = tw.load(str(tmp_path))
    by_api = frame.groupby(frame["api"].astype(str))["gpu_ns"]
    assert by_api.sum()["my.outer"] == 90 and by_api.sum()["my.inner"] == 3000
    assert (by_api.min()["my.inner"], by_api.max()["my.inner"]) == (1000, 1000)


@cpu_only
@needs_fake
def test_threads_push_their_own_calls(fake, tmp_path):
    def launch(tag):
        t = fake.fake_cupti_now()
        return fake.fake_cupti_launch(0, tag.encode(), 0, t, t + 1, 0, 0)

    wrappers = {tag: tw.wrap(launch, f"my.launch_{tag}") for tag in ("a", "b", "c")}
    results = {tag: [] for tag in wrappers}

    def work(tag):
        for _ in range(200):
            results[tag].append(wrappers[tag](tag))

    session = gpu_session(tmp_path)
    session.start()
    threads = [threading.Thread(target=work, args=(tag,)) for tag in wrappers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    session.stop()
    gpu = {int(r["correlation_id"]): r for r in read_csv(tmp_path, "gpu")}
    assert len(gpu) == 600
    for tag, correlations in results.items():
        assert {gpu[c]["api"] for c in correlations} == {f"my.launch_{tag}"}
        assert {gpu[c]["name"] for c in correlations} == {tag}


@cpu_only
@needs_fake
def test_a_forked_child_pushes_nothing(fake, tmp_path):
    depth_inside = tw.wrap(lambda: fake.fake_cupti_depth(CUSTOM2), "my.depth")
    session = gpu_session(tmp_path)
    session.start()
    assert depth_inside() == 1  # this call's id is pushed while it runs
    pid = os.fork()
    if pid == 0:
        os._exit(0 if depth_inside() == 0 else 1)  # no CUPTI call in a forked child
    _, status = os.waitpid(pid, 0)
    session.stop()
    assert os.waitstatus_to_exitcode(status) == 0


@cpu_only
@needs_fake
def test_another_cupti_subscriber_is_named(fake, tmp_path):
    fake.fake_cupti_set_busy(1)
    session = gpu_session(tmp_path)
    with pytest.raises(RuntimeError, match="another CUPTI client holds CUPTI"):
        session.start()
    fake.fake_cupti_set_busy(0)
    session = tw.Session(out_dir=str(tmp_path / "again"), gpu="auto", gpu_device=True)
    session.start()  # CUPTI free again: GPU timing on
    session.stop()
    assert session.stats()["gpu"] == "on"


@cpu_only
@needs_fake
def test_kernels_of_backward_nodes_are_charged_to_the_node_and_through_it_to_the_forward_call(fake, tmp_path):
    """On a GPU, backward's kernels are launched by autograd's nodes, on threads where no profiled call
    runs: each node pushes its own id, so they are charged to the node, whose record names the forward
    call that made it. What the engine does right after a node (accumulating and casting its
    gradients) is charged to that node too: its id stays pushed until the next node or profiled call."""
    from torchwrapper._profile import _torch_layer

    layer = _torch_layer()
    if layer[0] is None:
        pytest.skip("the libtorch layer was not built")

    def kernel(name):
        t = fake.fake_cupti_now()
        return fake.fake_cupti_launch(0, name.encode(), 0, t, t + 100, 0, 7)

    class Launch(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            kernel("node_kernel")
            return grad * 2

    forward = tw.wrap(lambda x: Launch.apply(x), "my.forward")
    after = tw.wrap(lambda: kernel("after_kernel"), "my.after")
    session = tw.Session(out_dir=str(tmp_path), format="csv", gpu="on", gpu_device=True, aten="backward",
                         torch_layer=layer)
    session.start()
    assert session.stats()["backward"] == "on", session.stats()
    x = torch.ones(3, requires_grad=True)
    for _ in range(3):
        forward(x).sum().backward()  # not a profiled call: the nodes run on this thread, after it
        after()
    assert fake.fake_cupti_depth(CUSTOM2) == 0  # the last node's id was popped when my.after ended
    pid = os.fork()
    if pid == 0:  # a forked child's nodes push nothing (no CUPTI call after fork)
        forward(x).sum().backward()
        os._exit(0 if fake.fake_cupti_depth(CUSTOM2) == 0 else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    session.stop()
    calls = {int(r["call_id"]): r for r in read_csv(tmp_path, "calls") if int(r["pid"]) == os.getpid()}
    gpu = read_csv(tmp_path, "gpu")
    assert session.stats()["gpu_unattributed"] == 0
    charged = [calls[int(r["call_id"])] for r in gpu if r["name"] == "node_kernel"]
    assert len(charged) == 3 and {c["api"] for c in charged} == {"LaunchBackward"}
    assert {calls[int(c["fwd_call_id"])]["api"] for c in charged} == {"my.forward"}
    assert {calls[int(r["call_id"])]["api"] for r in gpu if r["name"] == "after_kernel"} == {"my.after"}


@cpu_only
@needs_fake
def test_kernel_names_are_demangled_as_torch_profiler_shows_them(fake, tmp_path):
    """CUPTI names kernels by their mangled C++ symbols. In a torch process libstdc++ is loaded local
    to torch's extension modules, out of dlsym(RTLD_DEFAULT)'s sight: on an H200 every name stayed
    mangled until the demangler was looked up by soname too."""
    launch = tw.wrap(lambda name: fake.fake_cupti_launch(0, name, 0, fake.fake_cupti_now(), fake.fake_cupti_now() + 5,
                                                         0, 7), "my.launch")
    names = [b"_ZN2at6native18elementwise_kernelILi128ELi2EEEvi", b"_Z11scal_kernelIfEvPf", b"plain_kernel",
             b"_Znot_a_valid_name"]
    session = gpu_session(tmp_path)
    session.start()
    for _ in range(3):  # the second and third time from the demangler's cache
        for name in names:
            launch(name)
    session.stop()
    seen = [r["name"] for r in read_csv(tmp_path, "gpu")]
    assert seen == ["void at::native::elementwise_kernel<128, 2>(int)", "void scal_kernel<float>(float*)",
                    "plain_kernel", "_Znot_a_valid_name"] * 3


class _Kernels(TorchDispatchMode):
    """A GPU's kernels on the CPU: each aten operator launches one fake kernel (its length from the
    operator's name), from inside the profiled call or the autograd node that runs it, as CUDA's
    operators launch theirs."""

    def __init__(self, fake):
        super().__init__()
        self.fake = fake

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        t, name = self.fake.fake_cupti_now(), str(func)
        self.fake.fake_cupti_launch(0, name.encode(), 0, t, t + 100 + 7 * len(name), 0, 7)
        return func(*args, **(kwargs or {}))


def _subtree_gpu(frame):
    """Each call's GPU time with that of the calls inside it, from load()'s records (their own)."""
    children = {}
    for pid, call, parent in zip(frame["pid"], frame["call_id"], frame["parent_id"]):
        children.setdefault((pid, parent), []).append(call)
    own = dict(zip(zip(frame["pid"], frame["call_id"]), frame["gpu_ns"]))

    def total(pid, call):
        return own[(pid, call)] + sum(total(pid, child) for child in children.get((pid, call), ()))
    return {key: total(*key) for key in own}


@cpu_only
@needs_fake
def test_flops_table_times_are_gpu_time_per_api_module_and_step(fake, tmp_path, monkeypatch):
    """On a GPU, flops_table's time is the GPU time of what each group ran: an API's calls and the
    autograd nodes charged to them, a module's forward calls with the calls inside them, every call
    and node of a step (tw-report joins each GPU record to its call). Each is computed here again
    from load()'s records, whose gpu_ns is the work each call launched itself."""
    import torchwrapper._profile as profile_module

    if profile_module._torch_layer()[0] is None:
        pytest.skip("the libtorch layer was not built")
    monkeypatch.setattr(profile_module, "_cuda_available", lambda: True)   # as if torch had found a GPU
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 8), torch.randn(32, 4)
    out = str(tmp_path / "run")
    with tw.profile(out_dir=out, format="csv", gpu="on", aten="backward", peak_flops=1e12) as prof:
        with _Kernels(fake):
            for _ in range(3):
                opt.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                opt.step()
    stats = prof.stats()
    assert stats["gpu"] == "on" and stats["backward"] == "on" and stats["gpu_unattributed"] == 0
    frame = tw.load(out)
    api = frame["api"].astype(str)
    node = frame["fwd_call_id"] != 0
    assert frame["gpu_ns"][node].sum() > 0 and frame["gpu_ns"][~node].sum() > 0
    # by API: the forward calls' GPU time and that of the nodes charged to them
    expected_api = frame["gpu_ns"][~node].groupby(api[~node]).sum().add(
        frame["gpu_ns"][node].groupby(frame["fwd_api"][node]).sum(), fill_value=0)
    # by module: each forward call's GPU time with the calls' inside it
    inside = _subtree_gpu(frame)
    forward = ~node & frame["module"].notna() & api.str.endswith(".forward")
    expected_module = pandas_series({module: 0 for module in frame["module"][forward]})
    for module, pid, call in zip(frame["module"][forward], frame["pid"][forward], frame["call_id"][forward]):
        expected_module[module] += inside[(pid, call)]
    # by step: every call's and node's
    expected_step = frame["gpu_ns"].groupby(frame["step"]).sum()
    for source in (frame, out):   # a frame goes to tw-report as a record file with gpu_ns; the out_dir as it is
        for by, expected in (("api", expected_api), ("module", expected_module), ("step", expected_step)):
            table = tw.flops_table(source, by=by)
            assert len(table) > 0 and (table["time_ns"] > 0).all(), (by, table)
            assert {key: int(table.loc[key, "time_ns"]) for key in table.index} == \
                {key: int(expected[key]) for key in table.index}, by
            assert (table["mfu"] == table["total_flops"] / (table["time_ns"] / 1e9) / 1e12).all()
    assert set(tw.flops_table(out, by="module").index) == {"Sequential", "Sequential.0", "Sequential.2"}
    assert list(tw.flops_table(out, by="step").index) == [0, 1, 2]
    # tw-report on several threads reads the GPU files before the others, as on one
    report = os.path.join(HERE, "..", "..", "tw-report")
    if os.path.exists(report):
        for by in ("api", "step", "thread", "shape"):
            runs = [subprocess.run([report, "-j", jobs, "--by", by, "--format", "json", out], capture_output=True,
                                   text=True, check=True, env=dict(os.environ, TW_REPORT_RANGE_BYTES="512")).stdout
                    for jobs in ("1", "3")]
            assert runs[0] == runs[1], by


def pandas_series(values):
    import pandas

    return pandas.Series(values, dtype="int64")


@cpu_only
@needs_fake
def test_cupti_records_only_in_the_steps_a_schedule_records(fake, tmp_path):
    """GPU timing only when recorded (as Kineto does for torch.profiler's schedule): CUPTI's activities
    are enabled in warm-up and active steps, and in the step after the last active one (the GPU still
    runs what its end launched), disabled in the others; the kernels of active steps are written."""
    kernel_bit = 1 << 10   # CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL

    def launch(step):
        enabled = bool(fake.fake_cupti_enabled() & kernel_bit)
        t = fake.fake_cupti_now()
        fake.fake_cupti_launch(0, f"kernel_{step}".encode(), 0, t, t + 10, 0, 0)
        return enabled

    launch_w = tw.wrap(launch, "my.launch")
    fake.fake_cupti_enabled.restype = ctypes.c_uint64
    # steps 0-1 skipped, 2-3 waiting, 4 warm-up, 5-6 active; again 7-8 waiting, 9 warm-up, 10-11 active; then none
    session = gpu_session(tmp_path, schedule={"skip_first": 2, "wait": 2, "warmup": 1, "active": 2, "repeat": 2})
    session.start()
    enabled = []
    for step in range(15):
        enabled.append(launch_w(step))
        session.step()
    session.stop()
    assert enabled == [False, False, False, False, True, True, True, True, False, True, True, True, True,
                       False, False]
    assert fake.fake_cupti_enabled() == 0   # and all off once stopped
    stats = session.stats()
    assert stats["gpu_pauses"] == 3   # at start (step 0), after step 7 and after step 12
    kernels = sorted(r["name"] for r in read_csv(tmp_path, "gpu"))
    assert kernels == ["kernel_10", "kernel_11", "kernel_5", "kernel_6"]   # the active steps'
    assert sorted(int(r["step"]) for r in read_csv(tmp_path, "calls")) == [5, 6, 10, 11]


@cpu_only
@needs_fake
def test_cupti_records_every_step_without_a_schedule(fake, tmp_path):
    launch_w = tw.wrap(lambda: bool(fake.fake_cupti_enabled() & (1 << 10)), "my.enabled")
    session = gpu_session(tmp_path)
    session.start()
    enabled = []
    for _ in range(4):
        enabled.append(launch_w())
        session.step()
    session.stop()
    assert enabled == [True] * 4 and session.stats()["gpu_pauses"] == 0
