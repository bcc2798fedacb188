#!/usr/bin/env bash
# The whole test suite, from a fresh machine: install, build, a short fuzz run of the parsers,
# then every test with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
./scripts/fuzz.sh           # a short, seeded libFuzzer run of the file parsers (clang builds only)
cd build
ctest --output-on-failure -j"$(nproc)" --timeout 300 "$@"
