#!/usr/bin/env bash
# Compiles `fa-aot --defaults` with the GPU tests' configurations
# (test/gpu/configs.txt) and compares every kernel's PTX and the
# manifest, byte for byte, with the hashes recorded in
# test/ptx-identity.sha256. A restructuring of the GPU path that keeps the
# generated code must pass this; a deliberate change of the code re-records
# (--record) in the same commit, with its A/B measurement in PERF.md.
# scripts/ptx-compare.sh compares two fa-aot binaries over every config set.
#
#   scripts/ptx-identity.sh [--record] [--fa-aot PATH]
set -euo pipefail
cd "$(dirname "$0")/.."
record=0; aot=build/bin/fa-aot
while [ $# -gt 0 ]; do
  case "$1" in
    --record) record=1 ;;
    --fa-aot) aot=$2; shift ;;
    *) echo "usage: $0 [--record] [--fa-aot PATH]" >&2; exit 2 ;;
  esac
  shift
done
baseline=test/ptx-identity.sha256
work=${FA_PTX_WORK:-$(mktemp -d)}; [ -n "${FA_PTX_WORK:-}" ] || trap "rm -rf $work" EXIT
"$aot" --defaults --config-file test/gpu/configs.txt -o "$work/bundle" >"$work/aot.log" 2>&1 || { cat "$work/aot.log"; exit 1; }
(cd "$work/bundle" && sha256sum -- *.ptx manifest.json | sort -k2) >"$work/now.sha256"
if [ $record = 1 ]; then
  cp "$work/now.sha256" "$baseline"
  echo "recorded $(wc -l <"$baseline") hashes in $baseline"
  exit 0
fi
if diff -u "$baseline" "$work/now.sha256" >"$work/diff"; then
  echo "ptx-identity: all $(wc -l <"$baseline") files byte-identical"
else
  echo "ptx-identity: generated code differs from $baseline:"
  grep '^[-+][0-9a-f]' "$work/diff" | awk '{print $2}' | sort -u
  exit 1
fi
