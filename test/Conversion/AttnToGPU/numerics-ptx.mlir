// RUN: fa-opt %s -fa-lower-to-nvvm > %t.mlir
// RUN: rm -rf %t && mkdir -p %t && %python %S/Inputs/extract-ptx.py %t.mlir %t
// RUN: FileCheck %s < %t/fa_fwd_bf16_d64_bq64_bkv64_w4_s2_causal_sm90a.ptx

// The forward's numerics as they reach the PTX of the mma.sync kernel:
// scale·log2(e) = scale parameter × 0f3FB8AA3B (1.4426950), one FMA per
// score, α = ex2(m_old − base), base = 0 for a row still at -inf, and the
// epilogue's 1/l (0 for l = 0) and LSE = (m + lg2 l) × 0f3F317218 (ln 2),
// -inf for l = 0.
// CHECK: ld.param.b32 %r[[SCALE:[0-9]+]], [fa_fwd_fwd_bf16_d64_bq64_bkv64_w4_s2_causal_sm90a_param_10];
// CHECK: mul.rn.f32 %r[[SL2:[0-9]+]], %r[[SCALE]], 0f3FB8AA3B;
// CHECK: shfl.sync.bfly.b32 %r[[X1:[0-9]+]], %r[[T0:[0-9]+]], 1, 31, -1;
// CHECK-NEXT: max.f32 %r[[T1:[0-9]+]], %r[[T0]], %r[[X1]];
// CHECK-NEXT: shfl.sync.bfly.b32 %r[[X2:[0-9]+]], %r[[T1]], 2, 31, -1;
// CHECK-NEXT: max.f32 %r[[T2:[0-9]+]], %r[[T1]], %r[[X2]];
// CHECK-NEXT: mul.rn.f32 %r[[TS:[0-9]+]], %r[[SL2]], %r[[T2]];
// CHECK-NEXT: max.f32 %r[[MNEW:[0-9]+]], %r[[MOLD:[0-9]+]], %r[[TS]];
// CHECK-NEXT: setp.eq.f32 %p[[EMPTY:[0-9]+]], %r[[MNEW]], 0fFF800000;
// CHECK-NEXT: selp.f32 %r[[BASE:[0-9]+]], 0f00000000, %r[[MNEW]], %p[[EMPTY]];
// CHECK-NEXT: neg.f32 %r[[NEGBASE:[0-9]+]], %r[[BASE]];
// CHECK-NEXT: sub.rn.f32 %r[[DIFF:[0-9]+]], %r[[MOLD]], %r[[BASE]];
// CHECK-NEXT: ex2.approx.ftz.f32 %r[[ALPHA:[0-9]+]], %r[[DIFF]];
// CHECK-NEXT: mul.rn.f32 %r[[LRESC:[0-9]+]], %r{{[0-9]+}}, %r[[ALPHA]];
// CHECK-NEXT: fma.rn.f32 %r[[E0:[0-9]+]], %r{{[0-9]+}}, %r[[SL2]], %r[[NEGBASE]];
// CHECK-NEXT: ex2.approx.ftz.f32 %r[[P0:[0-9]+]], %r[[E0]];
// CHECK-NEXT: add.rn.f32 %r{{[0-9]+}}, %r[[LRESC]], %r[[P0]];
// CHECK: setp.eq.f32 %p[[NONE:[0-9]+]], %r[[L:[0-9]+]], 0f00000000;
// CHECK-NEXT: rcp.rn.f32 %r[[INV:[0-9]+]], %r[[L]];
// CHECK-NEXT: selp.f32 %r[[INVL:[0-9]+]], 0f00000000, %r[[INV]], %p[[NONE]];
// CHECK: mul.rn.f32 %r{{[0-9]+}}, %r{{[0-9]+}}, %r[[INVL]];
// CHECK: lg2.approx.ftz.f32 %r[[LOG2L:[0-9]+]], %r[[L]];
// CHECK-NEXT: add.rn.f32 %r[[LSE2:[0-9]+]], %r[[MNEW]], %r[[LOG2L]];
// CHECK-NEXT: mul.rn.f32 %r[[LSENAT:[0-9]+]], %r[[LSE2]], 0f3F317218;
// CHECK-NEXT: selp.f32 %r{{[0-9]+}}, 0fFF800000, %r[[LSENAT]], %p[[NONE]];
func.func @causal(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>) -> (tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal>} : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16> -> tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
}
