#!/usr/bin/env bash
# Builds the five targets of gpu_check.sh's decode, train and pending stages, and azr for pending's
# end-to-end run, here, where nvcc is but no GPU need be, for sm_90 (CUDA_ARCHS), into
# .gpu-prebuilt/bin, for a GPU machine lent by the minute: there `AZR_CARRY=.gpu-carry
# AZR_PREBUILT=.gpu-prebuilt scripts/gpu_check.sh pending` (carry both folders) runs them without
# building, with the carried packages (gpu_carry.sh) and that machine's CUDA.
# The commit (and whether the tree was dirty) goes into .gpu-prebuilt/commit, so a result names
# what it ran.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-gpu-prebuilt}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DAZR_GPU_CHECKS_ONLY=ON \
  -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90}" > /dev/null
targets=(cuda_ops_test cuda_model_test cuda_ops_bench model_speed_bench lm_head_bench)  # gpu_check.sh's check_targets
cmake --build "$BUILD" --target "${targets[@]}"
# The trainer itself (azr and its sandbox's azr-zygote) for gpu_check.sh pending's end-to-end
# run, in a tree of its own: built for the GPU machine's file system, where gpu_check.sh unpacks
# the carried packages: the checks' (OpenBLAS, PCRE2, utf8proc) under /tmp/azr-deps, the
# trainer's (scripts/gpu_carry.sh's app/: CPython 3.11, SQLite, ...) under /tmp/azr-app.
# - AZR_PYTHON_RUNTIME_ROOT: the zygote finds the carried stdlib there.
# - RPATH (not RUNPATH, hence --disable-new-dtags) to the carried libraries: the zygote is started
#   with an empty environment (no LD_LIBRARY_PATH), and an RPATH also serves the libraries the
#   carried ones load (spdlog's fmt), where a RUNPATH serves only the executable's own.
# - No NCCL: one GPU needs none, and that machine may not have its 220 MB library.
# - No MPI: Debian 12's Open MPI needs glibc 2.36 (libevent's arc4random), newer than the GPU
#   machine's may be; a one-process run never starts it.
APP_BUILD=${APP_BUILD:-build-gpu-prebuilt-azr}
arch="$(uname -m)-linux-gnu"
app_root=/tmp/azr-app   # as in gpu_check.sh
rpath="$app_root/usr/lib/$arch:/tmp/azr-deps/usr/lib/$arch:/tmp/azr-deps/usr/lib/$arch/openblas-openmp"
cmake -S . -B "$APP_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DAZR_BUILD_TESTS=OFF -DAZR_BUILD_BENCH=OFF \
  -DAZR_NCCL=OFF -DAZR_MPI=OFF -DAZR_PYTHON_RUNTIME_ROOT="$app_root" -DCMAKE_BUILD_RPATH="$rpath" \
  -DCMAKE_EXE_LINKER_FLAGS=-Wl,--disable-new-dtags -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90}" > /dev/null
app_targets=(azr azr-zygote)
cmake --build "$APP_BUILD" --target "${app_targets[@]}"
rm -rf .gpu-prebuilt
mkdir -p .gpu-prebuilt/bin
for bin in "${targets[@]}"; do
  strip -o ".gpu-prebuilt/bin/$bin" "$BUILD/bin/$bin"
done
for bin in "${app_targets[@]}"; do
  strip -o ".gpu-prebuilt/bin/$bin" "$APP_BUILD/bin/$bin"
done
# Compressed: each binary links the same CUDA kernels (9 MB each, 46 MB in all on 2026-11-29),
# which with the carried packages neared the device tool's 64 MiB carry; xz takes them to 13 MB.
# gpu_check.sh unpacks bin.tar.xz where it finds no bin/.
tar -C .gpu-prebuilt -cf - bin | xz -T0 -6 > .gpu-prebuilt/bin.tar.xz
rm -rf .gpu-prebuilt/bin
git describe --always --dirty > .gpu-prebuilt/commit
du -sh .gpu-prebuilt
