#!/bin/sh
# SPDX-License-Identifier: MIT
# make check-install: the pip paths, end to end, in a fresh virtualenv holding torch==2.13.0:
#   pip install .                    -> import, the README's example, tw-report on PATH, pip uninstall
#   python -m build --sdist          -> a wheel built from the sdist (no Autotools needed): its contents,
#                                       installed, the same checks (libraries found without LD_LIBRARY_PATH)
#   pip install -e .                 -> imports from the checkout's build tree, uninstalls cleanly
#   missing build tools or libraries -> pip's error names the Debian package, with no traceback
# Slow (a torch install and two builds, 7-9 minutes on 2 cores): not part of make check. (pip wheel . is
# the build of pip install ., PEP 517's build_wheel: its own build here took 2.5 more minutes of CI.)
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
work=$(mktemp -d "${TMPDIR:-/tmp}/tw-check-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
venv=$work/venv
status=0 passed=0 failed=0 skipped=0
fail() { echo "FAIL: $*"; status=1; failed=$((failed + 1)); }
ok() { echo "ok: $*"; passed=$((passed + 1)); }
skip() { echo "SKIP: $*"; skipped=$((skipped + 1)); }

# Seconds since the epoch with a fraction, for the timings printed below.
now() { "$python" -c 'import time; print("%.1f" % time.time())'; }
elapsed() { "$python" -c "print('%.1f' % ($(now) - $1))"; }

"$python" -m venv "$venv"
pip() { "$venv/bin/python" -m pip --disable-pip-version-check --no-cache-dir "$@"; }
t0=$(now)
# Never plain `torch`: only the pinned CPU wheel is small.
pip install -q torch==2.13.0 >"$work/torch.log" 2>&1 || { cat "$work/torch.log"; exit 1; }
echo "torch==2.13.0 in a fresh virtualenv: $(elapsed "$t0") s"
# The README's example calls dataframe(), which needs pandas (the [pandas] extra): there before the
# snapshot, so that the uninstall check compares torchwrapper's files only.
pip install -q pandas >"$work/pandas.log" 2>&1 || { cat "$work/pandas.log"; exit 1; }
pip install -q build >"$work/build-tool.log" 2>&1 || { cat "$work/build-tool.log"; exit 1; }
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')

# The README's example of the original TorchWrapper API (its first python block), run as written.
"$python" - "$src/README.md" >"$work/example.py" <<'EOF'
import re, sys
blocks = re.findall(r"```python\n(.*?)```", open(sys.argv[1]).read(), re.S)
print(blocks[0])
EOF
grep -q "TorchWrapper(config)" "$work/example.py" || fail "README's first python block is not the TorchWrapper example"

snapshot() { (cd "$venv" && find . -path ./lib/python*/site-packages/torch -prune -o -print | LC_ALL=C sort); }

# Everything a user relies on after an install, whichever way it was made ($1 says which).
check_installed() {
    how=$1
    run=$work/run-$how
    mkdir -p "$run"
    # Outside the checkout, so that `import torchwrapper` cannot find the sources.
    if (cd "$run" && "$venv/bin/python" -c '
import os, sys, torchwrapper
assert torchwrapper.__file__.startswith(sys.argv[1]), torchwrapper.__file__
assert "LD_LIBRARY_PATH" not in os.environ
' "$site") >"$run/import.log" 2>&1; then ok "$how: import torchwrapper from site-packages"
    else cat "$run/import.log"; fail "$how: import torchwrapper"; fi
    if (cd "$run" && "$venv/bin/python" "$work/example.py") >"$run/example.log" 2>&1 \
            && ls "$run"/output/*.csv >/dev/null 2>&1 && test -f "$run/output/manifest.json"; then
        ok "$how: the README's TorchWrapper example ran and wrote $(ls "$run"/output | wc -l) files"
    else cat "$run/example.log"; fail "$how: the README's TorchWrapper example"; fi
    if PATH="$venv/bin:$PATH" command -v tw-report >/dev/null 2>&1; then
        if (cd "$run" && PATH="$venv/bin:$PATH" tw-report --help) >"$run/tw-report.log" 2>&1; then
            ok "$how: tw-report --help (on PATH: $(PATH="$venv/bin:$PATH" command -v tw-report))"
        else cat "$run/tw-report.log"; fail "$how: tw-report --help"; fi
        # On the example's files: the program and its bundled libraries work, not only its usage.
        if (cd "$run" && PATH="$venv/bin:$PATH" tw-report output) >"$run/tw-report.log" 2>&1 \
                && grep -q "torch.randn" "$run/tw-report.log"; then
            ok "$how: tw-report output (reports torch.randn)"
        else cat "$run/tw-report.log"; fail "$how: tw-report on the example's files"; fi
    elif grep -q "tw-report" "$src/Makefile.am"; then
        fail "$how: tw-report is built by Makefile.am but is not on PATH after the install"
    else
        skip "$how: tw-report (not built by this tree yet)"
    fi
}

uninstall_and_compare() {
    how=$1
    pip uninstall -y -q torchwrapper >"$work/uninstall.log" 2>&1 || { cat "$work/uninstall.log"; fail "$how: pip uninstall"; }
    snapshot >"$work/after"
    if diff "$work/before" "$work/after" >"$work/diff"; then ok "$how: pip uninstall left nothing behind"
    else echo "left behind (> ) or removed (< ):"; cat "$work/diff"; fail "$how: pip uninstall"; fi
}

# What a wheel carries: the license, and no requirement on torch (the user's own build stays theirs).
check_wheel() {
    "$venv/bin/python" -m zipfile -l "$1" | awk 'NR > 1 {print "    " $1}'
    if "$venv/bin/python" -m zipfile -l "$1" | grep -q "dist-info/LICENSE"; then ok "wheel: carries the license"
    else fail "wheel: no LICENSE in its dist-info"; fi
    if "$venv/bin/python" -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1])
print(z.read([n for n in z.namelist() if n.endswith(".dist-info/METADATA")][0]).decode())' "$1" \
            | grep -qiE "^Requires-Dist: *torch *([;<>=!~([]|$)"; then   # torch by name (an extra's pytorch-lightning is not)
        fail "wheel: its metadata requires torch"
    fi
}

snapshot >"$work/before"

# ---- pip install . ----
t0=$(now)
if pip install -q "$src[pandas]" >"$work/install.log" 2>&1; then
    echo "pip install . (from the checkout: autoreconf, configure, make): $(elapsed "$t0") s"
    check_installed "pip install ."
    uninstall_and_compare "pip install ."
else cat "$work/install.log"; fail "pip install ."; fi

# ---- python -m build --sdist, then a wheel from the sdist ----
t0=$(now)
if (cd "$src" && "$venv/bin/python" -m build -q --sdist -o "$work/sdist") >"$work/sdist.log" 2>&1; then
    sdist=$(ls "$work"/sdist/torchwrapper-*.tar.gz)
    echo "python -m build --sdist: $(elapsed "$t0") s, $(basename "$sdist")"
    tar -tzf "$sdist" | grep -q '^torchwrapper-[0-9.]*/configure$' && tar -tzf "$sdist" | grep -q '/PKG-INFO$' \
        && ok "sdist: ships configure and PKG-INFO" || fail "sdist: configure or PKG-INFO missing"
    t0=$(now)
    # Autotools hidden from the build: an sdist must build with a compiler and make alone.
    if AUTORECONF=/nonexistent/autoreconf pip wheel -q --no-deps -w "$work/dist-sdist" "$sdist" \
            >"$work/wheel-sdist.log" 2>&1; then
        whl=$(ls "$work"/dist-sdist/torchwrapper-*.whl)
        echo "wheel from the sdist: $(elapsed "$t0") s, $(basename "$whl") ($(wc -c <"$whl") bytes)"
        check_wheel "$whl"
        if pip install -q "$whl" >"$work/install-sdist.log" 2>&1; then
            check_installed "wheel from sdist"
            uninstall_and_compare "wheel from sdist"
        else cat "$work/install-sdist.log"; fail "pip install the wheel built from the sdist"; fi
    else cat "$work/wheel-sdist.log"; fail "a wheel from the sdist"; fi
else cat "$work/sdist.log"; fail "python -m build --sdist"; fi

# ---- pip install -e . : imports from the checkout's build tree ----
t0=$(now)
if pip install -q -e "$src" >"$work/editable.log" 2>&1; then
    echo "pip install -e .: $(elapsed "$t0") s"
    if (cd "$work" && "$venv/bin/python" -c '
import sys, torchwrapper
assert torchwrapper.__file__.startswith(sys.argv[1]), torchwrapper.__file__
print(torchwrapper.__file__)' "$src/build") >"$work/editable-import.log" 2>&1; then
        ok "pip install -e .: imports $(cat "$work/editable-import.log")"
    else cat "$work/editable-import.log"; fail "pip install -e .: import from the build tree"; fi
    uninstall_and_compare "pip install -e ."
else cat "$work/editable.log"; fail "pip install -e ."; fi

# ---- missing build tools or libraries: the error names the Debian package ----
expect_error() {
    what=$1 package=$2
    shift 2
    if env "$@" "$venv/bin/python" -m pip --disable-pip-version-check --no-cache-dir wheel -q --no-deps \
            -w "$work/never" "$src" >"$work/error.log" 2>&1; then
        fail "$what: pip wheel succeeded"
    elif grep -q "$package" "$work/error.log" && ! grep -q "Traceback" "$work/error.log"; then
        ok "$what: pip says: $(grep "torchwrapper build failed" "$work/error.log" | head -n 1 | sed 's/^ *//')"
    else cat "$work/error.log"; fail "$what: the error does not name $package, or shows a traceback"; fi
}
expect_error "no Autotools" "apt-get install autoconf automake libtool autoconf-archive pkg-config" \
    AUTORECONF=/nonexistent/autoreconf
expect_error "no cJSON" "apt-get install libcjson-dev" PKG_CONFIG_LIBDIR=/nonexistent PKG_CONFIG_PATH=
expect_error "no C compiler" "apt-get install build-essential" CC=/nonexistent/cc

echo "check-install: $passed passed, $failed failed, $skipped skipped"
exit $status
