#!/usr/bin/env bash
# Installs every Debian package azr needs to build and test. Idempotent: packages already
# present are skipped, and apt is only touched when something is missing.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libgtest-dev libgmock-dev          # GoogleTest + CTest
  libspdlog-dev libfmt-dev           # logging
  libcli11-dev                       # command line
  nlohmann-json3-dev                 # JSON (azr exec --jsonl, metrics)
  libseccomp-dev                     # sandbox: BPF allowlist
  python3 libpython3.11-dev          # sandbox: embedded CPython (Debian's 3.11)
  libsqlite3-dev                     # buffer: the task store
  libpcre2-dev libutf8proc-dev       # tokenizer: Qwen2 pre-tokenizer regex (Unicode), NFC
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi
