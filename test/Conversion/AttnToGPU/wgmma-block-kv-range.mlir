// The wgmma forward's S = Q·Kᵀ is one m64nNk16 chain with N = block-kv, and
// the instruction takes N ≤ 256: at D = 64 a 272-key tile would fit shared
// memory, so only the range check rejects it. Both ends of [64, 256] are
// legal tiles.
// RUN: fa-opt %s -fa-attn-to-gpu="mma=wgmma block-kv=256" | FileCheck %s --check-prefix=TOP
// RUN: fa-opt %s -fa-attn-to-gpu="mma=wgmma block-kv=64" | FileCheck %s --check-prefix=BOTTOM
// RUN: not fa-opt %s -fa-attn-to-gpu="mma=wgmma block-kv=272" 2>&1 | FileCheck %s --check-prefix=ABOVE
// RUN: not fa-opt %s -fa-attn-to-gpu="mma=wgmma block-kv=48" 2>&1 | FileCheck %s --check-prefix=BELOW

// TOP: gpu.func @fa_fwd_fwd_bf16_d64_bq128_bkv256_w12_s2_none_wgmma_sm90a
// TOP: nvvm.wgmma.mma_async {{.*}}<m = 64, n = 256, k = 16>
// BOTTOM: gpu.func @fa_fwd_fwd_bf16_d64_bq128_bkv64_w12_s2_none_wgmma_sm90a
// BOTTOM: nvvm.wgmma.mma_async {{.*}}<m = 64, n = 64, k = 16>
// ABOVE: error: 'attn.attention' op expected block-kv a multiple of 16 in [64, 256] for mma = wgmma, got 272
// BELOW: error: 'attn.attention' op expected block-kv a multiple of 16 in [64, 256] for mma = wgmma, got 48

func.func @fwd(%q: tensor<1x2x300x64xbf16>, %k: tensor<1x2x300x64xbf16>, %v: tensor<1x2x300x64xbf16>) -> (tensor<1x2x300x64xbf16>, tensor<1x2x300xf32>) {
  %o, %lse = attn.attention %q, %k, %v : tensor<1x2x300x64xbf16>, tensor<1x2x300x64xbf16>, tensor<1x2x300x64xbf16> -> tensor<1x2x300x64xbf16>, tensor<1x2x300xf32>
  return %o, %lse : tensor<1x2x300x64xbf16>, tensor<1x2x300xf32>
}
