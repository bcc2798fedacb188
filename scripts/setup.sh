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
  libopenblas-openmp-dev             # kernels/cpu: GEMMs (the OpenMP build, see kernels/CMakeLists.txt)
  python3-torch                      # tests and bench: the PyTorch reference of the transformer
  zlib1g-dev                         # eval: the EvalPlus .jsonl.gz benchmark files
  libtomlplusplus-dev                # trainer: TOML run configs
  libopenmpi-dev openmpi-bin         # trainer: data parallel between CPU processes (mpirun)
  python3-protobuf                   # tests: an independent reader of the TensorBoard event files
  libxxhash-dev                      # trainer: checkpoint checksums (XXH3-128, header-only)
  xxhash                             # tests: xxh128sum, an independent check of those checksums
  libboost-context-dev               # tests: the emulated CUDA threads' fibers
)
# For scripts/fuzz.sh (CI runs it; it skips, saying so, without them), so not required: a machine
# whose apt sources lack them still builds. libFuzzer and the sanitizer runtimes are in
# libclang-rt-14-dev, only a Recommends of libclang-common-14-dev, which --no-install-recommends
# skips; llvm-14 has the symbolizer that names the frames of a failure's stack.
OPTIONAL=(clang libclang-rt-14-dev llvm-14)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

optional_missing=()
for p in "${OPTIONAL[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || optional_missing+=("$p")
done

SUDO=""
[[ $(id -u) -ne 0 ]] && SUDO="sudo"
# The optional ones are tried as root or in CI only: a user's every build.sh would ask for sudo.
if ((${#optional_missing[@]})) && [[ -n "$SUDO" && "${CI:-}" != "true" ]]; then
  echo "setup: ${optional_missing[*]} not installed: scripts/fuzz.sh will skip (apt-get install them for it)"
  optional_missing=()
fi
if ((${#missing[@]} + ${#optional_missing[@]})); then
  $SUDO apt-get update -qq || ((${#missing[@]} == 0)) || exit 1  # only the optional ones may do without
fi
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  # Through env: sudo's env_reset would drop a DEBIAN_FRONTEND set before it.
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi
if ((${#optional_missing[@]})); then
  echo "setup: installing ${optional_missing[*]} (for scripts/fuzz.sh)"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${optional_missing[@]}" ||
    echo "setup: WARNING: ${optional_missing[*]} not installed: scripts/fuzz.sh will skip" >&2
fi

# Node and npm for the tokenizer differential test (below; it skips, saying so, without them). Most
# machines have a Node.js of their own: apt is asked only where npm is missing, as root or in CI,
# in a transaction of its own, so that a Node.js from elsewhere that conflicts with Debian's npm
# cannot take the fuzzing packages down with it.
if ! command -v npm >/dev/null 2>&1; then
  if [[ -z "$SUDO" || "${CI:-}" == "true" ]]; then
    echo "setup: installing nodejs npm (for the tokenizer differential test)"
    { $SUDO apt-get update -qq &&
      $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm; } ||
      echo "setup: WARNING: nodejs and npm not installed: tokdiff_test will skip" >&2
  else
    echo "setup: npm not found: tokdiff_test will skip (apt-get install nodejs npm for it)"
  fi
fi

# Reference for the tokenizer differential test and benchmark: Hugging Face's Rust tokenizers
# (npm tokenizers@0.23.2, pinned by tests/tokdiff/package-lock.json). npm ci runs only when
# node_modules is missing or the lockfile changed since the last install. It is not fatal: without
# it, tokdiff_test skips (and says so) and tokenizer_bench runs without the Rust comparison.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOKDIFF="$ROOT/tests/tokdiff"
if command -v npm >/dev/null 2>&1; then
  lock_sum="$(sha256sum "$TOKDIFF/package-lock.json" | cut -d' ' -f1)"
  stamp="$TOKDIFF/node_modules/.azr-lock-sha256"
  if [[ ! -f "$TOKDIFF/node_modules/tokenizers/package.json" || "$(cat "$stamp" 2>/dev/null)" != "$lock_sum" ]]; then
    echo "setup: npm ci --prefix tests/tokdiff (tokenizers@0.23.2)"
    if npm ci --prefix "$TOKDIFF" --no-audit --no-fund; then
      echo "$lock_sum" >"$stamp"
    else
      echo "setup: WARNING: npm ci failed; tokdiff_test will skip" >&2
    fi
  else
    echo "setup: tests/tokdiff/node_modules up to date"
  fi
else
  echo "setup: npm not found: tokdiff_test will skip and tokenizer_bench runs without the Rust comparison"
fi
