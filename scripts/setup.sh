#!/usr/bin/env bash
# Installs the Debian packages mmnpz needs (only those missing) and builds into build/.
# Usage: scripts/setup.sh [extra cmake args...]
# Environment: BUILD_DIR (default build), BUILD_TARGET (default: everything; several separated by spaces).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake zlib1g-dev libxtensor-dev doctest-dev python3 python3-numpy
          python3-pytest python3-dev python3-venv python3-pip python3-setuptools pybind11-dev
          python3-pybind11 python3-torch python3-soundfile python3-matplotlib unzip clang
          libclang-rt-14-dev libdeflate-dev pkg-config libcli11-dev python3-sphinx doxygen
          python3-mypy liburing-dev)  # liburing-dev: bench/queue_pieces.c only
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing Debian packages: ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" < /dev/null
fi

build_dir=${BUILD_DIR:-build}
# Debian's numpy lives in /usr/bin/python3, not in a pyenv or venv python that may come first.
cmake -S . -B "$build_dir" -DPython_EXECUTABLE=/usr/bin/python3 "$@" > "$build_dir.configure.log" 2>&1 \
  || { cat "$build_dir.configure.log"; exit 1; }
# BUILD_TARGET may name several targets, separated by spaces.
cmake --build "$build_dir" -j"$(nproc)" ${BUILD_TARGET:+--target $BUILD_TARGET}
