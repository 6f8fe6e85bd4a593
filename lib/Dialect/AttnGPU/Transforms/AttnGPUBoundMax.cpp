//===- AttnGPUBoundMax.cpp - attn-gpu-bound-max -----------------*- C++ -*-===//
//
// A bounded score_mod (softcapping) bounds every score, so each row's
// softmax max can be fixed at the bound: the online softmax then needs no
// row maximum and O no rescale (Passes.td has the IR).
//
//===----------------------------------------------------------------------===//

#include "fa/Dialect/AttnGPU/Transforms/Passes.h"

#include "fa/Dialect/Attn/Transforms/Transforms.h"
#include "fa/Dialect/AttnGPU/IR/AttnGPU.h"

#include "mlir/Dialect/SCF/IR/SCF.h"

namespace mlir::fa::attn_gpu {
#define GEN_PASS_DEF_ATTNGPUBOUNDMAXPASS
#include "fa/Dialect/AttnGPU/Transforms/Passes.h.inc"
} // namespace mlir::fa::attn_gpu

using namespace mlir;
using namespace mlir::fa;
using namespace mlir::fa::attn_gpu;

using ScoreRange = std::pair<double, double>;

/// The range of the scores `v` holds, if a bounded score_mod made them:
/// masks only lower scores (to −inf), an scf.if joins its branches.
static std::optional<ScoreRange> scoreRange(Value v) {
  if (auto mask = v.getDefiningOp<MaskOp>())
    return scoreRange(mask.getScores());
  if (auto mask = v.getDefiningOp<MaskModOp>())
    return scoreRange(mask.getScores());
  if (auto mod = v.getDefiningOp<ScoreModOp>()) {
    if (mod.getQueryAnchored())
      return std::nullopt;
    return attn::scoreModRange(mod.getScoreMod());
  }
  auto branches = v.getDefiningOp<scf::IfOp>();
  if (!branches || branches.getElseRegion().empty())
    return std::nullopt;
  unsigned i = cast<OpResult>(v).getResultNumber();
  std::optional<ScoreRange> a =
      scoreRange(branches.thenYield().getOperand(i));
  std::optional<ScoreRange> b =
      scoreRange(branches.elseYield().getOperand(i));
  if (!a || !b)
    return std::nullopt;
  return ScoreRange{std::min(a->first, b->first),
                    std::max(a->second, b->second)};
}

/// The widest range of exponents, in base 2, whose P the kernel's P type
/// keeps: P in [2^-width, 1] stays normal (and inside an f32 row sum).
static double widestExponentRange(gpu::GPUFuncOp kernel) {
  auto q = dyn_cast<MemRefType>(kernel.getArgumentTypes().front());
  Type element = q ? q.getElementType() : Type();
  if (element && (element.isBF16() || element.isF32()))
    return 100.0;
  if (element && element.isF16())
    return 12.0;
  return 0.0; // fp8 and anything unknown
}

static void boundKernel(gpu::GPUFuncOp kernel) {
  const double widest = widestExponentRange(kernel);
  kernel.walk([&](OnlineSoftmaxOp op) {
    FloatAttr scale;
    if (op.getMaxBoundAttr() || op.getScaleBlockAttr() ||
        op.getPolyExp2Attr() || op.getScaleLog2().size() != 1 ||
        !matchPattern(op.getScaleLog2().front(), m_Constant(&scale)))
      return;
    std::optional<ScoreRange> range = scoreRange(op.getScores());
    if (!range ||
        (range->second - range->first) * scale.getValueAsDouble() > widest)
      return;
    op.setMaxBoundAttr(Builder(op).getF64FloatAttr(range->second));
  });
}

namespace {
struct AttnGPUBoundMaxPass
    : attn_gpu::impl::AttnGPUBoundMaxPassBase<AttnGPUBoundMaxPass> {
  void runOnOperation() override {
    getOperation().walk([](gpu::GPUFuncOp kernel) { boundKernel(kernel); });
  }
};
} // namespace
