//===- MergeKernel.cpp - attn.merge of the split-KV partials ----*- C++ -*-===//
//
// One warp per output row r = (b·H + h)·Nq + q (written to O at the
// caller's strides): the split forward left S
// partial rows O_s (f32, [S, B, H, Nq, Dv]) and LSE_s ([S, B, H, Nq]) in the
// workspace. The warp takes M = max_s LSE_s over its lanes, then walks the
// splits with each lane holding 16 bytes (4 f32) of every partial row,
// weighting them by OnlineSoftmaxMath::mergeWeight, the merge math of the CPU
// decomposition, and writes O = Σ w_s·O_s / Σ w_s and LSE = M + ln Σ w_s.
// With sinks (f32 [H]) the row's sink is one more partial, LSE = sink[h] and
// O = 0: it starts both loops, M from the sink and Σ w_s from its weight.
//
//===----------------------------------------------------------------------===//

#include "Fragments.h"
#include "SplitKv.h"

#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace mlir::fa;
using namespace mlir::fa::gpu_lowering;

gpu::GPUFuncOp mlir::fa::buildMergeKernel(OpBuilder &b, Location loc,
                                          gpu::GPUModuleOp module,
                                          const KernelPlan &splitPlan) {
  // One warp per row: the split forward's producer warp has no row here
  // (KernelPlan::mergeThreads, what the manifest says).
  KernelPlan plan = splitPlan;
  plan.producerWarp = false;
  plan.tma = false;
  assert(plan.threads() == splitPlan.mergeThreads());
  const int64_t dv = plan.headDimV;
  Type elem = plan.elemType, f32 = b.getF32Type();
  OpBuilder::InsertionGuard guard(b);
  KernelParams params = mergeParams(b.getContext(), plan);
  auto func = createKernelFunc(b, loc, module, "fa_merge_" + splitPlan.tag(),
                               params, plan, /*sharedBytes=*/0);
  Block &entry = func.getBody().front();
  auto arg = [&](unsigned i) { return entry.getArgument(i); };
  Value oPart = arg(0), lsePart = arg(1), oMem = arg(2), lseMem = arg(3);

  KernelBuilder kb(b, loc, plan);
  kb.setupThreadIds();
  Value rows = kb.toIndex(arg(4)), splits = kb.toIndex(arg(5));
  Value cta = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
  Value row = kb.add(kb.mul(cta, plan.warps), kb.warp);
  auto inRange = scf::IfOp::create(b, loc, kb.lt(row, rows), false);
  b.setInsertionPointToStart(&inRange.getThenRegion().front());
  // O is in the caller's layout: row = (batch·H + head)·Nq + q.
  Value heads = kb.toIndex(arg(6)), nq = kb.toIndex(arg(7));
  StridedTensor oT = stridedTensor(kb, oMem, params.strides(entry, 0));
  Value headRow = arith::DivUIOp::create(b, loc, row, nq);
  // The query head: rows are (b, h, q) whether or not the split forward
  // packed the query heads of a key head.
  // (Built in the order GCC evaluated the call's arguments before: the
  // kernels without sinks keep their PTX.)
  Value queryRow = arith::RemUIOp::create(b, loc, row, nq);
  Value head = arith::RemUIOp::create(b, loc, headRow, heads);
  Value batch = arith::DivUIOp::create(b, loc, headRow, heads);
  Value oRow = oT.rowOffset(kb, oT.headBase(kb, batch, head), queryRow);
  attn::OnlineSoftmaxMath math = kb.softmaxMath();
  Value sink = loadSink(kb, entry, params, head);

  // M: each lane's largest LSE over splits lane, lane + 32, ... (and the
  // sink), then the warp's by xor shuffles.
  auto maxLoop = scf::ForOp::create(b, loc, kb.lane, splits, kb.idx(32),
                                    ValueRange{sink ? sink : kb.negInf()});
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(maxLoop.getBody());
    Value s = maxLoop.getInductionVar();
    Value lse = memref::LoadOp::create(b, loc, lsePart,
                                       ValueRange{kb.add(kb.mul(s, rows), row)});
    scf::YieldOp::create(
        b, loc, ValueRange{kb.maxf(maxLoop.getRegionIterArgs()[0], lse)});
  }
  Value maxLse = maxLoop.getResult(0);
  for (int64_t xorMask = 16; xorMask >= 1; xorMask /= 2)
    maxLse = kb.maxf(maxLse, kb.shuffleXor(maxLse, xorMask));

  // Lane l holds chunks l, l + 32, ... of `width` f32 columns (16 bytes
  // where the row length allows).
  const int64_t width = rowChunkElems(dv, 4);
  const int64_t chunks = dv / width, perLane = llvm::divideCeil(chunks, 32);
  auto vecType = VectorType::get({width}, f32);
  auto chunkColumn = [&](int64_t i) { return kb.mul(kb.add(kb.lane, i * 32), width); };
  auto chunkValid = [&](int64_t i) {
    return kb.lt(kb.add(kb.lane, i * 32), kb.idx(chunks));
  };
  Value zeroVec = arith::ConstantOp::create(
      b, loc, DenseElementsAttr::get(vecType, b.getF32FloatAttr(0.0f)));
  SmallVector<Value> init(perLane, zeroVec);
  init.push_back(sink ? math.mergeWeight(sink, maxLse) : kb.f32(0));
  auto sumLoop = scf::ForOp::create(b, loc, kb.idx(0), splits, kb.idx(1), init);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(sumLoop.getBody());
    Value s = sumLoop.getInductionVar();
    ValueRange it = sumLoop.getRegionIterArgs();
    Value partRow = kb.add(kb.mul(s, rows), row);
    Value lse = memref::LoadOp::create(b, loc, lsePart, ValueRange{partRow});
    Value weight = math.mergeWeight(lse, maxLse);
    Value w = vector::BroadcastOp::create(b, loc, vecType, weight);
    SmallVector<Value> next;
    for (int64_t i = 0; i < perLane; ++i) {
      // Past the row's last chunk a lane reads nothing and adds nothing.
      auto load = scf::IfOp::create(b, loc, TypeRange{vecType}, chunkValid(i),
                                    /*withElseRegion=*/true);
      {
        OpBuilder::InsertionGuard gl(b);
        b.setInsertionPointToStart(&load.getThenRegion().front());
        Value at = kb.add(kb.mul(partRow, dv), chunkColumn(i));
        Value part = vector::LoadOp::create(b, loc, vecType, oPart,
                                            ValueRange{at}, false,
                                            llvm::MaybeAlign(width * 4));
        scf::YieldOp::create(b, loc, part);
        b.setInsertionPointToStart(&load.getElseRegion().front());
        scf::YieldOp::create(b, loc, zeroVec);
      }
      next.push_back(vector::FMAOp::create(b, loc, w, load.getResult(0), it[i]));
    }
    next.push_back(arith::AddFOp::create(b, loc, it[perLane], weight));
    scf::YieldOp::create(b, loc, next);
  }
  auto [invSum, lse] = math.finalizeMerge(maxLse, sumLoop.getResult(perLane));
  Value inv = vector::BroadcastOp::create(b, loc, vecType, invSum);
  auto outType = VectorType::get({width}, elem);
  for (int64_t i = 0; i < perLane; ++i) {
    auto store = scf::IfOp::create(b, loc, chunkValid(i), false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&store.getThenRegion().front());
    Value o = arith::MulFOp::create(b, loc, sumLoop.getResult(i), inv);
    vector::StoreOp::create(b, loc, arith::TruncFOp::create(b, loc, outType, o),
                            oMem, ValueRange{kb.add(oRow, chunkColumn(i))},
                            false, llvm::MaybeAlign(width * 2));
  }
  auto first = scf::IfOp::create(
      b, loc,
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, kb.lane, kb.idx(0)),
      false);
  b.setInsertionPointToStart(&first.getThenRegion().front());
  memref::StoreOp::create(b, loc, lse, lseMem, ValueRange{row});
  b.setInsertionPointAfter(inRange);
  gpu::ReturnOp::create(b, loc);
  return func;
}
