# SPDX-License-Identifier: MIT
"""Call sites (config sites): each call that enters torch from the program names the file, line and
function that made it; calls torch makes itself are not put on torch's own files; bounded interning.

Expected lines come from the script's own text: each line that makes a call is marked `# SITE:name`."""
import csv
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch

import torchwrapper as tw
from torchwrapper._files import iter_rows, load_sites

BUILD = os.environ.get("top_builddir", os.path.join(os.path.dirname(__file__), "..", ".."))
TW_REPORT = os.path.join(BUILD, "tw-report")
TORCH_DIR = os.path.dirname(torch.__file__) + os.sep

TRAIN = textwrap.dedent("""
    import functools, sys, threading, torch, torchwrapper as tw

    def timed(fn):
        @functools.wraps(fn)
        def inner(*args):
            return fn(*args)
        return inner

    @timed
    def decorated(x):
        return torch.sigmoid(x)  # SITE:decorator

    def halves(x):
        for _ in range(2):
            yield torch.tanh(x)  # SITE:generator

    class Squares(torch.utils.data.Dataset):
        def __len__(self):
            return 8
        def __getitem__(self, i):
            return torch.full((2,), float(i))  # SITE:worker

    def in_thread(x, out):
        out.append(torch.exp(x))  # SITE:thread

    def train_step(model, opt, x):
        loss = model(x).pow(2).sum()  # SITE:forward
        loss.backward()  # SITE:backward
        opt.step()  # SITE:step
        opt.zero_grad()

    def main(out_dir, fmt, sites):
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        with tw.profile(out_dir=out_dir, format=fmt, sites=sites, track=["parameters"]):
            x = torch.ones(3, 4)  # SITE:ones
            for _ in range(2):
                train_step(model, opt, x)
            square = lambda t: torch.square(t)  # SITE:lambda
            square(x)
            decorated(x)
            with torch.no_grad():
                torch.abs(x)  # SITE:with
            list(halves(x))
            out = []
            thread = threading.Thread(target=in_thread, args=(x, out))
            thread.start()
            thread.join()
            loader = torch.utils.data.DataLoader(Squares(), batch_size=4, num_workers=2,
                                                 multiprocessing_context="fork")
            for batch in loader:
                torch.mean(batch)  # SITE:batch

    if __name__ == "__main__":
        main(sys.argv[1], sys.argv[2], sys.argv[3])
""")


def marks(source):
    """{name: line number} of the `# SITE:name` marks."""
    return {m.group(1): i for i, line in enumerate(source.splitlines(), 1)
            for m in [re.search(r"# SITE:(\w+)", line)] if m}


def run(args, cwd, **env_vars):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), **env_vars)
    done = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done


@pytest.fixture(scope="module", params=["csv", "json"])
def boundary_run(request, tmp_path_factory):
    """The training script profiled with the default sites ("boundary"): its directory, out_dir, script."""
    where = tmp_path_factory.mktemp(f"sites-{request.param}")
    script = where / "train.py"
    script.write_text(TRAIN)
    run([str(script), str(where / "out"), request.param, "boundary"], where)
    return where, where / "out", str(script)


def calls_with_sites(out_dir):
    """(api, depth, pid, site dict or None) of every call record."""
    sites = load_sites(str(out_dir))
    frame = tw.load(str(out_dir))
    return [(api, depth, pid, sites.get((pid, site)) if site else None, text)
            for api, depth, pid, site, text in zip(frame["api"].astype(str), frame["depth"], frame["pid"],
                                                    frame["site"], frame["site_text"])]


@pytest.mark.parametrize("api, mark, function", [
    ("torch.ones", "ones", "main"),
    ("torch.nn.Linear.forward", "forward", "train_step"),  # made by torch's Module.__call__: the program's line
    ("torch.Tensor.pow", "forward", "train_step"),
    ("torch.Tensor.sum", "forward", "train_step"),
    ("torch.Tensor.backward", "backward", "train_step"),
    ("torch.optim.SGD.step", "step", "train_step"),
    ("torch.square", "lambda", "main.<locals>.<lambda>"),
    ("torch.sigmoid", "decorator", "decorated"),
    ("torch.abs", "with", "main"),
    ("torch.tanh", "generator", "halves"),
    ("torch.exp", "thread", "in_thread"),
    ("torch.full", "worker", "Squares.__getitem__"),  # in the workers, inside the DataLoader's fetch
    ("torch.mean", "batch", "main"),
])
def test_each_call_into_torch_from_the_program_names_the_line_that_made_it(boundary_run, api, mark, function):
    where, out, script = boundary_run
    line = marks(TRAIN)[mark]
    found = [(site, text) for name, _, _, site, text in calls_with_sites(out) if name == api]
    assert found, f"no record of {api}"
    for site, text in found:   # outermost calls, and calls made inside torch's that the program made
        assert site == {"file": script, "line": line, "function": function, "text": f"train.py:{line} {function}"}
        assert text == f"train.py:{line} {function}"


def test_worker_processes_write_their_own_sites_files(boundary_run):
    where, out, script = boundary_run
    pids = {pid for api, _, pid, _, _ in calls_with_sites(out) if api == "torch.full"}
    assert len(pids) == 2
    for pid in pids:
        with open(out / f"sites-{pid}.json") as f:
            assert json.load(f)["pid"] == pid
        with open(out / f"manifest-{pid}.json") as f:
            assert json.load(f)["sites"]["file"] == f"sites-{pid}.json"


def test_calls_torch_makes_itself_are_charged_to_the_line_that_entered_torch(boundary_run):
    where, out, script = boundary_run
    calls = calls_with_sites(out)
    # F.linear is called by nn.Linear.forward (torch's code), itself called through Module.__call__:
    # both are the line of the program that called the module, never a line of torch's
    linear = [site for api, _, _, site, _ in calls if api == "torch.nn.functional.linear"]
    modules = [site for api, _, _, site, _ in calls if api == "torch.nn.Linear.forward"]
    assert linear and modules and all(site is not None for site in linear + modules)
    assert {(s["file"], s["line"]) for s in linear} == {(s["file"], s["line"]) for s in modules}
    assert all(s["file"] == script for s in linear)
    named = [site for _, _, _, site, _ in calls if site is not None]
    assert named and not any(site["file"].startswith(TORCH_DIR) for site in named)
    for name in os.listdir(out):   # every process's sites file
        if re.fullmatch(r"sites(-\d+)?\.json", name):
            with open(out / name) as f:
                assert not any(s["file"].startswith(TORCH_DIR) for s in json.load(f)["sites"].values())


def test_the_manifest_names_the_sites_file(boundary_run):
    where, out, script = boundary_run
    with open(out / "manifest.json") as f:
        manifest = json.load(f)
    with open(out / "sites.json") as f:
        sites = json.load(f)
    assert manifest["sites"] == {"file": "sites.json", "count": len(sites["sites"]), "cap": 65535, "overflow": 0}
    assert sites["pid"] == manifest["pid"]


def test_parameter_updates_carry_the_site_of_the_optimizer_step(boundary_run):
    where, out, script = boundary_run
    updates = tw.load_updates(str(out))
    sites = load_sites(str(out))
    with open(out / "manifest.json") as f:
        main = json.load(f)["pid"]   # the updates of the main process (the workers train nothing)
    assert len(updates) > 0
    assert {(sites[main, site]["line"], sites[main, site]["function"]) for site in updates["site"]} == \
        {(marks(TRAIN)["step"], "train_step")}


def test_tw_report_by_site_and_tree(boundary_run):
    where, out, script = boundary_run
    done = subprocess.run([TW_REPORT, "--by", "site", "--format", "csv", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    rows = {row["site: APIs called there"]: row for row in csv.DictReader(done.stdout.splitlines())}
    line = marks(TRAIN)["forward"]
    # the line's own calls, then F.linear, which nn.Linear.forward (torch's code) made for it
    [key] = [k for k in rows if k.startswith(f"train.py:{line} train_step: ")]
    assert set(key.split(": ", 1)[1].split(", ")) == {"torch.nn.Linear.forward", "torch.nn.functional.linear",
                                                       "torch.Tensor.pow", "torch.Tensor.sum"}
    assert int(rows[key]["calls"]) == 8  # 4 calls a step, 2 steps
    expected = [r for r in calls_with_sites(out) if r[3] is not None and r[3]["line"] == line]
    nodes = [r for r in expected if "Backward" in r[0]]   # autograd nodes carry their forward call's site
    assert len(expected) - len(nodes) == 8
    frame = tw.load(str(out))
    charged = frame[(frame["fwd_call_id"] != 0) & (frame["site_text"] == f"train.py:{line} train_step")]
    assert int(rows[key]["bwd_ns"]) == int(charged["cost_ns"].sum()) > 0   # --by site's bwd: those nodes
    with open(out / "manifest.json") as f:
        main = str(json.load(f)["pid"])   # its main thread's id is the pid
    tree = subprocess.run([TW_REPORT, "--tree", "0", "--pid", main, "--tid", main, str(out)], capture_output=True,
                          text=True)
    assert tree.returncode == 0, tree.stderr
    assert f"torch.nn.Linear.forward [Linear]  @ train.py:{line} train_step" in tree.stdout   # the model: its class
    # F.linear is charged to the same line: shown once, on the call around it
    assert "torch.nn.functional.linear  " in tree.stdout and "linear  @" not in tree.stdout


def test_the_public_frame_api_finds_the_same_sites(boundary_run, tmp_path):
    """Callers are read from CPython's own frames where start() found that to agree with the public
    API; TORCHWRAPPER_SITE_FRAMES=public keeps to PyEval_GetFrame(): the same sites either way."""
    where, out, script = boundary_run
    public = where / "public"
    run([script, str(public), "csv", "boundary"], where, TORCHWRAPPER_SITE_FRAMES="public")

    def sites_of(directory):
        return sorted((api, depth, site and (site["line"], site["function"]))
                      for api, depth, _, site, _ in calls_with_sites(directory))
    assert sites_of(public) == sites_of(out)
    with tw.profile() as prof:
        torch.neg(torch.ones(1))
    assert prof.stats()["site_frames"] == ("interpreter" if sys.version_info < (3, 13) else "public")


def test_sites_all_records_the_caller_of_every_call(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    run([str(script), str(tmp_path / "out"), "csv", "all"], tmp_path)
    calls = calls_with_sites(tmp_path / "out")
    linear = [site for api, _, _, site, _ in calls if api == "torch.nn.functional.linear"]
    assert linear
    for site in linear:   # its caller is torch's own nn.Linear.forward
        assert site["file"] == os.path.join(TORCH_DIR, "nn", "modules", "linear.py")
        assert site["function"] == "Linear.forward"
    # every call, autograd nodes aside (they carry their forward call's site; AccumulateGrad none)
    assert all(site is not None for api, _, _, site, _ in calls if "Backward" not in api and "AccumulateGrad" not in api)


def test_sites_off_writes_no_site(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    run([str(script), str(tmp_path / "out"), "json", "off"], tmp_path)
    out = tmp_path / "out"
    assert not [n for n in os.listdir(out) if n.startswith("sites")]
    with open(out / "manifest.json") as f:
        assert "sites" not in json.load(f)
    frame = tw.load(str(out))
    assert len(frame) > 0 and (frame["site"] == 0).all() and (frame["site_text"] == "").all()


def test_python_m_torchwrapper_run_records_sites(tmp_path):
    (tmp_path / "prog.py").write_text(textwrap.dedent("""
        import torch
        def work():
            return torch.add(torch.ones(2), 1)  # SITE:work
        work()
    """))
    source = (tmp_path / "prog.py").read_text()
    run(["-m", "torchwrapper", "run", "--no-report", "-o", "out", "--set", "format=csv", "prog.py"], tmp_path)
    sites = load_sites(str(tmp_path / "out"))
    frame = tw.load(str(tmp_path / "out"))
    add = frame[frame["api"] == "torch.add"]
    assert len(add) == 1
    site = sites[int(add["pid"].iloc[0]), int(add["site"].iloc[0])]
    assert (site["line"], site["function"], site["text"]) == (marks(source)["work"], "work",
                                                              f"prog.py:{marks(source)['work']} work")


def test_the_sites_setting_is_checked_and_taken_from_the_environment(tmp_path):
    with pytest.raises(ValueError, match="config key 'sites': \"lines\" is not accepted: give one of: boundary off all"):
        tw.profile(sites="lines")
    assert tw.load_config(environ={"TORCHWRAPPER_SITES": "all"})["sites"] == "all"
    assert tw.load_config(environ={})["sites"] == "boundary"
    with tw.profile(sites="all") as prof:
        torch.neg(torch.ones(1))
    assert prof.config["sites"] == "all"


def test_records_in_memory_carry_sites(tmp_path):
    x = torch.ones(2)
    with tw.profile() as prof:
        torch.neg(x); line = sys._getframe().f_lineno  # noqa: E702
    (neg,) = [r for r in prof.records() if r.api == "torch.neg"]
    file, at, function, text = prof.session.sites()[neg.site]
    assert (file, at, function) == (__file__, line, "test_records_in_memory_carry_sites")


def test_interning_is_bounded_and_the_overflow_counted(tmp_path):
    # 100 functions of 1,000 calls: CPython finds a line by scanning its code object's line table, so
    # one code object of 100,000 lines would make the test quadratic (minutes), the profiler's or not
    functions, per_function = 100, 1000
    lines = functions * per_function
    source = "".join(f"def f{i}(x):\n" + "    torch.neg(x)\n" * per_function for i in range(functions))
    namespace = {"torch": torch}
    exec(compile(source, "generated.py", "exec"), namespace)
    call_lines = [i * (per_function + 1) + 2 + j for i in range(functions) for j in range(per_function)]
    with tw.profile(out_dir=str(tmp_path), format="csv", on_full="wait") as prof:
        for i in range(functions):
            namespace[f"f{i}"](torch.ones(1))
    stats = prof.stats()
    sites = tw.load_sites(str(tmp_path))
    assert stats["sites"] == stats["sites_cap"] == 65535 == len(sites)
    frame = tw.load(str(tmp_path))
    neg = frame[frame["api"] == "torch.neg"]
    assert len(neg) == lines
    overflow_id = 65536
    past_cap = int((neg["site"] == overflow_id).sum())
    assert past_cap == lines - int(neg["site"].isin([k[1] for k in sites]).sum())
    assert past_cap >= lines - 65535 and stats["sites_overflow"] == past_cap
    with open(tmp_path / "manifest.json") as f:
        assert json.load(f)["sites"]["overflow"] == past_cap
    named = sorted(s["line"] for (pid, _), s in sites.items() if s["file"] == "generated.py")
    assert named == call_lines[:len(named)]  # the first lines got the ids; the rest share the overflow


def test_files_without_the_site_column_still_load(tmp_path):
    header = "call_id,api,start_ns,cost_ns,self_ns,gpu_ns,pid,tid,depth,parent_id,error,args,module,step\n"
    (tmp_path / "old.csv").write_text(header + "1,torch.add,1000,50,50,0,7,7,0,0,0,,\"\",3\n")
    (tmp_path / "old.jsonl").write_text(json.dumps(
        {"call_id": 2, "api": "torch.neg", "start_ns": 2000, "cost_ns": 5, "self_ns": 5, "gpu_ns": 0, "pid": 7,
         "tid": 7, "depth": 0, "parent_id": 0, "error": False, "args": "", "module": None, "step": 3}) + "\n")
    frame = tw.load(str(tmp_path))
    assert list(frame["site"]) == [0, 0] and list(frame["site_text"]) == ["", ""]
    assert [row.site for row in iter_rows(str(tmp_path / "old.csv"))] == [0]
    done = subprocess.run([TW_REPORT, "--by", "site", "--format", "csv", str(tmp_path)], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    (row,) = csv.DictReader(done.stdout.splitlines())
    assert row["calls"] == "2" and row["site: APIs called there"].startswith("(no site")


def test_the_sites_file_follows_a_running_job(tmp_path):
    """sites.json is rewritten at the flush interval when sites were added (not only at a new file
    or at stop), so that a job killed before its next rotation still names its records' sites."""
    import time
    out = tmp_path / "out"

    def listed(function):
        try:
            with open(out / "sites.json") as f:
                return [s for s in json.load(f)["sites"].values() if s["function"].endswith(function)]
        except (OSError, ValueError):
            return []

    def wait_until(done, what):
        deadline = time.monotonic() + 60
        while not done() and time.monotonic() < deadline:
            torch.zeros(1)  # the recording thread hands its chunk over at its next call
            time.sleep(0.01)
        assert done(), what

    def later_site():
        torch.add(torch.ones(2), 1)

    prof = tw.profile(out_dir=str(out), flush_interval=0.05).start()
    try:
        wait_until(lambda: listed("wait_until"), "the first file's sites")  # its torch.zeros calls
        later_site()  # a site the record file's creation did not see
        wait_until(lambda: listed("later_site"), "sites.json never named a site added while recording")
    finally:
        prof.stop()
