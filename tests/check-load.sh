#!/bin/sh
# SPDX-License-Identifier: MIT
# make check-load: the pytest suite (tests/pytest.sh, against the build tree's package) beside twice as
# many busy processes as there are CPUs, in the reverse of the files' order (TW_TEST_ORDER=reverse):
# what a user's machine under other work does to the tests. Every test must pass here as alone: a test
# that waits on a time instead of an event, bounds a wall time, or needs another test to run first
# fails here. The busy processes are this script's children, killed when it exits, done or interrupted.
set -eu
cpus=$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
busy=$((2 * cpus))
pids=""
stop_busy() {
    for pid in $pids; do kill "$pid" 2>/dev/null || true; done
    for pid in $pids; do wait "$pid" 2>/dev/null || true; done
    pids=""
}
trap stop_busy EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
i=0
while [ "$i" -lt "$busy" ]; do
    sh -c 'while :; do :; done' &
    pids="$pids $!"
    i=$((i + 1))
done
echo "check-load: $busy busy processes beside the suite ($cpus CPUs):$pids"
start=$(date +%s)
status=0
TW_TEST_ORDER=reverse sh "$top_srcdir/tests/pytest.sh" || status=$?
echo "check-load: pytest exited $status after $(($(date +%s) - start)) s under load"
exit $status
