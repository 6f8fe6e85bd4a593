// RUN: fa-opt %s -o /dev/null
// RUN: fa-aot --score-mods %s -o %t --config fwd:bf16:d64:causal:maskmod=document --config bwd:bf16:d64:causal:maskmod=document --config fwd:bf16:d128:causal:wgmma:maskmod=document --config bwd:bf16:d128:causal:wgmma:maskmod=document --config fwd:f16:d128:none:maskmod=prefix_lm --config bwd:f16:d64:none:maskmod=prefix_lm --config fwd:bf16:d128:none:wgmma:maskmod=prefix_lm --config fwd:bf16:d64:causal:mod=softcap30:maskmod=document --config bwd:bf16:d64:causal:mod=softcap30:maskmod=document --config fwd:bf16:d128:causal_bottom_right:splitkv:maskmod=document --config fwd:bf16:d128:none:mod=key_bias:maskmod=document | FileCheck %s
// CHECK-DAG: fwd_bf16_d64_{{.+}}_causal_sm90a_maskmod_document: registers {{[0-9]+}}, spill bytes 0
// CHECK-DAG: bwd_bf16_d64_{{.+}}_causal_sm90a_maskmod_document: registers {{[0-9]+}}, spill bytes 0
// CHECK-DAG: fwd_bf16_d128_{{.+}}_wgmma_sm90a{{.*}}_maskmod_document: registers {{[0-9]+}}, spill bytes 0
// CHECK-DAG: bwd_bf16_d128_{{.+}}_wgmma_sm90a{{.*}}_maskmod_document: registers {{[0-9]+}}, spill bytes 0
// CHECK-DAG: fwd_f16_d128_{{.+}}_none_sm90a_maskmod_prefix_lm: registers {{[0-9]+}}, spill bytes 0
// CHECK-DAG: bwd_f16_d64_{{.+}}_none_sm90a_maskmod_prefix_lm: registers {{[0-9]+}}, spill bytes 0
// CHECK-DAG: fwd_bf16_d128_{{.+}}_wgmma_sm90a{{.*}}_maskmod_prefix_lm: registers {{[0-9]+}}, spill bytes 0
// CHECK-DAG: fwd_bf16_d64_{{.+}}_mod_softcap30_maskmod_document: registers {{[0-9]+}}, spill bytes 0
// CHECK-DAG: bwd_bf16_d64_{{.+}}_mod_softcap30_maskmod_document: registers {{[0-9]+}}, spill bytes 0
// CHECK-DAG: fwd_bf16_d128_{{.+}}_splitkv_maskmod_document: registers {{[0-9]+}}, spill bytes 0
// CHECK-DAG: fwd_bf16_d128_{{.+}}_mod_key_bias_maskmod_document: registers {{[0-9]+}}, spill bytes 0

// The mask_mod library of the GPU tests: `fa-aot --score-mods
// test/gpu/mask_mods.mlir` with configs that name a mask_mod function
// (maskmod=<name>) and optionally a score_mod of the same file (mod=<name>).
// A mask_mod takes (b, h, q_idx, kv_idx), then the tensors it reads, and
// returns whether the key is visible; the kernels evaluate it on every score
// of every tile, after the score_mod and with the config's enum mask. Its
// tensors become mod_args after the score_mod's (docs/ABI.md).

// Document masking of packed sequences: doc ids [B, N] (i32); a query sees
// the keys of its own document (with causal: the earlier ones).
func.func @document(%b: index, %h: index, %q: index, %kv: index, %doc: tensor<?x?xi32>) -> i1 {
  %dq = tensor.extract %doc[%b, %q] : tensor<?x?xi32>
  %dk = tensor.extract %doc[%b, %kv] : tensor<?x?xi32>
  %same = arith.cmpi eq, %dq, %dk : i32
  return %same : i1
}

// Prefix-LM: the first prefix[b] keys are visible to every query of batch b
// (bidirectional prefix), the rest causally.
func.func @prefix_lm(%b: index, %h: index, %q: index, %kv: index, %prefix: tensor<?xi32>) -> i1 {
  %p = tensor.extract %prefix[%b] : tensor<?xi32>
  %pi = arith.index_cast %p : i32 to index
  %inPrefix = arith.cmpi slt, %kv, %pi : index
  %causal = arith.cmpi sle, %kv, %q : index
  %r = arith.ori %inPrefix, %causal : i1
  return %r : i1
}

// Score_mods to combine with them.
// Logit soft-capping: 30·tanh(s/30).
func.func @softcap30(%s: f32, %b: index, %h: index, %q: index, %kv: index) -> f32 {
  %cap = arith.constant 30.0 : f32
  %x = arith.divf %s, %cap : f32
  %t = math.tanh %x : f32
  %r = arith.mulf %t, %cap : f32
  return %r : f32
}

// A bias per (batch, key) from a tensor [B, Nk] (f32).
func.func @key_bias(%s: f32, %b: index, %h: index, %q: index, %kv: index, %bias: tensor<?x?xf32>) -> f32 {
  %x = tensor.extract %bias[%b, %kv] : tensor<?x?xf32>
  %r = arith.addf %s, %x : f32
  return %r : f32
}
