#!/usr/bin/env bash
# Every test: a normal build (C++ tests and the Python package with pytest, mypy --strict on
# the stubs), the API reference (scripts/docs.sh, warnings are errors), the package
# pip-installed into a venv and tested again, a ThreadSanitizer run of the concurrent
# first-access, dataset-open and gather tests, two minutes of fuzzing (MMNPZ_FUZZ_SECONDS),
# and the C++ tests built with clang under AddressSanitizer + UndefinedBehaviorSanitizer (one
# build that proves both: the code is C++17 as clang reads it, and runs clean under the
# sanitizers; GCC builds and runs everything in the first step).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

echo "== build and test (RelWithDebInfo)"
BUILD_DIR=build scripts/setup.sh -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMMNPZ_BUILD_EXAMPLES=ON
(cd build && ctest --output-on-failure -j"$jobs")

echo "== API reference (Sphinx + Doxygen, warnings are errors)"
scripts/docs.sh

echo "== pip install --no-build-isolation . into a venv; pytest against the installed package"
rm -rf build/venv
/usr/bin/python3 -m venv --system-site-packages build/venv
build/venv/bin/pip install --no-build-isolation --quiet .
(cd build && env -u PYTHONPATH MMNPZ_FIXTURES="$PWD/tests/fixtures" \
  venv/bin/python -m pytest -q -p no:cacheprovider ../tests/python)

echo "== ThreadSanitizer: many threads first-accessing one archive, and gathering from one dataset"
BUILD_DIR=build-tsan BUILD_TARGET="test_reader test_layout_table test_gather test_dataset test_sparse_slots" scripts/setup.sh \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMMNPZ_TSAN=ON -DMMNPZ_BUILD_EXAMPLES=OFF -DMMNPZ_BUILD_PYTHON=OFF
TSAN_OPTIONS=halt_on_error=1 build-tsan/tests/test_reader -tc="*threads*"
TSAN_OPTIONS=halt_on_error=1 build-tsan/tests/test_gather -tc="*many threads gathering*,*every thread count*,*background gathers*"
TSAN_OPTIONS=halt_on_error=1 build-tsan/tests/test_dataset -tc="*many threads*"
TSAN_OPTIONS=halt_on_error=1 build-tsan/tests/test_sparse_slots -tc="*threads*"
TSAN_OPTIONS=halt_on_error=1 build-tsan/tests/test_layout_table -tc="*threads*"

echo "== fuzz the reader for a bounded time (libFuzzer, ASan + UBSan)"
scripts/fuzz.sh "${MMNPZ_FUZZ_SECONDS:-120}"

echo "== build every C++ test with clang, under ASan + UBSan, and run them"
# -O1, as the sanitizers' authors advise: the tests ran 291 s at -O0 and 61 s at -O1 here
# (assertions stay on: a Debug build).
BUILD_DIR=build-asan scripts/setup.sh -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-g -O1" \
  -DCMAKE_CXX_COMPILER=clang++ -DMMNPZ_SANITIZE=ON -DMMNPZ_BUILD_EXAMPLES=OFF \
  -DMMNPZ_BUILD_PYTHON=OFF
# The >4 GiB files are written and read in the first run already.
(cd build-asan && MMNPZ_SKIP_HUGE=1 ctest --output-on-failure -j"$jobs")
