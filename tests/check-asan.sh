#!/bin/sh
# SPDX-License-Identifier: MIT
# make check-asan: builds a copy of the tree with AddressSanitizer and UndefinedBehaviorSanitizer
# (and LeakSanitizer, on by default with ASan) and runs the cmocka tests there; with
# ASAN_PYTEST=1 also the pytest suite, the extension loaded into the regular interpreter with the
# sanitizer runtimes preloaded (leak detection off there: the interpreter itself keeps memory).
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
build=${ASAN_BUILD_DIR:-$src/build/asan}
. "$src/tests/copy-tree.sh"
flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g -O1"
./configure -q PYTHON="$python" CFLAGS="$flags" LDFLAGS="-fsanitize=address,undefined" >/dev/null
status=0
# Every C test and the fuzz corpora's replays (the pytest suite is ASAN_PYTEST's). Without it, only what
# they link is built: the C library, the test programs and the fake CUPTI, not the extension or the
# libtorch layer (compiling those against torch's headers with ASan took 2 of this check's 5 minutes).
c_tests=$(make -s print-c-tests)
if [ "${ASAN_PYTEST:-0}" = 1 ]; then
    make -s -j"$(nproc)" >/dev/null 2>&1
fi
# The tests that fork a process with threads skip themselves (TW_UNDER_ASAN, tests/c/tw_test.h): this
# ASan's allocator is not fork-safe. A test that hangs all the same fails after 10 minutes, by name.
TW_UNDER_ASAN=1 make -s -j"$(nproc)" check-TESTS TESTS="$c_tests" LOG_COMPILER="timeout -k 10 600" >/dev/null 2>&1 ||
    status=$?
for log in tests/c/*.log tests/fuzz/*.log; do
    if grep -q -E "ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:" "$log"; then
        echo "sanitizer report in $log:"; cat "$log"; status=1
    fi
    echo "asan: ${log%.log}: $(grep -E 'PASSED|FAILED|inputs replayed' "$log" | head -n 1)"
    if grep -q ":test-result: \(FAIL\|ERROR\)" "${log%.log}.trs" 2>/dev/null; then
        echo "asan: ${log%.log} FAILED (exit status 124 means it ran past 10 minutes):"; tail -n 30 "$log"; status=1
    fi
done
if [ "${ASAN_PYTEST:-0}" = 1 ]; then
    preload="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
    LD_PRELOAD="$preload" ASAN_OPTIONS=detect_leaks=0 PYTHONPATH="$build/build/python" \
        "$python" -m pytest -q -p no:cacheprovider tests/python || status=$?
fi
exit $status
