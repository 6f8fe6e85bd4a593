//===- AttnGPUPlan.cpp - attn-gpu-plan --------------------------*- C++ -*-===//
//
// Chooses the GPU kernel plan of every attn op and attaches it as the
// `attn.kernel_plan` dictionary: the tiling passes take their block sizes
// from it and convert-attn-to-gpu builds the kernel it names, so the plan is
// resolved once and travels in the IR.
//
//===----------------------------------------------------------------------===//

#include "fa/Conversion/AttnToGPU.h"
#include "fa/Conversion/Passes.h"
#include "fa/Dialect/Attn/Transforms/Transforms.h"

namespace mlir::fa {
#define GEN_PASS_DEF_ATTNGPUPLANPASS
#include "fa/Conversion/Passes.h.inc"
} // namespace mlir::fa

using namespace mlir;
using namespace mlir::fa;

static bool isVarlen(Operation *op) {
  if (auto fwd = dyn_cast<attn::AttentionOp>(op))
    return fwd.isVarlen();
  return cast<attn::AttentionBackwardOp>(op).isVarlen();
}

namespace {
struct AttnGPUPlanPass final : fa::impl::AttnGPUPlanPassBase<AttnGPUPlanPass> {
  using Base::Base;

  void runOnOperation() override {
    GpuTileOptions options;
    options.blockQ = blockQ;
    options.blockKV = blockKV;
    options.warps = warps;
    options.stages = stages;
    options.target = target;
    options.mma = mma;
    options.deterministic = deterministic;
    options.grid = grid;
    options.splitKv = splitKv;
    options.packGqa = packGqa;
    options.blockSparse = blockSparse;
    options.kvAppend = kvAppend;
    options.producerWarp = producerWarp;
    options.tma = tma;
    options.tf32 = tf32;
    WalkResult walk = getOperation().walk([&](Operation *op) {
      if (!isa<attn::AttentionOp, attn::AttentionBackwardOp>(op))
        return WalkResult::advance();
      options.varlen = isVarlen(op);
      auto fwd = dyn_cast<attn::AttentionOp>(op);
      options.paged = fwd && fwd.isPaged();
      std::string error;
      FailureOr<KernelPlan> plan = resolveKernelPlanFor(op, options, error);
      if (failed(plan)) {
        op->emitOpError(error);
        return WalkResult::interrupt();
      }
      op->setAttr(attn::kKernelPlanAttr, kernelPlanAttr(&getContext(), *plan));
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      signalPassFailure();
  }
};
} // namespace
