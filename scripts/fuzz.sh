#!/usr/bin/env bash
# Fuzzes the reader with libFuzzer under ASan+UBSan for a bounded time:
#
#     scripts/fuzz.sh [SECONDS]        (default 120)
#
# Builds fuzz_reader with clang in build-fuzz (-DMMNPZ_FUZZ=ON), then runs it on the seed
# corpus tests/fuzz/corpus with the dictionary tests/fuzz/npz.dict. New interesting inputs
# go to build-fuzz/corpus (kept between runs, never into the committed seeds); a crash, leak
# or timeout goes to build-fuzz/crashes/ and makes the script fail. To turn a finding into a
# regression input: minimize it with
#     build-fuzz/tests/fuzz_reader -minimize_crash=1 -runs=10000 build-fuzz/crashes/crash-...
# and copy the result into tests/fuzz/corpus/ under a name saying what it breaks.
set -euo pipefail
cd "$(dirname "$0")/.."

duration=${1:-120}
if ! [[ "$duration" =~ ^[0-9]+$ ]] || [ "$duration" -eq 0 ]; then
  echo "usage: $0 [SECONDS]" >&2
  exit 2
fi
if ! command -v clang++ > /dev/null; then
  echo "fuzzing needs clang and libFuzzer: apt-get install clang libclang-rt-14-dev" >&2
  exit 1
fi

build=build-fuzz
echo "== configure and build fuzz_reader (clang, libFuzzer, ASan+UBSan) in $build"
mkdir -p "$build"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
  -DPython_EXECUTABLE=/usr/bin/python3 -DMMNPZ_FUZZ=ON -DMMNPZ_BUILD_PYTHON=OFF \
  -DMMNPZ_BUILD_EXAMPLES=OFF \
  > "$build/configure.log" || { cat "$build/configure.log" >&2; exit 1; }
cmake --build "$build" --target fuzz_reader -j"$(nproc)"

mkdir -p "$build/corpus" "$build/crashes"
# Where the target writes each input as a file (recover, append, gather): in memory when
# /dev/shm is there, and removed however the fuzzer ends (a crash skips the target's own
# clean-up).
scratch=$(mktemp -d /dev/shm/mmnpz-fuzz-XXXXXX 2> /dev/null || mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export MMNPZ_FUZZ_SCRATCH="$scratch"
log="$build/fuzz.log"
echo "== fuzzing for $duration s (log: $log)"
status=0
# The first corpus directory receives new inputs; the committed seeds are only read.
"$build/tests/fuzz_reader" "$build/corpus" tests/fuzz/corpus \
  -dict=tests/fuzz/npz.dict -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
  -max_total_time="$duration" -print_final_stats=1 \
  -artifact_prefix="$build/crashes/" > "$log" 2>&1 || status=$?

execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
elapsed=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -n 1)
grep -E 'DONE' "$log" | tail -n 1 || true
inputs=$(find "$build/corpus" -type f | wc -l)
echo "executions: ${execs:-unknown} in ${elapsed:-$duration} s; corpus: $inputs inputs"
if [ "$status" -ne 0 ]; then
  grep -E 'ERROR|SUMMARY|Test unit written|artifact' "$log" | head -n 20 >&2 || true
  echo "fuzz_reader found a problem (exit status $status); inputs in $build/crashes/" >&2
  exit "$status"
fi
