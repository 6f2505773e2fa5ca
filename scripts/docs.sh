#!/usr/bin/env bash
# Builds the API reference into $BUILD_DIR/docs/html (default build/docs/html), failing on any
# warning: Sphinx autodoc of the built Python package (sphinx-build -W --keep-going -n, which
# also fails on a public Python name without a docstring: see docs/conf.py), then Doxygen's
# HTML of the public C++ headers into html/cpp/ (docs/Doxyfile: WARN_IF_UNDOCUMENTED, and
# every warning fails). Needs a build (scripts/setup.sh) and Debian's python3-sphinx and
# doxygen; nothing is fetched from the network.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
if [ ! -d "$build_dir/python/mmnpz" ]; then
  echo "scripts/docs.sh: no Python package in $build_dir/python: build first (scripts/setup.sh)" >&2
  exit 1
fi
build_dir=$(cd "$build_dir" && pwd)
out=$build_dir/docs
# The package's .py files are copied into the build by this target: refresh them, so that the
# reference shows the docstrings of the sources.
cmake_log=$(mktemp)
cmake --build "$build_dir" --target mmnpz_python_files > "$cmake_log" 2>&1 \
  || { cat "$cmake_log" >&2; rm -f "$cmake_log"; exit 1; }
rm -f "$cmake_log"
rm -rf "$out"
mkdir -p "$out/html"

echo "== Sphinx: the Python API (autodoc of $build_dir/python)"
failed=()
PYTHONPATH="$build_dir/python" /usr/bin/python3 -m sphinx -b html -W --keep-going -n -q \
  -d "$out/doctrees" docs "$out/html" || failed+=(Sphinx)

echo "== Doxygen: the C++ API (include/mmnpz, include/mmnpz/data)"
log=$out/doxygen-warnings.log
if ! { cat docs/Doxyfile; echo "OUTPUT_DIRECTORY = $out/html"; echo "WARN_LOGFILE = $log"; } \
     | doxygen - || [ -s "$log" ]; then
  cat "$log" >&2
  failed+=(Doxygen)
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "scripts/docs.sh: ${failed[*]} reported warnings (above); warnings are errors" >&2
  exit 1
fi
echo "API reference: $out/html/index.html (C++: $out/html/cpp/index.html)"
