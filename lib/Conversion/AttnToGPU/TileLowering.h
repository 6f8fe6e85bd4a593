//===- TileLowering.h - what the attn_gpu lowerings share -------*- C++ -*-===//
//
// convert-attn-gpu-to-nvvm lowers each tile op in place to the fragment
// builders' code (Fragments.h): these are the pieces its patterns share,
// the forward's (ConvertAttnGPUToNVVM.cpp) and the backward's
// (BackwardTileLowering.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef FA_CONVERSION_ATTNTOGPU_TILELOWERING_H
#define FA_CONVERSION_ATTNTOGPU_TILELOWERING_H

#include "Fragments.h"

#include "fa/Dialect/AttnGPU/IR/AttnGPU.h"
#include "mlir/Transforms/DialectConversion.h"

namespace mlir::fa::gpu_lowering {

/// What the tile ops of one kernel share in the lowering: its plan, its lane
/// ids and its shared buffer.
struct KernelLowering {
  KernelPlan plan;
  /// The lane ids the kernel derives from its thread id, each with the op
  /// that made that id: one set at a tile-level kernel's entry; a builder's
  /// kernel's own sets (the wgmma backward's consumers make theirs inside
  /// the key loop, KernelBuilder::setupOpaqueThreadIds).
  SmallVector<std::pair<Operation *, KernelBuilder::ThreadIds>> ids;
  Value smem;

  /// The set in scope at `op`: the last one made before it in its block, or
  /// else in the nearest enclosing block that has one (null: none).
  const KernelBuilder::ThreadIds *idsAt(Operation *op) const {
    for (Operation *at = op; at; at = at->getParentOp()) {
      const std::pair<Operation *, KernelBuilder::ThreadIds> *last = nullptr;
      for (const auto &set : ids)
        if (set.first->getBlock() == at->getBlock() &&
            set.first->isBeforeInBlock(at) &&
            (!last || last->first->isBeforeInBlock(set.first)))
          last = &set;
      if (last)
        return &last->second;
    }
    return nullptr;
  }
};
using KernelLowerings = DenseMap<Operation *, std::unique_ptr<KernelLowering>>;

/// A tile op's lowering: the fragment builders on the rewriter, with the
/// kernel's lane ids and shared buffer.
template <typename OpTy>
struct TileOpLowering : OpConversionPattern<OpTy> {
  TileOpLowering(const TypeConverter &converter, MLIRContext *ctx,
                 KernelLowerings &kernels)
      : OpConversionPattern<OpTy>(converter, ctx), kernels(kernels) {}

  KernelLowering &kernelOf(Operation *op) const {
    return *kernels.at(op->template getParentOfType<gpu::GPUFuncOp>());
  }
  /// A builder of `op`'s kernel emitting through `b` at its insertion point.
  KernelBuilder builderFor(Operation *op, OpBuilder &b) const {
    KernelLowering &k = kernelOf(op);
    KernelBuilder kb(b, op->getLoc(), k.plan);
    // convert-attn-gpu-to-nvvm checked that every tile op has a set.
    kb.setThreadIds(*k.idsAt(op));
    kb.smem = k.smem;
    return kb;
  }
  /// builderFor a copy run by the threads of its `threads b to e`, if given:
  /// they share it, numbered from b.
  template <typename CopyOp>
  KernelBuilder copyBuilder(CopyOp op, OpBuilder &b) const {
    KernelBuilder kb = builderFor(op, b);
    if (std::optional<uint64_t> begin = op.getThreadBegin()) {
      kb.copyThreads = *op.getThreadEnd() - *begin;
      // One warp's lanes (begin is a multiple of 32), else tid − begin.
      if (kb.copyThreads == 32)
        kb.tid = kb.lane;
      else if (*begin)
        kb.tid = kb.sub(kb.tid, kb.idx(*begin));
    }
    return kb;
  }

  KernelLowerings &kernels;
};

/// A shared tile's lowered value (its element offset) with its shape.
inline SharedTile sharedTile(Value tile, ValueRange base) {
  auto t = cast<attn_gpu::SharedTileType>(tile.getType());
  return SharedTile{base.front(), t.getRows(), t.getCols(), t.getStride(),
                    t.getSwizzle()};
}

/// The tile op of `func` of type OpTy, failing unless there is exactly one
/// (`optional`: at most one).
template <typename OpTy>
FailureOr<OpTy> uniqueTileOp(gpu::GPUFuncOp func, bool optional = false) {
  SmallVector<OpTy> ops;
  func.walk([&](OpTy op) { ops.push_back(op); });
  if (ops.size() == 1 || (optional && ops.empty()))
    return ops.empty() ? OpTy() : ops.front();
  return func.emitOpError("expected ")
         << (optional ? "at most " : "exactly ") << "one '"
         << OpTy::getOperationName() << "' in a tile-level kernel, got "
         << ops.size();
}

/// The score spec of a tile op's mask: its kind and window sizes, or the
/// run-time sizes the kernel bound at its entry (ScoreSpec::windowLeftValue),
/// which every band the lowering builds then reads.
template <typename MaskOpTy> attn::ScoreSpec maskSpecOf(MaskOpTy op) {
  attn::ScoreSpec spec;
  spec.mask = op.getMask();
  spec.windowLeft = op.getWindowLeft().value_or(0);
  spec.windowRight = op.getWindowRight().value_or(0);
  if (op.getWindowSizes().size() == 2) {
    spec.windowLeftValue = op.getWindowSizes()[0];
    spec.windowRightValue = op.getWindowSizes()[1];
  }
  return spec;
}

/// Resolves a tile-level kernel's plan from its `attn.kernel_plan` and what
/// its tile ops carry (element type, head dims, `spec`), with the mods'
/// names, and checks that it names the kernel's tag.
FailureOr<KernelPlan> resolveTilePlan(gpu::GPUFuncOp func,
                                      DictionaryAttr planAttr, bool backward,
                                      Type elemType, int64_t headDim,
                                      int64_t headDimV,
                                      const attn::ScoreSpec &spec);

/// The backward's tile ops' patterns (BackwardTileLowering.cpp).
void populateBackwardTileLowering(RewritePatternSet &patterns,
                                  const TypeConverter &converter,
                                  KernelLowerings &kernels);

/// A role op (attn_gpu.warp_specialize, attn_gpu.producer_warp) as a branch
/// on `isProducer`: the ops of `producer` move into its then region, those
/// of `consumer` into its else region, each after what `begin` builds at the
/// region's start for the role's block (null: nothing).
void inlineRoles(OpBuilder &b, Location loc, Value isProducer, Block &producer,
                 Block &consumer,
                 function_ref<void(OpBuilder &, Block &role, bool producer)>
                     begin = nullptr);

/// attn_gpu.producer_warp as a branch on the warp index (before the
/// conversion; RingLowering.cpp).
void lowerProducerWarp(attn_gpu::ProducerWarpOp op);

/// The ring ops' patterns (RingLowering.cpp).
void populateRingLowering(RewritePatternSet &patterns,
                          const TypeConverter &converter,
                          KernelLowerings &kernels);

/// Tile ops whose lowering reads neither a kernel plan nor lane ids: the
/// wgmma GEMMs and turns (WgmmaLowering.cpp), fill, and the online softmax's
/// update and finalisation. A wgmma kernel's builder emits them among its
/// own code; a kernel holding no other tile op needs no `attn.kernel_plan`.
bool isPlanFreeTileOp(Operation *op);
/// The plan a plan-free tile op's lowering builds with (every field unset).
const KernelPlan &planFree();
/// The wgmma GEMM and turn ops' patterns (WgmmaLowering.cpp).
void populateWgmmaLowering(RewritePatternSet &patterns,
                           const TypeConverter &converter);

/// The kernel plan of a tile-level backward kernel, resolved again from its
/// `attn.kernel_plan` and its tile ops (BackwardTileLowering.cpp).
FailureOr<KernelPlan> backwardTileKernelPlan(gpu::GPUFuncOp func,
                                             DictionaryAttr planAttr);

/// The kernel plan of a wgmma backward (HopperBackward's builder), resolved
/// again from its `attn.kernel_plan`, its GEMMs and its Sᵀ tile ops
/// (BackwardTileLowering.cpp).
FailureOr<KernelPlan> wgmmaBackwardKernelPlan(gpu::GPUFuncOp func,
                                              DictionaryAttr planAttr);

} // namespace mlir::fa::gpu_lowering

#endif // FA_CONVERSION_ATTNTOGPU_TILELOWERING_H
