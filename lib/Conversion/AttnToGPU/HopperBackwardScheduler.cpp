//===- HopperBackwardScheduler.cpp - wgmma backward tiles -----*- C++ -*-===//
//
// The tile scheduler of the wgmma backward (HopperBackward.h): CTA
// (x, y, z) owns key block x of key head y in batch z, and walks the query
// tiles that meet the key block's band, for each query head of the key
// head's GQA group: one walk over tiles × heads, tile t of head
// firstHead + t / tilesPerHead. The consumers index the walk by t; the
// producer steps a 32-bit (walk place, head) pair along with it. Both read
// the tile at a place through queryTileAt and run tileCount trips, so a
// block-sparse walk (the key block's listed query blocks: full, then
// partial) is the same sequence on both sides. A varlen batch's CTA owns
// key block x of sequence z (setupSequence): the walk is its sequence's.
//
//===----------------------------------------------------------------------===//

#include "BlockMask.h"
#include "HopperBackward.h"
#include "VarlenKernel.h"

#include "fa/Dialect/Attn/Transforms/Transforms.h"

using namespace mlir;
using namespace mlir::fa;
using namespace mlir::fa::gpu_lowering;

void HopperBackward::setupKeyBlock() {
  heads = kb.toIndex(param(10));
  kvHeads = kb.toIndex(param(11));
  nq = kb.toIndex(param(12));
  nk = kb.toIndex(param(13));
  Value place; // block-sparse: the place in the grid order
  if (plan.blockSparse) {
    std::tie(place, kvHead) =
        BlockMaskLine::gridPlace(kb, kvHeads, kBackwardOrderHeads);
  } else {
    keyBlock = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
    // Deterministic: block x takes key block Nk/128 − 1 − x, so the blocks
    // a tile's reduction waits for (the higher key blocks) start first
    // (emitDQReductions).
    if (plan.deterministic)
      keyBlock = kb.sub(kb.sub(kb.ceilDiv(nk, plan.blockKV), kb.idx(1)),
                        keyBlock);
    kvHead = gpu::BlockIdOp::create(b, loc, gpu::Dimension::y);
  }
  batch = gpu::BlockIdOp::create(b, loc, gpu::Dimension::z);
  headsPerKvHead = arith::DivUIOp::create(b, loc, heads, kvHeads);
  // Block-sparse: the longest query-block walks first, every key head's,
  // in the mask row of the group's first head (setupListedQueryTiles).
  if (plan.blockSparse)
    keyBlock = BlockMaskLine::orderedBlock(
        kb, blockMask, kb.toIndex(param(9)), maskHeads, nq, nk, batch,
        kb.mul(kvHead, headsPerKvHead), place, /*transposed=*/true);
  keyBegin = kb.mul(keyBlock, plan.blockKV);
}

void HopperBackward::setupSequence(unsigned cuSeqlensParam) {
  // Grid z is the sequence; its rows are clamped as attn-tile's IR clamps
  // them, so bad offsets never address memory outside the tensors.
  nqTotal = nq, nkTotal = nk;
  cuSeqlensQ = param(cuSeqlensParam);
  cuSeqlensK = param(cuSeqlensParam + 1);
  SequenceRows q = loadSequenceRows(b, loc, cuSeqlensQ, batch, nqTotal);
  SequenceRows k = loadSequenceRows(b, loc, cuSeqlensK, batch, nkTotal);
  seqStartQ = q.start, nq = q.length;
  seqStartK = k.start, nk = k.length;
}

void HopperBackward::setupQueryTiles() {
  // The query blocks of the tiled loop (those that meet this key block's
  // band) or of the block mask, for each query head of the group: one walk
  // over tiles × heads, tile t of head t / tilesPerHead. tileCount bounds
  // the consumer loop and every producer loop (forEachTile32): one value.
  if (plan.blockSparse)
    setupListedQueryTiles();
  else
    std::tie(tileBegin, tileEnd) =
        queryTileRange(keyBlock, plan.varlen ? nqTotal : nq,
                       plan.varlen ? nkTotal : nk);
  tilesPerHead = kb.sub(tileEnd, tileBegin);
  tileCount = kb.mul(tilesPerHead, headsPerKvHead);
  // The grid runs over the key blocks of the longest sequence: a key block
  // past its own sequence's end has no tile (and stores nothing).
  if (plan.varlen)
    tileCount = kb.select(kb.lt(keyBegin, nk), tileCount, kb.idx(0));
}

std::pair<Value, Value> HopperBackward::queryTileRange(Value block,
                                                      Value nqRows,
                                                      Value nkRows) {
  // (A varlen tiled loop reads its sequence's rows from the offsets and
  // the totals.)
  TileLoopInputs in{batch, kvHead, block, heads, kvHeads, nqRows, nkRows};
  in.cuSeqlensQ = cuSeqlensQ;
  in.cuSeqlensK = cuSeqlensK;
  in.windowLeft = plan.spec.windowLeftValue;
  in.windowRight = plan.spec.windowRightValue;
  return loops.cloneTileRange(b, in);
}

void HopperBackward::rederiveSizes() {
  assert(!plan.deterministic && !plan.blockSparse &&
         "the key block is %ctaid.x (setupKeyBlock)");
  auto gridIndex = [&](StringRef dim) {
    return kb.toIndex(inlinePtx(b, loc, b.getI32Type(),
                                ("mov.u32 $0, %ctaid." + dim + ";").str(), {},
                                "=r"));
  };
  if (plan.varlen) {
    batch = gridIndex("z");
    SequenceRows q = loadSequenceRows(b, loc, cuSeqlensQ, batch,
                                      kb.opaqueIndex(nqTotal));
    SequenceRows k = loadSequenceRows(b, loc, cuSeqlensK, batch,
                                      kb.opaqueIndex(nkTotal));
    seqStartQ = q.start, nq = q.length;
    seqStartK = k.start, nk = k.length;
  }
  Value block = gridIndex("x");
  Value nqRows = kb.opaqueIndex(plan.varlen ? nqTotal : nq);
  Value nkRows = kb.opaqueIndex(plan.varlen ? nkTotal : nk);
  Value end;
  std::tie(tileBegin, end) = queryTileRange(block, nqRows, nkRows);
  tilesPerHead = kb.sub(end, tileBegin);
}

void HopperBackward::setupListedQueryTiles() {
  // Row batch · mask_heads + (head mod mask_heads) of the mask, as the
  // forward reads it. Every query head of the group walks the row of the
  // group's first head: mask_heads is 1 (one row for all heads) or, without
  // GQA, heads (the runtime refuses per-head masks with GQA).
  Value batches = kb.toIndex(param(9));
  BlockMaskLayout l;
  queryLine = BlockMaskLine::walk(
      kb, blockMask, batches, maskHeads, nq, nk, batch,
      [&] { return kb.mul(kvHead, headsPerKvHead); }, keyBlock,
      /*transposed=*/true, &l);
  queryBlocks = l.queryBlocks;
  fullTiles = queryLine.full;
  tileBegin = kb.idx(0);
  tileEnd = queryLine.count;
}

Value HopperBackward::queryTileAt(Value walk) {
  if (!plan.blockSparse)
    return walk;
  // Clamped into [0, NQB): any buffer contents keep the loads and the dQ
  // reduction inside the tensors.
  Value listed = kb.toIndex(arith::MaxSIOp::create(
      b, loc, queryLine.blockAt(kb, walk), kb.c32(0)));
  return kb.minsi(listed, kb.sub(queryBlocks, kb.idx(1)));
}

Value HopperBackward::isPartialTile(Value t) {
  Value walk = arith::RemUIOp::create(b, loc, t, tilesPerHead);
  return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, walk,
                               fullTiles);
}

Value HopperBackward::headOf(Value t) {
  return kb.add(firstHead, arith::DivUIOp::create(b, loc, t, tilesPerHead));
}

Value HopperBackward::qBeginOf(Value t) {
  return kb.mul(queryTileAt(kb.add(
                    tileBegin, arith::RemUIOp::create(b, loc, t, tilesPerHead))),
                plan.blockQ);
}

Value HopperBackward::queryRowsBaseOf(Value head) {
  if (plan.varlen) // [H, Tq] from the sequence's first query
    return kb.add(kb.mul(head, nqTotal), seqStartQ);
  return kb.mul(kb.add(kb.mul(batch, heads), head), nq);
}

void HopperBackward::forEachTile32(
    function_ref<void(Value, Value, Value, Value)> body) {
  // The producer runs in 24 registers: 64-bit indices and the divisions of
  // headOf / qBeginOf would spill, so qTile and head step along instead.
  Type i32 = b.getI32Type();
  Value tileEnd32 = kb.toI32(tileEnd), tileBegin32 = kb.toI32(tileBegin);
  auto loop =
      scf::ForOp::create(b, loc, kb.c32(0), kb.toI32(tileCount), kb.c32(1),
                         ValueRange{tileBegin32, kb.toI32(firstHead)});
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(loop.getBody());
  Value t = loop.getInductionVar();
  Value walk = loop.getRegionIterArgs()[0];
  Value head = loop.getRegionIterArgs()[1];
  Value qTile =
      plan.blockSparse ? kb.toI32(queryTileAt(kb.toIndex(walk))) : walk;
  body(t, arith::AndIOp::create(b, loc, t, kb.c32(1)), qTile, head);
  Value next = add32(walk, kb.c32(1));
  Value wrap = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, next,
                                     tileEnd32);
  scf::YieldOp::create(
      b, loc,
      ValueRange{arith::SelectOp::create(b, loc, wrap, tileBegin32, next),
                 add32(head, arith::ExtUIOp::create(b, loc, i32, wrap))});
}

Value HopperBackward::lastKeyBlockOf(Value qBegin) {
  return kb.sub(kb.tileRange(attn::buildKeyBand(b, loc, plan.spec, qBegin,
                                                kb.add(qBegin, plan.blockQ),
                                                nq, nk),
                             nk, plan.blockKV)
                    .second,
                kb.idx(1));
}
