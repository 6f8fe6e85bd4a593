//===- HopperBackwardKernel.cpp - wgmma backward for sm_90a -----*- C++ -*-===//
//
// The body of the main backward kernel (fa_bwd, docs/ABI.md) on wgmma; the
// parameters and the pre and post kernels are the mma.sync backward's
// (BackwardKernel.cpp). One CTA per 128 keys and key head, two warpgroups of
// 64 keys. K and V stay in shared memory; the query tiles (64 rows of Q and
// dO with their LSE and Delta) of every query head of the GQA group and of
// the key block's band are double-buffered with cp.async. Per query tile, a
// warpgroup computes
//   Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ     shared-memory wgmma, m64n64, k = D
//   Pᵀ = exp2(Sᵀ·scale·log2e − LSE·log2e), masked on boundary tiles only
//   dSᵀ = Pᵀ∘(dPᵀ − Delta)·scale
//   dV += Pᵀ·dO, dK += dSᵀ·Q   register-A wgmma; dK and dV stay in registers
//   dQ = dS·K                  dSᵀ of both warpgroups through shared memory,
//                              both operands MN-major; warpgroup w takes
//                              columns [w·D/2, (w+1)·D/2), reduced into
//                              dq_accum with red.global.add.v2.f32.
//
// Shared memory (128 B swizzle, 64-column slabs; Wgmma.h):
//   K [D/64][128][64] | V [Dv/64][128][64] | Q stage s [D/64][64][64] |
//   dO stage s [Dv/64][64][64] | dSᵀ [128 keys][64 queries] |
//   LSE, Delta stage s (f32 [2][64])
//
//===----------------------------------------------------------------------===//

#include "Wgmma.h"

#include "fa/Dialect/Attn/Transforms/Transforms.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "llvm/Support/CommandLine.h"

#include <cmath>

using namespace mlir;
using namespace mlir::fa;
using namespace mlir::fa::gpu_lowering;

// The dQ schedule (docs/hopper-notes.md has what each is worth on the H200).
static llvm::cl::opt<bool> clOverlapDQ(
    "fa-wgmma-bwd-overlap-dq",
    llvm::cl::desc("wgmma backward: issue dQ of the previous query tile with "
                   "Sᵀ and dPᵀ of this one (dSᵀ double-buffered, one barrier "
                   "per tile) instead of after a second barrier"),
    llvm::cl::init(false));

std::string mlir::fa::wgmmaBackwardVariantKey() {
  return std::string("dq") + (clOverlapDQ ? "1" : "0");
}

namespace {
/// Keys of one warpgroup; the query tile is one m64 of dQ.
constexpr int64_t kKeysPerWarpgroup = 64;

/// Byte offsets of the kernel's shared tiles (each 1024 B aligned).
struct BackwardSmem {
  int64_t d, dv, bq, bkv, dsStages;
  int64_t kBytes() const { return bkv * d * 2; }
  int64_t vBytes() const { return bkv * dv * 2; }
  int64_t qBytes() const { return bq * d * 2; }
  int64_t doBytes() const { return bq * dv * 2; }
  int64_t vBase() const { return kBytes(); }
  int64_t qBase() const { return vBase() + vBytes(); }
  int64_t doBase() const { return qBase() + 2 * qBytes(); }
  int64_t dsBase() const { return doBase() + 2 * doBytes(); }
  int64_t dsBytes() const { return bkv * bq * 2; }
  int64_t statsBase() const { return dsBase() + dsStages * dsBytes(); }
  int64_t total() const { return statsBase() + 2 * 2 * bq * 4; }
};
} // namespace

int64_t mlir::fa::wgmmaBackwardSharedBytes(const KernelPlan &plan) {
  return BackwardSmem{plan.headDim, plan.headDimV, plan.blockQ, plan.blockKV,
                      clOverlapDQ ? 2 : 1}
      .total();
}

void mlir::fa::gpu_lowering::buildBackwardMainWgmma(KernelBuilder &kb,
                                                    gpu::GPUModuleOp module,
                                                    gpu::GPUFuncOp func) {
  OpBuilder &b = kb.b;
  Location loc = kb.loc;
  const KernelPlan &plan = kb.plan;
  const int64_t d = plan.headDim, dv = plan.headDimV;
  const int64_t bq = plan.blockQ, bkv = plan.blockKV;
  const bool overlapDQ = clOverlapDQ;
  const BackwardSmem layout{d, dv, bq, bkv, overlapDQ ? 2 : 1};
  Type f32 = b.getF32Type();
  Block &entry = func.getBody().front();
  auto arg = [&](unsigned i) { return entry.getArgument(i); };
  Value qMem = arg(0), kMem = arg(1), vMem = arg(2), doMem = arg(3),
        lseMem = arg(4), deltaMem = arg(5), dqMem = arg(6), dkMem = arg(7),
        dvMem = arg(8), scale = arg(14);

  kb.setupThreadIds();
  Value heads = kb.toIndex(arg(10)), kvHeads = kb.toIndex(arg(11));
  Value nq = kb.toIndex(arg(12)), nk = kb.toIndex(arg(13));
  Value kBlock = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
  Value kvHead = gpu::BlockIdOp::create(b, loc, gpu::Dimension::y);
  Value batch = gpu::BlockIdOp::create(b, loc, gpu::Dimension::z);
  Value group = arith::DivUIOp::create(b, loc, heads, kvHeads);
  Value kvRowsBase = kb.mul(kb.add(kb.mul(batch, kvHeads), kvHead), nk);
  Value kBegin = kb.mul(kBlock, bkv);
  // This thread's warpgroup, and its warp's first key (Sᵀ row) in the block.
  auto warpgroupOf = [&] { return kb.divui(kb.tid, 128); };
  auto keyRow0Of = [&](Value wg) {
    return kb.add(kb.mul(wg, kKeysPerWarpgroup),
                  kb.mul(kb.remui(kb.warp, 4), 16));
  };

  kb.setupSharedMemory(module, layout.total() / 2);
  Value stats = kb.sharedView(module, f32, layout.total() / 4);
  Value descBase = wgmmaDescriptorBase(kb);
  Value dqAddr = kb.globalAddress(dqMem);

  kb.copyTileAsyncSwizzled(kMem, kb.mul(kvRowsBase, d), kBegin, nk, bkv, d,
                           kb.idx(0));
  kb.copyTileAsyncSwizzled(vMem, kb.mul(kvRowsBase, dv), kBegin, nk, bkv, dv,
                           kb.idx(layout.vBase() / 2));

  // LSE c of stage s is float 2·bq·s + c of the statistics, Delta c is
  // float 2·bq·s + bq + c.
  const int64_t statsFloat = layout.statsBase() / 4;
  auto rowsBaseOf = [&](Value head) {
    return kb.mul(kb.add(kb.mul(batch, heads), head), nq);
  };
  // Q, dO, LSE and Delta of the query tile at qBegin of the head whose rows
  // start at qRowsBase, into `stage`; rows at or past Nq are zero-filled.
  auto loadQueryTile = [&](Value qRowsBase, Value qBegin, Value stage) {
    kb.copyTileAsyncSwizzled(
        qMem, kb.mul(qRowsBase, d), qBegin, nq, bq, d,
        kb.add(kb.mul(stage, layout.qBytes() / 2), layout.qBase() / 2));
    kb.copyTileAsyncSwizzled(
        doMem, kb.mul(qRowsBase, dv), qBegin, nq, bq, dv,
        kb.add(kb.mul(stage, layout.doBytes() / 2), layout.doBase() / 2));
    auto tokTy = nvgpu::DeviceAsyncTokenType::get(b.getContext());
    Value isLse = kb.lt(kb.tid, kb.idx(bq));
    Value row =
        kb.add(qBegin, kb.select(isLse, kb.tid, kb.sub(kb.tid, kb.idx(bq))));
    Value valid = kb.lt(row, nq);
    Value src = kb.add(qRowsBase, kb.select(valid, row, kb.idx(0)));
    Value srcElems = kb.select(valid, kb.idx(1), kb.idx(0));
    Value dst = kb.add(kb.add(kb.mul(stage, 2 * bq), statsFloat), kb.tid);
    auto copyStat = [&](Value mem) {
      nvgpu::DeviceAsyncCopyOp::create(b, loc, tokTy, stats, ValueRange{dst},
                                       mem, ValueRange{src}, b.getIndexAttr(1),
                                       srcElems, UnitAttr());
    };
    auto lseIf = scf::IfOp::create(b, loc, isLse, /*withElseRegion=*/true);
    {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(&lseIf.getThenRegion().front());
      copyStat(lseMem);
      b.setInsertionPointToStart(&lseIf.getElseRegion().front());
      auto deltaIf = scf::IfOp::create(b, loc, kb.lt(kb.tid, kb.idx(2 * bq)),
                                       /*withElseRegion=*/false);
      b.setInsertionPointToStart(&deltaIf.getThenRegion().front());
      copyStat(deltaMem);
    }
    kb.commitAsync();
  };

  // Query tiles that intersect the band of this key block, for each query
  // head of the group: one loop over tiles × heads, tile t of head t / tiles.
  Value kEndVis = kb.minsi(kb.add(kBegin, bkv), nk);
  auto [bandLo, bandHi] =
      attn::buildQueryBand(b, loc, plan.spec, kBegin, kEndVis, nq, nk);
  Value qLo = bandLo ? kb.maxsi(bandLo, kb.idx(0)) : kb.idx(0);
  Value qHi = bandHi ? kb.maxsi(kb.minsi(bandHi, nq), kb.idx(0)) : nq;
  Value iBegin = kb.divui(qLo, bq);
  Value iEnd = kb.maxsi(kb.ceilDiv(qHi, bq), iBegin);
  Value tiles = kb.sub(iEnd, iBegin);
  Value total = kb.mul(tiles, group);
  Value scaleLog2 = arith::MulFOp::create(b, loc, scale, kb.f32(M_LOG2E));
  Value firstHead = kb.mul(kvHead, group);
  {
    auto ifOp = scf::IfOp::create(b, loc, kb.lt(kb.idx(0), total), false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&ifOp.getThenRegion().front());
    loadQueryTile(rowsBaseOf(firstHead), kb.mul(iBegin, bq), kb.idx(0));
  }

  // dQ = dS·K: A is dSᵀ (M-major) in buffer `dsBuf`, B this warpgroup's
  // D/2 columns of K (N-major): slab w for D = 128, half a slab (64 B in)
  // for D = 64. Issued only.
  const int64_t half = d / 2;
  auto issueDQ = [&](Value base, Value wg, Value dsBuf) {
    Value kCols = kb.mul(wg, (half / kSlabCols) * bkv * kSlabRowBytes +
                                 (half % kSlabCols) * 2);
    SmallVector<Value> dsM, kN;
    for (int64_t kk = 0; kk < bkv / 16; ++kk) {
      dsM.push_back(wgmmaDescriptor(kb, base,
                                    kb.add(dsBuf, kk * 16 * kSlabRowBytes),
                                    bkv * kSlabRowBytes));
      kN.push_back(wgmmaDescriptor(kb, base,
                                   kb.add(kCols, kk * 16 * kSlabRowBytes),
                                   bkv * kSlabRowBytes));
    }
    return std::pair(dsM, kN);
  };
  auto wgmmaDQ = [&](ArrayRef<Value> dsM, ArrayRef<Value> kN) {
    return issueWgmmaShared(kb, half, dsM, kN, NVVM::MMALayout::col,
                            NVVM::MMALayout::row);
  };
  // dq_accum += dQ for rows < Nq (and only when `enabled`, if given): lane
  // (g, t) adds columns 8n + 2t, +1 of this warpgroup's half in rows g and
  // g + 8 of its warp.
  auto reduceDQ = [&](Value dqAcc, Value wg, Value qBegin, Value qRowsBase,
                      Value enabled) {
    SmallVector<Value> dq =
        fenceOperands(b, loc, unpackStruct(b, loc, dqAcc, half / 2));
    Value queryRow0 = kb.mul(kb.remui(kb.warp, 4), 16);
    for (int64_t r = 0; r < 2; ++r) {
      Value row = kb.add(qBegin, kb.add(queryRow0, kb.add(kb.groupId, r * 8)));
      Value ok = kb.lt(row, nq);
      if (enabled)
        ok = arith::AndIOp::create(b, loc, ok, enabled);
      auto rowIf = scf::IfOp::create(b, loc, ok, false);
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(&rowIf.getThenRegion().front());
      Value elem = kb.add(kb.mul(kb.add(qRowsBase, row), d),
                          kb.add(kb.mul(wg, half), kb.mul(kb.threadInGroup, 2)));
      Value addr = kb.add(dqAddr, kb.mul(elem, 4));
      for (int64_t n = 0; n < half / 8; ++n)
        kb.redAddPairF32(addr, n * 8 * 4, dq[n * 4 + 2 * r],
                         dq[n * 4 + 2 * r + 1]);
    }
  };
  auto proxyFence = [&] {
    NVVM::FenceProxyOp::create(
        b, loc, NVVM::ProxyKind::async_shared,
        NVVM::SharedSpaceAttr::get(b.getContext(),
                                   NVVM::SharedSpace::shared_cta));
  };
  auto headOf = [&](Value t) {
    return kb.add(firstHead, arith::DivUIOp::create(b, loc, t, tiles));
  };
  auto qBeginOf = [&](Value t) {
    return kb.mul(kb.add(iBegin, arith::RemUIOp::create(b, loc, t, tiles)), bq);
  };

  const int64_t dkN = d / 2, dvN = dv / 2, sN = bq / 2;
  SmallVector<Value> init(dkN + dvN, kb.f32(0));
  auto loop = scf::ForOp::create(b, loc, kb.idx(0), total, kb.idx(1), init);
  {
    OpBuilder::InsertionGuard g0(b);
    b.setInsertionPointToStart(loop.getBody());
    Value t = loop.getInductionVar();
    ValueRange it = loop.getRegionIterArgs();
    SmallVector<Value> dK(it.begin(), it.begin() + dkN);
    SmallVector<Value> dV(it.begin() + dkN, it.end());
    // Every lane-dependent offset and descriptor is rebuilt from opaque
    // copies each trip (see setupOpaqueThreadIds); hoisted, they would hold
    // ~100 registers across the loop.
    KernelBuilder::ThreadIds outerIds = kb.threadIds();
    kb.setupOpaqueThreadIds();
    Value wg = warpgroupOf();
    Value keyRow0 = keyRow0Of(wg);
    Value tripDescBase = opaqueI64(kb, descBase);
    Value stage = kb.remui(t, 2);
    Value head = headOf(t);
    Value qBegin = qBeginOf(t);
    Value qRowsBase = rowsBaseOf(head);

    // This tile's Q, dO, LSE and Delta (also K and V, on the first tile),
    // written by cp.async and read by wgmma (the async proxy). The barrier
    // also ends every read of the other stage and of dSᵀ by the last tile.
    kb.waitAsync(0);
    proxyFence();
    gpu::BarrierOp::create(b, loc);
    {
      Value next = kb.add(t, 1);
      auto nextIf = scf::IfOp::create(b, loc, kb.lt(next, total), false);
      OpBuilder::InsertionGuard g1(b);
      b.setInsertionPointToStart(&nextIf.getThenRegion().front());
      loadQueryTile(rowsBaseOf(headOf(next)), qBeginOf(next),
                    kb.sub(kb.idx(1), stage));
    }

    Value qStage =
        kb.add(kb.mul(stage, layout.qBytes()), layout.qBase()); // bytes
    Value doStage = kb.add(kb.mul(stage, layout.doBytes()), layout.doBase());
    Value wgKeyBytes = kb.mul(wg, kKeysPerWarpgroup * kSlabRowBytes);
    auto desc = [&](Value byteOffset, int64_t lbo) {
      return wgmmaDescriptor(kb, tripDescBase, byteOffset, lbo);
    };
    // K-major descriptors of rows [rowBytes..) of a key tile (A) and of a
    // query tile (B) for a k = cols product.
    auto kMajor = [&](Value keyTile, Value queryTile, int64_t cols,
                      SmallVector<Value> &a, SmallVector<Value> &bDescs) {
      for (int64_t ks = 0; ks < cols / 16; ++ks) {
        int64_t slab = ks / 4, inSlab = (ks % 4) * 32;
        a.push_back(desc(kb.add(keyTile, slab * bkv * kSlabRowBytes + inSlab),
                         16));
        bDescs.push_back(
            desc(kb.add(queryTile, slab * bq * kSlabRowBytes + inSlab), 16));
      }
    };

    // Sᵀ and dPᵀ on the tensor cores; Pᵀ from Sᵀ while dPᵀ runs. With
    // overlapDQ, dQ of the previous tile goes first (its dSᵀ was published
    // by the barrier above) and is reduced while Sᵀ and dPᵀ run.
    Value prev, dqPrev;
    SmallVector<Value> dsM, kN;
    if (overlapDQ) {
      prev = kb.select(kb.lt(kb.idx(0), t), kb.sub(t, kb.idx(1)), kb.idx(0));
      std::tie(dsM, kN) = issueDQ(
          tripDescBase, wg,
          kb.add(kb.mul(kb.sub(kb.idx(1), stage), layout.dsBytes()),
                 layout.dsBase()));
    }
    SmallVector<Value> kA, qB, vA, doB;
    kMajor(wgKeyBytes, qStage, d, kA, qB);
    kMajor(kb.add(wgKeyBytes, layout.vBase()), doStage, dv, vA, doB);
    NVVM::WgmmaFenceAlignedOp::create(b, loc);
    if (overlapDQ) {
      dqPrev = wgmmaDQ(dsM, kN);
      NVVM::WgmmaGroupSyncAlignedOp::create(b, loc);
    }
    Value sAcc = issueWgmmaShared(kb, bq, kA, qB, NVVM::MMALayout::row,
                                  NVVM::MMALayout::col);
    NVVM::WgmmaGroupSyncAlignedOp::create(b, loc);
    Value dpAcc = issueWgmmaShared(kb, bq, vA, doB, NVVM::MMALayout::row,
                                   NVVM::MMALayout::col);
    NVVM::WgmmaGroupSyncAlignedOp::create(b, loc);
    if (overlapDQ) {
      NVVM::WgmmaWaitGroupSyncOp::create(b, loc, 2);
      reduceDQ(dqPrev, wg, qBeginOf(prev), rowsBaseOf(headOf(prev)),
               kb.lt(kb.idx(0), t));
    }
    NVVM::WgmmaWaitGroupSyncOp::create(b, loc, 1);
    SmallVector<Value> s = fenceOperands(b, loc, unpackStruct(b, loc, sAcc, sN));

    // Boundary tiles only are masked (per warpgroup's 64 keys). The mask sees
    // the tile position through an opaque copy so LLVM does not hoist
    // per-element offsets out of the loop.
    Value maskQuery = kb.opaqueIndex(qBegin);
    Value qEnd = kb.add(maskQuery, bq);
    Value wgKey = kb.add(kBegin, kb.mul(wg, kKeysPerWarpgroup));
    Value wgKeyEnd = kb.add(wgKey, kKeysPerWarpgroup);
    Value inside = arith::AndIOp::create(
        b, loc,
        attn::buildBlockInsideMask(b, loc, plan.spec, maskQuery, qEnd, wgKey,
                                   wgKeyEnd, nq, nk),
        arith::AndIOp::create(
            b, loc,
            arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sle, qEnd, nq),
            arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sle, wgKeyEnd,
                                  nk)));
    s = kb.maskUnlessInside(inside, s, [&](SmallVector<Value> &masked) {
      // Opaque Nq and Nk too: the band's per-element bounds (constants plus
      // Nk − Nq) would otherwise be hoisted as loop invariants.
      maskScoresTransposed(kb, masked,
                           {batch, head, maskQuery, kBegin, kb.opaqueIndex(nq),
                            kb.opaqueIndex(nk)},
                           keyRow0);
    });

    // Per query column: LSE (base 2; −inf rows give P = 0) and Delta.
    // Columns past Nq read 0 and are masked (P = 0).
    auto f2 = VectorType::get({2}, f32);
    Value statsStage = kb.add(kb.mul(stage, 2 * bq), statsFloat);
    auto columnPair = [&](int64_t n, int64_t offset) {
      Value col = kb.add(kb.mul(kb.threadInGroup, 2), n * 8 + offset);
      return vector::LoadOp::create(b, loc, f2, stats,
                                    ValueRange{kb.add(statsStage, col)}, false,
                                    llvm::MaybeAlign(8))
          .getResult();
    };
    for (int64_t n = 0; n < bq / 8; ++n) {
      Value l2 = columnPair(n, 0);
      for (int64_t c = 0; c < 2; ++c) {
        Value l = vector::ExtractOp::create(b, loc, l2, ArrayRef<int64_t>{c});
        Value isNegInf = arith::CmpFOp::create(
            b, loc, arith::CmpFPredicate::OEQ, l, kb.negInf());
        l = arith::MulFOp::create(b, loc, l, kb.f32(M_LOG2E));
        Value negL =
            arith::NegFOp::create(b, loc, kb.select(isNegInf, kb.f32(INFINITY), l));
        for (int64_t r = 0; r < 2; ++r) {
          Value &e = s[n * 4 + 2 * r + c];
          e = kb.exp2(LLVM::FMAOp::create(b, loc, e, scaleLog2, negL));
        }
      }
    }
    NVVM::WgmmaWaitGroupSyncOp::create(b, loc, 0);
    SmallVector<Value> dp =
        fenceOperands(b, loc, unpackStruct(b, loc, dpAcc, sN));

    // dSᵀ = Pᵀ∘(dPᵀ − Delta)·scale, in registers and, swizzled, in shared
    // memory: lanes g = 0..7 of one store hit eight distinct 16 B chunks.
    for (int64_t n = 0; n < bq / 8; ++n) {
      Value d2 = columnPair(n, bq);
      for (int64_t c = 0; c < 2; ++c) {
        Value delta = vector::ExtractOp::create(b, loc, d2, ArrayRef<int64_t>{c});
        for (int64_t r = 0; r < 2; ++r) {
          Value &e = dp[n * 4 + 2 * r + c];
          Value diff = arith::SubFOp::create(b, loc, e, delta);
          Value ds = arith::MulFOp::create(b, loc, s[n * 4 + 2 * r + c], diff);
          e = arith::MulFOp::create(b, loc, ds, scale);
        }
      }
    }
    // Chunk g ^ n of row keyRow0 + g (+8): bits 4-6 of the byte offset hold
    // g, so the chunk is one xor with n·16 of the offset of chunk g.
    Value rowG = kb.add(keyRow0, kb.groupId);
    Value dsBuf = overlapDQ ? kb.add(kb.mul(stage, layout.dsBytes()),
                                     layout.dsBase())
                            : kb.idx(layout.dsBase());
    Value chunkG = kb.add(
        kb.add(kb.mul(rowG, kSlabRowBytes), kb.mul(kb.groupId, 16)),
        kb.add(kb.mul(kb.threadInGroup, 4), dsBuf));
    for (int64_t n = 0; n < bq / 8; ++n) {
      Value bytes = arith::XOrIOp::create(b, loc, chunkG, kb.idx(n * 16));
      for (int64_t r = 0; r < 2; ++r)
        kb.storePair(kb.truncPair(dp[n * 4 + 2 * r], dp[n * 4 + 2 * r + 1]),
                     kb.smem, kb.divui(kb.add(bytes, r * 8 * kSlabRowBytes), 2));
    }
    // A registers are packed while no wgmma is in flight: registers of a
    // later wgmma defined while one runs make ptxas serialise them (C7513).
    SmallVector<Value> pA = accumulatorToWgmmaA(kb, s);
    SmallVector<Value> dsA = accumulatorToWgmmaA(kb, dp);

    // dV += Pᵀ·dO and dK += dSᵀ·Q: B is the query tile, MN-major (its rows
    // are the k of the product).
    SmallVector<Value> doT, qT;
    for (int64_t kk = 0; kk < bq / 16; ++kk) {
      doT.push_back(desc(kb.add(doStage, kk * 16 * kSlabRowBytes),
                         bq * kSlabRowBytes));
      qT.push_back(
          desc(kb.add(qStage, kk * 16 * kSlabRowBytes), bq * kSlabRowBytes));
    }
    if (!overlapDQ)
      std::tie(dsM, kN) = issueDQ(tripDescBase, wg, dsBuf);
    NVVM::WgmmaFenceAlignedOp::create(b, loc);
    SmallVector<Value> dVNext = issueWgmmaRegisterA(kb, pA, doT, dV);
    SmallVector<Value> dKNext = issueWgmmaRegisterA(kb, dsA, qT, dK);
    NVVM::WgmmaGroupSyncAlignedOp::create(b, loc);
    // dSᵀ, written by the generic proxy, is read by wgmma: this tile's dQ
    // after a barrier for both warpgroups' rows, or the next tile's.
    proxyFence();
    if (!overlapDQ) {
      gpu::BarrierOp::create(b, loc);
      NVVM::WgmmaFenceAlignedOp::create(b, loc);
      Value dqAcc = wgmmaDQ(dsM, kN);
      NVVM::WgmmaGroupSyncAlignedOp::create(b, loc);
      NVVM::WgmmaWaitGroupSyncOp::create(b, loc, 0);
      reduceDQ(dqAcc, wg, qBegin, qRowsBase, Value());
    } else {
      NVVM::WgmmaWaitGroupSyncOp::create(b, loc, 0);
    }
    dVNext = fenceOperands(b, loc, dVNext);
    dKNext = fenceOperands(b, loc, dKNext);
    SmallVector<Value> yield(dKNext);
    yield.append(dVNext);
    scf::YieldOp::create(b, loc, yield);
    kb.setThreadIds(outerIds);
  }
  if (overlapDQ) {
    // dQ of the last tile.
    auto lastIf = scf::IfOp::create(b, loc, kb.lt(kb.idx(0), total), false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&lastIf.getThenRegion().front());
    gpu::BarrierOp::create(b, loc);
    Value last = kb.sub(total, kb.idx(1));
    Value wg = warpgroupOf();
    auto [dsM, kN] = issueDQ(
        descBase, wg,
        kb.add(kb.mul(kb.remui(last, 2), layout.dsBytes()), layout.dsBase()));
    NVVM::WgmmaFenceAlignedOp::create(b, loc);
    Value dqAcc = wgmmaDQ(dsM, kN);
    NVVM::WgmmaGroupSyncAlignedOp::create(b, loc);
    NVVM::WgmmaWaitGroupSyncOp::create(b, loc, 0);
    reduceDQ(dqAcc, wg, qBeginOf(last), rowsBaseOf(headOf(last)), Value());
  }
  kb.waitAsync(0);

  // dK (scale already in dS) and dV for keys < Nk.
  SmallVector<Value> res(loop.getResults());
  Value keyRow = kb.add(kBegin, keyRow0Of(warpgroupOf()));
  storeAccumulator(kb, ArrayRef<Value>(res).take_front(dkN), dkMem,
                   kb.mul(kvRowsBase, d), keyRow, nk, d);
  storeAccumulator(kb, ArrayRef<Value>(res).drop_front(dkN), dvMem,
                   kb.mul(kvRowsBase, dv), keyRow, nk, dv);
  gpu::ReturnOp::create(b, loc);
}
