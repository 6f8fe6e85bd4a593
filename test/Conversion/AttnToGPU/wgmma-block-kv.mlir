// The wgmma forward takes any block-kv that is a multiple of 16 in [64, 256]
// and fits shared memory: S = Q·Kᵀ is one m64nNk16 chain with N = block-kv,
// P·V runs block-kv / 16 register-A k-steps, and the TMA boxes are block-kv
// rows tall.
// RUN: fa-opt %s -fa-attn-to-gpu="mma=wgmma block-kv=192" | FileCheck %s
// RUN: not fa-opt %s -fa-attn-to-gpu="mma=wgmma block-kv=200" 2>&1 | FileCheck %s --check-prefix=ODD
// RUN: not fa-opt %s -fa-attn-to-gpu="mma=wgmma block-kv=256 stages=3" 2>&1 | FileCheck %s --check-prefix=SMEM

// CHECK-LABEL: gpu.func @fa_fwd_fwd_bf16_d128_bq128_bkv192_w12_s2_none_wgmma_sm90a
// CHECK: nvgpu.tma.async.load {{.*}}memref<1x1x192x64xbf16, 3>
// CHECK: nvvm.wgmma.mma_async {{.*}}<m = 64, n = 192, k = 16>
// CHECK-COUNT-12: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16

// ODD: error: 'attn.attention' op expected block-kv a multiple of 16 in [64, 256] for mma = wgmma, got 200
// SMEM: error: 'attn.attention' op tile needs 425984 bytes of shared memory, more than 232448

func.func @fwd(%q: tensor<1x2x300x128xbf16>, %k: tensor<1x2x300x128xbf16>, %v: tensor<1x2x300x128xbf16>) -> (tensor<1x2x300x128xbf16>, tensor<1x2x300xf32>) {
  %o, %lse = attn.attention %q, %k, %v : tensor<1x2x300x128xbf16>, tensor<1x2x300x128xbf16>, tensor<1x2x300x128xbf16> -> tensor<1x2x300x128xbf16>, tensor<1x2x300xf32>
  return %o, %lse : tensor<1x2x300x128xbf16>, tensor<1x2x300xf32>
}
