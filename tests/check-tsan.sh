#!/bin/sh
# SPDX-License-Identifier: MIT
# make check-tsan: builds a copy of the tree with ThreadSanitizer (the C library, the extension and
# the libtorch layer) and runs (1) the cmocka tests, whose recorder and writer tests run threads,
# and (2) tests/tsan_backward.py in the regular interpreter with the TSan runtime preloaded: backward
# passes on several threads without the GIL (autograd's nodes recorded there) while sessions start
# and stop on another, which is the handshake of python/core/below/backward.c (every other session timing
# the GPU against the fake CUPTI, so that nodes push their ids there). Any TSan report fails it.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
build=${TSAN_BUILD_DIR:-$src/build/tsan}
. "$src/tests/copy-tree.sh"
flags="-fsanitize=thread -fno-omit-frame-pointer -g -O1"
./configure -q PYTHON="$python" CFLAGS="$flags" CXXFLAGS="$flags" LDFLAGS="-fsanitize=thread" >/dev/null
make -s -j"$(nproc)" >/dev/null 2>&1
status=0
c_tests=$(make -s print-c-tests | tr ' ' '\n' | grep -v fuzz | tr '\n' ' ')
# The C tests that fork a threaded process skip themselves (TW_UNDER_TSAN): TSan cannot follow such
# a child (it stops it: "dup thread", or "starting new threads after multi-threaded fork").
# A test that hangs fails after 10 minutes, by name, rather than holding CI until its own limit.
TW_UNDER_TSAN=1 TSAN_OPTIONS="halt_on_error=0 second_deadlock_stack=1" make -s check TESTS="$c_tests" \
    LOG_COMPILER="timeout -k 10 600" >/dev/null 2>&1 || status=$?
for log in tests/c/*.log; do
    if grep -q "WARNING: ThreadSanitizer" "$log"; then
        echo "ThreadSanitizer report in $log:"; cat "$log"; status=1
    fi
    echo "tsan: ${log%.log}: $(grep -E 'PASSED|FAILED' "$log" | head -n 1)"
done
# The interpreter and torch are not instrumented: TSan sees the accesses of our code (and the
# libc calls it intercepts), which is where the contract lives. Reports go to a file per process.
preload=$(gcc -print-file-name=libtsan.so)
rm -f tsan-python.*
if timeout -k 10 900 env TW_CUPTI_LIBRARY="$build/tests/c/.libs/fake_cupti.so" LD_PRELOAD="$preload" \
    TSAN_OPTIONS="log_path=$build/tsan-python report_signal_unsafe=0 ignore_noninstrumented_modules=1 die_after_fork=0" \
    PYTHONPATH="$build/build/python" "$python" "$src/tests/tsan_backward.py"; then
    echo "tsan: tests/tsan_backward.py: ran"
else
    echo "tsan: tests/tsan_backward.py failed (exit status $?; 124: it ran past 15 minutes)"; status=1
fi
for report in tsan-python.*; do
    [ -f "$report" ] || continue
    if grep -q "WARNING: ThreadSanitizer" "$report"; then
        echo "ThreadSanitizer report from tests/tsan_backward.py ($report):"; cat "$report"; status=1
    fi
done
exit $status
