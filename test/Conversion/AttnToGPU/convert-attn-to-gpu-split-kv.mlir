// RUN: fa-opt %s -split-input-file -fa-attn-to-gpu="split-kv=1" | FileCheck %s
// RUN: fa-opt %s -split-input-file -fa-lower-to-nvvm="split-kv=1" > %t.mlir
// RUN: rm -rf %t && mkdir -p %t && %python %S/Inputs/extract-ptx.py %t.mlir %t
// RUN: FileCheck %s --check-prefix=PTX < %t/fa_fwd_bf16_d128_bq64_bkv64_w4_s2_causal_bottom_right_sm90a_splitkv.ptx
// RUN: FileCheck %s --check-prefix=PTX64 < %t/fa_fwd_f16_d64_bq64_bkv64_w4_s2_none_sm90a_splitkv.ptx

// A split-KV plan lowers to two kernels: the mma.sync forward over a grid
// whose z runs over (batch, split) pairs, taking the split count as its last
// (i32) parameter and writing f32 partial O and LSE rows to the workspace in
// the places of o and lse, and the merge of attn.merge.
// CHECK-LABEL: gpu.module @fa_fwd_bf16_d128_bq64_bkv64_w4_s2_causal_bottom_right_sm90a_splitkv
// CHECK: gpu.func @fa_fwd_fwd_bf16_d128_bq64_bkv64_w4_s2_causal_bottom_right_sm90a_splitkv(%{{.+}}: memref<1099511627776xbf16>, %{{.+}}: memref<1099511627776xbf16>, %{{.+}}: memref<1099511627776xbf16>, %{{.+}}: memref<1099511627776xf32>, %{{.+}}: memref<1099511627776xf32>, %{{.+}}: i32, %{{.+}}: i32, %{{.+}}: i32, %{{.+}}: i32, %{{.+}}: i32, %{{.+}}: f32, %[[SPLITS:[^:]+]]: i32, %{{.+}}: i64, %{{.+}}: i64, %{{.+}}: i64, %{{.+}}: i64, %{{.+}}: i64, %{{.+}}: i64, %{{.+}}: i64, %{{.+}}: i64, %{{.+}}: i64)
// The merge is launched as the split's dependent (docs/ABI.md): the split
// lets it be scheduled first thing (after the thread ids).
// CHECK: llvm.inline_asm has_side_effects {{.*}}"griddepcontrol.launch_dependents;", "~{memory}"
// The CTA's split is grid z modulo the run-time count, its batch the quotient.
// CHECK: %[[Z:.+]] = gpu.block_id z
// CHECK: %[[S:.+]] = arith.index_castui %[[SPLITS]]
// CHECK: arith.remui %[[Z]], %[[S]]
// CHECK: arith.divui %[[Z]], %[[S]]
// CHECK: gpu.func @fa_merge_fwd_bf16_d128_bq64_bkv64_w4_s2_causal_bottom_right_sm90a_splitkv(%{{.+}}: memref<1099511627776xf32>, %{{.+}}: memref<1099511627776xf32>, %{{.+}}: memref<1099511627776xbf16>, %{{.+}}: memref<1099511627776xf32>, %{{.+}}: i32, %{{.+}}: i32, %{{.+}}: i32, %{{.+}}: i32, %{{.+}}: i64, %{{.+}}: i64, %{{.+}}: i64)
// CHECK-SAME: known_block_size = array<i32: 128, 1, 1>
// Nothing touches memory before the split's partials are complete: the wait
// comes before the merge's first load, and clobbers memory so no load moves
// above it.
// CHECK-NOT: memref.load
// CHECK: llvm.inline_asm has_side_effects {{.*}}"griddepcontrol.wait;", "~{memory}"
// CHECK: vector.load {{.*}} : memref<1099511627776xf32>, vector<4xf32>
// CHECK: vector.store {{.*}} : memref<1099511627776xbf16>, vector<4xbf16>

// PTX: .entry fa_fwd_fwd_bf16_d128_bq64_bkv64_w4_s2_causal_bottom_right_sm90a_splitkv(
// PTX-NOT: ld.global
// PTX: griddepcontrol.launch_dependents;
// PTX: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// PTX: .entry fa_merge_fwd_bf16_d128_bq64_bkv64_w4_s2_causal_bottom_right_sm90a_splitkv(
// PTX-NOT: {{ld|st}}.global
// PTX: griddepcontrol.wait;
// PTX: shfl.sync.bfly
// PTX: ld.global.v4.b32
// PTX: st.global.v2.b32
// PTX64: .entry fa_merge_fwd_f16_d64_bq64_bkv64_w4_s2_none_sm90a_splitkv(
func.func @decode(%q: tensor<?x32x?x128xbf16>, %k: tensor<?x8x?x128xbf16>, %v: tensor<?x8x?x128xbf16>) -> (tensor<?x32x?x128xbf16>, tensor<?x32x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal_bottom_right>} : tensor<?x32x?x128xbf16>, tensor<?x8x?x128xbf16>, tensor<?x8x?x128xbf16> -> tensor<?x32x?x128xbf16>, tensor<?x32x?xf32>
  return %o, %lse : tensor<?x32x?x128xbf16>, tensor<?x32x?xf32>
}

// -----

// The d64 merge: a row is 16 chunks of 4 f32, so the warp's lanes form two
// groups over alternate splits; a step takes 16 splits a lane (32 a step),
// the rest 4 a lane (8 a step), and the groups' sums (4 columns and the
// weight) meet by xor-16 shuffles before group 0 stores.
// CHECK-LABEL: gpu.module @fa_fwd_f16_d64_bq64_bkv64_w4_s2_none_sm90a_splitkv
// CHECK: gpu.func @fa_merge_fwd_f16_d64_bq64_bkv64_w4_s2_none_sm90a_splitkv(
// CHECK: %[[GROUP:.+]] = arith.divui %[[LANE:.+]], %c16{{.*}} : index
// CHECK: %[[STEPS:.+]]:2 = scf.for %{{.+}} = %c0 to %[[WHOLE:.+]] step %c32{{.*}} iter_args({{.+}}) -> (vector<4xf32>, f32) {
// CHECK-COUNT-16: vector.load %arg0
// CHECK: scf.yield
// CHECK: %[[REST:.+]]:2 = scf.for %{{.+}} = %[[WHOLE]] to %{{.+}} step %c8{{.*}} iter_args(%{{.+}} = %[[STEPS]]#0, %{{.+}} = %[[STEPS]]#1)
// CHECK-COUNT-4: vector.load %arg0
// CHECK: scf.yield
// CHECK-COUNT-4: gpu.shuffle  xor %{{.+}}, %c16_i32
// CHECK: gpu.shuffle  xor %[[REST]]#1, %c16_i32
// CHECK: arith.cmpi slt, %[[GROUP]], %c1
// CHECK: vector.store {{.*}} : memref<1099511627776xf16>, vector<4xf16>
func.func @decode_d64(%q: tensor<?x8x?x64xf16>, %k: tensor<?x1x?x64xf16>, %v: tensor<?x1x?x64xf16>) -> (tensor<?x8x?x64xf16>, tensor<?x8x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v : tensor<?x8x?x64xf16>, tensor<?x1x?x64xf16>, tensor<?x1x?x64xf16> -> tensor<?x8x?x64xf16>, tensor<?x8x?xf32>
  return %o, %lse : tensor<?x8x?x64xf16>, tensor<?x8x?xf32>
}
