//===- HopperForwardMainloop.cpp - the key tiles ----------------*- C++ -*-===//
//
// Part of the wgmma forward (HopperForward.h).
//
//===----------------------------------------------------------------------===//

#include "HopperForward.h"

#include "fa/Dialect/AttnGPU/IR/AttnGPU.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

using namespace mlir;
using namespace mlir::fa;
using namespace mlir::fa::gpu_lowering;
namespace ag = mlir::fa::attn_gpu;

//===----------------------------------------------------------------------===//
// Consumers
//===----------------------------------------------------------------------===//

SmallVector<Value> HopperForward::qkDescriptors(Value qRow0Bytes,
                                                Value stage) {
  const int64_t bkv = plan.blockKV;
  Value kStage = kb.add(kb.mul(stage, layout.kBytes()), layout.kBase());
  SmallVector<Value> descs;
  // 32 B per k step: k16 of 16-bit or k32 of fp8 elements.
  for (int64_t ks = 0; ks < boxCols(plan.headDim) / 16; ++ks) {
    int64_t slab = ks / 4, inSlab = (ks % 4) * 32;
    descs.push_back(descriptor(
        kb.add(qRow0Bytes, slab * plan.blockQ * kSlabRowBytes + inSlab), 16));
    descs.push_back(
        descriptor(kb.add(kStage, slab * bkv * kSlabRowBytes + inSlab), 16));
  }
  return descs;
}

SmallVector<Value> HopperForward::pvDescriptors(Value stage) {
  const int64_t bkv = plan.blockKV;
  if (fp8()) { // K-major Vᵀ: +32 B per k32 step of its 128 B rows, a slab
               // of Dv rows per 128 keys
    Value vtStage = kb.add(kb.mul(stage, layout.vtBytes()), layout.vtBase());
    SmallVector<Value> descs;
    for (int64_t kk = 0; kk < bkv / 32; ++kk)
      descs.push_back(descriptor(
          kb.add(vtStage, (kk / 4) * plan.headDimV * kSlabRowBytes +
                              (kk % 4) * 32),
          16));
    return descs;
  }
  Value vStage = kb.add(kb.mul(stage, layout.vBytes()), layout.vBase());
  SmallVector<Value> descs;
  for (int64_t kk = 0; kk < bkv / 16; ++kk)
    descs.push_back(descriptor(kb.add(vStage, kk * 16 * kSlabRowBytes),
                               bkv * kSlabRowBytes));
  return descs;
}

Value HopperForward::issueQK(ArrayRef<Value> descs, int64_t keys) {
  SmallVector<Value> q, k;
  for (int64_t ks = 0; ks < static_cast<int64_t>(descs.size()) / 2; ++ks) {
    q.push_back(descs[2 * ks]);
    k.push_back(descs[2 * ks + 1]);
  }
  return buildWgmmaQK(kb, keys, q, k);
}

SmallVector<Value> HopperForward::issuePV(ArrayRef<Value> p,
                                          ArrayRef<Value> descs,
                                          ArrayRef<Value> acc) {
  return buildWgmmaPV(kb, p, descs, acc);
}

void HopperForward::emitConsumer(Value consumer, Value oMem, Value lseMem,
                                 Value scale) {
  // Ping-pong: consumer 0's own arrival lets it issue first (see
  // emitConsumerTile); once per CTA, as every tile passes the same number
  // of turns in both consumers.
  if (plan.schedule.pingPong) {
    auto ifOp = scf::IfOp::create(b, loc, kb.eq(consumer, kb.idx(0)),
                                  /*withElseRegion=*/false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&ifOp.getThenRegion().front());
    namedBarrier(b, loc, "bar.arrive", 1, kConsumerThreads);
  }
  isConsumer = true;
  forEachTile([&] { emitConsumerTile(consumer, oMem, lseMem, scale); });
}

HopperForward::ConsumerState HopperForward::beginConsumerTile(Value consumer,
                                                             Value scale) {
  ConsumerState t;
  t.consumer = consumer;
  Value warpInGroup = kb.remui(kb.warp, 4);
  t.rowBase = kb.add(kb.mul(consumer, kRowsPerConsumer),
                     kb.mul(warpInGroup, 16)); // this warp's rows
  t.qRow0 = kb.add(qBegin, kb.mul(consumer, kRowsPerConsumer));
  t.qRow0Bytes = kb.mul(consumer, kRowsPerConsumer * kSlabRowBytes);
  // fp8: S of the dequantised inputs is S·dq·dk, and O takes dv at the end.
  // Block descales: the warpgroup's 64 rows are one Q block; K's factors
  // enter per key tile (keyDescales).
  if (fp8()) {
    Value at = kb.add(kb.mul(batch, kvHeads), kvHead);
    auto load = [&](Value mem, Value i) {
      return memref::LoadOp::create(b, loc, mem, ValueRange{i}).getResult();
    };
    Value factor =
        plan.descaleBlock
            ? load(descaleQ, descaleBlockAt(kb.add(kb.mul(batch, heads), head),
                                            nq, t.qRow0))
            : arith::MulFOp::create(b, loc, load(descaleQ, at),
                                    load(descaleK, at))
                  .getResult();
    scale = arith::MulFOp::create(b, loc, scale, factor);
    t.oDescale = load(descaleV, at);
  }
  t.scale = scale;
  t.scaleLog2 = softmaxScaleLog2(kb, scale);
  // The band of the warpgroup's 64 rows.
  t.bounds = buildKeyBounds(b, loc, plan.spec,
                            {batch, head, qBegin, nq, nk, t.rowBase},
                            kRowsPerConsumer, t.qRow0);
  t.isFirst = kb.eq(consumer, kb.idx(0));
  return t;
}

Value HopperForward::descaleBlockAt(Value headRow, Value rows, Value row) {
  const int64_t block = plan.descaleBlock;
  Value blocks = kb.ceilDiv(rows, block);
  // A warpgroup or key tile wholly past the rows reads the last block.
  Value at = kb.minsi(kb.divui(row, block), kb.sub(blocks, kb.idx(1)));
  return kb.add(kb.mul(headRow, blocks), at);
}

SmallVector<Value> HopperForward::keyDescales(Value keyTile, int64_t keys) {
  if (!plan.descaleBlock)
    return {};
  Value headRow = kb.add(kb.mul(batch, kvHeads), kvHead);
  Value key0 = kb.mul(keyTile, plan.blockKV);
  SmallVector<Value> factors;
  for (int64_t k = 0; k < keys; k += plan.descaleBlock)
    factors.push_back(memref::LoadOp::create(
        b, loc, descaleK,
        ValueRange{descaleBlockAt(headRow, nk, kb.add(key0, k))}));
  return factors;
}

SmallVector<Value> HopperForward::scoreStep(const ConsumerState &t,
                                            Value keyTile, bool masked,
                                            Value scores, int64_t keys,
                                            SoftmaxState &state, Value alpha[2],
                                            Value iteration,
                                            ArrayRef<Value> keyFactors) {
  using ag::FragmentLayout;
  Value s =
      fragmentOf(b, loc, fenceOperands(b, loc, laneValues(b, loc, scores)),
                 keys, FragmentLayout::Accumulator);
  Value keyBegin = kb.mul(keyTile, plan.blockKV);
  ScoreRows rows{batch, head, qBegin, nq, nk, t.rowBase};
  if (!plan.blockSparse) {
    s = buildScoreMods(b, loc, plan.spec, s, t.scale, rows, keyBegin);
    if (masked)
      s = ag::MaskOp::create(b, loc, s.getType(), s, t.bounds, keyBegin);
  } else {
    // A full block evaluates neither the mask_mod nor the band.
    attn::ScoreSpec scoreMod = plan.spec, maskMod = plan.spec;
    scoreMod.maskMod = nullptr;
    maskMod.scoreMod = nullptr;
    s = buildScoreMods(b, loc, scoreMod, s, t.scale, rows, keyBegin);
    Value maskKey = kb.opaqueIndex(keyBegin);
    s = buildUnlessInside(
        b, loc, s, kb.lt(iteration, fullBlocks), [&](Value partial) {
          partial =
              buildScoreMods(b, loc, maskMod, partial, t.scale, rows, keyBegin);
          return ag::MaskOp::create(b, loc, partial.getType(), partial,
                                    t.bounds, maskKey, /*every_element=*/true);
        });
  }
  // The update of a 16 × 8 accumulator of ones gives each row's factor.
  Value unit = ag::FillOp::create(b, loc, accumulatorType(b.getContext(), 8),
                                  kb.f32(1.0));
  Value rowMax = fragmentOf(b, loc, state.rowMax, 1, FragmentLayout::Rows);
  // Block descales: each 64 keys' K factor joins the scale.
  SmallVector<Value> scales{t.scaleLog2};
  if (!keyFactors.empty()) {
    scales.clear();
    for (Value f : keyFactors)
      scales.push_back(arith::MulFOp::create(b, loc, t.scaleLog2, f));
  }
  auto update = ag::OnlineSoftmaxOp::create(
      b, loc, s.getType(), rowMax.getType(), rowMax.getType(), unit.getType(),
      s, rowMax, fragmentOf(b, loc, state.rowSum, 1, FragmentLayout::Rows),
      unit, scales,
      keyFactors.empty() ? IntegerAttr()
                         : b.getI64IntegerAttr(plan.descaleBlock),
      plan.schedule.lazyRescale ? b.getF64FloatAttr(kLazyRescaleLog2)
                                : FloatAttr(),
      plan.schedule.polyExp2 ? b.getI64IntegerAttr(plan.schedule.polyExp2)
                             : IntegerAttr());
  SmallVector<Value> m = laneValues(b, loc, update.getNewMax());
  SmallVector<Value> l = laneValues(b, loc, update.getNewSum());
  SmallVector<Value> factors = laneValues(b, loc, update.getNewAcc());
  state = SoftmaxState{{m[0], m[1]}, {l[0], l[1]}};
  alpha[0] = factors[0];
  alpha[1] = factors[2];
  return laneValues(b, loc, update.getProbs());
}

SmallVector<Value> HopperForward::packP(ArrayRef<Value> s) {
  return fp8() ? packFp8A(kb, s) : accumulatorToWgmmaA(kb, s);
}

Value HopperForward::ringStage(Value it) {
  return BarrierRing{layout.stages}.slot(kb, kb.add(ringBase, it));
}

Value HopperForward::ringParity(Value it) {
  return BarrierRing{layout.stages}.fullParity(kb, kb.add(ringBase, it));
}

void HopperForward::turnBegin(const ConsumerState &t) {
  if (plan.schedule.pingPong)
    ag::TurnBeginOp::create(b, loc, t.isFirst);
}

void HopperForward::turnEnd(const ConsumerState &t) {
  if (plan.schedule.pingPong)
    ag::TurnEndOp::create(b, loc, t.isFirst);
}

void HopperForward::releaseQ() {
  if (plan.persistent)
    arrive(bars.qEmpty(), kb.idx(0));
}

SmallVector<Value> HopperForward::rescaleBy(Value f[2], SmallVector<Value> o) {
  const int64_t accN = plan.headDimV / 2;
  auto mul = [&](SmallVector<Value> &x) {
    for (int64_t n = 0; n < accN / 4; ++n)
      for (int64_t i = 0; i < 4; ++i)
        x[n * 4 + i] = arith::MulFOp::create(b, loc, x[n * 4 + i], f[i / 2]);
  };
  if (plan.schedule.lazyRescale)
    return rescaleUnlessUnit(f, o, mul);
  mul(o);
  return o;
}

SmallVector<Value> HopperForward::emitFirstKeyTile(const ConsumerState &t,
                                                   ArrayRef<Value> init) {
  // The first key tile's S and softmax; no P·V yet. Without a mask it is
  // the last tile, ragged unless block_kv divides Nk: Q·Kᵀ and the softmax
  // run on the multiple of 64 keys that covers it and P is 0 past them (V's
  // rows past Nk are TMA's zeros).
  const int64_t bkv = plan.blockKV, sN = bkv / 2;
  const bool ragged = raggedFirst();
  Value zero = kb.idx(0), stage0 = ringStage(zero);
  wait(bars.kFull(), stage0, ringParity(zero));
  SmallVector<Value> qk0 = qkDescriptors(t.qRow0Bytes, stage0);
  Value firstTile = slotKeyTile(stage0);
  if (!firstTile)
    firstTile = plan.blockSparse ? listedKeyTile(zero)
                : ragged         ? kb.sub(jEnd, kb.idx(1))
                                 : jBegin;
  auto firstWidth = [&](int64_t keys) {
    SmallVector<Value> factors = keyDescales(firstTile, keys);
    turnBegin(t);
    NVVM::WgmmaFenceAlignedOp::create(b, loc);
    Value s0 = issueQK(qk0, keys);
    NVVM::WgmmaGroupSyncAlignedOp::create(b, loc);
    turnEnd(t);
    NVVM::WgmmaWaitGroupSyncOp::create(b, loc, 0);
    arrive(bars.kEmpty(), stage0);
    SoftmaxState st{{init[0], init[1]}, {init[2], init[3]}};
    Value alpha[2];
    SmallVector<Value> pF32 = scoreStep(t, firstTile, /*masked=*/true, s0, keys,
                                        st, alpha, zero, factors);
    pF32.resize(sN, kb.f32(0.0));
    SmallVector<Value> out{st.rowMax[0], st.rowMax[1], st.rowSum[0],
                           st.rowSum[1]};
    llvm::append_range(out, packP(pF32));
    return out;
  };
  // One branch per width, uniform across the CTA (both consumers pass the
  // same turns).
  SmallVector<int64_t> widths;
  for (int64_t w = kSlabCols; ragged && w < bkv; w += kSlabCols)
    widths.push_back(w);
  widths.push_back(bkv);
  Value ragKeys = ragged ? kb.sub(nk, kb.mul(firstTile, bkv)) : Value();
  SmallVector<Type> firstTypes(4, b.getF32Type());
  firstTypes.append(fp8() ? sN / 4 : sN / 2, b.getI32Type()); // packed P
  std::function<SmallVector<Value>(size_t)> emitWidths =
      [&](size_t i) -> SmallVector<Value> {
    if (i + 1 == widths.size())
      return firstWidth(widths[i]);
    Value fits = kb.lt(ragKeys, kb.idx(widths[i] + 1));
    auto ifOp = scf::IfOp::create(b, loc, firstTypes, fits, true);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&ifOp.getThenRegion().front());
    scf::YieldOp::create(b, loc, firstWidth(widths[i]));
    b.setInsertionPointToStart(&ifOp.getElseRegion().front());
    scf::YieldOp::create(b, loc, emitWidths(i + 1));
    return SmallVector<Value>(ifOp.getResults());
  };
  return emitWidths(0);
}

void HopperForward::emitKeyTile(const ConsumerState &t, scf::ForOp loop,
                                int64_t pEnd) {
  // S(j) and P·V(j-1) in flight together.
  const int64_t bkv = plan.blockKV, accN = plan.headDimV / 2;
  const bool ragged = raggedFirst(), inTurn = rescaleInTurn();
  Value j = loop.getInductionVar();
  ValueRange args = loop.getRegionIterArgs();
  SoftmaxState st{{args[0], args[1]}, {args[2], args[3]}};
  SmallVector<Value> acc(args.begin() + 4, args.begin() + 4 + accN);
  SmallVector<Value> p(args.begin() + 4 + accN,
                       args.begin() + (args.size() - pEnd));
  Value it = kb.sub(j, jBegin), prev = kb.sub(it, kb.idx(1));
  Value stage = ringStage(it), prevStage = ringStage(prev);

  // Ragged first, iteration j reads key tile j - 1 (raggedFirst()); only
  // the mods and block descales need to know which.
  auto keyTileOf = [&] {
    return plan.blockSparse ? listedKeyTile(it)
           : ragged && (plan.spec.scoreMod || plan.spec.maskMod ||
                        plan.descaleBlock)
               ? kb.sub(j, kb.idx(1))
               : j;
  };
  // Block descales: loaded first, their latency under the waits and Q·Kᵀ.
  SmallVector<Value> factors;
  if (plan.descaleBlock)
    factors = keyDescales(keyTileOf(), bkv);
  // Waits and descriptors come before wgmma.fence: a wait loop or a
  // descriptor computed inside the issue sequence makes ptxas re-fence and
  // serialise the wgmmas (C7519, C7513).
  wait(bars.kFull(), stage, ringParity(it));
  Value slotKey = slotKeyTile(stage); // read before K's slot is released
  wait(pvFull(), prevStage, ringParity(prev));
  SmallVector<Value> qk = qkDescriptors(t.qRow0Bytes, stage);
  SmallVector<Value> pv = pvDescriptors(prevStage);
  turnBegin(t);
  NVVM::WgmmaFenceAlignedOp::create(b, loc);
  Value s = issueQK(qk, bkv);
  NVVM::WgmmaGroupSyncAlignedOp::create(b, loc);
  if (inTurn) {
    // S(j) runs while O takes the factors of P(j-1)'s tile.
    Value f[2] = {args[args.size() - 2], args[args.size() - 1]};
    acc = rescaleBy(f, acc);
    NVVM::WgmmaFenceAlignedOp::create(b, loc);
  }
  SmallVector<Value> accNext = issuePV(p, pv, acc);
  NVVM::WgmmaGroupSyncAlignedOp::create(b, loc);
  turnEnd(t);
  NVVM::WgmmaWaitGroupSyncOp::create(b, loc, 1); // S(j) done
  arrive(bars.kEmpty(), stage);
  Value keyTile = slotKey ? slotKey : keyTileOf();
  Value a[2];
  SmallVector<Value> pF32 =
      scoreStep(t, keyTile, /*masked=*/!ragged, s, bkv, st, a, it, factors);
  NVVM::WgmmaWaitGroupSyncOp::create(b, loc, 0); // P·V(j-1) done
  arrive(bars.vEmpty(), prevStage);
  accNext = fenceOperands(b, loc, accNext);
  SmallVector<Value> pNext = packP(fenceOperands(b, loc, pF32));
  if (!inTurn)
    accNext = rescaleBy(a, accNext);
  SmallVector<Value> yield{st.rowMax[0], st.rowMax[1], st.rowSum[0],
                           st.rowSum[1]};
  yield.append(accNext);
  yield.append(pNext);
  if (inTurn)
    yield.append({a[0], a[1]});
  scf::YieldOp::create(b, loc, yield);
}

SmallVector<Value> HopperForward::emitLastPV(const ConsumerState &t,
                                             ValueRange res, int64_t pEnd) {
  // P·V of the last tile.
  const int64_t accN = plan.headDimV / 2;
  releaseQ();
  SmallVector<Value> acc(res.begin() + 4, res.begin() + 4 + accN);
  SmallVector<Value> p(res.begin() + 4 + accN,
                       res.begin() + (res.size() - pEnd));
  if (rescaleInTurn()) {
    Value f[2] = {res[res.size() - 2], res[res.size() - 1]};
    acc = rescaleBy(f, acc);
  }
  Value last = kb.sub(kb.sub(jEnd, jBegin), kb.idx(1));
  Value lastStage = ringStage(last);
  wait(pvFull(), lastStage, ringParity(last));
  SmallVector<Value> pvLast = pvDescriptors(lastStage);
  turnBegin(t);
  NVVM::WgmmaFenceAlignedOp::create(b, loc);
  acc = issuePV(p, pvLast, acc);
  NVVM::WgmmaGroupSyncAlignedOp::create(b, loc);
  turnEnd(t);
  NVVM::WgmmaWaitGroupSyncOp::create(b, loc, 0);
  arrive(bars.vEmpty(), lastStage);
  acc = fenceOperands(b, loc, acc);
  SmallVector<Value> out(res.begin(), res.begin() + 4);
  out.append(acc);
  return out;
}

SmallVector<Value> HopperForward::emitKeyTiles(const ConsumerState &t) {
  // (max, sum) per row, then O: the first key tile, the steady state, the
  // last P·V; (-inf, 0, 0) without any key tile.
  const int64_t accN = plan.headDimV / 2;
  SmallVector<Value> init{kb.negInf(), kb.negInf(), kb.f32(0), kb.f32(0)};
  init.append(accN, kb.f32(0));
  SmallVector<Type> resTypes(init.size(), b.getF32Type());
  auto any = scf::IfOp::create(b, loc, resTypes, kb.lt(jBegin, jEnd),
                               /*withElseRegion=*/true);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(&any.getElseRegion().front());
  releaseQ();
  scf::YieldOp::create(b, loc, init);

  b.setInsertionPointToStart(&any.getThenRegion().front());
  SmallVector<Value> first = emitFirstKeyTile(t, init);
  SmallVector<Value> carried(first.begin(), first.begin() + 4);
  carried.append(init.begin() + 4, init.end());
  carried.append(first.begin() + 4, first.end()); // P of the first tile
  // In-turn rescale: the factors of the tile whose P·V is issued next (1
  // before the first: O is 0).
  const bool inTurn = rescaleInTurn();
  if (inTurn)
    carried.append({kb.f32(1.0), kb.f32(1.0)});
  const int64_t pEnd = inTurn ? 2 : 0; // carried values after P
  auto loop = scf::ForOp::create(b, loc, kb.add(jBegin, 1), jEnd, kb.idx(1),
                                 carried);
  {
    OpBuilder::InsertionGuard g2(b);
    b.setInsertionPointToStart(loop.getBody());
    emitKeyTile(t, loop, pEnd);
  }
  scf::YieldOp::create(b, loc, emitLastPV(t, loop.getResults(), pEnd));
  return SmallVector<Value>(any.getResults());
}

void HopperForward::emitConsumerTile(Value consumer, Value oMem, Value lseMem,
                                     Value scale) {
  ConsumerState t = beginConsumerTile(consumer, scale);
  if (!plan.persistent) // (forEachTile waited for a persistent tile's Q)
    wait(bars.qFull(), kb.idx(0), parityOf(tileIter));
  SmallVector<Value> res = emitKeyTiles(t);
  emitOutput(t, res, oMem, lseMem);
}
