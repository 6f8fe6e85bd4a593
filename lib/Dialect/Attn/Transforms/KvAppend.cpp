//===- KvAppend.cpp - attn.rotary and attn.kv_append on the CPU -*- C++ -*-===//
//
// The CPU's reading of flash_attn_with_kvcache's append: attn.rotary as one
// linalg.generic over the rotated rows, attn.kv_append as a loop over the new
// rows inserting each [1, 1, Hkv, D] row into the cache at its (page, row).
// The pair arithmetic (rotaryPair) is shared with the GPU kernel, so both
// round the same f32 products.
//
//===----------------------------------------------------------------------===//

#include "fa/Dialect/Attn/Transforms/Transforms.h"
#include "Utils.h"

using namespace mlir;
using namespace mlir::fa::attn;
using namespace mlir::fa::attn::detail;

std::pair<Value, Value> mlir::fa::attn::rotaryPair(OpBuilder &b, Location loc,
                                                   Value x1, Value x2, Value c,
                                                   Value s) {
  // Separately rounded products: no contraction into an FMA, so the result
  // matches x1·c − x2·s evaluated in f32 by a reference (PyTorch, NumPy).
  auto mul = [&](Value x, Value y) { return arith::MulFOp::create(b, loc, x, y); };
  Value o1 = arith::SubFOp::create(b, loc, mul(x1, c), mul(x2, s));
  Value o2 = arith::AddFOp::create(b, loc, mul(x1, s), mul(x2, c));
  return {o1, o2};
}

RotaryColumn mlir::fa::attn::rotaryColumn(OpBuilder &b, Location loc, Value col,
                                          Value rotaryDim, Value interleaved) {
  auto cmp = [&](arith::CmpIPredicate p, Value x, Value y) {
    return arith::CmpIOp::create(b, loc, p, x, y).getResult();
  };
  auto sel = [&](Value c, Value x, Value y) {
    return arith::SelectOp::create(b, loc, c, x, y).getResult();
  };
  auto add = [&](Value x, Value y) { return arith::AddIOp::create(b, loc, x, y); };
  auto sub = [&](Value x, Value y) { return arith::SubIOp::create(b, loc, x, y); };
  Value one = cIndex(b, loc, 1), two = cIndex(b, loc, 2);
  Value half = arith::DivUIOp::create(b, loc, rotaryDim, two);
  // Interleaved (GPT-J): pair i = (2i, 2i + 1).
  Value even = cmp(arith::CmpIPredicate::eq,
                   arith::RemUIOp::create(b, loc, col, two), cIndex(b, loc, 0));
  Value pairInterleaved = arith::DivUIOp::create(b, loc, col, two);
  Value partnerInterleaved = sel(even, add(col, one), sub(col, one));
  // Halves (GPT-NeoX): pair i = (i, i + R/2).
  Value low = cmp(arith::CmpIPredicate::ult, col, half);
  Value pairHalves = sel(low, col, sub(col, half));
  Value partnerHalves = sel(low, add(col, half), pairHalves);
  RotaryColumn r;
  r.rotated = cmp(arith::CmpIPredicate::ult, col, rotaryDim);
  r.first = sel(interleaved, even, low);
  // Columns past R read pair 0 and themselves: valid, and then discarded.
  r.pair = sel(r.rotated, sel(interleaved, pairInterleaved, pairHalves),
               cIndex(b, loc, 0));
  r.partner = sel(r.rotated, sel(interleaved, partnerInterleaved, partnerHalves),
                  col);
  return r;
}

Value mlir::fa::attn::rotaryValue(OpBuilder &b, Location loc,
                                  const RotaryColumn &col, Value x,
                                  Value partner, Value c, Value s) {
  Value x1 = arith::SelectOp::create(b, loc, col.first, x, partner);
  Value x2 = arith::SelectOp::create(b, loc, col.first, partner, x);
  auto [o1, o2] = rotaryPair(b, loc, x1, x2, c, s);
  return arith::SelectOp::create(b, loc, col.first, o1, o2);
}

/// `v` clamped into [0, n - 1] (index values).
static Value clampIndex(OpBuilder &b, Location loc, Value v, Value n) {
  Value last = arith::SubIOp::create(b, loc, n, cIndex(b, loc, 1));
  v = arith::MaxSIOp::create(b, loc, v, cIndex(b, loc, 0));
  return arith::MinSIOp::create(b, loc, v, last);
}

/// max(start[seq], 0) as an index.
static Value firstNewRow(OpBuilder &b, Location loc, Value start, Value seq) {
  Value raw = tensor::ExtractOp::create(b, loc, start, ValueRange{seq});
  Value row = arith::IndexCastOp::create(b, loc, b.getIndexType(), raw);
  return arith::MaxSIOp::create(b, loc, row, cIndex(b, loc, 0));
}

LogicalResult mlir::fa::attn::decomposeRotary(RewriterBase &rw, RotaryOp op) {
  Location loc = op.getLoc();
  rw.setInsertionPoint(op);
  Value x = op.getInput(), cos = op.getCos(), sin = op.getSin();
  auto type = cast<RankedTensorType>(op.getResult().getType());
  SmallVector<OpFoldResult> sizes = tensor::getMixedSizes(rw, loc, x);
  Value init = tensor::EmptyOp::create(rw, loc, sizes, type.getElementType());
  Value maxPos = dimValue(rw, loc, cos, 0);
  int64_t rotaryDim = op.getRotaryDim();
  bool interleaved = op.getInterleaved(), samePosition = op.getSamePosition();
  auto generic = linalg::GenericOp::create(
      rw, loc, TypeRange{type}, ValueRange{}, ValueRange{init},
      ArrayRef<AffineMap>{rw.getMultiDimIdentityMap(4)}, iterators(4),
      [&](OpBuilder &b, Location l, ValueRange) {
        Value seq = linalg::IndexOp::create(b, l, 0);
        Value tok = linalg::IndexOp::create(b, l, 1);
        Value head = linalg::IndexOp::create(b, l, 2);
        Value colIdx = linalg::IndexOp::create(b, l, 3);
        RotaryColumn col = rotaryColumn(
            b, l, colIdx, cIndex(b, l, rotaryDim),
            arith::ConstantIntOp::create(b, l, interleaved, 1));
        Value pos = firstNewRow(b, l, op.getStart(), seq);
        if (!samePosition)
          pos = arith::AddIOp::create(b, l, pos, tok);
        pos = clampIndex(b, l, pos, maxPos);
        Value raw = tensor::ExtractOp::create(b, l, x,
                                              ValueRange{seq, tok, head, colIdx});
        Value partner = tensor::ExtractOp::create(
            b, l, x, ValueRange{seq, tok, head, col.partner});
        Value c = tensor::ExtractOp::create(b, l, cos, ValueRange{pos, col.pair});
        Value s = tensor::ExtractOp::create(b, l, sin, ValueRange{pos, col.pair});
        Value o = rotaryValue(b, l, col, toF32(b, l, raw), toF32(b, l, partner),
                              toF32(b, l, c), toF32(b, l, s));
        if (!type.getElementType().isF32())
          o = arith::TruncFOp::create(b, l, type.getElementType(), o);
        linalg::YieldOp::create(b, l,
                                arith::SelectOp::create(b, l, col.rotated, o, raw)
                                    .getResult());
      });
  rw.replaceOp(op, generic.getResult(0));
  return success();
}

/// `cache` with row `tok` of sequence `seq` of `rows` [B, Nnew, H, D]
/// written at [page, slot].
static Value insertRow(OpBuilder &b, Location loc, Value rows, Value cache,
                       Value seq, Value tok, Value page, Value slot) {
  Value heads = dimValue(b, loc, rows, 2), dim = dimValue(b, loc, rows, 3);
  SmallVector<OpFoldResult> one(2, b.getIndexAttr(1));
  SmallVector<OpFoldResult> sizes{one[0], one[1], heads, dim};
  SmallVector<OpFoldResult> strides(4, b.getIndexAttr(1));
  Value zero = cIndex(b, loc, 0);
  Value row = tensor::ExtractSliceOp::create(
      b, loc, rows, getAsOpFoldResult(ValueRange{seq, tok, zero, zero}), sizes,
      strides);
  return tensor::InsertSliceOp::create(
      b, loc, row, cache, getAsOpFoldResult(ValueRange{page, slot, zero, zero}),
      sizes, strides);
}

LogicalResult mlir::fa::attn::decomposeKvAppend(RewriterBase &rw,
                                                KvAppendOp op) {
  Location loc = op.getLoc();
  rw.setInsertionPoint(op);
  Value k = op.getKey(), v = op.getValue(), table = op.getPageTable();
  Value batch = dimValue(rw, loc, k, 0), newRows = dimValue(rw, loc, k, 1);
  // Rows per page and pages per sequence; a contiguous cache is one page of
  // Ncap rows per sequence.
  Value pageSize = dimValue(rw, loc, op.getKeyCache(), 1);
  Value numPages = dimValue(rw, loc, op.getKeyCache(), 0);
  Value capacity = table ? arith::MulIOp::create(rw, loc, pageSize,
                                                 dimValue(rw, loc, table, 1))
                               .getResult()
                         : pageSize;
  Value zero = cIndex(rw, loc, 0), one = cIndex(rw, loc, 1);
  auto outer = scf::ForOp::create(
      rw, loc, zero, batch, one,
      ValueRange{op.getKeyCache(), op.getValueCache()},
      [&](OpBuilder &b, Location l, Value seq, ValueRange caches) {
        Value start = firstNewRow(b, l, op.getCacheSeqlens(), seq);
        auto inner = scf::ForOp::create(
            b, l, zero, newRows, one, caches,
            [&](OpBuilder &b, Location l, Value tok, ValueRange cs) {
              Value pos = arith::AddIOp::create(b, l, start, tok);
              Value fits = arith::CmpIOp::create(b, l, arith::CmpIPredicate::ult,
                                                 pos, capacity);
              auto write = scf::IfOp::create(
                  b, l, fits,
                  [&](OpBuilder &b, Location l) {
                    Value page = seq, slot = pos;
                    if (table) {
                      Value idx = arith::DivUIOp::create(b, l, pos, pageSize);
                      Value raw = tensor::ExtractOp::create(
                          b, l, table, ValueRange{seq, idx});
                      page = clampIndex(
                          b, l,
                          arith::IndexCastOp::create(b, l, b.getIndexType(), raw),
                          numPages);
                      slot = arith::RemUIOp::create(b, l, pos, pageSize);
                    }
                    Value kc = insertRow(b, l, k, cs[0], seq, tok, page, slot);
                    Value vc = insertRow(b, l, v, cs[1], seq, tok, page, slot);
                    scf::YieldOp::create(b, l, ValueRange{kc, vc});
                  },
                  [&](OpBuilder &b, Location l) {
                    scf::YieldOp::create(b, l, cs);
                  });
              scf::YieldOp::create(b, l, write.getResults());
            });
        scf::YieldOp::create(b, l, inner.getResults());
      });
  rw.replaceOp(op, outer.getResults());
  return success();
}
