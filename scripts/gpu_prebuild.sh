#!/usr/bin/env bash
# Builds the five targets of gpu_check.sh's decode, train and pending stages here, where nvcc is
# but no GPU need be, for sm_90 (CUDA_ARCHS), into .gpu-prebuilt/bin, for a GPU machine lent by the
# minute: there `AZR_CARRY=.gpu-carry AZR_PREBUILT=.gpu-prebuilt scripts/gpu_check.sh pending`
# (carry both folders) runs them without building, with the carried OpenBLAS and that machine's CUDA.
# The commit (and whether the tree was dirty) goes into .gpu-prebuilt/commit, so a result names
# what it ran.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-gpu-prebuilt}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DAZR_GPU_CHECKS_ONLY=ON \
  -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90}" > /dev/null
targets=(cuda_ops_test cuda_model_test cuda_ops_bench model_speed_bench lm_head_bench)  # gpu_check.sh's check_targets
cmake --build "$BUILD" --target "${targets[@]}"
rm -rf .gpu-prebuilt
mkdir -p .gpu-prebuilt/bin
for bin in "${targets[@]}"; do
  strip -o ".gpu-prebuilt/bin/$bin" "$BUILD/bin/$bin"
done
# Compressed: each binary links the same CUDA kernels (9 MB each, 46 MB in all on 2026-11-29),
# which with the carried packages neared the device tool's 64 MiB carry; xz takes them to 13 MB.
# gpu_check.sh unpacks bin.tar.xz where it finds no bin/.
tar -C .gpu-prebuilt -cf - bin | xz -T0 -6 > .gpu-prebuilt/bin.tar.xz
rm -rf .gpu-prebuilt/bin
git describe --always --dirty > .gpu-prebuilt/commit
du -sh .gpu-prebuilt
