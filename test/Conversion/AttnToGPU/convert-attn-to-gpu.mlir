// RUN: fa-opt %s -split-input-file -fa-attn-to-gpu | FileCheck %s --enable-var-scope
// RUN: fa-opt %s -split-input-file -fa-attn-to-gpu="block-kv=32 target=sm_80" | FileCheck %s --check-prefix=OPT
// The kernels print in a form that parses back.
// RUN: fa-opt %s -split-input-file -fa-attn-to-gpu | fa-opt -split-input-file > /dev/null

// The function becomes a gpu.module holding the ABI kernel: flat pointers,
// i32 sizes, f32 scale, then the batch, head and row strides (i64) of Q, K,
// V and O; Q block × head × batch from the block ids; 4 warps.
// CHECK: module attributes {gpu.container_module}
// CHECK-NOT: func.func
// CHECK-LABEL: gpu.module @fa_fwd_bf16_d128_bq64_bkv64_w4_s2_causal_sm90a
// CHECK: memref.global "public" @{{.*}} : memref<0xbf16, 3> {alignment = 1024 : i64}
// CHECK: gpu.func @fa_fwd_fwd_bf16_d128_bq64_bkv64_w4_s2_causal_sm90a(
// CHECK-SAME: memref<1099511627776xbf16>, %{{.*}}: memref<1099511627776xbf16>, %{{.*}}: memref<1099511627776xbf16>, %{{.*}}: memref<1099511627776xbf16>, %{{.*}}: memref<1099511627776xf32>,
// CHECK-SAME: i32, %{{.*}}: i32, %{{.*}}: i32, %{{.*}}: i32, %{{.*}}: i32, %{{.*}}: f32,
// CHECK-SAME: %[[QSB:[^:]+]]: i64, %[[QSH:[^:]+]]: i64, %[[QSN:[^:]+]]: i64, %{{[^:]+}}: i64, %{{[^:]+}}: i64, %{{[^:]+}}: i64,
// CHECK-SAME: %{{[^:]+}}: i64, %{{[^:]+}}: i64, %{{[^:]+}}: i64, %{{[^:]+}}: i64, %{{[^:]+}}: i64, %[[OSN:[^:]+]]: i64) kernel
// CHECK-SAME: fa.shared_bytes = 87040
// CHECK-SAME: known_block_size = array<i32: 128, 1, 1>
// CHECK: gpu.block_id  x
// CHECK: gpu.block_id  y
// CHECK: %[[BATCH:.+]] = gpu.block_id  z
// Q's head starts at batch·sB + head·sH (formed once, before the key loop).
// CHECK-DAG: %[[SB:.+]] = arith.index_cast %[[QSB]] : i64 to index
// CHECK-DAG: %[[SH:.+]] = arith.index_cast %[[QSH]] : i64 to index
// CHECK-DAG: %[[SN:.+]] = arith.index_cast %[[QSN]] : i64 to index
// CHECK-DAG: %[[OFFH:.+]] = arith.muli %{{.+}}, %[[SH]] : index
// CHECK-DAG: %[[OFFB:.+]] = arith.muli %[[BATCH]], %[[SB]] : index
// CHECK: %[[QBASE:.+]] = arith.addi %[[OFFB]], %[[OFFH]] : index
// A thread's first Q row: base + (qBegin + its row)·sN.
// CHECK: %[[QROW:.+]] = arith.muli %{{.+}}, %[[SN]] : index
// CHECK: arith.addi %[[QBASE]], %[[QROW]] : index
// Q, K(0), V(0) prologue copies, Q fragments through ldmatrix.
// CHECK: nvgpu.device_async_copy {{.*}}, 8, %{{.*}} {bypassL1}
// CHECK: nvvm.cp.async.commit.group
// CHECK: nvvm.cp.async.wait.group 2
// CHECK: gpu.barrier
// CHECK: nvgpu.ldmatrix {{.*}} {numTiles = 4 : i32, transpose = false}
// The KV loop: S on tensor cores, a mask only on boundary tiles, online
// softmax with xor shuffles and exp2, P·V with transposed V fragments.
// CHECK: scf.for
// CHECK: nvvm.cp.async.wait.group 1
// CHECK: nvvm.mma.sync {{.*}} multiplicandAPtxType = #nvvm.mma_type<bf16>
// CHECK: scf.if
// CHECK: } else {
// CHECK: arith.select
// CHECK: gpu.shuffle  xor
// CHECK: llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f"
// CHECK: nvgpu.ldmatrix {{.*}} {numTiles = 4 : i32, transpose = true}
// CHECK: scf.yield
// Epilogue: predicated O and LSE stores.
// CHECK: llvm.call_intrinsic "llvm.nvvm.lg2.approx.ftz.f"
// CHECK: vector.store {{.*}} {alignment = 4 : i64} : memref<1099511627776xbf16>, vector<2xbf16>
// CHECK: memref.store {{.*}} : memref<1099511627776xf32>

// OPT-LABEL: gpu.module @fa_fwd_bf16_d128_bq64_bkv32_w4_s2_causal_sm80
func.func @causal(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>) -> (tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal>} : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16> -> tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x128xbf16>, tensor<?x?x?xf32>
}

// -----

// f16 operands are vector<2xf16> registers; d = 256 takes 32-key tiles;
// static shapes are accepted and ignored (sizes come at run time).
// CHECK-LABEL: gpu.module @fa_fwd_f16_d256_bq64_bkv32_w4_s2_none_sm90a
// CHECK: nvvm.mma.sync {{.*}} : (vector<2xf16>, vector<2xf16>, f32) -> !llvm.struct<(f32, f32, f32, f32)>
// OPT-LABEL: gpu.module @fa_fwd_f16_d256_bq64_bkv32_w4_s2_none_sm80
func.func @big_head(%q: tensor<1x4x100x256xf16>, %k: tensor<1x2x90x256xf16>, %v: tensor<1x2x90x256xf16>) -> (tensor<1x4x100x256xf16>, tensor<1x4x100xf32>) {
  %o, %lse = attn.attention %q, %k, %v : tensor<1x4x100x256xf16>, tensor<1x2x90x256xf16>, tensor<1x2x90x256xf16> -> tensor<1x4x100x256xf16>, tensor<1x4x100xf32>
  return %o, %lse : tensor<1x4x100x256xf16>, tensor<1x4x100xf32>
}

// -----

// Windows name their band in the tag; d = 80 (5 k-steps) compiles.
// CHECK-LABEL: gpu.module @fa_fwd_bf16_d80_bq64_bkv64_w4_s2_window_l32_r4_sm90a
func.func @window(%q: tensor<?x?x?x80xbf16>, %k: tensor<?x?x?x80xbf16>, %v: tensor<?x?x?x80xbf16>) -> (tensor<?x?x?x80xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<window>, window_left = 32 : i64, window_right = 4 : i64} : tensor<?x?x?x80xbf16>, tensor<?x?x?x80xbf16>, tensor<?x?x?x80xbf16> -> tensor<?x?x?x80xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x80xbf16>, tensor<?x?x?xf32>
}

// -----

// Bottom-right causal with Nq > Nk: whole query blocks lie above the band, so
// the key range [lo, hi) is clamped to [0, Nk] at both ends before it becomes
// a tile range (an unclamped negative hi would run ~2^64 tiles).
// CHECK-LABEL: gpu.module @fa_fwd_bf16_d32_bq64_bkv64_w4_s2_causal_bottom_right_sm90a
// CHECK: %[[NK:.+]] = arith.index_castui %arg9 : i32 to index
// CHECK: %[[HI:.+]] = arith.minsi %{{.*}}, %[[NK]] : index
// CHECK: %[[HI0:.+]] = arith.maxsi %[[HI]], %{{.*}} : index
// CHECK: arith.addi %[[HI0]], %{{.*}} : index
// CHECK: scf.for
func.func @bottom_right(%q: tensor<?x?x?x32xbf16>, %k: tensor<?x?x?x32xbf16>, %v: tensor<?x?x?x32xbf16>) -> (tensor<?x?x?x32xbf16>, tensor<?x?x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v {mask = #attn.mask<causal_bottom_right>} : tensor<?x?x?x32xbf16>, tensor<?x?x?x32xbf16>, tensor<?x?x?x32xbf16> -> tensor<?x?x?x32xbf16>, tensor<?x?x?xf32>
  return %o, %lse : tensor<?x?x?x32xbf16>, tensor<?x?x?xf32>
}

