#!/usr/bin/env bash
# The main job: builds mmnpz (library and Python package), writes a small synthetic sharded
# spectrogram dataset, and streams batches of random excerpts through the prefetching loader,
# checking every excerpt and reporting throughput (examples/audio_excerpts.py).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=build scripts/setup.sh -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMMNPZ_BUILD_EXAMPLES=ON > /dev/null
exec env PYTHONPATH="$PWD/build/python" /usr/bin/python3 examples/audio_excerpts.py build/demo "$@"
