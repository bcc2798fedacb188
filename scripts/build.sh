#!/usr/bin/env bash
# Installs what is missing (scripts/setup.sh), then configures and builds azr into build/.
# Usage: scripts/build.sh [extra cmake -D options]
#        AZR_TARGETS="azr" scripts/build.sh   builds only those targets (scripts/run.sh does)
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
# CI: warnings are errors, and line tables only for debug information (the same machine code as a
# full -g build, a third less compile time: CMakeLists.txt, AZR_DEBUG_INFO).
# The benchmarks' own files at -Og there too: CI compiles them and runs their command-line tests,
# never times them (bench/CMakeLists.txt, AZR_BENCH_CHECK_BUILD).
werror=OFF debug_info=full bench_check=OFF
[[ "${CI:-}" == "true" ]] && werror=ON debug_info=lines bench_check=ON
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DAZR_WERROR="$werror" -DAZR_DEBUG_INFO="$debug_info" \
  -DAZR_BENCH_CHECK_BUILD="$bench_check" "$@" >/dev/null
# shellcheck disable=SC2086
cmake --build build -j"$(nproc)" ${AZR_TARGETS:+--target $AZR_TARGETS}
