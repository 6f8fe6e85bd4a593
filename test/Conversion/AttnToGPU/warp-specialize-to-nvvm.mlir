// RUN: fa-opt %s -split-input-file -convert-attn-gpu-to-nvvm | FileCheck %s --enable-var-scope

// convert-attn-gpu-to-nvvm lowers the warpgroup roles to one branch on
// tid / 128: warpgroup 0 lowers its registers and runs the producer, the
// others raise theirs and run the consumers with index tid / 128 − 1.
// CHECK-LABEL: gpu.func @roles
// CHECK: %[[TID:.+]] = gpu.thread_id  x
// CHECK: %[[GROUP:.+]] = arith.divui %[[TID]], %c128
// CHECK: %[[FIRST:.+]] = arith.cmpi eq, %[[GROUP]], %c0
// CHECK: scf.if %[[FIRST]] {
// CHECK-NEXT: nvvm.setmaxregister  decrease 24
// CHECK-NEXT: gpu.barrier
// CHECK-NEXT: } else {
// CHECK-NEXT: nvvm.setmaxregister  increase 240
// CHECK-NEXT: %[[C1:.+]] = arith.constant 1 : index
// CHECK-NEXT: %[[CONSUMER:.+]] = arith.subi %[[GROUP]], %[[C1]] : index
// CHECK: memref.store %{{.+}}, %{{.+}}[%[[CONSUMER]]]
// CHECK-NOT: attn_gpu.warp_specialize
gpu.module @roles {
  gpu.func @roles(%out: memref<2xf32>) kernel attributes {known_block_size = array<i32: 384, 1, 1>} {
    attn_gpu.warp_specialize producer registers 24 {
      gpu.barrier
    } consumers registers 240 {
    ^bb0(%c: index):
      %one = arith.constant 1.0 : f32
      memref.store %one, %out[%c] : memref<2xf32>
    }
    gpu.return
  }
}

// -----

// The wgmma forward's tile ops need no kernel plan: wgmma_qk is one
// shared-memory wgmma per k step (the first overwrites the accumulator),
// wgmma_pv the register-A form (inline PTX, P's four words per k step), the
// turns named barriers 1 and 2 of the two consumer warpgroups.
// CHECK-LABEL: gpu.func @wgmma
// CHECK: scf.if %[[FIRST:[^ ]+]] {
// CHECK-NEXT: llvm.inline_asm has_side_effects "bar.sync 1, 256;"
// CHECK-NEXT: } else {
// CHECK-NEXT: llvm.inline_asm has_side_effects "bar.sync 2, 256;"
// CHECK: nvvm.wgmma.mma_async {{.+}} <m = 64, n = 64, k = 16>, D[<f32>, <zero>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <col>]
// CHECK: nvvm.wgmma.mma_async {{.+}} <m = 64, n = 64, k = 16>, D[<f32>, <one>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <col>]
// CHECK-COUNT-32: llvm.extractvalue
// CHECK: llvm.inline_asm has_side_effects {{.+}}wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16
// CHECK: scf.if %[[FIRST]] {
// CHECK-NEXT: llvm.inline_asm has_side_effects "bar.arrive 2, 256;"
// CHECK-NEXT: } else {
// CHECK-NEXT: llvm.inline_asm has_side_effects "bar.arrive 1, 256;"
// CHECK-NOT: attn_gpu.
// CHECK: memref.store
gpu.module @wgmma {
  gpu.func @wgmma(%first: i1, %q: i64, %k: i64, %p: i32, %out: memref<32xf32>) kernel {
    attn_gpu.turn_begin %first
    %s = attn_gpu.wgmma_qk (%q, %q), (%k, %k) of bf16 : !attn_gpu.fragment<16x64xf32, accumulator>
    %o = attn_gpu.wgmma_pv (%p, %p, %p, %p), (%k), %s of bf16 : !attn_gpu.fragment<16x64xf32, accumulator>
    attn_gpu.turn_end %first
    %lanes:32 = builtin.unrealized_conversion_cast %o : !attn_gpu.fragment<16x64xf32, accumulator> to f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32
    %c0 = arith.constant 0 : index
    memref.store %lanes#31, %out[%c0] : memref<32xf32>
    gpu.return
  }
}

// -----

// mn_major (the backward's dQ = dS·K): both operands transposed.
// CHECK-LABEL: gpu.func @mn_major
// CHECK: nvvm.wgmma.mma_async {{.+}} <m = 64, n = 32, k = 16>, D[<f32>, <zero>], A[<f16>, <one>, <col>], B[<f16>, <one>, <row>]
gpu.module @mn_major {
  gpu.func @mn_major(%a: i64, %b: i64, %out: memref<16xf32>) kernel {
    %s = attn_gpu.wgmma_qk (%a), (%b) mn_major of f16 : !attn_gpu.fragment<16x32xf32, accumulator>
    %lanes:16 = builtin.unrealized_conversion_cast %s : !attn_gpu.fragment<16x32xf32, accumulator> to f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32
    %c0 = arith.constant 0 : index
    memref.store %lanes#0, %out[%c0] : memref<16xf32>
    gpu.return
  }
}

// -----

// online_softmax and finalize_softmax need no kernel plan either: a builder's
// kernel uses them on a unit accumulator (its update is α) with a lazy
// rescale (a row keeps its max while it grows by at most 8).
// CHECK-LABEL: gpu.func @softmax
// CHECK: gpu.shuffle  xor
// CHECK: %[[TAU:.+]] = arith.constant 8.000000e+00 : f32
// CHECK-NEXT: arith.cmpf ole, %{{.+}}, %[[TAU]] : f32
// CHECK: llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f"
// CHECK: llvm.call_intrinsic "llvm.nvvm.lg2.approx.ftz.f"
// CHECK-NOT: attn_gpu.
// CHECK: gpu.return
gpu.module @softmax {
  gpu.func @softmax(%s: f32, %m: f32, %scale: f32, %out: memref<8xf32>) kernel {
    %one = arith.constant 1.0 : f32
    %unit = attn_gpu.fill %one : !attn_gpu.fragment<16x8xf32, accumulator>
    %sf = attn_gpu.fill %s : !attn_gpu.fragment<16x8xf32, accumulator>
    %mf = attn_gpu.fill %m : !attn_gpu.fragment<16x1xf32, rows>
    %p, %m1, %l1, %alpha = attn_gpu.online_softmax %sf, %mf, %mf, %unit scale %scale {lazy_rescale_log2 = 8.0 : f64} : !attn_gpu.fragment<16x8xf32, accumulator>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x8xf32, accumulator> -> !attn_gpu.fragment<16x8xf32, accumulator>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x8xf32, accumulator>
    %inv, %lse = attn_gpu.finalize_softmax %m1, %l1 : !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x1xf32, rows> -> !attn_gpu.fragment<16x1xf32, rows>, !attn_gpu.fragment<16x1xf32, rows>
    %a:4 = builtin.unrealized_conversion_cast %alpha : !attn_gpu.fragment<16x8xf32, accumulator> to f32, f32, f32, f32
    %x:2 = builtin.unrealized_conversion_cast %lse : !attn_gpu.fragment<16x1xf32, rows> to f32, f32
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    memref.store %a#2, %out[%c0] : memref<8xf32>
    memref.store %x#1, %out[%c1] : memref<8xf32>
    gpu.return
  }
}
