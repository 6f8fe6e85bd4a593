//===- HopperBackwardFp8.cpp - the wgmma backward in e4m3 -------*- C++ -*-===//
//
// The fp8 backward (D = Dv = 128) on the warp-specialised kernel
// (HopperBackward.h): Q, K, V and dO in e4m3 with descale factors per
// (batch, key head), every product an e4m3 wgmma, whose shared operands must
// be K-major:
//   Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ   the TMA tiles as they are (k = D)
//   dV += Pᵀ·dO, dK += dSᵀ·Q Pᵀ, dSᵀ packed to e4m3 A registers (queries in
//                            packFp8A's order), B = dOᵀ, Qᵀ: each query
//                            tile transposed by producer warps 2-3
//   dQ = dS·K                dS stored as e4m3 [queries][keys], B = Kᵀ
//                            (transposed once), keys in Kᵀ's order
// The descales fold into the scores' scale, into dP (Delta is divided by
// descale_do·descale_v as the statistics warp loads it, and the gradient
// factor takes it), and into the epilogues. P goes to e4m3 times 2^8 (a
// long row's normalised P would sit among the subnormals). dS has
// no known range: each tile's |dS| maximum over the CTA picks a power of two
// 2^(e−127) that puts it in [128, 256); dQ (one tile's) takes 2^(127−e) back,
// dK sums over tiles at the smallest scale seen so far (rescaled when a
// tile needs a smaller one).
//
//===----------------------------------------------------------------------===//

#include "HopperBackward.h"
#include "HopperFp8.h"

#include "fa/Dialect/AttnGPU/IR/AttnGPU.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::fa;
using namespace mlir::fa::gpu_lowering;

namespace {
/// The transposing warps of the producer warpgroup (warp 0 holds the TMA
/// thread, warp 1 the dQ reducer's).
constexpr int64_t kFirstTransposer = 2, kTransposers = 2;
/// Biased f32 exponents: the largest finite one, and that of a dS scale
/// 2^(e−127) for a maximum of biased exponent x, 2^(7−(x−127)).
constexpr int64_t kMaxExponent = 254, kScaleExponentBias = 261;
/// P ≤ 1 enters dV's product as P·2^8 (below e4m3's 448): a normalised P of
/// a long row would sit among e4m3's subnormals. The statistics warp stores
/// LSE − 8·ln 2, so the recomputed P comes out scaled.
constexpr double kPScale = 256.0;
} // namespace

/// The f32 2^(e − 127) of a biased exponent e (i32) in [1, 254].
static Value powerOfTwo(KernelBuilder &kb, Value e) {
  Value bits = arith::ShLIOp::create(kb.b, kb.loc, e, kb.c32(23));
  return arith::BitcastOp::create(kb.b, kb.loc, kb.b.getF32Type(), bits);
}

/// factor·2^(e − 127), at most the largest finite f32: an all-zero tile
/// takes e = 254, and 0·inf would be NaN.
static Value scaleOf(KernelBuilder &kb, Value factor, Value e) {
  Value x = arith::MulFOp::create(kb.b, kb.loc, factor, powerOfTwo(kb, e));
  return arith::MinimumFOp::create(kb.b, kb.loc, x,
                                   kb.f32(std::numeric_limits<float>::max()));
}

/// One PTX instruction of i32 operands and result (`text` names them $1…,
/// the result $0); warp-collective ones (`sideEffects`) stay where they are.
static Value ptxI32(KernelBuilder &kb, StringRef text, ValueRange operands,
                    bool sideEffects) {
  std::string constraints = "=r";
  for (size_t i = 0; i < operands.size(); ++i)
    constraints += ",r";
  return inlinePtx(kb.b, kb.loc, kb.b.getI32Type(), text, operands, constraints,
                   sideEffects);
}

static Value clampExponent(KernelBuilder &kb, Value e) {
  Value lo = arith::MaxSIOp::create(kb.b, kb.loc, e, kb.c32(1));
  return arith::MinSIOp::create(kb.b, kb.loc, lo, kb.c32(kMaxExponent));
}

static SmallVector<Value> scaled(KernelBuilder &kb, ArrayRef<Value> values,
                                 Value factor) {
  SmallVector<Value> out;
  for (Value v : values)
    out.push_back(arith::MulFOp::create(kb.b, kb.loc, v, factor));
  return out;
}

Value HopperBackward::qtStageOf(Value stage) {
  return kb.add(kb.mul(stage, layout.transposedBytes(plan.headDim)),
                layout.qtBase());
}

Value HopperBackward::dotStageOf(Value stage) {
  return kb.add(kb.mul(stage, layout.transposedBytes(plan.headDimV)),
                layout.dotBase());
}

void HopperBackward::loadDescales() {
  KernelParams params = backwardMainParams(b.getContext(), plan);
  Value at = kb.add(kb.mul(batch, kvHeads), kvHead);
  auto load = [&](int i) {
    return memref::LoadOp::create(b, loc, param(params.descaleParam + i),
                                  ValueRange{at})
        .getResult();
  };
  descaleQ = load(0);
  descaleK = load(1);
  descaleV = load(2);
  descaleDo = load(3);
}

//===----------------------------------------------------------------------===//
// The transposing warps
//===----------------------------------------------------------------------===//

void HopperBackward::emitFp8Transposes() {
  const int64_t bq = plan.blockQ, d = plan.headDim, dv = plan.headDimV;
  auto transpose = [&](Value from, Value to, int64_t rows, int64_t cols) {
    attn_gpu::TransposeFp8TileOp::create(b, loc, kb.smem, from, to, rows, cols,
                                         kFirstTransposer, kTransposers);
  };
  Value isTransposer = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::uge,
                                             kb.warp, kb.idx(kFirstTransposer));
  ifThen(isTransposer, [&] {
    ifThen(hasTiles, [&] {
      waitBarrier(kb, barriers, BackwardBarriers::keyValueFull, kb.idx(0),
                  phaseParity(kb, kb.idx(0)));
      transpose(kb.idx(0), ktBase(), plan.blockKV, d);
      fenceProxyAsyncShared();
      arriveBarrier(kb, barriers, BackwardBarriers::keyTransposed, kb.idx(0));
    });
    // Delta over dP's factor: dSᵀ's gradient factor carries the factor.
    loadDescales();
    Value dpFactor = arith::MulFOp::create(b, loc, descaleDo, descaleV);
    Value deltaFactor = arith::DivFOp::create(b, loc, kb.f32(1), dpFactor);
    Value isStatsWarp = kb.eq(kb.warp, kb.idx(kFirstTransposer));
    Value lane = kb.toI32(kb.lane);
    const BarrierRing ring{layout.stages()};
    forEachTile32([&](Value t, Value slot32, Value qTile, Value head) {
      Value slot = kb.toIndex(slot32);
      // The slot was free when the TMA thread loaded it.
      waitBarrier(kb, barriers, BackwardBarriers::queryLoaded, slot,
                  ring.fullParity32(kb, t));
      ifThen(isStatsWarp, [&] {
        storeRowStats(lane, slot32, qTile, head, deltaFactor,
                      std::log(kPScale));
      });
      transpose(qStageOf(slot), qtStageOf(slot), bq, d);
      transpose(doStageOf(slot), dotStageOf(slot), bq, dv);
      fenceProxyAsyncShared();
      arriveBarrier(kb, barriers, BackwardBarriers::queryFull, slot);
    });
  });
}

//===----------------------------------------------------------------------===//
// The consumers
//===----------------------------------------------------------------------===//

Value HopperBackward::tileScaleExponent(ArrayRef<Value> ds, Value factor,
                                        Value dsBuffer) {
  // This thread's |dS·factor| maximum by a pairwise tree (a chain of 32
  // would be as long as the rest of the tile's softmax), the warp's by one
  // redux of the f32 bits (non-negative floats order as integers), then the
  // CTA's by an atomic max in the buffer's word, which the consumer thread 0
  // clears after the tile's dS barrier.
  SmallVector<Value> level;
  for (Value v : ds)
    level.push_back(kb.maxf(v, arith::NegFOp::create(b, loc, v)));
  while (level.size() > 1) {
    SmallVector<Value> next;
    for (size_t i = 0; i + 1 < level.size(); i += 2)
      next.push_back(kb.maxf(level[i], level[i + 1]));
    if (level.size() % 2)
      next.push_back(level.back());
    level = std::move(next);
  }
  Value m = arith::MulFOp::create(b, loc, level.front(), factor);
  Value bits = ptxI32(
      kb, "redux.sync.max.u32 $0, $1, 0xffffffff;",
      ValueRange{arith::BitcastOp::create(b, loc, b.getI32Type(), m)}, true);
  Value buffer =
      kb.divui(kb.sub(dsBuffer, kb.idx(layout.dsBase())), layout.dsBytes());
  Value word = kb.add(kb.mul(buffer, 4), layout.amaxBase());
  ifThen(kb.eq(kb.lane, kb.idx(0)), [&] {
    Value addr = arith::AddIOp::create(
        b, loc,
        arith::TruncIOp::create(b, loc, b.getI32Type(), sharedAddress(kb)),
        kb.toI32(word));
    inlinePtx(b, loc, "red.shared.max.u32 [$0], $1;", ValueRange{addr, bits},
              "r,r,~{memory}");
  });
  namedBarrier(b, loc, "bar.sync", kAmaxBarrier, 256);
  // (Through the f32 view of the statistics: its bits.)
  Value amax = arith::BitcastOp::create(
      b, loc, b.getI32Type(),
      memref::LoadOp::create(b, loc, stats, ValueRange{kb.divui(word, 4)}));
  Value exponent = arith::AndIOp::create(
      b, loc, arith::ShRUIOp::create(b, loc, amax, kb.c32(23)), kb.c32(0xff));
  return clampExponent(
      kb, arith::SubIOp::create(b, loc, kb.c32(kScaleExponentBias), exponent));
}

void HopperBackward::storeDSFp8(ArrayRef<Value> ds, Value scale, Value dsBuffer,
                                Value keyRow0) {
  // Lane (g, t) holds dSᵀ at keys g, g + 8 of the warp's 16 and queries
  // 8n + 2t, +1 of n8 tile n. Kᵀ holds key 2h + {0, 1, 8, 9} at bytes
  // 4h..4h+3 of the 16 (HopperFp8.h), so lanes g = 2h and 2h + 1 (partners
  // by xor 4 of the lane id) make one word of a query row between them: the
  // even lane that of query 2t, the odd one that of 2t + 1. Each packs its
  // four as bytes (keys g, g + 8 at query 2t; then at 2t + 1) and swaps the
  // word with its partner; one byte permute of the two words makes the row's
  // word. Rows are 128 B swizzled (16 B chunk c of row q at c ^ (q mod 8));
  // a store's lanes hit 8 rows × 4 words, 32 distinct banks.
  const int64_t bq = plan.blockQ;
  Value odd = kb.eq(kb.remui(kb.groupId, 2), kb.idx(1));
  Value row0 = kb.add(kb.mul(kb.threadInGroup, 2), kb.remui(kb.groupId, 2));
  Value chunk = kb.divui(keyRow0, 16);
  Value inChunk = kb.mul(kb.divui(kb.groupId, 2), 4);
  // (own, partner's) bytes: even {0, 4, 1, 5}, odd {6, 2, 7, 3}.
  Value selector =
      arith::SelectOp::create(b, loc, odd, kb.c32(0x3726), kb.c32(0x5140));
  SmallVector<Value> x = scaled(kb, ds, scale);
  for (int64_t n = 0; n < bq / 8; ++n) {
    Value own =
        packE4M3x4(kb, x[4 * n], x[4 * n + 2], x[4 * n + 1], x[4 * n + 3]);
    Value partner = kb.shuffleXor(own, 4);
    Value word = ptxI32(kb, "prmt.b32 $0, $1, $2, $3;",
                        ValueRange{own, partner, selector}, false);
    Value row = kb.add(row0, n * 8);
    Value swizzled = arith::XOrIOp::create(b, loc, chunk, kb.remui(row, 8));
    Value bytes = kb.add(kb.add(dsBuffer, kb.mul(row, kSlabRowBytes)),
                         kb.add(kb.mul(swizzled, 16), inChunk));
    memref::StoreOp::create(
        b, loc, arith::BitcastOp::create(b, loc, b.getF32Type(), word), stats,
        ValueRange{kb.divui(bytes, 4)});
  }
}

Value HopperBackward::issueDQFp8(Value base, Value warpgroup, Value dsBuffer) {
  // A: dS rows of 128 B (one k32 step per 32 keys); B: the warpgroup's D/2
  // rows of Kᵀ.
  const int64_t bkv = plan.blockKV, half = plan.headDim / 2;
  Value ktRows = kb.add(kb.mul(warpgroup, half * kSlabRowBytes), ktBase());
  SmallVector<Value> dsDescs, ktDescs;
  for (int64_t kk = 0; kk < bkv / 32; ++kk) {
    dsDescs.push_back(wgmmaDescriptor(kb, base, kb.add(dsBuffer, kk * 32), 16));
    ktDescs.push_back(wgmmaDescriptor(kb, base, kb.add(ktRows, kk * 32), 16));
  }
  NVVM::WgmmaFenceAlignedOp::create(b, loc);
  Value acc = buildWgmmaQK(kb, half, dsDescs, ktDescs);
  NVVM::WgmmaGroupSyncAlignedOp::create(b, loc);
  return acc;
}

Value HopperBackward::issueTileProductsFp8(const ConsumerTile &tile,
                                           Value stage, Value dsBuffer,
                                           SmallVector<Value> &dV,
                                           SmallVector<Value> &dK,
                                           Value &dkExp) {
  using attn_gpu::FragmentLayout;
  const int64_t bq = plan.blockQ;
  Value base = tile.descriptorBase;
  SmallVector<Value> p, dp;
  issuePAndDP(tile, stage, p, dp);
  // p is Pᵀ·2^8 (the LSE stored 8·ln 2 low). dSᵀ = Pᵀ∘(dPᵀ·c − Delta)·scale
  // = (Pᵀ·2^8)∘(dPᵀ − Delta/c)·(scale·c·2^-8), c = descale_do·descale_v
  // (Delta/c is what the statistics warp stored).
  Value factor = arith::MulFOp::create(
      b, loc, arith::MulFOp::create(b, loc, scale, kb.f32(1.0 / kPScale)),
      arith::MulFOp::create(b, loc, descaleDo, descaleV));
  Value probs = fragmentOf(b, loc, p, bq, FragmentLayout::Accumulator);
  // (The factor joins each copy's power of two: one multiply a score.)
  Value ds = attn_gpu::ScoreGradientOp::create(
      b, loc, probs.getType(), probs,
      fragmentOf(b, loc, dp, bq, FragmentLayout::Accumulator), Value(), stats,
      rowStatsOf(stage), Value(), Value(), /*prescaled=*/true);
  SmallVector<Value> dsValues = laneValues(b, loc, ds);

  Value e = tileScaleExponent(dsValues, factor, dsBuffer);
  storeDSFp8(dsValues, scaleOf(kb, factor, e), dsBuffer, tile.keyRow0);
  // dK's scale falls to the tile's when the tile needs a smaller one; dK
  // (complete: the last tile waited for its dQ) follows by 2^(e − E).
  Value lower =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, e, dkExp);
  Value step = clampExponent(
      kb, arith::AddIOp::create(b, loc, kb.c32(127),
                                arith::SubIOp::create(b, loc, e, dkExp)));
  // (A warp-uniform branch: most tiles keep dK's scale.)
  auto rescale = scf::IfOp::create(b, loc, ValueRange(dK).getTypes(), lower,
                                   /*withElseRegion=*/true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(rescale.thenBlock());
    scf::YieldOp::create(b, loc, scaled(kb, dK, powerOfTwo(kb, step)));
    b.setInsertionPointToStart(rescale.elseBlock());
    scf::YieldOp::create(b, loc, dK);
  }
  dK.assign(rescale.getResults().begin(), rescale.getResults().end());
  dkExp = arith::SelectOp::create(b, loc, lower, e, dkExp);

  SmallVector<Value> pA = packFp8A(kb, p);
  SmallVector<Value> dsA =
      packFp8A(kb, scaled(kb, dsValues, scaleOf(kb, factor, dkExp)));
  SmallVector<Value> dotDescs, qtDescs;
  for (int64_t kk = 0; kk < bq / 32; ++kk) {
    dotDescs.push_back(
        wgmmaDescriptor(kb, base, kb.add(dotStageOf(stage), kk * 32), 16));
    qtDescs.push_back(
        wgmmaDescriptor(kb, base, kb.add(qtStageOf(stage), kk * 32), 16));
  }
  NVVM::WgmmaFenceAlignedOp::create(b, loc);
  dV = buildWgmmaPV(kb, pA, dotDescs, dV);
  dK = buildWgmmaPV(kb, dsA, qtDescs, dK);
  NVVM::WgmmaGroupSyncAlignedOp::create(b, loc);
  return e;
}

void HopperBackward::emitFp8Consumers() {
  const BarrierRing ring{layout.stages()};
  loadDescales();
  scaleLog2 = softmaxScaleLog2(
      kb,
      arith::MulFOp::create(b, loc, scale,
                            arith::MulFOp::create(b, loc, descaleQ, descaleK)));
  ifThen(hasTiles, [&] {
    waitBarrier(kb, barriers, BackwardBarriers::keyValueFull, kb.idx(0),
                phaseParity(kb, kb.idx(0)));
    waitBarrier(kb, barriers, BackwardBarriers::keyTransposed, kb.idx(0),
                phaseParity(kb, kb.idx(0)));
  });
  SmallVector<Value> init(plan.headDim / 2 + plan.headDimV / 2, kb.f32(0));
  init.push_back(kb.c32(kMaxExponent)); // dK's scale exponent
  SmallVector<Value> results = forEachConsumerTile(
      init,
      [&](const ConsumerTile &tile, SmallVector<Value> &dK,
          SmallVector<Value> &dV, SmallVector<Value> &extra) {
        Value t = tile.index;
        Value slot = ring.slot(kb, t);
        Value dsBuffer = dsBufferOf(t);
        waitBarrier(kb, barriers, BackwardBarriers::queryFull, slot,
                    ring.fullParity(kb, t));
        Value e = issueTileProductsFp8(tile, slot, dsBuffer, dV, dK, extra[0]);
        fenceProxyAsyncShared();
        namedBarrier(b, loc, "bar.sync", 1, 256);
        // Every consumer has read the tile's maximum: clear it for the
        // buffer's next tile.
        ifThen(kb.eq(kb.tid, kb.idx(128)), [&] {
          Value buffer = kb.remui(t, layout.dsBuffers());
          memref::StoreOp::create(
              b, loc, kb.f32(0), stats,
              ValueRange{kb.add(buffer, layout.amaxBase() / 4)});
        });
        Value dqAcc = issueDQFp8(tile.descriptorBase, tile.warpgroup, dsBuffer);
        NVVM::WgmmaWaitGroupSyncOp::create(b, loc, 0);
        arriveBarrier(kb, barriers, BackwardBarriers::queryEmpty, slot);
        Value dqFactor = arith::MulFOp::create(
            b, loc, descaleK,
            powerOfTwo(kb,
                       arith::SubIOp::create(b, loc, kb.c32(kMaxExponent), e)));
        SmallVector<Value> dq = scaled(
            kb, fenceOperands(b, loc, laneValues(b, loc, dqAcc)), dqFactor);
        waitBarrier(kb, barriers, BackwardBarriers::dqEmpty, slot,
                    ring.emptyParity(kb, t));
        storeDQTile(dq, tile.warpgroup, slot);
        fenceProxyAsyncShared();
        arriveBarrier(kb, barriers, BackwardBarriers::dqFull, slot);
      },
      /*extraCount=*/1);
  // dK = dSᵀ·Q at scale 2^(E−127) times descale_q; dV = (Pᵀ·2^8)·dO times
  // descale_do·2^-8.
  Value dkExp = results.pop_back_val();
  const int64_t dkValues = plan.headDim / 2;
  Value dkFactor = arith::MulFOp::create(
      b, loc, descaleQ,
      powerOfTwo(kb,
                 arith::SubIOp::create(b, loc, kb.c32(kMaxExponent), dkExp)));
  SmallVector<Value> grads =
      scaled(kb, ArrayRef<Value>(results).take_front(dkValues), dkFactor);
  Value dvFactor =
      arith::MulFOp::create(b, loc, descaleDo, kb.f32(1.0 / kPScale));
  grads.append(
      scaled(kb, ArrayRef<Value>(results).drop_front(dkValues), dvFactor));
  storeDKAndDV(grads);
}
