//===- AttnTile.cpp - tile attn.online_attention ----------------*- C++ -*-===//
//
// Seed 4.2.1: Q is cut into blocks of block-q rows, each owned by one
// iteration of a parallel loop; K/V into blocks of block-kv rows visited in
// order by a loop that carries the running (acc, m, l) of the Q block.
//
//===----------------------------------------------------------------------===//

#include "fa/Dialect/Attn/Transforms/Passes.h"
#include "fa/Dialect/Attn/Transforms/Transforms.h"
#include "Utils.h"
#include "Varlen.h"

namespace mlir::fa::attn {
#define GEN_PASS_DEF_ATTNTILEPASS
#include "fa/Dialect/Attn/Transforms/Passes.h.inc"
} // namespace mlir::fa::attn

using namespace mlir;
using namespace mlir::fa::attn;
using namespace mlir::fa::attn::detail;

static SmallVector<OpFoldResult> ofrs(ArrayRef<Value> vals,
                                      ArrayRef<OpFoldResult> more = {}) {
  SmallVector<OpFoldResult> r(vals.begin(), vals.end());
  r.append(more.begin(), more.end());
  return r;
}

/// clamp(seqused_k[batch], 0, capacity): the keys a paged sequence sees.
static Value usedKeyCount(OpBuilder &b, Location loc, Value sequsedK,
                          Value batch, Value capacity) {
  Value raw = tensor::ExtractOp::create(b, loc, sequsedK, ValueRange{batch});
  Value used = arith::IndexCastOp::create(b, loc, b.getIndexType(), raw);
  used = arith::MaxSIOp::create(b, loc, used, cIndex(b, loc, 0));
  return arith::MinSIOp::create(b, loc, used, capacity);
}

/// Packed GQA: the G = H / Hkv query heads that share a key head fill one
/// tile, n = max(block-q / G, 1) queries of each.
struct PackedGroup {
  Value group;           // G
  Value queriesPerBlock; // n
  OpFoldResult tileHeads; // G, static where the head counts are
};

/// G and n are computed from tensor.dim even for static head counts (they
/// fold on the CPU): a kernel's tag does not name the head counts, so the
/// GPU lowering must map them to its run-time arguments.
static PackedGroup packedGroup(RewriterBase &rw, Location loc, Value q,
                               Value k, int64_t blockQ) {
  auto heads = [&](Value t) -> Value {
    return tensor::DimOp::create(rw, loc, t, 1);
  };
  Value group = arith::DivUIOp::create(rw, loc, heads(q), heads(k));
  Value perHead = arith::DivUIOp::create(rw, loc, cIndex(rw, loc, blockQ), group);
  perHead = arith::MaxUIOp::create(rw, loc, perHead, cIndex(rw, loc, 1));
  int64_t h = cast<RankedTensorType>(q.getType()).getDimSize(1);
  int64_t hkv = cast<RankedTensorType>(k.getType()).getDimSize(1);
  OpFoldResult tileHeads = group;
  if (!ShapedType::isDynamic(h) && !ShapedType::isDynamic(hkv) && hkv > 0)
    tileHeads = rw.getIndexAttr(h / hkv);
  return {group, perHead, tileHeads};
}

LogicalResult mlir::fa::attn::tileOnlineAttention(RewriterBase &rw,
                                                  OnlineAttentionOp op,
                                                  int64_t blockQ,
                                                  int64_t blockKV,
                                                  bool packGqa) {
  if (blockQ <= 0 || blockKV <= 0)
    return op.emitOpError("expected positive block sizes, got block-q ")
           << blockQ << " and block-kv " << blockKV;
  Location loc = op.getLoc();
  rw.setInsertionPoint(op);
  ScoreSpec spec = op.getScoreSpec();
  Value q = op.getQuery(), k = op.getKey(), v = op.getValue();
  auto qType = cast<RankedTensorType>(q.getType());
  auto kType = cast<RankedTensorType>(k.getType());
  int64_t d = qType.getDimSize(3);
  int64_t dv = cast<RankedTensorType>(v.getType()).getDimSize(3);
  bool varlen = op.isVarlen();
  if (varlen && packGqa)
    return op.emitOpError("expected no packed GQA for a varlen batch");
  Value sequsedK = op.getSequsedK();
  Value batch = dimValue(rw, loc, q, 0), heads = dimValue(rw, loc, q, 1);
  Value nq = dimValue(rw, loc, q, 2), nk = dimValue(rw, loc, k, 2);
  // Varlen: the token totals, and a forall over the sequences whose query
  // blocks run to the longest one.
  Value totalQ = nq, totalK = nk, longestQ = nq;
  if (varlen) {
    batch = sequenceCount(rw, loc, op.getCuSeqlensQ());
    longestQ = longestSequence(rw, loc, op.getCuSeqlensQ(), totalQ);
  }
  Value group = arith::DivUIOp::create(rw, loc, heads, dimValue(rw, loc, k, 1));
  // A tile's queries of each of its heads: block-q of one head, or
  // max(block-q / G, 1) of each of the G heads of a key head (packed GQA).
  std::optional<PackedGroup> packed;
  if (packGqa)
    packed = packedGroup(rw, loc, q, k, blockQ);
  Value rowsPerBlock = packed ? packed->queriesPerBlock : cIndex(rw, loc, blockQ);
  Value qBlocks = arith::CeilDivUIOp::create(rw, loc, longestQ, rowsPerBlock);
  ValueRange offsets = op.getOffsets(), lengths = op.getLengths();
  Value nqAll = lengths[0], nkAll = lengths[1];
  bool masked = op.getApplyMask() && spec.hasMask();

  Value parallelHeads = packed ? dimValue(rw, loc, k, 1) : heads;
  auto forall = scf::ForallOp::create(
      rw, loc, ofrs({batch, parallelHeads, qBlocks}),
      ValueRange{op.getAcc(), op.getMax(), op.getSum()}, std::nullopt);
  if (packed)
    forall->setAttr(kPackGqaAttr, rw.getUnitAttr());
  rw.setInsertionPointToStart(forall.getBody());
  ValueRange ivs = forall.getInductionVars();
  Value b = ivs[0], h = ivs[1], qb = ivs[2];
  ValueRange outs = forall.getRegionIterArgs();
  // Where this tile's rows live: batch b, rows from 0 (dense), or batch 0,
  // rows from the sequence's start (varlen, whose lengths are its own).
  Value sliceBatch = b, qStart, kStart;
  if (varlen) {
    SequenceSpan spanQ = sequenceSpan(rw, loc, op.getCuSeqlensQ(), b, totalQ);
    SequenceSpan spanK = sequenceSpan(rw, loc, op.getCuSeqlensK(), b, totalK);
    sliceBatch = cIndex(rw, loc, 0);
    qStart = spanQ.start;
    kStart = spanK.start;
    nq = nqAll = spanQ.length;
    nk = nkAll = spanK.length;
  }
  if (sequsedK) {
    // A paged sequence's keys end at its own count: the whole problem's
    // Nk for its masks, and this op's keys (from offsets[3]) up to it.
    Value batchAbs = arith::AddIOp::create(rw, loc, offsets[0], b);
    nkAll = usedKeyCount(rw, loc, sequsedK, batchAbs, nkAll);
    Value rest = arith::SubIOp::create(rw, loc, nkAll, offsets[3]);
    nk = arith::MinSIOp::create(
        rw, loc, arith::MaxSIOp::create(rw, loc, rest, cIndex(rw, loc, 0)), nk);
  }
  auto rowIn = [&](Value start, Value row) -> Value {
    return start ? arith::AddIOp::create(rw, loc, start, row).getResult() : row;
  };
  // Unpacked tiles build their constants where they always have (the GPU
  // lowering clones these ops into its kernels).
  auto blockRows = [&]() -> Value {
    return packed ? rowsPerBlock : cIndex(rw, loc, blockQ);
  };
  Value q0 = arith::MulIOp::create(rw, loc, qb, blockRows());
  OpFoldResult qs;
  std::optional<int64_t> staticRows = getConstantIntValue(rowsPerBlock);
  Value qRow = q0;
  if (varlen) {
    // Blocks past a shorter sequence's end hold no rows and see no keys.
    qs = rowsInBlock(rw, loc, nq, q0, blockRows());
    qRow = rowIn(qStart, arith::MinSIOp::create(rw, loc, q0, nq));
  } else if (staticRows)
    qs = blockExtent(rw, loc, nq, qType.getDimSize(2), *staticRows, q0);
  else
    qs = arith::MinSIOp::create(rw, loc, rowsPerBlock,
                                arith::SubIOp::create(rw, loc, nq, q0))
             .getResult();
  // Packed: the forall's head is the key head hk, the tile's query heads
  // [hk·G, hk·G + G).
  Value hk = packed ? h : arith::DivUIOp::create(rw, loc, h, group).getResult();
  OpFoldResult one = rw.getIndexAttr(1), zeroA = rw.getIndexAttr(0);
  OpFoldResult tileHeads = packed ? packed->tileHeads : one;
  if (packed)
    h = arith::MulIOp::create(rw, loc, hk, packed->group);
  auto slice = [&](Value src, ArrayRef<OpFoldResult> offs,
                   ArrayRef<OpFoldResult> sizes) -> Value {
    SmallVector<OpFoldResult> strides(offs.size(), one);
    return tensor::ExtractSliceOp::create(rw, loc, src, offs, sizes, strides);
  };
  SmallVector<OpFoldResult> accOffs = ofrs({sliceBatch, h, qRow}, {zeroA});
  SmallVector<OpFoldResult> accSizes{one, tileHeads, qs, rw.getIndexAttr(dv)};
  SmallVector<OpFoldResult> rowOffs = ofrs({sliceBatch, h, qRow});
  SmallVector<OpFoldResult> rowSizes{one, tileHeads, qs};
  Value qTile = slice(q, accOffs, {one, tileHeads, qs, rw.getIndexAttr(d)});
  Value acc0 = slice(outs[0], accOffs, accSizes);
  Value max0 = slice(outs[1], rowOffs, rowSizes);
  Value sum0 = slice(outs[2], rowOffs, rowSizes);

  // Absolute positions of this Q block, and the range of key blocks whose
  // keys some of its rows can see.
  Value qAbs = arith::AddIOp::create(rw, loc, offsets[2], q0);
  Value qEnd = arith::MinSIOp::create(
      rw, loc,
      arith::AddIOp::create(rw, loc, q0, blockRows()),
      nq);
  Value qAbsEnd = arith::AddIOp::create(rw, loc, offsets[2], qEnd);
  Value bkv = cIndex(rw, loc, blockKV);
  std::pair<Value, Value> band;
  if (masked) {
    // The band in this op's key positions.
    auto [lo, hi] = buildKeyBand(rw, loc, spec, qAbs, qAbsEnd, nqAll, nkAll);
    if (lo)
      band.first = arith::SubIOp::create(rw, loc, lo, offsets[3]);
    if (hi)
      band.second = arith::SubIOp::create(rw, loc, hi, offsets[3]);
  }
  auto [kbBegin, kbEnd] = buildBlockRange(rw, loc, band, nk, blockKV);
  if (varlen) {
    Value noRows = arith::CmpIOp::create(
        rw, loc, arith::CmpIPredicate::eq,
        getValueOrCreateConstantIndexOp(rw, loc, qs), cIndex(rw, loc, 0));
    kbEnd = arith::SelectOp::create(rw, loc, noRows, kbBegin, kbEnd);
  }

  auto loop = scf::ForOp::create(
      rw, loc, kbBegin, kbEnd, cIndex(rw, loc, 1),
      ValueRange{acc0, max0, sum0},
      [&](OpBuilder &fb, Location l, Value kb, ValueRange iter) {
        OpBuilder::InsertionGuard g(rw);
        rw.setInsertionPointToStart(fb.getInsertionBlock());
        Value k0 = arith::MulIOp::create(rw, l, kb, bkv);
        OpFoldResult ks = blockExtent(
            rw, l, nk,
            varlen || sequsedK ? ShapedType::kDynamic : kType.getDimSize(2),
            blockKV, k0);
        SmallVector<OpFoldResult> kOffs =
            ofrs({sliceBatch, hk, rowIn(kStart, k0)}, {zeroA});
        Value kTile = slice(k, kOffs, {one, one, ks, rw.getIndexAttr(d)});
        Value vTile = slice(v, kOffs, {one, one, ks, rw.getIndexAttr(dv)});
        Value kAbs = arith::AddIOp::create(rw, l, offsets[3], k0);
        SmallVector<Value> tileOffsets{
            arith::AddIOp::create(rw, l, offsets[0], b),
            arith::AddIOp::create(rw, l, offsets[1], h), qAbs, kAbs};
        auto makeTile = [&](OpBuilder &tb, bool applyMask) -> Operation * {
          auto tile = OnlineAttentionOp::create(
              tb, l, iter.getTypes(), qTile, kTile, vTile, iter[0], iter[1],
              iter[2], tileOffsets, ValueRange{nqAll, nkAll},
              /*cu_seqlens_q=*/Value(), /*cu_seqlens_k=*/Value(),
              op.getModArgs(), op.getDescaleQ(), op.getDescaleK(),
              op.getDescaleV(), /*seqused_k=*/Value(),
              applyMask ? tb.getUnitAttr() : nullptr, op.getScaleAttr(),
              op.getMaskAttr(), op.getWindowLeftAttr(),
              op.getWindowRightAttr(), op.getWindowSizes());
          cloneScoreMod(op.getScoreMod(), tile.getScoreMod());
          cloneScoreMod(op.getMaskMod(), tile.getMaskMod());
          copyKernelPlan(op, tile);
          return tile;
        };
        Value inside;
        if (masked) {
          Value kAbsEnd = arith::AddIOp::create(
              rw, l, kAbs, getValueOrCreateConstantIndexOp(rw, l, ks));
          inside = buildBlockInsideMask(rw, l, spec, qAbs, qAbsEnd, kAbs,
                                        kAbsEnd, nqAll, nkAll);
        }
        SmallVector<Value> results = buildMaskDispatch(rw, l, inside, makeTile);
        scf::YieldOp::create(rw, l, results);
      });

  copyKernelPlan(op, forall);
  rw.setInsertionPointToStart(forall.getTerminator().getBody());
  auto insert = [&](Value src, Value dest, ArrayRef<OpFoldResult> offs,
                    ArrayRef<OpFoldResult> sizes) {
    SmallVector<OpFoldResult> strides(offs.size(), one);
    tensor::ParallelInsertSliceOp::create(rw, loc, src, dest, offs, sizes,
                                          strides);
  };
  insert(loop.getResult(0), outs[0], accOffs, accSizes);
  insert(loop.getResult(1), outs[1], rowOffs, rowSizes);
  insert(loop.getResult(2), outs[2], rowOffs, rowSizes);
  rw.replaceOp(op, forall.getResults());
  return success();
}

namespace {
struct AttnTilePass final : mlir::fa::attn::impl::AttnTilePassBase<AttnTilePass> {
  using Base::Base;
  void runOnOperation() override {
    SmallVector<OnlineAttentionOp> ops;
    // Only whole problems (or key splits of one) are tiled; tiles already
    // inside a loop stay.
    getOperation().walk([&](OnlineAttentionOp op) {
      if (isUntiledProblem(op))
        ops.push_back(op);
    });
    IRRewriter rw(&getContext());
    // A kernel plan on the op fixes the block sizes for its target.
    for (OnlineAttentionOp op : ops) {
      auto [bq, bkv] =
          plannedBlockSizes(op).value_or(std::make_pair<int64_t, int64_t>(
              blockQ, blockKV));
      bool pack = plannedPackGqa(op).value_or(packGqa);
      if (failed(tileOnlineAttention(rw, op, bq, bkv, pack)))
        return signalPassFailure();
    }
  }
};
} // namespace
