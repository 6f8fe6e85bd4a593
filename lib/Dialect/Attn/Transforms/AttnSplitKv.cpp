//===- AttnSplitKv.cpp - split the key range over workers -------*- C++ -*-===//
//
// The online form of a whole problem becomes S independent key splits, each
// finalised into a partial (O, LSE), joined by attn.merge: the parallelism
// a decode step (few query rows, many keys) lacks.
//
//===----------------------------------------------------------------------===//

#include "fa/Dialect/Attn/Transforms/Passes.h"
#include "fa/Dialect/Attn/Transforms/Transforms.h"
#include "Utils.h"

#include "mlir/IR/Matchers.h"

#include <limits>

namespace mlir::fa::attn {
#define GEN_PASS_DEF_ATTNSPLITKVPASS
#include "fa/Dialect/Attn/Transforms/Passes.h.inc"
} // namespace mlir::fa::attn

using namespace mlir;
using namespace mlir::fa::attn;
using namespace mlir::fa::attn::detail;

namespace {
/// The two generics of attn-online-softmax's finalisation of one online op.
struct Finalization {
  linalg::GenericOp rows; // (m, l[, sinks]) → (1/l, LSE)
  linalg::GenericOp out;  // (acc, 1/l) → O
  Value sinks;            // the attention's sinks (f32 [H]), or null
};
} // namespace

/// The sole user of `v` if it is a linalg.generic, else null.
static linalg::GenericOp soleGenericUser(Value v) {
  if (!v.hasOneUse())
    return {};
  return dyn_cast<linalg::GenericOp>(*v.getUsers().begin());
}

static FailureOr<Finalization> findFinalization(OnlineAttentionOp op) {
  linalg::GenericOp rows = soleGenericUser(op.getNewMax());
  linalg::GenericOp out = soleGenericUser(op.getNewAcc());
  // The finalisation of attention with sinks reads them as a third input:
  // they move to the merge, the partials are computed without them.
  Value sinks;
  if (rows && rows.getNumDpsInputs() == 3)
    sinks = rows.getDpsInputOperand(2)->get();
  SmallVector<Value> rowInputs{op.getNewMax(), op.getNewSum()};
  if (sinks)
    rowInputs.push_back(sinks);
  bool ok = rows && out && rows.getNumResults() == 2 &&
            soleGenericUser(op.getNewSum()) == rows &&
            rows.getDpsInputs() == rowInputs &&
            rows.getResult(0).hasOneUse() && out.getNumResults() == 1 &&
            out.getDpsInputs() ==
                SmallVector<Value>{op.getNewAcc(), rows.getResult(0)};
  if (!ok)
    return op.emitOpError("expected its results to be consumed only by the "
                          "finalisation of attn-online-softmax (run "
                          "attn-split-kv right after it)");
  return Finalization{rows, out, sinks};
}

/// Whether `v` is a linalg.fill of the constant `expected`.
static bool isFilledWith(Value v, double expected) {
  auto fill = v.getDefiningOp<linalg::FillOp>();
  FloatAttr value;
  return fill && matchPattern(fill.getInputs()[0], m_Constant(&value)) &&
         value.getValueAsDouble() == expected;
}

LogicalResult mlir::fa::attn::splitKeyRange(RewriterBase &rw,
                                            OnlineAttentionOp op,
                                            int64_t splits, int64_t blockKV) {
  if (splits <= 0 || blockKV <= 0)
    return op.emitOpError("expected positive splits and block-kv, got ")
           << splits << " and " << blockKV;
  if (op.isVarlen())
    return op.emitOpError("expected a dense problem: attn-split-kv does not "
                          "split varlen (cu_seqlens) batches");
  // Splits start from the empty state; a running state would be counted
  // once per split.
  const double inf = std::numeric_limits<double>::infinity();
  if (!isFilledWith(op.getAcc(), 0.0) || !isFilledWith(op.getMax(), -inf) ||
      !isFilledWith(op.getSum(), 0.0))
    return op.emitOpError("expected the initial state (acc, max, sum) = "
                          "(0, -inf, 0) of attn-online-softmax");
  FailureOr<Finalization> fin = findFinalization(op);
  if (failed(fin))
    return failure();

  Location loc = op.getLoc();
  rw.setInsertionPoint(op);
  Value q = op.getQuery(), k = op.getKey(), v = op.getValue();
  auto accType = cast<RankedTensorType>(op.getAcc().getType());
  auto rowType = cast<RankedTensorType>(op.getMax().getType());
  SmallVector<OpFoldResult> accSizes = tensor::getMixedSizes(rw, loc, op.getAcc());
  SmallVector<OpFoldResult> rowSizes = tensor::getMixedSizes(rw, loc, op.getMax());
  auto prepend = [&](int64_t s, ArrayRef<OpFoldResult> sizes) {
    SmallVector<OpFoldResult> r{rw.getIndexAttr(s)};
    llvm::append_range(r, sizes);
    return r;
  };
  Value accParts = filledF32(rw, loc, prepend(splits, accSizes), 0.0);
  Value maxParts = filledF32(rw, loc, prepend(splits, rowSizes), -inf);
  Value sumParts = filledF32(rw, loc, prepend(splits, rowSizes), 0.0);

  Value nk = dimValue(rw, loc, k, 2);
  Value bkv = cIndex(rw, loc, blockKV);
  // The split count is read off the partials, not built as a constant: the
  // GPU lowering maps this value to the kernels' run-time split count (the
  // forall's static count only sizes the CPU's partials); canonicalisation
  // folds it on the CPU.
  Value splitCount = tensor::DimOp::create(rw, loc, accParts, 0);
  Value keyBlocks = arith::CeilDivUIOp::create(rw, loc, nk, bkv);
  auto forall = scf::ForallOp::create(
      rw, loc, ArrayRef<OpFoldResult>{rw.getIndexAttr(splits)},
      ValueRange{accParts, maxParts, sumParts}, std::nullopt);
  forall->setAttr(kKeySplitsAttr, rw.getI64IntegerAttr(splits));
  copyKernelPlan(op, forall);
  rw.setInsertionPointToStart(forall.getBody());
  Value s = forall.getInductionVars()[0];
  ValueRange parts = forall.getRegionIterArgs();

  // Split s owns key blocks [s·nblk/S, (s+1)·nblk/S), clamped to Nk.
  auto keyStart = [&](Value split) -> Value {
    Value blocks = arith::MulIOp::create(rw, loc, split, keyBlocks);
    blocks = arith::DivUIOp::create(rw, loc, blocks, splitCount);
    Value key = arith::MulIOp::create(rw, loc, blocks, bkv);
    return arith::MinUIOp::create(rw, loc, key, nk);
  };
  Value k0 = keyStart(s);
  Value k1 = keyStart(arith::AddIOp::create(rw, loc, s, cIndex(rw, loc, 1)));
  Value keys = arith::SubIOp::create(rw, loc, k1, k0);

  OpFoldResult zero = rw.getIndexAttr(0), one = rw.getIndexAttr(1);
  auto keySlice = [&](Value src) -> Value {
    SmallVector<OpFoldResult> sizes = tensor::getMixedSizes(rw, loc, src);
    sizes[2] = keys;
    SmallVector<OpFoldResult> offs{zero, zero, k0, zero};
    return tensor::ExtractSliceOp::create(rw, loc, src, offs, sizes,
                                          SmallVector<OpFoldResult>(4, one));
  };
  // One split's slab [s, ...] of a partial tensor, rank-reduced.
  auto slabOffsets = [&](int64_t rank) {
    SmallVector<OpFoldResult> offs{s};
    offs.append(rank, zero);
    return offs;
  };
  auto slab = [&](Value src, RankedTensorType type,
                  ArrayRef<OpFoldResult> sizes) -> Value {
    return tensor::ExtractSliceOp::create(
        rw, loc, type, src, slabOffsets(type.getRank()), prepend(1, sizes),
        SmallVector<OpFoldResult>(type.getRank() + 1, one));
  };
  Value kSplit = keySlice(k), vSplit = keySlice(v);
  ValueRange offsets = op.getOffsets();
  SmallVector<Value> splitOffsets(offsets.begin(), offsets.end());
  splitOffsets[3] = arith::AddIOp::create(rw, loc, offsets[3], k0);
  auto split = OnlineAttentionOp::create(
      rw, loc, op->getResultTypes(), q, kSplit, vSplit,
      slab(parts[0], accType, accSizes), slab(parts[1], rowType, rowSizes),
      slab(parts[2], rowType, rowSizes), splitOffsets, op.getLengths(),
      /*cu_seqlens_q=*/Value(), /*cu_seqlens_k=*/Value(), op.getModArgs(),
      op.getDescaleQ(), op.getDescaleK(), op.getDescaleV(), op.getSequsedK(),
      op.getApplyMaskAttr(), op.getScaleAttr(), op.getMaskAttr(),
      op.getWindowLeftAttr(), op.getWindowRightAttr(), op.getWindowSizes());
  cloneScoreMod(op.getScoreMod(), split.getScoreMod());
  cloneScoreMod(op.getMaskMod(), split.getMaskMod());
  copyKernelPlan(op, split);

  rw.setInsertionPointToStart(forall.getTerminator().getBody());
  auto insert = [&](Value src, Value dest, ArrayRef<OpFoldResult> sizes) {
    int64_t rank = sizes.size();
    tensor::ParallelInsertSliceOp::create(
        rw, loc, src, dest, slabOffsets(rank), prepend(1, sizes),
        SmallVector<OpFoldResult>(rank + 1, one));
  };
  insert(split.getNewAcc(), parts[0], accSizes);
  insert(split.getNewMax(), parts[1], rowSizes);
  insert(split.getNewSum(), parts[2], rowSizes);

  // Finalise every split into (O_s, LSE_s), then merge.
  rw.setInsertionPointAfter(forall);
  auto [partO, partLse] = finalizeOnlineAttention(
      rw, loc, forall.getResult(0), forall.getResult(1), forall.getResult(2),
      rw.getF32Type(), prepend(splits, accSizes));
  Value out = fin->out.getResult(0), lse = fin->rows.getResult(1);
  auto merge = MergeOp::create(rw, loc, TypeRange{out.getType(), lse.getType()},
                               partO, partLse, fin->sinks);
  copyKernelPlan(op, merge);
  rw.replaceAllUsesWith(out, merge.getOutput());
  rw.replaceAllUsesWith(lse, merge.getLse());
  rw.eraseOp(fin->out);
  rw.eraseOp(fin->rows);
  SmallVector<Value> initialState{op.getAcc(), op.getMax(), op.getSum()};
  rw.eraseOp(op);
  for (Value init : initialState)
    if (init.use_empty())
      rw.eraseOp(init.getDefiningOp());
  return success();
}

namespace {
struct AttnSplitKvPass final
    : mlir::fa::attn::impl::AttnSplitKvPassBase<AttnSplitKvPass> {
  using Base::Base;
  void runOnOperation() override {
    SmallVector<OnlineAttentionOp> ops;
    getOperation().walk([&](OnlineAttentionOp op) {
      if (!op->getParentOfType<scf::ForallOp>())
        ops.push_back(op);
    });
    IRRewriter rw(&getContext());
    for (OnlineAttentionOp op : ops) {
      int64_t bkv = plannedBlockSizes(op)
                        .value_or(std::pair<int64_t, int64_t>(0, blockKV))
                        .second;
      if (failed(splitKeyRange(rw, op, splits, bkv)))
        return signalPassFailure();
    }
  }
};
} // namespace
