// RUN: fa-opt %s -split-input-file -attn-gpu-plan -attn-online-softmax -attn-tile | FileCheck %s --check-prefix=TILED --enable-var-scope
// RUN: fa-opt %s -split-input-file -attn-gpu-plan -attn-recompute-backward -attn-online-softmax -attn-tile -convert-attn-to-gpu | FileCheck %s --enable-var-scope
// RUN: fa-opt %s -split-input-file -mlir-print-ir-after-all -fa-lower-to-nvvm="format=isa" -o /dev/null 2>&1 | FileCheck %s --check-prefix=STAGES

// The GPU path starts from the seed passes' output: the plan's block sizes
// tile the op (64-row query blocks of the forall, 64-key blocks of the key
// loop), the plan rides on the loop and the tile ops, and
// convert-attn-to-gpu turns that loop nest into the kernel the plan names.

// TILED-LABEL: func @forward
// TILED: %[[C64:.+]] = arith.constant 64 : index
// TILED: %[[QBLOCKS:.+]] = arith.ceildivui %{{.+}}, %[[C64]] : index
// TILED: scf.forall ({{.+}}) in (%{{.+}}, %{{.+}}, %[[QBLOCKS]])
// TILED: scf.for
// TILED: attn.online_attention {{.+}} {attn.kernel_plan = {block_kv = 64 : i64, block_q = 64 : i64, {{.+}} tag = "fwd_bf16_d128_bq64_bkv64_w4_s2_causal_sm90a"
// TILED: attn.online_attention {{.+}} {apply_mask, attn.kernel_plan = {block_kv = 64 : i64, block_q = 64 : i64,
// TILED: } {attn.kernel_plan = {block_kv = 64 : i64, block_q = 64 : i64, {{.+}} tag = "fwd_bf16_d128_bq64_bkv64_w4_s2_causal_sm90a"

// CHECK: module attributes {gpu.container_module}
// CHECK-NOT: func.func @forward
// CHECK-NOT: attn.
// CHECK: gpu.module @fa_fwd_bf16_d128_bq64_bkv64_w4_s2_causal_sm90a
// CHECK: gpu.func @fa_fwd_fwd_bf16_d128_bq64_bkv64_w4_s2_causal_sm90a

// STAGES: IR Dump After AttnGPUPlanPass
// STAGES: attn.attention {{.+}}attn.kernel_plan
// STAGES: IR Dump After AttnOnlineSoftmaxPass
// STAGES: attn.online_attention
// STAGES: IR Dump After AttnTilePass
// STAGES: scf.forall
// STAGES: IR Dump After ConvertAttnToGPUPass
// STAGES: gpu.module @fa_fwd_bf16_d128_bq64_bkv64_w4_s2_causal_sm90a
// The tile level: the schedule as attn_gpu ops around the key loop.
// STAGES: attn_gpu.shared_memory
// STAGES: scf.for {{.+}} -> (!attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x128xf32, accumulator>)
// STAGES: attn_gpu.mma_qk
// STAGES: attn_gpu.mask
// STAGES: attn_gpu.online_softmax
// STAGES: attn_gpu.mma_pv
// STAGES: attn_gpu.store_output
// STAGES: IR Dump After ConvertAttnGPUToNVVMPass
// STAGES-NOT: attn_gpu.
// STAGES: nvgpu.ldmatrix
// STAGES: nvvm.mma.sync
// STAGES: IR Dump After ConvertGpuOpsToNVVMOps
// STAGES: nvvm.mma.sync
// STAGES: IR Dump After GpuModuleToBinaryPass
// STAGES: gpu.binary @fa_fwd_bf16_d128_bq64_bkv64_w4_s2_causal_sm90a
func.func @forward(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal>} : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16> -> tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
}

// -----

// The backward: attn-recompute-backward's key-block loops around
// attn.backward_tile, 8 warps of 16 keys and 64-row query tiles at d64.
// CHECK: gpu.module @fa_bwd_f16_d64_bq64_bkv128_w8_s1_none_sm90a
// CHECK-DAG: gpu.func @fa_bwd_pre_bwd_f16_d64_bq64_bkv128_w8_s1_none_sm90a
// CHECK-DAG: gpu.func @fa_bwd_bwd_f16_d64_bq64_bkv128_w8_s1_none_sm90a
// CHECK-DAG: gpu.func @fa_bwd_post_bwd_f16_d64_bq64_bkv128_w8_s1_none_sm90a
// STAGES: IR Dump After AttnRecomputeBackwardPass
// STAGES: attn.backward_tile {{.+}}attn.kernel_plan = {block_kv = 128 : i64, block_q = 64 : i64
// STAGES: IR Dump After ConvertAttnToGPUPass
// STAGES: gpu.module @fa_bwd_f16_d64_bq64_bkv128_w8_s1_none_sm90a
// The main kernel's tile level: the query loop carrying dK and dV.
// STAGES: gpu.func @fa_bwd_bwd_f16_d64_bq64_bkv128_w8_s1_none_sm90a
// STAGES: attn_gpu.async_copy_row_stats
// STAGES: scf.for {{.+}} -> (!attn_gpu.fragment<16x64xf32, accumulator>, !attn_gpu.fragment<16x64xf32, accumulator>)
// STAGES: attn_gpu.mma_qk
// STAGES: attn_gpu.transposed_mask
// STAGES: attn_gpu.recompute_probs
// STAGES: attn_gpu.score_gradient
// STAGES: attn_gpu.reduce_dq
// STAGES: attn_gpu.store_accumulator
// STAGES: IR Dump After ConvertAttnGPUToNVVMPass
// STAGES-NOT: attn_gpu.
// STAGES: gpu.func @fa_bwd_bwd_f16_d64_bq64_bkv128_w8_s1_none_sm90a
// STAGES: nvvm.mma.sync
func.func @backward(%q: tensor<?x?x?x64xf16>, %k: tensor<?x?x?x64xf16>, %v: tensor<?x?x?x64xf16>, %o: tensor<?x?x?x64xf16>, %lse: tensor<?x?x?xf32>) -> (tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>) {
  %dq, %dk, %dv = attn.attention_backward %q, %k, %v, %o, %o, %lse : tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?xf32> -> tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>
  return %dq, %dk, %dv : tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>
}
