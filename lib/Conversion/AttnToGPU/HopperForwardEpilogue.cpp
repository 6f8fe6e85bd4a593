//===- HopperForwardEpilogue.cpp - O and the LSE ----------------*- C++ -*-===//
//
// Part of the wgmma forward (HopperForward.h).
//
//===----------------------------------------------------------------------===//

#include "HopperForward.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

using namespace mlir;
using namespace mlir::fa;
using namespace mlir::fa::gpu_lowering;

void HopperForward::emitOutput(const ConsumerState &t, ArrayRef<Value> res,
                               Value oMem, Value lseMem) {
  // O = acc / l, LSE = ln2·(m + log2 l); empty rows give 0 and -inf.
  const int64_t dv = plan.headDimV;
  SoftmaxState state{{res[0], res[1]}, {res[2], res[3]}};
  Value invSum[2], lse[2];
  Value sink = sinksMem ? memref::LoadOp::create(b, loc, sinksMem,
                                                 ValueRange{head})
                              .getResult()
                        : Value();
  using attn_gpu::FragmentLayout;
  auto rows = [&](ArrayRef<Value> lanes) {
    return fragmentOf(b, loc, lanes, 1, FragmentLayout::Rows);
  };
  Value rowMax = rows(state.rowMax);
  auto finalize = attn_gpu::FinalizeSoftmaxOp::create(
      b, loc, rowMax.getType(), rowMax.getType(), rowMax, rows(state.rowSum),
      sink, /*shift=*/Value()); // (attn-gpu-anchor-score-mod's)
  llvm::copy(laneValues(b, loc, finalize.getInvSum()), invSum);
  llvm::copy(laneValues(b, loc, finalize.getLse()), lse);
  if (fp8())
    for (Value &f : invSum)
      f = arith::MulFOp::create(b, loc, f, t.oDescale);
  // LSE [B, H, Nq], or a varlen batch's [H, Tq] from the sequence's row;
  // O's rows likewise count from the sequence's first packed row.
  Value qRowsBase =
      seqStartQ ? kb.add(kb.mul(head, boundNq), seqStartQ)
                : kb.mul(kb.add(kb.mul(batch, heads), head), nq);
  Value oBase = seqStartQ ? oT.rowOffset(kb, oT.headBase(kb, kb.idx(0), head),
                                         seqStartQ)
                          : oT.headBase(kb, batch, head);
  // (A persistent grid's next Q may already be landing in the Q tile.)
  if (plan.schedule.smemEpilogue && !plan.persistent) {
    emitSmemEpilogue(t.consumer, ValueRange(res).drop_front(4), invSum, lse,
                     oMem, lseMem, qRowsBase, oBase, t.rowBase);
    return;
  }
  Value invSumRows = fp8() ? rows(invSum) : finalize.getInvSum();
  Value acc = fragmentOf(b, loc, res.drop_front(4), dv,
                         FragmentLayout::Accumulator);
  attn_gpu::StoreOutputOp::create(
      b, loc, acc, invSumRows, finalize.getLse(), oMem, oBase, oT.rowStride,
      lseMem, qRowsBase, qBegin, t.rowBase, nq, /*rows=*/Value(),
      /*split=*/Value(), /*batches=*/Value());
}

void HopperForward::emitSmemEpilogue(Value consumer, ValueRange acc,
                                     Value invSum[2], Value lse[2], Value oMem,
                                     Value lseMem, Value qRowsBase,
                                     Value oBase, Value rowBase) {
  const int64_t dv = plan.headDimV, bq = plan.blockQ;
  const int64_t slabBytes = bq * kSlabRowBytes;
  // The Q rows of this consumer are read only by its own wgmmas, all retired
  // here, so its O can take their place. Same 128 B swizzle as the TMA boxes
  // (16 B chunk c of row r at c ^ (r mod 8)): lanes g = 0..7 of one store hit
  // eight distinct chunks, so the 4-byte stores are conflict-free.
  Value rowL[2];
  for (int64_t r = 0; r < 2; ++r)
    rowL[r] = kb.add(rowBase, kb.add(kb.groupId, r * 8)); // row in 0..127
  Value laneBytes = kb.mul(kb.threadInGroup, 4);
  for (int64_t c8 = 0; c8 < 8; ++c8) {
    Value chunk = arith::XOrIOp::create(b, loc, kb.groupId, kb.idx(c8));
    Value inRow = kb.add(kb.mul(chunk, 16), laneBytes);
    for (int64_t n = c8; n < dv / 8; n += 8) {
      int64_t slab = n / 8;
      for (int64_t r = 0; r < 2; ++r) {
        Value lo = arith::MulFOp::create(b, loc, acc[n * 4 + 2 * r], invSum[r]);
        Value hi =
            arith::MulFOp::create(b, loc, acc[n * 4 + 2 * r + 1], invSum[r]);
        Value bytes = kb.add(kb.add(kb.mul(rowL[r], kSlabRowBytes), inRow),
                             slab * slabBytes);
        kb.storePair(kb.truncPair(lo, hi), kb.smem, kb.divui(bytes, 2));
      }
    }
  }
  for (int64_t r = 0; r < 2; ++r) {
    Value row = kb.add(qBegin, rowL[r]);
    auto lseIf = scf::IfOp::create(
        b, loc,
        arith::AndIOp::create(b, loc, eq(kb.threadInGroup, kb.idx(0)),
                              kb.lt(row, nq)),
        false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&lseIf.getThenRegion().front());
    memref::StoreOp::create(b, loc, lse[r], lseMem,
                            ValueRange{kb.add(qRowsBase, row)});
  }
  // Only this warpgroup's 128 threads meet (barriers 3 and 4).
  {
    auto ifOp = scf::IfOp::create(b, loc, eq(consumer, kb.idx(0)),
                                  /*withElseRegion=*/true);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&ifOp.getThenRegion().front());
    namedBarrier(b, loc, "bar.sync", 3, 128);
    b.setInsertionPointToStart(&ifOp.getElseRegion().front());
    namedBarrier(b, loc, "bar.sync", 4, 128);
  }
  // Each thread moves 16 B chunks: consecutive threads take consecutive
  // chunks of a row, so a warp writes whole 256 B rows.
  const int64_t chunksPerRow = dv / 8;
  const int64_t chunks = kRowsPerConsumer * chunksPerRow;
  Value t = kb.remui(kb.tid, 128);
  Value row0 = kb.mul(consumer, kRowsPerConsumer);
  auto vecTy = VectorType::get({8}, plan.elemType);
  for (int64_t k = 0; k < chunks / 128; ++k) {
    Value q = kb.add(t, k * 128);
    Value rowInWg = kb.divui(q, chunksPerRow);
    Value cc = kb.remui(q, chunksPerRow);
    Value r = kb.add(row0, rowInWg);
    Value swz = arith::XOrIOp::create(b, loc, kb.remui(cc, 8),
                                      kb.remui(rowInWg, 8));
    Value bytes = kb.add(kb.add(kb.mul(kb.divui(cc, 8), slabBytes),
                                kb.mul(r, kSlabRowBytes)),
                         kb.mul(swz, 16));
    Value v = vector::LoadOp::create(b, loc, vecTy, kb.smem,
                                     ValueRange{kb.divui(bytes, 2)},
                                     /*nontemporal=*/false,
                                     llvm::MaybeAlign(16));
    Value row = kb.add(qBegin, r);
    auto ifOp = scf::IfOp::create(b, loc, kb.lt(row, nq), false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&ifOp.getThenRegion().front());
    Value off = kb.add(oT.rowOffset(kb, oBase, row), kb.mul(cc, 8));
    vector::StoreOp::create(b, loc, v, oMem, ValueRange{off},
                            /*nontemporal=*/false, llvm::MaybeAlign(16));
  }
}
