//===- BackwardTileLowering.cpp - the backward's tile ops -------*- C++ -*-===//
//
// convert-attn-gpu-to-nvvm's patterns for the ops of the recompute backward
// (fa_bwd, mma.sync; BackwardKernel.cpp builds it): its fragments are
// transposed, a warp's 16 keys as rows and the query tile's queries as
// columns (lane (g, t) holds keys row + g, + 8 and queries 8n + 2t, + 1).
// Each op lowers in place to the fragment builders' code, as the forward's
// ops do; the online-softmax math (P from LSE, dS) is OnlineSoftmaxMath's,
// the CPU decomposition's.
//
//===----------------------------------------------------------------------===//

#include "TileLowering.h"

#include "fa/Dialect/Attn/Transforms/OnlineSoftmaxMath.h"
#include "fa/Dialect/Attn/Transforms/Transforms.h"

using namespace mlir;
using namespace mlir::fa;
using namespace mlir::fa::gpu_lowering;
namespace ag = mlir::fa::attn_gpu;

/// The score spec of a backward's Sᵀ ops: the mask of its (one)
/// transposed_bounds, its score_mod and mask_mod regions (at most one each).
static FailureOr<attn::ScoreSpec> transposedScoreSpec(gpu::GPUFuncOp func) {
  auto bounds = uniqueTileOp<ag::TransposedBoundsOp>(func);
  if (failed(bounds))
    return failure();
  auto scoreMod = uniqueTileOp<ag::TransposedScoreModOp>(func, true);
  if (failed(scoreMod))
    return failure();
  auto maskMod = uniqueTileOp<ag::TransposedMaskModOp>(func, true);
  if (failed(maskMod))
    return failure();
  attn::ScoreSpec spec = maskSpecOf(*bounds);
  spec.scoreMod = *scoreMod ? &scoreMod->getScoreMod() : nullptr;
  spec.maskMod = *maskMod ? &maskMod->getMaskMod() : nullptr;
  return spec;
}

FailureOr<KernelPlan>
mlir::fa::gpu_lowering::backwardTileKernelPlan(gpu::GPUFuncOp func,
                                               DictionaryAttr planAttr) {
  // One diagnostic: the first op that is missing or repeated.
  FailureOr<ag::ReduceDQOp> dq = uniqueTileOp<ag::ReduceDQOp>(func);
  if (failed(dq))
    return failure();
  FailureOr<attn::ScoreSpec> spec = transposedScoreSpec(func);
  if (failed(spec))
    return failure();
  auto gradient = uniqueTileOp<ag::ScoreGradientOp>(func);
  if (failed(gradient))
    return failure();
  // D and the element type from K (dQ's tile), Dv from dO (dPᵀ = V·dOᵀ).
  auto dp = gradient->getDp().getDefiningOp<ag::MmaQKOp>();
  if (!dp)
    return gradient->emitOpError("expected dPᵀ from an 'attn_gpu.mma_qk'");
  ag::SharedTileType key = dq->getKey().getType();
  return resolveTilePlan(func, planAttr, /*backward=*/true,
                         key.getElementType(), key.getCols(),
                         dp.getKey().getType().getCols(), *spec);
}

FailureOr<KernelPlan>
mlir::fa::gpu_lowering::wgmmaBackwardKernelPlan(gpu::GPUFuncOp func,
                                                DictionaryAttr planAttr) {
  FailureOr<attn::ScoreSpec> spec = transposedScoreSpec(func);
  if (failed(spec))
    return failure();
  // Sᵀ = K·Qᵀ runs over D, dPᵀ = V·dOᵀ over Dv ≤ D (the wgmma backward's
  // head dims): the k extents of its K-major wgmma_qk, 32 bytes a step.
  Type elemType;
  int64_t minSteps = 0, maxSteps = 0;
  func.walk([&](ag::WgmmaQKOp qk) {
    if (qk.getMnMajor())
      return;
    auto steps = static_cast<int64_t>(qk.getQueryDescriptors().size());
    minSteps = elemType ? std::min(minSteps, steps) : steps;
    maxSteps = std::max(maxSteps, steps);
    elemType = qk.getOperandType();
  });
  if (!elemType)
    return func.emitOpError("expected Sᵀ = K·Qᵀ from an 'attn_gpu.wgmma_qk' "
                            "in a wgmma backward");
  const int64_t elems = 256 / elemType.getIntOrFloatBitWidth();
  return resolveTilePlan(func, planAttr, /*backward=*/true, elemType,
                         maxSteps * elems, minSteps * elems, *spec);
}

namespace {
struct SharedF32ViewLowering : TileOpLowering<ag::SharedF32ViewOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult
  matchAndRewrite(ag::SharedF32ViewOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    KernelBuilder kb = builderFor(op, rewriter);
    MemRefType type = op.getView().getType();
    rewriter.replaceOp(
        op, kb.sharedView(op->getParentOfType<gpu::GPUModuleOp>(),
                          type.getElementType(), type.getNumElements()));
    return success();
  }
};

/// Word c of the row statistics: word c mod 4 of the padding (16 B) of the
/// tile's row c / 4 (the tile's offset is even: AsyncCopyRowStatsOp::verify).
static Value statSlot(KernelBuilder &kb, Value tile, Value c) {
  auto type = cast<ag::SharedTileType>(tile.getType());
  int64_t perWord = 32 / type.getElementType().getIntOrFloatBitWidth();
  int64_t padded = (type.getCols() + 15) / 16 * 16;
  Value slot = kb.add(kb.mul(kb.divui(c, 4), type.getStride() / perWord),
                      kb.add(kb.remui(c, 4), padded / perWord));
  int64_t offset = tile.getDefiningOp<ag::SharedTileOp>().getOffset();
  return offset ? kb.add(slot, offset / perWord) : slot;
}

struct AsyncCopyRowStatsLowering : TileOpLowering<ag::AsyncCopyRowStatsOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult
  matchAndRewrite(ag::AsyncCopyRowStatsOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    KernelBuilder kb = builderFor(op, rewriter);
    kb.copyRowStatsAsync(adaptor.getStats().front(), op.getLse(), op.getDelta(),
                         op.getRowsBase(), op.getQueryBegin(), op.getNq(),
                         op.getBlockRows(),
                         [&] { return statSlot(kb, op.getTile(), kb.tid); });
    kb.commitAsync();
    rewriter.eraseOp(op);
    return success();
  }
};

/// The (b, h, q, kv) of an Sᵀ op's tile: its first query and key.
template <typename OpTy>
static attn::ScorePosition transposedTile(OpTy op) {
  return {op.getBatch(),    op.getHead(), op.getQueryBegin(),
          op.getKeyBegin(), op.getNq(),   op.getNk()};
}

struct TransposedScoreModLowering
    : TileOpLowering<ag::TransposedScoreModOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult
  matchAndRewrite(ag::TransposedScoreModOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    // A plain builder: the score builder clones the region's ops.
    OpBuilder b(op);
    KernelBuilder kb = builderFor(op, b);
    SmallVector<Value> s(adaptor.getScores());
    SmallVector<Value> derivative = applyScoreModTransposed(
        kb, s, transposedTile(op), op.getRow(), op.getScale());
    rewriter.replaceOpWithMultiple(op, {s, derivative});
    return success();
  }
};

struct TransposedMaskModLowering : TileOpLowering<ag::TransposedMaskModOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult
  matchAndRewrite(ag::TransposedMaskModOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    OpBuilder b(op);
    KernelBuilder kb = builderFor(op, b);
    SmallVector<Value> s(adaptor.getScores());
    applyMaskModTransposed(kb, s, transposedTile(op), op.getRow());
    rewriter.replaceOpWithMultiple(op, {s});
    return success();
  }
};

struct TransposedBoundsLowering : TileOpLowering<ag::TransposedBoundsOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult
  matchAndRewrite(ag::TransposedBoundsOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    KernelBuilder kb = builderFor(op, rewriter);
    Value kBegin = op.getKeyBegin();
    Value query = kb.opaqueIndex(op.getQueryBegin());
    Value qEnd = kb.add(query, op.getBlockQueries());
    Value block = kBegin;
    if (Value index = op.getBlockIndex())
      block = kb.add(kBegin, kb.mul(index, op.getBlockKeys()));
    // (The wgmma backward's bounds, those of a block of the key block, test
    // the lengths first: the order reaches the PTX.)
    Value inside = transposedTileInside(
        kb, query, qEnd, block, kb.add(block, op.getBlockKeys()), op.getNq(),
        op.getNk(), /*lengthsFirst=*/static_cast<bool>(op.getBlockIndex()));
    rewriter.replaceOp(op, {query, inside});
    return success();
  }
};

struct TransposedMaskLowering : TileOpLowering<ag::TransposedMaskOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult
  matchAndRewrite(ag::TransposedMaskOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    KernelBuilder kb = builderFor(op, rewriter);
    Value nq = op.getNq(), nk = op.getNk();
    if (op.getOpaqueLengths()) {
      nq = kb.opaqueIndex(nq);
      nk = kb.opaqueIndex(nk);
    }
    SmallVector<Value> s(adaptor.getScores());
    maskScoresTransposed(kb, s,
                         {op.getBatch(), op.getHead(), op.getQueryBegin(),
                          op.getKeyBegin(), nq, nk},
                         op.getRow());
    rewriter.replaceOpWithMultiple(op, {s});
    return success();
  }
};

/// One lane's two consecutive f32 at `at` of `stats`.
static Value loadStatsPair(KernelBuilder &kb, Value stats, Value at) {
  auto f2 = VectorType::get({2}, kb.b.getF32Type());
  return vector::LoadOp::create(kb.b, kb.loc, f2, stats, ValueRange{at}, false,
                                llvm::MaybeAlign(8));
}

/// The pair of this lane's query columns 8n + 2t, + 1 of a stage of
/// statistics at float `base` of `stats`: LSE (`offset` 0), or Delta
/// (`offset` block_q).
static Value stagePair(KernelBuilder &kb, Value stats, Value base, int64_t n,
                       int64_t offset) {
  Value col = kb.laneColumn(n * 8 + offset);
  return loadStatsPair(kb, stats, kb.add(base, col));
}

static Value element(OpBuilder &b, Location loc, Value pair, int64_t c) {
  return vector::ExtractOp::create(b, loc, pair, ArrayRef<int64_t>{c});
}

/// recompute_probs beside a tile: each column's LSE (base 2) and Delta read
/// first, then the math.
static SmallVector<Value> probsBesideTile(ag::RecomputeProbsOp op,
                                          KernelBuilder &kb, Value stats,
                                          SmallVector<Value> &s,
                                          Value scaleLog2) {
  OpBuilder &b = kb.b;
  Location loc = kb.loc;
  attn::OnlineSoftmaxMath math = kb.softmaxMath();
  const int64_t bq = op.getScores().getType().getCols();
  SmallVector<Value> lse2(bq / 4), delta(bq / 4);
  for (int64_t n = 0; n < bq / 8; ++n) {
    Value col = kb.laneColumn(n * 8);
    Value l2 = loadStatsPair(kb, stats, statSlot(kb, op.getTile(), col));
    Value d2 =
        loadStatsPair(kb, stats, statSlot(kb, op.getTile(), kb.add(col, bq)));
    for (int64_t c = 0; c < 2; ++c) {
      lse2[n * 2 + c] = math.lseBase2(element(b, loc, l2, c));
      delta[n * 2 + c] = element(b, loc, d2, c);
    }
  }
  for (int64_t n = 0; n < bq / 8; ++n)
    for (int64_t i = 0; i < 4; ++i) {
      Value negL = arith::NegFOp::create(b, loc, lse2[n * 2 + i % 2]);
      s[n * 4 + i] = math.probabilityFolded(s[n * 4 + i], scaleLog2, negL);
    }
  return delta;
}

/// recompute_probs at a stage's base: each pair of LSEs (or with
/// `folded_lse` of exponent addends) right before its columns' math (the
/// wgmma backward's order, under its dPᵀ product).
static void probsAtBase(ag::RecomputeProbsOp op, KernelBuilder &kb, Value stats,
                        Value base, SmallVector<Value> &s, Value scaleLog2) {
  attn::OnlineSoftmaxMath math = kb.softmaxMath();
  const int64_t bq = op.getScores().getType().getCols();
  for (int64_t n = 0; n < bq / 8; ++n) {
    Value l2 = stagePair(kb, stats, base, n, 0);
    for (int64_t c = 0; c < 2; ++c) {
      Value stat = element(kb.b, kb.loc, l2, c);
      Value negL = op.getFoldedLse() ? stat : math.exponentAddend(stat);
      for (int64_t r = 0; r < 2; ++r) {
        Value &e = s[n * 4 + 2 * r + c];
        e = math.probabilityFolded(e, scaleLog2, negL);
      }
    }
  }
}

struct RecomputeProbsLowering : TileOpLowering<ag::RecomputeProbsOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult
  matchAndRewrite(ag::RecomputeProbsOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    // Pᵀ = 2^(Sᵀ·scale·log2e − LSE·log2e) (the score_mod's score·log2e),
    // −inf rows giving P = 0; columns past Nq read 0 and were masked.
    KernelBuilder kb = builderFor(op, rewriter);
    Value stats = adaptor.getStats().front();
    Value scaleLog2 = adaptor.getScaleLog2().front();
    SmallVector<Value> s(adaptor.getScores());
    if (!op.getTile()) {
      probsAtBase(op, kb, stats, adaptor.getStatsBase().front(), s, scaleLog2);
      rewriter.replaceOpWithMultiple(op, {s});
      return success();
    }
    SmallVector<Value> delta = probsBesideTile(op, kb, stats, s, scaleLog2);
    rewriter.replaceOpWithMultiple(op, {s, delta});
    return success();
  }
};

struct ScoreGradientLowering : TileOpLowering<ag::ScoreGradientOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult
  matchAndRewrite(ag::ScoreGradientOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    KernelBuilder kb = builderFor(op, rewriter);
    attn::OnlineSoftmaxMath math = kb.softmaxMath();
    ValueRange p = adaptor.getProbs(), derivative = adaptor.getDerivative();
    Value scale = op.getScale() ? adaptor.getScale().front() : Value();
    SmallVector<Value> ds(adaptor.getDp());
    auto gradient = [&](int64_t e, Value delta) {
      ds[e] = op.getScaledDelta()
                  ? math.scoreGradientScaledDelta(p[e], ds[e], delta, scale)
                  : math.scoreGradient(p[e], ds[e], delta,
                                       derivative.empty() ? scale
                                                          : derivative[e]);
    };
    const int64_t tiles = static_cast<int64_t>(ds.size()) / 4;
    if (!op.getStats()) {
      ValueRange delta = adaptor.getDelta();
      for (int64_t n = 0; n < tiles; ++n)
        for (int64_t i = 0; i < 4; ++i)
          gradient(n * 4 + i, delta[n * 2 + i % 2]);
    } else {
      // Each pair of Deltas right before its columns' math, as at a base
      // in recompute_probs.
      const int64_t bq = op.getProbs().getType().getCols();
      for (int64_t n = 0; n < tiles; ++n) {
        Value d2 = stagePair(kb, adaptor.getStats().front(),
                             adaptor.getStatsBase().front(), n, bq);
        for (int64_t c = 0; c < 2; ++c) {
          Value delta = element(rewriter, op.getLoc(), d2, c);
          for (int64_t r = 0; r < 2; ++r)
            gradient(n * 4 + 2 * r + c, delta);
        }
      }
    }
    rewriter.replaceOpWithMultiple(op, {ds});
    return success();
  }
};

struct StoreTileLowering : TileOpLowering<ag::StoreTileOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult
  matchAndRewrite(ag::StoreTileOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    KernelBuilder kb = builderFor(op, rewriter);
    SharedTile tile = sharedTile(op.getTile(), adaptor.getTile());
    ValueRange v = adaptor.getValue();
    for (int64_t n = 0; n < static_cast<int64_t>(v.size()) / 4; ++n)
      for (int64_t r = 0; r < 2; ++r) {
        Value row = kb.add(op.getRow(), kb.add(kb.groupId, r * 8));
        Value col = kb.laneColumn(n * 8);
        Value at = kb.tileOffset(tile, row, col);
        vector::StoreOp::create(
            rewriter, op.getLoc(),
            kb.truncPair(v[n * 4 + 2 * r], v[n * 4 + 2 * r + 1]), kb.smem,
            ValueRange{at}, false, llvm::MaybeAlign(2 * kb.plan.elemBytes()));
      }
    rewriter.eraseOp(op);
    return success();
  }
};

/// dQ += dS·K: warps split the bq × width tile into 16-row groups and, when
/// there are more warps than row groups, 16-column pairs round-robin; each
/// lane's results go to dq_accum with red.global.add.
struct ReduceDQLowering : TileOpLowering<ag::ReduceDQOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult
  matchAndRewrite(ag::ReduceDQOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    KernelBuilder kb = builderFor(op, rewriter);
    SharedTile dsTile = sharedTile(op.getDs(), adaptor.getDs());
    SharedTile kTile = sharedTile(op.getKey(), adaptor.getKey());
    const int64_t bq = dsTile.cols, bkv = dsTile.rows;
    const int64_t d = op.getRowElements(), width = op.getColumns();
    const int64_t widthPad = (width + 15) / 16 * 16;
    const int64_t rowGroups = bq / 16, colSplit = kb.plan.warps / rowGroups;
    Value first = op.getFirstColumn();
    Value rowGroup = kb.remui(kb.warp, rowGroups);
    Value colPart = kb.divui(kb.warp, rowGroups);
    Value qRow0 = kb.mul(rowGroup, 16);
    // Byte address of this lane's first dq_accum column in rows g, g + 8.
    Value dqRow[2], dqRowOk[2];
    for (int64_t r = 0; r < 2; ++r) {
      Value row = kb.add(op.getQueryBegin(),
                         kb.add(qRow0, kb.add(kb.groupId, r * 8)));
      dqRowOk[r] = kb.lt(row, op.getNq());
      Value rowElem = kb.mul(kb.add(op.getRowsBase(), row), d);
      Value col = kb.mul(kb.threadInGroup, 2);
      Value elem = kb.add(rowElem, first ? kb.add(first, col) : col);
      dqRow[r] = kb.add(op.getAddress(), kb.mul(elem, 4));
    }
    // f32: TF32 k8 steps (KernelBuilder::loadTf32AFromTransposed and
    // loadTf32BFromKMajor pair their keys); dS is read again for each column
    // pair, as its split registers for every key step would not fit.
    const bool tf32 = kb.plan.isF32();
    const int64_t k = kb.plan.mmaK();
    SmallVector<SmallVector<Value, 4>> dsA;
    for (int64_t kk = 0; kk < bkv / k && !tf32; ++kk)
      dsA.push_back(kb.loadAFromTransposed(dsTile, qRow0, kk * k));
    for (int64_t np = 0; np < widthPad / 16; ++np) {
      // The second n8 tile of the last pair is padding when width % 16 = 8.
      const int64_t tiles = np * 16 + 8 < width ? 2 : 1;
      Value mine = arith::CmpIOp::create(rewriter, op.getLoc(),
                                         arith::CmpIPredicate::eq, colPart,
                                         kb.idx(np % colSplit));
      auto pairIf = scf::IfOp::create(rewriter, op.getLoc(), mine, false);
      OpBuilder::InsertionGuard g(rewriter);
      rewriter.setInsertionPointToStart(&pairIf.getThenRegion().front());
      SmallVector<Value> dq(8, kb.f32(0));
      for (int64_t kk = 0; kk < bkv / k; ++kk) {
        Value col = first ? kb.add(first, np * 16) : kb.idx(np * 16);
        if (tf32) {
          SmallVector<Value, 8> a =
              kb.splitTf32(kb.loadTf32AFromTransposed(dsTile, qRow0, kk * k));
          for (int64_t t = 0; t < tiles; ++t)
            kb.mmaTf32(a,
                       kb.splitTf32(kb.loadTf32BFromKMajor(
                           kTile, kk * k, kb.add(col, t * 8))),
                       MutableArrayRef<Value>(dq).slice(t * 4, 4));
          continue;
        }
        SmallVector<Value, 4> bf = kb.loadBFromKMajor(kTile, kk * 16, col);
        kb.mma(dsA[kk], {bf[0], bf[1]}, MutableArrayRef<Value>(dq).slice(0, 4));
        if (tiles == 2)
          kb.mma(dsA[kk], {bf[2], bf[3]},
                 MutableArrayRef<Value>(dq).slice(4, 4));
      }
      for (int64_t r = 0; r < 2; ++r) {
        auto rowIf = scf::IfOp::create(rewriter, op.getLoc(), dqRowOk[r], false);
        OpBuilder::InsertionGuard g2(rewriter);
        rewriter.setInsertionPointToStart(&rowIf.getThenRegion().front());
        // Pairs are 8-byte aligned unless D is odd.
        for (int64_t t = 0; t < tiles; ++t)
          forColumnPair(kb, np * 2 + t, width, d % 2 == 0, dq[t * 4 + 2 * r],
                        dq[t * 4 + 2 * r + 1], [&](int64_t off, ValueRange v) {
                          kb.redAddF32(dqRow[r], (np * 16 + t * 8 + off) * 4,
                                       v);
                        });
      }
    }
    rewriter.eraseOp(op);
    return success();
  }
};

struct StoreAccumulatorLowering : TileOpLowering<ag::StoreAccumulatorOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult
  matchAndRewrite(ag::StoreAccumulatorOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    KernelBuilder kb = builderFor(op, rewriter);
    SmallVector<Value> acc(adaptor.getAcc());
    storeAccumulator(kb, acc, op.getOutput(), op.getBase(), op.getRow(),
                     op.getRowLimit(), op.getAcc().getType().getCols(), {},
                     op.getRowElements(), op.getRowStride());
    rewriter.eraseOp(op);
    return success();
  }
};
} // namespace

void mlir::fa::gpu_lowering::populateBackwardTileLowering(
    RewritePatternSet &patterns, const TypeConverter &converter,
    KernelLowerings &kernels) {
  patterns.add<SharedF32ViewLowering, AsyncCopyRowStatsLowering,
               TransposedScoreModLowering, TransposedMaskModLowering,
               TransposedBoundsLowering, TransposedMaskLowering,
               RecomputeProbsLowering,
               ScoreGradientLowering, StoreTileLowering, ReduceDQLowering,
               StoreAccumulatorLowering>(converter, patterns.getContext(),
                                         kernels);
}
