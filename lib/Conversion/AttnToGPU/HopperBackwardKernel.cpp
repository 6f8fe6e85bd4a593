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
// By default (-fa-wgmma-bwd-ws) the kernel is warp-specialised: a producer
// warpgroup loads K, V, Q and dO by TMA and LSE, Delta with plain loads, and
// adds each finished dQ tile into dq_accum with one bulk reduction, while
// two consumer warpgroups run the products above (buildWarpSpecialized).
// With -fa-wgmma-bwd-ws=false the 256 threads load with cp.async and reduce
// dQ themselves, with two barriers per tile: one publishes the tile's
// cp.async data, one dSᵀ.
//
// Shared memory (128 B swizzle, 64-column slabs; Wgmma.h):
//   K [D/64][128][64] | V [Dv/64][128][64] | Q stage s [D/64][64][64] |
//   dO stage s [Dv/64][64][64] | dSᵀ buffer b [128 keys][64 queries] |
//   LSE, Delta stage s (f32 [2][64]) | dQ tile b (f32 [64][D], warp-
//   specialised kernel only)
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

// The kernel's structure (docs/hopper-notes.md has what each is worth on the
// H200).
static llvm::cl::opt<bool> clWarpSpecialized(
    "fa-wgmma-bwd-ws",
    llvm::cl::desc("wgmma backward: warp-specialised (384 threads): a "
                   "producer warpgroup loads Q, dO (2 stages), K and V by TMA "
                   "and LSE, Delta with plain loads, and adds dQ into a "
                   "row-swizzled dq_accum with one bulk reduction per tile; "
                   "=false: 256 threads that load with cp.async and reduce "
                   "dQ with red.global.add"),
    llvm::cl::init(true));

std::string mlir::fa::wgmmaBackwardVariantKey() {
  return std::string("ws") + (clWarpSpecialized ? "1" : "0");
}

bool mlir::fa::wgmmaBackwardWarpSpecialized() { return clWarpSpecialized; }

namespace {
/// Keys of one warpgroup; the query tile is one m64 of dQ.
constexpr int64_t kKeysPerWarpgroup = 64;

/// Byte offsets of the kernel's shared tiles (each 1024 B aligned).
struct BackwardSmem {
  int64_t d, dv, bq, bkv;
  bool ws;
  int64_t stages() const { return 2; }              // Q, dO, LSE, Delta
  int64_t dsStages() const { return ws ? 2 : 1; } // dSᵀ
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
  /// The warp-specialised kernel's dQ tiles (f32, rows of D, chunk-swizzled;
  /// see the kernel), double-buffered.
  int64_t dqBytes() const { return ws ? bq * d * 4 : 0; }
  int64_t dqBase() const { return statsBase() + stages() * 2 * bq * 4; }
  int64_t total() const { return dqBase() + 2 * dqBytes(); }
};

/// The mbarriers of the warp-specialised kernel, one group: K/V full, then
/// the Q/dO stage rings (full, empty) and the dQ buffer rings (full, empty).
struct WsBarriers {
  Value group;
  static constexpr int64_t kvFull = 0, full = 1, empty = 3, dqFull = 5,
                           dqEmpty = 7, count = 9;
};
} // namespace

static BackwardSmem backwardSmem(const KernelPlan &plan) {
  return BackwardSmem{plan.headDim, plan.headDimV, plan.blockQ, plan.blockKV,
                      plan.warpSpecialized};
}

int64_t mlir::fa::wgmmaBackwardSharedBytes(const KernelPlan &plan) {
  return backwardSmem(plan).total();
}

void mlir::fa::gpu_lowering::buildBackwardMainWgmma(KernelBuilder &kb,
                                                    gpu::GPUModuleOp module,
                                                    gpu::GPUFuncOp func) {
  OpBuilder &b = kb.b;
  Location loc = kb.loc;
  const KernelPlan &plan = kb.plan;
  const int64_t d = plan.headDim, dv = plan.headDimV;
  const int64_t bq = plan.blockQ, bkv = plan.blockKV;
  const BackwardSmem layout = backwardSmem(plan);
  const bool ws = layout.ws;
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
  // Deterministic: block x takes key block Nk/128 − 1 − x, so the blocks a
  // tile's reduction waits for (the higher key blocks) start first.
  if (plan.deterministic)
    kBlock = kb.sub(kb.sub(kb.ceilDiv(nk, bkv), kb.idx(1)), kBlock);
  Value kvHead = gpu::BlockIdOp::create(b, loc, gpu::Dimension::y);
  Value batch = gpu::BlockIdOp::create(b, loc, gpu::Dimension::z);
  Value group = arith::DivUIOp::create(b, loc, heads, kvHeads);
  Value kvRowsBase = kb.mul(kb.add(kb.mul(batch, kvHeads), kvHead), nk);
  Value kBegin = kb.mul(kBlock, bkv);
  // This thread's warpgroup, and its warp's first key (Sᵀ row) in the block.
  // (Warpgroup 0 of the warp-specialised kernel is the producer: its
  // consumers are warpgroups 1 and 2.)
  auto warpgroupOf = [&] {
    Value wg = kb.divui(kb.tid, 128);
    return ws ? kb.sub(wg, kb.idx(1)) : wg;
  };
  auto keyRow0Of = [&](Value wg) {
    return kb.add(kb.mul(wg, kKeysPerWarpgroup),
                  kb.mul(kb.remui(kb.warp, 4), 16));
  };

  kb.setupSharedMemory(module, layout.total() / 2);
  Value stats = kb.sharedView(module, f32, layout.total() / 4);
  Value descBase = wgmmaDescriptorBase(kb);
  Value dqAddr = kb.globalAddress(dqMem);

  if (!ws) {
    kb.copyTileAsyncSwizzled(kMem, kb.mul(kvRowsBase, d), kBegin, nk, bkv, d,
                             kb.idx(0));
    kb.copyTileAsyncSwizzled(vMem, kb.mul(kvRowsBase, dv), kBegin, nk, bkv,
                             dv, kb.idx(layout.vBase() / 2));
  }

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

  // One query tile's products for this warpgroup (slot `stage` of the
  // Q/dO/LSE/Delta ring): Sᵀ and dPᵀ on the tensor cores, Pᵀ from Sᵀ while
  // dPᵀ runs, dSᵀ into `dsBuf`, then dV += Pᵀ·dO and dK += dSᵀ·Q issued.
  // The A registers are packed while no wgmma is in flight: registers of a
  // later wgmma defined while one runs make ptxas serialise them (C7513).
  auto issueTileProducts = [&](Value base, Value t, Value stage, Value wg,
                               Value keyRow0, Value dsBuf,
                               SmallVector<Value> &dV,
                               SmallVector<Value> &dK) {
    Value sAcc = issueKMajor(base, keyTileOf(wg, 0), qStageOf(stage), d);
    Value dpAcc = issueKMajor(base, keyTileOf(wg, layout.vBase()),
                              doStageOf(stage), dv);
    waitGroups(1);
    SmallVector<Value> s =
        fenceOperands(b, loc, unpackStruct(b, loc, sAcc, sN));
    computeP(s, t, stage, wg, keyRow0);
    waitGroups(0);
    SmallVector<Value> dp =
        fenceOperands(b, loc, unpackStruct(b, loc, dpAcc, sN));
    computeDS(s, dp, stage, dsBuf, keyRow0);
    SmallVector<Value> pA = accumulatorToWgmmaA(kb, s);
    SmallVector<Value> dsA = accumulatorToWgmmaA(kb, dp);
    issueDVDK(base, pA, dsA, stage, dV, dK);
  };

  const int64_t dkN = d / 2, dvN = dv / 2;
  // The warp-specialised kernel (-fa-wgmma-bwd-ws), 384 threads. Warpgroup
  // 0 gives up its registers and produces: thread 0 loads K and V once and
  // Q and dO of every tile by TMA into the 2-stage ring, warp 2 copies the
  // tile's LSE and Delta (ld.global, st.shared; zero past Nq), thread 32
  // adds each finished dQ tile into dq_accum with one bulk reduction.
  // Warpgroups 1 and 2 are the consumers of the schedule above, without
  // cp.async: dSᵀ is double-buffered (one named barrier per tile) and dQ
  // goes into a double-buffered shared tile instead of red.global.
  //
  // mbarriers (WsBarriers): K/V full (2 arrivals + bytes), full[s] (Q and
  // dO arrive.expect_tx + the 32 lanes of warp 2), empty[s] (256 consumer
  // threads), dqFull[b] (256), dqEmpty[b] (the writer). Tile t uses slot
  // t mod 2 of each ring for the (t / 2)-th time.
  //
  // dQ tile b: f32 row r of the tile at r·D·4 bytes, its 16 B chunk c at
  // chunk c ^ (r mod 8): the 8-byte stores of lanes g = 0..7 (rows g) fall
  // in distinct chunks of a 128 B line, two wavefronts per store (the least
  // for 256 B). The bulk reduction copies the rows as they are, so dq_accum
  // rows carry the same chunk order; fa_bwd_post undoes it (docs/ABI.md).
  auto buildWarpSpecialized = [&] {
    MLIRContext *ctx = b.getContext();
    // One CTA per SM (.minnctapersm 1): without it ptxas may aim for a lower
    // register count at entry than the .maxntid cap, and then ignores
    // setmaxnreg (C7508) and spills the consumers.
    func->setAttr(NVVM::NVVMDialect::getMinctasmAttrName(),
                  b.getI32IntegerAttr(1));
    Value qMap = tmaMap(kb, arg(15), bq), kMap = tmaMap(kb, arg(16), bkv),
          vMap = tmaMap(kb, arg(17), bkv), doMap = tmaMap(kb, arg(18), bq);
    auto eq = [&](Value x, Value y) {
      return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, x, y);
    };
    auto ifThen = [&](Value cond, function_ref<void()> body) {
      auto ifOp = scf::IfOp::create(b, loc, cond, /*withElseRegion=*/false);
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(&ifOp.getThenRegion().front());
      body();
    };
    auto ptx = [&](StringRef text, ValueRange operands = {},
                   StringRef constraints = "~{memory}") {
      LLVM::InlineAsmOp::create(b, loc, TypeRange(), operands, text,
                                constraints, /*has_side_effects=*/true,
                                /*is_align_stack=*/false,
                                LLVM::TailCallKind::None,
                                /*asm_dialect=*/nullptr,
                                /*operand_attrs=*/nullptr);
    };

    WsBarriers bars;
    bars.group = nvgpu::MBarrierCreateOp::create(
        b, loc,
        nvgpu::MBarrierGroupType::get(
            ctx, gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup),
            WsBarriers::count));
    ifThen(eq(kb.tid, kb.idx(0)), [&] {
      auto init = [&](int64_t first, int64_t n, int64_t count) {
        for (int64_t i = first; i < first + n; ++i)
          nvgpu::MBarrierInitOp::create(b, loc, bars.group, kb.idx(count),
                                        kb.idx(i), Value());
      };
      init(WsBarriers::kvFull, 1, 2);
      init(WsBarriers::full, 2, 2 + 32);
      init(WsBarriers::empty, 2, 256);
      init(WsBarriers::dqFull, 2, 256);
      init(WsBarriers::dqEmpty, 2, 1);
    });
    gpu::BarrierOp::create(b, loc);
    auto wait = [&](int64_t barrier, Value slot, Value parity) {
      nvgpu::MBarrierTryWaitParityOp::create(b, loc, bars.group, parity,
                                             kb.idx(10000000),
                                             kb.add(slot, barrier));
    };
    auto arrive = [&](int64_t barrier, Value slot) {
      nvgpu::MBarrierArriveOp::create(b, loc, nvgpu::MBarrierTokenType::get(ctx),
                                      bars.group, kb.add(slot, barrier));
    };
    auto parityOf = [&](Value v) {
      return arith::IndexCastUIOp::create(b, loc, b.getI1Type(),
                                          kb.remui(v, 2));
    };
    auto slotOf = [&](Value t) { return kb.remui(t, 2); };
    // The phase tile t completes, and the one before it (a fresh barrier
    // passes a wait on it: round 0 finds every slot empty).
    auto fullParity = [&](Value t) { return parityOf(kb.divui(t, 2)); };
    auto emptyParity = [&](Value t) {
      return parityOf(kb.add(kb.divui(t, 2), 1));
    };
    Value any = kb.lt(kb.idx(0), total);

    auto roles = scf::IfOp::create(b, loc, eq(kb.divui(kb.tid, 128), kb.idx(0)),
                                   /*withElseRegion=*/true);
    OpBuilder::InsertionGuard roleGuard(b);
    b.setInsertionPointToStart(&roles.getThenRegion().front());
    NVVM::SetMaxRegisterOp::create(b, loc, 24,
                                   NVVM::SetMaxRegisterAction::decrease);
    // The producer's loops run on 32-bit values and step from tile to tile
    // without the divisions of headOf / qBeginOf: at 24 registers a thread,
    // 64-bit indices and divisions spill.
    Type i32 = b.getI32Type();
    auto add32 = [&](Value x, Value y) {
      return arith::AddIOp::create(b, loc, x, y).getResult();
    };
    auto mul32 = [&](Value x, Value y) {
      return arith::MulIOp::create(b, loc, x, y).getResult();
    };
    auto idx = [&](Value v32) { return kb.toIndex(v32); };
    /// Calls body(t, slot, qTile, head) for every tile t of the CTA (32-bit
    /// values; slot = t mod 2); qTile and head step along with t.
    auto forTiles = [&](function_ref<void(Value, Value, Value, Value)> body) {
      Value tileEnd = kb.toI32(iEnd), tileBegin = kb.toI32(iBegin);
      auto loop =
          scf::ForOp::create(b, loc, kb.c32(0), kb.toI32(total), kb.c32(1),
                             ValueRange{tileBegin, kb.toI32(firstHead)});
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(loop.getBody());
      Value t = loop.getInductionVar();
      Value qTile = loop.getRegionIterArgs()[0];
      Value head = loop.getRegionIterArgs()[1];
      body(t, arith::AndIOp::create(b, loc, t, kb.c32(1)), qTile, head);
      Value next = add32(qTile, kb.c32(1));
      Value wrap = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                                         next, tileEnd);
      scf::YieldOp::create(
          b, loc,
          ValueRange{arith::SelectOp::create(b, loc, wrap, tileBegin, next),
                     add32(head, arith::ExtUIOp::create(b, loc, i32, wrap))});
    };
    // Phase parities of a 32-bit tile index (as fullParity / emptyParity).
    auto parity32 = [&](Value t, int64_t round) {
      Value r =
          add32(arith::ShRUIOp::create(b, loc, t, kb.c32(1)), kb.c32(round));
      return arith::TruncIOp::create(b, loc, b.getI1Type(), r).getResult();
    };
    Value bh0 = kb.toI32(kb.mul(batch, heads));
    Value nq32 = kb.toI32(nq);

    // TMA: K and V once, then Q and dO of tile t into slot t mod 2.
    ifThen(eq(kb.tid, kb.idx(0)), [&] {
      for (Value map : {qMap, kMap, vMap, doMap})
        nvgpu::TmaFenceOp::create(b, loc, map);
      ifThen(any, [&] {
        Value kvBh = kb.add(kb.mul(batch, kvHeads), kvHead);
        Value kvFull = kb.idx(WsBarriers::kvFull);
        tmaLoadTile(kb, bars.group, kMap, bkv, d, kb.idx(0), kBegin, kvBh,
                    kvFull);
        tmaLoadTile(kb, bars.group, vMap, bkv, dv, kb.idx(layout.vBase()),
                    kBegin, kvBh, kvFull);
      });
      forTiles([&](Value t, Value slot32, Value qTile, Value head) {
        Value slot = idx(slot32);
        wait(WsBarriers::empty, slot, parity32(t, 1));
        Value qBh = idx(add32(bh0, head));
        Value qBegin = idx(mul32(qTile, kb.c32(bq)));
        Value full = kb.add(slot, WsBarriers::full);
        tmaLoadTile(kb, bars.group, qMap, bq, d, qStageOf(slot), qBegin, qBh,
                    full);
        tmaLoadTile(kb, bars.group, doMap, bq, dv, doStageOf(slot), qBegin,
                    qBh, full);
      });
    });
    // LSE and Delta of tile t: lane l copies rows l and l + 32 (zero past
    // Nq, where the clamped row 0 is read and dropped).
    ifThen(eq(kb.warp, kb.idx(2)), [&] {
      Value lane = kb.toI32(kb.lane);
      forTiles([&](Value t, Value slot32, Value qTile, Value head) {
        Value slot = idx(slot32);
        wait(WsBarriers::empty, slot, parity32(t, 1));
        Value qRowsBase = mul32(add32(bh0, head), nq32);
        Value qBegin = mul32(qTile, kb.c32(bq));
        SmallVector<Value> vals, ats;
        for (int64_t i = 0; i < bq / 32; ++i) {
          Value r = add32(lane, kb.c32(i * 32));
          Value row = add32(qBegin, r);
          Value valid = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult,
                                              row, nq32);
          Value src = idx(add32(qRowsBase, arith::SelectOp::create(
                                               b, loc, valid, row, kb.c32(0))));
          Value at = idx(add32(mul32(slot32, kb.c32(2 * bq)),
                               add32(r, kb.c32(statsFloat))));
          for (auto [mem, off] : {std::pair{lseMem, int64_t(0)},
                                  std::pair{deltaMem, bq}}) {
            Value v = memref::LoadOp::create(b, loc, mem, ValueRange{src});
            vals.push_back(kb.select(valid, v, kb.f32(0)));
            ats.push_back(kb.add(at, off));
          }
        }
        for (auto [v, at] : llvm::zip_equal(vals, ats))
          memref::StoreOp::create(b, loc, v, stats, ValueRange{at});
        arrive(WsBarriers::full, slot);
      });
    });
    // dq_accum += dQ tile t: rows [qBegin, min(qBegin + bq, Nq)) of the
    // tile's head are contiguous, so one bulk reduction adds all of them.
    // The buffer is released once the reduction has read it.
    //
    // Deterministic (plan.deterministic): the reduction of query tile q of
    // head h waits until semaphore [b][h][q] counts the key blocks after
    // this one that add into the tile, (last key block of the tile's key
    // band) − kBlock, and adds one once its writes are visible. The key
    // blocks of the band are contiguous (the band is an interval, and the
    // query and key tile ranges come from the same exact bands), so each
    // tile is summed in descending key-block order. Block x runs key block
    // Nk/128 − 1 − x, so a CTA waits only on CTAs of lower linear block id,
    // which have been scheduled. Descending, a causal key block's first
    // (diagonal) tile has no one to wait for, and each tile reaches a key
    // block after the block above has added it: the chain stays off the
    // critical path (ascending, key block j waited about 2j tiles to start).
    ifThen(eq(kb.tid, kb.idx(32)), [&] {
      Value semAddr, qTiles32, kBlock32;
      if (plan.deterministic) {
        semAddr = LLVM::PtrToIntOp::create(b, loc, b.getI64Type(), arg(19));
        qTiles32 = kb.toI32(kb.ceilDiv(nq, bq));
        kBlock32 = kb.toI32(kBlock);
      }
      Value sBase = arith::AddIOp::create(
          b, loc, arith::TruncIOp::create(b, loc, i32, sharedAddress(kb)),
          kb.c32(layout.dqBase()));
      forTiles([&](Value t, Value slot32, Value qTile, Value head) {
        Value slot = idx(slot32);
        wait(WsBarriers::dqFull, slot, parity32(t, 0));
        Value qBegin = mul32(qTile, kb.c32(bq));
        Value sem;
        if (plan.deterministic) {
          Value tileQ = idx(qBegin);
          Value lastKeyBlock = kb.sub(
              kb.tileRange(attn::buildKeyBand(b, loc, plan.spec, tileQ,
                                              kb.add(tileQ, bq), nq, nk),
                           nk, bkv)
                  .second,
              kb.idx(1));
          Value before =
              arith::SubIOp::create(b, loc, kb.toI32(lastKeyBlock), kBlock32);
          Value semIndex =
              add32(mul32(add32(bh0, head), qTiles32), qTile);
          sem = arith::AddIOp::create(
              b, loc, semAddr,
              arith::MulIOp::create(
                  b, loc, arith::ExtUIOp::create(b, loc, b.getI64Type(), semIndex),
                  arith::ConstantOp::create(b, loc, b.getI64IntegerAttr(4))));
          // Spin (acquire) with a doubling nanosleep up to 1 µs, then order
          // the bulk reduction (async proxy) after what the acquire saw.
          ptx("{\n.reg .pred ready;\n.reg .b32 seen, ns;\nmov.b32 ns, 32;\n"
              "spin:\nld.acquire.gpu.global.b32 seen, [$0];\n"
              "setp.eq.b32 ready, seen, $1;\n@ready bra.uni done;\n"
              "nanosleep.u32 ns;\nshl.b32 ns, ns, 1;\nmin.u32 ns, ns, 1024;\n"
              "bra.uni spin;\ndone:\n}",
              ValueRange{sem, before}, "l,r,~{memory}");
          ptx("fence.proxy.async.global;");
        }
        Value firstRow = add32(mul32(add32(bh0, head), nq32), qBegin);
        Value rows = arith::MinUIOp::create(
            b, loc, arith::SubIOp::create(b, loc, nq32, qBegin), kb.c32(bq));
        Value gAddr = arith::IndexCastUIOp::create(
            b, loc, b.getI64Type(),
            kb.add(dqAddr, kb.mul(idx(firstRow), d * 4)));
        Value sAddr = add32(sBase, mul32(slot32, kb.c32(layout.dqBytes())));
        Value bytes = mul32(rows, kb.c32(d * 4));
        ptx("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 "
            "[$0], [$1], $2;",
            ValueRange{gAddr, sAddr, bytes}, "l,r,r,~{memory}");
        ptx("cp.async.bulk.commit_group;");
        ptx("cp.async.bulk.wait_group.read 0;");
        arrive(WsBarriers::dqEmpty, slot);
        if (plan.deterministic) {
          // The reduction's writes complete and become visible to the
          // generic proxy (the acquire of the next key block), then release.
          ptx("cp.async.bulk.wait_group 0;");
          ptx("fence.proxy.async.global;");
          ptx("red.release.gpu.global.add.u32 [$0], 1;", ValueRange{sem},
              "l,~{memory}");
        }
      });
      // Every reduction completes before the CTA exits.
      ptx("cp.async.bulk.wait_group 0;");
    });

    b.setInsertionPointToStart(&roles.getElseRegion().front());
    NVVM::SetMaxRegisterOp::create(b, loc, 240,
                                   NVVM::SetMaxRegisterAction::increase);
    ifThen(any, [&] {
      wait(WsBarriers::kvFull, kb.idx(0), parityOf(kb.idx(0)));
    });
    SmallVector<Value> init(dkN + dvN, kb.f32(0));
    auto loop = scf::ForOp::create(b, loc, kb.idx(0), total, kb.idx(1), init);
    {
      OpBuilder::InsertionGuard g0(b);
      b.setInsertionPointToStart(loop.getBody());
      Value t = loop.getInductionVar();
      ValueRange it = loop.getRegionIterArgs();
      SmallVector<Value> dK(it.begin(), it.begin() + dkN);
      SmallVector<Value> dV(it.begin() + dkN, it.end());
      KernelBuilder::ThreadIds outerIds = kb.threadIds();
      kb.setupOpaqueThreadIds();
      Value wg = warpgroupOf();
      Value keyRow0 = keyRow0Of(wg);
      Value base = opaqueI64(kb, descBase);
      Value slot = slotOf(t);
      Value dsBuf = dsBufOf(t);
      // Waits come before wgmma.fence (ptxas serialises the wgmmas of a
      // sequence with a wait loop inside, C7519).
      wait(WsBarriers::full, slot, fullParity(t));
      issueTileProducts(base, t, slot, wg, keyRow0, dsBuf, dV, dK);
      // Both consumers' dSᵀ (generic stores, read by wgmma), then dQ. The
      // other dSᵀ buffer is free: both consumers passed this barrier after
      // their dQ of the last tile completed.
      proxyFence();
      namedBarrier(b, loc, "bar.sync", 1, 256);
      Value dqAcc = issueDQ(base, wg, dsBuf);
      waitGroups(0);
      // Q, dO, LSE and Delta of the slot are read.
      arrive(WsBarriers::empty, slot);
      SmallVector<Value> dq =
          fenceOperands(b, loc, unpackStruct(b, loc, dqAcc, half / 2));
      // dQ into buffer `slot` once the writer has added its last contents:
      // lane (g, t) holds rows 16·(warp mod 4) + g, +8 (g = row mod 8) and
      // columns wg·D/2 + 8n + 2t, +1, i.e. 16 B chunk wg·D/8 + 8·(n/4) +
      // (2·(n mod 4) | t/2), at byte 8·(t mod 2) of it. The chunk's low three
      // bits are xor-ed with g; (t/2) ^ g is per lane, 2·(n mod 4) per store.
      wait(WsBarriers::dqEmpty, slot, emptyParity(t));
      Value laneBytes = arith::OrIOp::create(
          b, loc,
          kb.mul(arith::XOrIOp::create(b, loc, kb.divui(kb.threadInGroup, 2),
                                       kb.groupId),
                 16),
          kb.mul(kb.remui(kb.threadInGroup, 2), 8));
      Value rowBytes = kb.add(
          kb.add(kb.mul(slot, layout.dqBytes()), layout.dqBase()),
          kb.add(kb.mul(kb.add(kb.mul(kb.remui(kb.warp, 4), 16), kb.groupId),
                        d * 4),
                 kb.mul(wg, half * 4)));
      auto f2 = VectorType::get({2}, f32);
      for (int64_t r = 0; r < 2; ++r)
        for (int64_t n = 0; n < half / 8; ++n) {
          Value inRow =
              arith::XOrIOp::create(b, loc, laneBytes, kb.idx((n % 4) * 32));
          Value bytes = kb.add(
              kb.add(rowBytes, r * 8 * d * 4 + (n / 4) * 128), inRow);
          Value pair = vector::FromElementsOp::create(
              b, loc, f2, ValueRange{dq[n * 4 + 2 * r], dq[n * 4 + 2 * r + 1]});
          vector::StoreOp::create(b, loc, pair, stats,
                                  ValueRange{kb.divui(bytes, 4)},
                                  /*nontemporal=*/false, llvm::MaybeAlign(8));
        }
      proxyFence();
      arrive(WsBarriers::dqFull, slot);
      SmallVector<Value> yield = fenceOperands(b, loc, dK);
      yield.append(fenceOperands(b, loc, dV));
      scf::YieldOp::create(b, loc, yield);
      kb.setThreadIds(outerIds);
    }
    // dK (scale already in dS) and dV for keys < Nk.
    SmallVector<Value> res(loop.getResults());
    Value keyRow = kb.add(kBegin, keyRow0Of(warpgroupOf()));
    storeAccumulator(kb, ArrayRef<Value>(res).take_front(dkN), dkMem,
                     kb.mul(kvRowsBase, d), keyRow, nk, d);
    storeAccumulator(kb, ArrayRef<Value>(res).slice(dkN, dvN), dvMem,
                     kb.mul(kvRowsBase, dv), keyRow, nk, dv);
  };
  if (ws) {
    buildWarpSpecialized();
    gpu::ReturnOp::create(b, loc);
    return;
  }
  SmallVector<Value> init(dkN + dvN, kb.f32(0));
  {
    auto ifOp = scf::IfOp::create(b, loc, kb.lt(kb.idx(0), total), false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&ifOp.getThenRegion().front());
    loadQueryTile(rowsBaseOf(firstHead), kb.mul(iBegin, bq), kb.idx(0));
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
    // This tile's Q, dO, LSE and Delta (also K and V, on the first tile);
    // the barrier also ends every read of the other stage and of dSᵀ by
    // the last tile.
    publish();
    prefetch(kb.add(t, 1));
    issueTileProducts(base, t, stage, wg, keyRow0, dsBuf, dV, dK);
    // Both warpgroups' dSᵀ, then this tile's dQ.
    proxyFence();
    gpu::BarrierOp::create(b, loc);
    Value dqAcc = issueDQ(base, wg, dsBuf);
    waitGroups(0);
    reduceDQ(dqAcc, wg, qBegin, qRowsBase);
    yield.append(fenceOperands(b, loc, dK));
    yield.append(fenceOperands(b, loc, dV));

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
