// RUN: fa-opt %s -split-input-file -verify-diagnostics -attn-gpu-warp-specialize
// RUN: not fa-opt %s -split-input-file -attn-gpu-warp-specialize 2>/dev/null | FileCheck %s

// attn-gpu-warp-specialize refuses kernels it cannot split: the producer
// warp takes the one key loop and the consumers all that follows the first
// copy ahead of it, so the loop must stand in the kernel's body and what the
// producer reads must be defined before that copy. The last case is the
// smallest kernel it splits.

#plan = {stages = 2 : i64, warps = 1 : i64, producer_warp}
!tile = !attn_gpu.shared_tile<64x64xbf16, stride = 72>
!frag = !attn_gpu.fragment<16x64xbf16, operand_a>

gpu.module @m {
  gpu.func @nested(%mem: memref<1024xbf16>, %n: index, %c: i1) kernel attributes {attn.kernel_plan = #plan} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    attn_gpu.shared_memory 4608 x bf16
    scf.if %c {
      // expected-error @+1 {{expected the key loop in the kernel's body (the consumers run it and all that follows)}}
      scf.for %j = %c0 to %n step %c1 {
        gpu.barrier
        %t = attn_gpu.shared_tile offset 0 : !tile
        attn_gpu.async_copy %mem[%c0] rows %j below %n stride %c1 into %t : memref<1024xbf16>, !tile
        attn_gpu.async_wait 0
        gpu.barrier
        %f = attn_gpu.load_operand_a %t[%c0] : !tile -> !frag
      }
    }
    gpu.return
  }
}

// -----

#plan = {stages = 2 : i64, warps = 1 : i64, producer_warp}
!tile = !attn_gpu.shared_tile<64x64xbf16, stride = 72>
!frag = !attn_gpu.fragment<16x64xbf16, operand_a>

gpu.module @m {
  gpu.func @late_bound(%mem: memref<1024xbf16>, %n: index) kernel attributes {attn.kernel_plan = #plan} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    attn_gpu.shared_memory 4608 x bf16
    %q = attn_gpu.shared_tile offset 0 : !tile
    attn_gpu.async_copy %mem[%c0] rows %c0 below %n stride %c1 into %q : memref<1024xbf16>, !tile
    attn_gpu.async_wait 0
    gpu.barrier
    %end = arith.addi %n, %c1 : index
    // expected-error @+1 {{expected what the producer warp reads to be defined before the first copy ahead of the key loop (where the roles part)}}
    scf.for %j = %c0 to %end step %c1 {
      gpu.barrier
      %t = attn_gpu.shared_tile offset 4608 : !tile
      attn_gpu.async_copy %mem[%c0] rows %j below %n stride %c1 into %t : memref<1024xbf16>, !tile
      attn_gpu.async_wait 0
      gpu.barrier
      %f = attn_gpu.load_operand_a %t[%c0] : !tile -> !frag
    }
    gpu.return
  }
}

// -----

#plan = {stages = 2 : i64, warps = 1 : i64, producer_warp}
!tile = !attn_gpu.shared_tile<64x64xbf16, stride = 72>
!frag = !attn_gpu.fragment<16x64xbf16, operand_a>

// The tile becomes a ring of two slots (4608 → 9216 elements); its
// barriers follow at byte 18432. Without a copy ahead of the loop the roles
// part at the loop.
// CHECK-LABEL: gpu.func @smallest
// CHECK: attn_gpu.shared_memory 9232 x bf16
// CHECK-NEXT: attn_gpu.async_wait 0
// CHECK-NEXT: gpu.barrier
// CHECK-NEXT: attn_gpu.ring_init at 18432 slots 2 producers 32 consumers 32
// CHECK-NEXT: gpu.barrier
// CHECK-NEXT: attn_gpu.producer_warp after 1 warps {
// CHECK: attn_gpu.ring_acquire
// CHECK-NEXT: attn_gpu.async_copy {{.+}} threads 32 to 64
// CHECK-NEXT: attn_gpu.ring_commit
// CHECK: } consumers {
// CHECK-NEXT: scf.for
// CHECK: attn_gpu.ring_wait
// CHECK-NEXT: attn_gpu.load_operand_a
// CHECK-NEXT: attn_gpu.ring_release
gpu.module @m {
  gpu.func @smallest(%mem: memref<1024xbf16>, %n: index) kernel attributes {attn.kernel_plan = #plan} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    attn_gpu.shared_memory 4608 x bf16
    attn_gpu.async_wait 0
    gpu.barrier
    scf.for %j = %c0 to %n step %c1 {
      gpu.barrier
      %t = attn_gpu.shared_tile offset 0 : !tile
      attn_gpu.async_copy %mem[%c0] rows %j below %n stride %c1 into %t : memref<1024xbf16>, !tile
      attn_gpu.async_wait 0
      gpu.barrier
      %f = attn_gpu.load_operand_a %t[%c0] : !tile -> !frag
    }
    gpu.return
  }
}
