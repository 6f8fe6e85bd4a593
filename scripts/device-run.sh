#!/usr/bin/env bash
# The one command for the H200 machine (no MLIR there): builds libfa_runtime
# on its own, then runs the example, the GPU differential tests, the
# every-kernel suite (each kernel of the bundle launched directly on shapes
# that reach its paths; then on kernels given the wrong code, where it must
# fail), the compute-sanitizer checks (every kernel, after a
# planted bug each tool must report), the score_mod kernels' differential and
# every-kernel suites, and the benchmark. Logs and JSON go to $OUT (at most 8
# files: the score_mod steps write one, score_mod.json).
#
# Expects, made on the development machine and carried:
#   out/include/nlohmann/   the nlohmann JSON headers (cp -r /usr/include/nlohmann out/include/)
#   out/bundle/             a bundle written by fa-aot (optional: without it only the
#                           test fixture bundle of test/Runtime/fixture is run)
#   out/bundle-mod/         the score_mod kernels' bundle (optional: without it their steps are
#                           skipped)
#   out/splitkv/            the split-KV kernels' PTX (optional; FA_SPLITKV_PTX names another
#                           folder): their differential test, test/gpu/test_splitkv_ptx.py
#   out/bundle-gqa/         the packed-GQA kernels' bundle (optional; FA_GQA_BUNDLE names
#                           another): their differential test, test/gpu/test_packgqa.py
#   out/bundle-tma/         decode kernels loading K/V by TMA (FA_TMA_BUNDLE names another):
#                           test/gpu/test_packgqa.py on them, memcheck of 30 cases (FA_SAN=0 skips)
#   out/bundle-fp8/         fp8 e4m3 forwards (FA_FP8=1; FA_FP8_BUNDLE names another):
#                           test/gpu/test_fp8.py, test/gpu/test_quantize.py, then bench/fp8.py (FA_FP8_BENCH=0 skips it;
#                           FA_FP8_TIMEOUT, FA_FP8_BENCH_TIMEOUT, 240 s each)
#   out/bundle-fp8-bwd/     the fp8 backward and its forwards (test/gpu/configs_fp8_bwd.txt; FA_FP8_BWD=1,
#                           FA_FP8_BWD_BUNDLE names another): test/gpu/test_fp8_backward.py, then
#                           bench/fp8_backward.py beside the bf16 bundle's backward and SDPA's
#   out/bundle-maskmod/     mask_mod kernels (optional; FA_MASKMOD_BUNDLE names another): the
#                           document-mask and prefix-LM forwards' differential test,
#                           test/gpu/test_maskmod.py (through the runtime)
#   out/bundle-sinks/       attention-sink kernels (FA_SINKS_BUNDLE names another), run with
#                           FA_SINKS=1: test/gpu/test_sinks.py (FA_SINKS_CASES per kernel, 8) and
#                           bench/sinks.py (sink vs plain twin, same process; FA_SINKS_BENCH=0
#                           skips it, FA_SINKS_BENCH_ARGS)
#   out/bundle-sinks-maskmod/ sinks with mask_mods (FA_SINKS_MASKMOD_BUNDLE names another), with
#                           FA_SINKS=1: test/gpu/test_sinks.py on it too
#   out/bundle-paged/       paged-KV decode kernels and their contiguous twins (FA_PAGED_BUNDLE
#                           names another), run with FA_PAGED=1: test/gpu/test_paged.py
#                           (FA_PAGED_CASES, 160; memcheck of 12 unless FA_PAGED_SAN=0), then
#                           bench/decode.py --paged (paged vs contiguous, same process;
#                           FA_PAGED_BENCH=0 skips it); FA_PAGED_BUNDLE=out/bundle-paged-tma for
#                           the kernels loading pages by TMA (test/gpu/configs_paged_tma.txt)
#   out/bundle-f32/         f32 forwards, TF32 and 3xTF32 (FA_F32_BUNDLE names another), run
#                           with FA_F32=1: test/gpu/test_f32.py (FA_F32_CASES per kernel, 8;
#                           memcheck of one case per kernel unless FA_F32_SAN=0)
#   out/bundle-kvappend/    paged decode kernels with fa_kv_append (FA_KVAPPEND_BUNDLE names
#                           another), run with FA_KVAPPEND=1: test/gpu/test_kvappend.py
#                           (FA_KVAPPEND_CASES, 120; memcheck of 12 unless FA_KVAPPEND_SAN=0)
#   out/bundle-varlen/      varlen forwards (FA_VARLEN_BUNDLE names another), run with
#                           FA_VARLEN=1: test/gpu/test_varlen.py (FA_VARLEN_CASES, 120), and with
#                           FA_VARLEN_BENCH=1 bench/varlen.py (fa varlen vs fa per sequence and fa
#                           dense on FA_VARLEN_DENSE_BUNDLE (out/bundle), SDPA flash;
#                           FA_VARLEN_BENCH_ARGS); memcheck of 12 short cases unless FA_VARLEN_SAN=0
#   out/bundle-varlen-sinks/ varlen kernels with sinks (FA_VARLEN_SINKS_BUNDLE names another), run
#                           with FA_VARLEN=1 where present: test/gpu/test_varlen.py on them
# Built here (MLIR is not on the GPU machine):
#   build/bin/fa-aot --defaults --config-file test/gpu/configs.txt -o out/bundle
#   build/bin/fa-aot --config-file test/gpu/configs_score_mod.txt \
#       --score-mods test/gpu/score_mods.mlir -o out/bundle-mod
#   python3 test/gpu/random_score_mods.py --seed 1 --count 12 \
#       --mlir out/random_mods.mlir --configs out/random_mods.txt
#   build/bin/fa-aot --score-mods out/random_mods.mlir --config-file out/random_mods.txt \
#       -o out/bundle-rnd
#   python3 test/gpu/test_jit_device.py --prepare --fa-aot build/bin/fa-aot --cache out/jit-cache
#   mkdir -p out/splitkv && build/bin/fa-opt test/gpu/splitkv_kernels.mlir -split-input-file \
#       -fa-lower-to-nvvm="split-kv=1" > out/splitkv/kernels.mlir &&
#     python3 test/Conversion/AttnToGPU/Inputs/extract-ptx.py out/splitkv/kernels.mlir out/splitkv
#   build/bin/fa-aot --config-file test/gpu/configs_packgqa.txt --score-mods test/gpu/score_mods.mlir -o out/bundle-gqa
#   build/bin/fa-aot --config-file test/gpu/configs_fp8.txt -o out/bundle-fp8
#   build/bin/fa-aot --config-file test/gpu/configs_tma.txt -o out/bundle-tma
#   build/bin/fa-aot --config-file test/gpu/configs_maskmod.txt --score-mods test/gpu/mask_mods.mlir \
#       -o out/bundle-maskmod
#   build/bin/fa-aot --config-file test/gpu/configs_varlen.txt -o out/bundle-varlen
#   build/bin/fa-aot --config-file test/gpu/configs_varlen_sinks.txt -o out/bundle-varlen-sinks
#   build/bin/fa-aot --config-file test/gpu/configs_sinks.txt --score-mods test/gpu/score_mods.mlir \
#       -o out/bundle-sinks
#   build/bin/fa-aot --config-file test/gpu/configs_sinks_maskmod.txt --score-mods test/gpu/mask_mods.mlir \
#       -o out/bundle-sinks-maskmod
#   build/bin/fa-aot --config-file test/gpu/configs_paged.txt -o out/bundle-paged
#   build/bin/fa-aot --config-file test/gpu/configs_paged_tma.txt -o out/bundle-paged-tma
#   build/bin/fa-aot --config-file test/gpu/configs_kvappend.txt -o out/bundle-kvappend
#   build/bin/fa-aot --config-file test/gpu/configs_f32.txt -o out/bundle-f32
#   /usr/bin/python3 test/gpu/test_score_mod_python.py --prepare out/bundle-pymod \
#       --fa-aot build/bin/fa-aot   (Python score_mods reading tensors; any PyTorch)
#   /usr/bin/python3 test/gpu/test_maskmod_python.py --prepare --fa-aot build/bin/fa-aot \
#       --cache out/jit-maskmod   (Python mask_mods' JIT disk cache; any PyTorch)
#   /usr/bin/python3 test/gpu/test_decode_mods.py --prepare --fa-aot build/bin/fa-aot \
#       --cache out/jit-decode-mods   (decode with Python mods: JIT disk cache; any PyTorch)
# and carried with: out/include out/bundle out/bundle-mod out/bundle-rnd out/jit-cache
# (and out/bundle-pymod, out/bundle-maskmod, out/jit-maskmod, out/jit-decode-mods).
# Only the score_mod kernels (and the fixture), within one call:
#   FA_BUNDLE=none FA_SAN=0 FA_BENCH=none scripts/device-run.sh
# Environment: FA_BUNDLE (default out/bundle), FA_CASES (differential cases on it, 120),
#   FA_FIXTURE_CASES (on the fixture bundle, 100), FA_BENCH (full | quick | none; default
#   full with a bundle, quick without), FA_DIFF_TIMEOUT / FA_EVERY_TIMEOUT / FA_SAN_TIMEOUT /
#   FA_BENCH_TIMEOUT (seconds per step), FA_EVERY=0 (skip the every-kernel suite),
#   out/ab/bundle + out/ab/src (optional A/B: another release's bundle and runtime sources;
#   FA_AB_ARGS bench.py arguments, default --quick; FA_AB_TIMEOUT, 300),
#   FA_SAN=0 (skip compute-sanitizer), FA_GRAPH=0 (skip the CUDA-graph capture of every kernel;
#   FA_GRAPH_TIMEOUT seconds, 120), FA_STREAMS=0 (skip the concurrent-streams test of the
#   launch workspaces; FA_STREAMS_TIMEOUT, 120), FA_BENCH_ARGS (extra bench.py arguments, e.g.
#   "--seqs 2048,8192"), FA_DECODE=1 (bench/decode.py on $FA_BUNDLE: split-KV decode, packed
#   GQA and unpacked, against SDPA, with its correctness check; FA_DECODE_TIMEOUT, 200), FA_STRIDED=1
#   (test/gpu/test_strided.py and bench/strided.py on $FA_BUNDLE; FA_STRIDED_TIMEOUT, 300;
#   FA_STRIDED_REPEAT=R: R more alternating strided/contiguous pairs, their ratios), FA_FLEX=1 (also time FlexAttention on FA_FLEX_SEQS x FA_FLEX_DIMS).
#   score_mod kernels: FA_MOD_BUNDLE (default out/bundle-mod), FA_MOD=0 (skip them),
#   FA_MOD_CASES (differential cases, 120), FA_MOD_SHAPES (every-kernel shapes; default all but
#   long8k), FA_MOD_TIMEOUT / FA_MOD_EVERY_TIMEOUT (seconds per step), FA_MOD_BENCH=NAME[,NAME...] (time
#   fa with score_mod NAME beside fa without it and FlexAttention with it, on
#   FA_FLEX_SEQS x d 128), FA_MODBENCH=1 (that for softcap30,alibi_slopes at N 2k..16k),
#   FA_MODARGS_CASES (differential cases of the mod_args score_mods, 120). The sanitizer runs
#   on out/bundle, else on the score_mod bundle.
#   block-sparse kernels: FA_BLOCKSPARSE=1 runs test/gpu/test_blocksparse.py and
#   bench/blocksparse.py on FA_BLOCKSPARSE_BUNDLE (default out/bundle-blocksparse, built with
#   fa-aot --config-file test/gpu/configs_blocksparse.txt --score-mods test/gpu/block_masks.mlir);
#   FA_BLOCKSPARSE_CASES (12 per forward kernel), FA_BLOCKSPARSE_BENCH=0 skips the benchmark.
#   mask_mod kernels: FA_MASKMOD_BUNDLE (default out/bundle-maskmod; skipped without it),
#   FA_MASKMOD_CASES (differential cases per forward kernel, 16), FA_MASKMOD_TIMEOUT (300).
#   Python mask_mods by JIT (test/gpu/test_maskmod_python.py): FA_MASKMOD_PY_CACHE (default
#   out/jit-maskmod, made here with --prepare; skipped without it), FA_MASKMOD_PY=0 (skip),
#   FA_MASKMOD_PY_CASES (random fwd+bwd cases, 56; 8 more block-sparse ones), FA_MASKMOD_PY_TIMEOUT (300).
#   Everyday use: FA_JIT=0 (skip the JIT-cache step, run when out/jit-cache exists),
#   FA_TORCH_COMPILE=1 (torch.compile training against eager), FA_OVERHEAD=1 (tiny calls against
#   SDPA: host µs, fa's layers, GPU µs, profiler counts; bench/overhead.py), FA_EXT=1 (build
#   fa's C++ autograd extension and test it against the Python path: test/gpu/test_torch_ext.py;
#   FA_EXT_TIMEOUT, 400), FA_JIT_TIMEOUT / FA_TORCH_COMPILE_TIMEOUT / FA_OVERHEAD_TIMEOUT.
#   Context parallelism: FA_RING=1 (test/gpu/test_ring.py, the ring schedule simulated on this
#   GPU against float64, then bench/ring.py --simulate FA_RING_WORLD (4) --tokens FA_RING_TOKENS
#   (16384); FA_RING_TIMEOUT, 300). On a multi-GPU machine FA_RING_GPUS=W runs bench/ring.py
#   under torchrun on W GPUs instead of the simulation.
#   The whole command must end within the device's 600 s per call.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out/device}
mkdir -p "$OUT"
LOG=$OUT/device-run.log
exec > >(tee "$LOG") 2>&1
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 PATH=/usr/local/cuda/bin:$PATH
BUNDLE=${FA_BUNDLE:-out/bundle}
MOD_BUNDLE=${FA_MOD_BUNDLE:-out/bundle-mod}
MOD_CASES=${FA_MOD_CASES:-120}
MOD_SHAPES=${FA_MOD_SHAPES:-ragged,masked,long,grid,decode,tiny}
T_MOD=${FA_MOD_TIMEOUT:-150}
T_MOD_EVERY=${FA_MOD_EVERY_TIMEOUT:-150}
CASES=${FA_CASES:-120}
FIXTURE_CASES=${FA_FIXTURE_CASES:-100}
T_DIFF=${FA_DIFF_TIMEOUT:-150}
T_EVERY=${FA_EVERY_TIMEOUT:-180}
T_SAN=${FA_SAN_TIMEOUT:-120}
T_GRAPH=${FA_GRAPH_TIMEOUT:-120}
T_BENCH=${FA_BENCH_TIMEOUT:-400}
WORK=$(mktemp -d)
FIXTURE=$WORK/fixture-bundle
LIB=$WORK/build-rt/lib/libfa_runtime.so
status=0
step() { echo; echo "=== $* ($(date +%T))"; }
fail() { echo "FAILED: $*"; status=1; }

step "device"
nvidia-smi -L; echo "kernel $(uname -r)"; nvcc --version | tail -1; python3 -c 'import torch; print("torch", torch.__version__)'

step "build libfa_runtime standalone"
cmake -G Ninja -S lib/Runtime -B "$WORK/build-rt" -DFA_JSON_INCLUDE_DIR="$PWD/out/include" \
  -DCMAKE_BUILD_TYPE=Release >/dev/null && ninja -C "$WORK/build-rt" || { fail "runtime build"; exit 1; }
python3 test/Runtime/check_deps.py "$LIB" || fail "runtime dependencies"
echo "toolchain: $(c++ --version | head -1); CXXFLAGS='${CXXFLAGS:-}' LDFLAGS='${LDFLAGS:-}'"
ninja -C "$WORK/build-rt" -t commands | tail -1

step "test fixture bundle (naive kernels, bf16 as sm_90 cubin, f16 as sm_80 PTX)"
python3 test/Runtime/fixture/make_fixture_bundle.py --out "$FIXTURE" --nvcc nvcc --cubin-arch sm_90 \
  || fail "fixture bundle"

step "example (C, runtime only: cmake --install, then find_package(fa))"
cmake --install "$WORK/build-rt" --prefix "$WORK/prefix" >/dev/null &&
  cmake -G Ninja -S examples -B "$WORK/build-example" -DCMAKE_PREFIX_PATH="$WORK/prefix" >/dev/null &&
  ninja -C "$WORK/build-example" >/dev/null || fail "example build"
"$WORK/build-example/fa-example-forward" "$FIXTURE" || fail "example on the fixture bundle"
HAVE_BUNDLE=0
if [ -f "$BUNDLE/manifest.json" ]; then
  HAVE_BUNDLE=1
  "$WORK/build-example/fa-example-forward" "$BUNDLE" || fail "example on $BUNDLE"
else
  echo "no bundle at $BUNDLE: running the fixture bundle only"
fi
HAVE_MOD=0
if [ "${FA_MOD:-1}" != 0 ] && [ -f "$MOD_BUNDLE/manifest.json" ]; then
  HAVE_MOD=1
else
  echo "no score_mod bundle at $MOD_BUNDLE (or FA_MOD=0): its steps are skipped"
fi

step "Python smoke test (no PyTorch / PyTorch first / runtime first)"
python3 test/gpu/smoke.py --bundle "$FIXTURE" --lib "$LIB" || fail "smoke"
[ $HAVE_BUNDLE = 1 ] && { python3 test/gpu/smoke.py --bundle "$BUNDLE" --lib "$LIB" || fail "smoke ($BUNDLE)"; }

step "differential tests: fixture bundle"
timeout $T_DIFF python3 test/gpu/test_attention.py --bundle "$FIXTURE" --lib "$LIB" --cases "$FIXTURE_CASES" \
  --json "$OUT/diff_fixture.json" || fail "differential tests (fixture)"
if [ $HAVE_BUNDLE = 1 ]; then
  step "differential tests: $BUNDLE"
  timeout $T_DIFF python3 test/gpu/test_attention.py --bundle "$BUNDLE" --lib "$LIB" --cases "$CASES" --progress \
    --json "$OUT/diff_bundle.json" || fail "differential tests ($BUNDLE)"
fi

SPLITKV_PTX=${FA_SPLITKV_PTX:-out/splitkv}
if [ -d "$SPLITKV_PTX" ]; then
  step "split-KV kernels (PTX from fa-opt, launched directly): differential tests"
  timeout -k 10 ${FA_SPLITKV_TIMEOUT:-300} python3 test/gpu/test_splitkv_ptx.py --ptx "$SPLITKV_PTX" \
    > "$WORK/splitkv.log" 2>&1 || fail "split-KV PTX differential tests"
  grep -E "FAIL|passed|Error|error" "$WORK/splitkv.log" | tail -n 40
fi

MASKMOD_BUNDLE=${FA_MASKMOD_BUNDLE:-out/bundle-maskmod}
if [ -f "$MASKMOD_BUNDLE/manifest.json" ]; then
  step "mask_mod kernels ($MASKMOD_BUNDLE, through the runtime): differential tests"
  timeout -k 10 ${FA_MASKMOD_TIMEOUT:-300} python3 test/gpu/test_maskmod.py --lib "$LIB" \
    --bundle "$MASKMOD_BUNDLE" --cases "${FA_MASKMOD_CASES:-16}" \
    > "$WORK/maskmod.log" 2>&1 || fail "mask_mod differential tests"
  grep -E "FAIL|passed|Error|error" "$WORK/maskmod.log" | tail -n 40
fi

# Python mask_mods (fa.mods.trace_mask) through fa.attention, their kernels
# from the JIT disk cache made here by test_maskmod_python.py --prepare.
MASKMOD_PY_CACHE=${FA_MASKMOD_PY_CACHE:-out/jit-maskmod}
if [ "${FA_MASKMOD_PY:-1}" != 0 ] && [ -f "$MASKMOD_PY_CACHE/fa-aot-version.txt" ]; then
  step "Python mask_mods by JIT ($MASKMOD_PY_CACHE, no bundle): document, prefix-LM, sliding, block-causal documents, with a Python score_mod; fa.attention forward + backward, and fa.block_mask(fn) with the block-sparse forward, against float64"
  timeout -k 10 ${FA_MASKMOD_PY_TIMEOUT:-300} python3 test/gpu/test_maskmod_python.py \
    --cache "$MASKMOD_PY_CACHE" --lib "$LIB" --cases "${FA_MASKMOD_PY_CASES:-56}" \
    > "$WORK/maskmod_python.log" 2>&1 || fail "Python mask_mod differential tests"
  grep -E "^FAIL|passed|RESULT|Error|error" "$WORK/maskmod_python.log" | tail -n 40
fi

# Decode with Python score_mods and mask_mods through fa.attention: the
# split-KV kernels from the JIT disk cache made by test_decode_mods.py --prepare.
DECODE_MODS_CACHE=${FA_DECODE_MODS_CACHE:-out/jit-decode-mods}
if [ "${FA_DECODE_MODS:-1}" != 0 ] && [ -f "$DECODE_MODS_CACHE/fa-aot-version.txt" ]; then
  step "Decode with Python mods by JIT ($DECODE_MODS_CACHE): softcap, ALiBi, key bias, cache starts, documents + softcap, with sinks; fa.attention must take split-KV kernels; against float64"
  timeout -k 10 ${FA_DECODE_MODS_TIMEOUT:-300} python3 test/gpu/test_decode_mods.py \
    --cache "$DECODE_MODS_CACHE" --lib "$LIB" --cases "${FA_DECODE_MODS_CASES:-120}" \
    > "$WORK/decode_mods.log" 2>&1 || fail "decode with mods differential tests"
  grep -E "^FAIL|passed|RESULT|Error|error" "$WORK/decode_mods.log" | tail -n 40
fi

VARLEN_BUNDLE=${FA_VARLEN_BUNDLE:-out/bundle-varlen}
if [ "${FA_VARLEN:-0}" = 1 ]; then
  step "varlen forwards ($VARLEN_BUNDLE, through the runtime and fa.attention_varlen): differential tests"
  timeout -k 10 ${FA_VARLEN_TIMEOUT:-300} python3 test/gpu/test_varlen.py --lib "$LIB" \
    --bundle "$VARLEN_BUNDLE" --cases "${FA_VARLEN_CASES:-120}" > "$WORK/varlen.log" 2>&1 ||
    fail "varlen differential tests"
  grep -E "FAIL|passed|Error|error" "$WORK/varlen.log" | tail -n 40
  if [ "${FA_VARLEN_SAN:-1}" != 0 ]; then
    step "varlen forwards under compute-sanitizer memcheck (packed rows, offsets clamped, 12 short cases)"
    timeout -k 10 ${FA_SAN_TIMEOUT:-120} compute-sanitizer --tool memcheck --error-exitcode 9 \
      python3 test/gpu/test_varlen.py --lib "$LIB" --bundle "$VARLEN_BUNDLE" --cases 12 \
      --max-len 300 --seed 5 > "$WORK/varlen_memcheck.log" 2>&1
    rc=$?; grep -E "FAIL|passed|ERROR SUMMARY" "$WORK/varlen_memcheck.log" | tail -n 20
    [ $rc = 0 ] && echo "memcheck: clean" || fail "varlen memcheck (exit $rc)"
  fi
  VARLEN_SINKS_BUNDLE=${FA_VARLEN_SINKS_BUNDLE:-out/bundle-varlen-sinks}
  if [ -f "$VARLEN_SINKS_BUNDLE/manifest.json" ]; then
    step "varlen kernels with sinks ($VARLEN_SINKS_BUNDLE): differential tests, d_sinks summed over the sequences"
    timeout -k 10 ${FA_VARLEN_TIMEOUT:-300} python3 test/gpu/test_varlen.py --lib "$LIB" \
      --bundle "$VARLEN_SINKS_BUNDLE" --cases "${FA_VARLEN_CASES:-120}" \
      > "$WORK/varlen_sinks.log" 2>&1 || fail "varlen sinks differential tests"
    grep -E "FAIL|passed|Error|error" "$WORK/varlen_sinks.log" | tail -n 40
  fi
fi
if [ "${FA_VARLEN_BENCH:-0}" = 1 ]; then
  step "varlen prefill benchmark (bench/varlen.py: 64k tokens of 100..8k, causal and not)"
  timeout -k 10 ${FA_VARLEN_BENCH_TIMEOUT:-300} python3 bench/varlen.py --lib "$LIB" \
    --bundle "$VARLEN_BUNDLE" --dense-bundle "${FA_VARLEN_DENSE_BUNDLE:-out/bundle}" \
    ${FA_VARLEN_BENCH_ARGS:-} ||
    fail "varlen benchmark"
fi
BLOCKSPARSE_BUNDLE=${FA_BLOCKSPARSE_BUNDLE:-out/bundle-blocksparse}
if [ -n "${FA_BLOCKSPARSE:-}" ] && [ -f "$BLOCKSPARSE_BUNDLE/manifest.json" ]; then
  step "block-sparse kernels ($BLOCKSPARSE_BUNDLE): block masks built on the GPU, differential tests"
  timeout -k 10 ${FA_BLOCKSPARSE_TIMEOUT:-300} python3 test/gpu/test_blocksparse.py --lib "$LIB" \
    --bundle "$BLOCKSPARSE_BUNDLE" --cases "${FA_BLOCKSPARSE_CASES:-12}" \
    > "$WORK/blocksparse.log" 2>&1 || fail "block-sparse differential tests"
  grep -E "FAIL|passed|Error|error" "$WORK/blocksparse.log" | tail -n 40
  if [ "${FA_BLOCKSPARSE_BENCH:-1}" = 1 ]; then
    step "block-sparse benchmark (16k-token document mask, bf16 d128; bench/blocksparse.py)"
    timeout -k 10 ${FA_BLOCKSPARSE_BENCH_TIMEOUT:-240} python3 bench/blocksparse.py --lib "$LIB" \
      --bundle "$BLOCKSPARSE_BUNDLE" || fail "block-sparse benchmark"
  fi
fi

KVAPPEND_BUNDLE=${FA_KVAPPEND_BUNDLE:-out/bundle-kvappend}
if [ "${FA_KVAPPEND:-0}" = 1 ]; then
  [ -f "$KVAPPEND_BUNDLE/manifest.json" ] || fail "FA_KVAPPEND=1 but no bundle at $KVAPPEND_BUNDLE"
  step "KV-cache append + rotary + paged decode ($KVAPPEND_BUNDLE): differential tests"
  timeout -k 10 ${FA_KVAPPEND_TIMEOUT:-400} python3 test/gpu/test_kvappend.py --lib "$LIB" \
    --bundle "$KVAPPEND_BUNDLE" --cases "${FA_KVAPPEND_CASES:-120}" > "$WORK/kvappend.log" 2>&1 ||
    fail "kv-append differential tests (last step: $(grep '^step:' "$WORK/kvappend.log" | tail -n 1))"
  grep -E "FAIL|passed|Error|error" "$WORK/kvappend.log" | tail -n 40
  if [ "${FA_KVAPPEND_SAN:-1}" != 0 ]; then
    step "kv-append under compute-sanitizer memcheck (12 cases)"
    timeout -k 10 ${FA_SAN_TIMEOUT:-120} compute-sanitizer --tool memcheck --error-exitcode 9 \
      python3 test/gpu/test_kvappend.py --lib "$LIB" --bundle "$KVAPPEND_BUNDLE" --cases 12 \
      --seed 5 > "$WORK/kvappend_memcheck.log" 2>&1
    rc=$?; grep -E "FAIL|passed|ERROR SUMMARY" "$WORK/kvappend_memcheck.log" | tail -n 20
    [ $rc = 0 ] && echo "memcheck: clean" || fail "kv-append memcheck (exit $rc)"
  fi
fi

F32_BUNDLE=${FA_F32_BUNDLE:-out/bundle-f32}
if [ "${FA_F32:-0}" = 1 ]; then
  [ -f "$F32_BUNDLE/manifest.json" ] || fail "FA_F32=1 but no bundle at $F32_BUNDLE"
  step "f32 forwards, TF32 and 3xTF32 ($F32_BUNDLE): differential tests"
  timeout -k 10 ${FA_F32_TIMEOUT:-300} python3 test/gpu/test_f32.py --lib "$LIB" \
    --bundle "$F32_BUNDLE" --cases "${FA_F32_CASES:-8}" > "$WORK/f32.log" 2>&1 ||
    fail "f32 differential tests"
  grep -E "FAIL|passed|Error|error" "$WORK/f32.log" | tail -n 40
  if [ "${FA_F32_SAN:-1}" != 0 ]; then
    step "f32 under compute-sanitizer memcheck (1 case per kernel)"
    timeout -k 10 ${FA_SAN_TIMEOUT:-120} compute-sanitizer --tool memcheck --error-exitcode 9 \
      python3 test/gpu/test_f32.py --lib "$LIB" --bundle "$F32_BUNDLE" --cases 1 --seed 5 \
      > "$WORK/f32_memcheck.log" 2>&1
    rc=$?; grep -E "FAIL|passed|ERROR SUMMARY" "$WORK/f32_memcheck.log" | tail -n 20
    [ $rc = 0 ] && echo "memcheck: clean" || fail "f32 memcheck (exit $rc)"
  fi
fi

PAGED_BUNDLE=${FA_PAGED_BUNDLE:-out/bundle-paged}
if [ "${FA_PAGED:-0}" = 1 ]; then
  [ -f "$PAGED_BUNDLE/manifest.json" ] || fail "FA_PAGED=1 but no paged bundle at $PAGED_BUNDLE"
  step "paged-KV decode ($PAGED_BUNDLE, through fa.attention_with_kvcache): differential tests"
  timeout -k 10 ${FA_PAGED_TIMEOUT:-400} python3 test/gpu/test_paged.py --lib "$LIB" \
    --bundle "$PAGED_BUNDLE" --cases "${FA_PAGED_CASES:-160}" > "$WORK/paged.log" 2>&1 ||
    fail "paged differential tests"
  grep -E "FAIL|passed|Error|error" "$WORK/paged.log" | tail -n 40
  if [ "${FA_PAGED_SAN:-1}" != 0 ]; then
    step "paged-KV decode under compute-sanitizer memcheck (junk table entries, clamped pages, 12 cases)"
    timeout -k 10 ${FA_SAN_TIMEOUT:-120} compute-sanitizer --tool memcheck --error-exitcode 9 \
      python3 test/gpu/test_paged.py --lib "$LIB" --bundle "$PAGED_BUNDLE" --cases 12 \
      --seed 5 > "$WORK/paged_memcheck.log" 2>&1
    rc=$?; grep -E "FAIL|passed|ERROR SUMMARY" "$WORK/paged_memcheck.log" | tail -n 20
    [ $rc = 0 ] && echo "memcheck: clean" || fail "paged memcheck (exit $rc)"
  fi
  if [ "${FA_PAGED_BENCH:-1}" != 0 ]; then
    step "paged-KV decode benchmark (bench/decode.py --paged: pages 16, 64, 256 vs contiguous)"
    timeout -k 10 ${FA_PAGED_BENCH_TIMEOUT:-300} python3 bench/decode.py --lib "$LIB" \
      --bundle "$PAGED_BUNDLE" --paged ${FA_PAGED_BENCH_ARGS:-} || fail "paged benchmark"
  fi
fi
SINKS_BUNDLE=${FA_SINKS_BUNDLE:-out/bundle-sinks}
if [ "${FA_SINKS:-0}" = 1 ]; then
  # The sink kernels, then those with mask_mods where that bundle is built.
  for bundle in "$SINKS_BUNDLE" "${FA_SINKS_MASKMOD_BUNDLE:-out/bundle-sinks-maskmod}"; do
    [ "$bundle" = "$SINKS_BUNDLE" ] || [ -f "$bundle/manifest.json" ] || continue
    log="$WORK/$(basename "$bundle")"
    step "attention sinks ($bundle, through the runtime and fa.attention(sinks=t)): differential tests incl. d_sinks"
    timeout -k 10 ${FA_SINKS_TIMEOUT:-300} python3 test/gpu/test_sinks.py --lib "$LIB" \
      --bundle "$bundle" --cases "${FA_SINKS_CASES:-8}" --json "$log.json" \
      > "$log.log" 2>&1 || fail "sinks differential tests ($bundle)"
    grep -E "FAIL|passed|Error|error" "$log.log" | tail -n 40
  done
  if [ "${FA_SINKS_BENCH:-1}" != 0 ]; then
    step "sinks benchmark (bench/sinks.py: each sink kernel against its plain twin, same process)"
    timeout -k 10 ${FA_SINKS_BENCH_TIMEOUT:-200} python3 bench/sinks.py --lib "$LIB" \
      --bundle "$SINKS_BUNDLE" ${FA_SINKS_BENCH_ARGS:-} || fail "sinks benchmark"
  fi
fi

GQA_BUNDLE=${FA_GQA_BUNDLE:-out/bundle-gqa}
if [ -f "$GQA_BUNDLE/manifest.json" ]; then
  step "packed-GQA kernels ($GQA_BUNDLE, through the runtime): differential tests"
  timeout -k 10 ${FA_GQA_TIMEOUT:-240} python3 test/gpu/test_packgqa.py --bundle "$GQA_BUNDLE" \
    --lib "$LIB" > "$WORK/packgqa.log" 2>&1 || fail "packed-GQA differential tests"
  grep -E "FAIL|passed|Error|error" "$WORK/packgqa.log" | tail -n 40
fi

TMA_BUNDLE=${FA_TMA_BUNDLE:-out/bundle-tma}
if [ -f "$TMA_BUNDLE/manifest.json" ]; then
  step "TMA decode kernels ($TMA_BUNDLE): differential tests, memcheck of 30 cases"
  timeout -k 10 ${FA_GQA_TIMEOUT:-240} python3 test/gpu/test_packgqa.py --bundle "$TMA_BUNDLE" \
    --lib "$LIB" > "$WORK/tma.log" 2>&1 || fail "TMA decode differential tests"
  grep -E "FAIL|passed|Error|error" "$WORK/tma.log" | tail -n 40
  if [ "${FA_SAN:-1}" != 0 ]; then
    timeout -k 10 ${FA_SAN_TIMEOUT:-120} compute-sanitizer --tool memcheck --error-exitcode 9 \
      python3 test/gpu/test_packgqa.py --bundle "$TMA_BUNDLE" --lib "$LIB" --max-cases 30 \
      > "$WORK/tma-memcheck.log" 2>&1 || fail "TMA decode kernels under memcheck"
    tail -n 2 "$WORK/tma-memcheck.log"
  fi
fi

FP8_BUNDLE=${FA_FP8_BUNDLE:-out/bundle-fp8}
if [ "${FA_FP8:-0}" = 1 ]; then
  if [ -f "$FP8_BUNDLE/manifest.json" ]; then
    step "fp8 e4m3 forwards ($FP8_BUNDLE): differential tests against float64 and naive fp8"
    timeout -k 10 ${FA_FP8_TIMEOUT:-240} python3 test/gpu/test_fp8.py --bundle "$FP8_BUNDLE" \
      --lib "$LIB" || fail "fp8 differential tests"
    step "the GPU quantiser (fa_quantize) against PyTorch's quantize_fp8"
    timeout -k 10 ${FA_FP8_TIMEOUT:-240} python3 test/gpu/test_quantize.py --bundle "$FP8_BUNDLE" \
      --lib "$LIB" || fail "quantiser differential tests"
    if [ "${FA_FP8_BENCH:-1}" != 0 ]; then
      step "fp8 forward TFLOP/s against fa bf16 and SDPA (cuDNN, flash)"
      FP8_BF16=()
      [ $HAVE_BUNDLE = 1 ] && FP8_BF16=(--bf16-bundle "$BUNDLE")
      timeout -k 10 ${FA_FP8_BENCH_TIMEOUT:-240} python3 bench/fp8.py --bundle "$FP8_BUNDLE" \
        "${FP8_BF16[@]}" --lib "$LIB" --json "$OUT/fp8.json" || fail "fp8 benchmark"
    fi
  else
    fail "FA_FP8=1 but no fp8 bundle at $FP8_BUNDLE"
  fi
fi

FP8_BWD_BUNDLE=${FA_FP8_BWD_BUNDLE:-out/bundle-fp8-bwd}
if [ "${FA_FP8_BWD:-0}" = 1 ]; then
  if [ -f "$FP8_BWD_BUNDLE/manifest.json" ]; then
    step "the fp8 e4m3 backward ($FP8_BWD_BUNDLE): differential tests against float64 and naive fp8"
    timeout -k 10 ${FA_FP8_TIMEOUT:-240} python3 test/gpu/test_fp8_backward.py \
      --bundle "$FP8_BWD_BUNDLE" --lib "$LIB" || fail "fp8 backward differential tests"
    step "fp8 backward TFLOP/s against fa bf16 and SDPA (cuDNN, flash)"
    FP8_BWD_BF16=()
    [ $HAVE_BUNDLE = 1 ] && FP8_BWD_BF16=(--bf16-bundle "$BUNDLE")
    timeout -k 10 ${FA_FP8_BENCH_TIMEOUT:-240} python3 bench/fp8_backward.py \
      --bundle "$FP8_BWD_BUNDLE" "${FP8_BWD_BF16[@]}" --lib "$LIB" --json "$OUT/fp8_backward.json" \
      || fail "fp8 backward benchmark"
  else
    fail "FA_FP8_BWD=1 but no fp8 backward bundle at $FP8_BWD_BUNDLE"
  fi
fi

if [ $HAVE_BUNDLE = 1 ] && [ "${FA_EVERY:-1}" != 0 ]; then
  step "every kernel of $BUNDLE, launched directly"
  timeout -k 10 $T_EVERY python3 test/gpu/test_every_kernel.py --bundle "$BUNDLE" --lib "$LIB" --progress \
    --json "$OUT/every_kernel.json" || fail "every-kernel suite ($BUNDLE)"
  step "every-kernel suite on causal kernels running their unmasked twins' code (must fail each)"
  python3 test/gpu/swap_kernels.py --bundle "$BUNDLE" --out "$WORK/swapped" &&
    timeout -k 10 $T_EVERY python3 test/gpu/test_every_kernel.py --bundle "$WORK/swapped" \
      --lib "$LIB" --json "$WORK/swapped.json" | grep -E "^(ok|FAIL) |RESULT"
  python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); sys.exit(not r or any(k["ok"] for k in r))' \
    "$WORK/swapped.json" && echo "the suite failed every swapped kernel" ||
    fail "the every-kernel suite passed a kernel running another kernel's code"
fi

if [ $HAVE_BUNDLE = 1 ] && [ "${FA_GRAPH:-1}" != 0 ]; then
  step "every kernel of $BUNDLE captured into a CUDA graph, replayed with new data, against eager"
  timeout -k 10 $T_GRAPH python3 test/gpu/test_cuda_graph.py --bundle "$BUNDLE" --lib "$LIB" \
    --json "$WORK/cuda_graph.json" || fail "CUDA-graph capture ($BUNDLE)"
fi

if [ $HAVE_BUNDLE = 1 ] && [ "${FA_STREAMS:-1}" != 0 ]; then
  step "persistent forwards and deterministic backwards on 4 concurrent streams and beside a graph replay"
  timeout -k 10 ${FA_STREAMS_TIMEOUT:-120} python3 test/gpu/test_streams.py --bundle "$BUNDLE" \
    --lib "$LIB" || fail "concurrent streams ($BUNDLE)"
fi

if [ $HAVE_MOD = 1 ]; then
  step "score_mod kernels: differential tests on $MOD_BUNDLE"
  mkdir -p "$WORK/score_mod"
  timeout -k 10 $T_MOD python3 test/gpu/test_score_mod.py --bundle "$MOD_BUNDLE" --lib "$LIB" \
    --cases "$MOD_CASES" --progress --json "$WORK/score_mod/differential.json" ||
    fail "score_mod differential tests ($MOD_BUNDLE)"
  step "score_mod kernels reading tensors (mod_args: ALiBi slopes, a relative-bias table, a key bias; and softcap30): differential tests, every mask, GQA, fwd+bwd"
  timeout -k 10 $T_MOD python3 test/gpu/test_score_mod.py --bundle "$MOD_BUNDLE" --lib "$LIB" \
    --only alibi_slopes,rel_bias,key_bias,softcap30 --cases "${FA_MODARGS_CASES:-120}" --seed 7 \
    --json "$WORK/score_mod/mod_args_differential.json" ||
    fail "score_mod mod_args differential tests ($MOD_BUNDLE)"
  step "score_mod kernels: every kernel of $MOD_BUNDLE, launched directly (shapes $MOD_SHAPES)"
  timeout -k 10 $T_MOD_EVERY python3 test/gpu/test_every_kernel.py --bundle "$MOD_BUNDLE" \
    --lib "$LIB" --shapes "$MOD_SHAPES" --json "$WORK/score_mod/every_kernel.json" ||
    fail "every-kernel suite ($MOD_BUNDLE)"
fi

# Python score_mods indexing captured tensors (fa.mods), their kernels from a
# bundle built here by test_score_mod_python.py --prepare.
PYMOD_BUNDLE=${FA_PYMOD_BUNDLE:-out/bundle-pymod}
if [ "${FA_MOD:-1}" != 0 ] && [ -f "$PYMOD_BUNDLE/manifest.json" ]; then
  step "Python score_mods reading captured tensors (ALiBi slopes, bf16 bias table, f16 key bias, int32 document ids): differential tests on $PYMOD_BUNDLE"
  mkdir -p "$WORK/score_mod"
  timeout -k 10 $T_MOD python3 test/gpu/test_score_mod_python.py --bundle "$PYMOD_BUNDLE" \
    --lib "$LIB" --cases "${FA_PYMOD_CASES:-64}" > "$WORK/score_mod_python.log" 2>&1 ||
    fail "Python score_mod differential tests ($PYMOD_BUNDLE)"
  grep -E "^FAIL|passed|RESULT|Error|error" "$WORK/score_mod_python.log" | tail -n 40
fi

# Random score_mod programs (test/gpu/random_score_mods.py), their references
# rebuilt here from the kernel names.
RND_BUNDLE=${FA_RND_BUNDLE:-out/bundle-rnd}
if [ -f "$RND_BUNDLE/manifest.json" ]; then
  step "random score_mod programs: differential tests and every kernel of $RND_BUNDLE"
  mkdir -p "$WORK/score_mod"
  timeout -k 10 $T_MOD python3 test/gpu/test_score_mod.py --bundle "$RND_BUNDLE" --lib "$LIB" \
    --cases "$MOD_CASES" --json "$WORK/score_mod/random_differential.json" ||
    fail "random score_mod differential tests ($RND_BUNDLE)"
  timeout -k 10 $T_MOD_EVERY python3 test/gpu/test_every_kernel.py --bundle "$RND_BUNDLE" \
    --lib "$LIB" --shapes "$MOD_SHAPES" --json "$WORK/score_mod/random_every_kernel.json" ||
    fail "every-kernel suite ($RND_BUNDLE)"
fi

step "compute-sanitizer (every kernel, two small launches each)"
# A planted bug per tool first: a tool that misses it would call anything clean.
[ "${FA_SAN:-1}" = 0 ] || nvcc -arch=sm_90 -o "$WORK/sanitizer_control" test/gpu/sanitizer_control.cu ||
  fail "sanitizer control build"
SAN_BUNDLE=$FIXTURE; [ $HAVE_MOD = 1 ] && SAN_BUNDLE=$MOD_BUNDLE; [ $HAVE_BUNDLE = 1 ] && SAN_BUNDLE=$BUNDLE
for tool in $([ "${FA_SAN:-1}" = 0 ] || echo memcheck racecheck); do
  planted=$([ $tool = memcheck ] && echo oob || echo race)
  compute-sanitizer --tool $tool --error-exitcode 9 "$WORK/sanitizer_control" $planted \
    >"$WORK/control_$tool.log" 2>&1
  rc=$?; grep -m 3 -E "Invalid|hazard|SUMMARY" "$WORK/control_$tool.log"
  [ $rc = 9 ] && echo "$tool: reports the planted $planted bug" ||
    fail "compute-sanitizer $tool did not report the planted $planted bug (exit $rc)"
  timeout -k 10 $T_SAN compute-sanitizer --tool $tool --error-exitcode 9 \
    python3 test/gpu/test_every_kernel.py --sanitize --bundle "$SAN_BUNDLE" --lib "$LIB" \
    >"$OUT/sanitizer_$tool.log" 2>&1
  rc=$?; tail -n 6 "$OUT/sanitizer_$tool.log"
  [ $rc = 0 ] && echo "$tool: clean" || fail "compute-sanitizer $tool (exit $rc)"
done

step "benchmark"
MODE=${FA_BENCH:-$([ $HAVE_BUNDLE = 1 ] && echo full || echo quick)}
if [ $HAVE_BUNDLE = 1 ] && [ "$MODE" != none ]; then
  timeout $T_BENCH python3 bench/bench.py --bundle "$BUNDLE" --lib "$LIB" \
    $([ "$MODE" = quick ] && echo --quick) ${FA_BENCH_ARGS:-} --json "$OUT/bench.json" || fail "bench"
elif [ "$MODE" != none ]; then
  # The fixture's naive kernels: checks the harness, not a performance number.
  timeout $T_BENCH python3 bench/bench.py --bundle "$FIXTURE" --lib "$LIB" --quick --tokens 8192 \
    --budget-ms 1500 --fa-directions fwd --json "$OUT/bench_fixture.json" || fail "bench (fixture)"
fi

if [ "${FA_STRIDED:-0}" = 1 ] && [ $HAVE_BUNDLE = 1 ]; then
  step "strided inputs: every forward and backward kernel on x.view(B,N,H,D).transpose(1,2) views, O (dQ, dK, dV) in their layout; fa.attention forward + backward"
  timeout ${FA_STRIDED_TIMEOUT:-300} python3 test/gpu/test_strided.py --bundle "$BUNDLE" --lib "$LIB" \
    || fail "strided inputs"
  step "strided benchmark (B8 N4k H16 d128 causal from [B,N,H,D]): fa strided vs fa with copies vs cuDNN on the views, forward and forward + backward"
  timeout ${FA_STRIDED_TIMEOUT:-300} python3 bench/strided.py --bundle "$BUNDLE" --lib "$LIB" \
    --repeat ${FA_STRIDED_REPEAT:-1} || fail "strided benchmark"
fi

if [ "${FA_DECODE:-0}" = 1 ] && [ $HAVE_BUNDLE = 1 ]; then
  step "decode benchmark (Nq 1, GQA 32/8, d 128 bf16): fa (packed GQA, split-KV where chosen), fa unpacked, cuDNN, flash, K+V copy"
  timeout ${FA_DECODE_TIMEOUT:-200} python3 bench/decode.py --bundle "$BUNDLE" --lib "$LIB" \
    --json "$WORK/decode.json" || fail "decode benchmark"
fi

if [ "${FA_RING:-0}" = 1 ] && [ $HAVE_BUNDLE = 1 ]; then
  step "ring attention: the schedule simulated on one GPU against float64, then its benchmark"
  timeout ${FA_RING_TIMEOUT:-300} python3 test/gpu/test_ring.py --bundle "$BUNDLE" --lib "$LIB" ||
    fail "ring schedule"
  if [ -n "${FA_RING_GPUS:-}" ]; then
    timeout ${FA_RING_TIMEOUT:-300} torchrun --nproc_per_node="$FA_RING_GPUS" bench/ring.py \
      --bundle "$BUNDLE" --lib "$LIB" --tokens ${FA_RING_TOKENS:-32768} || fail "ring benchmark"
  else
    timeout ${FA_RING_TIMEOUT:-300} python3 bench/ring.py --bundle "$BUNDLE" --lib "$LIB" \
      --simulate ${FA_RING_WORLD:-4} --tokens ${FA_RING_TOKENS:-16384} || fail "ring benchmark"
  fi
fi

# A/B against another release: its bundle (out/ab/bundle) launched through
# its own runtime, built here from its sources (out/ab/src/{lib/Runtime,
# include/fa/Runtime}), beside this one's, in the same process.
if [ $HAVE_BUNDLE = 1 ] && [ -f out/ab/bundle/manifest.json ] && [ -d out/ab/src/lib/Runtime ]; then
  step "A/B: $BUNDLE against out/ab/bundle through out/ab/src's runtime (${FA_AB_ARGS:---quick})"
  cmake -G Ninja -S out/ab/src/lib/Runtime -B "$WORK/build-rt-ab" -DFA_JSON_INCLUDE_DIR="$PWD/out/include" \
    -DCMAKE_BUILD_TYPE=Release >/dev/null && ninja -C "$WORK/build-rt-ab" >/dev/null &&
    timeout ${FA_AB_TIMEOUT:-300} python3 bench/bench.py --bundle "$BUNDLE" --lib "$LIB" \
      --variant "ab=out/ab/bundle@$WORK/build-rt-ab/lib/libfa_runtime.so" ${FA_AB_ARGS:---quick} \
      --json "$OUT/bench_ab.json" || fail "A/B bench"
fi

if [ $HAVE_BUNDLE = 1 ] && [ -n "${FA_FLEX:-}" ]; then
  step "benchmark with FlexAttention (subset: N in ${FA_FLEX_SEQS:-2048,8192}, d = ${FA_FLEX_DIMS:-128})"
  timeout ${FA_FLEX_TIMEOUT:-150} python3 bench/bench.py --bundle "$BUNDLE" --lib "$LIB" --flex \
    --seqs "${FA_FLEX_SEQS:-2048,8192}" --dims "${FA_FLEX_DIMS:-128}" --json "$OUT/bench_flex.json" \
    || fail "bench (flex)"
fi

# FA_MODBENCH=1: softcap30 and ALiBi from a slopes tensor at N 2k..16k, the
# grid of issue 14's speed targets (FA_MOD_BENCH picks mods and FA_FLEX_SEQS N).
MOD_BENCH=${FA_MOD_BENCH:-$([ "${FA_MODBENCH:-0}" = 1 ] && echo softcap30,alibi_slopes)}
MOD_BENCH_SEQS=${FA_FLEX_SEQS:-$([ "${FA_MODBENCH:-0}" = 1 ] && echo 2048,4096,8192,16384 || echo 2048,8192)}
for mod in $([ $HAVE_MOD = 1 ] && echo "$MOD_BENCH" | tr , ' '); do
  step "benchmark: score_mod $mod (fa with and without it, FlexAttention with it, cuDNN plain)"
  timeout ${FA_MOD_BENCH_TIMEOUT:-300} python3 bench/bench.py --bundle "$MOD_BUNDLE" --lib "$LIB" \
    --score-mod "$mod" --seqs "$MOD_BENCH_SEQS" --dims 128 \
    --json "$WORK/score_mod/bench_$mod.json" || fail "bench (score_mod $mod)"
done
# The score_mod steps' results as one file ($OUT brings back at most 8).
[ -d "$WORK/score_mod" ] && python3 -c '
import glob, json, os, sys
out = {}
for p in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    with open(p) as f:
        out[os.path.basename(p)[:-5]] = json.load(f)
json.dump(out, open(sys.argv[2], "w"), indent=1)' "$WORK/score_mod" "$OUT/score_mod.json"

# Everyday use (issue 18): kernels from the JIT disk cache, torch.compile,
# host overhead; their JSON goes to $OUT/everyday.json.
mkdir -p "$WORK/everyday"
JIT_CACHE=${FA_JIT_CACHE:-out/jit-cache}
if [ "${FA_JIT:-1}" != 0 ] && [ -f "$JIT_CACHE/fa-aot-version.txt" ]; then
  step "JIT: kernels served from the carried disk cache (no bundle loaded), a miss reaches the compiler"
  timeout -k 10 ${FA_JIT_TIMEOUT:-120} python3 test/gpu/test_jit_device.py --cache "$JIT_CACHE" \
    --lib "$LIB" || fail "JIT from the disk cache"
fi
if [ "${FA_TORCH_COMPILE:-0}" != 0 ] && [ $HAVE_BUNDLE = 1 ]; then
  step "torch.compile(fullgraph=True) training steps with fa attention against eager and SDPA"
  timeout -k 10 ${FA_TORCH_COMPILE_TIMEOUT:-300} python3 test/gpu/test_torch_compile.py \
    --bundle "$BUNDLE" --lib "$LIB" --json "$WORK/everyday/torch_compile.json" ||
    fail "torch.compile"
fi
if [ "${FA_EXT:-0}" != 0 ] && [ $HAVE_BUNDLE = 1 ]; then
  step "C++ autograd extension against the Python path (build, numerics, CUDA graph, host µs)"
  FA_TORCH_EXT=1 timeout -k 10 ${FA_EXT_TIMEOUT:-400} python3 test/gpu/test_torch_ext.py \
    --bundle "$BUNDLE" --lib "$LIB" || fail "torch extension"
fi
if [ "${FA_OVERHEAD:-0}" != 0 ] && [ $HAVE_BUNDLE = 1 ]; then
  step "host overhead of tiny calls: fa against SDPA"
  # Host µs against SDPA, fa's host time in layers (C ABI, *_into, fa.attention), GPU µs
  # with the host kept ahead, torch.profiler kernels/memsets/allocations per call.
  timeout -k 10 ${FA_OVERHEAD_TIMEOUT:-300} python3 bench/overhead.py --bundle "$BUNDLE" \
    --lib "$LIB" --cprofile --json "$WORK/everyday/overhead.json" || fail "overhead benchmark"
fi
python3 -c '
import glob, json, os, sys
out = {os.path.basename(p)[:-5]: json.load(open(p))
       for p in sorted(glob.glob(os.path.join(sys.argv[1], "*.json")))}
if out:
    json.dump(out, open(sys.argv[2], "w"), indent=1)' "$WORK/everyday" "$OUT/everyday.json"

step "done"
[ $status = 0 ] && echo "DEVICE RUN: PASS" || echo "DEVICE RUN: FAIL"
rm -rf "$WORK"
exit $status
