# SPDX-License-Identifier: MIT
import os
import sys

import pytest

import torchwrapper as tw


def pytest_collection_modifyitems(config, items):
    """TW_TEST_ORDER=reverse runs the files, and the tests in each, in the reverse of their order
    (make check-load; pytest.sh then leaves pytest-randomly out): a test that needs another to have run
    before it fails one way or the other."""
    if os.environ.get("TW_TEST_ORDER") == "reverse":
        items.reverse()


@pytest.fixture
def session():
    """A recording session, stopped after the test if the test did not stop it."""
    s = tw.Session()
    s.start()
    yield s
    if s.active:
        s.stop()


def stop_and_read(session):
    session.stop()
    return tw.records(session)


STAGE = os.path.dirname(os.path.dirname(os.path.abspath(tw.__file__)))
PTH = os.path.join(STAGE, "torchwrapper-autostart.pth")


@pytest.fixture
def env(tmp_path):
    """An environment whose Python processes read the .pth of the torchwrapper under test (the
    build tree stages it in build/python; a sitecustomize.py makes that a site directory), with no
    TORCHWRAPPER_* or rank variables of the caller's."""
    assert os.path.exists(PTH), f"{PTH} is missing: make stages it beside the package"
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    (site_dir / "sitecustomize.py").write_text(f"import site\nsite.addsitedir({STAGE!r})\n")
    environ = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site_dir)] + sys.path))
    for key in [k for k in environ if k.startswith("TORCHWRAPPER_") or k in ("RANK", "WORLD_SIZE")]:
        del environ[key]
    return environ
