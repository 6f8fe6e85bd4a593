//===- HopperForwardProducer.cpp - tiles, TMA loads -------------*- C++ -*-===//
//
// Part of the wgmma forward (HopperForward.h).
//
//===----------------------------------------------------------------------===//

#include "HopperForward.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

using namespace mlir;
using namespace mlir::fa;
using namespace mlir::fa::gpu_lowering;

//===----------------------------------------------------------------------===//
// Producer: Q once, then K(j), V(j) into ring slot j mod stages
//===----------------------------------------------------------------------===//

void HopperForward::setTile(Value qBlock, Value headIdx, Value batchIdx) {
  head = headIdx;
  batch = batchIdx;
  // GQA: query head h reads key/value head h / (H / Hkv). The tensor maps
  // are 4-D (D, N, H, B) over the caller's strides, so TMA zero-fills rows
  // past Nq / Nk of each head.
  kvHead = arith::DivUIOp::create(
      b, loc, head, arith::DivUIOp::create(b, loc, heads, kvHeads));
  qBegin = kb.mul(qBlock, plan.blockQ);
  if (plan.blockSparse) {
    if (!plan.persistent)
      return setBlockSparseTile(qBlock, {batches, maskHeads, nq, nk});
    if (!isConsumer) // enterBlockSparseTile walks the mask
      return;
    jBegin = kb.idx(0);
    jEnd = kb.toIndex(tileWord(kb.idx(HopperSmem::kTileWordCount)));
    fullBlocks = kb.toIndex(tileWord(kb.idx(HopperSmem::kTileWordFull)));
    return;
  }
  // The key blocks of the tiled loop (those that meet this tile's band).
  TileLoopInputs in{batch, head, qBlock, heads, kvHeads, boundNq, boundNk};
  in.cuSeqlensQ = cuSeqlensQ;
  in.cuSeqlensK = cuSeqlensK;
  in.windowLeft = plan.spec.windowLeftValue;
  in.windowRight = plan.spec.windowRightValue;
  std::tie(jBegin, jEnd) = loops.cloneTileRange(b, in);
}

void HopperForward::setBlockSparseTile(Value qBlock, ArrayRef<Value> sizes) {
  keyLine = BlockMaskLine::walk(
      kb, blockMask, sizes[0], sizes[1], sizes[2], sizes[3], batch,
      [&] { return head; }, qBlock,
      /*transposed=*/false);
  fullBlocks = keyLine.full;
  jBegin = kb.idx(0);
  jEnd = keyLine.count;
}

Value HopperForward::listedKeyTile(Value it) {
  return kb.toIndex(keyLine.blockAt(kb, it));
}

Value HopperForward::tileWord(Value word) {
  return memref::LoadOp::create(
      b, loc, tileSlot, ValueRange{kb.add(kb.idx(layout.tiles() / 4), word)});
}

void HopperForward::storeTileWord(Value word, Value value) {
  memref::StoreOp::create(b, loc, value, tileSlot,
                          ValueRange{kb.add(kb.idx(layout.tiles() / 4), word)});
}

Value HopperForward::slotKeyTile(Value stage) {
  if (!persistentSparse())
    return Value();
  return kb.toIndex(
      tileWord(kb.add(kb.idx(HopperSmem::kSlotKeyBlocks), stage)));
}

void HopperForward::enterBlockSparseTile(Value t, Value qBlocks) {
  // In i32, as the tile counter (a persistent grid has < 2^31 tiles).
  Value heads32 = kb.toI32(heads);
  Value perBatch = kb.mul(qBlocks, heads32);
  Value batch32 = arith::DivUIOp::create(b, loc, t, perBatch);
  auto [place32, head32] =
      BlockMaskLine::placeOf(kb, kb.sub(t, kb.mul(batch32, perBatch)), qBlocks,
                             heads32, kForwardOrderHeads);
  Value batchIdx = kb.toIndex(batch32), headIdx = kb.toIndex(head32),
        place = kb.toIndex(place32);
  // The producer's walk reads the mask's layout from sizes LLVM cannot
  // hoist out of the tile loop: hoisted, its offsets stay live across
  // every tile and spill the producer's registers.
  if (isConsumer) { // the query block the producer published
    setTile(kb.toIndex(tileWord(kb.idx(HopperSmem::kTileWordQBlock))), headIdx,
            batchIdx);
    return;
  }
  SmallVector<Value> sizes;
  for (Value v : {batches, maskHeads, nq, nk})
    sizes.push_back(kb.opaqueIndex(v));
  tileQBlock = BlockMaskLine::orderedBlock(
      kb, blockMask, sizes[0], sizes[1], sizes[2], sizes[3], batchIdx, headIdx,
      place, /*transposed=*/false);
  setTile(tileQBlock, headIdx, batchIdx);
  setBlockSparseTile(tileQBlock, sizes);
}

void HopperForward::setSequence(Value seq) {
  SequenceRows q = loadSequenceRows(b, loc, cuSeqlensQ, seq, boundNq);
  SequenceRows k = loadSequenceRows(b, loc, cuSeqlensK, seq, boundNk);
  seqStartQ = q.start;
  seqStartK = k.start;
  nq = q.length;
  nk = k.length;
}

void HopperForward::forEachTile(function_ref<void()> body) {
  if (!plan.persistent) { // the tile was set up in build()
    body();
    return;
  }
  // Tile t of a persistent grid: (batch, head) pair t / qBlocks, and a head's
  // query blocks from the last (the longest under a causal mask), so the
  // CTAs running at one time share one or two heads' K/V in L2 and the short
  // causal blocks fill the end. CTA x starts with tile x; whoever finishes
  // a tile takes the next from the counter (gridDim.x + its old value), so
  // the hardware's order of completion balances tiles of unequal length.
  // The producer thread fetches and publishes the tile in shared memory
  // before Q's arrival on "Q full" (release), the consumers read it after
  // their wait on "Q full" (acquire); a tile ≥ tiles ends both loops. The
  // tile state is 32-bit (the runtime caps the tile count below 2^31): it
  // stays live across the KV loop, where the consumers' registers are
  // tightest.
  Type i32 = b.getI32Type();
  Value qBlocks = kb.toI32(kb.ceilDiv(nq, plan.blockQ));
  Value heads32 = kb.toI32(heads);
  Value tiles = arith::MulIOp::create(
      b, loc, arith::MulIOp::create(b, loc, qBlocks, heads32),
      kb.toI32(batches));
  auto enter = [&](Value t, Value k32, Value g32) {
    tileIter = kb.toIndex(k32);
    ringBase = kb.toIndex(g32);
    ringBase32 = g32;
    if (plan.blockSparse)
      return enterBlockSparseTile(t, qBlocks);
    Value bh = arith::DivUIOp::create(b, loc, t, qBlocks);
    Value qRev = arith::RemUIOp::create(b, loc, t, qBlocks);
    Value qBlock = arith::SubIOp::create(
        b, loc, arith::SubIOp::create(b, loc, qBlocks, qRev), kb.c32(1));
    setTile(kb.toIndex(qBlock),
            kb.toIndex(arith::RemUIOp::create(b, loc, bh, heads32)),
            kb.toIndex(arith::DivUIOp::create(b, loc, bh, heads32)));
  };
  auto nextRing = [&](Value g32) {
    return arith::AddIOp::create(b, loc, g32, kb.toI32(kb.sub(jEnd, jBegin)))
        .getResult();
  };

  if (!isConsumer) {
    // Producer: (tile, tiles done, ring slots used).
    Value first = kb.toI32(gpu::BlockIdOp::create(b, loc, gpu::Dimension::x));
    auto loop = scf::WhileOp::create(
        b, loc, TypeRange{i32, i32, i32},
        ValueRange{first, kb.c32(0), kb.c32(0)},
        [&](OpBuilder &, Location, ValueRange args) {
          Value more = arith::CmpIOp::create(
              b, loc, arith::CmpIPredicate::ult, args[0], tiles);
          scf::ConditionOp::create(b, loc, more, args);
        },
        [&](OpBuilder &, Location, ValueRange args) {
          enter(args[0], args[1], args[2]);
          publishTile = [&, t = args[0]] {
            storeTileWord(kb.idx(HopperSmem::kTileWordTile), t);
            if (!plan.blockSparse)
              return;
            storeTileWord(kb.idx(HopperSmem::kTileWordQBlock),
                          kb.toI32(tileQBlock));
            storeTileWord(kb.idx(HopperSmem::kTileWordCount),
                          kb.toI32(keyLine.count));
            storeTileWord(kb.idx(HopperSmem::kTileWordFull),
                          kb.toI32(keyLine.full));
          };
          body();
          // The last of the `tiles` fetches of a launch (values 0 ..
          // tiles - 1) puts the counter back to 0 for the next launch.
          Value old = LLVM::AtomicRMWOp::create(
              b, loc, LLVM::AtomicBinOp::add, tileCounter, kb.c32(1),
              LLVM::AtomicOrdering::monotonic);
          Value last = arith::CmpIOp::create(
              b, loc, arith::CmpIPredicate::eq, old,
              arith::SubIOp::create(b, loc, tiles, kb.c32(1)));
          {
            auto ifOp = scf::IfOp::create(b, loc, last, false);
            OpBuilder::InsertionGuard g(b);
            b.setInsertionPointToStart(&ifOp.getThenRegion().front());
            LLVM::StoreOp::create(b, loc, kb.c32(0), tileCounter);
          }
          Value next = arith::AddIOp::create(
              b, loc,
              kb.toI32(gpu::GridDimOp::create(b, loc, gpu::Dimension::x)), old);
          scf::YieldOp::create(
              b, loc,
              ValueRange{next,
                         arith::AddIOp::create(b, loc, args[1], kb.c32(1)),
                         nextRing(args[2])});
        });
    // The end: an empty tile behind the last Q, with no bytes to wait for.
    Value k32 = loop.getResult(1);
    wait(bars.qEmpty(), kb.idx(0), parityOf(kb.add(kb.toIndex(k32), 1)));
    storeTileWord(kb.idx(HopperSmem::kTileWordTile), loop.getResult(0));
    arrive(bars.qFull(), kb.idx(0));
    return;
  }
  // Consumers: (tiles done, ring slots used); the tile comes with its Q.
  scf::WhileOp::create(
      b, loc, TypeRange{i32, i32, i32}, ValueRange{kb.c32(0), kb.c32(0)},
      [&](OpBuilder &, Location, ValueRange args) {
        wait(bars.qFull(), kb.idx(0), parityOf(kb.toIndex(args[0])));
        Value t = tileWord(kb.idx(HopperSmem::kTileWordTile));
        Value more =
            arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, t, tiles);
        scf::ConditionOp::create(b, loc, more, ValueRange{t, args[0], args[1]});
      },
      [&](OpBuilder &, Location, ValueRange args) {
        enter(args[0], args[1], args[2]);
        body();
        scf::YieldOp::create(
            b, loc,
            ValueRange{arith::AddIOp::create(b, loc, args[1], kb.c32(1)),
                       nextRing(args[2])});
      });
}

void HopperForward::emitProducer() {
  // The maps are kernel parameters: fetched ahead of the first loads, with
  // no proxy fence (nothing writes them during the grid).
  for (Value map : {qMap, kMap, vMap})
    prefetchTensorMap(kb, map);
  forEachTile([&] { emitProducerTile(); });
}

void HopperForward::emitProducerTile() {
  const int64_t bkv = plan.blockKV;
  // The key loop counts in i32: a persistent producer runs in 24 registers.
  Value j0 = kb.toI32(jBegin), j1 = kb.toI32(jEnd);
  Value kvHead32 = kb.toI32(kvHead), batch32 = kb.toI32(batch);
  Value n = arith::SubIOp::create(b, loc, j1, j0); // ring iterations
  // Ring iteration i of this tile reads key tile keyTileOf(i) (i32) into
  // slot (ringBase + i) mod stages once it is free. A fresh barrier passes a
  // wait on the parity before its first phase, so round 0 finds every slot
  // empty.
  auto keyTileOf = [&](Value i) -> Value {
    if (plan.blockSparse)
      return kb.toI32(listedKeyTile(kb.toIndex(i)));
    if (!raggedFirst())
      return arith::AddIOp::create(b, loc, j0, i);
    // j0 - 1 + (i == 0 ? n : i): n is live as the loop bound anyway.
    Value isFirst = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                                          i, kb.c32(0));
    return arith::AddIOp::create(
        b, loc, arith::SelectOp::create(b, loc, isFirst, n, i),
        arith::SubIOp::create(b, loc, j0, kb.c32(1)));
  };
  auto loadKV = [&](Value i, bool isK) {
    Value it = arith::AddIOp::create(b, loc, ringBase32, i);
    const BarrierRing ring{layout.stages};
    Value stage = ring.slot32(kb, it);
    wait(isK ? bars.kEmpty() : bars.vEmpty(), stage,
         ring.emptyParity32(kb, it));
    Value keyTile = keyTileOf(i);
    // The slot's key block, released to the consumers by K's arrival.
    if (isK && persistentSparse())
      storeTileWord(kb.add(kb.idx(HopperSmem::kSlotKeyBlocks), stage), keyTile);
    int64_t bytes = isK ? layout.kBytes() : layout.vBytes();
    loadTile(
        isK ? kMap : vMap, bkv, boxCols(isK ? plan.headDim : plan.headDimV),
        kb.add(kb.mul(stage, bytes), isK ? layout.kBase() : layout.vBase()),
        packedRow(seqStartK, kb.toIndex(arith::MulIOp::create(b, loc, keyTile,
                                                              kb.c32(bkv)))),
        {kb.toIndex(kvHead32), tmaBatch(kb.toIndex(batch32))},
        isK ? bars.kFull() : bars.vFull(), stage);
  };
  auto loadQ = [&] {
    loadTile(qMap, plan.blockQ, boxCols(plan.headDim), kb.idx(0),
             packedRow(seqStartQ, qBegin), {head, tmaBatch(batch)},
             bars.qFull(), kb.idx(0));
  };
  auto loadFrom = [&](int64_t from) {
    auto loop = scf::ForOp::create(b, loc, kb.c32(from), n, kb.c32(1));
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(loop.getBody());
    loadKV(loop.getInductionVar(), /*isK=*/true);
    loadKV(loop.getInductionVar(), /*isK=*/false);
  };
  if (!plan.persistent) {
    loadQ();
    loadFrom(0);
    return;
  }
  // The first K tile goes ahead of Q: its slot frees at the previous tile's
  // second-to-last Q·Kᵀ, Q's buffer at its last; the first V after Q.
  Value any =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, j0, j1);
  auto ifAny = [&](function_ref<void()> fn) {
    auto ifOp = scf::IfOp::create(b, loc, any, false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&ifOp.getThenRegion().front());
    fn();
  };
  ifAny([&] { loadKV(kb.c32(0), /*isK=*/true); });
  wait(bars.qEmpty(), kb.idx(0), parityOf(kb.add(tileIter, 1)));
  publishTile();
  loadQ();
  ifAny([&] {
    loadKV(kb.c32(0), /*isK=*/false);
    loadFrom(1);
  });
}

void HopperForward::emitTransposer() {
  // Ring iteration i: V(i) lands in slot i mod stages (its full barrier),
  // Vᵀ(i) is written to the same slot of the Vᵀ ring. The slot is free: the
  // producer refilled V only after the consumers' P·V of the previous round
  // released it (V empty), which came after that round's Vᵀ full.
  const BarrierRing ring{layout.stages};
  auto loop = scf::ForOp::create(b, loc, kb.idx(0), kb.sub(jEnd, jBegin),
                                 kb.idx(1));
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(loop.getBody());
  Value it = loop.getInductionVar();
  Value stage = ring.slot(kb, it);
  wait(bars.vFull(), stage, ring.fullParity(kb, it));
  Value vtBase = kb.add(kb.mul(stage, layout.vtBytes()), layout.vtBase());
  Value vBase = kb.add(kb.mul(stage, layout.vBytes()), layout.vBase());
  attn_gpu::TransposeFp8TileOp::create(b, loc, kb.smem, vBase, vtBase,
                                       plan.blockKV, plan.headDimV);
  // Vᵀ is read next by wgmma (the async proxy).
  NVVM::FenceProxyOp::create(
      b, loc, NVVM::ProxyKind::async_shared,
      NVVM::SharedSpaceAttr::get(b.getContext(), NVVM::SharedSpace::shared_cta));
  arrive(bars.vtFull(), stage);
}
