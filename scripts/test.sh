#!/usr/bin/env bash
# Sets up, builds and runs every test: the C++ suite in release with warnings as errors, then
# the Python package (pip install .) and its pytest suite. KVSCATTER_TEST_ASAN=1 adds the C++
# suite under address + undefined sanitizers. The exhaustive format sweeps are separate: see
# README.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
jobs=$(nproc)

echo "== C++: release (-Werror) =="
cmake --preset ci >/dev/null
cmake --build build/ci -j"$jobs"
ctest --preset ci -j"$jobs"

if [ "${KVSCATTER_TEST_ASAN:-0}" = 1 ]; then
  echo "== C++: address + undefined sanitizers =="
  cmake --preset asan >/dev/null
  cmake --build build/asan -j"$jobs"
  ctest --preset asan -j"$jobs"
fi

if [ -f pyproject.toml ]; then
  echo "== Python =="
  python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore \
    --no-build-isolation .
  python3 -m pytest -q tests/python
fi
