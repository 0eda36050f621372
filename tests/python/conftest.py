# SPDX-License-Identifier: MIT
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
