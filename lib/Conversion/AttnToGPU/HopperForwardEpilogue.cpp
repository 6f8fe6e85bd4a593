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
  Value invSum = finalize.getInvSum();
  if (fp8()) { // O takes V's descale with 1/l
    SmallVector<Value> lanes = laneValues(b, loc, invSum);
    for (Value &f : lanes)
      f = arith::MulFOp::create(b, loc, f, t.oDescale);
    invSum = rows(lanes);
  }
  // LSE [B, H, Nq], or a varlen batch's [H, Tq] from the sequence's row;
  // O's rows likewise count from the sequence's first packed row.
  Value qRowsBase =
      seqStartQ ? kb.add(kb.mul(head, boundNq), seqStartQ)
                : kb.mul(kb.add(kb.mul(batch, heads), head), nq);
  Value oBase =
      seqStartQ ? oT.rowOffset(kb, oT.headBase(kb, kb.idx(0), head), seqStartQ)
                : oT.headBase(kb, batch, head);
  Value acc = fragmentOf(b, loc, res.drop_front(4), dv,
                         FragmentLayout::Accumulator);
  // Staged through the consumer's Q rows in shared memory, unless a
  // persistent grid's next Q may already be landing there.
  bool staged = plan.schedule.smemEpilogue && !plan.persistent;
  attn_gpu::StoreOutputOp::create(
      b, loc, acc, invSum, finalize.getLse(), oMem, oBase, oT.rowStride, lseMem,
      qRowsBase, qBegin, t.rowBase, nq, /*rows=*/Value(),
      /*split=*/Value(), /*batches=*/Value(), staged ? kb.smem : Value(),
      staged ? t.consumer : Value());
}
