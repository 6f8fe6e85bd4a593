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
//===----------------------------------------------------------------------===//

#include "Fragments.h"
#include "SplitKv.h"
#include "TileRows.h"
#include "TiledLoopNest.h"

#include "fa/Dialect/Attn/Transforms/Transforms.h"
#include "llvm/Support/MathExtras.h"

#include <cmath>
#include <optional>

using namespace mlir;
using namespace mlir::fa;
using namespace mlir::fa::gpu_lowering;

/// storeColumnPair for an f32 matrix (a split's partial O): 8-byte pairs
/// where the row length is even.
static void storeColumnPairF32(KernelBuilder &kb, Value mem, Value rowOff,
                               int64_t n, int64_t cols, Value lo, Value hi) {
  forColumnPair(
      kb, n, cols, cols % 2 == 0, lo, hi, [&](int64_t off, ValueRange v) {
        Value col = kb.add(kb.mul(kb.threadInGroup, 2), n * 8 + off);
        Value at = kb.add(rowOff, col);
        if (v.size() == 2) {
          Value pair = vector::FromElementsOp::create(
              kb.b, kb.loc, VectorType::get({2}, kb.b.getF32Type()), v);
          vector::StoreOp::create(kb.b, kb.loc, pair, mem, ValueRange{at},
                                  /*nontemporal=*/false, llvm::MaybeAlign(8));
          return;
        }
        memref::StoreOp::create(kb.b, kb.loc, v[0], mem, ValueRange{at});
      });
}

gpu::GPUFuncOp mlir::fa::buildForwardKernel(OpBuilder &b, Location loc,
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
