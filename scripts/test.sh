#!/usr/bin/env bash
# Sets up, builds and runs every test: the C++ suite in release with warnings as errors, the
# C++ suite again under address + undefined sanitizers, then the Python package (pip install .)
# and its pytest suite. The exhaustive format sweeps are separate: see README.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
jobs=$(nproc)

echo "== C++: release (-Werror) =="
cmake --preset ci >/dev/null
cmake --build build/ci -j"$jobs"
ctest --preset ci -j"$jobs"

echo "== C++: address + undefined sanitizers =="
cmake --preset asan >/dev/null
cmake --build build/asan -j"$jobs"
ctest --preset asan -j"$jobs"

if [ -f pyproject.toml ]; then
  echo "== Python =="
  python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore \
    --no-build-isolation .
  python3 -m pytest -q tests/python
fi
