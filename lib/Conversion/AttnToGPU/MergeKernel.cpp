//===- MergeKernel.cpp - attn.merge of the split-KV partials ----*- C++ -*-===//
//
// A CTA per `warps` output rows r = (b·H + h)·Nq + q (written to O at the
// caller's strides), each row's splits spread over mergeWarps() / warps of
// its warps (the row's parts): the split forward left S partial rows O_s
// (f32, [S, B, H, Nq, Dv]) and LSE_s ([S, B, H, Nq]) in the workspace. Each
// part takes M = max_s LSE_s over its lanes, then walks its splits 16 at a
// time with each lane holding 16 bytes (4 f32) of the partial rows (rows of
// up to 16 such chunks: 32 / chunks lane groups, each over its own splits,
// summed by shuffles at the end), weighting them by
// OnlineSoftmaxMath::mergeWeight, the merge math of the CPU decomposition;
// the parts' sums meet in shared memory, and part 0 writes
// O = Σ w_s·O_s / Σ w_s and LSE = M + ln Σ w_s.
// With sinks (f32 [H]) the row's sink is one more partial, LSE = sink[h] and
// O = 0: it starts both loops, M from the sink and Σ w_s from its weight.
//===----------------------------------------------------------------------===//

#include "Fragments.h"
#include "SplitKv.h"

#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace mlir::fa;
using namespace mlir::fa::gpu_lowering;

/// Splits a merge lane stages in shared memory at a time.
constexpr int64_t kMergeUnroll = 16;

/// A merge lane's shared slots: kMergeUnroll splits' chunks of a row and
/// their LSEs; then, where warps share a row, each part's sums.
int64_t KernelPlan::mergeSharedBytes() const {
  int64_t width = rowChunkElems(headDimV, 4);
  int64_t values = llvm::divideCeil(headDimV / width, 32) * width + 1;
  int64_t lanes = mergeWarps() * 32;
  int64_t partSums = mergeWarps() > warps ? lanes * values : 0;
  return (lanes * kMergeUnroll * values + partSums) * 4;
}

/// The sums of a row's parts 1 .. parts-1 added into part 0's (in `sums`:
/// each lane's vectors of row chunks, then its weight sum): each part leaves
/// its lanes' sums in shared memory from `offset` ([rows][parts][32 lanes]
/// [values]) for part 0's same lanes, one CTA barrier apart. Every part's M
/// is the row's, so the sums add as they are.
static void addPartSums(KernelBuilder &kb, Value smem, int64_t offset,
                        SmallVector<Value> &sums, Value rowInCta, Value part,
                        int64_t parts, VectorType vecType) {
  OpBuilder &b = kb.b;
  Location loc = kb.loc;
  const int64_t width = vecType.getNumElements();
  const int64_t vectors = static_cast<int64_t>(sums.size()) - 1;
  const int64_t values = vectors * width + 1;
  auto slot = [&](Value p, int64_t value) {
    Value lanes =
        kb.add(kb.mul(kb.add(kb.mul(rowInCta, parts), p), 32), kb.lane);
    return kb.add(kb.mul(lanes, values), kb.idx(offset + value));
  };
  auto others = scf::IfOp::create(b, loc, kb.lt(kb.idx(0), part), false);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&others.getThenRegion().front());
    for (int64_t v = 0; v < vectors; ++v)
      for (int64_t e = 0; e < width; ++e)
        memref::StoreOp::create(b, loc,
                                vector::ExtractOp::create(b, loc, sums[v], e),
                                smem, ValueRange{slot(part, v * width + e)});
    memref::StoreOp::create(b, loc, sums[vectors], smem,
                            ValueRange{slot(part, vectors * width)});
  }
  gpu::BarrierOp::create(b, loc);
  for (int64_t p = 1; p < parts; ++p) {
    Value from = kb.idx(p);
    for (int64_t v = 0; v < vectors; ++v) {
      SmallVector<Value> lanes;
      for (int64_t e = 0; e < width; ++e) {
        Value x = vector::ExtractOp::create(b, loc, sums[v], e);
        Value y = memref::LoadOp::create(b, loc, smem,
                                         ValueRange{slot(from, v * width + e)});
        lanes.push_back(arith::AddFOp::create(b, loc, x, y));
      }
      sums[v] = vector::FromElementsOp::create(b, loc, vecType, lanes);
    }
    sums[vectors] = arith::AddFOp::create(
        b, loc, sums[vectors],
        memref::LoadOp::create(b, loc, smem,
                               ValueRange{slot(from, vectors * width)}));
  }
}

gpu::GPUFuncOp mlir::fa::buildMergeKernel(OpBuilder &b, Location loc,
                                          gpu::GPUModuleOp module,
                                          const KernelPlan &splitPlan) {
  // A CTA per splitPlan.warps rows, `parts` warps a row (KernelPlan::
  // mergeWarps, what the manifest says); the split forward's producer warp
  // has no part here.
  KernelPlan plan = splitPlan;
  plan.producerWarp = false;
  plan.tma = false;
  plan.warps = splitPlan.mergeWarps();
  const int64_t rowsPerCta = splitPlan.warps, parts = plan.warps / rowsPerCta;
  const int64_t dv = plan.headDimV;
  Type elem = plan.elemType, f32 = b.getF32Type();
  OpBuilder::InsertionGuard guard(b);
  KernelParams params = mergeParams(b.getContext(), plan);
  auto func = createKernelFunc(b, loc, module, "fa_merge_" + splitPlan.tag(),
                               params, plan, splitPlan.mergeSharedBytes());
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
  Value rowInCta = parts > 1 ? kb.divui(kb.warp, parts) : kb.warp;
  Value part = parts > 1 ? kb.remui(kb.warp, parts) : kb.idx(0);
  Value row = kb.add(kb.mul(cta, rowsPerCta), rowInCta);
  // A row past the last (the last CTA's) computes the last one's sums and
  // stores nothing: every warp reaches the CTA barrier of the parts.
  Value rowValid = kb.lt(row, rows);
  row = kb.minsi(row, kb.sub(rows, kb.idx(1)));
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
  // sink), kMaxUnroll of them a step loaded together (fa_splitkv_choose's
  // most splits, 128, in one step; a split past the last reads the last),
  // then the warp's by xor shuffles; every part takes the whole row's.
  constexpr int64_t kMaxUnroll = 4;
  auto maxLoop =
      scf::ForOp::create(b, loc, kb.lane, splits, kb.idx(32 * kMaxUnroll),
                         ValueRange{sink ? sink : kb.negInf()});
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(maxLoop.getBody());
    Value last = kb.sub(splits, kb.idx(1));
    SmallVector<Value> lses;
    for (int64_t u = 0; u < kMaxUnroll; ++u) {
      Value s = kb.minsi(kb.add(maxLoop.getInductionVar(), u * 32), last);
      lses.push_back(memref::LoadOp::create(
          b, loc, lsePart, ValueRange{kb.add(kb.mul(s, rows), row)}));
    }
    Value m = maxLoop.getRegionIterArgs()[0];
    for (Value lse : lses)
      m = kb.maxf(m, lse);
    scf::YieldOp::create(b, loc, ValueRange{m});
  }
  Value maxLse = maxLoop.getResult(0);
  for (int64_t xorMask = 16; xorMask >= 1; xorMask /= 2)
    maxLse = kb.maxf(maxLse, kb.shuffleXor(maxLse, xorMask));

  // Lane l holds chunks l, l + 32, ... of `width` f32 columns (16 bytes
  // where the row length allows). Where a row has 16 or fewer chunks dividing
  // 32, the warp's lanes form `groups` copies of the row; with the row's
  // parts, `ways` = groups·parts copies, copy c = part·groups + group
  // taking splits c, c + ways, ...; each lane takes kMergeUnroll of its
  // splits a step, copied by cp.async into its own slots of shared memory,
  // all in flight at once, then weighs and sums them from there. (Loaded
  // into registers, ptxas let few of them fly together and the merge's
  // round trips grew with the splits: PERF.md, thirty-ninth session.)
  const int64_t width = rowChunkElems(dv, 4);
  const int64_t chunks = dv / width, perLane = llvm::divideCeil(chunks, 32);
  const int64_t groups = chunks <= 16 && 32 % chunks == 0 ? 32 / chunks : 1;
  const int64_t ways = groups * parts;
  Value group = groups > 1 ? kb.divui(kb.lane, chunks) : kb.idx(0);
  Value copy = parts > 1 ? kb.add(kb.mul(part, groups), group) : group;
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
  // The lane's slots: kMergeUnroll × (perLane row chunks, then the LSE).
  const int64_t slotValues = perLane * width + 1;
  const int64_t stagingValues = plan.warps * 32 * kMergeUnroll * slotValues;
  Value staging = kb.sharedView(module, f32, splitPlan.mergeSharedBytes() / 4);
  Value laneSlots =
      kb.mul(kb.add(kb.mul(kb.warp, 32), kb.lane), kMergeUnroll * slotValues);
  auto slotAt = [&](int64_t u, int64_t value) {
    return kb.add(laneSlots, kb.idx(u * slotValues + value));
  };
  auto tokTy = nvgpu::DeviceAsyncTokenType::get(b.getContext());
  Value zeroVec = arith::ConstantOp::create(
      b, loc, DenseElementsAttr::get(vecType, b.getF32FloatAttr(0.0f)));
  SmallVector<Value> init(perLane, zeroVec);
  // The sink's weight once per row: in copy 0.
  Value sinkWeight = sink ? math.mergeWeight(sink, maxLse) : kb.f32(0);
  init.push_back(ways > 1
                     ? kb.select(kb.lt(copy, kb.idx(1)), sinkWeight, kb.f32(0))
                     : sinkWeight);
  // kMergeUnroll splits a lane and step (a copy's steps are `ways` apart);
  // a split past the last copies nothing (its slots zero-filled) and
  // weighs 0.
  auto loop = scf::ForOp::create(b, loc, kb.idx(0), splits,
                                 kb.idx(ways * kMergeUnroll), init);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(loop.getBody());
    SmallVector<Value> next(loop.getRegionIterArgs()), valid;
    for (int64_t u = 0; u < kMergeUnroll; ++u) {
      Value s = kb.add(kb.add(loop.getInductionVar(), u * ways), copy);
      valid.push_back(kb.lt(s, splits));
      Value partRow =
          kb.add(kb.mul(kb.minsi(s, kb.sub(splits, kb.idx(1))), rows), row);
      Value rowElems = kb.select(valid.back(), kb.idx(width), kb.idx(0));
      for (int64_t i = 0; i < perLane; ++i)
        nvgpu::DeviceAsyncCopyOp::create(
            b, loc, tokTy, staging, ValueRange{slotAt(u, i * width)}, oPart,
            ValueRange{kb.add(kb.mul(partRow, dv), chunkColumn(i))},
            b.getIndexAttr(width), rowElems,
            width == 4 ? b.getUnitAttr() : UnitAttr());
      nvgpu::DeviceAsyncCopyOp::create(
          b, loc, tokTy, staging, ValueRange{slotAt(u, perLane * width)},
          lsePart, ValueRange{partRow}, b.getIndexAttr(1),
          kb.select(valid.back(), kb.idx(1), kb.idx(0)), UnitAttr());
    }
    kb.commitAsync();
    kb.waitAsync(0);
    for (int64_t u = 0; u < kMergeUnroll; ++u) {
      Value lse = memref::LoadOp::create(
          b, loc, staging, ValueRange{slotAt(u, perLane * width)});
      Value weight =
          kb.select(valid[u], math.mergeWeight(lse, maxLse), kb.f32(0));
      Value w = vector::BroadcastOp::create(b, loc, vecType, weight);
      for (int64_t i = 0; i < perLane; ++i) {
        Value partial = vector::LoadOp::create(
            b, loc, vecType, staging, ValueRange{slotAt(u, i * width)});
        next[i] = vector::FMAOp::create(b, loc, w, partial, next[i]);
      }
      next[perLane] = arith::AddFOp::create(b, loc, next[perLane], weight);
    }
    scf::YieldOp::create(b, loc, next);
  }
  SmallVector<Value> sums(loop.getResults());

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
  if (parts > 1)
    addPartSums(kb, staging, stagingValues, sums, rowInCta, part, parts,
                vecType);
  auto [invSum, lse] = math.finalizeMerge(maxLse, sums[perLane]);
  Value inv = vector::BroadcastOp::create(b, loc, vecType, invSum);
  auto outType = VectorType::get({width}, elem);
  // Part 0's group-0 lanes store (each holds its chunks of the row's sums).
  Value stores = rowValid;
  if (parts > 1)
    stores = arith::AndIOp::create(b, loc, stores, kb.lt(part, kb.idx(1)));
  for (int64_t i = 0; i < perLane; ++i) {
    Value mine = arith::AndIOp::create(b, loc, stores, chunkValid(i));
    if (groups > 1)
      mine = arith::AndIOp::create(b, loc, mine, kb.lt(group, kb.idx(1)));
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
      arith::AndIOp::create(b, loc, stores,
                            arith::CmpIOp::create(b, loc,
                                                  arith::CmpIPredicate::eq,
                                                  kb.lane, kb.idx(0))),
      false);
  b.setInsertionPointToStart(&first.getThenRegion().front());
  memref::StoreOp::create(b, loc, lse, lseMem, ValueRange{row});
  b.setInsertionPointAfter(first);
  gpu::ReturnOp::create(b, loc);
  return func;
}
