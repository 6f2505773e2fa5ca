#!/usr/bin/env bash
# Every test: a normal build (C++ tests and the Python package with pytest), then an
# AddressSanitizer + UndefinedBehaviorSanitizer build of the C++ tests.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

echo "== build and test (RelWithDebInfo)"
BUILD_DIR=build scripts/setup.sh -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMMNPZ_EXAMPLES=ON
(cd build && ctest --output-on-failure -j"$jobs")

echo "== build and test with ASan + UBSan"
BUILD_DIR=build-asan scripts/setup.sh -DCMAKE_BUILD_TYPE=Debug -DMMNPZ_SANITIZE=ON -DMMNPZ_EXAMPLES=OFF -DMMNPZ_PYTHON=OFF
# The >4 GiB files are written and read in the first run already.
(cd build-asan && MMNPZ_SKIP_HUGE=1 ctest --output-on-failure -j"$jobs")
