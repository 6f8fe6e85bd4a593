//===- HopperBackwardEpilogue.cpp - wgmma backward stores -------*- C++ -*-===//
//
// The epilogue of the wgmma backward (HopperBackward.h). dQ of each query
// tile is a partial sum over the key blocks that see the tile, added into
// dq_accum (f32; fa_bwd_post converts it): by red.global from the
// accumulator registers in the 256-thread kernel, or, warp-specialised,
// staged in a shared dQ tile and added by one bulk reduction per tile,
// optionally in a fixed key-block order (deterministic). dK and dV are
// complete in registers once the CTA's last tile is done.
//
//===----------------------------------------------------------------------===//

#include "HopperBackward.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

using namespace mlir;
using namespace mlir::fa;
using namespace mlir::fa::gpu_lowering;

void mlir::fa::gpu_lowering::bulkReduceAddF32(OpBuilder &b, Location loc,
                                              Value globalAddr,
                                              Value sharedAddr, Value bytes) {
  inlinePtx(b, loc,
            "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 "
            "[$0], [$1], $2;",
            ValueRange{globalAddr, sharedAddr, bytes}, "l,r,r,~{memory}");
}

//===----------------------------------------------------------------------===//
// dQ
//===----------------------------------------------------------------------===//

void HopperBackward::reduceDQToGlobal(ArrayRef<Value> dqAcc, Value warpgroup,
                                      Value qBegin, Value qRowsBase) {
  // dq_accum += dQ for rows < Nq: lane (g, t) adds columns 8n + 2t, +1 of
  // each of this warpgroup's pieces in rows g and g + 8 of its warp.
  const int64_t d = plan.headDim;
  SmallVector<Value> dq = unpackDQ(dqAcc);
  Value queryRow0 = kb.mul(kb.remui(kb.warp, 4), 16);
  for (int64_t r = 0; r < 2; ++r) {
    Value row = kb.add(qBegin, kb.add(queryRow0, kb.add(kb.groupId, r * 8)));
    ifThen(kb.lt(row, nq), [&] {
      int64_t first = 0;
      for (const DQPiece &piece : dqPieces(d)) {
        Value elem = kb.add(kb.mul(kb.add(qRowsBase, row), d),
                            kb.add(dqPieceColumn(piece, warpgroup),
                                   kb.mul(kb.threadInGroup, 2)));
        Value addr = kb.add(dqAddr, kb.mul(elem, 4));
        for (int64_t n = 0; n < piece.width / 8; ++n)
          kb.redAddF32(addr, n * 8 * 4,
                       {dq[first + n * 4 + 2 * r],
                        dq[first + n * 4 + 2 * r + 1]});
        first += piece.width / 2;
      }
    });
  }
}

// dQ tile b: f32 row r of the tile at r·D·4 bytes, its 16 B chunk c at chunk
// c ^ (r mod 8): the 8-byte stores of lanes g = 0..7 (rows g) fall in
// distinct chunks of a 128 B line, two wavefronts per store (the least for
// 256 B). The bulk reduction copies the rows as they are, so dq_accum rows
// carry the same chunk order; fa_bwd_post undoes it (docs/ABI.md).
void HopperBackward::storeDQTile(ArrayRef<Value> dq, Value warpgroup,
                                 Value slot) {
  storeDQTileAt(
      dq, warpgroup,
      [&] { return kb.add(kb.mul(slot, layout.dqBytes()), layout.dqBase()); },
      plan.headDim, /*panel=*/false);
}

void HopperBackward::storeDQTileAt(ArrayRef<Value> dq, Value warpgroup,
                                   function_ref<Value()> tileBytes,
                                   int64_t rowFloats, bool panel) {
  // Lane (g, t) holds rows 16·(warp mod 4) + g, +8 (g = row mod 8) and, of
  // each piece (dqPieces) at column c0, columns c0 + 8n + 2t, +1, i.e. 16 B
  // chunk c0/4 + 8·(n/4) + (2·(n mod 4) | t/2), at byte 8·(t mod 2) of it.
  // The chunk's low three bits are xor-ed with g; (t/2) ^ g is per lane,
  // 2·(n mod 4) per store. Pieces start at a 128 B group of 8 chunks, or
  // (D = 96's 16-column middle) w·step columns into one, which the lane's
  // chunk then also carries.
  const int64_t d = rowFloats;
  // The swizzle's row is the row of dq_accum's (batch, head): for a varlen
  // batch, the packed row, whose residue mod 8 the sequence's start shifts.
  Value rowKey = plan.varlen ? kb.remui(kb.add(kb.groupId, seqStartQ), 8)
                             : kb.groupId;
  Value laneBytes = arith::OrIOp::create(
      b, loc,
      kb.mul(arith::XOrIOp::create(b, loc, kb.divui(kb.threadInGroup, 2),
                                   rowKey),
             16),
      kb.mul(kb.remui(kb.threadInGroup, 2), 8));
  auto f2 = VectorType::get({2}, b.getF32Type());
  int64_t first = 0;
  for (const DQPiece &piece : warpgroupDQPieces()) {
    assert(piece.firstColumn % 32 == 0 &&
           (piece.step % 32 == 0 || 2 * piece.step <= 32) &&
           "a dQ piece starts at a 128 B group or inside the first's half");
    const bool inGroup = piece.step % 32 != 0;
    Value pieceLane =
        inGroup ? arith::XOrIOp::create(b, loc, laneBytes,
                                        kb.mul(warpgroup, piece.step * 4))
                : laneBytes;
    auto columnBytes = [&]() -> Value {
      if (panel) { // w·step − w·D/2 + firstColumn: a multiple of 32 columns
        Value bytes = kb.mul(warpgroup, (piece.step - d) * 4);
        return piece.firstColumn ? kb.add(bytes, piece.firstColumn * 4) : bytes;
      }
      if (inGroup)
        return kb.idx(piece.firstColumn * 4);
      Value bytes = kb.mul(warpgroup, piece.step * 4);
      return piece.firstColumn ? kb.add(bytes, piece.firstColumn * 4) : bytes;
    };
    auto row = [&] { // a 128-row tile: the warpgroup's 64 rows of it
      Value r = kb.add(kb.mul(kb.remui(kb.warp, 4), 16), kb.groupId);
      return dqByRows() ? kb.add(r, kb.mul(warpgroup, 64)) : r;
    };
    Value rowBytes =
        kb.add(tileBytes(), kb.add(kb.mul(row(), d * 4), columnBytes()));
    for (int64_t r = 0; r < 2; ++r)
      for (int64_t n = 0; n < piece.width / 8; ++n) {
        Value inRow =
            arith::XOrIOp::create(b, loc, pieceLane, kb.idx((n % 4) * 32));
        Value bytes =
            kb.add(kb.add(rowBytes, r * 8 * d * 4 + (n / 4) * 128), inRow);
        Value pair = vector::FromElementsOp::create(
            b, loc, f2,
            ValueRange{dq[first + n * 4 + 2 * r],
                       dq[first + n * 4 + 2 * r + 1]});
        vector::StoreOp::create(b, loc, pair, stats,
                                ValueRange{kb.divui(bytes, 4)},
                                /*nontemporal=*/false, llvm::MaybeAlign(8));
      }
    first += piece.width / 2;
  }
}

// dq_accum += dQ tile t: rows [qBegin, min(qBegin + bq, Nq)) of the tile's
// head are contiguous, so one bulk reduction adds all of them. The buffer is
// released once the reduction has read it.
//
// Deterministic (plan.deterministic): the reduction of query tile q of head
// h waits until semaphore [b][h][q] counts the key blocks after this one
// that add into the tile, (last key block of the tile's key band) −
// keyBlock, and adds one once its writes are visible. The key blocks of the
// band are contiguous (the band is an interval, and the query and key tile
// ranges come from the same exact bands), so each tile is summed in
// descending key-block order. Block x runs key block Nk/128 − 1 − x
// (setupKeyBlock), so a CTA waits only on CTAs of lower linear block id,
// which have been scheduled. Descending, a causal key block's first
// (diagonal) tile has no one to wait for, and each tile reaches a key block
// after the block above has added it: the chain stays off the critical path
// (ascending, key block j waited about 2j tiles to start).
void HopperBackward::emitDQReductions() {
  const int64_t d = plan.headDim, bq = plan.blockQ;
  ifThen(kb.eq(kb.tid, kb.idx(32)), [&] {
    if (plan.deterministic) {
      semaphores = LLVM::PtrToIntOp::create(b, loc, b.getI64Type(), param(19));
      qTiles32 = kb.toI32(kb.ceilDiv(nq, bq));
      keyBlock32 = kb.toI32(keyBlock);
    }
    Value sharedBase = arith::AddIOp::create(
        b, loc,
        arith::TruncIOp::create(b, loc, b.getI32Type(), sharedAddress(kb)),
        kb.c32(layout.dqBase()));
    forEachTile32([&](Value t, Value slot32, Value qTile, Value head) {
      Value slot =
          waitForSlot32(BackwardBarriers::dqFull, t, slot32, /*round=*/0);
      Value qBegin = mul32(qTile, kb.c32(bq));
      Value semaphore;
      if (plan.deterministic)
        semaphore = waitForLaterKeyBlocks(head, qTile, qBegin);
      Value firstRow = add32(rowsBase32(head), qBegin);
      Value rows = arith::MinUIOp::create(
          b, loc, arith::SubIOp::create(b, loc, nq32, qBegin), kb.c32(bq));
      Value globalAddr = arith::IndexCastUIOp::create(
          b, loc, b.getI64Type(),
          kb.add(dqAddr, kb.mul(kb.toIndex(firstRow), d * 4)));
      Value sharedAddr =
          add32(sharedBase, mul32(slot32, kb.c32(layout.dqBytes())));
      Value bytes = mul32(rows, kb.c32(d * 4));
      bulkReduceAddF32(b, loc, globalAddr, sharedAddr, bytes);
      inlinePtx(b, loc, "cp.async.bulk.commit_group;");
      inlinePtx(b, loc, "cp.async.bulk.wait_group.read 0;");
      arriveBarrier(kb, barriers, BackwardBarriers::dqEmpty, slot);
      if (plan.deterministic) {
        // The reduction's writes complete and become visible to the
        // generic proxy (the acquire of the next key block), then release.
        inlinePtx(b, loc, "cp.async.bulk.wait_group 0;");
        inlinePtx(b, loc, "fence.proxy.async.global;");
        inlinePtx(b, loc, "red.release.gpu.global.add.u32 [$0], 1;",
                  ValueRange{semaphore}, "l,~{memory}");
      }
    });
    // Every reduction completes before the CTA exits.
    inlinePtx(b, loc, "cp.async.bulk.wait_group 0;");
  });
}

Value HopperBackward::waitForLaterKeyBlocks(Value head, Value qTile,
                                            Value qBegin32) {
  Value laterKeyBlocks = arith::SubIOp::create(
      b, loc, kb.toI32(lastKeyBlockOf(kb.toIndex(qBegin32))), keyBlock32);
  Value index = add32(mul32(add32(batchHeads32, head), qTiles32), qTile);
  Value semaphore = arith::AddIOp::create(
      b, loc, semaphores,
      arith::MulIOp::create(
          b, loc, arith::ExtUIOp::create(b, loc, b.getI64Type(), index),
          arith::ConstantOp::create(b, loc, b.getI64IntegerAttr(4))));
  // Spin (acquire) with a doubling nanosleep up to 1 µs, then order the
  // bulk reduction (async proxy) after what the acquire saw.
  inlinePtx(b, loc,
            "{\n.reg .pred ready;\n.reg .b32 seen, ns;\nmov.b32 ns, 32;\n"
            "spin:\nld.acquire.gpu.global.b32 seen, [$0];\n"
            "setp.eq.b32 ready, seen, $1;\n@ready bra.uni done;\n"
            "nanosleep.u32 ns;\nshl.b32 ns, ns, 1;\nmin.u32 ns, ns, 1024;\n"
            "bra.uni spin;\ndone:\n}",
            ValueRange{semaphore, laterKeyBlocks}, "l,r,~{memory}");
  inlinePtx(b, loc, "fence.proxy.async.global;");
  return semaphore;
}

//===----------------------------------------------------------------------===//
// dK and dV
//===----------------------------------------------------------------------===//

void HopperBackward::storeDKAndDV(ArrayRef<Value> results) {
  // dK (scale already in dSᵀ) and dV for keys < Nk.
  // The 128-row tile reads its thread id (varlen: and its sequence's rows)
  // again: the values of before the tile loop would live across it, and at
  // its 240 registers they spilled.
  const int64_t d = plan.headDim, dv = plan.headDimV;
  KernelBuilder::ThreadIds outerIds = kb.threadIds();
  const CtaSizes outerSizes = ctaSizes();
  if (dqByRows()) {
    kb.deriveThreadIds(kb.toIndex(inlinePtx(
        b, loc, b.getI32Type(), "mov.u32 $0, %tid.x;", {}, "=r")));
    if (plan.varlen)
      rederiveSizes();
  }
  Value keyRow = kb.add(keyBegin, keyRow0Of(consumerWarpgroup()));
  storeGradient(results.take_front(d / 2), d, dkMem,
                headBase(dkT, kvHead, seqStartK), keyRow, dkT.rowStride);
  storeGradient(results.slice(d / 2, dv / 2), dv, dvMem,
                headBase(dvT, kvHead, seqStartK), keyRow, dvT.rowStride);
  kb.setThreadIds(outerIds);
  setCtaSizes(outerSizes);
}

void HopperBackward::storeGradient(ArrayRef<Value> acc, int64_t cols,
                                   Value mem, Value base, Value keyRow,
                                   Value rowStride) {
  attn_gpu::StoreAccumulatorOp::create(
      b, loc,
      fragmentOf(b, loc, acc, cols, attn_gpu::FragmentLayout::Accumulator),
      mem, base, keyRow, nk, rowStride, cols);
}
