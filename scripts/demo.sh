#!/usr/bin/env bash
# The main job: builds mmnpz, then writes a small synthetic spectrogram dataset and samples
# random fixed-length excerpts from it through the memory-mapped reader.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=build scripts/setup.sh -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMMNPZ_EXAMPLES=ON > /dev/null
mkdir -p build/demo
exec build/examples/audio_excerpts build/demo/spectrograms.npz "$@"
