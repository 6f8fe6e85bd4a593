//===- Varlen.cpp - packed-sequence helpers of the attn rewrites -*- C++ -*-===//

#include "Varlen.h"
#include "Utils.h"

using namespace mlir;
using namespace mlir::fa::attn::detail;

static Value transposed(OpBuilder &b, Location loc, Value src,
                        ArrayRef<int64_t> perm) {
  auto type = cast<RankedTensorType>(src.getType());
  SmallVector<OpFoldResult> sizes = tensor::getMixedSizes(b, loc, src);
  SmallVector<OpFoldResult> permuted;
  for (int64_t p : perm)
    permuted.push_back(sizes[p]);
  Value init = tensor::EmptyOp::create(b, loc, permuted, type.getElementType());
  return linalg::TransposeOp::create(b, loc, src, init, perm).getResult()[0];
}

/// `src` with a unit dimension inserted in front.
static Value withUnitFront(OpBuilder &b, Location loc, Value src) {
  auto type = cast<RankedTensorType>(src.getType());
  SmallVector<int64_t> shape{1};
  llvm::append_range(shape, type.getShape());
  SmallVector<ReassociationIndices> groups{{0, 1}};
  for (int64_t i = 2; i <= type.getRank(); ++i)
    groups.push_back({i});
  SmallVector<OpFoldResult> outShape{b.getIndexAttr(1)};
  llvm::append_range(outShape, tensor::getMixedSizes(b, loc, src));
  return tensor::ExpandShapeOp::create(
      b, loc, RankedTensorType::get(shape, type.getElementType()), src, groups,
      outShape);
}

static Value withoutUnitFront(OpBuilder &b, Location loc, Value src) {
  auto type = cast<RankedTensorType>(src.getType());
  SmallVector<ReassociationIndices> groups{{0, 1}};
  for (int64_t i = 2; i < type.getRank(); ++i)
    groups.push_back({i});
  return tensor::CollapseShapeOp::create(
      b, loc,
      RankedTensorType::get(type.getShape().drop_front(), type.getElementType()),
      src, groups);
}

Value mlir::fa::attn::detail::packedToHeadMajor(OpBuilder &b, Location loc,
                                                Value packed) {
  return withUnitFront(b, loc, transposed(b, loc, packed, {1, 0, 2}));
}

Value mlir::fa::attn::detail::headMajorToPacked(OpBuilder &b, Location loc,
                                                Value headMajor) {
  return transposed(b, loc, withoutUnitFront(b, loc, headMajor), {1, 0, 2});
}

Value mlir::fa::attn::detail::addUnitBatch(OpBuilder &b, Location loc,
                                           Value rows) {
  return withUnitFront(b, loc, rows);
}

Value mlir::fa::attn::detail::dropUnitBatch(OpBuilder &b, Location loc,
                                            Value rows) {
  return withoutUnitFront(b, loc, rows);
}

static Value offsetAt(OpBuilder &b, Location loc, Value cuSeqlens, Value i) {
  Value raw = tensor::ExtractOp::create(b, loc, cuSeqlens, ValueRange{i});
  return arith::IndexCastOp::create(b, loc, b.getIndexType(), raw);
}

static Value clamp(OpBuilder &b, Location loc, Value v, Value lo, Value hi) {
  return arith::MinSIOp::create(b, loc,
                                arith::MaxSIOp::create(b, loc, v, lo), hi);
}

SequenceSpan mlir::fa::attn::detail::sequenceSpan(OpBuilder &b, Location loc,
                                                  Value cuSeqlens, Value seq,
                                                  Value total) {
  Value zero = cIndex(b, loc, 0);
  Value next = arith::AddIOp::create(b, loc, seq, cIndex(b, loc, 1));
  Value start = clamp(b, loc, offsetAt(b, loc, cuSeqlens, seq), zero, total);
  Value end = clamp(b, loc, offsetAt(b, loc, cuSeqlens, next), start, total);
  return {start, arith::SubIOp::create(b, loc, end, start)};
}

Value mlir::fa::attn::detail::sequenceCount(OpBuilder &b, Location loc,
                                            Value cuSeqlens) {
  return arith::SubIOp::create(b, loc, dimValue(b, loc, cuSeqlens, 0),
                               cIndex(b, loc, 1));
}

Value mlir::fa::attn::detail::longestSequence(OpBuilder &b, Location loc,
                                              Value cuSeqlens, Value total) {
  auto loop = scf::ForOp::create(
      b, loc, cIndex(b, loc, 0), sequenceCount(b, loc, cuSeqlens),
      cIndex(b, loc, 1), ValueRange{cIndex(b, loc, 0)},
      [&](OpBuilder &lb, Location l, Value seq, ValueRange longest) {
        SequenceSpan span = sequenceSpan(lb, l, cuSeqlens, seq, total);
        scf::YieldOp::create(
            lb, l,
            ValueRange{arith::MaxSIOp::create(lb, l, longest[0], span.length)});
      });
  return loop.getResult(0);
}

Value mlir::fa::attn::detail::rowsInBlock(OpBuilder &b, Location loc,
                                          Value length, Value start,
                                          Value block) {
  Value rest = arith::SubIOp::create(b, loc, length, start);
  Value rows = arith::MinSIOp::create(b, loc, block, rest);
  return arith::MaxSIOp::create(b, loc, rows, cIndex(b, loc, 0));
}
