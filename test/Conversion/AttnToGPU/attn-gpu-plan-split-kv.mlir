// RUN: fa-opt %s -attn-gpu-plan="split-kv=1" | FileCheck %s
// RUN: not fa-opt %s -attn-gpu-plan="split-kv=1 mma=wgmma" 2>&1 | FileCheck %s --check-prefix=WGMMA

// Split-KV is a code-shaping choice of the mma.sync forward: the plan records
// it (split_kv) and the tag names it, so the split kernels never share a name
// with the one-CTA-per-query-tile forward.
// CHECK-LABEL: func @decode
// CHECK: attn.kernel_plan = {block_kv = 64 : i64, block_q = 64 : i64, mma = "mma_sync", split_kv, stages = 2 : i64, tag = "fwd_bf16_d128_bq64_bkv64_w4_s2_causal_bottom_right_sm90a_splitkv", target = "sm_90a", warps = 4 : i64}
func.func @decode(%q: tensor<?x32x1x128xbf16>, %k: tensor<?x8x?x128xbf16>, %v: tensor<?x8x?x128xbf16>) -> (tensor<?x32x1x128xbf16>, tensor<?x32x1xf32>) {
  // WGMMA: error: 'attn.attention' op split-KV needs mma = mma_sync, got mma = wgmma
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal_bottom_right>} : tensor<?x32x1x128xbf16>, tensor<?x8x?x128xbf16>, tensor<?x8x?x128xbf16> -> tensor<?x32x1x128xbf16>, tensor<?x32x1xf32>
  return %o, %lse : tensor<?x32x1x128xbf16>, tensor<?x32x1xf32>
}
