# SPDX-License-Identifier: MIT
"""The frictions a new user hit (#26): lists given as one string, an exclude list that dropped the
default one, API names cut at 44 characters, and "GPU timing unavailable" on every CPU-only run."""
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torchwrapper as tw
from torchwrapper import _core
from torchwrapper.__main__ import _fit_names
from torchwrapper._files import iter_rows, record_files

BUILD = os.environ.get("top_builddir", os.path.join(os.path.dirname(__file__), "..", ".."))
TW_REPORT = os.path.join(BUILD, "tw-report")


def normalize(config, from_strings=False):
    return json.loads(_core.normalize_config(json.dumps(config), from_strings=from_strings))


def test_a_string_for_a_list_key_is_a_one_element_or_comma_separated_list():
    assert normalize({"exclude": "torch.Tensor.*"})["exclude"] == ["torch.Tensor.*"]
    assert normalize({"exclude": "torch.Tensor.*, torch.add"})["exclude"] == ["torch.Tensor.*", "torch.add"]
    assert normalize({"modules": "torch"})["modules"] == ["torch"]
    assert normalize({"include": "torch.add,torch.mul"})["include"] == ["torch.add", "torch.mul"]
    assert normalize({"track": "parameters"})["track"] == ["parameters"]
    # the same as environment variables (from_strings) always did
    assert normalize({"exclude": "a,b"}, from_strings=True)["exclude"] == ["a", "b"]
    with pytest.raises(ValueError, match="config key 'modules': \"\" is not accepted"):
        normalize({"modules": ""})
    with pytest.raises(ValueError, match="'weights' is not one of: parameters grads"):
        normalize({"track": "weights"})


def test_plus_entries_add_to_the_default_exclude_list_and_plain_ones_replace_it():
    assert normalize({"exclude": ["+torch.add", "+torch.mul"]})["exclude"] == ["+torch.add", "+torch.mul"]
    with pytest.raises(ValueError, match="all start with '\\+' .* or none that does .*not both"):
        normalize({"exclude": ["+torch.add", "torch.mul"]})
    with pytest.raises(ValueError, match="config key 'exclude'"):
        normalize({"exclude": ["+"]})
    assert tw.resolve_exclude(None) == list(tw.DEFAULT_EXCLUDE)
    assert tw.resolve_exclude(["+torch.add"]) == list(tw.DEFAULT_EXCLUDE) + ["torch.add"]
    assert tw.resolve_exclude(["torch.add"]) == ["torch.add"]

    with tw.profile(exclude="+torch.add") as prof:
        torch.add(torch.ones(2), 1)
    excluded = dict(prof.excluded)
    assert excluded["torch.add"] == "torch.add"
    assert excluded["torch.Tensor.__hash__"] == "torch.Tensor.__hash__"   # the defaults stay
    assert excluded["torch.nn.Module.parameters"] == "<generator functions>"
    with tw.profile(exclude=["torch.add"]) as prof:                        # a plain list replaces them
        pass
    assert "torch.Tensor.__hash__" in prof.wrapped and "torch.add" not in prof.wrapped


PROGRAM = """
import torch
x = torch.ones(3)
print((x + x).sum().item(), hash(x) != 0)
"""


def run(args, cwd):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run([sys.executable, "-m", "torchwrapper", "run", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def apis_of(out_dir):
    return [row.api for path in record_files(str(out_dir)) for row in iter_rows(path)]


def test_run_set_takes_one_glob_for_a_list_key_and_plus_keeps_the_defaults(tmp_path):
    (tmp_path / "prog.py").write_text(PROGRAM)
    result = run(["--no-report", "-o", "a", "--set", "exclude=torch.Tensor.*", "prog.py"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert apis_of(tmp_path / "a") == ["torch.ones"]
    with open(tmp_path / "a" / "manifest.json") as f:
        assert json.load(f)["config"]["exclude"] == ["torch.Tensor.*"]
    # a plain list replaces the defaults: hash(x) is recorded; "+" keeps them
    result = run(["--no-report", "-o", "b", "--set", "exclude=torch.Tensor.sum", "prog.py"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert "torch.Tensor.__hash__" in apis_of(tmp_path / "b")
    result = run(["--no-report", "-o", "c", "--set", "exclude=+torch.Tensor.sum,+torch.Tensor.item", "prog.py"],
                 tmp_path)
    assert result.returncode == 0, result.stderr
    assert apis_of(tmp_path / "c") == ["torch.ones", "torch.Tensor.__add__"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CPU-only run")
def test_a_cpu_only_run_does_not_say_gpu_timing_is_unavailable(tmp_path):
    (tmp_path / "prog.py").write_text(PROGRAM)
    result = run(["-o", "out", "prog.py"], tmp_path)
    assert result.returncode == 0, result.stderr
    # (the findings may say what a host sync would cost on a GPU: that is advice, not a warning)
    assert "GPU timing" not in result.stderr and "CUPTI" not in result.stderr and "unavailable" not in result.stderr
    assert result.stderr.lstrip().startswith("torchwrapper: ")   # the report, not a warning, comes first
    with open(tmp_path / "out" / "manifest.json") as f:
        assert json.load(f)["gpu_unavailable"].startswith("no CUDA device")
    # asked for explicitly, it is an error that says why
    result = run(["-o", "out2", "--set", "gpu=on", "prog.py"], tmp_path)
    assert result.returncode != 0 and "GPU timing is unavailable: no CUDA device" in result.stderr


LONG = "torch.nn.functional.scaled_dot_product_attention"
NAMES = [LONG, "torch.nn.functional.scaled_dot_product_attention_math", "torch.add",
         "torch.a" + "x" * 120 + ".one", "torch.a" + "x" * 120 + ".two"]


def write_records(path, names):
    rows = "".join(f"{i + 1},{name},{1000 * i},{500 + i},{500 + i},0,42,42,0,0,0,\n" for i, name in enumerate(names))
    path.write_text("call_id,api,start_ns,cost_ns,self_ns,gpu_ns,pid,tid,depth,parent_id,error,args\n" + rows)


def test_tw_report_shows_long_names_whole_or_elided_in_the_middle_never_two_alike(tmp_path):
    write_records(tmp_path / "tw-1-0001.csv", NAMES)
    table = subprocess.run([TW_REPORT, tmp_path], capture_output=True, text=True, check=True).stdout
    lines = table.splitlines()
    shown = [line.split("  ")[0].rstrip() for line in lines[1:1 + len(NAMES)]]
    assert LONG in shown and NAMES[1] in shown and "torch.add" in shown
    # over 100 columns: both ends stay, the column is 100 wide, and the two stay apart
    elided = [name for name in shown if "\u2026" in name]
    assert len(elided) == 2 and len(set(elided)) == 2
    assert all(len(name) == 100 and name.startswith("torch.axxx") for name in elided)
    assert {name[-4:] for name in elided} == {".one", ".two"}
    assert len({len(line) for line in lines[:1 + len(NAMES)]}) == 1     # aligned
    # names that would read the same elided are shown whole
    twins = ["torch." + "y" * 60 + "A" + "y" * 60, "torch." + "y" * 60 + "B" + "y" * 60]
    write_records(tmp_path / "tw-1-0001.csv", twins)
    table = subprocess.run([TW_REPORT, tmp_path], capture_output=True, text=True, check=True).stdout
    assert all(name in table for name in twins)
    # Markdown shows every name whole
    write_records(tmp_path / "tw-1-0001.csv", NAMES)
    md = subprocess.run([TW_REPORT, "--format", "markdown", tmp_path], capture_output=True, text=True,
                        check=True).stdout
    assert all(name in md for name in NAMES)


def test_the_run_report_fits_its_column_to_the_names():
    names, width = _fit_names([LONG, "torch.add"])
    assert names == [LONG, "torch.add"] and width == len(LONG)
    names, width = _fit_names(["a" * 50 + "1", "a" * 50 + "2", "torch.add"], cap=20)
    assert names[0] == "a" * 9 + "\u2026" + "a" * 9 + "1" and width == 20 and len(set(names)) == 3
    names, width = _fit_names(["a" * 10 + "x" + "a" * 10, "a" * 10 + "y" + "a" * 10], cap=11)
    assert names == ["a" * 10 + "x" + "a" * 10, "a" * 10 + "y" + "a" * 10] and width == 21


def test_the_run_report_prints_long_names_whole(tmp_path):
    (tmp_path / "prog.py").write_text(textwrap.dedent("""
        import torch
        q = torch.randn(1, 2, 4, 8)
        torch.nn.functional.scaled_dot_product_attention(q, q, q)
    """))
    result = run(["-o", "out", "prog.py"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert LONG + " " in result.stderr
