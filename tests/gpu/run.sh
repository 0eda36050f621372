#!/bin/sh
# SPDX-License-Identifier: MIT
# On a GPU machine with CUDA, CUPTI (the nvidia-cuda-cupti wheel), a CUDA build of torch and Python
# under python3, but no package manager and no network: builds torchwrapper from what
# tests/gpu/prepare.sh put in .gpu/, then runs the GPU figures (tests/gpu/figures.py, side by side
# with torch.profiler), the GPU tests (tests/python/test_gpu.py) and a share of the suite on that
# machine's torch. Everything it prints and the figures' JSON go to OUT (about 4 minutes on an H200).
#   sh tests/gpu/run.sh OUT
# Each stage has a time limit (seconds): TW_GPU_BUILD_S, TW_GPU_FIGURES_S, TW_GPU_BACKWARD_S,
# TW_GPU_TESTS_S, TW_GPU_SUITE_S, TW_GPU_OWN_COST_S; TW_GPU_STAGES (default "figures backward tests
# suite"; "own_cost" too) picks them. own_cost: the transformers models through `run` with its defaults
# (GPU timing on) against the plain program on the GPU, interleaved processes, the profiler's own
# estimate beside (tests/bench/bench_hf.py, BENCH_HF_DEVICE=cuda; its BENCH_HF_* sizes pass through).
set -u
OUT=${1:?usage: run.sh OUT}
mkdir -p "$OUT"
TOP=$(cd "$(dirname "$0")/../.." && pwd)
DEPS=/tmp/tw-deps
SRC=/tmp/tw-src
LIBDIR=$DEPS/usr/lib/x86_64-linux-gnu
say() { echo "== $(date +%T) $*"; }

say "environment"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.is_available())"
gcc --version | head -1; g++ --version | head -1
python3 -c "import site; print(site.getsitepackages())"

say "unpacking libcsv, cJSON and zlib's headers into $DEPS"
mkdir -p "$DEPS"
for deb in "$TOP"/.gpu/*.deb; do
    dpkg -x "$deb" "$DEPS" 2>/dev/null || (cd /tmp && ar x "$deb" data.tar.xz && tar xJf data.tar.xz -C "$DEPS")
done

say "build"
rm -rf "$SRC" && mkdir -p "$SRC"
tar xzf "$TOP"/.gpu/torchwrapper-*.tar.gz -C "$SRC" --strip-components=1
cd "$SRC" || exit 1
export LD_LIBRARY_PATH="$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
timeout "${TW_GPU_BUILD_S:-240}" sh -c "./configure -q PYTHON=python3 CPPFLAGS='-I$DEPS/usr/include' \
    LDFLAGS='-L$LIBDIR -Wl,-rpath,$LIBDIR' CJSON_CFLAGS='-I$DEPS/usr/include/cjson' CJSON_LIBS=-lcjson \
    ZLIB_CFLAGS='-I$DEPS/usr/include' ZLIB_LIBS=-lz && make -s -j\$(nproc) >$OUT/make.log 2>&1" \
    || { tail -40 "$OUT/make.log" config.log 2>/dev/null | tail -80; exit 1; }
sed -n '/^  GPU timing/p;/^  libtorch layer/p' config.log  # configure's summary: what was built
export PYTHONPATH="$SRC/build/python"
python3 -c "import tempfile, torch, torchwrapper as tw; p = tw.profile(out_dir=tempfile.mkdtemp(), gpu='on'); p.start(); torch.randn(2, device='cuda').sum(); p.stop(); print({k: v for k, v in p.stats().items() if k.startswith(('gpu', 'cupti', 'backward'))})"

cd "$TOP" || exit 1
STAGES=${TW_GPU_STAGES:-figures backward tests suite}
export top_builddir="$SRC"
case " $STAGES " in *" figures "*)
say "figures (side by side with torch.profiler)"
# (the loops side by side with torch.profiler are test_gpu.py's below: its figures go to test-gpu.json)
PYTHONUNBUFFERED=1 timeout "${TW_GPU_FIGURES_S:-300}" python3 tests/gpu/figures.py "$OUT/gpu-figures.json" \
    ${TW_GPU_FIGURES_ARGS:---sections overhead,launch,drops,conflict}
esac
case " $STAGES " in *" backward "*)
say "inside backward on the GPU (side by side with torch.profiler)"
PYTHONUNBUFFERED=1 timeout "${TW_GPU_BACKWARD_S:-240}" python3 tests/gpu/backward.py "$OUT/backward-gpu.json" 2>&1 \
    | grep -v "^\[transformers\]"
esac
case " $STAGES " in *" tests "*)
say "tests/python/test_gpu.py"
PYTHONUNBUFFERED=1 TW_GPU_BENCH_JSON="$OUT/test-gpu.json" timeout "${TW_GPU_TESTS_S:-200}" \
    python3 -m pytest -q -s -p no:cacheprovider -p no:randomly tests/python/test_gpu.py 2>&1 | tail -40
esac
case " $STAGES " in *" suite "*)
say "a share of the suite on this machine's torch ($(python3 -c 'import torch; print(torch.__version__)'))"
PYTHONUNBUFFERED=1 timeout "${TW_GPU_SUITE_S:-150}" python3 -m pytest -q -p no:cacheprovider -p no:randomly \
    -n 8 tests/python/test_api.py tests/python/test_api_records.py tests/python/test_backward.py \
    tests/python/test_backward_views.py tests/python/test_wrapper.py tests/python/test_model_watch.py \
    tests/python/test_args.py tests/python/test_growth.py tests/python/test_run.py tests/python/test_report.py \
    tests/python/test_memory.py \
    2>&1 | grep -E "^(FAILED|ERROR)|passed|failed" | tail -30
# the forked child's nodes with real CUPTI (missing there once): its output in full
PYTHONUNBUFFERED=1 timeout 60 python3 -m pytest -q -p no:cacheprovider -p no:randomly -k forked \
    tests/python/test_backward.py 2>&1 | tail -30
esac
case " $STAGES " in *" own_cost "*)
say "own cost on the GPU: the transformers models through run, defaults, against plain"
PYTHONUNBUFFERED=1 BENCH_HF_DEVICE=cuda BENCH_HF_PARTS=run BENCH_HF_RUN_MODES=defaults BENCH_HF_CALLGRIND=0 \
    timeout "${TW_GPU_OWN_COST_S:-400}" python3 tests/bench/bench_hf.py 2>&1 | tee "$OUT/own-cost-gpu.txt" | tail -12
esac
say "done"
