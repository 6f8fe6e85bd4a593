//===- ConvertAttnToGPU.cpp - convert-attn-to-gpu ---------------*- C++ -*-===//
//
// Lowers the tiled form of attention to GPU kernels. Each function holding
// the loop nest of attn-tile (or attn-recompute-backward) around tile ops
// that carry an `attn.kernel_plan` is replaced by a gpu.module with the
// kernels of docs/ABI.md that execute it. The kernels read shapes at run
// time, so only the element type, head dims, mask and plan come from the IR.
//
//===----------------------------------------------------------------------===//

#include "BlockMask.h"
#include "HopperFp8.h"
#include "SplitKv.h"
#include "TiledLoopNest.h"

#include "fa/Conversion/AttnToGPU.h"
#include "fa/Conversion/Passes.h"
#include "fa/Dialect/Attn/Transforms/Transforms.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace mlir::fa {
#define GEN_PASS_DEF_CONVERTATTNTOGPUPASS
#include "fa/Conversion/Passes.h.inc"
} // namespace mlir::fa

using namespace mlir;
using namespace mlir::fa;

static bool isAttnOp(Operation *op) {
  return op->getDialect() &&
         op->getDialect()->getNamespace() ==
             attn::AttnDialect::getDialectNamespace();
}

/// The tile op whose loop nest `func` lowers to kernels (null if none), after
/// checking that the function holds the tiled form with one kernel plan.
static FailureOr<Operation *> findPlannedTile(func::FuncOp func) {
  Operation *tile = nullptr;
  WalkResult walk = func.walk([&](Operation *op) {
    if (isa<attn::AttentionOp, attn::AttentionBackwardOp>(op)) {
      op->emitOpError("expected the tiled form on the GPU path: run "
                      "attn-gpu-plan, attn-online-softmax or "
                      "attn-recompute-backward, and attn-tile first (the "
                      "fa-attn-to-gpu pipeline)");
      return WalkResult::interrupt();
    }
    if (isa<attn::QuantizeOp, attn::HadamardOp>(op)) {
      // The kernel takes the fp8 tensors; erasing the function with the
      // tiles would drop their preparation without a word.
      op->emitOpError("has no GPU kernel: quantise (and rotate) Q, K and V "
                      "before the fp8 kernel, e.g. with "
                      "fa.quantize_fp8(q, k, v, rotate=...), and pass the fp8 "
                      "tensors and their descales to it");
      return WalkResult::interrupt();
    }
    if (isa<attn::MergeOp>(op)) {
      // The merge kernel comes with the split forward of a split-KV plan;
      // lowering the tiles of another plan alone would drop the merge.
      auto plan = op->getAttrOfType<DictionaryAttr>(attn::kKernelPlanAttr);
      if (!plan || !plan.contains("split_kv")) {
        op->emitOpError("expected a split-KV kernel plan (attn-gpu-plan "
                        "split-kv=1) on the merge of attn-split-kv, got ")
            << (plan ? Attribute(plan) : Attribute());
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    }
    if (!isa<attn::OnlineAttentionOp, attn::BackwardTileOp>(op))
      return WalkResult::advance();
    Attribute plan = op->getAttr(attn::kKernelPlanAttr);
    if (!plan) {
      op->emitOpError("expected an '")
          << attn::kKernelPlanAttr << "' attribute (from attn-gpu-plan)";
      return WalkResult::interrupt();
    }
    auto loop = op->getParentOfType<scf::ForallOp>();
    if (!loop || loop->getAttr(attn::kKernelPlanAttr) != plan) {
      op->emitOpError("expected to lie in the query-block loop of its "
                      "kernel plan (from attn-tile or "
                      "attn-recompute-backward)");
      return WalkResult::interrupt();
    }
    if (tile && tile->getAttr(attn::kKernelPlanAttr) != plan) {
      func.emitOpError("expected one kernel plan per function, got ")
          << tile->getAttr(attn::kKernelPlanAttr) << " and " << plan;
      return WalkResult::interrupt();
    }
    tile = op;
    return WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return failure();
  return tile;
}

namespace {
struct ConvertAttnToGPUPass final
    : fa::impl::ConvertAttnToGPUPassBase<ConvertAttnToGPUPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    OpBuilder b(module.getContext());
    SmallVector<func::FuncOp> done;
    for (auto func : module.getOps<func::FuncOp>()) {
      FailureOr<Operation *> tile = findPlannedTile(func);
      if (failed(tile))
        return signalPassFailure();
      if (!*tile)
        continue;
      if (failed(convert(b, module, *tile)))
        return signalPassFailure();
      done.push_back(func);
    }
    for (func::FuncOp f : done)
      f.erase();
    WalkResult left = module.walk([](Operation *op) {
      if (!isAttnOp(op))
        return WalkResult::advance();
      op->emitOpError("was not lowered to GPU kernels");
      return WalkResult::interrupt();
    });
    if (left.wasInterrupted())
      return signalPassFailure();
    if (!done.empty())
      module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                      b.getUnitAttr());
  }

  /// Emits the kernels of the plan on `tile` (once per distinct kernel).
  LogicalResult convert(OpBuilder &b, ModuleOp module, Operation *tile) {
    if (auto backward = dyn_cast<attn::BackwardTileOp>(tile))
      if (failed(attn::verifyDifferentiable(backward.getScoreSpec(), tile)))
        return failure();
    auto planAttr = tile->getAttrOfType<DictionaryAttr>(attn::kKernelPlanAttr);
    std::string error;
    FailureOr<KernelPlan> plan =
        resolveKernelPlanFor(tile, kernelPlanOptions(planAttr), error);
    if (failed(plan))
      return tile->emitOpError(error);
    if (auto tag = planAttr.getAs<StringAttr>("tag");
        tag && tag.getValue() != plan->tag())
      return tile->emitOpError("expected the kernel plan to name kernel ")
             << plan->tag() << ", got " << tag;
    FailureOr<TiledLoopNest> loops = TiledLoopNest::get(tile);
    if (failed(loops))
      return failure();
    if (loops->isSplit() != plan->splitKv)
      return tile->emitOpError("expected ")
             << (plan->splitKv ? "the key-split loop of attn-split-kv around "
                                 "the tile of a split-KV plan"
                               : "a split-KV plan for the tile of a key "
                                 "split (attn-gpu-plan split-kv=1)");
    if (loops->isPacked() != plan->packGqa)
      return tile->emitOpError("expected ")
             << (plan->packGqa ? "attn-tile's packed-GQA loops (pack_gqa in "
                                 "its kernel plan) around the tile of a "
                                 "packed-GQA plan"
                               : "a packed-GQA plan (attn-gpu-plan "
                                 "pack-gqa=1) for the tile of packed-GQA "
                                 "loops");
    if (loops->isPaged() != plan->paged)
      return tile->emitOpError("expected ")
             << (plan->paged ? "paged K/V (attn.paged_view) for the tile of "
                               "a paged plan"
                             : "a paged plan for the tile of a paged cache");
    std::string name = "fa_" + plan->tag();
    if (module.lookupSymbol(name))
      return success(); // an identical kernel was already emitted
    b.setInsertionPointToEnd(module.getBody());
    Location loc = tile->getLoc();
    auto gpuModule = gpu::GPUModuleOp::create(b, loc, name);
    if (plan->backward)
      buildBackwardKernels(b, loc, gpuModule, *plan, *loops);
    else if (plan->strategy == MmaStrategy::Wgmma)
      buildForwardKernelWgmma(b, loc, gpuModule, *plan, *loops);
    else
      buildForwardKernel(b, loc, gpuModule, *plan, *loops);
    if (plan->splitKv)
      buildMergeKernel(b, loc, gpuModule, *plan);
    if (plan->kvAppend)
      buildKvAppendKernel(b, loc, gpuModule, *plan);
    if (plan->blockSparse)
      buildBlockMaskKernels(b, loc, gpuModule, *plan);
    if (!plan->quantize.empty())
      gpu_lowering::buildQuantizeKernels(b, loc, gpuModule, *plan);
    return success();
  }
};
} // namespace
