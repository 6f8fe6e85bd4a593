// RUN: fa-opt %s -split-input-file -attn-gpu-plan="mma=wgmma" | FileCheck %s --check-prefix=PLAN
// RUN: fa-opt %s -split-input-file -attn-gpu-plan="mma=wgmma" -attn-online-softmax -attn-tile -convert-attn-to-gpu | FileCheck %s --check-prefix=TILE --enable-var-scope

// fp8 with block descales: Q's factors per (batch, query head, 64 rows), K's
// per (batch, key head, 64 keys). The plan takes the form from the op's
// descale types and names it in the tag.
// PLAN-LABEL: func @block
// PLAN: descale_block = 64 : i64
// PLAN-SAME: tag = "fwd_f8e4m3_d128_bq128_bkv192_w12_s2_causal_wgmma_sm90a_bs64"
// A consumer warpgroup's 64 rows read one Q factor (descale_q, parameter
// 14; its block clamped to the last), V's comes per key head (16); each
// 192-key tile reads three K factors (15), loaded before the tile's waits,
// and the online softmax scales each 64 columns by its own.
// TILE-LABEL: gpu.func @fa_fwd_fwd_f8e4m3_d128_bq128_bkv192_w12_s2_causal_wgmma_sm90a_bs64
// TILE: %[[QF:.+]] = memref.load %arg14[%{{.+}}]
// TILE: %[[SCALE:.+]] = arith.mulf %{{.+}}, %[[QF]] : f32
// TILE: memref.load %arg16[%{{.+}}]
// TILE: scf.for
// TILE: %[[K0:.+]] = memref.load %arg15[%{{.+}}]
// TILE: %[[K1:.+]] = memref.load %arg15[%{{.+}}]
// TILE: %[[K2:.+]] = memref.load %arg15[%{{.+}}]
// TILE: nvgpu.mbarrier.try_wait.parity
// TILE: %[[S0:.+]] = arith.mulf %{{.+}}, %[[K0]] : f32
// TILE: %[[S1:.+]] = arith.mulf %{{.+}}, %[[K1]] : f32
// TILE: %[[S2:.+]] = arith.mulf %{{.+}}, %[[K2]] : f32
// TILE: attn_gpu.online_softmax %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} scale %[[S0]], %[[S1]], %[[S2]] {lazy_rescale_log2 = 8.000000e+00 : f64, scale_block = 64 : i64} : <16x192xf32, accumulator>
func.func @block(%q: tensor<?x?x?x128xf8E4M3FN>, %k: tensor<?x?x?x128xf8E4M3FN>, %v: tensor<?x?x?x128xf8E4M3FN>, %dq: tensor<?x?x?xf32>, %dk: tensor<?x?x?xf32>, %dv: tensor<?x?xf32>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v descale(%dq, %dk, %dv : tensor<?x?x?xf32>, tensor<?x?x?xf32>, tensor<?x?xf32>) {mask = #attn.mask<causal>} : tensor<?x?x?x128xf8E4M3FN>, tensor<?x?x?x128xf8E4M3FN>, tensor<?x?x?x128xf8E4M3FN> -> tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
}

// -----

// Per-head descales keep one scale and no descale_block.
// PLAN-LABEL: func @per_head
// PLAN-NOT: descale_block
// PLAN: tag = "fwd_f8e4m3_d128_bq128_bkv192_w12_s2_none_wgmma_sm90a"
func.func @per_head(%q: tensor<?x?x?x128xf8E4M3FN>, %k: tensor<?x?x?x128xf8E4M3FN>, %v: tensor<?x?x?x128xf8E4M3FN>, %d: tensor<?x?xf32>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v descale(%d, %d, %d : tensor<?x?xf32>, tensor<?x?xf32>, tensor<?x?xf32>) : tensor<?x?x?x128xf8E4M3FN>, tensor<?x?x?x128xf8E4M3FN>, tensor<?x?x?x128xf8E4M3FN> -> tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
}
