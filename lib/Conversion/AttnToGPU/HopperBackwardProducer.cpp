//===- HopperBackwardProducer.cpp - wgmma backward loads --------*- C++ -*-===//
//
// The producer of the wgmma backward (HopperBackward.h): K and V of the key
// block once, then per query tile Q and dO (128 B-swizzled slabs) and the
// tile's LSE and Delta into stage t mod 2. The 256-thread kernel loads with
// cp.async, one tile ahead; the warp-specialised kernel's producer
// warpgroup loads by TMA and plain loads, each slot's data completing on its
// queryFull mbarrier.
//
//===----------------------------------------------------------------------===//

#include "HopperBackward.h"

using namespace mlir;
using namespace mlir::fa;
using namespace mlir::fa::gpu_lowering;

//===----------------------------------------------------------------------===//
// cp.async, all 256 threads
//===----------------------------------------------------------------------===//

void HopperBackward::loadKeyValueAsync() {
  const int64_t bkv = plan.blockKV;
  kb.copyTileAsyncSwizzled(kMem, kT.headBase(kb, batch, kvHead), keyBegin, nk,
                           bkv, plan.headDim, kb.idx(0), kT.rowStride);
  kb.copyTileAsyncSwizzled(vMem, vT.headBase(kb, batch, kvHead), keyBegin, nk,
                           bkv, plan.headDimV, kb.idx(layout.vBase() / 2),
                           vT.rowStride);
}

void HopperBackward::loadQueryTileAsync(Value head, Value qBegin,
                                        Value stage) {
  const int64_t d = plan.headDim, dv = plan.headDimV, bq = plan.blockQ;
  kb.copyTileAsyncSwizzled(
      qMem, qT.headBase(kb, batch, head), qBegin, nq, bq, d,
      kb.add(kb.mul(stage, layout.qBytes() / 2), layout.qBase() / 2),
      qT.rowStride);
  kb.copyTileAsyncSwizzled(
      doMem, doT.headBase(kb, batch, head), qBegin, nq, bq, dv,
      kb.add(kb.mul(stage, layout.doBytes() / 2), layout.doBase() / 2),
      doT.rowStride);
  kb.copyRowStatsAsync(stats, lseMem, deltaMem, queryRowsBaseOf(head), qBegin,
                       nq, bq, [&] {
    return kb.add(kb.add(kb.mul(stage, 2 * bq), layout.statsFloat()), kb.tid);
  });
  kb.commitAsync();
}

void HopperBackward::prefetchQueryTile(Value next) {
  ifThen(kb.lt(next, tileCount), [&] {
    loadQueryTileAsync(headOf(next), qBeginOf(next),
                       kb.remui(next, layout.stages()));
  });
}

void HopperBackward::publishQueryTile() {
  // wgmma reads shared memory through the async proxy: wait for this
  // thread's copies, fence, then the barrier makes every thread's visible.
  kb.waitAsync(0);
  fenceProxyAsyncShared();
  gpu::BarrierOp::create(b, loc);
}

//===----------------------------------------------------------------------===//
// The warp-specialised producer: TMA and plain loads on the mbarrier ring
//===----------------------------------------------------------------------===//

Value HopperBackward::waitForSlot32(int64_t first, Value t, Value slot32,
                                    int64_t round) {
  // Tile t's round is t / 2 (two slots).
  const BarrierRing ring{layout.stages()};
  Value slot = kb.toIndex(slot32);
  waitBarrier(kb, barriers, first, slot,
              round ? ring.emptyParity32(kb, t) : ring.fullParity32(kb, t));
  return slot;
}

void HopperBackward::emitTmaLoads() {
  const int64_t bq = plan.blockQ, bkv = plan.blockKV;
  ifThen(kb.eq(kb.tid, kb.idx(0)), [&] {
    // Kernel parameters (grid constants): prefetched, no proxy fence.
    for (Value map : {qMap, kMap, vMap, doMap})
      prefetchTensorMap(kb, map);
    ifThen(hasTiles, [&] {
      Value keyValueFull = kb.idx(BackwardBarriers::keyValueFull);
      Value keyRow = packedKeyRow(keyBegin);
      tmaLoadTile(kb, barriers, kMap, bkv, boxCols(plan.headDim), kb.idx(0),
                  keyRow, {kvHead, tmaBatch()}, keyValueFull);
      tmaLoadTile(kb, barriers, vMap, bkv, boxCols(plan.headDimV),
                  kb.idx(layout.vBase()), keyRow, {kvHead, tmaBatch()},
                  keyValueFull);
    });
    forEachTile32([&](Value t, Value slot32, Value qTile, Value head) {
      Value slot =
          waitForSlot32(BackwardBarriers::queryEmpty, t, slot32, /*round=*/1);
      Value qHead = kb.toIndex(head);
      // (A varlen tile's rows past its sequence are the next one's: the
      // consumers mask them as rows past Nq.)
      Value qRow = kb.toIndex(queryRow32(mul32(qTile, kb.c32(bq))));
      // fp8: the transposers wait for the tiles, then complete queryFull.
      Value full = kb.add(slot, plan.isFp8() ? BackwardBarriers::queryLoaded
                                             : BackwardBarriers::queryFull);
      tmaLoadTile(kb, barriers, qMap, bq, boxCols(plan.headDim), qStageOf(slot),
                  qRow, {qHead, tmaBatch()}, full);
      tmaLoadTile(kb, barriers, doMap, bq, boxCols(plan.headDimV),
                  doStageOf(slot), qRow, {qHead, tmaBatch()}, full);
    });
  });
}

void HopperBackward::emitRowStatsLoads() {
  ifThen(kb.eq(kb.warp, kb.idx(2)), [&] {
    Value lane = kb.toI32(kb.lane);
    Value deltaFactor =
        scaledDelta() ? arith::NegFOp::create(b, loc, scale) : Value();
    forEachTile32([&](Value t, Value slot32, Value qTile, Value head) {
      Value slot =
          waitForSlot32(BackwardBarriers::queryEmpty, t, slot32, /*round=*/1);
      storeRowStats(lane, slot32, qTile, head, deltaFactor);
      arriveBarrier(kb, barriers, BackwardBarriers::queryFull, slot);
    });
  });
}

void HopperBackward::storeRowStats(Value lane, Value slot32, Value qTile,
                                   Value head, Value deltaFactor,
                                   double lseShift) {
  // Lane l copies rows l and l + 32 of the tile; past Nq it reads the
  // clamped row 0 and stores zero. All loads are issued before the first
  // store so their latencies overlap.
  const int64_t bq = plan.blockQ;
  Value qRowsBase = rowsBase32(head);
  Value qBegin = mul32(qTile, kb.c32(bq));
  SmallVector<Value> vals, ats;
  for (int64_t i = 0; i < bq / 32; ++i) {
    Value r = add32(lane, kb.c32(i * 32));
    Value row = add32(qBegin, r);
    Value valid =
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, row, nq32);
    Value src = kb.toIndex(add32(
        qRowsBase, arith::SelectOp::create(b, loc, valid, row, kb.c32(0))));
    Value at = kb.toIndex(add32(mul32(slot32, kb.c32(2 * bq)),
                                add32(r, kb.c32(layout.statsFloat()))));
    for (auto [mem, off] :
         {std::pair{lseMem, int64_t(0)}, std::pair{deltaMem, bq}}) {
      Value v = memref::LoadOp::create(b, loc, mem, ValueRange{src});
      if (off && deltaFactor)
        v = arith::MulFOp::create(b, loc, v, deltaFactor);
      if (!off && lseShift != 0)
        v = arith::SubFOp::create(b, loc, v, kb.f32(lseShift));
      if (!off)
        v = kb.softmaxMath().exponentAddend(v);
      vals.push_back(kb.select(valid, v, kb.f32(0)));
      ats.push_back(kb.add(at, off));
    }
  }
  for (auto [v, at] : llvm::zip_equal(vals, ats))
    memref::StoreOp::create(b, loc, v, stats, ValueRange{at});
}
