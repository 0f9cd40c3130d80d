#!/usr/bin/env bash
# Installs what building and testing kvscatter needs on a Debian 12 machine: the C++ toolchain
# and libraries from Debian's packages, the Python packages from PyPI. Idempotent and quiet
# when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

# clang, libclang-rt-14-dev (libFuzzer) and llvm (llvm-symbolizer for sanitizer reports) serve
# the fuzz targets; g++ brings the address, undefined and thread sanitizer runtimes.
apt_packages=(cmake ninja-build g++ pkg-config libgtest-dev libgmock-dev libbenchmark-dev
              libhwy-dev libcli11-dev clang libclang-rt-14-dev llvm)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore \
  -r requirements-dev.txt
