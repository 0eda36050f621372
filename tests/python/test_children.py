# SPDX-License-Identifier: MIT
"""Child processes of a profiled program profile themselves, each into its own files in the same
out_dir: multiprocessing spawn, forkserver and fork children, DataLoader workers, torchrun ranks.

They start through the auto-start hook (torchwrapper-autostart.pth). An installed copy has it in
site-packages, where the interpreter reads it at every start; the build tree stages it in
build/python, which these tests make a site directory for every process they start (a
sitecustomize.py that calls site.addsitedir on it), so that the real .pth file is what runs.
"""
import collections
import json
import os
import subprocess
import sys
import textwrap

import pytest

import torchwrapper
from torchwrapper._files import iter_rows, record_files

BUILD = os.environ.get("top_builddir", os.path.join(os.path.dirname(__file__), "..", ".."))
TW_REPORT = os.path.join(BUILD, "tw-report")


def python(args, cwd, env, timeout=120):
    return subprocess.run([sys.executable] + args, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def rows_by_pid(out_dir):
    by_pid = collections.defaultdict(list)
    for path in record_files(str(out_dir)):
        for row in iter_rows(path):
            by_pid[row.pid].append(row)
    return by_pid


def manifests(out_dir):
    found = {}
    for name in os.listdir(out_dir):
        if name.startswith("manifest") and name.endswith(".json"):
            with open(os.path.join(out_dir, name)) as f:
                found[name] = json.load(f)
    return found


def test_the_hook_imports_nothing_unless_the_variable_is_set(tmp_path, env):
    probe = "import sys; print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'torchwrapper')))"
    # Unset (or empty): an ordinary interpreter start, neither torchwrapper nor torch imported.
    assert python(["-c", probe], tmp_path, env).stdout.strip() == "[]"
    assert python(["-c", probe], tmp_path, dict(env, TORCHWRAPPER_AUTOSTART="")).stdout.strip() == "[]"
    # Set, in a process that never imports torch: armed, nothing profiled, no files.
    out = tmp_path / "out"
    armed = dict(env, TORCHWRAPPER_AUTOSTART=json.dumps({"out_dir": str(out), "format": "csv"}))
    result = python(["-c", probe], tmp_path, armed)
    assert result.returncode == 0, result.stderr
    assert "'torch'" not in result.stdout and "'torchwrapper._autostart'" in result.stdout
    assert not out.exists()


def test_a_process_started_with_the_variable_profiles_itself_from_its_first_torch_call(tmp_path, env):
    out = tmp_path / "out"
    program = "import os, torch; x = torch.ones(2); [torch.add(x, x) for _ in range(9)]; print(os.getpid())"
    armed = dict(env, TORCHWRAPPER_AUTOSTART=json.dumps({"out_dir": str(out), "format": "csv"}))
    result = python(["-c", program], tmp_path, armed)
    assert result.returncode == 0, result.stderr
    pid = int(result.stdout)
    assert [row.api for row in rows_by_pid(out)[pid]] == ["torch.ones"] + ["torch.add"] * 9
    assert set(manifests(out)) == {f"manifest-{pid}.json"}  # manifest.json is left to a parent
    # "1": the defaults and $TORCHWRAPPER_<KEY> variables.
    out1 = tmp_path / "out1"
    result = python(["-c", program], tmp_path, dict(env, TORCHWRAPPER_AUTOSTART="1", TORCHWRAPPER_OUT_DIR=str(out1),
                                                   TORCHWRAPPER_FORMAT="json"))
    assert result.returncode == 0, result.stderr
    assert len(rows_by_pid(out1)[int(result.stdout)]) == 10
    # A value the profiler cannot use: one line on stderr, and the program runs as it would.
    bad = python(["-c", program], tmp_path, dict(env, TORCHWRAPPER_AUTOSTART='{"fromat": "csv"}'))
    assert bad.returncode == 0 and bad.stdout.strip().isdigit()
    assert f"torchwrapper: not profiling process {bad.stdout.strip()}: unknown config key 'fromat'" in bad.stderr


EAGER = """
import torch   # imported when the child unpickles its target: profiling starts before the target runs

def work(n):
    x = torch.ones(3)
    for _ in range(n):
        torch.add(x, x)
"""

MULTIPROCESSING = """
import multiprocessing as mp, sys

def lazy_work(n):
    import eager   # imports torch: profiling starts inside the target, after multiprocessing set the child up
    eager.work(n)

if __name__ == "__main__":
    import eager   # here, not at the top: a child runs the top of this file again
    for method, target, n in (("spawn", eager.work, 10), ("forkserver", eager.work, 20),
                              ("forkserver-lazy", lazy_work, 25), ("fork", eager.work, 30)):
        p = mp.get_context(method.split("-")[0]).Process(target=target, args=(n,))
        p.start()
        p.join()
        print(method, p.pid, p.exitcode)
    eager.work(5)
"""

CHILDREN = (("spawn", 10), ("forkserver", 20), ("forkserver-lazy", 25), ("fork", 30))


def test_multiprocessing_children_write_their_own_files(tmp_path, env):
    (tmp_path / "eager.py").write_text(EAGER)
    (tmp_path / "prog.py").write_text(MULTIPROCESSING)
    result = python(["-m", "torchwrapper", "run", "-o", "out", "--set", "format=csv", "prog.py"], tmp_path, env)
    assert result.returncode == 0, result.stderr
    children = {line.split()[0]: int(line.split()[1]) for line in result.stdout.splitlines()}
    assert [line.split()[2] for line in result.stdout.splitlines()] == ["0"] * len(CHILDREN)
    by_pid = rows_by_pid(tmp_path / "out")
    for method, n in CHILDREN:
        # Each child's calls, all flushed at its exit (fork and forkserver children end in os._exit).
        assert [row.api for row in by_pid[children[method]]] == ["torch.ones"] + ["torch.add"] * n, method
        assert f"manifest-{children[method]}.json" in manifests(tmp_path / "out")
    parent = manifests(tmp_path / "out")["manifest.json"]["pid"]
    assert [row.api for row in by_pid[parent]] == ["torch.ones"] + ["torch.add"] * 5  # counted once
    assert set(by_pid) == {parent} | set(children.values())
    # The report at the end adds up the whole run.
    assert "5 record file(s) in" in result.stderr and "from 5 processes" in result.stderr
    assert [line.split()[:2] for line in result.stderr.splitlines() if line.startswith("torch.add ")] == \
        [["torch.add", str(5 + sum(n for _, n in CHILDREN))]]


DATALOADER = """
import os, sys, torch

class Pids(torch.utils.data.Dataset):
    def __len__(self):
        return 16
    def __getitem__(self, i):
        return torch.tensor([os.getpid(), i])

if __name__ == "__main__":
    for method in ("spawn", "fork"):
        loader = torch.utils.data.DataLoader(Pids(), batch_size=2, num_workers=2, multiprocessing_context=method)
        items = [tuple(row.tolist()) for batch in loader for row in batch]
        assert sorted(i for _, i in items) == list(range(16))
        print(method, " ".join(str(pid) for pid, _ in items))
"""


def test_dataloader_spawn_and_fork_workers_write_their_records(tmp_path, env):
    (tmp_path / "prog.py").write_text(DATALOADER)
    result = python(["-m", "torchwrapper", "run", "--no-report", "-o", "out", "prog.py"], tmp_path, env, 180)
    assert result.returncode == 0, result.stderr
    made_by = {}  # method -> Counter(worker pid -> items it made)
    for line in result.stdout.splitlines():
        method, *pids = line.split()
        made_by[method] = collections.Counter(int(p) for p in pids)
    assert set(made_by) == {"spawn", "fork"}
    by_pid = rows_by_pid(tmp_path / "out")
    found = manifests(tmp_path / "out")
    for method, counter in made_by.items():
        assert len(counter) == 2, (method, counter)  # two workers, both used
        for pid, items in counter.items():
            apis = collections.Counter(row.api for row in by_pid[pid])
            assert apis["torch.tensor"] == items, (method, pid, apis)  # one per item, in the worker
            assert apis["torch.stack"] >= 1  # the worker's collate
            assert f"manifest-{pid}.json" in found
    parent = found["manifest.json"]["pid"]
    assert "torch.tensor" not in {row.api for row in by_pid[parent]}  # the workers' calls are theirs only


TRAIN = """
import sys, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("gloo")
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(4, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    opt.zero_grad()
    loss = model(torch.randn(8, 4)).pow(2).mean()
    loss.backward()          # DDP's gradient all-reduce over gloo
    opt.step()
total = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(total)
# One write per line: torchrun runs its workers unbuffered (python -u), where print() writes the
# text and its newline apart, and the two ranks' lines could interleave.
sys.stdout.write(f"rank {dist.get_rank()} of {dist.get_world_size()} sum {total.item()}\\n")
dist.destroy_process_group()
"""


@pytest.mark.parametrize("form", ["run-outside", "torchrun-outside"])
def test_torchrun_ddp_ranks_write_their_own_files(tmp_path, env, form):
    (tmp_path / "train.py").write_text(TRAIN)
    # --standalone: the rendezvous store listens on a port the kernel picks as it binds (a port found
    # free beforehand could be taken by another test's job before torchrun binds it)
    torchrun = ["-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone"]
    ours = ["-m", "torchwrapper", "run", "--no-report", "-o", "out", "--set", "format=csv"]
    # python -m torchwrapper run -m torch.distributed.run ... train.py (the launcher profiled too,
    # its workers through the hook), or torchrun ... -m torchwrapper run train.py (each rank runs
    # the command itself).
    args = ours + torchrun + ["train.py"] if form == "run-outside" else torchrun + ours + ["train.py"]
    result = python(args, tmp_path, env, 240)
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == ["rank 0 of 2 sum 3.0", "rank 1 of 2 sum 3.0"]
    out = tmp_path / "out"
    ranked = {m["rank"]: m for m in manifests(out).values() if "rank" in m}
    assert sorted(ranked) == [0, 1]
    by_pid = rows_by_pid(out)
    for rank, manifest in ranked.items():
        assert manifest["records_written"] > 0
        assert all(f"-rank{rank}-{manifest['pid']}-" in entry["name"] for entry in manifest["files"])
        apis = collections.Counter(row.api for row in by_pid[manifest["pid"]])
        assert apis["torch.distributed.all_reduce"] == 1, apis
        assert apis["torch.nn.parallel.DistributedDataParallel.forward"] == 3
        assert apis["torch.distributed.init_process_group"] == 1
    launcher = [m for m in manifests(out).values() if "rank" not in m]
    assert len(launcher) == (1 if form == "run-outside" else 0)
    # tw-report reads both ranks' files as one run.
    report = subprocess.run([TW_REPORT, "--format", "json", "--by", "pid", "--trace", tmp_path / "trace.json", out],
                            capture_output=True, text=True, timeout=60)
    assert report.returncode == 0, report.stderr
    calls = {int(row["key"]): row["calls"] for row in json.loads(report.stdout)["rows"]}
    assert {pid: calls[pid] for pid in by_pid} == {pid: len(rows) for pid, rows in by_pid.items()}
    reduce = subprocess.run([TW_REPORT, "--format", "json", "--api", "torch.distributed.all_reduce", out],
                            capture_output=True, text=True, timeout=60)
    assert [(row["key"], row["calls"]) for row in json.loads(reduce.stdout)["rows"]] == \
        [("torch.distributed.all_reduce", 2)]
    with open(tmp_path / "trace.json") as f:
        names = {e["args"]["name"] for e in json.load(f)["traceEvents"] if e.get("name") == "process_name"}
    assert {f"rank {rank} (pid {m['pid']})" for rank, m in ranked.items()} <= names


def test_run_under_a_profiled_parent_profiles_once_with_its_own_config(tmp_path, env):
    (tmp_path / "prog.py").write_text("import torch\nx = torch.ones(2)\ntorch.add(x, x)\n")
    armed = dict(env, TORCHWRAPPER_AUTOSTART=json.dumps({"out_dir": str(tmp_path / "parents")}))
    result = python(["-m", "torchwrapper", "run", "--no-report", "-o", "out", "prog.py"], tmp_path, armed)
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "parents").exists()
    (manifest,) = manifests(tmp_path / "out").values()
    assert [row.api for row in rows_by_pid(tmp_path / "out")[manifest["pid"]]] == ["torch.ones", "torch.add"]
