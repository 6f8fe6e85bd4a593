// RUN: fa-opt %s -split-input-file -verify-diagnostics -attn-gpu-pipeline
// RUN: not fa-opt %s -split-input-file -attn-gpu-pipeline 2>/dev/null | FileCheck %s --check-prefix=ONE

// attn-gpu-pipeline refuses a key loop that is not in the unpipelined shape
// (Passes.td): it would otherwise reorder copies and reads it cannot prove
// independent. The last case, a loop in that shape written by hand, shows
// the rewrite on the smallest kernel (the others fail: `not`).

#plan = {stages = 2 : i64}
!tile = !attn_gpu.shared_tile<64x64xbf16, stride = 72>
!frag = !attn_gpu.fragment<16x64xbf16, operand_a>

gpu.module @m {
  gpu.func @unread(%mem: memref<1024xbf16>, %n: index) kernel attributes {attn.kernel_plan = #plan} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    attn_gpu.shared_memory 4608 x bf16
    attn_gpu.async_wait 0
    scf.for %j = %c0 to %n step %c1 {
      gpu.barrier
      %t = attn_gpu.shared_tile offset 0 : !tile
      // expected-error @+1 {{expected its tile to be read by one op after it in the loop body, got 0 readers}}
      attn_gpu.async_copy %mem[%c0] rows %j below %n stride %c1 into %t : memref<1024xbf16>, !tile
    }
    gpu.return
  }
}

// -----

#plan = {stages = 2 : i64}
!tile = !attn_gpu.shared_tile<64x64xbf16, stride = 72>
!frag = !attn_gpu.fragment<16x64xbf16, operand_a>

gpu.module @m {
  gpu.func @no_wait(%mem: memref<1024xbf16>, %n: index) kernel attributes {attn.kernel_plan = #plan} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    attn_gpu.shared_memory 4608 x bf16
    attn_gpu.async_wait 0
    scf.for %j = %c0 to %n step %c1 {
      gpu.barrier
      %t = attn_gpu.shared_tile offset 0 : !tile
      attn_gpu.async_copy %mem[%c0] rows %j below %n stride %c1 into %t : memref<1024xbf16>, !tile
      // expected-error @+1 {{expected attn_gpu.async_wait and gpu.barrier right before the reader of a copied tile}}
      %f = attn_gpu.load_operand_a %t[%c0] : !tile -> !frag
    }
    gpu.return
  }
}

// -----

#plan = {stages = 2 : i64}
!tile = !attn_gpu.shared_tile<64x64xbf16, stride = 72>
!frag = !attn_gpu.fragment<16x64xbf16, operand_a>

gpu.module @m {
  gpu.func @early_wait(%mem: memref<1024xbf16>, %n: index) kernel attributes {attn.kernel_plan = #plan} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    attn_gpu.shared_memory 8192 x bf16
    attn_gpu.async_wait 0
    scf.for %j = %c0 to %n step %c1 {
      gpu.barrier
      %k = attn_gpu.shared_tile offset 0 : !tile
      attn_gpu.async_copy %mem[%c0] rows %j below %n stride %c1 into %k : memref<1024xbf16>, !tile
      %v = attn_gpu.shared_tile offset 4608 : !tile
      attn_gpu.async_copy %mem[%c0] rows %j below %n stride %c1 into %v : memref<1024xbf16>, !tile
      // expected-error @+1 {{expected to leave in flight only the 1 copies issued after the tile it waits for, got 0}}
      attn_gpu.async_wait 0
      gpu.barrier
      %f = attn_gpu.load_operand_a %k[%c0] : !tile -> !frag
      attn_gpu.async_wait 0
      gpu.barrier
      %g = attn_gpu.load_operand_a %v[%c0] : !tile -> !frag
    }
    gpu.return
  }
}

// -----

#plan = {stages = 2 : i64}
!tile = !attn_gpu.shared_tile<64x64xbf16, stride = 72>
!frag = !attn_gpu.fragment<16x64xbf16, operand_a>

gpu.module @m {
  gpu.func @no_release(%mem: memref<1024xbf16>, %n: index) kernel attributes {attn.kernel_plan = #plan} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    attn_gpu.shared_memory 4608 x bf16
    attn_gpu.async_wait 0
    scf.for %j = %c0 to %n step %c1 {
      %t = attn_gpu.shared_tile offset 0 : !tile
      // expected-error @+1 {{expected a gpu.barrier before the loop's first copy}}
      attn_gpu.async_copy %mem[%c0] rows %j below %n stride %c1 into %t : memref<1024xbf16>, !tile
      attn_gpu.async_wait 0
      gpu.barrier
      %f = attn_gpu.load_operand_a %t[%c0] : !tile -> !frag
    }
    gpu.return
  }
}

// -----

#plan = {stages = 2 : i64}
!tile = !attn_gpu.shared_tile<64x64xbf16, stride = 72>
!frag = !attn_gpu.fragment<16x64xbf16, operand_a>

gpu.module @m {
  gpu.func @no_prologue_wait(%mem: memref<1024xbf16>, %n: index) kernel attributes {attn.kernel_plan = #plan} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    attn_gpu.shared_memory 4608 x bf16
    // expected-error @+1 {{expected an attn_gpu.async_wait ahead of a pipelined loop}}
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

// -----

#plan = {stages = 2 : i64}
!tile = !attn_gpu.shared_tile<64x64xbf16, stride = 72>
!frag = !attn_gpu.fragment<16x64xbf16, operand_a>

gpu.module @m {
  gpu.func @loaded_row(%mem: memref<1024xbf16>, %rows: memref<64xindex>, %n: index) kernel attributes {attn.kernel_plan = #plan} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    attn_gpu.shared_memory 4608 x bf16
    attn_gpu.async_wait 0
    scf.for %j = %c0 to %n step %c1 {
      // expected-error @+1 {{expected pure ops to compute the operands of a pipelined copy}}
      %row = memref.load %rows[%j] : memref<64xindex>
      gpu.barrier
      %t = attn_gpu.shared_tile offset 0 : !tile
      attn_gpu.async_copy %mem[%c0] rows %row below %n stride %c1 into %t : memref<1024xbf16>, !tile
      attn_gpu.async_wait 0
      gpu.barrier
      %f = attn_gpu.load_operand_a %t[%c0] : !tile -> !frag
    }
    gpu.return
  }
}

// -----

#plan = {stages = 2 : i64}
!tile = !attn_gpu.shared_tile<64x64xbf16, stride = 72>
!frag = !attn_gpu.fragment<16x64xbf16, operand_a>

gpu.module @m {
  gpu.func @late_operand(%mem: memref<1024xbf16>, %n: index) kernel attributes {attn.kernel_plan = #plan} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    attn_gpu.shared_memory 4608 x bf16
    attn_gpu.async_wait 0
    %late = arith.addi %n, %c1 : index
    scf.for %j = %c0 to %n step %c1 {
      gpu.barrier
      %t = attn_gpu.shared_tile offset 0 : !tile
      // expected-error @+1 {{expected the operands of a pipelined copy to be defined before the last wait ahead of the loop}}
      attn_gpu.async_copy %mem[%late] rows %j below %n stride %c1 into %t : memref<1024xbf16>, !tile
      attn_gpu.async_wait 0
      gpu.barrier
      %f = attn_gpu.load_operand_a %t[%c0] : !tile -> !frag
    }
    gpu.return
  }
}

// -----

#plan = {stages = 2 : i64}
!tile = !attn_gpu.shared_tile<64x64xbf16, stride = 72>
!frag = !attn_gpu.fragment<16x64xbf16, operand_a>

// One copied tile, two stages: the buffer grows by one tile, the tile
// behind the ring moves by one, the copy's row (j·64 + n, linear in j)
// moves 64 rows ahead; its other operand is recomputed for j + 1.
// ONE-LABEL: gpu.func @one
// ONE: attn_gpu.shared_memory 13824 x bf16
// ONE: %[[ROW0:.+]] = arith.muli %[[LB:.+]], %c64
// ONE: %[[KEY0:.+]] = arith.addi %[[ROW0]], %{{.+}}
// ONE: %[[T0:.+]] = attn_gpu.shared_tile offset 0 stage %{{.+}} of 4608
// ONE: attn_gpu.async_copy %{{.+}}[%{{.+}}] rows %[[KEY0]] below %{{.+}} stride %{{.+}} into %[[T0]]
// ONE-NEXT: attn_gpu.async_wait 1
// ONE: scf.for %[[J:.+]] = %[[LB]] to
// ONE: %[[ROW:.+]] = arith.muli %[[J]], %c64
// ONE: %[[KEY:.+]] = arith.addi %[[ROW]], %{{.+}}
// ONE: %[[SQ:.+]] = arith.muli %[[J]], %[[J]]
// ONE-NOT: gpu.barrier
// ONE: attn_gpu.async_wait 0
// ONE-NEXT: gpu.barrier
// ONE-NEXT: %[[T:.+]] = attn_gpu.shared_tile offset 0 stage %{{.+}} of 4608
// ONE-NEXT: attn_gpu.load_operand_a %[[T]]
// ONE-NEXT: %[[TN:.+]] = attn_gpu.shared_tile offset 0 stage %{{.+}} of 4608
// ONE-NEXT: %[[C1:.+]] = arith.constant 1 : index
// ONE-NEXT: %[[J1:.+]] = arith.addi %[[J]], %[[C1]]
// ONE-NEXT: %[[SQ1:.+]] = arith.muli %[[J1]], %[[J1]]
// ONE-NEXT: %[[C64:.+]] = arith.constant 64 : index
// ONE-NEXT: %[[AHEAD:.+]] = arith.addi %[[KEY]], %[[C64]]
// ONE-NEXT: attn_gpu.async_copy %{{.+}}[%[[SQ1]]] rows %[[AHEAD]] below %{{.+}} stride %{{.+}} into %[[TN]]
// ONE: attn_gpu.shared_tile offset 9216 : <64x64xbf16, stride = 72>
gpu.module @m {
  gpu.func @one(%mem: memref<1024xbf16>, %lb: index, %n: index) kernel attributes {attn.kernel_plan = #plan} {
    %c1 = arith.constant 1 : index
    attn_gpu.shared_memory 9216 x bf16
    attn_gpu.async_wait 0
    scf.for %j = %lb to %n step %c1 {
      %c64 = arith.constant 64 : index
      %row = arith.muli %j, %c64 : index
      %key = arith.addi %row, %n : index
      %sq = arith.muli %j, %j : index
      gpu.barrier
      %t = attn_gpu.shared_tile offset 0 : !tile
      attn_gpu.async_copy %mem[%sq] rows %key below %n stride %c1 into %t : memref<1024xbf16>, !tile
      attn_gpu.async_wait 0
      gpu.barrier
      %f = attn_gpu.load_operand_a %t[%c1] : !tile -> !frag
    }
    %after = attn_gpu.shared_tile offset 4608 : !tile
    gpu.return
  }
}
