//===- Utils.h - small IR-building helpers of the attn rewrites -*- C++ -*-===//

#ifndef FA_LIB_DIALECT_ATTN_TRANSFORMS_UTILS_H
#define FA_LIB_DIALECT_ATTN_TRANSFORMS_UTILS_H

#include "fa/Dialect/Attn/IR/Attn.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Utils/StructuredOpsUtils.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"

namespace mlir::fa::attn::detail {

inline Value cIndex(OpBuilder &b, Location loc, int64_t v) {
  return arith::ConstantIndexOp::create(b, loc, v);
}

inline Value cF32(OpBuilder &b, Location loc, double v) {
  return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v));
}

/// An f32 tensor of `sizes` filled with `value`.
inline Value filledF32(OpBuilder &b, Location loc, ArrayRef<OpFoldResult> sizes,
                       double value) {
  Value empty = tensor::EmptyOp::create(b, loc, sizes, b.getF32Type());
  return linalg::FillOp::create(b, loc, cF32(b, loc, value), empty).getResult(0);
}

/// Size of dimension `dim` of `v` as an index value.
inline Value dimValue(OpBuilder &b, Location loc, Value v, int64_t dim) {
  return getValueOrCreateConstantIndexOp(
      b, loc, tensor::getMixedSize(b, loc, v, dim));
}

/// `n` parallel iterators followed by `r` reductions.
inline SmallVector<utils::IteratorType> iterators(unsigned n, unsigned r = 0) {
  SmallVector<utils::IteratorType> it(n, utils::IteratorType::parallel);
  it.append(r, utils::IteratorType::reduction);
  return it;
}

/// The affine map (d0..d{n-1}) -> (d{dims[0]}, d{dims[1]}, ...).
inline AffineMap projection(MLIRContext *ctx, unsigned n,
                            ArrayRef<unsigned> dims) {
  SmallVector<AffineExpr> exprs;
  for (unsigned d : dims)
    exprs.push_back(getAffineDimExpr(d, ctx));
  return AffineMap::get(n, 0, exprs, ctx);
}

/// Extends `v` to f32 unless it already is.
inline Value toF32(OpBuilder &b, Location loc, Value v) {
  if (v.getType().isF32())
    return v;
  return arith::ExtFOp::create(b, loc, b.getF32Type(), v);
}

/// Inside a linalg.generic over a [B, H, N, ...] fp8 tensor: its element's
/// descale factor, descale[b, h / group], or descale[b, h / group, n / 64]
/// for a block descale (rank 3).
inline Value descaleFactorAt(OpBuilder &b, Location loc, Value descale,
                             Value group) {
  Value batch = linalg::IndexOp::create(b, loc, 0);
  Value head =
      arith::DivUIOp::create(b, loc, linalg::IndexOp::create(b, loc, 1), group);
  SmallVector<Value, 3> at{batch, head};
  if (isBlockDescale(descale))
    at.push_back(arith::DivUIOp::create(b, loc,
                                        linalg::IndexOp::create(b, loc, 2),
                                        cIndex(b, loc, kDescaleBlockRows)));
  return tensor::ExtractOp::create(b, loc, descale, at);
}

/// The fp8 attn.attention ops (those with descales) under `root`, to rewrite.
inline SmallVector<AttentionOp> fp8Attentions(Operation *root) {
  SmallVector<AttentionOp> ops;
  root->walk([&](AttentionOp op) {
    if (op.getDescaleQ())
      ops.push_back(op);
  });
  return ops;
}

/// Size of a block starting at `start` along an extent `n` (static `nStatic`
/// if known): `block`, or what remains at a ragged tail.
inline OpFoldResult blockExtent(OpBuilder &b, Location loc, Value n,
                                int64_t nStatic, int64_t block, Value start) {
  if (!ShapedType::isDynamic(nStatic)) {
    if (nStatic % block == 0)
      return b.getIndexAttr(block);
    if (nStatic <= block)
      return b.getIndexAttr(nStatic);
  }
  Value rest = arith::SubIOp::create(b, loc, n, start);
  return arith::MinSIOp::create(b, loc, cIndex(b, loc, block), rest).getResult();
}

/// Copies a score_mod or mask_mod region (possibly empty) into the empty
/// region `to`.
inline void cloneScoreMod(Region &from, Region &to) {
  if (from.empty())
    return;
  IRMapping map;
  from.cloneInto(&to, map);
}

/// The boundary-block dispatch of the tiled loops: the tile built by
/// `makeTile(b, /*applyMask=*/false)` when `inside` holds, the masked one
/// otherwise. Without a mask (`inside` null) only the unmasked tile is built;
/// where no block can be inside (`inside` a constant false: a mask_mod) only
/// the masked one.
inline SmallVector<Value>
buildMaskDispatch(OpBuilder &b, Location loc, Value inside,
                  function_ref<Operation *(OpBuilder &, bool)> makeTile) {
  if (!inside)
    return makeTile(b, false)->getResults();
  if (matchPattern(inside, m_Zero())) {
    Operation *never = inside.getDefiningOp();
    SmallVector<Value> results = makeTile(b, true)->getResults();
    if (never->use_empty())
      never->erase();
    return results;
  }
  auto ifOp = scf::IfOp::create(
      b, loc, inside,
      [&](OpBuilder &ib, Location il) {
        scf::YieldOp::create(ib, il, makeTile(ib, false)->getResults());
      },
      [&](OpBuilder &ib, Location il) {
        scf::YieldOp::create(ib, il, makeTile(ib, true)->getResults());
      });
  return ifOp.getResults();
}

} // namespace mlir::fa::attn::detail

#endif // FA_LIB_DIALECT_ATTN_TRANSFORMS_UTILS_H
