#!/bin/sh
# SPDX-License-Identifier: MIT
# Runs the pytest suite against the build tree's package (build/python/torchwrapper).
set -eu
if ! "$PYTHON" -c "import pytest, torch" 2>/dev/null; then
    echo "SKIP: $PYTHON lacks pytest or torch (run ./quickstart test, or pip install torch==2.13.0 pytest)"
    exit 77
fi
cd "$top_srcdir"
# With pytest-randomly (./quickstart installs it) the tests run in a new random order each time, so
# that no test can come to rely on another having run first; the seed is printed at the top of the
# log, and TW_TEST_SEED=N replays that order.
# TW_TEST_ORDER=reverse runs them in the reverse of the files' order instead (conftest.py; make check-load).
order=""
if [ "${TW_TEST_ORDER:-}" = reverse ]; then
    echo "pytest order: reverse (TW_TEST_ORDER=reverse)"
    order="-p no:randomly"
elif "$PYTHON" -c "import pytest_randomly" 2>/dev/null; then
    seed=${TW_TEST_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
    echo "pytest order: --randomly-seed=$seed (TW_TEST_SEED=$seed replays it)"
    order="-p randomly --randomly-seed=$seed"
fi
# With pytest-xdist (./quickstart installs it) the files run on one worker process per CPU
# (TW_TEST_JOBS=N for N, 0 for none), each file on one worker so that its fixtures run once: most
# tests wait on a child interpreter or on one core's work, and every test must pass under load
# anyway. The 25 slowest are listed at the end.
jobs=""
if "$PYTHON" -c "import xdist" 2>/dev/null && [ "${TW_TEST_JOBS:-}" != 0 ]; then
    jobs="-n ${TW_TEST_JOBS:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)} --dist loadfile"
fi
PYTHONPATH="$PY_STAGE${PYTHONPATH:+:$PYTHONPATH}" exec "$PYTHON" -m pytest -q -p no:cacheprovider $order $jobs \
    --durations=25 tests/python
