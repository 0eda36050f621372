# SPDX-License-Identifier: MIT
"""API names depend on the object and torch's public module tree only: the same in a fresh process,
after a profiling session, while one runs, and whatever torch submodules were imported first (each
case in its own interpreter, so that nothing this test process did can leak into it)."""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PROBE = os.path.join(HERE, "api_names_probe.py")


def _probe(*args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE] + sys.path))
    result = subprocess.run([sys.executable, PROBE, *args], capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def paths_file(tmp_path_factory):
    """Every name that discovery gives in a fresh process (thousands: the whole table)."""
    paths = _probe("fresh", "-")
    assert len(paths) > 3000 and "torch.optim.Adam.step" in paths and "torch.nn.Linear.forward" in paths
    path = tmp_path_factory.mktemp("names") / "paths.json"
    path.write_text(json.dumps(paths))
    return str(path)


@pytest.fixture(scope="module")
def fresh(paths_file):
    return _probe("fresh", paths_file)


def test_in_a_fresh_process_every_public_name_names_its_object(fresh):
    # getAPIName(the object at name) == name: the name is the object's own, for the whole table
    wrong = {k: v for k, v in fresh["names"].items() if k.startswith("path:") and v != k[len("path:"):]}
    assert wrong == {}
    table = {k: v for k, v in fresh["names"].items() if not k.startswith("path:")}
    assert table == {k: k for k in table}
    assert "torch.optim.Adam.step" in fresh["recorded"] and "torch.nn.Linear.forward" in fresh["recorded"]


@pytest.mark.parametrize("scenario", ["after-session", "during-session", "import:torch.optim.adam",
                                      "import:torch._dynamo", "import:torch.distributed"])
def test_names_do_not_depend_on_what_ran_or_was_imported_before(scenario, paths_file, fresh):
    got = _probe(scenario, paths_file)
    assert got["recorded"] == fresh["recorded"]
    differ = {k: (fresh["names"].get(k.replace("wrapped:", "path:")), v) for k, v in got["names"].items()
              if v != fresh["names"].get(k.replace("wrapped:", "path:"))}
    assert differ == {}
