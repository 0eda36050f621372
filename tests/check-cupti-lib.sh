#!/bin/sh
# SPDX-License-Identifier: MIT
# make check-cupti-lib: the real CUPTI library, without a GPU. For each of the CUPTI wheels torch's
# CUDA builds install (CUDA 12.8: nvidia-cuda-cupti-cu12; CUDA 13.0: nvidia-cuda-cupti, with the
# runtime's and the compiler's headers that cupti.h includes), in a throwaway virtualenv:
#   - configure finds cupti.h in the wheel by itself (PYTHON's site-packages, before any toolkit);
#   - the library, the fake CUPTI and the C tests build against that header, which checks at build
#     time the entry points' types and the activity records' layouts (src/gpu/cupti_layout.h,
#     src/gpu/cupti_lib.c), then the fake CUPTI's tests pass with records laid out as that release's;
#   - the Python side finds libcupti.so.* in the wheel's layout as it would beside a CUDA torch, and
#     the C side loads it with every entry point and reads its version; starting GPU timing without a
#     driver fails with one line naming the cause, and CPU records are still written
#     (tests/c/test_cupti_lib.c).
# About 2 minutes here; the wheels are downloaded once (pip's cache).
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
work=${CUPTI_LIB_DIR:-$src/build/cupti-lib}
build=$work/tree
# the fake CUPTI's tests (Makefile.am's GPU_C_TESTS)
gpu_tests="tests/c/test_gpu tests/c/test_gpu_attribution"
mkdir -p "$work"
. "$src/tests/copy-tree.sh"
status=0
for flavour in "cu12 cuda_cupti nvidia-cuda-cupti-cu12==12.8.90 nvidia-cuda-runtime-cu12==12.8.90 nvidia-cuda-nvcc-cu12==12.8.93" \
               "cu13 cu13 nvidia-cuda-cupti==13.0.85 nvidia-cuda-runtime==13.0.96 nvidia-cuda-crt==13.0.88"; do
    # shellcheck disable=SC2086
    set -- $flavour
    name=$1 dir=$2
    shift 2
    venv=$work/$name-venv
    rm -rf "$venv"
    "$python" -m venv "$venv"
    if ! "$venv/bin/python" -m pip install -q --no-deps --disable-pip-version-check "$@" >"$work/$name-pip.log" 2>&1; then
        echo "cupti-lib: $name: pip install $* failed:"; cat "$work/$name-pip.log"
        exit 1
    fi
    site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    ./configure -q PYTHON="$venv/bin/python" --without-libtorch >/dev/null
    if ! grep -q "GPU timing (CUPTI) ... yes (CUPTI headers: $site/nvidia/$dir/include" config.log; then
        echo "cupti-lib: $name: configure did not take cupti.h from the wheel:"; grep -A2 "for CUPTI headers" config.log
        status=1
        continue
    fi
    make -s clean >/dev/null
    if ! make -s -j"$(nproc)" >"$work/$name-make.log" 2>&1 ||
       ! make -s -j"$(nproc)" $gpu_tests tests/c/test_cupti_lib tests/c/fake_cupti.la >>"$work/$name-make.log" 2>&1; then
        echo "cupti-lib: $name: the build against $site/nvidia/$dir/include failed:"; tail -30 "$work/$name-make.log"
        status=1
        continue
    fi
    # the library torchwrapper would pick beside a CUDA torch of this release (the first candidate)
    lib=$(PYTHONPATH="$build/build/python" "$venv/bin/python" -c \
        'from torchwrapper._profile import cupti_candidates; print((cupti_candidates() or [""])[0])')
    case $lib in
    "$site"/nvidia/"$dir"/lib/libcupti.so.*) ;;
    *) echo "cupti-lib: $name: cupti_candidates() did not find the wheel's library (got '$lib')"; status=1; continue ;;
    esac
    # (check-TESTS with these programs alone: make check would build every other C test and fuzz replay)
    if TW_REAL_CUPTI=$lib make -s check-TESTS TESTS="tests/c/test_cupti_lib $gpu_tests" \
            check_PROGRAMS="tests/c/test_cupti_lib $gpu_tests" check_LTLIBRARIES=tests/c/fake_cupti.la >/dev/null 2>&1; then
        echo "cupti-lib: $name ($*): $(grep '^# ' tests/c/test_cupti_lib.log | cut -c3-)"
        for t in $gpu_tests; do
            echo "cupti-lib: $name: the fake CUPTI's tests with this release's records: ${t#tests/c/}: $(grep -E 'PASSED|FAILED' "$t.log" | head -n 1)"
        done
    else
        echo "cupti-lib: $name: FAILED"; for t in tests/c/test_cupti_lib $gpu_tests; do cat "$t.log"; done
        status=1
    fi
done
exit $status
