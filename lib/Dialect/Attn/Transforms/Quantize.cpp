//===- Quantize.cpp - attn.hadamard and attn.quantize on the CPU -*- C++
//-*-===//
//
// The CPU's reading of the fp8 inputs' preparation: the Hadamard rotation of
// incoherent processing and the e4m3 quantisation with its descale factors,
// rounded as PyTorch's float8_e4m3fn conversion rounds (nearest, ties to
// even) by integer ops, so that no fp8 arithmetic reaches the LLVM lowering.
//
//===----------------------------------------------------------------------===//

#include "Utils.h"
#include "fa/Dialect/Attn/Transforms/Transforms.h"

#include "mlir/Dialect/Math/IR/Math.h"

#include <cmath>

using namespace mlir;
using namespace mlir::fa::attn;
using namespace mlir::fa::attn::detail;

/// The largest finite e4m3 value.
static constexpr double kMaxE4M3 = 448.0;

/// Sylvester's g×g matrix of ±1: H[i, j] = (−1)^popcount(i & j).
static Value sylvesterMatrix(OpBuilder &b, Location loc, int64_t g) {
  SmallVector<float> entries;
  entries.reserve(g * g);
  for (int64_t i = 0; i < g; ++i)
    for (int64_t j = 0; j < g; ++j)
      entries.push_back(llvm::popcount(static_cast<uint64_t>(i & j)) % 2 ? -1.f
                                                                         : 1.f);
  auto type = RankedTensorType::get({g, g}, b.getF32Type());
  return arith::ConstantOp::create(
      b, loc, DenseElementsAttr::get(type, ArrayRef<float>(entries)));
}

LogicalResult mlir::fa::attn::decomposeHadamard(RewriterBase &rw,
                                                HadamardOp op) {
  Location loc = op.getLoc();
  Value x = op.getInput();
  const int64_t g = op.getGroupSize();
  if (g == 1) { // an odd D: the rotation of one column is the identity
    rw.replaceOp(op, x);
    return success();
  }
  rw.setInsertionPoint(op);
  auto type = cast<RankedTensorType>(x.getType());
  const unsigned rank = type.getRank(), col = rank - 1, k = rank;
  MLIRContext *ctx = rw.getContext();
  SmallVector<OpFoldResult> sizes = tensor::getMixedSizes(rw, loc, x);
  // sums[..., j] = Σ_k x[..., (j / g)·g + k] · H[j mod g, k]
  SmallVector<AffineExpr> xExprs;
  for (unsigned d = 0; d < col; ++d)
    xExprs.push_back(getAffineDimExpr(d, ctx));
  AffineExpr j = getAffineDimExpr(col, ctx), kk = getAffineDimExpr(k, ctx);
  xExprs.push_back(j.floorDiv(g) * g + kk);
  AffineMap xMap = AffineMap::get(rank + 1, 0, xExprs, ctx);
  AffineMap hMap = AffineMap::get(rank + 1, 0, {j % g, kk}, ctx);
  SmallVector<unsigned> outDims;
  for (unsigned d = 0; d < rank; ++d)
    outDims.push_back(d);
  Value sums = filledF32(rw, loc, sizes, 0.0);
  sums =
      linalg::GenericOp::create(
          rw, loc, sums.getType(), ValueRange{x, sylvesterMatrix(rw, loc, g)},
          ValueRange{sums},
          ArrayRef<AffineMap>{xMap, hMap, projection(ctx, rank + 1, outDims)},
          iterators(rank, 1),
          [&](OpBuilder &b, Location l, ValueRange a) {
            Value term = arith::MulFOp::create(b, l, toF32(b, l, a[0]), a[1]);
            linalg::YieldOp::create(
                b, l, ValueRange{arith::AddFOp::create(b, l, a[2], term)});
          })
          .getResult(0);
  Type elem = type.getElementType();
  Value empty = tensor::EmptyOp::create(rw, loc, sizes, elem);
  AffineMap id = AffineMap::getMultiDimIdentityMap(rank, ctx);
  Value rotated =
      linalg::GenericOp::create(
          rw, loc, type, ValueRange{sums}, ValueRange{empty},
          ArrayRef<AffineMap>{id, id}, iterators(rank),
          [&](OpBuilder &b, Location l, ValueRange a) {
            Value v = arith::MulFOp::create(
                b, l, a[0],
                cF32(b, l, 1.0 / std::sqrt(static_cast<double>(g))));
            if (elem != v.getType())
              v = arith::TruncFOp::create(b, l, elem, v);
            linalg::YieldOp::create(b, l, ValueRange{v});
          })
          .getResult(0);
  rw.replaceOp(op, rotated);
  return success();
}

/// The e4m3 byte (i8) of the f32 `v`, |v| ≤ 448 or NaN, rounded to nearest
/// with ties to even. A normal result rounds f32's mantissa to 3 bits by
/// adding half an e4m3 step (less one, plus the kept lowest bit: ties to
/// even), a carry moving into the exponent, and rebiases the exponent
/// (127 → 7); below 2^-6 the value is a multiple of 2^-9, rounded as such.
static Value encodeE4M3(OpBuilder &b, Location loc, Value v) {
  Type i32 = b.getI32Type();
  auto c = [&](int64_t x) {
    return arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(x));
  };
  auto andI = [&](Value x, int64_t m) {
    return arith::AndIOp::create(b, loc, x, c(m));
  };
  auto shr = [&](Value x, int64_t s) {
    return arith::ShRUIOp::create(b, loc, x, c(s));
  };
  Value u = arith::BitcastOp::create(b, loc, i32, v);
  Value sign = andI(shr(u, 24), 0x80);
  Value a = andI(u, 0x7FFFFFFF);
  Value rounded = arith::AddIOp::create(
      b, loc, arith::AddIOp::create(b, loc, a, c(0x7FFFF)),
      andI(shr(a, 20), 1));
  Value normal = arith::SubIOp::create(b, loc, shr(rounded, 20), c(120 << 3));
  Value steps = math::RoundEvenOp::create(
      b, loc,
      arith::MulFOp::create(b, loc, math::AbsFOp::create(b, loc, v),
                            cF32(b, loc, 512.0)));
  Value subnormal = arith::FPToUIOp::create(b, loc, i32, steps);
  auto ult = [&](Value x, int64_t y) {
    return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, x, c(y));
  };
  Value code = arith::SelectOp::create(b, loc, ult(a, 0x3C800000), subnormal,
                                       normal); // 0x3C800000: 2^-6
  Value isNan = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ugt, a,
                                      c(0x7F800000));
  code = arith::SelectOp::create(b, loc, isNan, c(0x7F), code);
  return arith::TruncIOp::create(b, loc, b.getI8Type(),
                                 arith::OrIOp::create(b, loc, sign, code));
}

/// Row maxima of |x| [B, H, N, D] in f32: [B, H, N] (NaN propagates).
static Value rowAmax(OpBuilder &b, Location loc, Value x) {
  SmallVector<OpFoldResult> sizes = tensor::getMixedSizes(b, loc, x);
  sizes.pop_back();
  Value init = filledF32(b, loc, sizes, 0.0);
  MLIRContext *ctx = b.getContext();
  return linalg::GenericOp::create(
             b, loc, init.getType(), ValueRange{x}, ValueRange{init},
             ArrayRef<AffineMap>{AffineMap::getMultiDimIdentityMap(4, ctx),
                                 projection(ctx, 4, {0, 1, 2})},
             iterators(3, 1),
             [&](OpBuilder &nb, Location l, ValueRange a) {
               Value mag = math::AbsFOp::create(nb, l, toF32(nb, l, a[0]));
               linalg::YieldOp::create(
                   nb, l,
                   ValueRange{arith::MaximumFOp::create(nb, l, a[1], mag)});
             })
      .getResult(0);
}

/// max(m, rows[b, h, r]) over r in [lo, hi).
static Value maxOverRows(OpBuilder &b, Location loc, Value rows, Value batch,
                         Value head, Value lo, Value hi, Value m) {
  auto loop = scf::ForOp::create(
      b, loc, lo, hi, cIndex(b, loc, 1), ValueRange{m},
      [&](OpBuilder &nb, Location l, Value r, ValueRange iter) {
        Value x =
            tensor::ExtractOp::create(nb, l, rows, ValueRange{batch, head, r});
        scf::YieldOp::create(
            nb, l, ValueRange{arith::MaximumFOp::create(nb, l, iter[0], x)});
      });
  return loop.getResult(0);
}

/// The descale factors of `op`: amax / 448 over each factor's heads and rows
/// (1 where the amax is 0), from the row maxima `rows` [B, H, N].
static Value descaleFactors(OpBuilder &b, Location loc, QuantizeOp op,
                            Value rows) {
  auto type = cast<RankedTensorType>(op.getDescale().getType());
  const bool perBlock = isBlockDescale(op.getDescale());
  Value x = op.getInput();
  // The descale's extents: static where its type knows them, else B, H and
  // ceil(N / 64) of x.
  SmallVector<OpFoldResult> sizes;
  for (int64_t d = 0; d < type.getRank(); ++d) {
    if (!type.isDynamicDim(d)) {
      sizes.push_back(b.getIndexAttr(type.getDimSize(d)));
    } else if (d < 2) {
      sizes.push_back(tensor::getMixedSize(b, loc, x, d));
    } else {
      Value n = dimValue(b, loc, x, 2);
      sizes.push_back(arith::CeilDivUIOp::create(
                          b, loc, n, cIndex(b, loc, kDescaleBlockRows))
                          .getResult());
    }
  }
  Value empty = tensor::EmptyOp::create(b, loc, sizes, b.getF32Type());
  const int64_t group = op.getHeadsPerFactor();
  AffineMap id =
      AffineMap::getMultiDimIdentityMap(type.getRank(), b.getContext());
  return linalg::GenericOp::create(
             b, loc, empty.getType(), ValueRange{}, ValueRange{empty},
             ArrayRef<AffineMap>{id}, iterators(type.getRank()),
             [&](OpBuilder &nb, Location l, ValueRange) {
               Value batch = linalg::IndexOp::create(nb, l, 0);
               Value n = dimValue(nb, l, x, 2), zero = cF32(nb, l, 0.0);
               Value m;
               if (perBlock) {
                 Value head = linalg::IndexOp::create(nb, l, 1);
                 Value lo = arith::MulIOp::create(
                     nb, l, linalg::IndexOp::create(nb, l, 2),
                     cIndex(nb, l, kDescaleBlockRows));
                 Value hi = arith::MinUIOp::create(
                     nb, l, n,
                     arith::AddIOp::create(nb, l, lo,
                                           cIndex(nb, l, kDescaleBlockRows)));
                 m = maxOverRows(nb, l, rows, batch, head, lo, hi, zero);
               } else {
                 Value first = arith::MulIOp::create(
                     nb, l, linalg::IndexOp::create(nb, l, 1),
                     cIndex(nb, l, group));
                 Value last =
                     arith::AddIOp::create(nb, l, first, cIndex(nb, l, group));
                 auto heads = scf::ForOp::create(
                     nb, l, first, last, cIndex(nb, l, 1), ValueRange{zero},
                     [&](OpBuilder &hb, Location hl, Value head,
                         ValueRange iter) {
                       scf::YieldOp::create(hb, hl,
                                            maxOverRows(hb, hl, rows, batch,
                                                        head, cIndex(hb, hl, 0),
                                                        n, iter[0]));
                     });
                 m = heads.getResult(0);
               }
               Value positive = arith::CmpFOp::create(
                   nb, l, arith::CmpFPredicate::OGT, m, zero);
               Value factor = arith::SelectOp::create(
                   nb, l, positive,
                   arith::DivFOp::create(nb, l, m, cF32(nb, l, kMaxE4M3)),
                   cF32(nb, l, 1.0));
               linalg::YieldOp::create(nb, l, ValueRange{factor});
             })
      .getResult(0);
}

LogicalResult mlir::fa::attn::decomposeQuantize(RewriterBase &rw,
                                                QuantizeOp op) {
  Location loc = op.getLoc();
  rw.setInsertionPoint(op);
  Value x = op.getInput();
  Value factors = descaleFactors(rw, loc, op, rowAmax(rw, loc, x));
  Value group = cIndex(rw, loc, op.getHeadsPerFactor());
  auto type = cast<RankedTensorType>(op.getResult().getType());
  Value empty = tensor::EmptyOp::create(
      rw, loc, tensor::getMixedSizes(rw, loc, x), type.getElementType());
  AffineMap id = AffineMap::getMultiDimIdentityMap(4, rw.getContext());
  Value x8 =
      linalg::GenericOp::create(
          rw, loc, type, ValueRange{x}, ValueRange{empty},
          ArrayRef<AffineMap>{id, id}, iterators(4),
          [&](OpBuilder &b, Location l, ValueRange a) {
            Value factor = descaleFactorAt(b, l, factors, group);
            Value v = arith::DivFOp::create(b, l, toF32(b, l, a[0]), factor);
            v = arith::MinimumFOp::create(
                b, l, arith::MaximumFOp::create(b, l, v, cF32(b, l, -kMaxE4M3)),
                cF32(b, l, kMaxE4M3));
            Value bits = encodeE4M3(b, l, v);
            linalg::YieldOp::create(b, l,
                                    ValueRange{arith::BitcastOp::create(
                                        b, l, type.getElementType(), bits)});
          })
          .getResult(0);
  rw.replaceOp(op, ValueRange{x8, factors});
  return success();
}
