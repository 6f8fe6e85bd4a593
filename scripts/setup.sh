#!/usr/bin/env bash
# Installs fa's build and test dependencies on Debian 12 (idempotent).
set -euo pipefail
need=(llvm-22-dev libmlir-22-dev mlir-22-tools llvm-22-tools cmake ninja-build g++ python3 python3-numpy libgtest-dev nlohmann-json3-dev
      python3-venv python3-pip python3-setuptools python3-wheel python3-torch)
missing=()
for p in "${need[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
