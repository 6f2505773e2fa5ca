#!/usr/bin/env bash
# Every test: a normal build (C++ tests and the Python package with pytest), then an
# AddressSanitizer + UndefinedBehaviorSanitizer build of the C++ tests.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

echo "== build and test (RelWithDebInfo)"
BUILD_DIR=build scripts/setup.sh -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMMNPZ_EXAMPLES=ON
(cd build && ctest --output-on-failure -j"$jobs")

echo "== pip install --no-build-isolation . into a venv; pytest against the installed package"
rm -rf build/venv
/usr/bin/python3 -m venv --system-site-packages build/venv
build/venv/bin/pip install --no-build-isolation --quiet .
(cd build && env -u PYTHONPATH MMNPZ_FIXTURES="$PWD/tests/fixtures" \
  venv/bin/python -m pytest -q -p no:cacheprovider ../tests/python)

echo "== build and test with ASan + UBSan"
BUILD_DIR=build-asan scripts/setup.sh -DCMAKE_BUILD_TYPE=Debug -DMMNPZ_SANITIZE=ON -DMMNPZ_EXAMPLES=OFF -DMMNPZ_PYTHON=OFF
# The >4 GiB files are written and read in the first run already.
(cd build-asan && MMNPZ_SKIP_HUGE=1 ctest --output-on-failure -j"$jobs")
