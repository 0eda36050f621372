#!/bin/sh
# SPDX-License-Identifier: MIT
# make check-valgrind: each C test program under valgrind --leak-check=full; any error or any leak
# (definite, indirect or possible) fails. The programs are libtool wrappers: run the real binary.
set -eu
if ! command -v valgrind >/dev/null 2>&1; then
    echo "check-valgrind needs valgrind (Debian: apt-get install valgrind)" >&2
    exit 1
fi
status=0
export TW_UNDER_VALGRIND=1 # test_clock skips its accuracy check, which valgrind's slow time defeats
for test in "$@"; do
    log="$test.valgrind.log"
    if $LIBTOOL --mode=execute valgrind -q --leak-check=full --show-leak-kinds=definite,indirect,possible \
            --errors-for-leak-kinds=definite,indirect,possible --error-exitcode=99 "$test" >"$log" 2>&1; then
        echo "valgrind: $test: clean"
    else
        status=1
        echo "valgrind: $test: FAILED (see $log)"
        grep -E "==[0-9]+==" "$log" | head -40
    fi
done
exit $status
