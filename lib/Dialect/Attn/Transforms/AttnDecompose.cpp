//===- AttnDecompose.cpp - attn tile ops → linalg ---------------*- C++ -*-===//
//
// The arithmetic of one tile, written as linalg.generic ops: the matmuls
// accumulate in f32, scores are kept in base-2 units so scale·log2(e) is one
// multiply, and the running max is subtracted before every exp2.
//
//===----------------------------------------------------------------------===//

#include "fa/Dialect/Attn/Transforms/Passes.h"
#include "fa/Dialect/Attn/Transforms/OnlineSoftmaxMath.h"
#include "fa/Dialect/Attn/Transforms/Transforms.h"
#include "Utils.h"

#include "mlir/Dialect/Math/IR/Math.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>
#include <limits>

namespace mlir::fa::attn {
#define GEN_PASS_DEF_ATTNDECOMPOSEPASS
#include "fa/Dialect/Attn/Transforms/Passes.h.inc"
} // namespace mlir::fa::attn

using namespace mlir;
using namespace mlir::fa::attn;
using namespace mlir::fa::attn::detail;

static const double kInf = std::numeric_limits<double>::infinity();

namespace {
/// Dimensions of a tile op and the maps shared by its products.
struct TileShape {
  SmallVector<OpFoldResult> b, h, m, n; // single-entry lists, for concat
  OpFoldResult d, dv;
  int64_t group = 1;
};

/// Generic with `ins`/`outs`, maps given as projections of `nLoops` dims.
linalg::GenericOp generic(OpBuilder &b, Location loc, ValueRange ins,
                          ValueRange outs, unsigned nLoops,
                          ArrayRef<SmallVector<unsigned>> dims,
                          unsigned reductions,
                          function_ref<void(OpBuilder &, Location, ValueRange)> body,
                          int64_t group = 1, int keyOperand = -1) {
  MLIRContext *ctx = b.getContext();
  SmallVector<AffineMap> maps;
  for (auto [i, ds] : llvm::enumerate(dims)) {
    AffineMap map = projection(ctx, nLoops, ds);
    // The key/value operand reads head h / group.
    if (static_cast<int>(i) == keyOperand && group != 1) {
      SmallVector<AffineExpr> e(map.getResults());
      e[1] = e[1].floorDiv(group);
      map = AffineMap::get(nLoops, 0, e, ctx);
    }
    maps.push_back(map);
  }
  SmallVector<Type> types;
  for (Value o : outs)
    types.push_back(o.getType());
  return linalg::GenericOp::create(b, loc, types, ins, outs, maps,
                                   iterators(nLoops - reductions, reductions),
                                   body);
}

/// Absolute position of the element at loop indices (0..3) of a generic body.
ScorePosition positionAt(OpBuilder &b, Location loc, ValueRange offsets,
                         ValueRange lengths) {
  auto at = [&](unsigned dim) -> Value {
    Value i = linalg::IndexOp::create(b, loc, dim);
    return arith::AddIOp::create(b, loc, offsets[dim], i);
  };
  return {at(0), at(1), at(2), at(3), lengths[0], lengths[1]};
}

FailureOr<int64_t> headGroup(Operation *op, Value q, Value k) {
  int64_t h = cast<RankedTensorType>(q.getType()).getDimSize(1);
  int64_t hkv = cast<RankedTensorType>(k.getType()).getDimSize(1);
  if (h == hkv)
    return 1;
  if (ShapedType::isDynamic(h) || ShapedType::isDynamic(hkv))
    return op->emitOpError("decomposition needs static head counts when they "
                           "differ, got ")
           << hkv << " and " << h;
  return h / hkv;
}

/// S[b,h,i,j] = Σ_d Q[b,h,i,d]·K[b,h/g,j,d] in f32.
Value buildScores(OpBuilder &b, Location loc, Value q, Value k, int64_t group) {
  SmallVector<OpFoldResult> sizes{tensor::getMixedSize(b, loc, q, 0),
                                  tensor::getMixedSize(b, loc, q, 1),
                                  tensor::getMixedSize(b, loc, q, 2),
                                  tensor::getMixedSize(b, loc, k, 2)};
  Value init = filledF32(b, loc, sizes, 0.0);
  return generic(b, loc, {q, k}, {init}, 5, {{0, 1, 2, 4}, {0, 1, 3, 4}, {0, 1, 2, 3}}, 1,
                 [](OpBuilder &b, Location l, ValueRange a) {
                   Value p = arith::MulFOp::create(b, l, toF32(b, l, a[0]),
                                                   toF32(b, l, a[1]));
                   linalg::YieldOp::create(b, l,
                                           ValueRange{arith::AddFOp::create(b, l, a[2], p)});
                 },
                 group, /*keyOperand=*/1)
      .getResult(0);
}

/// P recomputed from LSE over the scores `s` of one tile, in place of s, and
/// with a score_mod (withDerivative) d(score)/d(S) beside it. `unscaled`
/// (f32 inputs) takes the FMA form below.
linalg::GenericOp buildProbabilities(OpBuilder &rw, Location loc,
                                     const ScoreSpec &spec, Value s, Value lse,
                                     ValueRange offsets, ValueRange lengths,
                                     bool masked, bool withDerivative,
                                     bool unscaled) {
  bool deriv = withDerivative && spec.scoreMod;
  SmallVector<Value> pOuts{s};
  if (deriv)
    pOuts.push_back(tensor::EmptyOp::create(
        rw, loc, tensor::getMixedSizes(rw, loc, s), rw.getF32Type()));
  SmallVector<SmallVector<unsigned>> pDims{{0, 1, 2}, {0, 1, 2, 3}};
  if (deriv)
    pDims.push_back({0, 1, 2, 3});
  return generic(
      rw, loc, {lse}, pOuts, 4, pDims, 0,
      [&](OpBuilder &b, Location l, ValueRange a) {
        ScorePosition pos = positionAt(b, l, offsets, lengths);
        Value derivative;
        Value score = buildScore(b, l, spec, a[1], pos,
                                 deriv ? &derivative : nullptr);
        // P = 2^(score·log2e − LSE·log2e), as the GPU kernels recompute it;
        // a row with LSE = −inf gets P = 0. f32 inputs: P = e^(u·c − LSE),
        // one FMA of the unscaled score u, so that neither the score nor LSE
        // is rounded at the size of |LSE| before they cancel.
        auto math = OnlineSoftmaxMath::withMathOps(b, l);
        Value pv;
        if (unscaled) {
          Value noKey = arith::CmpFOp::create(b, l, arith::CmpFPredicate::OEQ,
                                              a[0], cF32(b, l, -kInf));
          Value base = arith::SelectOp::create(b, l, noKey, cF32(b, l, kInf),
                                               a[0]);
          Value u = spec.scoreMod ? score : a[1];
          Value c = cF32(b, l, spec.scoreMod ? 1.0 : spec.scale);
          pv = math::ExpOp::create(
              b, l,
              math::FmaOp::create(b, l, u, c, arith::NegFOp::create(b, l, base)));
        } else {
          Value t = arith::MulFOp::create(b, l, score, cF32(b, l, M_LOG2E));
          pv = math.probability(t, math.lseBase2(a[0]));
        }
        if (masked)
          pv = arith::SelectOp::create(b, l, buildMaskPredicate(b, l, spec, pos),
                                       pv, cF32(b, l, 0.0));
        SmallVector<Value> ys{pv};
        if (derivative)
          ys.push_back(derivative);
        linalg::YieldOp::create(b, l, ys);
      });
}
} // namespace

LogicalResult mlir::fa::attn::decomposeOnlineAttention(RewriterBase &rw,
                                                       OnlineAttentionOp op) {
  Location loc = op.getLoc();
  rw.setInsertionPoint(op);
  // Only attn-tile knows which rows belong to which sequence.
  if (op.isVarlen())
    return op.emitOpError("expected attn-tile to cut a varlen batch into its "
                          "sequences before attn-decompose");
  // The CPU computes fp8 attention on dequantised f32 inputs.
  if (op.getDescaleQ())
    return op.emitOpError("expected f16, bf16 or f32 blocks: run "
                          "attn-dequantize before attn-online-softmax on the "
                          "CPU path, got ")
           << cast<RankedTensorType>(op.getQuery().getType()).getElementType();
  FailureOr<int64_t> group = headGroup(op, op.getQuery(), op.getKey());
  if (failed(group))
    return failure();
  ScoreSpec spec = op.getScoreSpec();
  bool masked = op.getApplyMask() && spec.hasMask();
  ValueRange offsets = op.getOffsets(), lengths = op.getLengths();
  Value max = op.getMax(), sum = op.getSum(), acc = op.getAcc();
  SmallVector<OpFoldResult> rowSizes = tensor::getMixedSizes(rw, loc, max);

  // f32 inputs meet scores in the hundreds (ALiBi over long rows, large
  // inputs), where rounding t = score·log2(e) before the max is subtracted
  // costs up to |t|·2^-24 in every exponent: keep the score u unscaled and
  // form each exponent as one FMA, u·factor − max, which rounds only the
  // small difference. Other types keep t (their rounding dominates anyway).
  bool unscaled = cast<RankedTensorType>(op.getQuery().getType())
                      .getElementType()
                      .isF32();
  double factor = spec.scoreMod ? M_LOG2E : spec.scale * M_LOG2E;
  // t (or u), masked entries -inf.
  Value s = buildScores(rw, loc, op.getQuery(), op.getKey(), *group);
  Value t = generic(rw, loc, {}, {s}, 4, {{0, 1, 2, 3}}, 0,
                    [&](OpBuilder &b, Location l, ValueRange a) {
                      ScorePosition pos = positionAt(b, l, offsets, lengths);
                      Value r = a[0];
                      if (spec.scoreMod)
                        r = buildScore(b, l, spec, a[0], pos);
                      if (!unscaled)
                        r = arith::MulFOp::create(b, l, r, cF32(b, l, factor));
                      if (masked)
                        r = arith::SelectOp::create(
                            b, l, buildMaskPredicate(b, l, spec, pos), r,
                            cF32(b, l, -kInf));
                      linalg::YieldOp::create(b, l, r);
                    })
                .getResult(0);
  // m_new = max(m, rowmax(t)), the max kept in base-2 units either way.
  Value maxNew =
      generic(rw, loc, {t}, {max}, 4, {{0, 1, 2, 3}, {0, 1, 2}}, 1,
              [&](OpBuilder &b, Location l, ValueRange a) {
                Value x = unscaled ? arith::MulFOp::create(b, l, a[0],
                                                           cF32(b, l, factor))
                                   : a[0];
                linalg::YieldOp::create(
                    b, l, ValueRange{arith::MaximumFOp::create(b, l, a[1], x)});
              })
          .getResult(0);
  // P = 2^(t − base(m_new)), in place of t; α = 2^(m − base(m_new)).
  Value p = generic(rw, loc, {maxNew}, {t}, 4, {{0, 1, 2}, {0, 1, 2, 3}}, 0,
                    [&](OpBuilder &b, Location l, ValueRange a) {
                      auto math = OnlineSoftmaxMath::withMathOps(b, l);
                      Value base = math.exponentBase(a[0]);
                      // math.fma: the LLVM dialect's FMA (the GPU's form)
                      // is not loaded before lowering to LLVM.
                      Value pv =
                          unscaled
                              ? math.exp2(math::FmaOp::create(
                                    b, l, a[1], cF32(b, l, factor),
                                    arith::NegFOp::create(b, l, base)))
                              : math.probability(a[1], base);
                      linalg::YieldOp::create(b, l, pv);
                    })
                .getResult(0);
  // l_new = α·l + rowsum(P).
  Value rowInit = tensor::EmptyOp::create(rw, loc, rowSizes, rw.getF32Type());
  Value alpha =
      generic(rw, loc, {max, maxNew}, {rowInit}, 3, {{0, 1, 2}, {0, 1, 2}, {0, 1, 2}}, 0,
              [&](OpBuilder &b, Location l, ValueRange a) {
                auto math = OnlineSoftmaxMath::withMathOps(b, l);
                linalg::YieldOp::create(
                    b, l, math.rescaleFactor(a[0], math.exponentBase(a[1])));
              })
          .getResult(0);
  auto mulRows = [](OpBuilder &b, Location l, ValueRange a) {
    linalg::YieldOp::create(b, l, ValueRange{arith::MulFOp::create(b, l, a[0], a[1])});
  };
  Value sumScaled = generic(rw, loc, {alpha, sum}, {rowInit}, 3,
                            {{0, 1, 2}, {0, 1, 2}, {0, 1, 2}}, 0, mulRows)
                        .getResult(0);
  Value sumNew =
      generic(rw, loc, {p}, {sumScaled}, 4, {{0, 1, 2, 3}, {0, 1, 2}}, 1,
              [](OpBuilder &b, Location l, ValueRange a) {
                linalg::YieldOp::create(
                    b, l, ValueRange{arith::AddFOp::create(b, l, a[1], a[0])});
              })
          .getResult(0);
  // acc_new = α·acc + P·V
  Value accInit = tensor::EmptyOp::create(
      rw, loc, tensor::getMixedSizes(rw, loc, acc), rw.getF32Type());
  Value accScaled = generic(rw, loc, {alpha, acc}, {accInit}, 4,
                            {{0, 1, 2}, {0, 1, 2, 3}, {0, 1, 2, 3}}, 0, mulRows)
                        .getResult(0);
  Value accNew =
      generic(rw, loc, {p, op.getValue()}, {accScaled}, 5,
              {{0, 1, 2, 4}, {0, 1, 4, 3}, {0, 1, 2, 3}}, 1,
              [](OpBuilder &b, Location l, ValueRange a) {
                Value x = arith::MulFOp::create(b, l, a[0], toF32(b, l, a[1]));
                linalg::YieldOp::create(b, l,
                                        ValueRange{arith::AddFOp::create(b, l, a[2], x)});
              },
              *group, /*keyOperand=*/1)
          .getResult(0);
  rw.replaceOp(op, ValueRange{accNew, maxNew, sumNew});
  return success();
}

LogicalResult mlir::fa::attn::decomposeBackwardTile(RewriterBase &rw,
                                                    BackwardTileOp op) {
  Location loc = op.getLoc();
  rw.setInsertionPoint(op);
  ScoreSpec spec = op.getScoreSpec();
  // A tile written by hand has not met attn-recompute-backward's check.
  if (failed(verifyDifferentiable(spec, op)))
    return failure();
  bool masked = op.getApplyMask() && spec.hasMask();
  ValueRange offsets = op.getOffsets(), lengths = op.getLengths();
  Value q = op.getQuery(), k = op.getKey(), v = op.getValue();
  Value dO = op.getGradOutput();

  // Recompute S and P = exp(score − LSE); keep d(score)/d(S) beside it.
  Value s = buildScores(rw, loc, q, k, 1);
  bool unscaled = cast<RankedTensorType>(q.getType()).getElementType().isF32();
  auto pOp = buildProbabilities(rw, loc, spec, s, op.getLse(), offsets,
                                lengths, masked, /*withDerivative=*/true,
                                unscaled);
  Value p = pOp.getResult(0);
  Value chain = spec.scoreMod ? pOp.getResult(1) : Value();

  auto mulAcc = [](OpBuilder &b, Location l, ValueRange a) {
    Value x = arith::MulFOp::create(b, l, toF32(b, l, a[0]), toF32(b, l, a[1]));
    linalg::YieldOp::create(b, l, ValueRange{arith::AddFOp::create(b, l, a[2], x)});
  };
  // dV_j += P_ijᵀ·dO_i   loops (b, h, j, e, i)
  Value dv = generic(rw, loc, {p, dO}, {op.getGradValue()}, 5,
                     {{0, 1, 4, 2}, {0, 1, 4, 3}, {0, 1, 2, 3}}, 1, mulAcc)
                 .getResult(0);
  // dP_ij = dO_i·V_jᵀ   loops (b, h, i, j, e)
  Value dpInit = filledF32(rw, loc, tensor::getMixedSizes(rw, loc, s), 0.0);
  Value dp = generic(rw, loc, {dO, v}, {dpInit}, 5,
                     {{0, 1, 2, 4}, {0, 1, 3, 4}, {0, 1, 2, 3}}, 1, mulAcc)
                 .getResult(0);
  // dS_ij = P_ij∘(dP_ij − D_i)·d(score)/d(S), in place of dP.
  SmallVector<Value> dsIns{p, op.getDelta()};
  SmallVector<SmallVector<unsigned>> dsDims{{0, 1, 2, 3}, {0, 1, 2}};
  if (chain) {
    dsIns.push_back(chain);
    dsDims.push_back({0, 1, 2, 3});
  }
  dsDims.push_back({0, 1, 2, 3});
  Value ds = generic(rw, loc, dsIns, {dp}, 4, dsDims, 0,
                     [&](OpBuilder &b, Location l, ValueRange a) {
                       auto math = OnlineSoftmaxMath::withMathOps(b, l);
                       Value c = chain ? a[2] : cF32(b, l, spec.scale);
                       linalg::YieldOp::create(
                           b, l, math.scoreGradient(a[0], a.back(), a[1], c));
                     })
                 .getResult(0);
  // dK_j += dS_ijᵀ·Q_i   loops (b, h, j, d, i)
  Value dk = generic(rw, loc, {ds, q}, {op.getGradKey()}, 5,
                     {{0, 1, 4, 2}, {0, 1, 4, 3}, {0, 1, 2, 3}}, 1, mulAcc)
                 .getResult(0);
  // dQ_i += dS_ij·K_j   loops (b, h, i, d, j)
  Value dq = generic(rw, loc, {ds, k}, {op.getGradQuery()}, 5,
                     {{0, 1, 2, 4}, {0, 1, 4, 3}, {0, 1, 2, 3}}, 1, mulAcc)
                 .getResult(0);
  rw.replaceOp(op, ValueRange{dq, dk, dv});
  return success();
}

LogicalResult mlir::fa::attn::decomposeMerge(RewriterBase &rw, MergeOp op) {
  Location loc = op.getLoc();
  rw.setInsertionPoint(op);
  Value parts = op.getPartialOutput(), partLse = op.getPartialLse();
  SmallVector<OpFoldResult> outSizes =
      tensor::getMixedSizes(rw, loc, parts); // [S, B, H, Nq, Dv]
  outSizes.erase(outSizes.begin());
  SmallVector<OpFoldResult> rowSizes(outSizes.begin(), outSizes.end() - 1);
  // A sink is one more partial with LSE = sink_h and O = 0: it starts the
  // running max, and its weight the weight sum (the max comes first).
  Value sinks = op.getSinks();
  Value maxInit = filledF32(rw, loc, rowSizes, -kInf);
  if (sinks)
    maxInit = generic(rw, loc, {sinks}, {maxInit}, 3, {{1}, {0, 1, 2}}, 0,
                      [](OpBuilder &b, Location l, ValueRange a) {
                        linalg::YieldOp::create(b, l, a[0]);
                      })
                  .getResult(0);
  // M = max(sink, max_s LSE_s)   loops (b, h, i, s)
  Value maxLse =
      generic(rw, loc, {partLse}, {maxInit}, 4,
              {{3, 0, 1, 2}, {0, 1, 2}}, 1,
              [](OpBuilder &b, Location l, ValueRange a) {
                linalg::YieldOp::create(
                    b, l, ValueRange{arith::MaximumFOp::create(b, l, a[1], a[0])});
              })
          .getResult(0);
  // w_s = 2^((LSE_s − base(M))·log2e)   loops (s, b, h, i)
  Value weightInit = tensor::EmptyOp::create(
      rw, loc, tensor::getMixedSizes(rw, loc, partLse), rw.getF32Type());
  Value weights =
      generic(rw, loc, {partLse, maxLse}, {weightInit}, 4,
              {{0, 1, 2, 3}, {1, 2, 3}, {0, 1, 2, 3}}, 0,
              [&](OpBuilder &b, Location l, ValueRange a) {
                auto math = OnlineSoftmaxMath::withMathOps(b, l);
                linalg::YieldOp::create(b, l, math.mergeWeight(a[0], a[1]));
              })
          .getResult(0);
  // W = e^{sink − base(M)} + Σ_s w_s   loops (b, h, i, s)
  Value sumInit = filledF32(rw, loc, rowSizes, 0.0);
  if (sinks)
    sumInit =
        generic(rw, loc, {sinks, maxLse}, {sumInit}, 3,
                {{1}, {0, 1, 2}, {0, 1, 2}}, 0,
                [&](OpBuilder &b, Location l, ValueRange a) {
                  auto math = OnlineSoftmaxMath::withMathOps(b, l);
                  linalg::YieldOp::create(b, l, math.mergeWeight(a[0], a[1]));
                })
            .getResult(0);
  Value weightSum =
      generic(rw, loc, {weights}, {sumInit}, 4,
              {{3, 0, 1, 2}, {0, 1, 2}}, 1,
              [](OpBuilder &b, Location l, ValueRange a) {
                linalg::YieldOp::create(
                    b, l, ValueRange{arith::AddFOp::create(b, l, a[1], a[0])});
              })
          .getResult(0);
  // Σ_s w_s·O_s   loops (b, h, i, e, s); a weightless partial adds nothing,
  // whatever its O_s holds.
  Value weighted =
      generic(rw, loc, {weights, parts}, {filledF32(rw, loc, outSizes, 0.0)}, 5,
              {{4, 0, 1, 2}, {4, 0, 1, 2, 3}, {0, 1, 2, 3}}, 1,
              [](OpBuilder &b, Location l, ValueRange a) {
                Value term = arith::MulFOp::create(b, l, a[0], a[1]);
                Value none = arith::CmpFOp::create(
                    b, l, arith::CmpFPredicate::OEQ, a[0], cF32(b, l, 0.0));
                term = arith::SelectOp::create(b, l, none, cF32(b, l, 0.0), term);
                linalg::YieldOp::create(
                    b, l, ValueRange{arith::AddFOp::create(b, l, a[2], term)});
              })
          .getResult(0);
  // Per row (1/W, LSE), then O = Σ w_s·O_s · (1/W).
  Value rowInit = tensor::EmptyOp::create(rw, loc, rowSizes, rw.getF32Type());
  auto rows = generic(rw, loc, {maxLse, weightSum}, {rowInit, rowInit}, 3,
                      {{0, 1, 2}, {0, 1, 2}, {0, 1, 2}, {0, 1, 2}}, 0,
                      [&](OpBuilder &b, Location l, ValueRange a) {
                        auto math = OnlineSoftmaxMath::withMathOps(b, l);
                        auto [inv, lse] = math.finalizeMerge(a[0], a[1]);
                        linalg::YieldOp::create(b, l, ValueRange{inv, lse});
                      });
  Type elem = cast<RankedTensorType>(op.getOutput().getType()).getElementType();
  Value outInit = tensor::EmptyOp::create(rw, loc, outSizes, elem);
  Value out = generic(rw, loc, {weighted, rows.getResult(0)}, {outInit}, 4,
                      {{0, 1, 2, 3}, {0, 1, 2}, {0, 1, 2, 3}}, 0,
                      [&](OpBuilder &b, Location l, ValueRange a) {
                        Value o = arith::MulFOp::create(b, l, a[0], a[1]);
                        if (o.getType() != elem)
                          o = arith::TruncFOp::create(b, l, elem, o);
                        linalg::YieldOp::create(b, l, o);
                      })
                  .getResult(0);
  Value lse = rows.getResult(1);
  if (lse.getType() != op.getLse().getType())
    lse = tensor::CastOp::create(rw, loc, op.getLse().getType(), lse);
  if (out.getType() != op.getOutput().getType())
    out = tensor::CastOp::create(rw, loc, op.getOutput().getType(), out);
  rw.replaceOp(op, ValueRange{out, lse});
  return success();
}

Value mlir::fa::attn::addProbabilityRowSums(OpBuilder &b, Location loc,
                                            const ScoreSpec &spec, Value q,
                                            Value k, Value lse, Value rowSums,
                                            ValueRange offsets,
                                            ValueRange lengths) {
  Value s = buildScores(b, loc, q, k, 1);
  Value p = buildProbabilities(b, loc, spec, s, lse, offsets, lengths,
                               spec.hasMask(), /*withDerivative=*/false,
                               /*unscaled=*/true)
                .getResult(0);
  return generic(b, loc, {p}, {rowSums}, 4, {{0, 1, 2, 3}, {0, 1, 2}}, 1,
                 [](OpBuilder &b, Location l, ValueRange a) {
                   linalg::YieldOp::create(
                       b, l, ValueRange{arith::AddFOp::create(b, l, a[1], a[0])});
                 })
      .getResult(0);
}

namespace {
struct AttnDecomposePass final
    : mlir::fa::attn::impl::AttnDecomposePassBase<AttnDecomposePass> {
  void runOnOperation() override {
    SmallVector<Operation *> ops;
    getOperation().walk([&](Operation *op) {
      if (isa<OnlineAttentionOp, BackwardTileOp, MergeOp, PagedViewOp, RotaryOp,
              KvAppendOp, HadamardOp, QuantizeOp>(op))
        ops.push_back(op);
    });
    IRRewriter rw(&getContext());
    for (Operation *op : ops) {
      LogicalResult r =
          TypeSwitch<Operation *, LogicalResult>(op)
              .Case([&](OnlineAttentionOp o) {
                return decomposeOnlineAttention(rw, o);
              })
              .Case([&](BackwardTileOp o) {
                return decomposeBackwardTile(rw, o);
              })
              .Case([&](MergeOp o) { return decomposeMerge(rw, o); })
              .Case([&](PagedViewOp o) { return decomposePagedView(rw, o); })
              .Case([&](RotaryOp o) { return decomposeRotary(rw, o); })
              .Case([&](KvAppendOp o) { return decomposeKvAppend(rw, o); })
              .Case([&](HadamardOp o) { return decomposeHadamard(rw, o); })
              .Case([&](QuantizeOp o) { return decomposeQuantize(rw, o); });
      if (failed(r))
        return signalPassFailure();
    }
  }
};
} // namespace
