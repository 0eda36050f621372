# SPDX-License-Identifier: MIT
"""A profile left on keeps its record files within max_total_size (10 GB of each kind by default):
the oldest files are removed as new ones open, the manifest says which and why, summary.json still
counts every call, and every report (tables, findings, the HTML page) and load() work on the newest
records and say what was removed."""
import json
import os
import subprocess
import sys

import pytest

import torchwrapper as tw
from torchwrapper import _config

BUILD = os.environ.get("top_builddir", os.path.join(os.path.dirname(__file__), "..", ".."))
TW_REPORT = os.path.join(BUILD, "tw-report")

PROGRAM = """
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(4, 8), torch.randint(0, 2, (4,))
for step in range(STEPS):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
print("loss", round(loss.item(), 4))
"""
STEPS = 150
BUDGET = 64000   # "64KB"


@pytest.fixture(scope="module")
def budget_run(tmp_path_factory):
    """The training loop under `run` with a 64 KB budget, as a user leaving it on would set one."""
    where = tmp_path_factory.mktemp("budget")
    (where / "prog.py").write_text(PROGRAM.replace("STEPS", str(STEPS)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, "-m", "torchwrapper", "run", "--no-report", "-o", "out", "--set",
                           "max_total_size=64KB", "--set", "format=csv", "prog.py"],
                          cwd=where, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "loss" in done.stdout   # the program's own result is untouched
    out = where / "out"
    manifest = json.loads((out / "manifest.json").read_text())
    return out, manifest


def call_files(manifest):
    return [f for f in manifest["files"] if f.get("kind", "calls") == "calls"]


def removed_of(manifest):
    return manifest["records"]["calls"].get("removed")


def test_the_files_kept_stay_within_max_total_size_and_the_oldest_went(budget_run):
    out, manifest = budget_run
    kept, removed = call_files(manifest), removed_of(manifest)
    assert kept and removed["files"] > 0 and removed["by"] == "max_total_size"
    on_disk = sorted(n for n in os.listdir(out) if n.endswith(".csv"))
    assert on_disk == sorted(f["name"] for f in kept)
    assert len(kept) <= 2   # the manifest's list does not grow with the run: the files removed leave it
    assert sum(os.path.getsize(out / n) for n in on_disk) <= BUDGET
    assert all(os.path.getsize(out / n) <= BUDGET // 2 for n in on_disk)   # each file at most half of it
    # only the oldest went: the files kept are the last ones the run opened (names end in their index)
    assert [int(f["name"].rsplit("-", 1)[1].split(".")[0]) for f in kept] == \
        list(range(removed["files"] + 1, removed["files"] + 1 + len(kept)))
    # every record is still counted: the manifest's and summary.json's (every call, every step)
    written = sum(f["records"] for f in kept) + removed["records"]
    assert manifest["records_written"] == written
    summary = json.loads((out / "summary.json").read_text())
    assert sum(api["calls"] for api in summary["apis"]) == written


def test_load_reads_the_newest_records(budget_run):
    out, manifest = budget_run
    df = tw.load(str(out))
    assert len(df) == sum(f["records"] for f in call_files(manifest))
    assert df["step"].max() >= STEPS - 1   # the last step is there (the print after it: one more)
    assert df["step"].min() > 0            # the first ones are not


@pytest.mark.parametrize("option", [[], ["--findings"], ["--by", "step"]])
def test_every_report_says_what_was_removed(budget_run, option):
    out, manifest = budget_run
    removed = removed_of(manifest)
    done = subprocess.run([TW_REPORT, *option, str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if "were removed by max_total_size" in line)
    assert line.startswith(f"The oldest {removed['files']} record files ({removed['records']} records")


def test_the_html_page_says_what_was_removed(budget_run, tmp_path):
    out, _ = budget_run
    page = tmp_path / "report.html"
    done = subprocess.run([TW_REPORT, "--html", str(page), str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert '<p class="note" id="removed">The oldest ' in page.read_text()


def test_a_run_that_removed_nothing_says_nothing_of_it(tmp_path):
    with tw.profile(out_dir=str(tmp_path), format="csv"):
        import torch
        torch.add(torch.ones(2), 1)
    done = subprocess.run([TW_REPORT, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "removed" not in done.stdout


@pytest.mark.parametrize("defaults", ["torchwrapper", "profile"])
def test_every_entry_point_keeps_10_gb_of_each_kind_by_default_and_0_keeps_all(defaults):
    assert _config.normalize({}, defaults=defaults)["max_total_size"] == 10_000_000_000
    assert _config.normalize({"max_total_size": 0}, defaults=defaults)["max_total_size"] == 0
    assert _config.normalize({"max_total_size": "0"}, from_strings=True, defaults=defaults)["max_total_size"] == 0
    assert _config.normalize({"max_total_size": "2GiB"}, defaults=defaults)["max_total_size"] == 2 << 30


def test_max_total_size_0_keeps_every_file(tmp_path):
    import torch
    with tw.profile(out_dir=str(tmp_path), format="csv", file_max_size=4096, max_total_size=0):
        x = torch.ones(2)
        for _ in range(2000):
            x = torch.add(x, 1)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    files = call_files(manifest)
    assert len(files) > 5 and removed_of(manifest) is None
    assert all(os.path.exists(tmp_path / f["name"]) for f in files)
