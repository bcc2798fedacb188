#!/usr/bin/env bash
# Whether the GPU tests of a build run on a device here, rather than skip: exit 0, printing
# nothing, when CudaDevice.CountAndDescriptionAgree (which skips without a device) passed; else
# exit 3 with the test's output. scripts/gpu_check.sh asks before spending a lent machine's
# minutes; tests/kernels/gpu_probe_test.py checks the reading of gtest's summary both ways.
#
#   scripts/gpu_probe.sh BUILD_DIR
#
# One named test, not CudaDevice.*: that suite also holds tests that need no device, whose pass
# count once made a machine with a GPU read as one without (two passed where one was looked for),
# and a machine without one read as one with it.
set -uo pipefail
out=$("$1/bin/cuda_ops_test" --gtest_filter='CudaDevice.CountAndDescriptionAgree' 2>&1)
rc=$?
if ((rc == 0)) && grep -q '^\[  PASSED  \] 1 test\.$' <<<"$out" && ! grep -q '^\[  SKIPPED \]' <<<"$out"; then
  exit 0
fi
printf '%s\n' "$out"
exit 3
