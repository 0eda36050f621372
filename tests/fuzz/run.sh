#!/bin/sh
# SPDX-License-Identifier: MIT
# make fuzz: builds each harness with clang's libFuzzer and ASan/UBSan, and runs it FUZZ_SECONDS
# (default 60) from its kept corpus (tests/fuzz-corpus/NAME). New inputs go to build/fuzz/NAME/;
# a crash is saved as build/fuzz/NAME-crash-*: add it to tests/fuzz-corpus/NAME/ once fixed, and
# `make check` replays it from then on. FUZZ_ONLY="size config" runs only those harnesses.
set -eu
: "${top_srcdir:?}" "${top_builddir:?}"
seconds=${FUZZ_SECONDS:-60}
CC_FUZZ=${CC_FUZZ:-clang}
if ! command -v "$CC_FUZZ" >/dev/null 2>&1; then
    echo "make fuzz needs clang with libFuzzer (Debian: apt-get install clang)" >&2
    exit 1
fi
out="$top_builddir/build/fuzz"
mkdir -p "$out"
sources=$(find "$top_srcdir/src" -name '*.c' ! -path '*/report/*' | sort)
libs="$(pkg-config --libs libcjson zlib) -lcsv -lpthread -lm"
status=0
for spec in reader_csv:fuzz_reader.c:-DFUZZ_CSV reader_json:fuzz_reader.c: size:fuzz_size.c: \
            name_spec:fuzz_name_spec.c: config:fuzz_config.c: shapes:fuzz_shapes.c:; do
    name=${spec%%:*}; rest=${spec#*:}; file=${rest%%:*}; define=${rest#*:}
    case " ${FUZZ_ONLY:-$name} " in *" $name "*) ;; *) continue ;; esac
    bin="$out/fuzz_$name"
    # shellcheck disable=SC2086
    "$CC_FUZZ" -g -O1 -std=c11 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
        -I"$top_srcdir/include" -I"$top_srcdir/src" -I"$top_builddir" $(pkg-config --cflags libcjson) -DFUZZ_NAME="\"$name\"" $define \
        $sources "$top_srcdir/tests/fuzz/$file" $libs -o "$bin"
    mkdir -p "$out/$name"
    echo "==> fuzzing $name for ${seconds}s"
    if "$bin" -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$out/$name-" \
            "$out/$name" "$top_srcdir/tests/fuzz-corpus/$name" >"$out/$name.log" 2>&1; then
        grep -E "stat::number_of_executed_units|stat::new_units_added" "$out/$name.log" | tr '\n' ' '
        echo
    else
        status=1
        echo "!! $name: a crash or an invariant failure, see $out/$name.log and $out/$name-*" >&2
        tail -30 "$out/$name.log" >&2
    fi
done
exit $status
