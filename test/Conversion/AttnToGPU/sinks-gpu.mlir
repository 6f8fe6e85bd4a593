// RUN: fa-opt %s -split-input-file -attn-gpu-plan -attn-online-softmax -attn-recompute-backward -attn-tile -convert-attn-to-gpu | FileCheck %s --enable-var-scope
// RUN: fa-opt %s -split-input-file -fa-attn-to-gpu | FileCheck %s --enable-var-scope --check-prefix=LOWER
// RUN: fa-opt %s -split-input-file -fa-lower-to-nvvm > %t.sync.mlir
// RUN: fa-opt %s -split-input-file -fa-lower-to-nvvm="mma=wgmma" > %t.wgmma.mlir
// RUN: rm -rf %t && mkdir -p %t && %python %S/Inputs/extract-ptx.py %t.sync.mlir %t && %python %S/Inputs/extract-ptx.py %t.wgmma.mlir %t
// RUN: %ptxas -arch=sm_90a -v %t/fa_fwd_bf16_d128_bq64_bkv64_w4_s2_causal_sm90a_sink.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS
// RUN: %ptxas -arch=sm_90a -v %t/fa_fwd_bf16_d128_bq128_bkv128_w12_s2_causal_wgmma_sm90a_sink.ptx -o %t/b.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS
// RUN: %ptxas -arch=sm_90a -v %t/fa_bwd_bf16_d64_bq64_bkv128_w8_s1_none_sm90a_sink.ptx -o %t/c.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS
// RUN: %ptxas -arch=sm_90a -v %t/fa_bwd_bf16_d64_bq64_bkv128_w12_s2_none_wgmma_sm90a_sink.ptx -o %t/d.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS
// RUN: FileCheck %s --check-prefix=PTX < %t/fa_fwd_bf16_d128_bq64_bkv64_w4_s2_causal_sm90a_sink.ptx
// RUN: FileCheck %s --check-prefix=SINKPTX < %t/fa_bwd_bf16_d64_bq64_bkv128_w8_s1_none_sm90a_sink.ptx
// REQUIRES: ptxas

// The forward with sinks takes them (f32 [H]) as its last parameter, loads
// its head's sink once, and joins it to every row at finalize_softmax; the
// key loop is the plain kernel's. The tag ends in _sink.
// CHECK-LABEL: gpu.func @fa_fwd_fwd_bf16_d128_bq64_bkv64_w4_s2_causal_sm90a_sink(
// CHECK-SAME: %arg22: i64, %[[SINKS:arg23]]: memref<1099511627776xf32>)
// CHECK: %[[HEAD:.+]] = gpu.block_id  y
// CHECK: scf.for
// CHECK: attn_gpu.online_softmax
// CHECK: %[[SINK:.+]] = memref.load %[[SINKS]][%[[HEAD]]] : memref<1099511627776xf32>
// CHECK: attn_gpu.finalize_softmax %{{.+}}, %{{.+}} sink %[[SINK]]
// CHECK: attn_gpu.store_output
// Lowered: the sink in log2 units joins the row's max; alpha rescales the
// row's sum (and acc through 1/l) to the joined max, the sink adds its own
// exp2.
// LOWER-LABEL: gpu.func @fa_fwd_fwd_bf16_d128_bq64_bkv64_w4_s2_causal_sm90a_sink(
// LOWER: %[[S:.+]] = memref.load %arg23[%block_id_y] : memref<1099511627776xf32>
// LOWER: gpu.shuffle  xor
// LOWER: %[[S2:.+]] = arith.mulf %[[S]], %{{.+}} : f32
// LOWER: %[[J:.+]] = arith.maximumf %{{.+}}, %[[S2]] : f32
// LOWER: %[[BASE:.+]] = arith.select %{{.+}}, %{{.+}}, %[[J]] : f32
// LOWER: %[[DM:.+]] = arith.subf %{{.+}}, %[[BASE]] : f32
// LOWER: %[[ALPHA:.+]] = llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f"(%[[DM]])
// LOWER: %[[DS:.+]] = arith.subf %[[S2]], %[[BASE]] : f32
// LOWER: %[[PS:.+]] = llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f"(%[[DS]])
// LOWER: %[[AL:.+]] = arith.mulf %[[ALPHA]], %{{.+}} : f32
// LOWER: %[[L:.+]] = arith.addf %[[AL]], %[[PS]] : f32
// LOWER: arith.divf %{{.+}}, %[[L]] : f32
// LOWER: llvm.call_intrinsic "llvm.nvvm.lg2.approx.ftz.f"(%[[L]])
// LOWER: arith.addf %[[J]], %{{.+}} : f32
// Every row ends in one joined max, rescale and sum: the sink's exp2 beside
// the row's, one more per row than without a sink.
// PTX: .param .u64 .ptr .align 1 {{.+}}_param_23{{$}}
// PTX: ld.param.b64 {{.+}}, [{{.+}}_param_23];
// PTX: ld.global.b32
// PTXAS: 0 bytes spill stores, 0 bytes spill loads
// PTXAS-NOT: {{[1-9][0-9]*}} bytes spill
func.func @forward(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>, %sinks: tensor<?xf32>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v sinks(%sinks : tensor<?xf32>) {mask = #attn.mask<causal>}
      : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16> -> tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
}

// -----

// The backward's three kernels are the plain ones (P from the LSE that
// counts the sink is already right); fa_bwd_sink reduces d_sinks per head,
// one CTA per head, in a fixed order: a strided loop over the head's rows,
// xor shuffles, then the warps' sums through shared memory by thread 0.
// CHECK-LABEL: gpu.func @fa_bwd_pre_bwd_bf16_d64_bq64_bkv128_w8_s1_none_sm90a_sink(
// CHECK-LABEL: gpu.func @fa_bwd_post_bwd_bf16_d64_bq64_bkv128_w8_s1_none_sm90a_sink(
// CHECK-LABEL: gpu.func @fa_bwd_sink_bwd_bf16_d64_bq64_bkv128_w8_s1_none_sm90a_sink(
// CHECK-SAME: %[[LSE:arg0]]: memref<1099511627776xf32>, %[[DELTA:arg1]]: memref<1099511627776xf32>, %[[SINKS:arg2]]: memref<1099511627776xf32>, %[[DSINKS:arg3]]: memref<1099511627776xf32>, %arg4: i32, %arg5: i32, %arg6: i32)
// CHECK: %[[HEAD:.+]] = gpu.block_id  x
// CHECK: %[[SINK:.+]] = memref.load %[[SINKS]][%[[HEAD]]]
// CHECK: scf.for %{{.+}} = %thread_id_x to %{{.+}} step %c256
// CHECK: memref.load %[[LSE]]
// CHECK: memref.load %[[DELTA]]
// CHECK: arith.subf %[[SINK]], %{{.+}} : f32
// CHECK: llvm.nvvm.ex2.approx.ftz.f
// CHECK: arith.negf
// CHECK: scf.yield
// CHECK: gpu.shuffle  xor %{{.+}}, %c16_i32
// CHECK: gpu.shuffle  xor %{{.+}}, %c1_i32
// CHECK: gpu.barrier
// CHECK: memref.store %{{.+}}, %[[DSINKS]][%[[HEAD]]]
// CHECK-NEXT: }
// CHECK-NEXT: gpu.return
// SINKPTX: .entry fa_bwd_sink_bwd_bf16_d64_bq64_bkv128_w8_s1_none_sm90a_sink(
// SINKPTX: shfl.sync.bfly.b32
// SINKPTX: bar.sync
// SINKPTX-NOT: {{[[:space:]]atom\.}}
// SINKPTX-NOT: {{[[:space:]]red\.}}
// SINKPTX: st.global.b32
func.func @backward(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>, %o: tensor<?x?x?x64xbf16>, %do: tensor<?x?x?x64xbf16>, %lse: tensor<?x?x?xf32>, %sinks: tensor<?xf32>) -> (tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?xf32>) {
  %dq, %dk, %dv, %ds = attn.attention_backward %q, %k, %v, %o, %do, %lse sinks(%sinks : tensor<?xf32>)
      : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?xf32>
      -> tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?xf32>
  return %dq, %dk, %dv, %ds : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?xf32>
}
