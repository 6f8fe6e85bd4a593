//===- AttnGPUAnchorScoreMod.cpp - attn-gpu-anchor-score-mod ----*- C++ -*-===//
//
// A score_mod whose q_idx enters only as an added term g(b, h, q) (ALiBi's
// slope·(kv − q), a per-row bias) shifts each row's scores by a constant,
// which the softmax does not see. Evaluating both rows of a lane at the
// query of its first row makes every per-key term of the mod common to the
// two rows (computed once per key instead of once per score); the row's
// LSE takes the difference back at the end (Passes.td has the IR).
//
//===----------------------------------------------------------------------===//

#include "fa/Dialect/AttnGPU/Transforms/Passes.h"

#include "fa/Dialect/Attn/Transforms/Transforms.h"
#include "fa/Dialect/AttnGPU/IR/AttnGPU.h"

#include "mlir/IR/Dominance.h"

namespace mlir::fa::attn_gpu {
#define GEN_PASS_DEF_ATTNGPUANCHORSCOREMODPASS
#include "fa/Dialect/AttnGPU/Transforms/Passes.h.inc"
} // namespace mlir::fa::attn_gpu

using namespace mlir;
using namespace mlir::fa;
using namespace mlir::fa::attn_gpu;

/// The operands that place a score_mod's rows, which its shift shares.
static SmallVector<Value> rowOperands(ScoreModOp mod) {
  SmallVector<Value> values{mod.getScale(), mod.getBatch(),
                            mod.getHead(),  mod.getQueryBegin(),
                            mod.getNq(),    mod.getNk(),
                            mod.getRow()};
  if (mod.getRows())
    values.push_back(mod.getRows());
  return values;
}

/// Anchors the kernel's score_mods and shifts its finalize_softmax ops, when
/// every score_mod is query-additive with the same rows and those rows are
/// known where each finalisation runs; otherwise leaves the kernel as it is.
static void anchorKernel(gpu::GPUFuncOp func) {
  SmallVector<ScoreModOp> mods;
  SmallVector<FinalizeSoftmaxOp> finals;
  func.walk([&](ScoreModOp op) { mods.push_back(op); });
  func.walk([&](FinalizeSoftmaxOp op) { finals.push_back(op); });
  if (mods.empty() || finals.empty())
    return;
  ScoreModOp first = mods.front();
  SmallVector<Value> rows = rowOperands(first);
  for (ScoreModOp mod : mods)
    if (mod.getQueryAnchored() || rowOperands(mod) != rows ||
        !attn::scoreModQueryAdditive(mod.getScoreMod()))
      return;
  DominanceInfo dominance(func);
  for (FinalizeSoftmaxOp final : finals)
    if (final.getShift() || llvm::any_of(rows, [&](Value v) {
          return !dominance.properlyDominates(v, final);
        }))
      return;
  for (ScoreModOp mod : mods)
    mod.setQueryAnchored(true);
  for (FinalizeSoftmaxOp final : finals) {
    OpBuilder b(final);
    auto shift = ScoreModShiftOp::create(
        b, final.getLoc(), final.getMax().getType(), first.getScale(),
        first.getBatch(), first.getHead(), first.getQueryBegin(),
        first.getNq(), first.getNk(), first.getRow(), first.getRows());
    IRMapping map;
    first.getScoreMod().cloneInto(&shift.getScoreMod(), map);
    final.getShiftMutable().assign(shift.getShift());
  }
}

namespace {
struct AttnGPUAnchorScoreModPass
    : attn_gpu::impl::AttnGPUAnchorScoreModPassBase<AttnGPUAnchorScoreModPass> {
  void runOnOperation() override {
    getOperation().walk([](gpu::GPUFuncOp func) { anchorKernel(func); });
  }
};
} // namespace
