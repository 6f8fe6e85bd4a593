// RUN: fa-opt %s -attn-gpu-plan="mma=wgmma" | FileCheck %s
// RUN: fa-opt %s -attn-gpu-plan="mma=wgmma" -fa-wgmma-lazy-rescale=false | FileCheck %s --check-prefix=EAGER
// RUN: fa-opt %s -attn-gpu-plan="mma=wgmma" -fa-wgmma-lazy-rescale | FileCheck %s

// At Dv = 256 the measured default rescales lazily (PERF.md: +2-12% bf16,
// +5-9% fp8), so its tag has no suffix; turning it off names the kernel.
// CHECK-LABEL: func @forward_d256
// CHECK: schedule = {lazy_rescale = true, ping_pong = true, ragged_first = true, rescale_in_turn = true, smem_epilogue = true}
// CHECK-SAME: tag = "fwd_bf16_d256_bq128_bkv64_w12_s2_none_wgmma_sm90a"
// EAGER-LABEL: func @forward_d256
// EAGER: schedule = {lazy_rescale = false,
// EAGER-SAME: tag = "fwd_bf16_d256_bq128_bkv64_w12_s2_none_wgmma_sm90a_lazy0"
func.func @forward_d256(%q: tensor<?x?x?x256xbf16>, %k: tensor<?x?x?x256xbf16>, %v: tensor<?x?x?x256xbf16>) -> (tensor<?x?x?x256xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v : tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16> -> tensor<?x?x?x256xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x256xbf16>, tensor<?x?x?xf32>
}


// At Dv = 128 (here 192/128) it was within noise: rescaled every tile.
// EAGER-LABEL: func @forward_d192v128
// EAGER: schedule = {lazy_rescale = false,
// EAGER-SAME: tag = "fwd_bf16_d192v128_bq128_bkv128_w12_s2_none_wgmma_sm90a"
func.func @forward_d192v128(%q: tensor<?x?x?x192xbf16>, %k: tensor<?x?x?x192xbf16>, %v: tensor<?x?x?x128xbf16>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v : tensor<?x?x?x192xbf16>, tensor<?x?x?x192xbf16>, tensor<?x?x?x128xbf16> -> tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
}
