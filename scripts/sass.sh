#!/usr/bin/env bash
# SASS of a PTX file or cubin on a machine without a GPU: assembles PTX for
# sm_90a with the installed ptxas, then disassembles with the nvdisasm of
# Debian 12's non-free nvidia-cuda-toolkit (11.8, fetched once into
# ~/.cache/fa-sass; nothing is installed). That nvdisasm predates the ELF
# header of CUDA 13 cubins (OS/ABI 0x41, ABI version 8, sm in bits 8-15 of
# e_flags), so a copy of the cubin gets the older header (0x33, 7,
# EF_CUDA_SM90 | virtual SM90): the sections and the sm_90 instruction
# encoding are the same. Spills show as STL / LDL.
#
#   scripts/sass.sh KERNEL.ptx|KERNEL.cubin [-o OUT.sass]
set -euo pipefail
in=${1:?usage: $0 KERNEL.ptx|KERNEL.cubin [-o OUT.sass]}
out=/dev/stdout
[ "${2:-}" = -o ] && out=${3:?-o needs a path}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/fa-sass
nvdisasm=$cache/usr/bin/nvdisasm
if [ ! -x "$nvdisasm" ]; then
  mkdir -p "$cache/lists/partial" "$cache/archives/partial"
  printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: non-free\n' \
    > "$cache/nonfree.sources"
  apt=(-o Dir::Etc::sourcelist=/dev/null -o Dir::Etc::sourceparts="$cache"
       -o Dir::State::Lists="$cache/lists" -o Dir::Cache="$cache")
  apt-get "${apt[@]}" update >/dev/null
  (cd "$cache" && apt-get "${apt[@]}" download nvidia-cuda-toolkit >/dev/null 2>&1)
  dpkg -x "$cache"/nvidia-cuda-toolkit_*.deb "$cache"
fi
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
case "$in" in
  *.ptx) ptxas=${PTXAS:-$(command -v ptxas || echo /usr/local/cuda/bin/ptxas)}
         "$ptxas" -arch=sm_90a "$in" -o "$work/k.cubin" ;;
  *) cp "$in" "$work/k.cubin" ;;
esac
python3 - "$work/k.cubin" <<'EOF'
import struct, sys
b = bytearray(open(sys.argv[1], 'rb').read())
if b[7] == 0x41:  # CUDA 13 header
    b[7], b[8] = 0x33, 7
    struct.pack_into('<I', b, 48, 0x005a055a)
open(sys.argv[1], 'wb').write(b)
EOF
"$nvdisasm" -c "$work/k.cubin" > "$out"
