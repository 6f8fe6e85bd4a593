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

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

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

/// Whether the GPU path keeps `op` of a function it compiles: its kernels
/// read the function's arguments and write its results, so the function may
/// hold only attn ops, constants, shape queries and the return. Anything else
/// (arithmetic on Q before the op, a scaling of O after it) would vanish
/// with the function when convert-attn-to-gpu replaces it by kernels.
static bool survivesGpuLowering(Operation *op) {
  if (op->getDialect() && op->getDialect()->getNamespace() ==
                              attn::AttnDialect::getDialectNamespace())
    return true;
  return isa<func::ReturnOp, arith::ConstantOp, tensor::DimOp>(op);
}

/// A diagnostic on the first op of `func`'s body that the GPU path would
/// drop, when `func` holds an attention op to compile.
static LogicalResult checkCompiledFunction(func::FuncOp func) {
  bool compiled = false;
  for (Operation &op : func.getBody().getOps())
    compiled |= isa<attn::AttentionOp, attn::AttentionBackwardOp>(op);
  if (!compiled)
    return success();
  for (Operation &op : func.getBody().getOps())
    if (!survivesGpuLowering(&op))
      return op.emitOpError(
          "would be dropped by the GPU path: a function compiled to GPU "
          "kernels holds only attn ops, constants, tensor.dim and its "
          "return (the kernels read the function's arguments and write its "
          "results); move this op to another function");
  return success();
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
    options.quantize = quantize;
    for (auto func : getOperation().getOps<func::FuncOp>())
      if (failed(checkCompiledFunction(func)))
        return signalPassFailure();
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
