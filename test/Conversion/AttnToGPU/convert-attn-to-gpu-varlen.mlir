// RUN: fa-opt %s -fa-attn-to-gpu="mma=wgmma" | FileCheck %s --enable-var-scope

// The varlen wgmma forward (docs/ABI.md "Varlen wgmma forward"): after the
// strides come cu_seqlens_q and cu_seqlens_k as global pointers; the CTA's
// sequence (blockIdx.z) reads its offsets with invariant loads (ld.global.nc),
// clamped to the token totals nq, nk; a CTA whose query block starts past its
// sequence's end does nothing after the barrier set-up; Q's TMA rows count
// from the sequence's start in batch 0; LSE rows are [H, Tq] from the start.

// CHECK-LABEL: gpu.module @fa_fwd_bf16_d128_bq128_bkv128_w12_s2_causal_wgmma_sm90a_varlen
// CHECK: gpu.func @fa_fwd_fwd_bf16_d128_bq128_bkv128_w12_s2_causal_wgmma_sm90a_varlen(
// CHECK-SAME: %[[LSE:arg4]]: memref<{{[0-9]+}}xf32>
// CHECK-SAME: %[[TQ32:arg8]]: i32, %[[TK32:arg9]]: i32
// CHECK-SAME: %arg25: i64, %[[CUQ:arg26]]: !llvm.ptr<1>, %[[CUK:arg27]]: !llvm.ptr<1>)
// CHECK: %[[TQ:.+]] = arith.index_castui %[[TQ32]] : i32 to index
// CHECK: %[[TK:.+]] = arith.index_castui %[[TK32]] : i32 to index
// CHECK: %[[SEQ:.+]] = gpu.block_id  z
// The sequence's query rows: [start, end) of cu_seqlens_q, clamped to [0, Tq].
// CHECK: %[[I0:.+]] = arith.index_cast %[[SEQ]] : index to i64
// CHECK: %[[P0:.+]] = llvm.getelementptr %[[CUQ]][%[[I0]]] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, i32
// CHECK: %[[S0:.+]] = llvm.load %[[P0]] invariant
// CHECK: %[[S1:.+]] = arith.index_cast %[[S0]] : i32 to index
// CHECK: %[[S2:.+]] = arith.maxsi %[[S1]], %{{.+}} : index
// CHECK: %[[QSTART:.+]] = arith.minsi %[[S2]], %[[TQ]] : index
// CHECK: %[[NEXT:.+]] = arith.addi %[[SEQ]], %{{.+}} : index
// CHECK: %[[I1:.+]] = arith.index_cast %[[NEXT]] : index to i64
// CHECK: llvm.getelementptr %[[CUQ]][%[[I1]]]
// CHECK: %[[E0:.+]] = llvm.load %{{.+}} invariant
// CHECK: %[[E1:.+]] = arith.index_cast %[[E0]] : i32 to index
// CHECK: %[[E2:.+]] = arith.maxsi %[[E1]], %[[QSTART]] : index
// CHECK: %[[QEND:.+]] = arith.minsi %[[E2]], %[[TQ]] : index
// CHECK: %[[NQ:.+]] = arith.subi %[[QEND]], %[[QSTART]] : index
// The key rows, from cu_seqlens_k and Tk.
// CHECK: llvm.getelementptr %[[CUK]][%{{.+}}]
// CHECK: llvm.load %{{.+}} invariant
// CHECK: %[[KSTART:.+]] = arith.minsi %{{.+}}, %[[TK]] : index
// CHECK: llvm.getelementptr %[[CUK]][%{{.+}}]
// CHECK: %[[Q0:.+]] = arith.muli %{{.+}}, %c128 : index
// The tiled loop's bounds, cloned: they read cu_seqlens again.
// CHECK: llvm.getelementptr %[[CUQ]]
// CHECK: llvm.getelementptr %[[CUK]]
// CHECK: gpu.barrier
// CHECK: %[[ACTIVE:.+]] = arith.cmpi slt, %[[Q0]], %[[NQ]] : index
// CHECK: scf.if %[[ACTIVE]] {
// CHECK: %[[QROW:.+]] = arith.addi %[[QSTART]], %[[Q0]] : index
// CHECK: nvgpu.tma.async.load %{{.+}}[%{{.+}}, %[[QROW]], %{{.+}}, %[[ZERO:.+]]], %{{.+}}
// K rows: the sequence's start + the key tile's first row.
// CHECK: %[[KROW:.+]] = arith.addi %[[KSTART]], %{{.+}} : index
// CHECK: nvgpu.tma.async.load %{{.+}}[%{{.+}}, %[[KROW]], %{{.+}}, %{{.+}}], %{{.+}}
// LSE [H, Tq]: h·Tq + start + row, stored for rows below the sequence's length.
// CHECK: %[[HT:.+]] = arith.muli %{{.+}}, %[[TQ]] : index
// CHECK: %[[LSEBASE:.+]] = arith.addi %[[HT]], %[[QSTART]] : index
// CHECK: %[[ROW:.+]] = arith.addi %[[Q0]], %{{.+}} : index
// CHECK: arith.cmpi slt, %[[ROW]], %[[NQ]] : index
// CHECK: %[[AT:.+]] = arith.addi %[[LSEBASE]], %[[ROW]] : index
// CHECK: memref.store %{{.+}}, %[[LSE]][%[[AT]]]
func.func @varlen(%q: tensor<?x4x128xbf16>, %k: tensor<?x2x128xbf16>, %v: tensor<?x2x128xbf16>, %cuq: tensor<?xi32>, %cuk: tensor<?xi32>) -> (tensor<?x4x128xbf16>, tensor<4x?xf32>) {
  %o, %l = attn.attention %q, %k, %v varlen(%cuq, %cuk : tensor<?xi32>, tensor<?xi32>) {mask = #attn.mask<causal>} : tensor<?x4x128xbf16>, tensor<?x2x128xbf16>, tensor<?x2x128xbf16> -> tensor<?x4x128xbf16>, tensor<4x?xf32>
  return %o, %l : tensor<?x4x128xbf16>, tensor<4x?xf32>
}
