//===- ConvertAttnToGPU.cpp - convert-attn-to-gpu ---------------*- C++ -*-===//
//
// Replaces each function holding an attn.attention / attn.attention_backward
// by a gpu.module with the kernels of docs/ABI.md. The kernels read shapes at
// run time, so only the element type, head dims and mask come from the op.
//
//===----------------------------------------------------------------------===//

#include "fa/Conversion/AttnToGPU.h"
#include "fa/Conversion/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace mlir::fa {
#define GEN_PASS_DEF_CONVERTATTNTOGPUPASS
#include "fa/Conversion/Passes.h.inc"
} // namespace mlir::fa

using namespace mlir;
using namespace mlir::fa;

namespace {
struct ConvertAttnToGPUPass final
    : fa::impl::ConvertAttnToGPUPassBase<ConvertAttnToGPUPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    GpuTileOptions options;
    options.blockQ = blockQ;
    options.blockKV = blockKV;
    options.warps = warps;
    options.stages = stages;
    options.target = target;
    options.mma = mma;
    options.deterministic = deterministic;
    options.grid = grid;
    OpBuilder b(module.getContext());
    SmallVector<func::FuncOp> done;
    for (auto func : module.getOps<func::FuncOp>()) {
      SmallVector<Operation *> ops;
      func.walk([&](Operation *op) {
        if (isa<attn::AttentionOp, attn::AttentionBackwardOp>(op))
          ops.push_back(op);
      });
      if (ops.empty())
        continue;
      if (ops.size() > 1) {
        func.emitOpError("expected one attention op per function, got ")
            << ops.size();
        return signalPassFailure();
      }
      if (failed(convert(b, module, ops.front(), options)))
        return signalPassFailure();
      done.push_back(func);
    }
    for (func::FuncOp f : done)
      f.erase();
    if (!done.empty())
      module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                      b.getUnitAttr());
  }

  LogicalResult convert(OpBuilder &b, ModuleOp module, Operation *op,
                        const GpuTileOptions &options) {
    bool backward = isa<attn::AttentionBackwardOp>(op);
    auto q = cast<ShapedType>(op->getOperand(0).getType());
    auto v = cast<ShapedType>(op->getOperand(2).getType());
    attn::ScoreSpec spec = backward
                               ? cast<attn::AttentionBackwardOp>(op).getScoreSpec()
                               : cast<attn::AttentionOp>(op).getScoreSpec();
    std::string error;
    FailureOr<KernelPlan> plan =
        resolveKernelPlan(backward, q.getElementType(), q.getShape().back(),
                          v.getShape().back(), spec, options, error);
    if (failed(plan))
      return op->emitOpError(error);
    std::string name = "fa_" + plan->tag();
    if (module.lookupSymbol(name))
      return success(); // an identical kernel was already emitted
    b.setInsertionPointToEnd(module.getBody());
    auto gpuModule = gpu::GPUModuleOp::create(b, op->getLoc(), name);
    if (backward)
      buildBackwardKernels(b, op->getLoc(), gpuModule, *plan);
    else if (plan->strategy == MmaStrategy::Wgmma)
      buildForwardKernelWgmma(b, op->getLoc(), gpuModule, *plan);
    else
      buildForwardKernel(b, op->getLoc(), gpuModule, *plan);
    return success();
  }
};
} // namespace
