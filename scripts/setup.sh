#!/usr/bin/env bash
# Installs what building and testing kvscatter needs on a Debian 12 machine: the C++ toolchain
# and libraries from Debian's packages, the Python packages from PyPI. Idempotent and quiet
# when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

# clang, libclang-rt-14-dev (libFuzzer, the address and undefined sanitizer runtimes) and llvm
# (llvm-symbolizer for sanitizer reports) serve the asan preset, which builds the sanitized test
# suites and the fuzz targets; g++ brings the thread sanitizer runtime.
# ccache lets scripts/test.sh compile the library once for both the ci build and the Python
# package, and makes a second run of it fast.
apt_packages=(cmake ninja-build g++ pkg-config libgtest-dev libgmock-dev libbenchmark-dev
              libhwy-dev libcli11-dev clang libclang-rt-14-dev llvm ccache)
# The aarch64 stage (scripts/test_aarch64.sh): Debian's cross compiler, the arm64 builds of the
# libraries the library and its tests link (multiarch), and QEMU to run them. KVSCATTER_AARCH64=0
# leaves them out.
need_update=0
if [ "${KVSCATTER_AARCH64:-1}" != 0 ]; then
  apt_packages+=(g++-aarch64-linux-gnu qemu-user libhwy-dev:arm64 libgtest-dev:arm64
                 libgmock-dev:arm64)
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    echo "setup: adding the arm64 architecture to dpkg"
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
    $SUDO dpkg --add-architecture arm64
    need_update=1  # apt knows no arm64 package until its lists are fetched again
  fi
fi
# With a foreign architecture added, a bare name installed for both is ambiguous to dpkg: ask
# for the native one then.
native=$(dpkg --print-architecture)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || dpkg -s "$p:$native" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})) || ((need_update)); then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  if ((${#missing[@]})); then
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
fi

python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore \
  -r requirements-dev.txt
