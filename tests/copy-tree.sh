# SPDX-License-Identifier: MIT
# Sourced by the sanitizer checks (check-asan.sh, check-tsan.sh): copies the sources git knows of
# (uncommitted changes included, build outputs not) from $src into a fresh $build and runs
# autoreconf there. A configured source tree cannot host a VPATH build, hence the copy.
rm -rf "$build"
mkdir -p "$build"
if ! git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
    echo "$0: needs a git checkout of torchwrapper (it copies the sources git knows of)" >&2
    exit 1
fi
(cd "$src" && git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf -) | (cd "$build" && tar -xf -)
cd "$build"
autoreconf -fi >/dev/null 2>&1
