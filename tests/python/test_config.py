# SPDX-License-Identifier: MIT
"""The configuration's sources (_config.py) and their one order, lowest first: the defaults,
$TORCHWRAPPER_CONFIG's file, $TORCHWRAPPER_<KEY> variables, then the program's own (a dict or file,
keyword overrides over it; on the command line --config, then --set in order, then -o)."""
import ast
import json
import os
import subprocess
import sys

import pytest

import torchwrapper as tw
from torchwrapper import _config
from torchwrapper._api import TorchWrapper
from torchwrapper.integrations.jupyter import _options

PACKAGE = os.path.dirname(os.path.abspath(tw.__file__))


def write(path, values):
    path.write_text(json.dumps(values))
    return str(path)


def test_each_source_wins_over_the_one_before_it_key_by_key(tmp_path):
    env_file = write(tmp_path / "env.json", {"format": "csv", "max_files": 2, "flush_interval": 3})
    environ = {"TORCHWRAPPER_CONFIG": env_file, "TORCHWRAPPER_MAX_FILES": "5", "TORCHWRAPPER_ON_FULL": "wait"}
    config = tw.load_config({"on_full": "drop", "buffer_size": "2MB"}, environ=environ)
    assert config["file_name_spec"] == "timestamp"   # the defaults
    assert config["format"] == "csv"                 # $TORCHWRAPPER_CONFIG's file over the defaults
    assert config["flush_interval"] == 3
    assert config["max_files"] == 5                  # $TORCHWRAPPER_<KEY> over the file
    assert config["on_full"] == "drop"               # the program's dict over the environment
    assert config["buffer_size"] == 2_000_000
    # a file the program names is the program's source too
    program_file = write(tmp_path / "program.json", {"max_files": 9})
    assert tw.load_config(program_file, environ=environ)["max_files"] == 9


def test_torchwrappers_keyword_overrides_win_over_its_config(tmp_path, monkeypatch):
    for key in [k for k in os.environ if k.startswith("TORCHWRAPPER_")]:
        monkeypatch.delenv(key)
    path = write(tmp_path / "tw.json", {"format": "csv", "max_files": 4})
    wrapper = TorchWrapper(path, max_files=6)
    assert (wrapper.config["format"], wrapper.config["max_files"]) == ("csv", 6)
    wrapper = TorchWrapper({"format": "csv", "max_files": 4}, max_files=7)
    assert (wrapper.config["format"], wrapper.config["max_files"]) == ("csv", 7)
    assert TorchWrapper(max_files=8).config["max_files"] == 8
    monkeypatch.setenv("TORCHWRAPPER_MAX_FILES", "3")
    assert TorchWrapper(path).config["max_files"] == 4
    with pytest.raises(TypeError, match="config must be a dict or the path of a JSON file, not 'int'"):
        TorchWrapper(3)


def test_the_command_line_takes_config_then_each_set_in_order_then_out_dir(tmp_path):
    path = write(tmp_path / "cli.json", {"format": "csv", "out_dir": "from-file", "max_files": 2,
                                         "schedule": {"wait": 1, "active": 2}})
    config = _config.command_line(path, ["max_files=3", "max_files=4", "schedule.active=5", "exclude=[\"a\", \"b\"]",
                                         "file_max_size=10MB"], "from-o")
    assert config == {"format": "csv", "out_dir": "from-o", "max_files": 4, "schedule": {"wait": 1, "active": 5},
                      "exclude": ["a", "b"], "file_max_size": "10MB"}
    # KEY.SUB without an object to go into starts one
    assert _config.command_line(None, ["schedule.active=5"], None) == {"schedule": {"active": 5}}
    # and the command line as a whole is the program's source: over the environment
    environ = {"TORCHWRAPPER_FORMAT": "json", "TORCHWRAPPER_MAX_FILES": "9", "TORCHWRAPPER_ON_FULL": "wait"}
    merged = tw.load_config(config, environ=environ)
    assert (merged["format"], merged["max_files"], merged["on_full"], merged["out_dir"]) == ("csv", 4, "wait", "from-o")


def test_the_magics_read_their_options_as_run_does(tmp_path):
    path = write(tmp_path / "cli.json", {"format": "csv", "max_files": 2})
    options = _options(f"-o out --config {path} --set max_files=3 --top 4", line_magic=False)
    assert options.config_values == {"format": "csv", "max_files": 3, "out_dir": "out"}
    assert options.top == 4
    with pytest.raises(ValueError, match=r"^--set 'max_files': expected KEY=VALUE$"):
        _options("--set max_files", line_magic=False)


@pytest.mark.parametrize("config_file, sets, message", [
    ("missing.json", [], "--config: cannot read the config file 'missing.json': No such file or directory"),
    ("list.json", [], "--config: the config file 'list.json' must hold a JSON object, not list"),
    ("broken.json", [], "--config: the config file 'broken.json' is not valid JSON: Expecting"),
    (None, ["format"], "--set 'format': expected KEY=VALUE"),
])
def test_command_line_errors_name_the_source_and_the_value(tmp_path, monkeypatch, config_file, sets, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "broken.json").write_text("{format: csv}")
    with pytest.raises(ValueError) as error:
        _config.command_line(config_file, sets, None)
    assert str(error.value).startswith(message)


def test_a_bad_value_is_the_validators_error_with_its_source_where_that_is_the_environment(tmp_path):
    with pytest.raises(ValueError, match=r"^config key 'on_full': \"block\" is not accepted: give one of: drop wait "
                                         r"\(from \$TORCHWRAPPER_\* environment variables\)$"):
        tw.load_config({}, environ={"TORCHWRAPPER_ON_FULL": "block"})
    with pytest.raises(ValueError, match=r"^config key 'on_full': \"block\" is not accepted: give one of: drop wait$"):
        tw.load_config(_config.command_line(None, ["on_full=block"], None), environ={})
    path = write(tmp_path / "env.json", {"on_full": "block"})
    with pytest.raises(ValueError, match=r"^config key 'on_full': \"block\" is not accepted"):
        tw.load_config({}, environ={"TORCHWRAPPER_CONFIG": path})
    with pytest.raises(ValueError, match="config value .* of type 'object' is not accepted"):
        tw.load_config({"out_dir": object()}, environ={})
    # variables that are not config keys are not read as ones
    assert tw.load_config({}, environ={"TORCHWRAPPER_RUN_PID": "1", "TORCHWRAPPER_CONTROL_DIR": "/x",
                                       "TORCHWRAPPER_AUTOSTART": "1"}) == tw.load_config({}, environ={})


def test_a_child_of_run_records_as_its_parent_whatever_its_own_environment(tmp_path):
    parent = tw.load_config({"format": "csv", "out_dir": "out", "max_files": 3}, environ={})
    value = _config.for_children(parent)
    child = tw.load_config(_config.from_autostart(value),
                           environ={"TORCHWRAPPER_FORMAT": "json", "TORCHWRAPPER_MAX_FILES": "9"})
    assert child == dict(parent, out_dir=os.path.abspath("out"))
    # the other forms of $TORCHWRAPPER_AUTOSTART: 1 (the environment's), a file's path
    assert _config.from_autostart("1") == {}
    assert _config.from_autostart(write(tmp_path / "a.json", {"format": "csv"})) == {"format": "csv"}
    with pytest.raises(ValueError, match=r"^\$TORCHWRAPPER_AUTOSTART is not valid JSON .*: '\{bad'$"):
        _config.from_autostart("{bad")
    with pytest.raises(ValueError, match=r"^\$TORCHWRAPPER_AUTOSTART: cannot read the config file"):
        _config.from_autostart(str(tmp_path / "missing.json"))


def test_run_puts_its_command_line_over_the_environment(tmp_path, env):
    """End to end: `run` under TORCHWRAPPER_* variables that disagree with its options."""
    (tmp_path / "prog.py").write_text("import torch\ntorch.ones(2).sum()\n")
    write(tmp_path / "cli.json", {"format": "csv", "out_dir": "from-file", "max_files": 2})
    environ = dict(env, TORCHWRAPPER_FORMAT="json", TORCHWRAPPER_MAX_FILES="9", TORCHWRAPPER_ON_FULL="wait")
    result = subprocess.run([sys.executable, "-m", "torchwrapper", "run", "--no-report", "--config", "cli.json",
                             "--set", "max_files=3", "-o", "out", "prog.py"], cwd=tmp_path, env=environ,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    with open(tmp_path / "out" / "manifest.json") as f:
        config = json.load(f)["config"]
    assert (config["format"], config["max_files"], config["on_full"], config["out_dir"]) == ("csv", 3, "wait", "out")
    result = subprocess.run([sys.executable, "-m", "torchwrapper", "run", "--config", "missing.json", "prog.py"],
                            cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1
    assert result.stderr.strip() == ("torchwrapper: --config: cannot read the config file 'missing.json': "
                                     "No such file or directory")


def test_no_module_of_the_package_imports_the_command_line():
    """__main__ is a leaf: the configuration's sources live in _config, which everyone imports."""
    importers = []
    for name in sorted(os.listdir(PACKAGE)):
        if not name.endswith(".py") or name == "__main__.py":
            continue
        with open(os.path.join(PACKAGE, name)) as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[-1] == "__main__":
                importers.append(name)
            if isinstance(node, ast.ImportFrom) and node.module is None and \
                    any(alias.name == "__main__" for alias in node.names):
                importers.append(name)
    assert importers == []
