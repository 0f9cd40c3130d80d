#!/usr/bin/env bash
# Sets up, builds and runs every test: the C++ suite in release with warnings as errors, the
# quick performance regression guard, the same suite under address + undefined sanitizers (clang;
# one build holds it and the fuzz targets), the concurrency suite under ThreadSanitizer, the
# aarch64 cross build tested under QEMU (scripts/test_aarch64.sh), a short fuzz run of every
# operator (FUZZ_SECONDS each, default 20), then the Python package (pip install ., warnings as
# errors) and its pytest suite. The exhaustive format sweeps and long fuzz campaigns are separate:
# see README.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
jobs=$(nproc)
# Every build below goes through ccache (CMake reads these variables when it configures a fresh
# build folder): the Python package's library objects are the ci build's, compiled once.
if command -v ccache >/dev/null; then
  export CMAKE_C_COMPILER_LAUNCHER="${CMAKE_C_COMPILER_LAUNCHER:-ccache}"
  export CMAKE_CXX_COMPILER_LAUNCHER="${CMAKE_CXX_COMPILER_LAUNCHER:-ccache}"
fi
start=$SECONDS
stage() {
  echo "== $* (at $((SECONDS - start)) s) =="
}

stage "C++: release (-Werror)"
cmake --preset ci >/dev/null
cmake --build build/ci -j"$jobs"
ctest --preset ci -j"$jobs"

# Ratios to memcpy against floors at about half the targets, never absolute times.
stage "Performance regression guard (kvscatter bench --quick)"
ctest --test-dir build/ci -L perf --output-on-failure

# clang, with the libFuzzer targets in the same build: the fuzz stage below compiles nothing.
stage "C++: address + undefined sanitizers"
cmake --preset asan >/dev/null
cmake --build build/asan -j"$jobs"
ctest --preset asan -j"$jobs"

stage "C++: thread sanitizer (concurrency suite)"
cmake --preset tsan >/dev/null
cmake --build build/tsan -j"$jobs"
ctest --preset tsan

# Cross build for aarch64 and every Arm SIMD target under QEMU (KVSCATTER_AARCH64=0 skips it).
if [ "${KVSCATTER_AARCH64:-1}" != 0 ]; then
  stage "aarch64: cross build, every Arm SIMD target under QEMU"
  scripts/test_aarch64.sh
fi

fuzz_seconds=${FUZZ_SECONDS:-20}
stage "Fuzzing: $fuzz_seconds s per operator"
scripts/fuzz.sh "$fuzz_seconds"

if [ -f pyproject.toml ]; then
  stage "Python"
  # The ci build's compiler name and warnings as errors, so that ccache hands the package the
  # library objects already compiled (the compiler's name is part of ccache's key, and the Python
  # build would otherwise pick g++ where the presets' default is c++).
  CC="${CC:-cc}" CXX="${CXX:-c++}" python3 -m pip install -q --disable-pip-version-check \
    --root-user-action=ignore --no-build-isolation \
    --config-settings=cmake.define.KVSCATTER_WERROR=ON .
  # CI=true: a missing torch or jax (or a build without their operators) fails, never skips.
  # One worker process per core (pytest-xdist): the suite is many small independent cases.
  CI="${CI:-true}" python3 -m pytest -q -n "$jobs" tests/python
fi
stage "done"
