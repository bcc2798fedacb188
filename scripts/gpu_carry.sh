#!/usr/bin/env bash
# Downloads (here, where Debian's archive is reachable) the few packages the CUDA checks need
# besides CUDA itself, into .gpu-carry/, for a GPU machine that cannot install anything: the
# OpenMP OpenBLAS (the CPU reference backend), GoogleTest, nlohmann-json, CLI11 (the benchmarks'
# options), PCRE2 and utf8proc (the tokenizer, which the model library links) and pkg-config.
# 15 MB of .deb files;
# scripts/gpu_check.sh unpacks them there (dpkg -x) when AZR_CARRY=.gpu-carry.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .gpu-carry
cd .gpu-carry
# apt drops privileges to _apt for downloads; a root-owned directory makes it warn, not fail.
apt-get download libopenblas0-openmp libopenblas-openmp-dev libopenblas-dev libgfortran5 libgtest-dev \
  libcli11-dev nlohmann-json3-dev libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 \
  libutf8proc-dev libutf8proc2 pkgconf pkgconf-bin libpkgconf3 2>&1 | grep -v "^W: Download is performed unsandboxed" || true
ls -1 ./*.deb
