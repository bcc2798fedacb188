#!/usr/bin/env bash
# The main job, from a fresh machine: install what is missing, build, and run the quickstart
# (configs/quickstart.toml: self-play from the bootstrapped models/quickstart on the CPU, about 1 min on 2 idle cores)
# into a new run directory under runs/. Extra arguments go to `azr train` (e.g. --set run.steps=4).
set -euo pipefail
cd "$(dirname "$0")/.."
AZR_TARGETS=azr ./scripts/build.sh   # the command alone: the tests and benchmarks are test.sh's
run_dir="runs/quickstart-$(date +%Y%m%d-%H%M%S)"
build/bin/azr train configs/quickstart.toml --run-dir "$run_dir" "$@"
echo
echo "== what the run left in $run_dir"
ls "$run_dir"
echo
echo "== azr buffer stats $run_dir/buffer.db"
build/bin/azr buffer stats "$run_dir/buffer.db"
