// RUN: fa-opt %s -o /dev/null
// RUN: fa-aot --score-mods %s -o %t --config fwd:bf16:d64:causal:mod=alibi_slopes --config bwd:bf16:d64:causal:mod=alibi_slopes --config fwd:f16:d128:none:wgmma:mod=rel_bias --config bwd:f16:d128:none:mod=rel_bias --config bwd:bf16:d128:causal:wgmma:mod=rel_bias --config fwd:bf16:d128:causal:mod=key_bias --config fwd:bf16:d128:causal:wgmma:mod=key_bias --config bwd:bf16:d128:window:l64:r16:mod=key_bias | FileCheck %s
// CHECK-DAG: fwd_bf16_d64_{{.+}}_mod_alibi_slopes: registers {{[0-9]+}}, spill bytes 0
// CHECK-DAG: bwd_bf16_d64_{{.+}}_mod_alibi_slopes: registers {{[0-9]+}}, spill bytes 0
// CHECK-DAG: fwd_f16_d128_{{.+}}_wgmma_sm90a_mod_rel_bias: registers {{[0-9]+}}, spill bytes 0
// CHECK-DAG: bwd_f16_d128_{{.+}}_mod_rel_bias: registers {{[0-9]+}}, spill bytes 0
// CHECK-DAG: bwd_bf16_d128_{{.+}}_wgmma_sm90a_mod_rel_bias: registers {{[0-9]+}}, spill bytes 0
// CHECK-DAG: fwd_bf16_d128_bq64_{{.+}}_mod_key_bias: registers {{[0-9]+}}, spill bytes 0
// CHECK-DAG: fwd_bf16_d128_{{.+}}_wgmma_sm90a_mod_key_bias: registers {{[0-9]+}}, spill bytes 0
// CHECK-DAG: bwd_bf16_d128_{{.+}}_mod_key_bias: registers {{[0-9]+}}, spill bytes 0
// RUN: FileCheck %s --check-prefix=MANIFEST --input-file %t/manifest.json
// The manifest lists each kernel's mod_args with their extents and the index
// of the first (after fa_fwd's 11 and 12 strides; after fa_bwd's 15; after a
// wgmma forward's 3 maps too), in a version-8 bundle.
// MANIFEST:      "mod_arg_param": 23,
// MANIFEST-NEXT: "mod_args": [
// MANIFEST-NEXT:   {
// MANIFEST-NEXT:     "dims": [
// MANIFEST-NEXT:       "heads"
// MANIFEST-NEXT:     ],
// MANIFEST-NEXT:     "dtype": "f32",
// MANIFEST-NEXT:     "rank": 1
// MANIFEST:      "tag": "fwd_bf16_d64_{{.+}}_mod_alibi_slopes"
// MANIFEST:      "mod_arg_param": 33,
// MANIFEST:      "tag": "bwd_bf16_d64_{{.+}}_mod_alibi_slopes"
// MANIFEST:      "mod_arg_param": 26,
// MANIFEST-NEXT: "mod_args": [
// MANIFEST-NEXT:   {
// MANIFEST-NEXT:     "dims": [
// MANIFEST-NEXT:       "heads",
// MANIFEST-NEXT:       "any"
// MANIFEST:      "tag": "fwd_f16_d128_{{.+}}_wgmma_sm90a_mod_rel_bias"
// MANIFEST:      "batch",
// MANIFEST-NEXT:   "nk"
// MANIFEST:      "tag": "fwd_bf16_d128_bq64_{{.+}}_mod_key_bias"
// MANIFEST:      "version": 8
//
// Not here: rel_bias on the mma.sync forward spills (24 bytes at d64, 12 at
// d128: a clamped 2-D index and a 64-bit address per score element); the
// wgmma forward and both backwards do not.

// score_mods that read tensors (mod_args): each function takes, after
// (score, b, h, q_idx, kv_idx), the tensors it reads; fa-aot makes them
// mod_args of the attention, so the kernels take one global pointer and the
// extents of each after their other parameters (docs/ABI.md). Reads are
// clamped into the tensor. `fa.dims` binds each extent to a problem size
// (or "any"), which the manifest lists and the runtime checks at launch. The backward treats the tensors as constants.

// ALiBi with a slope per query head from a tensor [H]: s + slopes[h]·(kv - q).
func.func @alibi_slopes(%s: f32, %b: index, %h: index, %q: index, %kv: index, %slopes: tensor<?xf32> {fa.dims = ["heads"]}) -> f32 {
  %slope = tensor.extract %slopes[%h] : tensor<?xf32>
  %d = arith.subi %kv, %q : index
  %di = arith.index_cast %d : index to i32
  %df = arith.sitofp %di : i32 to f32
  %bias = arith.mulf %slope, %df : f32
  %r = arith.addf %s, %bias : f32
  return %r : f32
}

// A relative-position bias table [H, 8191] (distances -4095..4095, the ends
// clamped): s + table[h, kv - q + 4095].
func.func @rel_bias(%s: f32, %b: index, %h: index, %q: index, %kv: index, %table: tensor<?x?xf32> {fa.dims = ["heads", "any"]}) -> f32 {
  %center = arith.constant 4095 : index
  %d = arith.subi %kv, %q : index
  %col = arith.addi %d, %center : index
  %x = tensor.extract %table[%h, %col] : tensor<?x?xf32>
  %r = arith.addf %s, %x : f32
  return %r : f32
}

// A per-key bias [B, Nk] (padding, key importance): s + bias[b, kv].
func.func @key_bias(%s: f32, %b: index, %h: index, %q: index, %kv: index, %bias: tensor<?x?xf32> {fa.dims = ["batch", "nk"]}) -> f32 {
  %x = tensor.extract %bias[%b, %kv] : tensor<?x?xf32>
  %r = arith.addf %s, %x : f32
  return %r : f32
}
