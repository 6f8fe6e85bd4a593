//===- Passes.td - attn_gpu schedule passes -----------------*- tablegen -*-===//
//
// Rewrites of the GPU tile level: each one schedule choice of the kernel
// plan applied to the tile ops, between convert-attn-to-gpu (which emits
// the algorithm) and convert-attn-gpu-to-nvvm (which lowers the schedule).
//
//===----------------------------------------------------------------------===//

#ifndef FA_DIALECT_ATTNGPU_TRANSFORMS_PASSES
#define FA_DIALECT_ATTNGPU_TRANSFORMS_PASSES

include "mlir/Pass/PassBase.td"

def AttnGPUPipelinePass : Pass<"attn-gpu-pipeline", "ModuleOp"> {
  let summary = "Multi-buffer the key loop's tile copies over the plan's stages";
  let description = [{
    convert-attn-to-gpu writes each key-block loop unpipelined: the loop
    body starts with a barrier (the previous iteration's readers are done),
    then copies every tile the iteration reads (`attn_gpu.async_copy` into a
    `shared_tile` without stage), and each reader follows an
    `async_wait` (the copies after it may still be in flight) and a barrier.

    For a kernel whose `attn.kernel_plan` has `stages` = s > 1, each copied
    tile becomes a ring of s slots (the shared buffer grows, tiles behind the
    rings move), and the loop is software-pipelined: iteration j reads slot
    (j − begin) mod s, and right after its reader the copy for iteration
    j + s − 1 streams into the slot iteration j − 1 read. The first s − 1
    iterations' copies move before the last wait ahead of the loop (which
    keeps waiting for what it waited for), every wait in the body lets
    c·(s − 1) − 1 of the c copies per iteration stay in flight, and the
    leading barrier goes (each reader's barrier already orders the slot's
    reuse). A copy operand linear in the induction variable shifts by its
    coefficient; others are recomputed for j + s − 1.

    ```mlir
    scf.for %j = %b to %e step %c1 {
      gpu.barrier
      %k = attn_gpu.shared_tile offset 8704 : <64x128xbf16, stride = 136>
      attn_gpu.async_copy %K[%base] rows %key below %nk stride %rs into %k
      attn_gpu.async_wait 0
      gpu.barrier
      %s = attn_gpu.mma_qk %q, %k ...
    }
    // stages = 2 becomes
    attn_gpu.async_copy %K[%base] rows %key0 below ... into %k0  // iteration 0
    scf.for %j = %b to %e step %c1 {
      %stage = arith.remui (%j - %b), 2   %next = 1 - %stage
      attn_gpu.async_wait 0
      gpu.barrier
      %k = attn_gpu.shared_tile offset 8704 stage %stage of 8704
      %s = attn_gpu.mma_qk %q, %k ...
      %kn = attn_gpu.shared_tile offset 8704 stage %next of 8704
      attn_gpu.async_copy %K[%base] rows %key + 64 below ... into %kn
    }
    ```
    A loop with copies that does not have this shape is an error.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::scf::SCFDialect",
                           "::mlir::gpu::GPUDialect"];
}

#endif // FA_DIALECT_ATTNGPU_TRANSFORMS_PASSES
