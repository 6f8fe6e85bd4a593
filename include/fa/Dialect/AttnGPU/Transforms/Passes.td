//===- Passes.td - attn_gpu schedule passes -----------------*- tablegen -*-===//
//
// Rewrites of the GPU tile level: schedule choices of the kernel plan and
// algebraic rewrites of the tile ops, between convert-attn-to-gpu (which emits
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

def AttnGPUWarpSpecializePass : Pass<"attn-gpu-warp-specialize", "ModuleOp"> {
  let summary = "Give the key loop's copies to a producer warp";
  let description = [{
    For a kernel whose `attn.kernel_plan` has `producer_warp`, the
    unpipelined key loop of attn-gpu-pipeline's description is split
    between a producer warp (the CTA's last) and the plan's `warps`
    consumers, in an `attn_gpu.producer_warp`:

    - each copied tile becomes a ring of `stages` slots (the shared buffer
      grows, tiles behind move) with a full and an empty mbarrier per slot
      (`attn_gpu.ring_init`, after the tiles, before the last barrier ahead
      of the loop);
    - the producer runs the loop's iterations copying only: per tile it
      acquires slot (j − begin) mod stages, copies with its 32 lanes
      (`async_copy ... by_warp`) and commits the slot, which fills when the
      copies land (cp.async.mbarrier.arrive.noinc); a copy that names a
      tensor map (`tma(...)`, plan `tma`) becomes an `attn_gpu.tma_copy`
      instead: the warp's first thread arms the slot with the tile's bytes
      and loads it by TMA, so its ring_init counts one producer; a paged
      one walks the tile's pages first (`page_walk`, ahead of the
      iteration's first `ring_acquire`) and loads by TMA only where the
      tile's keys all lie below the sequence's count (`scf.if`), else the
      lanes' zero-filled cp.async gather, `async_wait 0` and one thread's
      `ring_arrive`;
    - the consumers run the loop without its copies and CTA barriers: each
      reader waits for its slot (`ring_wait`) where it waited for its copy,
      and releases it right after (`ring_release`); what follows the loop
      (the epilogue) runs on the consumers only.

    ```mlir
    attn_gpu.producer_warp after 2 warps {
      scf.for %j = %b to %e step %c1 {
        %it = arith.subi %j, %b   %s = arith.remui %it, 2
        %k = attn_gpu.shared_tile offset 4096 stage %s of 8192 : ...
        attn_gpu.ring_acquire %it at 73728 slots 2
        attn_gpu.async_copy %K[...] rows %key below %nk stride %rs into %k by_warp
        attn_gpu.ring_commit %it at 73728 slots 2
        ...
      }
      attn_gpu.async_wait 0
    } consumers {
      scf.for %j = %b to %e step %c1 iter_args(...) {
        ...
        attn_gpu.ring_wait %it at 73728 slots 2
        %s = attn_gpu.mma_qk %q, %k ...
        attn_gpu.ring_release %it at 73728 slots 2
        ...
      }
      // the epilogue
    }
    ```
    A plan with `producer_warp` whose kernel has not exactly one such loop,
    directly in the kernel's body after a barrier, is an error.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::scf::SCFDialect",
                           "::mlir::gpu::GPUDialect"];
}

def AttnGPUAnchorScoreModPass : Pass<"attn-gpu-anchor-score-mod", "ModuleOp"> {
  let summary = "Evaluate a query-additive score_mod at one query per lane";
  let description = [{
    A score_mod whose q_idx enters only through an added term,
    score_mod(s, b, h, q, kv) = f(s, b, h, kv) + g(b, h, q)
    (attn::scoreModQueryAdditive: ALiBi's s + slope[h]·f32(kv − q) is one),
    shifts each row's scores by g, which the row's softmax does not see.
    In a kernel whose `attn_gpu.score_mod` ops are all such, with the same
    rows, this pass marks them `query_anchored`: a lane evaluates both its
    rows at the query of its first row, so the per-key part of the mod
    (f32(kv − q0), its product with the slope) is computed once for the
    two rows. Each `finalize_softmax` then takes the rows' difference
    g(q_r) − g(q_0) from a `score_mod_shift` and adds it to the LSE (the
    sink, if any, is shifted as the scores were). O is unchanged; the LSE
    is the mod's own. Kernels without a finalisation (the backward) and
    other mods are left alone.

    ```mlir
    %s2 = attn_gpu.score_mod %s scale %c at [%b, %h, %q0] of [%nq, %nk]
        row %row key %k : !attn_gpu.fragment<16x64xf32, accumulator> {...}
    ...
    %f:2 = attn_gpu.finalize_softmax %m, %l : ...
    // becomes
    %s2 = attn_gpu.score_mod ... {query_anchored} ... {...}
    ...
    %d = attn_gpu.score_mod_shift scale %c at [%b, %h, %q0] of [%nq, %nk]
        row %row : !attn_gpu.fragment<16x1xf32, rows> {...}
    %f:2 = attn_gpu.finalize_softmax %m, %l shift %d : ...
    ```
  }];
}

#endif // FA_DIALECT_ATTNGPU_TRANSFORMS_PASSES
