#!/usr/bin/env bash
# Sets up, builds (release) and runs `kvscatter demo`. Extra arguments go to the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake --preset release >/dev/null
cmake --build build/release --target kvscatter_cli
exec build/release/tools/kvscatter demo "$@"
