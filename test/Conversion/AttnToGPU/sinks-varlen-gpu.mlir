// RUN: fa-opt %s -split-input-file -fa-attn-to-gpu="mma=wgmma" | FileCheck %s --enable-var-scope

// A varlen forward with sinks (docs/ABI.md "Varlen with sinks") takes them
// after cu_seqlens_q and cu_seqlens_k (parameter 28) and joins its query
// head's sink to each row of its sequence at the finalisation.
// CHECK-LABEL: gpu.func @fa_fwd_fwd_bf16_d128_bq128_bkv128_w12_s2_causal_bottom_right_wgmma_sm90a_varlen_sink(
// CHECK-SAME: %[[CUQ:arg26]]: !llvm.ptr<1>, %[[CUK:arg27]]: !llvm.ptr<1>, %[[SINKS:arg28]]: memref<1099511627776xf32>)
// CHECK: %[[HEAD:.+]] = gpu.block_id  y
// CHECK: %[[SINK:.+]] = memref.load %[[SINKS]][%[[HEAD]]] : memref<1099511627776xf32>
// CHECK: arith.maximumf %{{.+}}, %{{.+}} : f32
// CHECK: llvm.nvvm.ex2.approx.ftz.f
func.func @forward(%q: tensor<?x?x128xbf16>, %k: tensor<?x?x128xbf16>, %v: tensor<?x?x128xbf16>, %cuq: tensor<?xi32>, %cuk: tensor<?xi32>, %sinks: tensor<?xf32>) -> (tensor<?x?x128xbf16>, tensor<?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v varlen(%cuq, %cuk : tensor<?xi32>, tensor<?xi32>) sinks(%sinks : tensor<?xf32>) {mask = #attn.mask<causal_bottom_right>}
      : tensor<?x?x128xbf16>, tensor<?x?x128xbf16>, tensor<?x?x128xbf16> -> tensor<?x?x128xbf16>, tensor<?x?xf32>
  return %o, %lse : tensor<?x?x128xbf16>, tensor<?x?xf32>
}

// -----

// The varlen backward's fa_bwd_sink takes cu_seqlens_q last: LSE and Delta
// are [H, Tq], and only the rows of the sequences were written, so it sums
// rows [0, cu_seqlens_q[B]) of its head (the end of sequence B - 1, read and
// clamped to [0, Tq] as every varlen kernel reads its offsets) at
// head·Tq + row, in the dense kernel's fixed order.
// CHECK-LABEL: gpu.func @fa_bwd_sink_bwd_bf16_d64_bq64_bkv128_w12_s2_causal_wgmma_sm90a_varlen_sink(
// CHECK-SAME: %[[LSE:arg0]]: memref<1099511627776xf32>, %[[DELTA:arg1]]: memref<1099511627776xf32>, %[[SINKS:arg2]]: memref<1099511627776xf32>, %[[DSINKS:arg3]]: memref<1099511627776xf32>, %[[B32:arg4]]: i32, %arg5: i32, %[[TQ32:arg6]]: i32, %[[CUQ:arg7]]: !llvm.ptr<1>)
// CHECK: %[[B:.+]] = arith.index_castui %[[B32]] : i32 to index
// CHECK: %[[TQ:.+]] = arith.index_castui %[[TQ32]] : i32 to index
// CHECK: %[[HEAD:.+]] = gpu.block_id  x
// CHECK: %[[LAST:.+]] = arith.subi %[[B]], %{{.+}} : index
// CHECK: llvm.getelementptr %[[CUQ]][%{{.+}}]
// CHECK: %[[S0:.+]] = llvm.load %{{.+}} invariant
// CHECK: %[[START:.+]] = arith.minsi %{{.+}}, %[[TQ]] : index
// CHECK: %[[NEXT:.+]] = arith.addi %[[LAST]], %{{.+}} : index
// CHECK: %[[I1:.+]] = arith.index_cast %[[NEXT]] : index to i64
// CHECK: llvm.getelementptr %[[CUQ]][%[[I1]]]
// CHECK: %[[E0:.+]] = llvm.load %{{.+}} invariant
// CHECK: %[[END:.+]] = arith.minsi %{{.+}}, %[[TQ]] : index
// CHECK: %[[LEN:.+]] = arith.subi %[[END]], %[[START]] : index
// CHECK: %[[ROWS:.+]] = arith.addi %[[START]], %[[LEN]] : index
// CHECK: scf.for %[[ROW:.+]] = %thread_id_x to %[[ROWS]] step %c384
// CHECK: %[[H0:.+]] = arith.muli %[[HEAD]], %[[TQ]] : index
// CHECK: %[[AT:.+]] = arith.addi %[[H0]], %[[ROW]] : index
// CHECK: memref.load %[[LSE]][%[[AT]]]
// CHECK: memref.load %[[DELTA]][%[[AT]]]
// CHECK: scf.yield
// CHECK: gpu.shuffle  xor
// CHECK: memref.store %{{.+}}, %[[DSINKS]][%[[HEAD]]]
func.func @backward(%q: tensor<?x?x64xbf16>, %k: tensor<?x?x64xbf16>, %v: tensor<?x?x64xbf16>, %o: tensor<?x?x64xbf16>, %do: tensor<?x?x64xbf16>, %lse: tensor<?x?xf32>, %cuq: tensor<?xi32>, %cuk: tensor<?xi32>, %sinks: tensor<?xf32>) -> (tensor<?x?x64xbf16>, tensor<?x?x64xbf16>, tensor<?x?x64xbf16>, tensor<?xf32>) {
  %dq, %dk, %dv, %ds = attn.attention_backward %q, %k, %v, %o, %do, %lse varlen(%cuq, %cuk : tensor<?xi32>, tensor<?xi32>) sinks(%sinks : tensor<?xf32>) {mask = #attn.mask<causal>}
      : tensor<?x?x64xbf16>, tensor<?x?x64xbf16>, tensor<?x?x64xbf16>, tensor<?x?x64xbf16>, tensor<?x?x64xbf16>, tensor<?x?xf32> -> tensor<?x?x64xbf16>, tensor<?x?x64xbf16>, tensor<?x?x64xbf16>, tensor<?xf32>
  return %dq, %dk, %dv, %ds : tensor<?x?x64xbf16>, tensor<?x?x64xbf16>, tensor<?x?x64xbf16>, tensor<?xf32>
}
