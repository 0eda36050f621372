#!/bin/sh
# SPDX-License-Identifier: MIT
# make check-headers: (1) every header of src/ and python/core/ (all their folders) compiles alone
# (after config.h, as every .c file starts), so that it says what it needs instead of relying on what
# its includer included before; (3) each .c file of python/core/ and src/ with a header of its own
# includes it first, after config.h in src/ (the header, not its includer, says what it needs); (4)
# no two headers of the tree (src/, python/core/, include/, libtorch/, tests/, and the configure's
# config.h) share a name, so that a name says which header it is; (5) every header ships. The CUPTI
# headers are checked only in a build with CUPTI headers. (2), no circle of files that use each
# other, is make check-layers' (tests/check-layers.py), with the directions between folders.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
build=${top_builddir:-$src}
cc=${CC:-cc}
python_cppflags=${PYTHON_CPPFLAGS:-}
cupti_cppflags=${CUPTI_CPPFLAGS:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0

dirs=$(find "$src/src" "$src/python/core" -type d ! -name '.*' | sort)
for h in $(for d in $dirs; do ls "$d"/*.h 2>/dev/null; done); do
    case $h in
    */cupti_*.h)
        grep -q '^#define TW_HAVE_CUPTI' "$build/config.h" || continue ;;
    esac
    printf '#include "config.h"\n#include "%s"\n' "$h" > "$tmp/alone.c"
    if ! $cc -std=c11 -fsyntax-only -Wall -I"$build" -I"$src/include" -I"$src/src" -I"$src/python/core" -I"$src" $python_cppflags $cupti_cppflags \
        "$tmp/alone.c" > "$tmp/err" 2>&1; then
        echo "check-headers: ${h#$src/} does not compile alone:"
        head -n 5 "$tmp/err"
        status=1
    fi
done

# The local headers a file includes, as written ("x.h", "torchwrapper/x.h", "../../libtorch/x.h").
includes() {
    sed -n 's/^#include "\([^"]*\)".*/\1/p' "$1"
}

for c in $(find "$src/python/core" -name '*.c' | sort); do
    own=$(basename "$c" .c).h
    [ -f "$(dirname "$c")/$own" ] || continue
    first=$(includes "$c" | head -n 1)
    if [ "$first" != "$own" ]; then
        echo "check-headers: ${c#$src/} includes $first first, not its own header $own"
        status=1
    fi
done
# (3) for the library and tw-report: each .c file of src/ (all its folders) starts with config.h
# (what configure found decides what the system headers declare), then its own header when it has
# one (x.h beside it, or include/torchwrapper/x.h for a library source x.c), before any other include
# (a conditional between them, #ifdef TW_HAVE_CUPTI, is no include).
for c in $(find "$src/src" -name '*.c' | sort); do
    dir=$(dirname "$c")
    base=$(basename "$c" .c)
    own=""
    if [ -f "$dir/$base.h" ]; then
        own=$base.h
    elif [ -f "$src/include/torchwrapper/$base.h" ]; then
        own=torchwrapper/$base.h
    fi
    want='"config.h"'
    [ -n "$own" ] && want="$want \"$own\""
    got=$(sed -n 's/^#include \([<"][^>"]*[>"]\).*/\1/p' "$c" | head -n $(echo $want | wc -w) | tr '\n' ' ' | sed 's/ $//')
    if [ "$got" != "$want" ]; then
        echo "check-headers: ${c#$src/} begins with the includes $got, not $want"
        status=1
    fi
done
# (4) one header per name: "config.h" is the configure's only
names=$( (cd "$src" && find src python/core include libtorch tests -name '*.h' -exec basename {} \;; echo config.h) | sort)
for name in $(echo "$names" | uniq -d); do
    echo "check-headers: two headers named $name:" $(cd "$src" && find src python/core include libtorch tests -name "$name")
    status=1
done
# (5) every header ships: named in Makefile.am (a _SOURCES, _HEADERS or EXTRA_DIST list), else the sdist
# lacks it and a wheel built from it fails to compile (src/api_text.h did, caught only by check-install)
for h in $(cd "$src" && find src python/core include libtorch tests/c -name '*.h' | sort); do
    if ! grep -q -F -w "$h" "$src/Makefile.am"; then
        echo "check-headers: $h is not named in Makefile.am: it would not ship in the sdist"
        status=1
    fi
done
[ $status -eq 0 ] && echo "check-headers: every header compiles alone, each .c file includes its own header first (after config.h in src/), no two headers share a name, every header ships"
exit $status
