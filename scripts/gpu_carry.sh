#!/usr/bin/env bash
# Downloads (here, where Debian's archive is reachable) the few packages the CUDA checks need
# besides CUDA itself, into .gpu-carry/, for a GPU machine that cannot install anything: the
# OpenMP OpenBLAS (the CPU reference backend), GoogleTest, nlohmann-json, CLI11 (the benchmarks'
# options), PCRE2 and utf8proc (the tokenizer, which the model library links) and pkg-config.
# Into .gpu-carry/app/, what the trainer (azr, azr-zygote: gpu_prebuild.sh) needs besides them,
# for gpu_check.sh pending's end-to-end run: CPython 3.11's library and stdlib (the sandbox embeds
# it), SQLite, libseccomp, toml++, spdlog and fmt (that azr is built without MPI, and libexpat is
# the machine's own: Debian 12's Open MPI and libexpat need glibc 2.36). Kept apart, so that
# gpu_check.sh hands them to azr alone and the machine's python3 keeps its own libraries. And the
# CRUXEval file the run's evaluation reads, into .gpu-carry/benchmarks. 22 MB in all (2026-11-29).
# scripts/gpu_check.sh unpacks them (dpkg -x) when AZR_CARRY=.gpu-carry.
set -euo pipefail
cd "$(dirname "$0")/.."
benchmarks=$(realpath "${AZR_BENCHMARKS:-../shared/benchmarks}")   # as azr eval finds them
checks=(libopenblas0-openmp libopenblas-openmp-dev libopenblas-dev libgfortran5 libgtest-dev libcli11-dev
        nlohmann-json3-dev libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libutf8proc-dev
        libutf8proc2 pkgconf pkgconf-bin libpkgconf3)
app=(libpython3.11 libpython3.11-minimal libpython3.11-stdlib libsqlite3-0 libseccomp2 libtomlplusplus3
     libspdlog1.10 libfmt9)
# Downloads the packages $2.. into $1; fails naming any that did not arrive (apt-get download
# reports some failures only as warnings).
download() {
  local dir=$1 pkg
  shift
  rm -rf "$dir"/*.deb
  mkdir -p "$dir"
  # apt drops privileges to _apt for downloads; a root-owned directory makes it warn, not fail.
  (cd "$dir" && apt-get download "$@" 2>&1 | grep -v "^W: Download is performed unsandboxed") || true
  for pkg in "$@"; do
    compgen -G "$dir/${pkg}_*.deb" > /dev/null || { echo "gpu_carry: $pkg was not downloaded" >&2; exit 1; }
  done
}
download .gpu-carry "${checks[@]}"
download .gpu-carry/app "${app[@]}"
rm -rf .gpu-carry/benchmarks
mkdir -p .gpu-carry/benchmarks
cp -r "$benchmarks/cruxeval" .gpu-carry/benchmarks/
ls -1 .gpu-carry/*.deb .gpu-carry/app/*.deb
du -sh .gpu-carry
