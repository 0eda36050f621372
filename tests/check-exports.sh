#!/bin/sh
# SPDX-License-Identifier: MIT
# The library exports only tw_ symbols, exactly those its installed headers declare TW_API (what
# only the library itself calls is declared in private headers of src/ and stays hidden), and the
# extension only its init function.
set -eu
lib="$top_builddir/.libs/libtorchwrapper.so"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ext=$(ls "$top_builddir"/python/.libs/_core*.so | head -n 1)
status=0
bad=$(nm -D --defined-only "$lib" | awk '$2 ~ /[TDBRV]/ {print $3}' | grep -v '^tw_' || true)
if [ -n "$bad" ]; then echo "libtorchwrapper exports non-tw_ symbols:"; echo "$bad"; status=1; fi
count=$(nm -D --defined-only "$lib" | awk '$2 ~ /[TDBRV]/ {print $3}' | grep -c '^tw_' || true)
[ "$count" -ge 10 ] || { echo "expected the tw_ API to be exported, found $count symbols"; status=1; }
# The declared names: "TW_API <type> name(" across the headers, a declaration's lines joined.
cat "$top_srcdir"/include/torchwrapper/*.h | tr '\n' ' ' | grep -o 'TW_API [^;(]*(' | sed 's/ *($//; s/.*[ *]//' |
    grep '^tw_' | LC_ALL=C sort -u > "$tmp/declared"
nm -D --defined-only "$lib" | awk '$2 ~ /[TDBRV]/ {print $3}' | LC_ALL=C sort -u > "$tmp/exported"
bad=$(LC_ALL=C comm -13 "$tmp/declared" "$tmp/exported")
if [ -n "$bad" ]; then echo "libtorchwrapper exports what include/torchwrapper does not declare TW_API:"; echo "$bad"; status=1; fi
bad=$(LC_ALL=C comm -23 "$tmp/declared" "$tmp/exported")
if [ -n "$bad" ]; then echo "include/torchwrapper declares TW_API what libtorchwrapper does not export:"; echo "$bad"; status=1; fi
bad=$(nm -D --defined-only "$ext" | awk '$2 ~ /[TDBRV]/ {print $3}' | grep -v '^PyInit__core$' || true)
if [ -n "$bad" ]; then echo "the extension exports more than PyInit__core:"; echo "$bad"; status=1; fi
[ $status -eq 0 ] && echo "exports: $count tw_ symbols in libtorchwrapper, PyInit__core in the extension"
exit $status
