//===- AttnRecomputeBackward.cpp - the recompute backward -------*- C++ -*-===//
//
// Seed 4.3: nothing of size Nq×Nk is kept from the forward. The backward
// recomputes S and P per (key block, query block) pair from Q, K and the
// saved LSE. Key blocks are the outer loop so dK_j and dV_j stay local to one
// iteration; dQ_i is accumulated across key blocks.
//
//===----------------------------------------------------------------------===//

#include "fa/Dialect/Attn/Transforms/Passes.h"
#include "fa/Dialect/Attn/Transforms/OnlineSoftmaxMath.h"
#include "fa/Dialect/Attn/Transforms/Transforms.h"
#include "Utils.h"
#include "Varlen.h"

namespace mlir::fa::attn {
#define GEN_PASS_DEF_ATTNRECOMPUTEBACKWARDPASS
#include "fa/Dialect/Attn/Transforms/Passes.h.inc"
} // namespace mlir::fa::attn

using namespace mlir;
using namespace mlir::fa::attn;
using namespace mlir::fa::attn::detail;

namespace {
/// Builds the loops of one backward; values are those of the op being lowered.
struct BackwardBuilder {
  RewriterBase &rw;
  Location loc;
  AttentionBackwardOp op;
  const RecomputeBackwardOptions &opt;
  ScoreSpec spec;
  Value q, k, v, dO, lse, delta;
  Value nq, nk, group;
  int64_t nqStatic, nkStatic, d, dv;
  OpFoldResult one, zero;
  // Varlen: tiles slice batch 0 at rows from their sequence's start (set
  // per sequence; null for a dense batch, whose tiles slice batch b).
  Value sliceBatch, qStart, kStart;

  Value batchOf(Value b) { return sliceBatch ? sliceBatch : b; }
  static Value rowIn(OpBuilder &ob, Location l, Value start, Value row) {
    return start ? arith::AddIOp::create(ob, l, start, row).getResult() : row;
  }

  Value slice(Value src, ArrayRef<OpFoldResult> offs,
              ArrayRef<OpFoldResult> sizes) {
    SmallVector<OpFoldResult> strides(offs.size(), one);
    return tensor::ExtractSliceOp::create(rw, loc, src, offs, sizes, strides);
  }
  Value insert(Value src, Value dest, ArrayRef<OpFoldResult> offs,
               ArrayRef<OpFoldResult> sizes) {
    SmallVector<OpFoldResult> strides(offs.size(), one);
    return tensor::InsertSliceOp::create(rw, loc, src, dest, offs, sizes,
                                         strides);
  }

  /// One key block j of key head `hk`: the loop over the group's query heads
  /// and over the query blocks that can see block j. `dqGroup` is the f32 dQ
  /// of the group's heads [1, G, Nq, D]. Returns (dqGroup', dK_j, dV_j).
  SmallVector<Value> keyBlock(Value b, Value hk, Value kb, Value dqGroup) {
    Value bkv = cIndex(rw, loc, opt.blockKV), bq = cIndex(rw, loc, opt.blockQ);
    Value k0 = arith::MulIOp::create(rw, loc, kb, bkv);
    OpFoldResult ks = blockExtent(rw, loc, nk, nkStatic, opt.blockKV, k0);
    Value kEnd = arith::MinSIOp::create(
        rw, loc, arith::AddIOp::create(rw, loc, k0, bkv), nk);
    SmallVector<OpFoldResult> kOffs{batchOf(b), hk, rowIn(rw, loc, kStart, k0),
                                    zero};
    Value kTile = slice(k, kOffs, {one, one, ks, rw.getIndexAttr(d)});
    Value vTile = slice(v, kOffs, {one, one, ks, rw.getIndexAttr(dv)});
    Value dk0 = filledF32(rw, loc, {one, one, ks, rw.getIndexAttr(d)}, 0.0);
    Value dv0 = filledF32(rw, loc, {one, one, ks, rw.getIndexAttr(dv)}, 0.0);

    // Query blocks with some row that sees a key of block j.
    Value c0 = cIndex(rw, loc, 0);
    std::pair<Value, Value> band;
    if (spec.hasMask())
      band = buildQueryBand(rw, loc, spec, k0, kEnd, nq, nk);
    auto [qbBegin, qbEnd] = buildBlockRange(rw, loc, band, nq, opt.blockQ);

    auto headLoop = scf::ForOp::create(
        rw, loc, c0, group, cIndex(rw, loc, 1), ValueRange{dqGroup, dk0, dv0},
        [&](OpBuilder &, Location, Value g, ValueRange gIter) {
          Value h = arith::AddIOp::create(
              rw, loc, arith::MulIOp::create(rw, loc, hk, group), g);
          auto qLoop = scf::ForOp::create(
              rw, loc, qbBegin, qbEnd, cIndex(rw, loc, 1), gIter,
              [&](OpBuilder &, Location, Value qb, ValueRange it) {
                Value q0 = arith::MulIOp::create(rw, loc, qb, bq);
                OpFoldResult qs =
                    blockExtent(rw, loc, nq, nqStatic, opt.blockQ, q0);
                Value qEnd = arith::AddIOp::create(
                    rw, loc, q0, getValueOrCreateConstantIndexOp(rw, loc, qs));
                Value qRow = rowIn(rw, loc, qStart, q0);
                SmallVector<OpFoldResult> qOffs{batchOf(b), h, qRow, zero};
                SmallVector<OpFoldResult> rowOffs{batchOf(b), h, qRow};
                SmallVector<OpFoldResult> rowSizes{one, one, qs};
                Value qTile = slice(q, qOffs, {one, one, qs, rw.getIndexAttr(d)});
                Value doTile =
                    slice(dO, qOffs, {one, one, qs, rw.getIndexAttr(dv)});
                Value lseTile = slice(lse, rowOffs, rowSizes);
                Value deltaTile = slice(delta, rowOffs, rowSizes);
                SmallVector<OpFoldResult> dqOffs{zero, g, q0, zero};
                SmallVector<OpFoldResult> dqSizes{one, one, qs,
                                                  rw.getIndexAttr(d)};
                Value dqTile = slice(it[0], dqOffs, dqSizes);
                SmallVector<Value> tileOffsets{b, h, q0, k0};
                auto makeTile = [&](OpBuilder &tb,
                                    bool applyMask) -> Operation * {
                  auto tile = BackwardTileOp::create(
                      tb, loc, TypeRange{dqTile.getType(), it[1].getType(),
                                         it[2].getType()},
                      qTile, kTile, vTile, doTile, lseTile, deltaTile, dqTile,
                      it[1], it[2], tileOffsets, ValueRange{nq, nk},
                      op.getModArgs(), applyMask ? tb.getUnitAttr() : nullptr,
                      op.getScaleAttr(), op.getMaskAttr(),
                      op.getWindowLeftAttr(), op.getWindowRightAttr(),
                      op.getWindowSizes());
                  cloneScoreMod(op.getScoreMod(), tile.getScoreMod());
                  cloneScoreMod(op.getMaskMod(), tile.getMaskMod());
                  copyKernelPlan(op, tile);
                  return tile;
                };
                Value inside =
                    spec.hasMask() ? buildBlockInsideMask(rw, loc, spec, q0, qEnd, k0,
                                                  kEnd, nq, nk)
                           : Value();
                SmallVector<Value> r =
                    buildMaskDispatch(rw, loc, inside, makeTile);
                Value dq = insert(r[0], it[0], dqOffs, dqSizes);
                scf::YieldOp::create(rw, loc, ValueRange{dq, r[1], r[2]});
              });
          scf::YieldOp::create(rw, loc, qLoop.getResults());
        });
    return headLoop.getResults();
  }
};
} // namespace

/// Casts an f32 gradient to the element type of `like` (the op's result:
/// bf16 for fp8 inputs).
static Value castLike(RewriterBase &rw, Location loc, Value grad, Value like) {
  auto type = RankedTensorType::get(
      cast<RankedTensorType>(grad.getType()).getShape(),
      cast<RankedTensorType>(like.getType()).getElementType());
  if (type.getElementType().isF32())
    return grad;
  Value init = tensor::EmptyOp::create(
      rw, loc, tensor::getMixedSizes(rw, loc, grad), type.getElementType());
  AffineMap id = rw.getMultiDimIdentityMap(4);
  return linalg::GenericOp::create(
             rw, loc, type, ValueRange{grad}, ValueRange{init},
             ArrayRef<AffineMap>{id, id}, iterators(4),
             [&](OpBuilder &b, Location l, ValueRange a) {
               linalg::YieldOp::create(
                   b, l,
                   ValueRange{arith::TruncFOp::create(
                       b, l, type.getElementType(), a[0])});
             })
      .getResult(0);
}

/// Σ_j P_ij per row [B, H, Nq], P recomputed from LSE as the tiles do: a
/// loop over every key block per (batch, head, query block).
static Value probabilityRowSums(RewriterBase &rw, Location loc,
                                BackwardBuilder &bb, Value batch, Value heads) {
  const RecomputeBackwardOptions &opt = bb.opt;
  OpFoldResult one = bb.one, zero = bb.zero;
  SmallVector<OpFoldResult> rowSizes = tensor::getMixedSizes(rw, loc, bb.lse);
  bool varlen = bb.op.isVarlen();
  Value longestQ = varlen ? longestSequence(rw, loc, bb.op.getCuSeqlensQ(), bb.nq)
                          : bb.nq;
  Value queryBlocks = arith::CeilDivUIOp::create(rw, loc, longestQ,
                                                 cIndex(rw, loc, opt.blockQ));
  Value keyBlocks =
      arith::CeilDivUIOp::create(rw, loc, bb.nk, cIndex(rw, loc, opt.blockKV));
  auto forall = scf::ForallOp::create(
      rw, loc, SmallVector<OpFoldResult>{batch, heads, queryBlocks},
      ValueRange{filledF32(rw, loc, rowSizes, 0.0)}, std::nullopt);
  OpBuilder::InsertionGuard guard(rw);
  rw.setInsertionPointToStart(forall.getBody());
  Value b = forall.getInductionVars()[0], h = forall.getInductionVars()[1];
  Value q0 = arith::MulIOp::create(rw, loc, forall.getInductionVars()[2],
                                   cIndex(rw, loc, opt.blockQ));
  // This sequence's lengths and rows (varlen), or the whole problem's.
  Value nq = bb.nq, nk = bb.nk, sliceB = b, qRow = q0, kStart;
  OpFoldResult qs;
  if (varlen) {
    SequenceSpan spanQ = sequenceSpan(rw, loc, bb.op.getCuSeqlensQ(), b, bb.nq);
    SequenceSpan spanK = sequenceSpan(rw, loc, bb.op.getCuSeqlensK(), b, bb.nk);
    nq = spanQ.length;
    nk = spanK.length;
    sliceB = cIndex(rw, loc, 0);
    kStart = spanK.start;
    qs = rowsInBlock(rw, loc, nq, q0, cIndex(rw, loc, opt.blockQ));
    qRow = arith::AddIOp::create(rw, loc, spanQ.start,
                                 arith::MinSIOp::create(rw, loc, q0, nq));
    Value noRows = arith::CmpIOp::create(
        rw, loc, arith::CmpIPredicate::eq,
        getValueOrCreateConstantIndexOp(rw, loc, qs), cIndex(rw, loc, 0));
    keyBlocks = arith::SelectOp::create(
        rw, loc, noRows, cIndex(rw, loc, 0),
        arith::CeilDivUIOp::create(rw, loc, nk, cIndex(rw, loc, opt.blockKV)));
  } else {
    qs = blockExtent(rw, loc, bb.nq, bb.nqStatic, opt.blockQ, q0);
  }
  Value hk = arith::DivUIOp::create(rw, loc, h, bb.group);
  Value qTile = bb.slice(bb.q, {sliceB, h, qRow, zero}, {one, one, qs, rw.getIndexAttr(bb.d)});
  Value lseTile = bb.slice(bb.lse, {sliceB, h, qRow}, {one, one, qs});
  auto keyLoop = scf::ForOp::create(
      rw, loc, cIndex(rw, loc, 0), keyBlocks, cIndex(rw, loc, 1),
      ValueRange{filledF32(rw, loc, {one, one, qs}, 0.0)},
      [&](OpBuilder &, Location, Value kb, ValueRange sums) {
        Value k0 = arith::MulIOp::create(rw, loc, kb, cIndex(rw, loc, opt.blockKV));
        OpFoldResult ks = blockExtent(
            rw, loc, nk, varlen ? ShapedType::kDynamic : bb.nkStatic,
            opt.blockKV, k0);
        Value kTile = bb.slice(bb.k, {sliceB, hk, BackwardBuilder::rowIn(rw, loc, kStart, k0), zero},
                               {one, one, ks, rw.getIndexAttr(bb.d)});
        Value next = addProbabilityRowSums(rw, loc, bb.spec, qTile, kTile, lseTile,
                                           sums[0], ValueRange{b, h, q0, k0},
                                           ValueRange{nq, nk});
        scf::YieldOp::create(rw, loc, next);
      });
  rw.setInsertionPointToStart(forall.getTerminator().getBody());
  SmallVector<OpFoldResult> strides(3, one);
  tensor::ParallelInsertSliceOp::create(rw, loc, keyLoop.getResult(0),
                                        forall.getRegionIterArgs()[0],
                                        SmallVector<OpFoldResult>{sliceB, h, qRow},
                                        SmallVector<OpFoldResult>{one, one, qs},
                                        strides);
  return forall.getResult(0);
}

/// dO_i / Σ_j P_ij (dO where a row has no P): P recomputed from an f32 LSE
/// is the softmax times a per-row factor, LSE's rounding (which grows with
/// |LSE|) and the recomputed scores' own rounding; dividing dO divides dV,
/// Delta and so dS by that factor, as if P were normalised. With `sinks` the
/// row's probabilities sum to 1 with the sink's, e^{sink_h − LSE}, included.
static Value normalizeGradOutput(RewriterBase &rw, Location loc,
                                 BackwardBuilder &bb, Value batch,
                                 Value heads, Value sinks) {
  Value sums = probabilityRowSums(rw, loc, bb, batch, heads);
  MLIRContext *ctx = rw.getContext();
  Value init = tensor::EmptyOp::create(
      rw, loc, tensor::getMixedSizes(rw, loc, bb.dO),
      cast<RankedTensorType>(bb.dO.getType()).getElementType());
  AffineMap id4 = rw.getMultiDimIdentityMap(4);
  AffineMap rows = projection(ctx, 4, {0, 1, 2});
  SmallVector<Value> inputs{bb.dO, sums};
  SmallVector<AffineMap> maps{id4, rows};
  if (sinks) {
    inputs.append({bb.lse, sinks});
    maps.append({rows, projection(ctx, 4, {1})});
  }
  maps.push_back(id4);
  return linalg::GenericOp::create(
             rw, loc, TypeRange{init.getType()}, inputs, ValueRange{init}, maps,
             iterators(4),
             [&](OpBuilder &b, Location l, ValueRange a) {
               Value total = a[1];
               if (sinks) {
                 // e^{sink − LSE} = −sinkGradientTerm with Delta = −1.
                 auto math = OnlineSoftmaxMath::withMathOps(b, l);
                 Value sinkP =
                     math.sinkGradientTerm(a[3], a[2], cF32(b, l, -1.0));
                 total = arith::AddFOp::create(b, l, total, sinkP);
               }
               Value none = arith::CmpFOp::create(
                   b, l, arith::CmpFPredicate::OEQ, total, cF32(b, l, 0.0));
               Value scaled = arith::DivFOp::create(b, l, a[0], total);
               linalg::YieldOp::create(
                   b, l, ValueRange{arith::SelectOp::create(b, l, none, a[0],
                                                            scaled)});
             })
      .getResult(0);
}

/// d sink_h = −Σ_{b,q} e^{sink_h − LSE_bhq}·Delta_bhq [H]: the sink takes
/// e^{sink − LSE} of every row's probability and has no value, so
/// dL/d sink = Σ_rows dO·(∂O/∂sink) = −Σ_rows e^{sink − LSE}·(dO·O). Summed
/// per head over (batch, row) in a fixed order.
static Value sinkGradient(RewriterBase &rw, Location loc, Value sinks,
                          Value lse, Value delta) {
  MLIRContext *ctx = rw.getContext();
  SmallVector<OpFoldResult> size{tensor::getMixedSize(rw, loc, sinks, 0)};
  // Iteration (h, b, q): heads parallel, rows reduced.
  AffineMap rows = projection(ctx, 3, {1, 0, 2});
  AffineMap head = projection(ctx, 3, {0});
  return linalg::GenericOp::create(
             rw, loc, TypeRange{sinks.getType()},
             ValueRange{lse, delta, sinks},
             ValueRange{filledF32(rw, loc, size, 0.0)},
             ArrayRef<AffineMap>{rows, rows, head, head}, iterators(1, 2),
             [](OpBuilder &b, Location l, ValueRange a) {
               auto math = OnlineSoftmaxMath::withMathOps(b, l);
               Value term = math.sinkGradientTerm(a[2], a[0], a[1]);
               linalg::YieldOp::create(
                   b, l, ValueRange{arith::AddFOp::create(b, l, a[3], term)});
             })
      .getResult(0);
}

LogicalResult mlir::fa::attn::lowerAttentionBackward(
    RewriterBase &rw, AttentionBackwardOp op,
    const RecomputeBackwardOptions &opt) {
  if (opt.blockQ <= 0 || opt.blockKV <= 0)
    return op.emitOpError("expected positive block sizes, got block-q ")
           << opt.blockQ << " and block-kv " << opt.blockKV;
  ScoreSpec spec = op.getScoreSpec();
  if (failed(verifyDifferentiable(spec, op)))
    return failure();
  Location loc = op.getLoc();
  rw.setInsertionPoint(op);
  auto qType = cast<RankedTensorType>(op.getQuery().getType());
  auto kType = cast<RankedTensorType>(op.getKey().getType());
  BackwardBuilder bb{rw, loc, op, opt, spec};
  bb.q = op.getQuery();
  bb.k = op.getKey();
  bb.v = op.getValue();
  bb.dO = op.getGradOutput();
  bb.lse = op.getLse();
  Value out = op.getOutput();
  // A varlen batch is lowered as one head-major problem [1, H, T, D] whose
  // loops cut the sequences apart; its gradients are packed again at the end.
  bool varlen = op.isVarlen();
  if (varlen) {
    for (Value *t : {&bb.q, &bb.k, &bb.v, &bb.dO, &out})
      *t = packedToHeadMajor(rw, loc, *t);
    bb.lse = addUnitBatch(rw, loc, bb.lse);
    qType = cast<RankedTensorType>(bb.q.getType());
    kType = cast<RankedTensorType>(bb.k.getType());
  }
  bb.nqStatic = qType.getDimSize(2);
  bb.nkStatic = kType.getDimSize(2);
  bb.d = qType.getDimSize(3);
  bb.dv = cast<RankedTensorType>(bb.v.getType()).getDimSize(3);
  bb.one = rw.getIndexAttr(1);
  bb.zero = rw.getIndexAttr(0);
  Value batch = varlen ? sequenceCount(rw, loc, op.getCuSeqlensQ())
                       : dimValue(rw, loc, bb.q, 0);
  Value heads = dimValue(rw, loc, bb.q, 1);
  Value kvHeads = dimValue(rw, loc, bb.k, 1);
  bb.nq = dimValue(rw, loc, bb.q, 2);
  bb.nk = dimValue(rw, loc, bb.k, 2);
  bb.group = arith::DivUIOp::create(rw, loc, heads, kvHeads);

  SmallVector<OpFoldResult> qSizes = tensor::getMixedSizes(rw, loc, bb.q);
  SmallVector<OpFoldResult> kSizes = tensor::getMixedSizes(rw, loc, bb.k);
  SmallVector<OpFoldResult> vSizes = tensor::getMixedSizes(rw, loc, bb.v);
  Value dq0 = filledF32(rw, loc, qSizes, 0.0);
  Value dk0 = filledF32(rw, loc, kSizes, 0.0);
  Value dv0 = filledF32(rw, loc, vSizes, 0.0);
  // No queries or no keys: no gradient flows (zero or zero-size results, as
  // the forward gives), and the tiles would slice an empty dimension.
  Value sinks = op.getSinks();
  auto replaceWithGrads = [&](Value dq, Value dk, Value dv, Value dSinks) {
    SmallVector<Value> grads{castLike(rw, loc, dq, op.getGradQuery()),
                             castLike(rw, loc, dk, op.getGradKey()),
                             castLike(rw, loc, dv, op.getGradValue())};
    if (varlen)
      for (Value &g : grads)
        g = headMajorToPacked(rw, loc, g);
    if (sinks)
      grads.push_back(dSinks);
    rw.replaceOp(op, grads);
  };
  if (bb.nqStatic == 0 || bb.nkStatic == 0) {
    // Rows without keys see only their sink: O = 0, Delta = 0, d sink = 0.
    Value dSinks =
        sinks ? filledF32(rw, loc, tensor::getMixedSizes(rw, loc, sinks), 0.0)
              : Value();
    replaceWithGrads(dq0, dk0, dv0, dSinks);
    return success();
  }

  // f32 inputs (the CPU path): normalise the recomputed P through dO.
  if (qType.getElementType().isF32() && !op->hasAttr(kKernelPlanAttr))
    bb.dO = normalizeGradOutput(rw, loc, bb, batch, heads, sinks);

  // D_i = rowsum(dO_i ∘ O_i)
  SmallVector<OpFoldResult> rowSizes{qSizes[0], qSizes[1], qSizes[2]};
  MLIRContext *ctx = rw.getContext();
  AffineMap id4 = rw.getMultiDimIdentityMap(4);
  bb.delta = linalg::GenericOp::create(
                 rw, loc, TypeRange{RankedTensorType::get(
                              cast<RankedTensorType>(bb.lse.getType()).getShape(),
                              rw.getF32Type())},
                 ValueRange{bb.dO, out},
                 ValueRange{filledF32(rw, loc, rowSizes, 0.0)},
                 ArrayRef<AffineMap>{id4, id4, projection(ctx, 4, {0, 1, 2})},
                 iterators(3, 1),
                 [&](OpBuilder &b, Location l, ValueRange a) {
                   Value x = buildDeltaTerm(b, l, a[1], a[0]);
                   linalg::YieldOp::create(
                       b, l, ValueRange{arith::AddFOp::create(b, l, a[2], x)});
                 })
                 .getResult(0);
  Value dSinks = sinks ? sinkGradient(rw, loc, sinks, bb.lse, bb.delta) : Value();

  Value keyBlocks = arith::CeilDivUIOp::create(rw, loc, bb.nk,
                                               cIndex(rw, loc, opt.blockKV));
  OpFoldResult one = bb.one, zero = bb.zero;
  OpFoldResult groupOfr = getAsOpFoldResult(bb.group);
  SmallVector<OpFoldResult> dqGroupSizes{one, groupOfr, qSizes[2],
                                         rw.getIndexAttr(bb.d)};
  Value dq, dk, dv;
  // Varlen takes the per-(sequence, key head) loops: a sequence's key
  // blocks are its own, so there is no shared key-block axis to spread.
  if (opt.deterministic || varlen) {
    // Per (b, key head): key blocks in order, carrying the group's dQ.
    auto forall = scf::ForallOp::create(
        rw, loc, SmallVector<OpFoldResult>{batch, kvHeads},
        ValueRange{dq0, dk0, dv0}, std::nullopt);
    copyKernelPlan(op, forall);
    rw.setInsertionPointToStart(forall.getBody());
    Value b = forall.getInductionVars()[0], hk = forall.getInductionVars()[1];
    ValueRange outs = forall.getRegionIterArgs();
    OpFoldResult qRows = qSizes[2], kRows = kSizes[2];
    OpFoldResult qRow0 = zero, kRow0 = zero, sliceB = b;
    if (varlen) {
      SequenceSpan spanQ = sequenceSpan(rw, loc, op.getCuSeqlensQ(), b, bb.nq);
      SequenceSpan spanK = sequenceSpan(rw, loc, op.getCuSeqlensK(), b, bb.nk);
      bb.sliceBatch = cIndex(rw, loc, 0);
      sliceB = bb.sliceBatch;
      qRow0 = bb.qStart = spanQ.start;
      kRow0 = bb.kStart = spanK.start;
      qRows = bb.nq = spanQ.length;
      kRows = bb.nk = spanK.length;
      bb.nqStatic = bb.nkStatic = ShapedType::kDynamic;
      keyBlocks = arith::CeilDivUIOp::create(rw, loc, bb.nk,
                                             cIndex(rw, loc, opt.blockKV));
      dqGroupSizes[2] = qRows;
    }
    Value h0 = arith::MulIOp::create(rw, loc, hk, bb.group);
    SmallVector<OpFoldResult> dqOffs{sliceB, h0, qRow0, zero};
    SmallVector<OpFoldResult> headOffs{sliceB, hk, kRow0, zero};
    SmallVector<OpFoldResult> dkSizes{one, one, kRows, rw.getIndexAttr(bb.d)};
    SmallVector<OpFoldResult> dvSizes{one, one, kRows, rw.getIndexAttr(bb.dv)};
    Value dqG = bb.slice(outs[0], dqOffs, dqGroupSizes);
    Value dkH = bb.slice(outs[1], headOffs, dkSizes);
    Value dvH = bb.slice(outs[2], headOffs, dvSizes);
    auto kvLoop = scf::ForOp::create(
        rw, loc, cIndex(rw, loc, 0), keyBlocks, cIndex(rw, loc, 1),
        ValueRange{dqG, dkH, dvH},
        [&](OpBuilder &, Location, Value kb, ValueRange it) {
          SmallVector<Value> r = bb.keyBlock(b, hk, kb, it[0]);
          Value k0 = arith::MulIOp::create(rw, loc, kb,
                                           cIndex(rw, loc, opt.blockKV));
          SmallVector<OpFoldResult> bOffs{zero, zero, k0, zero};
          Value dkN = bb.insert(r[1], it[1], bOffs,
                                tensor::getMixedSizes(rw, loc, r[1]));
          Value dvN = bb.insert(r[2], it[2], bOffs,
                                tensor::getMixedSizes(rw, loc, r[2]));
          scf::YieldOp::create(rw, loc, ValueRange{r[0], dkN, dvN});
        });
    rw.setInsertionPointToStart(forall.getTerminator().getBody());
    auto pinsert = [&](Value src, Value dest, ArrayRef<OpFoldResult> offs,
                       ArrayRef<OpFoldResult> sizes) {
      SmallVector<OpFoldResult> strides(offs.size(), one);
      tensor::ParallelInsertSliceOp::create(rw, loc, src, dest, offs, sizes,
                                            strides);
    };
    pinsert(kvLoop.getResult(0), outs[0], dqOffs, dqGroupSizes);
    pinsert(kvLoop.getResult(1), outs[1], headOffs, dkSizes);
    pinsert(kvLoop.getResult(2), outs[2], headOffs, dvSizes);
    rw.setInsertionPointAfter(forall);
    dq = forall.getResult(0);
    dk = forall.getResult(1);
    dv = forall.getResult(2);
  } else {
    // Every (b, key head, key block) in parallel; each writes its own dQ
    // partial [kb, b, heads of the group, Nq, D], summed in order afterwards.
    SmallVector<OpFoldResult> slabSizes{keyBlocks, qSizes[0], qSizes[1],
                                        qSizes[2], rw.getIndexAttr(bb.d)};
    Value slab0 = filledF32(rw, loc, slabSizes, 0.0);
    auto forall = scf::ForallOp::create(
        rw, loc, SmallVector<OpFoldResult>{batch, kvHeads, keyBlocks},
        ValueRange{slab0, dk0, dv0}, std::nullopt);
    copyKernelPlan(op, forall);
    rw.setInsertionPointToStart(forall.getBody());
    ValueRange ivs = forall.getInductionVars();
    Value b = ivs[0], hk = ivs[1], kb = ivs[2];
    ValueRange outs = forall.getRegionIterArgs();
    Value h0 = arith::MulIOp::create(rw, loc, hk, bb.group);
    SmallVector<OpFoldResult> slabOffs{kb, b, h0, zero, zero};
    SmallVector<OpFoldResult> slabTile{one, one, groupOfr, qSizes[2],
                                       rw.getIndexAttr(bb.d)};
    SmallVector<OpFoldResult> strides5(5, one);
    auto groupType = tensor::ExtractSliceOp::inferCanonicalRankReducedResultType(
        4, cast<RankedTensorType>(slab0.getType()), slabTile);
    Value dqG = tensor::ExtractSliceOp::create(rw, loc, groupType, outs[0],
                                               slabOffs, slabTile, strides5);
    SmallVector<Value> r = bb.keyBlock(b, hk, kb, dqG);
    Value k0 = arith::MulIOp::create(rw, loc, kb, cIndex(rw, loc, opt.blockKV));
    SmallVector<OpFoldResult> blockOffs{b, hk, k0, zero};
    SmallVector<OpFoldResult> dkSizes = tensor::getMixedSizes(rw, loc, r[1]);
    SmallVector<OpFoldResult> dvSizes = tensor::getMixedSizes(rw, loc, r[2]);
    rw.setInsertionPointToStart(forall.getTerminator().getBody());
    tensor::ParallelInsertSliceOp::create(rw, loc, r[0], outs[0], slabOffs,
                                          slabTile, strides5);
    SmallVector<OpFoldResult> strides4(4, one);
    tensor::ParallelInsertSliceOp::create(rw, loc, r[1], outs[1], blockOffs,
                                          dkSizes, strides4);
    tensor::ParallelInsertSliceOp::create(rw, loc, r[2], outs[2], blockOffs,
                                          dvSizes, strides4);
    rw.setInsertionPointAfter(forall);
    dq = linalg::GenericOp::create(
             rw, loc, TypeRange{dq0.getType()}, ValueRange{forall.getResult(0)},
             ValueRange{dq0},
             ArrayRef<AffineMap>{projection(ctx, 5, {4, 0, 1, 2, 3}),
                                 projection(ctx, 5, {0, 1, 2, 3})},
             iterators(4, 1),
             [](OpBuilder &b, Location l, ValueRange a) {
               linalg::YieldOp::create(
                   b, l, ValueRange{arith::AddFOp::create(b, l, a[1], a[0])});
             })
             .getResult(0);
    dk = forall.getResult(1);
    dv = forall.getResult(2);
  }
  replaceWithGrads(dq, dk, dv, dSinks);
  return success();
}

namespace {
struct AttnRecomputeBackwardPass final
    : mlir::fa::attn::impl::AttnRecomputeBackwardPassBase<AttnRecomputeBackwardPass> {
  using Base::Base;
  void runOnOperation() override {
    SmallVector<AttentionBackwardOp> ops;
    getOperation().walk([&](AttentionBackwardOp op) { ops.push_back(op); });
    IRRewriter rw(&getContext());
    // A kernel plan on the op fixes the block sizes for its target.
    for (AttentionBackwardOp op : ops) {
      RecomputeBackwardOptions opt{blockQ, blockKV, deterministic};
      if (auto planned = plannedBlockSizes(op))
        std::tie(opt.blockQ, opt.blockKV) = *planned;
      if (failed(lowerAttentionBackward(rw, op, opt)))
        return signalPassFailure();
    }
  }
};
} // namespace
