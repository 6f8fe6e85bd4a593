#!/usr/bin/env bash
# Sets up, builds and runs every test: lit (IR rewrites, diagnostics, CPU
# numerics, PTX checks) and the unit tests, all through ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
cd build
ctest --output-on-failure
