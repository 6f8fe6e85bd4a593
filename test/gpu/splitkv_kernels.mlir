// RUN: fa-opt %s -split-input-file -fa-lower-to-nvvm="split-kv=1" | FileCheck %s
// CHECK: gpu.binary @fa_fwd_bf16_d128_bq64_bkv64_w4_s2_none_sm90a_splitkv
// CHECK: gpu.binary @fa_fwd_bf16_d128_bq64_bkv64_w4_s2_causal_bottom_right_sm90a_splitkv
// CHECK: gpu.binary @fa_fwd_f16_d64_bq64_bkv64_w4_s2_none_sm90a_splitkv
// CHECK: gpu.binary @fa_fwd_f16_d64_bq64_bkv64_w4_s2_causal_bottom_right_sm90a_splitkv

// The split-KV kernels that test/gpu/test_splitkv_ptx.py launches on the
// device (built with fa-opt -split-input-file -fa-lower-to-nvvm="split-kv=1";
// shapes are run-time, only dtype, head dim and mask select a kernel).
func.func @bf16_d128_none(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16> -> tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
}
// -----
func.func @bf16_d128_cbr(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal_bottom_right>} : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16> -> tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
}
// -----
func.func @f16_d64_none(%q: tensor<?x?x?x64xf16>, %k: tensor<?x?x?x64xf16>, %v: tensor<?x?x?x64xf16>) -> (tensor<?x?x?x64xf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v : tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16> -> tensor<?x?x?x64xf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x64xf16>, tensor<?x?x?xf32>
}
// -----
func.func @f16_d64_cbr(%q: tensor<?x?x?x64xf16>, %k: tensor<?x?x?x64xf16>, %v: tensor<?x?x?x64xf16>) -> (tensor<?x?x?x64xf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal_bottom_right>} : tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16> -> tensor<?x?x?x64xf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x64xf16>, tensor<?x?x?xf32>
}
