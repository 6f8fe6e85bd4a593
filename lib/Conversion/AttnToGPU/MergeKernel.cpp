//===- MergeKernel.cpp - attn.merge of the split-KV partials ----*- C++ -*-===//
//
// One warp per output row r = (b·H + h)·Nq + q (written to O at the
// caller's strides): the split forward left S
// partial rows O_s (f32, [S, B, H, Nq, Dv]) and LSE_s ([S, B, H, Nq]) in the
// workspace. The warp takes M = max_s LSE_s over its lanes, then walks the
// splits 16 at a time with each lane holding 16 bytes (4 f32) of the
// partial rows (rows of up to 16 such chunks: 32 / chunks lane groups, each
// over its own splits, summed by shuffles at the end), weighting them by
// OnlineSoftmaxMath::mergeWeight, the merge math of the CPU decomposition,
// and writes O = Σ w_s·O_s / Σ w_s and LSE = M + ln Σ w_s.
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
  // A dependent launch starts before the split forward ends: nothing is
  // read or written before the split's partials are complete and visible
  // (the memory clobber keeps every access below it).
  if (splitPlan.dependentMerge())
    inlinePtx(b, loc, "griddepcontrol.wait;");

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
  // where the row length allows). Where a row has 16 or fewer chunks dividing
  // 32, the warp's lanes form `groups` copies of the row, group g taking
  // splits g, g + groups, ...; each lane walks 16 of its splits per step
  // (the rest 4 at a time), so their loads are in flight together (a row's
  // warp is alone on its SM scheduler at decode sizes: a load round trip per
  // split made the merge as long as the split forward, PERF.md, eighteenth
  // session).
  constexpr int64_t kUnroll = 16, kTailUnroll = 4;
  const int64_t width = rowChunkElems(dv, 4);
  const int64_t chunks = dv / width, perLane = llvm::divideCeil(chunks, 32);
  const int64_t groups = chunks <= 16 && 32 % chunks == 0 ? 32 / chunks : 1;
  Value group = groups > 1 ? kb.divui(kb.lane, chunks) : kb.idx(0);
  Value chunkLane = groups > 1 ? kb.remui(kb.lane, chunks) : kb.lane;
  auto vecType = VectorType::get({width}, f32);
  auto chunkValid = [&](int64_t i) {
    return kb.lt(kb.add(chunkLane, i * 32), kb.idx(chunks));
  };
  // A lane past the row's last chunk reads the last one (never stored).
  auto chunkColumn = [&](int64_t i) {
    return kb.mul(kb.minsi(kb.add(chunkLane, i * 32), kb.idx(chunks - 1)),
                  width);
  };
  Value zeroVec = arith::ConstantOp::create(
      b, loc, DenseElementsAttr::get(vecType, b.getF32FloatAttr(0.0f)));
  SmallVector<Value> init(perLane, zeroVec);
  // The sink's weight once per row: in group 0.
  Value sinkWeight = sink ? math.mergeWeight(sink, maxLse) : kb.f32(0);
  init.push_back(groups > 1 ? kb.select(kb.lt(group, kb.idx(1)), sinkWeight,
                                        kb.f32(0))
                            : sinkWeight);
  // Splits [from, to) `unroll` per lane and step (a group's steps are
  // groups apart), the sums carried from `acc`.
  auto walk = [&](Value from, Value to, int64_t unroll, ValueRange acc) {
    auto loop = scf::ForOp::create(b, loc, from, to,
                                   kb.idx(groups * unroll), acc);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(loop.getBody());
    SmallVector<Value> next(loop.getRegionIterArgs());
    // Every load of the step first, then the sums.
    SmallVector<Value> valid, lses, parts;
    for (int64_t u = 0; u < unroll; ++u) {
      Value s = kb.add(kb.add(loop.getInductionVar(), u * groups), group);
      // Past the last split: the last one's row, weighed 0 and not added.
      valid.push_back(kb.lt(s, splits));
      Value partRow =
          kb.add(kb.mul(kb.minsi(s, kb.sub(splits, kb.idx(1))), rows), row);
      lses.push_back(
          memref::LoadOp::create(b, loc, lsePart, ValueRange{partRow}));
      for (int64_t i = 0; i < perLane; ++i)
        parts.push_back(vector::LoadOp::create(
            b, loc, vecType, oPart,
            ValueRange{kb.add(kb.mul(partRow, dv), chunkColumn(i))}, false,
            llvm::MaybeAlign(width * 4)));
    }
    for (int64_t u = 0; u < unroll; ++u) {
      Value weight = kb.select(valid[u], math.mergeWeight(lses[u], maxLse),
                               kb.f32(0));
      Value w = vector::BroadcastOp::create(b, loc, vecType, weight);
      for (int64_t i = 0; i < perLane; ++i)
        next[i] = kb.select(valid[u],
                            vector::FMAOp::create(b, loc, w,
                                                  parts[u * perLane + i],
                                                  next[i]),
                            next[i]);
      next[perLane] = arith::AddFOp::create(b, loc, next[perLane], weight);
    }
    scf::YieldOp::create(b, loc, next);
    return SmallVector<Value>(loop.getResults());
  };
  // Whole steps of kUnroll splits, then the rest kTailUnroll at a time.
  Value whole = kb.mul(kb.divui(splits, groups * kUnroll), groups * kUnroll);
  SmallVector<Value> sums = walk(kb.idx(0), whole, kUnroll, init);
  sums = walk(whole, splits, kTailUnroll, sums);

  // The groups' sums: lanes chunks apart hold one chunk of different splits.
  for (int64_t mask = chunks; groups > 1 && mask < 32; mask *= 2)
    for (Value &v : sums) {
      if (!isa<VectorType>(v.getType())) {
        v = arith::AddFOp::create(b, loc, v, kb.shuffleXor(v, mask));
        continue;
      }
      SmallVector<Value> lanes;
      for (int64_t e = 0; e < width; ++e) {
        Value x = vector::ExtractOp::create(b, loc, v, e);
        lanes.push_back(
            arith::AddFOp::create(b, loc, x, kb.shuffleXor(x, mask)));
      }
      v = vector::FromElementsOp::create(b, loc, vecType, lanes);
    }
  auto [invSum, lse] = math.finalizeMerge(maxLse, sums[perLane]);
  Value inv = vector::BroadcastOp::create(b, loc, vecType, invSum);
  auto outType = VectorType::get({width}, elem);
  for (int64_t i = 0; i < perLane; ++i) {
    // Group 0's lanes store (every group holds the row's sums now).
    Value mine = groups > 1 ? arith::AndIOp::create(
                                  b, loc, chunkValid(i),
                                  kb.lt(group, kb.idx(1)))
                            : chunkValid(i);
    auto store = scf::IfOp::create(b, loc, mine, false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&store.getThenRegion().front());
    Value o = arith::MulFOp::create(b, loc, sums[i], inv);
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
