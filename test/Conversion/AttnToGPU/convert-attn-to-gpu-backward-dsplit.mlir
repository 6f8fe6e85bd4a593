// RUN: fa-opt %s -fa-attn-to-gpu | FileCheck %s --enable-var-scope
// RUN: fa-opt %s -fa-lower-to-nvvm | FileCheck %s --check-prefix=PTX

// D + Dv = 512 > 256: dK and dV no longer fit in registers, so two CTAs per
// key block (grid x = 2 · key blocks) each own 128 columns of dK, dV and dQ.
// Both recompute Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ over all 256 columns.
// CHECK-LABEL: gpu.module @fa_bwd_bf16_d256_bq32_bkv64_w4_s1_ds2_causal_sm90a
// CHECK: gpu.func @fa_bwd_bwd_bf16_d256_bq32_bkv64_w4_s1_ds2_causal_sm90a(
// CHECK-SAME: fa.shared_bytes = 106496
// The slice is block_id.x mod 2, the key block block_id.x / 2.
// CHECK: %[[X:.+]] = gpu.block_id  x
// CHECK: %[[PART:.+]] = arith.remui %[[X]], %{{.+}} : index
// CHECK: %[[KBLOCK:.+]] = arith.divui %[[X]], %{{.+}} : index
// CHECK: %[[COLK:.+]] = arith.muli %[[PART]], %{{.+}} : index
// CHECK: %[[COLV:.+]] = arith.muli %[[PART]], %{{.+}} : index
// CHECK: arith.muli %[[KBLOCK]], %{{.+}} : index
// dK, dV: 128 columns each, so the loops carry 64 + 64 accumulators.
// CHECK: %{{[0-9]+}}:128 = scf.for {{.*}} iter_args
// CHECK: %{{[0-9]+}}:128 = scf.for {{.*}} iter_args
// dQ into dq_accum: 8 column pairs × 2 rows × 2 n8 tiles of this slice.
// CHECK-COUNT-32: red.global.add.v2.f32
// dK and dV are stored at the slice's first column.
// CHECK: arith.addi %{{.+}}, %[[COLK]] : index
// CHECK: arith.addi %{{.+}}, %[[COLV]] : index
// CHECK: gpu.func @fa_bwd_post_

// PTX: gpu.binary @fa_bwd_bf16_d256_bq32_bkv64_w4_s1_ds2_causal_sm90a
// PTX-SAME: .entry fa_bwd_bwd_bf16_d256_bq32_bkv64_w4_s1_ds2_causal_sm90a
// PTX-SAME: mov.u32 {{.*}}%ctaid.x
func.func @backward_d256(%q: tensor<?x?x?x256xbf16>, %k: tensor<?x?x?x256xbf16>, %v: tensor<?x?x?x256xbf16>, %o: tensor<?x?x?x256xbf16>, %do: tensor<?x?x?x256xbf16>, %lse: tensor<?x?x?xf32>) -> (tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse {mask = #attn.mask<causal>} : tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?xf32> -> tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>
  return %dq, %dk, %dv : tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>
}

// D = 128, Dv = 256: slices of 64 columns of dK/dQ and 128 of dV (96
// accumulators per lane).
// CHECK-LABEL: gpu.module @fa_bwd_bf16_d128v256_bq32_bkv64_w4_s1_ds2_none_sm90a
// CHECK: gpu.func @fa_bwd_bwd_bf16_d128v256_bq32_bkv64_w4_s1_ds2_none_sm90a(
// CHECK: %{{[0-9]+}}:96 = scf.for {{.*}} iter_args
// CHECK: %{{[0-9]+}}:96 = scf.for {{.*}} iter_args
func.func @backward_d128_v256(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x256xbf16>, %o: tensor<?x?x?x256xbf16>, %do: tensor<?x?x?x256xbf16>, %lse: tensor<?x?x?xf32>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x256xbf16>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %do, %lse : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?xf32> -> tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x256xbf16>
  return %dq, %dk, %dv : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x256xbf16>
}
