# SPDX-License-Identifier: MIT
"""tw-report --trace DIR/ read by the real Holistic Trace Analysis package (HTA,
holistictraceanalysis): a 2-rank gloo torchrun training run on the CPU, each rank's file loaded by
TraceAnalysis(trace_dir=...) without a word about a missing rank or missing steps, its CPU-side
analyses run; and GPU work from the fake CUPTI (tests/c/fake_cupti.c), whose temporal breakdown, idle
time breakdown and kernel launch statistics HTA computes from our trace as from torch.profiler's.

HTA runs in a child process (it forks a pool to parse several ranks): the child prints what the
analyses gave and every warning and log record, as JSON."""
import gzip
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("hta")

BUILD = os.environ.get("top_builddir", os.path.join(os.path.dirname(__file__), "..", ".."))
TW_REPORT = os.path.join(BUILD, "tw-report")
HERE = os.path.dirname(os.path.abspath(__file__))
FAKE = os.environ.get("FAKE_CUPTI") or os.path.join(HERE, "..", "c", ".libs", "fake_cupti.so")

TRAIN = """
import os, sys
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
import torchwrapper as tw

torch.set_num_threads(1)
dist.init_process_group("gloo")
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(16, 32)
with tw.profile(out_dir=sys.argv[1], format="csv"):   # its rank from $RANK, as torchrun sets it
    for step in range(6):
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
dist.destroy_process_group()
"""

# The analyses, in a child process: {"ranks", "steps", results..., "said": [warnings and log records]}.
ANALYSE = """
import json, logging, sys, warnings
said = []

class Keep(logging.Handler):
    def emit(self, record):
        said.append(record.getMessage())

logging.getLogger().addHandler(Keep())
logging.getLogger("hta").addHandler(Keep())
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    from hta.trace_analysis import TraceAnalysis
    analysis = TraceAnalysis(trace_dir=sys.argv[1])
    out = {"ranks": [int(r) for r in analysis.t.get_ranks()],
           "steps": [int(s) for s in analysis.get_profiler_steps()],
           "iterations": {int(r): [int(i) for i in analysis.t.get_iterations(r)] for r in analysis.t.get_ranks()},
           "events": {int(r): int(len(analysis.t.get_trace(r))) for r in analysis.t.get_ranks()},
           "meta": {int(r): m.get("distributedInfo") for r, m in analysis.t.meta_data.items()},
           "duration": int(analysis.t.get_trace_duration(0))}
    try:   # HTA 0.5.0's own code calls DataFrame.drop(axis=1, columns=...), which pandas 3 refuses
        graph, ok = analysis.critical_path_analysis(rank=0, annotation="ProfilerStep", instance_id=1)
        out["critical_path"] = "ok" if ok and graph.number_of_nodes() > 0 else "failed"
    except ValueError as e:
        out["critical_path"] = str(e)
    if sys.argv[2] == "gpu":
        temporal = analysis.get_temporal_breakdown(visualize=False)
        out["temporal"] = temporal.to_dict("records")
        idle, _ = analysis.get_idle_time_breakdown(visualize=False)
        out["idle"] = idle.to_dict("records")
        launches = analysis.get_cuda_kernel_launch_stats(visualize=False)
        out["launches"] = {int(r): df.to_dict("records") for r, df in launches.items()}
        kinds = analysis.get_gpu_kernel_breakdown(visualize=False)[0]
        out["kernel_types"] = dict(zip(kinds["kernel_type"], kinds["sum"].astype(int)))
        trace = analysis.t.get_trace(0)
        analysis.t.decode_symbol_ids()
        gpu = trace[trace["stream"] > 0]
        out["gpu"] = [{"name": n, "iteration": int(i), "launched": int(c) > 0}
                      for n, i, c in zip(gpu["s_name"], gpu["iteration"], gpu["index_correlation"])]
said += [str(w.message) for w in caught]
out["said"] = said
print(json.dumps(out, default=str))
"""


def report(*args):
    done = subprocess.run([TW_REPORT, *map(str, args)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def analyse(trace_dir, kind):
    done = subprocess.run([sys.executable, "-c", ANALYSE, str(trace_dir), kind], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def complaints(said):
    """What HTA says when a trace lacks what torch.profiler's has: a rank, its steps."""
    return [s for s in said if re.search(r"distributedInfo|rank|ProfilerStep|iteration", s, re.I)
            and not s.startswith(("Parsed ", "Overall parsing", "leaving "))]


@pytest.fixture(scope="module")
def ranks_run(tmp_path_factory):
    """Six DDP steps on two gloo ranks, each rank profiled into out/."""
    directory = tmp_path_factory.mktemp("hta-ranks")
    (directory / "train.py").write_text(TRAIN)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), OMP_NUM_THREADS="1")
    for key in [k for k in env if k.startswith("TORCHWRAPPER_") or k in ("RANK", "WORLD_SIZE")]:
        del env[key]
    # --standalone: the rendezvous store listens on a port the kernel picks as it binds (a port found
    # free beforehand could be taken by another test's job before torchrun binds it)
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone",
                           "train.py", "out"], cwd=directory, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return directory / "out"


def test_hta_loads_each_rank_of_a_real_ddp_run_without_a_word_and_finds_its_steps(ranks_run, tmp_path):
    traces = tmp_path / "traces"
    report("--trace", f"{traces}/", ranks_run)
    assert sorted(os.listdir(traces)) == ["rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"]
    for rank in (0, 1):
        with gzip.open(traces / f"rank{rank}.pt.trace.json.gz", "rt") as f:
            assert f.readline().startswith('{"distributedInfo": {"rank": %d, "world_size": 2}' % rank)
    got = analyse(traces, "cpu")
    assert complaints(got["said"]) == [], got["said"]
    assert got["ranks"] == [0, 1]
    assert got["meta"] == {"0": {"rank": 0, "world_size": 2}, "1": {"rank": 1, "world_size": 2}}
    # ProfilerStep#0..5 from the step column; HTA leaves the last step out (include_last_profiler_step)
    assert got["steps"] == [0, 1, 2, 3, 4]
    assert got["iterations"] == {"0": [0, 1, 2, 3, 4], "1": [0, 1, 2, 3, 4]}   # (JSON's keys are text)
    assert min(got["events"].values()) > 100 and got["duration"] > 0
    # its critical path of step 1, where pandas lets HTA 0.5.0 run it (pandas 3 refuses HTA's own call)
    assert got["critical_path"] in ("ok", "Cannot specify both 'axis' and 'index'/'columns'"), got["critical_path"]


@pytest.mark.skipif(not os.path.exists(FAKE), reason="the fake CUPTI is built by make check (a build with CUPTI "
                                                      "headers)")
def test_hta_s_gpu_analyses_run_on_gpu_work_from_the_fake_cupti(tmp_path):
    program = textwrap.dedent(f"""
        import ctypes, os, sys, time
        os.environ["TW_CUPTI_LIBRARY"] = {os.path.abspath(FAKE)!r}
        import torchwrapper as tw
        lib = ctypes.CDLL({os.path.abspath(FAKE)!r})
        lib.fake_cupti_launch.restype = ctypes.c_uint32
        lib.fake_cupti_launch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint64,
                                          ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint32]
        lib.fake_cupti_now.restype = ctypes.c_uint64
        lib.fake_cupti_reset()
        free = [0]

        def launch(kind, name, duration):
            # the device runs its stream's work in order, 20 us behind the launches at least
            start = max(lib.fake_cupti_now() + 20000, free[0])
            free[0] = start + duration + 3000
            return lib.fake_cupti_launch(kind, name, 1, start, start + duration, 0, 7)

        linear = tw.wrap(lambda: launch(0, b"gemm", 40000), "my.linear")
        relu = tw.wrap(lambda: launch(0, b"relu_kernel", 8000), "my.relu")
        copy = tw.wrap(lambda: launch(1, None, 5000), "my.copy")
        zero = tw.wrap(lambda: launch(2, None, 2000), "my.zero")
        forward = tw.wrap(lambda: (linear(), relu(), linear()), "my.forward")
        session = tw.Session(out_dir=sys.argv[1], format="csv", gpu="on", gpu_device=True)
        session.start()
        for step in range(5):
            copy(); zero(); forward(); forward()
            time.sleep(0.002)
            tw.step()
        session.stop()
        print(session.stats()["gpu_kernels"])
    """)
    (tmp_path / "prog.py").write_text(program)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, "prog.py", "out"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["30"]   # 6 kernels a step
    traces = tmp_path / "traces"
    report("--trace", f"{traces}/", tmp_path / "out")
    with gzip.open(traces / "rank0.pt.trace.json.gz", "rt") as f:
        events = json.load(f)["traceEvents"]
    launches = [e for e in events if e.get("cat") == "cuda_runtime"]
    assert len(launches) == 40 and {e["name"] for e in launches} == {"cudaLaunchKernel", "cudaMemcpyAsync",
                                                                      "cudaMemsetAsync"}
    got = analyse(traces, "gpu")
    assert complaints(got["said"]) == [], got["said"]
    assert got["ranks"] == [0] and got["steps"] == [0, 1, 2, 3]
    # the kernels of steps 0-3 (HTA leaves the last step out), each joined to its launch
    gpu = got["gpu"]
    assert len(gpu) == 32 and all(k["launched"] for k in gpu)
    assert sorted({k["iteration"] for k in gpu}) == [0, 1, 2, 3]
    assert sorted(k["name"] for k in gpu[:8]) == sorted(["Memcpy HtoD", "Memset", "gemm", "relu_kernel", "gemm",
                                                         "gemm", "relu_kernel", "gemm"])
    launch_stats = got["launches"]["0"]
    assert len(launch_stats) == 32
    assert all(s["launch_delay"] >= 0 and s["gpu_duration"] > 0 for s in launch_stats)
    # the work's time (HTA rounds each event in to whole microseconds: up to 1 us less each)
    compute, memory = 4 * (4 * 40 + 2 * 8), 4 * (5 + 2)
    assert compute - 24 <= got["kernel_types"]["COMPUTATION"] <= compute
    assert memory - 8 <= got["kernel_types"]["MEMORY"] <= memory
    (temporal,) = got["temporal"]
    assert compute - 24 <= temporal["compute_time(us)"] <= compute
    assert temporal["idle_time(us)"] > 0
    assert {row["idle_category"] for row in got["idle"]} == {"host_wait", "kernel_wait", "other"}
