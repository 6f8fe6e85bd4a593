#!/usr/bin/env bash
# Configures and builds fa in build/ (incremental).
set -euo pipefail
cd "$(dirname "$0")/.."
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
if [ ! -f build/CMakeCache.txt ]; then
  cmake "${gen[@]}" -S . -B build -DCMAKE_BUILD_TYPE=Release
fi
cmake --build build --parallel "$(nproc)"
cmake --build build --target fa-test-depends --parallel "$(nproc)"
