#!/bin/sh
# SPDX-License-Identifier: MIT
# Runs the pytest suite against the build tree's package (build/python/torchwrapper).
set -eu
if ! "$PYTHON" -c "import pytest, torch" 2>/dev/null; then
    echo "SKIP: $PYTHON lacks pytest or torch (run ./quickstart test, or pip install torch==2.13.0 pytest)"
    exit 77
fi
cd "$top_srcdir"
PYTHONPATH="$PY_STAGE${PYTHONPATH:+:$PYTHONPATH}" exec "$PYTHON" -m pytest -q -p no:cacheprovider tests/python
