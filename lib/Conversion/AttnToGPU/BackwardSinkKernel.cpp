//===- BackwardSinkKernel.cpp - d_sinks of the backward ---------*- C++ -*-===//
//
// fa_bwd_sink (plans with sinks): d sink_h = −Σ_{b,q} e^{sink_h − LSE}·Delta
// over every row of head h (OnlineSoftmaxMath::sinkGradientTerm, the CPU
// decomposition's term), one CTA per head, launched after fa_bwd_pre has
// written Delta. A varlen batch's rows are those of its sequences, the first
// cu_seqlens_q[B] of LSE and Delta [H, Tq] (the others were never written).
// Thread t sums rows t, t + threads, … in order, each warp sums its lanes
// with xor shuffles, and thread 0 adds the warps' sums in warp order: d_sinks
// has the same bits on every run (no atomics). The rows of a head are B·Nq
// loads of 8 bytes, a few microseconds beside fa_bwd.
//
//===----------------------------------------------------------------------===//

#include "KernelParams.h"

#include "Fragments.h"
#include "VarlenKernel.h"

#include "mlir/Dialect/MemRef/IR/MemRef.h"

using namespace mlir;
using namespace mlir::fa;
using namespace mlir::fa::gpu_lowering;

void mlir::fa::buildBackwardSinkKernel(OpBuilder &b, Location loc,
                                       gpu::GPUModuleOp module,
                                       const KernelPlan &plan) {
  OpBuilder::InsertionGuard guard(b);
  KernelParams params = backwardSinkParams(b.getContext(), plan);
  auto func = createKernelFunc(b, loc, module, "fa_bwd_sink_" + plan.tag(),
                               params, plan, /*sharedBytes=*/plan.warps * 4);
  Block &entry = func.getBody().front();
  auto arg = [&](unsigned i) { return entry.getArgument(i); };
  Value lseMem = arg(0), deltaMem = arg(1), sinksMem = arg(2),
        dSinksMem = arg(3);
  KernelBuilder kb(b, loc, plan);
  kb.setupThreadIds();
  Value batch = kb.toIndex(arg(4)), heads = kb.toIndex(arg(5)),
        nq = kb.toIndex(arg(6));
  Value head = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
  Value sink = memref::LoadOp::create(b, loc, sinksMem, ValueRange{head});
  attn::OnlineSoftmaxMath math = kb.softmaxMath();
  Value rowCount;
  if (plan.varlen) { // the end of the last sequence, clamped to [0, Tq]
    SequenceRows last = loadSequenceRows(b, loc, arg(params.cuSeqlensParam),
                                         kb.sub(batch, kb.idx(1)), nq);
    rowCount = kb.add(last.start, last.length);
  } else {
    rowCount = kb.mul(batch, nq);
  }
  auto rows = scf::ForOp::create(
      b, loc, kb.tid, rowCount, kb.idx(plan.threads()), ValueRange{kb.f32(0)},
      [&](OpBuilder &, Location, Value row, ValueRange sum) {
        // Row `row` of the head is (b, q) = (row / Nq, row mod Nq), or a
        // varlen batch's packed row.
        Value at;
        if (plan.varlen) {
          at = kb.add(kb.mul(head, nq), row);
        } else {
          Value bIdx = arith::DivUIOp::create(b, loc, row, nq);
          Value q = arith::RemUIOp::create(b, loc, row, nq);
          at = kb.add(kb.mul(kb.add(kb.mul(bIdx, heads), head), nq), q);
        }
        Value lse = memref::LoadOp::create(b, loc, lseMem, ValueRange{at});
        Value delta = memref::LoadOp::create(b, loc, deltaMem, ValueRange{at});
        Value term = math.sinkGradientTerm(sink, lse, delta);
        scf::YieldOp::create(
            b, loc, ValueRange{arith::AddFOp::create(b, loc, sum[0], term)});
      });
  Value total = reduceOverCta(kb, module, rows.getResult(0), plan.warps,
                              [&](Value x, Value y) -> Value {
                                return arith::AddFOp::create(b, loc, x, y);
                              });
  Value first = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, kb.tid,
                                      kb.idx(0));
  auto store = scf::IfOp::create(b, loc, first, false);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&store.getThenRegion().front());
    memref::StoreOp::create(b, loc, total, dSinksMem, ValueRange{head});
  }
  gpu::ReturnOp::create(b, loc);
}
