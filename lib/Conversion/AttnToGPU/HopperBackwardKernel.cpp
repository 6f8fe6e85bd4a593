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
// Two barriers per tile: one publishes the tile's cp.async data, one dSᵀ.
// -fa-wgmma-bwd-pipeline instead carries the next tile's Sᵀ across the loop
// and needs one (3 Q/dO stages, 2 dSᵀ buffers).
//
// Shared memory (128 B swizzle, 64-column slabs; Wgmma.h):
//   K [D/64][128][64] | V [Dv/64][128][64] | Q stage s [D/64][64][64] |
//   dO stage s [Dv/64][64][64] | dSᵀ buffer b [128 keys][64 queries] |
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

// The schedule of the query-tile loop (docs/hopper-notes.md has what each
// is worth on the H200).
static llvm::cl::opt<bool> clPipeline(
    "fa-wgmma-bwd-pipeline",
    llvm::cl::desc("wgmma backward: issue the next tile's Sᵀ and this tile's "
                   "dQ after one barrier per tile, with dV and dK in flight "
                   "under it (3 Q/dO stages, 2 dSᵀ buffers) instead of two "
                   "barriers per tile"),
    llvm::cl::init(false));

std::string mlir::fa::wgmmaBackwardVariantKey() {
  return std::string("pipe") + (clPipeline ? "1" : "0");
}

namespace {
/// Keys of one warpgroup; the query tile is one m64 of dQ.
constexpr int64_t kKeysPerWarpgroup = 64;

/// Byte offsets of the kernel's shared tiles (each 1024 B aligned).
struct BackwardSmem {
  int64_t d, dv, bq, bkv;
  bool pipelined;
  int64_t stages() const { return pipelined ? 3 : 2; }   // Q, dO, LSE, Delta
  int64_t dsStages() const { return pipelined ? 2 : 1; } // dSᵀ
  int64_t kBytes() const { return bkv * d * 2; }
  int64_t vBytes() const { return bkv * dv * 2; }
  int64_t qBytes() const { return bq * d * 2; }
  int64_t doBytes() const { return bq * dv * 2; }
  int64_t dsBytes() const { return bkv * bq * 2; }
  int64_t vBase() const { return kBytes(); }
  int64_t qBase() const { return vBase() + vBytes(); }
  int64_t doBase() const { return qBase() + stages() * qBytes(); }
  int64_t dsBase() const { return doBase() + stages() * doBytes(); }
  int64_t statsBase() const { return dsBase() + dsStages() * dsBytes(); }
  int64_t total() const { return statsBase() + stages() * 2 * bq * 4; }
};
} // namespace

int64_t mlir::fa::wgmmaBackwardSharedBytes(const KernelPlan &plan) {
  return BackwardSmem{plan.headDim, plan.headDimV, plan.blockQ, plan.blockKV,
                      clPipeline}
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
  const bool pipelined = clPipeline;
  const BackwardSmem layout{d, dv, bq, bkv, pipelined};
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
    kb.copyRowStatsAsync(stats, lseMem, deltaMem, qRowsBase, qBegin, nq, bq, [&] {
      return kb.add(kb.add(kb.mul(stage, 2 * bq), statsFloat), kb.tid);
    });
    kb.commitAsync();
  };

  // Query tiles that intersect the band of this key block, for each query
  // head of the group: one loop over tiles × heads, tile t of head t / tiles.
  Value kEndVis = kb.minsi(kb.add(kBegin, bkv), nk);
  auto [iBegin, iEnd] = kb.tileRange(
      attn::buildQueryBand(b, loc, plan.spec, kBegin, kEndVis, nq, nk), nq,
      bq);
  Value tiles = kb.sub(iEnd, iBegin);
  Value total = kb.mul(tiles, group);
  Value scaleLog2 = arith::MulFOp::create(b, loc, scale, kb.f32(M_LOG2E));
  Value firstHead = kb.mul(kvHead, group);
  auto headOf = [&](Value t) {
    return kb.add(firstHead, arith::DivUIOp::create(b, loc, t, tiles));
  };
  auto qBeginOf = [&](Value t) {
    return kb.mul(kb.add(iBegin, arith::RemUIOp::create(b, loc, t, tiles)), bq);
  };
  auto proxyFence = [&] {
    NVVM::FenceProxyOp::create(
        b, loc, NVVM::ProxyKind::async_shared,
        NVVM::SharedSpaceAttr::get(b.getContext(),
                                   NVVM::SharedSpace::shared_cta));
  };
  auto commit = [&] { NVVM::WgmmaGroupSyncAlignedOp::create(b, loc); };
  auto fence = [&] { NVVM::WgmmaFenceAlignedOp::create(b, loc); };
  auto waitGroups = [&](int64_t n) {
    NVVM::WgmmaWaitGroupSyncOp::create(b, loc, n);
  };
  const int64_t stages = layout.stages();
  auto qStageOf = [&](Value stage) {
    return kb.add(kb.mul(stage, layout.qBytes()), layout.qBase());
  };
  auto doStageOf = [&](Value stage) {
    return kb.add(kb.mul(stage, layout.doBytes()), layout.doBase());
  };

  // The products of one query tile for this warpgroup (`wg`), descriptors
  // built from `base` right before each issue.
  const int64_t half = d / 2, sN = bq / 2;
  // K-major Sᵀ = K·Qᵀ (keyTile = K) or dPᵀ = V·dOᵀ (keyTile = V); k = cols.
  auto issueKMajor = [&](Value base, Value keyTile, Value queryTile,
                         int64_t cols) {
    SmallVector<Value> a, bDescs;
    for (int64_t ks = 0; ks < cols / 16; ++ks) {
      int64_t slab = ks / 4, inSlab = (ks % 4) * 32;
      a.push_back(wgmmaDescriptor(
          kb, base, kb.add(keyTile, slab * bkv * kSlabRowBytes + inSlab), 16));
      bDescs.push_back(wgmmaDescriptor(
          kb, base, kb.add(queryTile, slab * bq * kSlabRowBytes + inSlab), 16));
    }
    fence();
    Value acc = issueWgmmaShared(kb, bq, a, bDescs, NVVM::MMALayout::row,
                                 NVVM::MMALayout::col);
    commit();
    return acc;
  };
  auto keyTileOf = [&](Value wg, int64_t tileBase) {
    return kb.add(kb.mul(wg, kKeysPerWarpgroup * kSlabRowBytes), tileBase);
  };
  // dV += Pᵀ·dO and dK += dSᵀ·Q: B is the query tile, MN-major (its rows
  // are the k of the product). One group.
  auto issueDVDK = [&](Value base, ArrayRef<Value> pA, ArrayRef<Value> dsA,
                       Value stage, SmallVector<Value> &dV,
                       SmallVector<Value> &dK) {
    SmallVector<Value> doT, qT;
    for (int64_t kk = 0; kk < bq / 16; ++kk) {
      doT.push_back(wgmmaDescriptor(
          kb, base, kb.add(doStageOf(stage), kk * 16 * kSlabRowBytes),
          bq * kSlabRowBytes));
      qT.push_back(wgmmaDescriptor(
          kb, base, kb.add(qStageOf(stage), kk * 16 * kSlabRowBytes),
          bq * kSlabRowBytes));
    }
    fence();
    dV = issueWgmmaRegisterA(kb, pA, doT, dV);
    dK = issueWgmmaRegisterA(kb, dsA, qT, dK);
    commit();
  };
  // dQ = dS·K: A is dSᵀ (M-major) in buffer `dsBuf`, B this warpgroup's
  // D/2 columns of K (N-major): slab w for D = 128, half a slab (64 B in)
  // for D = 64. One group.
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
    fence();
    Value acc = issueWgmmaShared(kb, half, dsM, kN, NVVM::MMALayout::col,
                                 NVVM::MMALayout::row);
    commit();
    return acc;
  };
  // dq_accum += dQ for rows < Nq: lane (g, t) adds columns 8n + 2t, +1 of
  // this warpgroup's half in rows g and g + 8 of its warp.
  auto reduceDQ = [&](Value dqAcc, Value wg, Value qBegin, Value qRowsBase) {
    SmallVector<Value> dq =
        fenceOperands(b, loc, unpackStruct(b, loc, dqAcc, half / 2));
    Value queryRow0 = kb.mul(kb.remui(kb.warp, 4), 16);
    for (int64_t r = 0; r < 2; ++r) {
      Value row = kb.add(qBegin, kb.add(queryRow0, kb.add(kb.groupId, r * 8)));
      auto rowIf = scf::IfOp::create(b, loc, kb.lt(row, nq), false);
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(&rowIf.getThenRegion().front());
      Value elem = kb.add(kb.mul(kb.add(qRowsBase, row), d),
                          kb.add(kb.mul(wg, half), kb.mul(kb.threadInGroup, 2)));
      Value addr = kb.add(dqAddr, kb.mul(elem, 4));
      for (int64_t n = 0; n < half / 8; ++n)
        kb.redAddF32(addr, n * 8 * 4,
                     {dq[n * 4 + 2 * r], dq[n * 4 + 2 * r + 1]});
    }
  };

  // Pᵀ = exp2(Sᵀ·scale·log2e − LSE·log2e) in place, masked on boundary
  // tiles only (per warpgroup's 64 keys). The mask sees the tile position
  // and Nq, Nk through opaque copies: the band's per-element bounds would
  // otherwise be hoisted as loop invariants.
  auto f2 = VectorType::get({2}, f32);
  auto columnPair = [&](Value stage, int64_t n, int64_t offset) {
    Value col = kb.add(kb.mul(kb.threadInGroup, 2), n * 8 + offset);
    Value at = kb.add(kb.add(kb.mul(stage, 2 * bq), statsFloat), col);
    return vector::LoadOp::create(b, loc, f2, stats, ValueRange{at}, false,
                                  llvm::MaybeAlign(8))
        .getResult();
  };
  auto computeP = [&](SmallVector<Value> &s, Value t, Value stage, Value wg,
                      Value keyRow0) {
    Value maskQuery = kb.opaqueIndex(qBeginOf(t));
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
    Value head = headOf(t);
    s = kb.maskUnlessInside(inside, s, [&](SmallVector<Value> &masked) {
      maskScoresTransposed(kb, masked,
                           {batch, head, maskQuery, kBegin, kb.opaqueIndex(nq),
                            kb.opaqueIndex(nk)},
                           keyRow0);
    });
    // LSE per query column, base 2; −inf rows give P = 0. Columns past Nq
    // read 0 and are masked.
    for (int64_t n = 0; n < bq / 8; ++n) {
      Value l2 = columnPair(stage, n, 0);
      for (int64_t c = 0; c < 2; ++c) {
        Value l = vector::ExtractOp::create(b, loc, l2, ArrayRef<int64_t>{c});
        Value isNegInf = arith::CmpFOp::create(
            b, loc, arith::CmpFPredicate::OEQ, l, kb.negInf());
        l = arith::MulFOp::create(b, loc, l, kb.f32(M_LOG2E));
        Value negL = arith::NegFOp::create(
            b, loc, kb.select(isNegInf, kb.f32(INFINITY), l));
        for (int64_t r = 0; r < 2; ++r) {
          Value &e = s[n * 4 + 2 * r + c];
          e = kb.exp2(LLVM::FMAOp::create(b, loc, e, scaleLog2, negL));
        }
      }
    }
  };
  // dSᵀ = Pᵀ∘(dPᵀ − Delta)·scale in place of dPᵀ, and, swizzled, in buffer
  // `dsBuf`: chunk g ^ n of row keyRow0 + g (+8). Bits 4-6 of the byte
  // offset hold g, so the chunk is one xor with n·16 of the offset of chunk
  // g; lanes g = 0..7 of one store hit eight distinct 16 B chunks.
  auto computeDS = [&](ArrayRef<Value> p, SmallVector<Value> &dp, Value stage,
                       Value dsBuf, Value keyRow0) {
    for (int64_t n = 0; n < bq / 8; ++n) {
      Value d2 = columnPair(stage, n, bq);
      for (int64_t c = 0; c < 2; ++c) {
        Value delta =
            vector::ExtractOp::create(b, loc, d2, ArrayRef<int64_t>{c});
        for (int64_t r = 0; r < 2; ++r) {
          Value &e = dp[n * 4 + 2 * r + c];
          Value diff = arith::SubFOp::create(b, loc, e, delta);
          Value ds = arith::MulFOp::create(b, loc, p[n * 4 + 2 * r + c], diff);
          e = arith::MulFOp::create(b, loc, ds, scale);
        }
      }
    }
    Value rowG = kb.add(keyRow0, kb.groupId);
    Value chunkG = kb.add(
        kb.add(kb.mul(rowG, kSlabRowBytes), kb.mul(kb.groupId, 16)),
        kb.add(kb.mul(kb.threadInGroup, 4), dsBuf));
    for (int64_t n = 0; n < bq / 8; ++n) {
      Value bytes = arith::XOrIOp::create(b, loc, chunkG, kb.idx(n * 16));
      for (int64_t r = 0; r < 2; ++r)
        kb.storePair(kb.truncPair(dp[n * 4 + 2 * r], dp[n * 4 + 2 * r + 1]),
                     kb.smem,
                     kb.divui(kb.add(bytes, r * 8 * kSlabRowBytes), 2));
    }
  };
  auto dsBufOf = [&](Value t) {
    return kb.add(kb.mul(kb.remui(t, layout.dsStages()), layout.dsBytes()),
                  layout.dsBase());
  };
  auto prefetch = [&](Value next) {
    auto nextIf = scf::IfOp::create(b, loc, kb.lt(next, total), false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&nextIf.getThenRegion().front());
    loadQueryTile(rowsBaseOf(headOf(next)), qBeginOf(next),
                  kb.remui(next, stages));
  };
  auto publish = [&] {
    // cp.async (and generic stores of dSᵀ) read next by wgmma, the async
    // proxy: wait, fence, barrier.
    kb.waitAsync(0);
    proxyFence();
    gpu::BarrierOp::create(b, loc);
  };

  const int64_t dkN = d / 2, dvN = dv / 2;
  SmallVector<Value> init(dkN + dvN, kb.f32(0));
  {
    auto ifOp = scf::IfOp::create(b, loc, kb.lt(kb.idx(0), total), false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&ifOp.getThenRegion().front());
    loadQueryTile(rowsBaseOf(firstHead), kb.mul(iBegin, bq), kb.idx(0));
  }
  if (pipelined) {
    // Sᵀ of the first tile, issued before the loop: each trip issues the
    // next tile's Sᵀ.
    publish();
    prefetch(kb.idx(1));
    Value sFirst = issueKMajor(descBase, keyTileOf(warpgroupOf(), 0),
                               qStageOf(kb.idx(0)), d);
    waitGroups(0);
    init.append(fenceOperands(b, loc, unpackStruct(b, loc, sFirst, sN)));
  }

  auto loop = scf::ForOp::create(b, loc, kb.idx(0), total, kb.idx(1), init);
  {
    OpBuilder::InsertionGuard g0(b);
    b.setInsertionPointToStart(loop.getBody());
    Value t = loop.getInductionVar();
    ValueRange it = loop.getRegionIterArgs();
    SmallVector<Value> dK(it.begin(), it.begin() + dkN);
    SmallVector<Value> dV(it.begin() + dkN, it.begin() + dkN + dvN);
    // Every lane-dependent offset and descriptor is rebuilt from opaque
    // copies each trip (see setupOpaqueThreadIds); hoisted, they would hold
    // ~100 registers across the loop.
    KernelBuilder::ThreadIds outerIds = kb.threadIds();
    kb.setupOpaqueThreadIds();
    Value wg = warpgroupOf();
    Value keyRow0 = keyRow0Of(wg);
    Value base = opaqueI64(kb, descBase);
    Value stage = kb.remui(t, stages);
    Value qRowsBase = rowsBaseOf(headOf(t));
    Value qBegin = qBeginOf(t);
    Value dsBuf = dsBufOf(t);
    SmallVector<Value> yield;
    // dSᵀ from Pᵀ (in `s`) and dPᵀ, then dV += Pᵀ·dO and dK += dSᵀ·Q issued.
    // The A registers are packed while no wgmma is in flight: registers of a
    // later wgmma defined while one runs make ptxas serialise them (C7513).
    auto dsThenDVDK = [&](SmallVector<Value> &s, Value dpAcc) {
      SmallVector<Value> dp =
          fenceOperands(b, loc, unpackStruct(b, loc, dpAcc, sN));
      computeDS(s, dp, stage, dsBuf, keyRow0);
      SmallVector<Value> pA = accumulatorToWgmmaA(kb, s);
      SmallVector<Value> dsA = accumulatorToWgmmaA(kb, dp);
      issueDVDK(base, pA, dsA, stage, dV, dK);
    };

    if (!pipelined) {
      // This tile's Q, dO, LSE and Delta (also K and V, on the first tile);
      // the barrier also ends every read of the other stage and of dSᵀ by
      // the last tile.
      publish();
      prefetch(kb.add(t, 1));
      // Sᵀ and dPᵀ on the tensor cores; Pᵀ from Sᵀ while dPᵀ runs.
      Value sAcc = issueKMajor(base, keyTileOf(wg, 0), qStageOf(stage), d);
      Value dpAcc = issueKMajor(base, keyTileOf(wg, layout.vBase()),
                                doStageOf(stage), dv);
      waitGroups(1);
      SmallVector<Value> s =
          fenceOperands(b, loc, unpackStruct(b, loc, sAcc, sN));
      computeP(s, t, stage, wg, keyRow0);
      waitGroups(0);
      dsThenDVDK(s, dpAcc);
      // Both warpgroups' dSᵀ, then this tile's dQ.
      proxyFence();
      gpu::BarrierOp::create(b, loc);
      Value dqAcc = issueDQ(base, wg, dsBuf);
      waitGroups(0);
      reduceDQ(dqAcc, wg, qBegin, qRowsBase);
      yield.append(fenceOperands(b, loc, dK));
      yield.append(fenceOperands(b, loc, dV));
    } else {
      // Sᵀ of this tile came from the last trip; dPᵀ runs under Pᵀ.
      SmallVector<Value> s(it.begin() + dkN + dvN, it.end());
      Value dpAcc = issueKMajor(base, keyTileOf(wg, layout.vBase()),
                                doStageOf(stage), dv);
      computeP(s, t, stage, wg, keyRow0);
      waitGroups(0);
      dsThenDVDK(s, dpAcc);
      // dSᵀ of both warpgroups and the next tile's Q, dO, LSE, Delta (read
      // by wgmma) are published by one barrier; dV, dK run under it.
      proxyFence();
      publish();
      // This tile's dQ and the next tile's Sᵀ (stale data past the last
      // tile: issued anyway, never read); dQ is reduced while Sᵀ runs, and
      // the tile after next is loaded into the stage dV, dK of the last
      // trip read (they completed before the barrier).
      Value dqAcc = issueDQ(base, wg, dsBuf);
      Value next = kb.add(t, 1);
      Value sAcc = issueKMajor(base, keyTileOf(wg, 0),
                               qStageOf(kb.remui(next, stages)), d);
      waitGroups(1);
      reduceDQ(dqAcc, wg, qBegin, qRowsBase);
      prefetch(kb.add(t, 2));
      waitGroups(0);
      yield.append(fenceOperands(b, loc, dK));
      yield.append(fenceOperands(b, loc, dV));
      yield.append(fenceOperands(b, loc, unpackStruct(b, loc, sAcc, sN)));
    }
    scf::YieldOp::create(b, loc, yield);
    kb.setThreadIds(outerIds);
  }
  kb.waitAsync(0);

  // dK (scale already in dS) and dV for keys < Nk.
  SmallVector<Value> res(loop.getResults());
  Value keyRow = kb.add(kBegin, keyRow0Of(warpgroupOf()));
  storeAccumulator(kb, ArrayRef<Value>(res).take_front(dkN), dkMem,
                   kb.mul(kvRowsBase, d), keyRow, nk, d);
  storeAccumulator(kb, ArrayRef<Value>(res).slice(dkN, dvN), dvMem,
                   kb.mul(kvRowsBase, dv), keyRow, nk, dv);
  gpu::ReturnOp::create(b, loc);
}
