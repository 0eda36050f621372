# SPDX-License-Identifier: MIT
"""python -m torchwrapper run: an unmodified program runs as it would without the profiler."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from torchwrapper._files import iter_rows, record_files

PROGRAM = """
import sys, torch
print("argv", sys.argv, "name", __name__, "file", __file__.endswith("prog.py"), "path0", sys.path[0] == {here!r})
x = torch.ones(3)
print(torch.add(x, x).sum().item())
if sys.argv[1:] == ["fail"]:
    raise ValueError("boom")
sys.exit(int(sys.argv[1]) if sys.argv[1:] else 0)
"""


def run(args, cwd):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run([sys.executable] + args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture
def program(tmp_path):
    (tmp_path / "prog.py").write_text(PROGRAM.format(here=str(tmp_path)))
    return tmp_path


@pytest.mark.parametrize("args", [["7", "--flag"], ["fail"], []])
def test_a_script_runs_as_it_would_plainly(program, args):
    plain = run(["prog.py"] + args, program)
    profiled = run(["-m", "torchwrapper", "run", "--no-report", "-o", "out", "--set", "format=csv", "prog.py"] + args,
                   program)
    assert profiled.returncode == plain.returncode
    assert profiled.stdout == plain.stdout
    # the same traceback for "fail"; on a machine without GPU timing the profiler says so, once
    ours = [line for line in profiled.stderr.splitlines(True) if line.startswith("torchwrapper: GPU timing unavailable")]
    assert len(ours) <= 1
    assert "".join(line for line in profiled.stderr.splitlines(True) if line not in ours) == plain.stderr
    apis = [row.api for path in record_files(str(program / "out")) for row in iter_rows(path)]
    assert apis == ["torch.ones", "torch.add", "torch.Tensor.sum", "torch.Tensor.item"]


def test_a_module_runs_with_dash_m_and_the_report_is_printed(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "train.py").write_text(textwrap.dedent("""
        import sys, torch
        print("argv", sys.argv[1:], __name__)
        torch.randn(2, 2).relu()
    """))
    result = run(["-m", "torchwrapper", "run", "-o", "out", "-m", "pkg.train", "--lr", "0.1"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["argv ['--lr', '0.1'] __main__"]
    assert "torchwrapper: 1 record file(s) in" in result.stderr
    assert "torch.randn" in result.stderr and "torch.Tensor.relu" in result.stderr
    with open(tmp_path / "out" / "manifest.json") as f:
        assert json.load(f)["records_written"] == 2


def test_usage_and_config_errors_are_clear(program):
    assert "usage" in run(["-m", "torchwrapper", "run"], program).stderr
    bad = run(["-m", "torchwrapper", "run", "--set", "fromat=csv", "prog.py"], program)
    assert bad.returncode == 1 and "unknown config key 'fromat': did you mean 'format'?" in bad.stderr
    other = run(["-m", "torchwrapper", "profile"], program)
    assert other.returncode == 1 and "unknown command 'profile' (accepted: run, report, capture)" in other.stderr


@pytest.mark.parametrize("how, ext", [
    ([], ".csv"),                                          # run's own default: a profile left on
    (["--set", "format=json"], ".jsonl"),                  # what the user sets wins, from every source
    (["env"], ".jsonl"),
    (["file"], ".jsonl"),
])
def test_run_writes_csv_unless_a_source_asks_for_json(program, how, ext):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    env.pop("TORCHWRAPPER_FORMAT", None)
    env.pop("TORCHWRAPPER_CONFIG", None)
    options = how
    if how == ["env"]:
        env["TORCHWRAPPER_FORMAT"], options = "json", []
    elif how == ["file"]:
        (program / "tw.json").write_text(json.dumps({"format": "json"}))
        env["TORCHWRAPPER_CONFIG"], options = str(program / "tw.json"), []
    done = subprocess.run([sys.executable, "-m", "torchwrapper", "run", "--no-report", "-o", "out", *options,
                           "prog.py"], cwd=program, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    names = [n for n in os.listdir(program / "out") if n.startswith("tw-")]
    assert names and all(n.endswith(ext) for n in names)
    with open(program / "out" / "manifest.json") as f:
        assert json.load(f)["config"]["format"] == ext.lstrip(".").replace("jsonl", "json")
    # TorchWrapper's default stays the original tool's
    import torchwrapper as tw
    assert tw.load_config({}, environ={})["format"] == "json"
