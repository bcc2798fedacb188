#!/usr/bin/env bash
# Installs what is missing (scripts/setup.sh), then configures and builds azr into build/.
# Usage: scripts/build.sh [extra cmake -D options]
#        AZR_TARGETS="azr" scripts/build.sh   builds only those targets (scripts/run.sh does)
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
werror=OFF
[[ "${CI:-}" == "true" ]] && werror=ON
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DAZR_WERROR="$werror" "$@" >/dev/null
# shellcheck disable=SC2086
cmake --build build -j"$(nproc)" ${AZR_TARGETS:+--target $AZR_TARGETS}
