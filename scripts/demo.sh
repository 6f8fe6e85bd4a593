#!/usr/bin/env bash
# Sets up, builds, and runs the demo: a causal GQA attention written as one
# attn.attention op goes through each seed pass in fa-opt, then is compiled
# with fa-lower-to-llvm and executed on the CPU by fa-run, and checked against
# a float64 reference. Where a CUDA GPU is present, the same op is also
# compiled by fa-aot into a bundle and run through libfa_runtime.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
bin=build/bin
ex=examples/attention.mlir
say() { printf '\n== %s\n' "$*"; }

say "input: $ex"
cat "$ex"
say "attn-online-softmax: softmax → running (m, l, acc)"
$bin/fa-opt "$ex" -attn-online-softmax | grep -E "attn\.|linalg.fill|math.log2" | head -8
say "attn-tile: Q-block forall × KV-block loop; boundary blocks masked"
$bin/fa-opt "$ex" -attn-online-softmax -attn-tile=block-q=64\ block-kv=64 -canonicalize \
  | grep -E "scf\.(forall|for|if)|attn\.online_attention" | sed 's/ : .*//' | head -8
say "attn-decompose + fa-lower-to-llvm: $( $bin/fa-opt "$ex" -fa-lower-to-llvm | grep -c 'llvm\.' ) LLVM-dialect ops"

say "run it on the CPU (fa-run, random N(0,1) inputs)"
$bin/fa-run "$ex" --entry attention --random-inputs 0

say "a small case against a float64 reference"
tmp=$(mktemp -d)
python3 test/Integration/Inputs/npy.py make "$tmp"
$bin/fa-run test/Integration/Inputs/small.mlir --entry small \
  --input "$tmp/q.npy" --input "$tmp/k.npy" --input "$tmp/v.npy" \
  --output "$tmp/o.npy" --output "$tmp/lse.npy"
python3 test/Integration/Inputs/npy.py check "$tmp"
say "randomised differential checks (20 forward, 20 backward cases)"
$bin/fa-check --direction fwd --cases 20 --seed 42
$bin/fa-check --direction bwd --cases 20 --seed 42 --fd-cases 2
rm -rf "$tmp"

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  say "GPU present: fa-aot bundle (mma.sync + sm_90a wgmma forwards) run through libfa_runtime"
  $bin/fa-aot --config fwd:bf16:d128:none --config fwd:bf16:d128:none:wgmma -o build/demo-bundle
  cmake --install build --prefix build/prefix >/dev/null
  cmake -S examples -B build/example -DCMAKE_PREFIX_PATH="$PWD/build/prefix" >/dev/null
  cmake --build build/example >/dev/null
  build/example/fa-example-forward build/demo-bundle
else
  say "no GPU here: the GPU kernels are compiled and assembled by the tests (test/Conversion), not run"
fi
