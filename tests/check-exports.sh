#!/bin/sh
# SPDX-License-Identifier: MIT
# The library exports only tw_ symbols, and the extension only its init function.
set -eu
lib="$top_builddir/.libs/libtorchwrapper.so"
ext=$(ls "$top_builddir"/python/.libs/_core*.so | head -n 1)
status=0
bad=$(nm -D --defined-only "$lib" | awk '$2 ~ /[TDBRV]/ {print $3}' | grep -v '^tw_' || true)
if [ -n "$bad" ]; then echo "libtorchwrapper exports non-tw_ symbols:"; echo "$bad"; status=1; fi
count=$(nm -D --defined-only "$lib" | awk '$2 ~ /[TDBRV]/ {print $3}' | grep -c '^tw_' || true)
[ "$count" -ge 10 ] || { echo "expected the tw_ API to be exported, found $count symbols"; status=1; }
bad=$(nm -D --defined-only "$ext" | awk '$2 ~ /[TDBRV]/ {print $3}' | grep -v '^PyInit__core$' || true)
if [ -n "$bad" ]; then echo "the extension exports more than PyInit__core:"; echo "$bad"; status=1; fi
[ $status -eq 0 ] && echo "exports: $count tw_ symbols in libtorchwrapper, PyInit__core in the extension"
exit $status
