// RUN: fa-opt %s -split-input-file -fa-attn-to-gpu="pack-gqa=1 split-kv=1" | FileCheck %s
// RUN: fa-opt %s -split-input-file -fa-lower-to-nvvm="pack-gqa=1 split-kv=1" > %t.mlir
// RUN: rm -rf %t && mkdir -p %t && %python %S/Inputs/extract-ptx.py %t.mlir %t
// RUN: FileCheck %s --check-prefix=PTX < %t/fa_fwd_bf16_d128_bq64_bkv64_w4_s2_causal_bottom_right_sm90a_packgqa_splitkv.ptx

// A packed-GQA plan: attn-tile tiles over (batch, key head, query block), so
// the kernel's grid y is the key head, and the G = H / Hkv query heads of it
// share the CTA's rows: n = max(64 / G, 1) queries of each.
// CHECK-LABEL: gpu.module @fa_fwd_bf16_d128_bq64_bkv64_w4_s2_causal_bottom_right_sm90a_packgqa_splitkv
// CHECK: gpu.func @fa_fwd_fwd_bf16_d128_bq64_bkv64_w4_s2_causal_bottom_right_sm90a_packgqa_splitkv(
// CHECK-DAG: %[[HEADS:.+]] = arith.index_castui %arg6
// CHECK-DAG: %[[KVHEADS:.+]] = arith.index_castui %arg7
// CHECK-DAG: %[[X:.+]] = gpu.block_id {{ *}}x
// CHECK-DAG: %[[HK:.+]] = gpu.block_id {{ *}}y
// CHECK: arith.muli %[[X]], %c64
// CHECK-NEXT: %[[G:.+]] = arith.divui %[[HEADS]], %[[KVHEADS]]
// CHECK-NEXT: %[[C64:.+]] = arith.constant 64
// CHECK-NEXT: %[[PER:.+]] = arith.divui %[[C64]], %[[G]]
// CHECK-NEXT: %[[C1:.+]] = arith.constant 1
// CHECK-NEXT: %[[N:.+]] = arith.maxui %[[PER]], %[[C1]]
// CHECK-NEXT: %[[H0:.+]] = arith.muli %[[HK]], %[[G]]
// CHECK-NEXT: %[[Q0:.+]] = arith.muli %[[X]], %[[N]]
// The key-block range is the IR's, from the same run-time n: queries
// [q0, q0 + n).
// CHECK: %[[G2:.+]] = arith.divui %[[HEADS]], %[[KVHEADS]]
// CHECK: %[[N2:.+]] = arith.maxui
// CHECK-NEXT: %[[Q02:.+]] = arith.muli %[[X]], %[[N2]]
// CHECK-NEXT: arith.addi %[[Q02]], %[[N2]]
// Tile row r: head h0 + r mod G, query q0 + r div G (the Q gather).
// CHECK: arith.remui %{{.+}}, %[[G]]
// CHECK: arith.divui %{{.+}}, %[[G]]
// CHECK: gpu.func @fa_merge_fwd_bf16_d128_bq64_bkv64_w4_s2_causal_bottom_right_sm90a_packgqa_splitkv(

// PTX: .entry fa_fwd_fwd_bf16_d128_bq64_bkv64_w4_s2_causal_bottom_right_sm90a_packgqa_splitkv(
// PTX: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// PTX: .entry fa_merge_fwd_bf16_d128_bq64_bkv64_w4_s2_causal_bottom_right_sm90a_packgqa_splitkv(
func.func @decode(%q: tensor<?x32x?x128xbf16>, %k: tensor<?x8x?x128xbf16>, %v: tensor<?x8x?x128xbf16>) -> (tensor<?x32x?x128xbf16>, tensor<?x32x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal_bottom_right>} : tensor<?x32x?x128xbf16>, tensor<?x8x?x128xbf16>, tensor<?x8x?x128xbf16> -> tensor<?x32x?x128xbf16>, tensor<?x32x?xf32>
  return %o, %lse : tensor<?x32x?x128xbf16>, tensor<?x32x?xf32>
}

// -----

// CHECK-LABEL: gpu.module @fa_fwd_f16_d64_bq64_bkv64_w4_s2_window_l30_r20_sm90a_packgqa_splitkv
func.func @decode_window(%q: tensor<?x8x?x64xf16>, %k: tensor<?x1x?x64xf16>, %v: tensor<?x1x?x64xf16>) -> (tensor<?x8x?x64xf16>, tensor<?x8x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<window>, window_left = 30 : i64, window_right = 20 : i64} : tensor<?x8x?x64xf16>, tensor<?x1x?x64xf16>, tensor<?x1x?x64xf16> -> tensor<?x8x?x64xf16>, tensor<?x8x?xf32>
  return %o, %lse : tensor<?x8x?x64xf16>, tensor<?x8x?xf32>
}
