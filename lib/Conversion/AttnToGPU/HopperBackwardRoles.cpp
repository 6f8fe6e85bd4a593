//===- HopperBackwardRoles.cpp - wgmma backward, warpgroups by role -*- C++ -*-===//
//
// The consumers of the wgmma backward above D or Dv = 128
// (KernelPlan::splitRoles; HopperBackward.h). dK and dV of a warpgroup's 64
// keys at D = 256 would take 256 of its 240 registers, so both consumer
// warpgroups take the same 64-key block and split the chain of products:
//   warpgroup 0: Sᵀ = K·Qᵀ, Pᵀ; Pᵀ·d(score)/d(Sᵀ) into the exchange;
//                dV += Pᵀ·dO
//   warpgroup 1: dPᵀ = V·dOᵀ; dSᵀ = (Pᵀ·d(score)/d(Sᵀ))∘(dPᵀ − Delta) into
//                the dSᵀ buffer; dK += dSᵀ·Q
//   both:        dQ = dS·K, D/2 columns each, staged in shared memory over
//                a tile of the query slot that no product reads any more
//                (dqPanelOf; at Dv < D a panel buffer of the stage) and
//                added by the producer into dq_accum's column panels with
//                one bulk reduction each, which frees the slot
// Sᵀ and dPᵀ run side by side, then dV and dK: each warpgroup holds one
// m64 accumulator of D or Dv columns. At D = Dv the two roles issue one
// wgmma sequence on their own operands (emitRoleProducts); at Dv < D each
// role's products sit in its branch (emitPRole, emitDSRole). Per tile,
// named barrier 2 hands the
// exchange from warpgroup 0 to 1 (bar.arrive, bar.sync) and barrier 1
// publishes dSᵀ to both. Warpgroup 0 writes the next tile's exchange only
// after barrier 1, which warpgroup 1 reaches after reading it: one buffer.
//
//===----------------------------------------------------------------------===//

#include "HopperBackward.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

using namespace mlir;
using namespace mlir::fa;
using namespace mlir::fa::gpu_lowering;

Value HopperBackward::exchangeFloat(int64_t j) {
  // Value 4j + i of consumer thread c: float exchangeBase/4 + 512j + 4c + i.
  Value thread = kb.remui(kb.tid, 128);
  return kb.add(kb.mul(thread, 4), layout.exchangeBase() / 4 + j * 512);
}

void HopperBackward::exchangeScaledP(ArrayRef<Value> p, Value derivative) {
  // Pᵀ·d(score)/d(Sᵀ) (·scale without a score_mod), then barrier 2's
  // arrival: warpgroup 1 may read it.
  SmallVector<Value> chain;
  if (derivative)
    chain = laneValues(b, loc, derivative);
  auto f4 = VectorType::get({4}, b.getF32Type());
  for (int64_t j = 0; j < static_cast<int64_t>(p.size()) / 4; ++j) {
    SmallVector<Value> four;
    for (int64_t i = 4 * j; i < 4 * j + 4; ++i)
      four.push_back(arith::MulFOp::create(b, loc, p[i],
                                           chain.empty() ? scale : chain[i]));
    vector::StoreOp::create(
        b, loc, vector::FromElementsOp::create(b, loc, f4, four), stats,
        ValueRange{exchangeFloat(j)}, /*nontemporal=*/false,
        llvm::MaybeAlign(16));
  }
  namedBarrier(b, loc, "bar.arrive", kExchangeBarrier, 256);
}

void HopperBackward::computeDSFromExchange(SmallVector<Value> &dp,
                                           Value stage, Value dsBuffer,
                                           Value keyRow0) {
  // Once warpgroup 0 has arrived: dSᵀ = g∘(dPᵀ − Delta) with g from the
  // exchange, Delta per query column; in place of dPᵀ and into dsBuffer.
  namedBarrier(b, loc, "bar.sync", kExchangeBarrier, 256);
  auto f4 = VectorType::get({4}, b.getF32Type());
  SmallVector<Value> g;
  for (int64_t j = 0; j < static_cast<int64_t>(dp.size()) / 4; ++j) {
    Value four = vector::LoadOp::create(b, loc, f4, stats,
                                        ValueRange{exchangeFloat(j)}, false,
                                        llvm::MaybeAlign(16));
    for (int64_t i = 0; i < 4; ++i)
      g.push_back(
          vector::ExtractOp::create(b, loc, four, ArrayRef<int64_t>{i}));
  }
  computeDS(g, dp, Value(), stage, dsBuffer, keyRow0, /*prescaled=*/true);
}

void HopperBackward::emitPRole(const ConsumerTile &tile, Value stage,
                               SmallVector<Value> &acc) {
  const int64_t dvValues = plan.headDimV / 2;
  Value base = tile.descriptorBase;
  Value sAcc = issueKeyByQuery(base, keyTileOf(kb.idx(0), 0), qStageOf(stage),
                               plan.headDim);
  NVVM::WgmmaWaitGroupSyncOp::create(b, loc, 0);
  SmallVector<Value> s =
      fenceOperands(b, loc, laneValues(b, loc, sAcc));
  Value derivative = computeP(s, tile, stage);
  exchangeScaledP(s, derivative);
  SmallVector<Value> pA = accumulatorToWgmmaA(kb, s);
  SmallVector<Value> doDescs;
  for (int64_t kk = 0; kk < plan.blockQ / 16; ++kk)
    doDescs.push_back(queryTileStepAsB(base, doStageOf(stage), kk));
  SmallVector<Value> dV(acc.begin(), acc.begin() + dvValues);
  NVVM::WgmmaFenceAlignedOp::create(b, loc);
  dV = buildWgmmaPV(kb, pA, doDescs, dV);
  NVVM::WgmmaGroupSyncAlignedOp::create(b, loc);
  NVVM::WgmmaWaitGroupSyncOp::create(b, loc, 0);
  llvm::copy(fenceOperands(b, loc, dV), acc.begin());
}

void HopperBackward::emitDSRole(const ConsumerTile &tile, Value stage,
                                Value dsBuffer, SmallVector<Value> &acc) {
  const int64_t bq = plan.blockQ;
  Value base = tile.descriptorBase;
  Value dpAcc = issueKeyByQuery(base, keyTileOf(kb.idx(0), layout.vBase()),
                                doStageOf(stage), plan.headDimV);
  NVVM::WgmmaWaitGroupSyncOp::create(b, loc, 0);
  SmallVector<Value> dp =
      fenceOperands(b, loc, laneValues(b, loc, dpAcc));
  computeDSFromExchange(dp, stage, dsBuffer, tile.keyRow0);
  SmallVector<Value> dsA = accumulatorToWgmmaA(kb, dp);
  SmallVector<Value> qDescs;
  for (int64_t kk = 0; kk < bq / 16; ++kk)
    qDescs.push_back(queryTileStepAsB(base, qStageOf(stage), kk));
  NVVM::WgmmaFenceAlignedOp::create(b, loc);
  SmallVector<Value> dK = buildWgmmaPV(kb, dsA, qDescs, acc);
  NVVM::WgmmaGroupSyncAlignedOp::create(b, loc);
  NVVM::WgmmaWaitGroupSyncOp::create(b, loc, 0);
  acc = fenceOperands(b, loc, dK);
}

void HopperBackward::emitSplitRoleConsumers() {
  const BarrierRing ring{layout.stages()};
  ifThen(hasTiles, [&] {
    waitBarrier(kb, barriers, BackwardBarriers::keyValueFull, kb.idx(0),
                phaseParity(kb, kb.idx(0)));
  });
  // One accumulator: dV (its first Dv/2 values) in warpgroup 0, dK in 1.
  SmallVector<Value> init(plan.headDim / 2, kb.f32(0));
  SmallVector<Value> results = forEachConsumerTile(
      init, [&](const ConsumerTile &tile, SmallVector<Value> &acc,
                SmallVector<Value> &, SmallVector<Value> &) {
        Value t = tile.index;
        Value slot = ring.slot(kb, t);
        Value dsBuffer = dsBufferOf(t);
        waitBarrier(kb, barriers, BackwardBarriers::queryFull, slot,
                    ring.fullParity(kb, t));
        if (plan.headDim == plan.headDimV)
          emitRoleProducts(tile, slot, dsBuffer, acc);
        else
          emitRoleBranches(tile, slot, dsBuffer, acc);
        // dSᵀ (generic stores, read by wgmma) to both warpgroups, then dQ.
        fenceProxyAsyncShared();
        namedBarrier(b, loc, "bar.sync", 1, 256);
        SmallVector<Value> dqAcc =
            issueDQ(tile.descriptorBase, tile.warpgroup, dsBuffer);
        NVVM::WgmmaWaitGroupSyncOp::create(b, loc, 0);
        stageDQInQuerySlot(dqAcc, tile.warpgroup, slot);
      });
  // dV from warpgroup 0, dK from warpgroup 1, of the same keys.
  const int64_t d = plan.headDim, dv = plan.headDimV;
  Value keyRow = kb.add(keyBegin, keyRow0Of(consumerWarpgroup()));
  auto store = scf::IfOp::create(b, loc, kb.eq(consumerWarpgroup(), kb.idx(0)),
                                 /*withElseRegion=*/true);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(&store.getThenRegion().front());
  storeGradient(ArrayRef<Value>(results).take_front(dv / 2), dv, dvMem,
                headBase(dvT, kvHead, seqStartK), keyRow, dvT.rowStride);
  b.setInsertionPointToStart(&store.getElseRegion().front());
  storeGradient(results, d, dkMem, headBase(dkT, kvHead, seqStartK), keyRow,
                dkT.rowStride);
}

void HopperBackward::emitRoleBranches(const ConsumerTile &tile, Value stage,
                                      Value dsBuffer,
                                      SmallVector<Value> &acc) {
  auto roles = scf::IfOp::create(b, loc, TypeRange(ValueRange(acc)),
                                 kb.eq(tile.warpgroup, kb.idx(0)),
                                 /*withElseRegion=*/true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&roles.getThenRegion().front());
    SmallVector<Value> mine = acc;
    emitPRole(tile, stage, mine);
    scf::YieldOp::create(b, loc, mine);
    b.setInsertionPointToStart(&roles.getElseRegion().front());
    mine = acc;
    emitDSRole(tile, stage, dsBuffer, mine);
    scf::YieldOp::create(b, loc, mine);
  }
  acc.assign(roles.getResults().begin(), roles.getResults().end());
}

Value HopperBackward::dqPanelOf(int64_t p, Value slot) {
  if (plan.headDim == plan.headDimV)
    return p == 0 ? doStageOf(slot) : qStageOf(slot);
  if (p == 0)
    return qStageOf(slot);
  return kb.add(kb.mul(slot, layout.dqPanelBytes()), layout.dqPanelBase());
}

void HopperBackward::emitRoleProducts(const ConsumerTile &tile, Value stage,
                                      Value dsBuffer,
                                      SmallVector<Value> &acc) {
  // D = Dv: the two roles' products have one shape each, so both
  // warpgroups issue the same wgmma chains on their own operands, and
  // dV / dK stay in flight past barrier 1 and under dQ (no wgmma inside the
  // role branch, whose join would otherwise wait for them).
  Value base = tile.descriptorBase;
  Value isP = kb.eq(tile.warpgroup, kb.idx(0));
  Value keyTile = kb.select(isP, keyTileOf(kb.idx(0), 0),
                            keyTileOf(kb.idx(0), layout.vBase()));
  Value queryTile = kb.select(isP, qStageOf(stage), doStageOf(stage));
  Value xAcc = issueKeyByQuery(base, keyTile, queryTile, plan.headDim);
  NVVM::WgmmaWaitGroupSyncOp::create(b, loc, 0);
  SmallVector<Value> x =
      fenceOperands(b, loc, laneValues(b, loc, xAcc));
  auto roles = scf::IfOp::create(b, loc, TypeRange(ValueRange(x)), isP,
                                 /*withElseRegion=*/true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&roles.getThenRegion().front());
    SmallVector<Value> p = x;
    Value derivative = computeP(p, tile, stage);
    exchangeScaledP(p, derivative);
    scf::YieldOp::create(b, loc, p);
    b.setInsertionPointToStart(&roles.getElseRegion().front());
    SmallVector<Value> ds = x;
    computeDSFromExchange(ds, stage, dsBuffer, tile.keyRow0);
    scf::YieldOp::create(b, loc, ds);
  }
  SmallVector<Value> a =
      accumulatorToWgmmaA(kb, SmallVector<Value>(roles.getResults()));
  Value bTile = kb.select(isP, doStageOf(stage), qStageOf(stage));
  SmallVector<Value> descs;
  for (int64_t kk = 0; kk < plan.blockQ / 16; ++kk)
    descs.push_back(queryTileStepAsB(base, bTile, kk));
  NVVM::WgmmaFenceAlignedOp::create(b, loc);
  acc = buildWgmmaPV(kb, a, descs, acc);
  NVVM::WgmmaGroupSyncAlignedOp::create(b, loc);
}

void HopperBackward::stageDQInQuerySlot(ArrayRef<Value> dqAcc,
                                        Value warpgroup, Value slot) {
  // The panel's tile is read by no product any more (dqPanelOf): the other
  // warpgroup's reads of it ended before barrier 1, this one's at the last
  // wait; dQ reads K and dSᵀ only.
  SmallVector<Value> dq = unpackDQ(dqAcc);
  storeDQTileAt(
      dq, warpgroup,
      [&] {
        return kb.select(kb.eq(warpgroup, kb.idx(0)), dqPanelOf(0, slot),
                         dqPanelOf(1, slot));
      },
      plan.headDim / 2, /*panel=*/true);
  fenceProxyAsyncShared();
  arriveBarrier(kb, barriers, BackwardBarriers::dqFull, slot);
}

void HopperBackward::emitDQPanelReductions() {
  // Panel p of query head h (dense: of batch b) holds rows [B·H][2][Nq]
  // (varlen: [H][2][Tq]) of D/2 floats: the tile's rows start at row
  // 2·rowsBase − seqStart + p·headRows + qBegin, contiguous.
  const int64_t bq = plan.blockQ, panelBytes = plan.headDim / 2 * 4;
  ifThen(kb.eq(kb.tid, kb.idx(32)), [&] {
    Value sharedBase = arith::TruncIOp::create(b, loc, b.getI32Type(),
                                               sharedAddress(kb));
    forEachTile32([&](Value t, Value slot32, Value qTile, Value head) {
      Value slot =
          waitForSlot32(BackwardBarriers::dqFull, t, slot32, /*round=*/0);
      Value qBegin = mul32(qTile, kb.c32(bq));
      Value rows = arith::MinUIOp::create(
          b, loc, arith::SubIOp::create(b, loc, nq32, qBegin), kb.c32(bq));
      Value headPanels = mul32(rowsBase32(head), kb.c32(2));
      if (seqStartQ32)
        headPanels = arith::SubIOp::create(b, loc, headPanels, seqStartQ32);
      for (int64_t p = 0; p < 2; ++p) {
        Value firstRow = add32(add32(headPanels, mul32(headRows32, kb.c32(p))),
                               qBegin);
        Value globalAddr = arith::IndexCastUIOp::create(
            b, loc, b.getI64Type(),
            kb.add(dqAddr, kb.mul(kb.toIndex(firstRow), panelBytes)));
        Value tile = dqPanelOf(p, slot);
        Value sharedAddr = add32(sharedBase, kb.toI32(tile));
        bulkReduceAddF32(b, loc, globalAddr, sharedAddr,
                         mul32(rows, kb.c32(panelBytes)));
      }
      inlinePtx(b, loc, "cp.async.bulk.commit_group;");
      inlinePtx(b, loc, "cp.async.bulk.wait_group.read 0;");
      // The tile's staged dQ is read: the next load may overwrite the slot.
      arriveBarrier(kb, barriers, BackwardBarriers::queryEmpty, slot);
    });
    // Every reduction completes before the CTA exits.
    inlinePtx(b, loc, "cp.async.bulk.wait_group 0;");
  });
}
