// RUN: fa-opt %s -convert-attn-gpu-to-nvvm | FileCheck %s --enable-var-scope

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
