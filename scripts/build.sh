#!/usr/bin/env bash
# Installs what is missing (scripts/setup.sh), then configures and builds azr into build/.
# Usage: scripts/build.sh [extra cmake -D options]
#        AZR_TARGETS="azr" scripts/build.sh   builds only those targets (scripts/run.sh does)
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
# CI: warnings are errors, and line tables only for debug information (the same machine code as a
# full -g build, a third less compile time: CMakeLists.txt, AZR_DEBUG_INFO).
werror=OFF debug_info=full
[[ "${CI:-}" == "true" ]] && werror=ON debug_info=lines
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DAZR_WERROR="$werror" -DAZR_DEBUG_INFO="$debug_info" "$@" >/dev/null
# shellcheck disable=SC2086
cmake --build build -j"$(nproc)" ${AZR_TARGETS:+--target $AZR_TARGETS}
