// RUN: fa-opt %s -split-input-file -attn-gpu-plan | FileCheck %s --enable-var-scope
// RUN: fa-opt %s -split-input-file -attn-gpu-plan="mma=wgmma" | FileCheck %s --check-prefix=WGMMA
// RUN: fa-opt %s -split-input-file -attn-gpu-plan="warps=8 block-kv=128 target=sm_80" | FileCheck %s --check-prefix=OPT
// RUN: fa-opt %s -split-input-file -attn-gpu-plan="mma=wgmma" -fa-wgmma-ping-pong=false -fa-wgmma-rescale-in-turn=false | FileCheck %s --check-prefix=SWITCH

// The plan is resolved once, on the op, with every default for the head dim
// filled in; the tag names the kernel that convert-attn-to-gpu will build.

// CHECK-LABEL: func @forward
// CHECK: attn.attention
// CHECK-SAME: attn.kernel_plan = {block_kv = 64 : i64, block_q = 64 : i64, mma = "mma_sync", stages = 2 : i64, tag = "fwd_bf16_d128_bq64_bkv64_w4_s2_causal_sm90a", target = "sm_90a", warps = 4 : i64}
// WGMMA-LABEL: func @forward
// WGMMA: attn.kernel_plan = {block_kv = 128 : i64, block_q = 128 : i64, grid = "blocks", mma = "wgmma", schedule = {lazy_rescale = false, ping_pong = true, ragged_first = false, rescale_in_turn = true, smem_epilogue = true}, stages = 2 : i64, tag = "fwd_bf16_d128_bq128_bkv128_w12_s2_causal_wgmma_sm90a", target = "sm_90a", warps = 12 : i64}
// OPT-LABEL: func @forward
// OPT: attn.kernel_plan = {block_kv = 128 : i64, block_q = 128 : i64, mma = "mma_sync", stages = 2 : i64, tag = "fwd_bf16_d128_bq128_bkv128_w8_s2_causal_sm80", target = "sm_80", warps = 8 : i64}
// Every switch that changes the code is in the plan and, where it departs
// from the measured default, in the tag: two different kernels never share a
// name.
// SWITCH-LABEL: func @forward
// SWITCH: schedule = {lazy_rescale = false, ping_pong = false, ragged_first = false, rescale_in_turn = false, smem_epilogue = true}
// SWITCH-SAME: tag = "fwd_bf16_d128_bq128_bkv128_w12_s2_causal_wgmma_sm90a_pp0_rit0"
func.func @forward(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal>} : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16> -> tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
}

// -----

// The backward's defaults depend on D and the mask: 8 warps of 16 keys at d64
// (no grid: the persistent grid is a forward choice; the wgmma backward adds
// a producer warpgroup).
// CHECK-LABEL: func @backward
// CHECK: attn.attention_backward
// CHECK-SAME: attn.kernel_plan = {block_kv = 128 : i64, block_q = 64 : i64, mma = "mma_sync", stages = 1 : i64, tag = "bwd_f16_d64_bq64_bkv128_w8_s1_none_sm90a", target = "sm_90a", warps = 8 : i64}
// OPT-LABEL: func @backward
// OPT: attn.kernel_plan = {block_kv = 128 : i64, block_q = 64 : i64, mma = "mma_sync", stages = 1 : i64, tag = "bwd_f16_d64_bq64_bkv128_w8_s1_none_sm80", target = "sm_80", warps = 8 : i64}
// WGMMA-LABEL: func @backward
// WGMMA: attn.kernel_plan = {block_kv = 128 : i64, block_q = 64 : i64, mma = "wgmma", stages = 2 : i64, tag = "bwd_f16_d64_bq64_bkv128_w12_s2_none_wgmma_sm90a", target = "sm_90a", warps = 12 : i64}
func.func @backward(%q: tensor<?x?x?x64xf16>, %o: tensor<?x?x?x64xf16>, %lse: tensor<?x?x?xf32>) -> (tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>) {
  %dq, %dk, %dv = attn.attention_backward %q, %q, %q, %o, %o, %lse : tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?xf32> -> tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>
  return %dq, %dk, %dv : tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>
}
