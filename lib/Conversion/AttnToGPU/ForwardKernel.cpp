//===- ForwardKernel.cpp - the FlashAttention-2 forward kernel --*- C++ -*-===//
//
// One CTA per (query block, head, batch); warp w owns query rows
// [16w, 16w + 16) of the block. K and V tiles stream through two shared
// buffers each, in separate cp.async groups so the load of V(j) overlaps
// S(j) = Q·K(j)ᵀ and the softmax, and K(j+1) overlaps P·V(j).
//
// Split-KV (plan.splitKv): grid z runs over (batch, split) pairs; a CTA runs
// the key blocks of its split (the IR's, from the split's first key) and
// leaves its partial O (f32) and LSE in the workspace for the merge kernel.
//
// Packed GQA (plan.packGqa): grid y runs over key heads; the CTA's rows hold
// the query heads of its key head (TileRows.h), so each K/V block it loads
// serves all of them. Q rows are gathered and O/LSE rows scattered by
// (head, query); the mask and score_mod take each row's own.
//
// Every plan but packed GQA and mask_mod is built at the GPU tile level
// (attn_gpu ops: buildForwardTileKernel), which convert-attn-gpu-to-nvvm
// lowers to this file's fragment code; those two are still built here
// directly.
//
//===----------------------------------------------------------------------===//

#include "Fragments.h"
#include "SplitKv.h"
#include "TileRows.h"
#include "TiledLoopNest.h"

#include "fa/Dialect/Attn/Transforms/Transforms.h"
#include "fa/Dialect/AttnGPU/IR/AttnGPU.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/Support/MathExtras.h"

#include <cmath>
#include <optional>

using namespace mlir;
using namespace mlir::fa;
using namespace mlir::fa::gpu_lowering;

/// The packed-GQA forward, built from fragments directly (not yet at the
/// tile level).
static gpu::GPUFuncOp buildPackedForwardKernel(OpBuilder &b, Location loc,
                                               gpu::GPUModuleOp module,
                                               const KernelPlan &plan,
                                               const TiledLoopNest &loops) {
  const int64_t d = plan.headDim, dv = plan.headDimV;
  // Tensor-core steps run over the head dims padded to 16 (zeros in shared
  // memory); n8 tiles wholly past D / Dv are not accumulated, and columns
  // past them are not stored.
  const int64_t dPad = plan.paddedHeadDim(), dvPad = plan.paddedHeadDimV();
  const int64_t bq = plan.blockQ, bkv = plan.blockKV;
  OpBuilder::InsertionGuard guard(b);
  KernelParams params = forwardParams(b.getContext(), plan);
  auto func = createKernelFunc(b, loc, module, "fa_fwd_" + plan.tag(), params,
                               plan, plan.forwardSharedBytes());
  Block &entry = func.getBody().front();
  auto arg = [&](unsigned i) { return entry.getArgument(i); };
  Value qMem = arg(0), kMem = arg(1), vMem = arg(2), oMem = arg(3),
        lseMem = arg(4), scale = arg(10);

  KernelBuilder kb(b, loc, plan);
  kb.setupThreadIds();
  Value heads = kb.toIndex(arg(6)), kvHeads = kb.toIndex(arg(7));
  Value nq = kb.toIndex(arg(8)), nk = kb.toIndex(arg(9));
  Value qBlock = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
  Value head = gpu::BlockIdOp::create(b, loc, gpu::Dimension::y);
  Value batch = gpu::BlockIdOp::create(b, loc, gpu::Dimension::z);
  Value split, splits;
  if (plan.splitKv) {
    splits = kb.toIndex(arg(11)); // after the scale (forwardParams)
    split = arith::RemUIOp::create(b, loc, batch, splits);
    batch = arith::DivUIOp::create(b, loc, batch, splits);
  }
  // GQA: query head h reads key/value head h / (H / Hkv).
  // Packed: blockIdx.y is the key head.
  Value group = arith::DivUIOp::create(b, loc, heads, kvHeads);
  Value kvHead =
      plan.packGqa ? head : arith::DivUIOp::create(b, loc, head, group);
  // Q, K, V and O in the caller's layout; the bases are formed once, out of
  // the key loop. LSE (and a split's partial O) are fa's, contiguous.
  StridedTensor qT = stridedTensor(kb, qMem, params.strides(entry, 0));
  StridedTensor kT = stridedTensor(kb, kMem, params.strides(entry, 1));
  StridedTensor vT = stridedTensor(kb, vMem, params.strides(entry, 2));
  Value qRowsBase = kb.mul(kb.add(kb.mul(batch, heads), head), nq);
  Value qBase = qT.headBase(kb, batch, head);
  Value kBase = kT.headBase(kb, batch, kvHead);
  Value vBase = vT.headBase(kb, batch, kvHead);
  Value qBegin = kb.mul(qBlock, bq);
  std::optional<TileRows> packed;
  if (plan.packGqa) {
    packed = TileRows::packed(kb, batch, heads, kvHeads, nq, kvHead, qBlock);
    qBegin = packed->firstQuery();
  }
  // (head, query) of the lane's accumulator row r.
  auto laneHeadQuery = [&](int64_t r) {
    return packed->at(kb, TileRows::laneRow(kb, kb.mul(kb.warp, 16), r));
  };

  // Shared memory: Q | K stage 0, 1 | V stage 0, 1 (rows padded by 16 B).
  const int64_t qElems = bq * plan.strideQK(), kElems = bkv * plan.strideQK(),
                vElems = bkv * plan.strideV();
  kb.setupSharedMemory(module, qElems + 2 * kElems + 2 * vElems);
  SharedTile qTile{kb.idx(0), bq, d, plan.strideQK()};
  auto kTile = [&](Value stage) {
    return SharedTile{kb.add(kb.mul(stage, kElems), qElems), bkv, d,
                      plan.strideQK()};
  };
  auto vTile = [&](Value stage) {
    return SharedTile{kb.add(kb.mul(stage, vElems), qElems + 2 * kElems), bkv,
                      dv, plan.strideV()};
  };

  // The key blocks of the tiled loop (those that meet this block's band).
  Value splitKey;
  auto [jBegin, jEnd] = loops.cloneTileRange(
      b, {batch, head, qBlock, heads, kvHeads, nq, nk, split, splits},
      &splitKey);
  // The first key of block j: a split's blocks count from its first key.
  auto keyOf = [&](Value block) {
    Value key = kb.mul(block, bkv);
    return splitKey ? kb.add(splitKey, key) : key;
  };

  if (packed)
    kb.copyGatheredTileAsync(
        qMem,
        [&](Value row) {
          auto [h, q] = packed->at(kb, row);
          return std::make_pair(qT.rowOffset(kb, qT.headBase(kb, batch, h), q),
                                packed->valid(kb, row));
        },
        qTile);
  else
    kb.copyTileAsync(qMem, qBase, qBegin, nq, qTile, qT.rowStride);
  kb.copyTileAsync(kMem, kBase, keyOf(jBegin), nk, kTile(kb.idx(0)),
                   kT.rowStride);
  kb.copyTileAsync(vMem, vBase, keyOf(jBegin), nk, vTile(kb.idx(0)),
                   vT.rowStride);
  kb.waitAsync(2);
  gpu::BarrierOp::create(b, loc);
  Value rowBase = kb.mul(kb.warp, 16);
  SmallVector<SmallVector<Value, 4>> qFrags;
  if (plan.keepQInRegisters())
    for (int64_t ks = 0; ks < dPad / 16; ++ks)
      qFrags.push_back(kb.loadA(qTile, rowBase, ks * 16));
  Value scaleLog2 = softmaxScaleLog2(kb, scale);
  RowKeyBounds bounds =
      packed ? rowKeyBounds(
                   kb, {batch, head, qBegin, Value(), nq, nk}, qBegin,
                   [&](int64_t r) { return laneHeadQuery(r).second; },
                   [&]() { return packed->lastQuery(kb); })
             : rowKeyBounds(kb, {batch, head, qBegin, Value(), nq, nk},
                            rowBase, qBegin, bq);

  // Loop state: row max ×2, row sum ×2, O accumulator (⌈dv/8⌉ n-tiles × 4).
  const int64_t accN = llvm::divideCeil(dv, 8) * 4, sN = bkv / 8 * 4;
  SmallVector<Value> init{kb.negInf(), kb.negInf(), kb.f32(0), kb.f32(0)};
  init.append(accN, kb.f32(0));
  auto loop = scf::ForOp::create(b, loc, jBegin, jEnd, kb.idx(1), init);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(loop.getBody());
    Value j = loop.getInductionVar();
    ValueRange it = loop.getRegionIterArgs();
    SoftmaxState state{{it[0], it[1]}, {it[2], it[3]}};
    SmallVector<Value> acc(it.begin() + 4, it.end());
    Value stage = kb.remui(kb.sub(j, jBegin), 2);
    Value next = kb.sub(kb.idx(1), stage);
    Value kBegin = keyOf(j);

    // S = Q·K(j)ᵀ once K(j) has landed (V(j) may still be in flight).
    kb.waitAsync(1);
    gpu::BarrierOp::create(b, loc);
    SmallVector<Value> s(sN, kb.f32(0));
    SharedTile kt = kTile(stage);
    for (int64_t ks = 0; ks < dPad / 16; ++ks) {
      SmallVector<Value, 4> a = plan.keepQInRegisters()
                                    ? qFrags[ks]
                                    : kb.loadA(qTile, rowBase, ks * 16);
      for (int64_t np = 0; np < bkv / 16; ++np) {
        SmallVector<Value, 4> bf = kb.loadBFromNMajor(kt, kb.idx(np * 16), ks * 16);
        kb.mma(a, {bf[0], bf[1]}, MutableArrayRef<Value>(s).slice(np * 8, 4));
        kb.mma(a, {bf[2], bf[3]}, MutableArrayRef<Value>(s).slice(np * 8 + 4, 4));
      }
    }
    // K(j+1) streams in while the softmax and P·V(j) run.
    kb.copyTileAsync(kMem, kBase, kb.add(kBegin, bkv), nk, kTile(next),
                     kT.rowStride);

    if (plan.spec.scoreMod && packed)
      applyScoreMod(kb, s, {batch, head, qBegin, Value(), nq, nk},
                    laneHeadQuery, kBegin, scale);
    else if (plan.spec.scoreMod)
      applyScoreMod(kb, s, {batch, head, qBegin, Value(), nq, nk}, rowBase,
                    kBegin, scale);
    if (packed)
      applyMaskMod(kb, s, {batch, head, qBegin, Value(), nq, nk},
                   laneHeadQuery, kBegin);
    else
      applyMaskMod(kb, s, {batch, head, qBegin, Value(), nq, nk}, rowBase,
                   kBegin);

    // Only tiles crossing the band's edge or Nk evaluate a mask. The key
    // offset goes through an opaque copy: otherwise LLVM splits the loop at
    // the causal diagonal and the two copies spill at D = 128.
    Value maskKey = kb.opaqueIndex(kBegin);
    s = kb.maskUnlessInside(tileInside(kb, bounds, maskKey, bkv), s,
                            [&](SmallVector<Value> &masked) {
                              maskScores(kb, masked, bounds, maskKey);
                            });

    onlineSoftmaxUpdate(kb, s, acc, state, scaleLog2);

    // O += P·V(j); P goes from accumulator layout to A fragments in registers.
    kb.waitAsync(1);
    gpu::BarrierOp::create(b, loc);
    SharedTile vt = vTile(stage);
    for (int64_t kk = 0; kk < bkv / 16; ++kk) {
      ArrayRef<Value> p0 = ArrayRef<Value>(s).slice(kk * 8, 4);
      ArrayRef<Value> p1 = ArrayRef<Value>(s).slice(kk * 8 + 4, 4);
      SmallVector<Value, 4> a{kb.pack(p0[0], p0[1]), kb.pack(p0[2], p0[3]),
                              kb.pack(p1[0], p1[1]), kb.pack(p1[2], p1[3])};
      for (int64_t dp = 0; dp < dvPad / 16; ++dp) {
        SmallVector<Value, 4> bf = kb.loadBFromKMajor(vt, kk * 16, kb.idx(dp * 16));
        kb.mma(a, {bf[0], bf[1]}, MutableArrayRef<Value>(acc).slice(dp * 8, 4));
        if (dp * 16 + 8 < dv)
          kb.mma(a, {bf[2], bf[3]}, MutableArrayRef<Value>(acc).slice(dp * 8 + 4, 4));
      }
    }
    kb.copyTileAsync(vMem, vBase, kb.add(kBegin, bkv), nk, vTile(next),
                     vT.rowStride);

    SmallVector<Value> yield{state.rowMax[0], state.rowMax[1], state.rowSum[0],
                             state.rowSum[1]};
    yield.append(acc);
    scf::YieldOp::create(b, loc, yield);
  }
  kb.waitAsync(0);

  // Epilogue: O = acc / l, LSE = ln2·(m + log2 l); empty rows give 0 and -inf.
  // A split stores its partial rows [split, batch, head, ...] in f32.
  Value outRowsBase = qRowsBase;
  if (plan.splitKv)
    outRowsBase = kb.add(kb.mul(kb.mul(kb.mul(split, kb.toIndex(arg(5))), heads), nq),
                         qRowsBase);
  // A split's partial rows are contiguous in the workspace; O is the
  // caller's.
  std::optional<StridedTensor> oT;
  Value outBase;
  if (plan.splitKv) {
    outBase = kb.mul(outRowsBase, dv);
  } else {
    oT = stridedTensor(kb, oMem, params.strides(entry, 3));
    outBase = oT->headBase(kb, batch, head);
  }
  ValueRange res = loop.getResults();
  SoftmaxState state{{res[0], res[1]}, {res[2], res[3]}};
  Value invSum[2], lse[2];
  finalizeSoftmax(kb, state, invSum, lse);
  for (int64_t r = 0; r < 2; ++r) {
    Value row, rowValid, lseAt, rowOff;
    if (packed) {
      // The row's place in [B, H, Nq] (after the earlier splits' partials).
      Value tileRow = TileRows::laneRow(kb, rowBase, r);
      auto [h, q] = packed->at(kb, tileRow);
      rowValid = packed->valid(kb, tileRow);
      lseAt = packed->globalRow(kb, h, q);
      if (plan.splitKv)
        lseAt = kb.add(kb.mul(kb.mul(kb.mul(split, kb.toIndex(arg(5))), heads),
                              nq),
                       lseAt);
    } else {
      row = kb.add(qBegin, kb.add(rowBase, kb.add(kb.groupId, r * 8)));
      rowValid = kb.lt(row, nq);
    }
    auto ifOp = scf::IfOp::create(b, loc, rowValid, false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&ifOp.getThenRegion().front());
    if (packed)
      rowOff = kb.mul(lseAt, dv); // a split's partial O: rows as LSE's
    else
      rowOff = oT ? oT->rowOffset(kb, outBase, row)
                  : kb.add(outBase, kb.mul(row, dv));
    for (int64_t n = 0; n < llvm::divideCeil(dv, 8); ++n) {
      Value lo = arith::MulFOp::create(b, loc, res[4 + n * 4 + 2 * r], invSum[r]);
      Value hi = arith::MulFOp::create(b, loc, res[4 + n * 4 + 2 * r + 1], invSum[r]);
      if (plan.splitKv)
        storeColumnPairF32(kb, oMem, rowOff, n, dv, lo, hi);
      else
        storeColumnPair(kb, oMem, rowOff, n, dv, dv, lo, hi);
    }
    Value first = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                                        kb.threadInGroup, kb.idx(0));
    auto lseIf = scf::IfOp::create(b, loc, first, false);
    b.setInsertionPointToStart(&lseIf.getThenRegion().front());
    memref::StoreOp::create(
        b, loc, lse[r], lseMem,
        ValueRange{packed ? lseAt : kb.add(outRowsBase, row)});
  }
  gpu::ReturnOp::create(b, loc);
  return func;
}

namespace ag = mlir::fa::attn_gpu;

/// The forward kernel as attn_gpu tile ops: the tiled loops mapped to the
/// grid (CTA = (query block, head, batch)), the key-block loop kept as an
/// scf.for carrying the (max, sum, acc) fragments, its body the schedule of
/// the file comment. The index arithmetic is the kernel's own; the tile ops
/// lower in place (ConvertAttnGPUToNVVM.cpp), so the kernel's code is the
/// one the fragment builders always emitted.
static gpu::GPUFuncOp buildForwardTileKernel(OpBuilder &b, Location loc,
                                             gpu::GPUModuleOp module,
                                             const KernelPlan &plan,
                                             const TiledLoopNest &loops) {
  MLIRContext *ctx = b.getContext();
  const int64_t d = plan.headDim, dv = plan.headDimV;
  const int64_t bq = plan.blockQ, bkv = plan.blockKV;
  OpBuilder::InsertionGuard guard(b);
  KernelParams params = forwardParams(ctx, plan);
  auto func = createKernelFunc(b, loc, module, "fa_fwd_" + plan.tag(), params,
                               plan, plan.forwardSharedBytes());
  func->setAttr(attn::kKernelPlanAttr, kernelPlanAttr(ctx, plan));
  Block &entry = func.getBody().front();
  auto arg = [&](unsigned i) { return entry.getArgument(i); };
  Value qMem = arg(0), kMem = arg(1), vMem = arg(2), oMem = arg(3),
        lseMem = arg(4), scale = arg(10);

  // Index arithmetic only: the lane ids belong to the lowering.
  KernelBuilder kb(b, loc, plan);
  Value heads = kb.toIndex(arg(6)), kvHeads = kb.toIndex(arg(7));
  Value nq = kb.toIndex(arg(8)), nk = kb.toIndex(arg(9));
  Value qBlock = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
  Value head = gpu::BlockIdOp::create(b, loc, gpu::Dimension::y);
  Value batch = gpu::BlockIdOp::create(b, loc, gpu::Dimension::z);
  Value split, splits;
  if (plan.splitKv) {
    splits = kb.toIndex(arg(11)); // after the scale (forwardParams)
    split = arith::RemUIOp::create(b, loc, batch, splits);
    batch = arith::DivUIOp::create(b, loc, batch, splits);
  }
  // GQA: query head h reads key/value head h / (H / Hkv).
  Value group = arith::DivUIOp::create(b, loc, heads, kvHeads);
  Value kvHead = arith::DivUIOp::create(b, loc, head, group);
  StridedTensor qT = stridedTensor(kb, qMem, params.strides(entry, 0));
  StridedTensor kT = stridedTensor(kb, kMem, params.strides(entry, 1));
  StridedTensor vT = stridedTensor(kb, vMem, params.strides(entry, 2));
  Value qRowsBase = kb.mul(kb.add(kb.mul(batch, heads), head), nq);
  Value qBase = qT.headBase(kb, batch, head);
  Value kBase = kT.headBase(kb, batch, kvHead);
  Value vBase = vT.headBase(kb, batch, kvHead);
  Value qBegin = kb.mul(qBlock, bq);

  // Shared memory: Q | K stage 0, 1 | V stage 0, 1 (rows padded by 16 B).
  const int64_t qElems = bq * plan.strideQK(), kElems = bkv * plan.strideQK(),
                vElems = bkv * plan.strideV();
  ag::SharedMemoryOp::create(b, loc, qElems + 2 * kElems + 2 * vElems,
                             plan.elemType);
  auto tileType = [&](int64_t rows, int64_t cols, int64_t stride) {
    return ag::SharedTileType::get(ctx, rows, cols, plan.elemType, stride);
  };
  Value qTile = ag::SharedTileOp::create(b, loc, tileType(bq, d, plan.strideQK()),
                                         Value(), 0, IntegerAttr());
  auto kTile = [&](Value stage) {
    return ag::SharedTileOp::create(b, loc, tileType(bkv, d, plan.strideQK()),
                                    stage, qElems, b.getI64IntegerAttr(kElems))
        .getResult();
  };
  auto vTile = [&](Value stage) {
    return ag::SharedTileOp::create(b, loc, tileType(bkv, dv, plan.strideV()),
                                    stage, qElems + 2 * kElems,
                                    b.getI64IntegerAttr(vElems))
        .getResult();
  };
  auto copyAsync = [&](Value mem, Value base, Value rowBegin, Value rowLimit,
                       Value tile, Value rowStride) {
    ag::AsyncCopyOp::create(b, loc, mem, base, rowBegin, rowLimit, rowStride,
                            tile);
  };

  // The key blocks of the tiled loop (those that meet this block's band).
  Value splitKey;
  auto [jBegin, jEnd] = loops.cloneTileRange(
      b, {batch, head, qBlock, heads, kvHeads, nq, nk, split, splits},
      &splitKey);
  // The first key of block j: a split's blocks count from its first key.
  auto keyOf = [&](Value block) {
    Value key = kb.mul(block, bkv);
    return splitKey ? kb.add(splitKey, key) : key;
  };

  copyAsync(qMem, qBase, qBegin, nq, qTile, qT.rowStride);
  copyAsync(kMem, kBase, keyOf(jBegin), nk, kTile(kb.idx(0)), kT.rowStride);
  copyAsync(vMem, vBase, keyOf(jBegin), nk, vTile(kb.idx(0)), vT.rowStride);
  ag::AsyncWaitOp::create(b, loc, 2);
  gpu::BarrierOp::create(b, loc);
  Value rowBase = ag::WarpRowOffsetOp::create(b, loc, b.getIndexType());
  auto f32Fragment = [&](int64_t cols, ag::FragmentLayout layout) {
    return ag::FragmentType::get(ctx, 16, cols, b.getF32Type(), layout);
  };
  Value qOperand = qTile, qOperandRow = rowBase;
  if (plan.keepQInRegisters()) {
    qOperand = ag::LoadOperandAOp::create(
        b, loc,
        ag::FragmentType::get(ctx, 16, plan.paddedHeadDim(), plan.elemType,
                              ag::FragmentLayout::OperandA),
        qTile, rowBase);
    qOperandRow = Value();
  }
  Value scaleLog2 = softmaxScaleLog2(kb, scale);
  const attn::ScoreSpec &spec = plan.spec;
  bool window = spec.mask == attn::MaskKind::Window;
  Value bounds = ag::KeyBoundsOp::create(
      b, loc, ag::KeyBoundsType::get(ctx, window, spec.hasMask()), batch, head,
      qBegin, nq, nk, rowBase, bq, spec.mask,
      window ? b.getI64IntegerAttr(spec.windowLeft) : IntegerAttr(),
      window ? b.getI64IntegerAttr(spec.windowRight) : IntegerAttr());

  // Loop state: row max, row sum (rows layout), O accumulator (16 × Dv).
  Type rowsType = f32Fragment(1, ag::FragmentLayout::Rows);
  Type accType = f32Fragment(dv, ag::FragmentLayout::Accumulator);
  Type scoresType = f32Fragment(bkv, ag::FragmentLayout::Accumulator);
  SmallVector<Value> init{
      ag::FillOp::create(b, loc, rowsType, kb.negInf()),
      ag::FillOp::create(b, loc, rowsType, kb.f32(0)),
      ag::FillOp::create(b, loc, accType, kb.f32(0))};
  auto loop = scf::ForOp::create(b, loc, jBegin, jEnd, kb.idx(1), init);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(loop.getBody());
    Value j = loop.getInductionVar();
    ValueRange it = loop.getRegionIterArgs();
    Value stage = kb.remui(kb.sub(j, jBegin), 2);
    Value next = kb.sub(kb.idx(1), stage);
    Value kBegin = keyOf(j);

    // S = Q·K(j)ᵀ once K(j) has landed (V(j) may still be in flight).
    ag::AsyncWaitOp::create(b, loc, 1);
    gpu::BarrierOp::create(b, loc);
    Value s = ag::MmaQKOp::create(b, loc, scoresType, qOperand, qOperandRow,
                                  kTile(stage));
    // K(j+1) streams in while the softmax and P·V(j) run.
    copyAsync(kMem, kBase, kb.add(kBegin, bkv), nk, kTile(next), kT.rowStride);

    if (spec.scoreMod) {
      auto mod = ag::ScoreModOp::create(b, loc, scoresType, s, scale, batch, head, qBegin,
                                        nq, nk, rowBase, kBegin);
      IRMapping map;
      spec.scoreMod->cloneInto(&mod.getScoreMod(), map);
      Operation *yield = mod.getScoreMod().front().getTerminator();
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPoint(yield);
      ag::YieldOp::create(b, yield->getLoc(), yield->getOperand(0));
      yield->erase();
      s = mod.getResult();
    }
    // Only tiles crossing the band's edge or Nk evaluate a mask.
    s = ag::MaskOp::create(b, loc, scoresType, s, bounds, kBegin);
    auto update =
        ag::OnlineSoftmaxOp::create(b, loc, scoresType, rowsType, rowsType,
                                    accType, s, it[0], it[1], it[2], scaleLog2);

    // O += P·V(j); P goes from accumulator layout to A fragments in registers.
    ag::AsyncWaitOp::create(b, loc, 1);
    gpu::BarrierOp::create(b, loc);
    Value acc = ag::MmaPVOp::create(b, loc, accType, update.getProbs(),
                                    vTile(stage),
                                    update.getNewAcc());
    copyAsync(vMem, vBase, kb.add(kBegin, bkv), nk, vTile(next), vT.rowStride);
    scf::YieldOp::create(
        b, loc,
        SmallVector<Value>{update.getNewMax(), update.getNewSum(), acc});
  }
  ag::AsyncWaitOp::create(b, loc, 0);

  // Epilogue: O = acc / l, LSE = ln2·(m + log2 l); empty rows give 0 and -inf.
  // A split stores its partial rows [split, batch, head, ...] in f32,
  // contiguous in the workspace; O is in the caller's layout.
  Value outRowsBase = qRowsBase;
  if (plan.splitKv)
    outRowsBase = kb.add(
        kb.mul(kb.mul(kb.mul(split, kb.toIndex(arg(5))), heads), nq), qRowsBase);
  Value outBase, outRowStride;
  if (plan.splitKv) {
    outBase = kb.mul(outRowsBase, dv);
  } else {
    StridedTensor oT = stridedTensor(kb, oMem, params.strides(entry, 3));
    outBase = oT.headBase(kb, batch, head);
    outRowStride = oT.rowStride;
  }
  ValueRange res = loop.getResults();
  auto final = ag::FinalizeSoftmaxOp::create(b, loc, rowsType, rowsType,
                                             res[0], res[1]);
  ag::StoreOutputOp::create(b, loc, res[2], final.getInvSum(), final.getLse(),
                            oMem, outBase, outRowStride, lseMem, outRowsBase,
                            qBegin, rowBase, nq);
  gpu::ReturnOp::create(b, loc);
  return func;
}

gpu::GPUFuncOp mlir::fa::buildForwardKernel(OpBuilder &b, Location loc,
                                            gpu::GPUModuleOp module,
                                            const KernelPlan &plan,
                                            const TiledLoopNest &loops) {
  // The tile level has no mask_mod op yet: such plans stay on the direct
  // builder, which applies it (applyMaskMod) as it does for packed GQA.
  if (!plan.packGqa && !plan.spec.maskMod)
    return buildForwardTileKernel(b, loc, module, plan, loops);
  return buildPackedForwardKernel(b, loc, module, plan, loops);
}
