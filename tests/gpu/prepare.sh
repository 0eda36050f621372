#!/bin/sh
# SPDX-License-Identifier: MIT
# Here (a Debian machine with the project built: ./quickstart), before a run on a GPU machine that has
# no package manager and no network: puts into .gpu/ (ignored by git) what tests/gpu/run.sh builds
# from there: the sdist (it ships configure, so the build needs only a C compiler and make) and the
# .debs of libcsv, cJSON and zlib's headers, which run.sh unpacks into a prefix of its own.
set -eu
cd "$(dirname "$0")/../.."
rm -rf .gpu && mkdir -p .gpu
make -s dist >/dev/null
mv torchwrapper-*.tar.gz .gpu/
(cd .gpu && apt-get download libcsv3 libcsv-dev libcjson1 libcjson-dev zlib1g zlib1g-dev 2>/dev/null)
ls .gpu
