#!/usr/bin/env bash
# The whole test suite, from a fresh machine: install, build, run every test with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
cd build
ctest --output-on-failure -j"$(nproc)" --timeout 300 "$@"
