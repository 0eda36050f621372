# SPDX-License-Identifier: MIT
import os
import sys

import pytest

import torchwrapper as tw


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
