//===- AttnOnlineSoftmax.cpp - attention → online softmax -------*- C++ -*-===//
//
// Seed 4.2.2: the row softmax becomes a running (m, l, acc) triple so the key
// reduction can be split; the row is finalised once all keys are seen.
//
//===----------------------------------------------------------------------===//

#include "fa/Dialect/Attn/Transforms/Passes.h"
#include "fa/Dialect/Attn/Transforms/OnlineSoftmaxMath.h"
#include "fa/Dialect/Attn/Transforms/Transforms.h"
#include "Utils.h"
#include "Varlen.h"

#include "mlir/Dialect/Math/IR/Math.h"

#include <cmath>
#include <limits>

namespace mlir::fa::attn {
#define GEN_PASS_DEF_ATTNONLINESOFTMAXPASS
#include "fa/Dialect/Attn/Transforms/Passes.h.inc"
} // namespace mlir::fa::attn

using namespace mlir;
using namespace mlir::fa::attn;
using namespace mlir::fa::attn::detail;

/// attn.paged_view of `pages` through `pageTable`.
static Value pagedView(OpBuilder &b, Location loc, Value pages,
                       Value pageTable) {
  auto pagesType = cast<RankedTensorType>(pages.getType());
  auto tableType = cast<RankedTensorType>(pageTable.getType());
  int64_t pageSize = pagesType.getDimSize(1), maxPages = tableType.getDimSize(1);
  int64_t keys = ShapedType::isDynamic(pageSize) || ShapedType::isDynamic(maxPages)
                     ? ShapedType::kDynamic
                     : pageSize * maxPages;
  auto type = RankedTensorType::get({tableType.getDimSize(0),
                                     pagesType.getDimSize(2), keys,
                                     pagesType.getDimSize(3)},
                                    pagesType.getElementType());
  return PagedViewOp::create(b, loc, type, pages, pageTable);
}

LogicalResult mlir::fa::attn::rewriteToOnlineSoftmax(RewriterBase &rw,
                                                     AttentionOp op) {
  Location loc = op.getLoc();
  rw.setInsertionPoint(op);
  Value q = op.getQuery(), k = op.getKey(), v = op.getValue();
  // A varlen batch runs as one head-major problem whose sequences attn-tile
  // cuts apart; the finalisation below is the dense one.
  bool varlen = op.isVarlen();
  if (varlen) {
    q = packedToHeadMajor(rw, loc, q);
    k = packedToHeadMajor(rw, loc, k);
    v = packedToHeadMajor(rw, loc, v);
  }
  // A paged cache reads as dense K, V in sequence order; each sequence's
  // own key count (seqused_k) bounds its key loop in attn-tile.
  if (op.isPaged()) {
    k = pagedView(rw, loc, k, op.getPageTable());
    v = pagedView(rw, loc, v, op.getPageTable());
  }
  SmallVector<OpFoldResult> qSizes = tensor::getMixedSizes(rw, loc, q);
  SmallVector<OpFoldResult> accSizes{qSizes[0], qSizes[1], qSizes[2],
                                     tensor::getMixedSize(rw, loc, v, 3)};
  SmallVector<OpFoldResult> rowSizes{qSizes[0], qSizes[1], qSizes[2]};
  const double inf = std::numeric_limits<double>::infinity();
  Value acc0 = filledF32(rw, loc, accSizes, 0.0);
  Value max0 = filledF32(rw, loc, rowSizes, -inf);
  Value sum0 = filledF32(rw, loc, rowSizes, 0.0);
  Value zero = cIndex(rw, loc, 0);
  Value nq = dimValue(rw, loc, q, 2), nk = dimValue(rw, loc, k, 2);

  auto online = OnlineAttentionOp::create(
      rw, loc, TypeRange{acc0.getType(), max0.getType(), sum0.getType()}, q, k,
      v, acc0, max0, sum0, ValueRange{zero, zero, zero, zero}, ValueRange{nq, nk},
      op.getCuSeqlensQ(), op.getCuSeqlensK(), op.getModArgs(),
      op.getDescaleQ(), op.getDescaleK(), op.getDescaleV(), op.getSequsedK(),
      op.getScoreSpec().hasMask() ? rw.getUnitAttr() : nullptr,
      op.getScaleAttr(), op.getMaskAttr(), op.getWindowLeftAttr(),
      op.getWindowRightAttr(), op.getWindowSizes());
  copyKernelPlan(op, online);
  // The default scale depends on D, which the tile ops keep, so it need not
  // be materialised; score_mod moves over unchanged.
  if (!op.getScoreMod().empty())
    rw.inlineRegionBefore(op.getScoreMod(), online.getScoreMod(),
                          online.getScoreMod().end());
  if (!op.getMaskMod().empty())
    rw.inlineRegionBefore(op.getMaskMod(), online.getMaskMod(),
                          online.getMaskMod().end());

  auto oType = cast<RankedTensorType>(op.getOutput().getType());
  auto [out, lse] =
      finalizeOnlineAttention(rw, loc, online.getNewAcc(), online.getNewMax(),
                              online.getNewSum(), oType.getElementType(),
                              accSizes, op.getSinks());
  if (varlen) {
    out = headMajorToPacked(rw, loc, out);
    lse = dropUnitBatch(rw, loc, lse);
  }
  rw.replaceOp(op, ValueRange{out, lse});
  return success();
}

std::pair<Value, Value> mlir::fa::attn::finalizeOnlineAttention(
    OpBuilder &rw, Location loc, Value acc, Value max, Value sum,
    Type outputElementType, ArrayRef<OpFoldResult> accSizes, Value sinks) {
  MLIRContext *ctx = rw.getContext();
  auto rowType = cast<RankedTensorType>(max.getType());
  auto accType = cast<RankedTensorType>(acc.getType());
  unsigned rank = rowType.getRank();
  ArrayRef<OpFoldResult> rowSizes = accSizes.drop_back();
  // Per row (1/l, LSE) of OnlineSoftmaxMath::finalizeRow, then O = acc·(1/l).
  // A sink joins here rather than as the running state's initial value:
  // once per row instead of in the key loop, and a key split (whose
  // partials each start empty) cannot count it twice.
  AffineMap idRows = rw.getMultiDimIdentityMap(rank);
  Type f32 = rw.getF32Type();
  Value invInit = tensor::EmptyOp::create(rw, loc, rowSizes, f32);
  Value lseInit = tensor::EmptyOp::create(rw, loc, rowSizes, f32);
  SmallVector<Value> rowInputs{max, sum};
  SmallVector<AffineMap> rowMaps{idRows, idRows};
  if (sinks) {
    rowInputs.push_back(sinks);
    rowMaps.push_back(projection(ctx, rank, {rank - 2}));
  }
  rowMaps.append({idRows, idRows});
  auto rows = linalg::GenericOp::create(
      rw, loc, TypeRange{invInit.getType(), rowType}, rowInputs,
      ValueRange{invInit, lseInit}, rowMaps, iterators(rank),
      [&](OpBuilder &b, Location l, ValueRange args) {
        auto math = OnlineSoftmaxMath::withMathOps(b, l);
        auto [invSum, lse] =
            sinks ? math.finalizeRowWithSink(args[0], args[1], args[2])
                  : math.finalizeRow(args[0], args[1]);
        linalg::YieldOp::create(b, l, ValueRange{invSum, lse});
      });
  AffineMap idAcc = rw.getMultiDimIdentityMap(rank + 1);
  SmallVector<unsigned> rowDims = llvm::to_vector(llvm::seq<unsigned>(0, rank));
  AffineMap rowsOfAcc = projection(ctx, rank + 1, rowDims);
  auto oType = RankedTensorType::get(accType.getShape(), outputElementType);
  Value oInit = tensor::EmptyOp::create(rw, loc, accSizes, outputElementType);
  auto out = linalg::GenericOp::create(
      rw, loc, oType, ValueRange{acc, rows.getResult(0)}, ValueRange{oInit},
      ArrayRef<AffineMap>{idAcc, rowsOfAcc, idAcc}, iterators(rank + 1),
      [&](OpBuilder &b, Location l, ValueRange args) {
        Value o = arith::MulFOp::create(b, l, args[0], args[1]);
        if (outputElementType != o.getType())
          o = arith::TruncFOp::create(b, l, outputElementType, o);
        linalg::YieldOp::create(b, l, o);
      });
  return {out.getResult(0), rows.getResult(1)};
}

namespace {
struct AttnOnlineSoftmaxPass final
    : mlir::fa::attn::impl::AttnOnlineSoftmaxPassBase<AttnOnlineSoftmaxPass> {
  void runOnOperation() override {
    SmallVector<AttentionOp> ops;
    getOperation().walk([&](AttentionOp op) { ops.push_back(op); });
    IRRewriter rw(&getContext());
    for (AttentionOp op : ops)
      if (failed(rewriteToOnlineSoftmax(rw, op)))
        return signalPassFailure();
  }
};
} // namespace
