#!/usr/bin/env bash
# A short, reproducible libFuzzer run of the file parsers (safetensors header, tokenizer.json),
# built with clang + ASan/UBSan in build-fuzz/. A fixed seed and a fixed number of runs make it
# deterministic. Skips, saying so, where clang's libFuzzer is not available.
# Usage: scripts/fuzz.sh [runs per target]
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-200000}"
if ! command -v clang++ >/dev/null 2>&1; then
  echo "fuzz: clang++ not found: skipped"
  exit 0
fi
CXX=clang++ CC=clang cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DAZR_BUILD_BENCH=OFF >/dev/null
if ! grep -q "AZR_HAVE_LIBFUZZER:INTERNAL=1" build-fuzz/CMakeCache.txt; then
  echo "fuzz: clang's libFuzzer is not available: skipped"
  exit 0
fi
cmake --build build-fuzz -j"$(nproc)" --target safetensors_fuzz tokenizer_fuzz
mkdir -p build-fuzz/artifacts
# Names in a failure's stack (llvm-14, installed by setup.sh when it can be).
[[ -x /usr/lib/llvm-14/bin/llvm-symbolizer ]] && export ASAN_SYMBOLIZER_PATH=/usr/lib/llvm-14/bin/llvm-symbolizer
corpus=""
trap 'rm -rf "$corpus"' EXIT
for target in safetensors tokenizer; do
  corpus=$(mktemp -d)
  cp tests/model/fuzz_seeds/"$target"/* "$corpus"/
  echo "fuzz: ${target}_fuzz, $runs runs, seed 1"
  log="build-fuzz/${target}_fuzz.log"
  # The whole report on a failure (the sanitizer's error and stack), its last lines otherwise; a
  # crashing input goes to build-fuzz/artifacts/, not the working tree.
  if ! build-fuzz/bin/"${target}"_fuzz -seed=1 -runs="$runs" -max_len=4096 -artifact_prefix=build-fuzz/artifacts/ \
      "$corpus" >"$log" 2>&1; then
    cat "$log"
    echo "fuzz: ${target}_fuzz failed (its input is in build-fuzz/artifacts/)" >&2
    exit 1
  fi
  tail -3 "$log"
  rm -rf "$corpus"
done
echo "fuzz: both targets ran their $runs runs without a crash or sanitizer report"
