#!/usr/bin/env bash
# Downloads (here, where Debian's archive is reachable) the few packages the CUDA checks need
# besides CUDA itself, into .gpu-carry/, for a GPU machine that cannot install anything: the
# OpenMP OpenBLAS (the CPU reference backend), GoogleTest, nlohmann-json, CLI11 (the benchmarks'
# options), PCRE2 and utf8proc (the tokenizer, which the model library links) and pkg-config.
# Then what the trainer (azr, azr-zygote: gpu_prebuild.sh) needs besides them, for gpu_check.sh
# pending's end-to-end run: CPython 3.11's library and stdlib (the sandbox embeds it), Open MPI
# (linked, not started by a one-process run), SQLite, libseccomp, toml++, spdlog, fmt; and the
# CRUXEval files its evaluation reads, into .gpu-carry/benchmarks.
# About 22 MB of .deb files (2026-11-29);
# scripts/gpu_check.sh unpacks them there (dpkg -x) when AZR_CARRY=.gpu-carry.
set -euo pipefail
cd "$(dirname "$0")/.."
benchmarks=$(realpath "${AZR_BENCHMARKS:-../shared/benchmarks}")   # as azr eval finds them
mkdir -p .gpu-carry
cd .gpu-carry
# apt drops privileges to _apt for downloads; a root-owned directory makes it warn, not fail.
apt-get download libopenblas0-openmp libopenblas-openmp-dev libopenblas-dev libgfortran5 libgtest-dev \
  libcli11-dev nlohmann-json3-dev libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 \
  libutf8proc-dev libutf8proc2 pkgconf pkgconf-bin libpkgconf3 \
  libpython3.11 libpython3.11-minimal libpython3.11-stdlib libexpat1 libopenmpi3 libhwloc15 \
  libevent-core-2.1-7 libevent-pthreads-2.1-7 libudev1 libsqlite3-0 libseccomp2 libtomlplusplus3 \
  libspdlog1.10 libfmt9 2>&1 | grep -v "^W: Download is performed unsandboxed" || true
mkdir -p benchmarks
cp -r "$benchmarks/cruxeval" benchmarks/
ls -1 ./*.deb
