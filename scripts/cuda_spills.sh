#!/usr/bin/env bash
# Which CUDA kernels spill registers to local memory, as ptxas reports it when it compiles them:
# a compile-time fact, so it needs nvcc but no GPU. Compiles every kernels/cuda/*.cu for each
# architecture (sm_90 and sm_80 unless given) with the build's optimisation, in a scratch folder,
# and prints one line per kernel that spills (demangled), then a JSON line. Exits 0 either way:
# a spill is a figure to read against the kernel's role (a baseline variant, an opt-in path),
# not a failure.
#
#   scripts/cuda_spills.sh [ARCH ...]        e.g. scripts/cuda_spills.sh 90
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NVCC="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
if [[ ! -x "$NVCC" ]]; then
  echo "cuda_spills: no nvcc (set NVCC): nothing compiled"
  echo '{"check":"cuda_spills","skipped":"no nvcc"}'
  exit 0
fi
ARCHS=("$@")
((${#ARCHS[@]})) || ARCHS=(90 80)
SCRATCH="$(mktemp -d "${TMPDIR:-/tmp}/azr-cuda-spills-XXXXXX")"
trap 'rm -rf "$SCRATCH"' EXIT

# One compile per (architecture, file), as many at once as there are cores. The paths travel as
# arguments (NUL-separated), so spaces or quotes in them change nothing.
compile_one() {
  local arch=$1 cu=$2 name
  name=$(basename "$cu" .cu)
  if ! "$NVCC" -O2 -DNDEBUG -DAZR_HAVE_CUDA_KERNELS=1 -I"$ROOT" -std=c++17 \
      --generate-code=arch=compute_$arch,code=sm_$arch -Xptxas -warn-spills \
      -c "$cu" -o "$SCRATCH/$name.$arch.o" > "$SCRATCH/$name.$arch.log" 2>&1; then
    echo "cuda_spills: $name.cu failed to compile for sm_$arch:" >&2
    cat "$SCRATCH/$name.$arch.log" >&2
    exit 255
  fi
}
export -f compile_one
export NVCC ROOT SCRATCH
for arch in "${ARCHS[@]}"; do
  for cu in "$ROOT"/kernels/cuda/*.cu; do printf '%s\0%s\0' "$arch" "$cu"; done
done | xargs -0 -n 2 -P "$(nproc)" bash -c 'compile_one "$0" "$1"'

# ptxas: "Registers are spilled to local memory in function 'MANGLED', N bytes spill stores, M
# bytes spill loads".
json_rows=()
count=0
for arch in "${ARCHS[@]}"; do
  for log in "$SCRATCH"/*."$arch".log; do
    file="$(basename "$log" ".$arch.log").cu"
    while IFS=$'\t' read -r mangled stores loads; do
      [[ -n "$mangled" ]] || continue
      kernel="$(echo "$mangled" | c++filt)"
      printf 'sm_%s  %-24s stores %4s B, loads %4s B  %s\n' "$arch" "$file" "$stores" "$loads" "$kernel"
      json_rows+=("{\"arch\":\"sm_$arch\",\"file\":\"$file\",\"kernel\":$(python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$kernel"),\"spill_store_bytes\":$stores,\"spill_load_bytes\":$loads}")
      count=$((count + 1))
    done < <(sed -nE "s/.*spilled to local memory in function '([^']+)', ([0-9]+) bytes spill stores, ([0-9]+) bytes spill loads.*/\1|\2|\3/p" "$log" | tr '|' '\t')
  done
done
archs_named=$(printf 'sm_%s ' "${ARCHS[@]}")
echo "cuda_spills: $count kernel(s) spill, over ${archs_named% } ($(ls "$ROOT"/kernels/cuda/*.cu | wc -l) files each)"
(IFS=,; echo "{\"check\":\"cuda_spills\",\"nvcc\":\"$("$NVCC" --version | sed -nE 's/.*release ([0-9.]+).*/\1/p')\",\"spills\":[${json_rows[*]-}]}")
