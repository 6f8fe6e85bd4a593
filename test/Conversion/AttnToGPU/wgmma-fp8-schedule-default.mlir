// RUN: fa-opt %s -attn-gpu-plan="mma=wgmma" | FileCheck %s
// RUN: fa-opt %s -attn-gpu-plan="mma=wgmma" -fa-wgmma-ping-pong -fa-wgmma-lazy-rescale=false | FileCheck %s --check-prefix=OLD
// RUN: fa-opt %s -attn-gpu-plan="mma=wgmma" -fa-wgmma-ping-pong=false | FileCheck %s --check-prefix=BF16
// RUN: fa-opt %s -attn-gpu-plan="mma=wgmma" -fa-wgmma-poly-exp2=0 | FileCheck %s --check-prefix=NOPOLY

// fp8 forwards by default neither take ping-pong turns nor rescale O every
// tile (H200, same process: +14-16% at d256 without a mask, +3-6% at d128;
// PERF.md, 2026-12-05), so their tags carry no suffix; the former schedule
// is named by its switches. bf16 keeps ping-pong: only turning it off names
// the kernel.
// CHECK-LABEL: func @fp8_d128
// CHECK: schedule = {lazy_rescale = true, ping_pong = false,
// CHECK-SAME: tag = "fwd_f8e4m3_d128_bq128_bkv192_w12_s2_causal_wgmma_sm90a"
// OLD-LABEL: func @fp8_d128
// OLD: schedule = {lazy_rescale = false, ping_pong = true,
// OLD-SAME: tag = "fwd_f8e4m3_d128_bq128_bkv192_w12_s2_causal_wgmma_sm90a_pp1_lazy0"
func.func @fp8_d128(%q: tensor<?x?x?x128xf8E4M3FN>, %k: tensor<?x?x?x128xf8E4M3FN>, %v: tensor<?x?x?x128xf8E4M3FN>, %dq: tensor<?x?xf32>, %dk: tensor<?x?xf32>, %dv: tensor<?x?xf32>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v descale(%dq, %dk, %dv : tensor<?x?xf32>, tensor<?x?xf32>, tensor<?x?xf32>) {mask = #attn.mask<causal>} : tensor<?x?x?x128xf8E4M3FN>, tensor<?x?x?x128xf8E4M3FN>, tensor<?x?x?x128xf8E4M3FN> -> tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
}

// At d256 a quarter of the exponentials come from the FMA pipe by default
// (+0.2-4% on the H200, a loss at d128: PERF.md, 2026-12-06); turning it off
// names the kernel.
// CHECK-LABEL: func @fp8_d256
// CHECK: schedule = {lazy_rescale = true, ping_pong = false, poly_exp2 = 2 : i64,
// CHECK-SAME: tag = "fwd_f8e4m3_d256_bq128_bkv64_w12_s2_none_wgmma_sm90a"
// NOPOLY-LABEL: func @fp8_d256
// NOPOLY-NOT: poly_exp2
// NOPOLY: tag = "fwd_f8e4m3_d256_bq128_bkv64_w12_s2_none_wgmma_sm90a_pe0"
func.func @fp8_d256(%q: tensor<?x?x?x256xf8E4M3FN>, %k: tensor<?x?x?x256xf8E4M3FN>, %v: tensor<?x?x?x256xf8E4M3FN>, %dq: tensor<?x?xf32>, %dk: tensor<?x?xf32>, %dv: tensor<?x?xf32>) -> (tensor<?x?x?x256xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v descale(%dq, %dk, %dv : tensor<?x?xf32>, tensor<?x?xf32>, tensor<?x?xf32>) : tensor<?x?x?x256xf8E4M3FN>, tensor<?x?x?x256xf8E4M3FN>, tensor<?x?x?x256xf8E4M3FN> -> tensor<?x?x?x256xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x256xbf16>, tensor<?x?x?xf32>
}

// BF16-LABEL: func @bf16_d128
// BF16: schedule = {lazy_rescale = false, ping_pong = false,
// BF16-SAME: tag = "fwd_bf16_d128_bq128_bkv128_w12_s2_causal_wgmma_sm90a_pp0"
func.func @bf16_d128(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal>} : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16> -> tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
}
