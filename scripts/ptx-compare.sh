#!/usr/bin/env bash
# Compares the kernels two fa-aot binaries generate: `--defaults` with the GPU
# tests' configurations (test/gpu/configs.txt) and every other config set of
# test/gpu (each with the --score-mods file its header names). For each PTX
# file and manifest: identical, or the PTX differs; for differing PTX, ptxas
# (sm_90a) assembles both and says whether the machine code differs too (an
# order of independent instructions that ptxas schedules away keeps the
# cubin). A restructuring keeps every file identical, or shows a device A/B.
#
#   scripts/ptx-compare.sh OLD_FA_AOT [NEW_FA_AOT (default build/bin/fa-aot)]
#   FA_PTX_SETS="score_mod blocksparse" limits the config sets ("" for none).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 OLD_FA_AOT [NEW_FA_AOT]" >&2; exit 2; }
old=$1; new=${2:-build/bin/fa-aot}
work=${FA_PTX_WORK:-$(mktemp -d)}; [ -n "${FA_PTX_WORK:-}" ] || trap "rm -rf $work" EXIT
sets=${FA_PTX_SETS-$(ls test/gpu/configs_*.txt | sed 's|.*/configs_||; s|\.txt$||')}

# build NAME AOT DIR ARGS...: one bundle, its log beside it.
build() {
  local name=$1 aot=$2 dir=$3; shift 3
  "$aot" "$@" -o "$dir" >"$dir.log" 2>&1 || { echo "$name: $aot failed:"; tail -3 "$dir.log"; return 1; }
}

status=0
compare() { # compare NAME ARGS...
  local name=$1; shift
  mkdir -p "$work/$name"
  build "$name" "$old" "$work/$name/old" "$@" || { status=1; return; }
  build "$name" "$new" "$work/$name/new" "$@" || { status=1; return; }
  local files=0 ptx=0 cubin=0 f base
  for f in "$work/$name"/old/*.ptx "$work/$name"/old/manifest.json; do
    base=$(basename "$f"); files=$((files + 1))
    cmp -s "$f" "$work/$name/new/$base" && continue
    status=1
    if [[ $base != *.ptx ]] || [ ! -f "$work/$name/new/$base" ]; then
      echo "  $name/$base differs"; continue
    fi
    ptx=$((ptx + 1))
    ptxas -arch=sm_90a "$f" -o "$work/a.cubin" && ptxas -arch=sm_90a "$work/$name/new/$base" -o "$work/b.cubin"
    if cmp -s "$work/a.cubin" "$work/b.cubin"; then
      echo "  $name/$base: PTX differs, cubin identical"
    else
      cubin=$((cubin + 1)); echo "  $name/$base: PTX and cubin differ"
    fi
  done
  echo "$name: $files files, $ptx PTX differ, $cubin of them in the cubin"
}

compare defaults --defaults --config-file test/gpu/configs.txt
for set in $sets; do
  config=test/gpu/configs_$set.txt
  mods=$(grep -o -- '--score-mods [^ );]*' "$config" | head -1 || true)
  # shellcheck disable=SC2086
  compare "$set" --config-file "$config" $mods -j 2
done
exit $status
