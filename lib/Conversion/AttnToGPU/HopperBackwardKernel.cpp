//===- HopperBackwardKernel.cpp - wgmma backward for sm_90a -----*- C++ -*-===//
//
// The body of the main backward kernel (fa_bwd, docs/ABI.md) on wgmma; the
// parameters and the pre and post kernels are the mma.sync backward's
// (BackwardKernel.cpp). One CTA per 128 keys and key head, two warpgroups of
// 64 keys. K and V stay in shared memory; the query tiles (64 rows of Q and
// dO with their LSE and Delta) of every query head of the GQA group and of
// the key block's band are double-buffered (64 rows; 128 at D = 64 where
// block-q = 128 asks, FA3's tile there). Per query tile, a warpgroup
// computes
//   Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ     shared-memory wgmma, m64n64, k = D
//   Pᵀ = exp2(Sᵀ·scale·log2e − LSE·log2e), masked on boundary tiles only
//   dSᵀ = Pᵀ∘(dPᵀ − Delta)·scale
//   dV += Pᵀ·dO, dK += dSᵀ·Q   register-A wgmma; dK and dV stay in registers
//   (block-sparse: the query tiles are the key block's listed query blocks,
//   the full ones without the mask_mod, the partial ones with it;
//   HopperBackwardScheduler.cpp)
//   dQ = dS·K                  dSᵀ of both warpgroups through shared memory,
//                              both operands MN-major; warpgroup w takes
//                              D/2 columns, in pieces that each stay inside
//                              one 64-column slab of K (dqPieces; D = 96:
//                              32 + 16), or of a 128-row tile rows 64w to
//                              64w + 63 with all D columns, reduced into
//                              dq_accum.
// By default (-fa-wgmma-bwd-ws) the kernel is warp-specialised: a producer
// warpgroup loads K, V, Q and dO by TMA and LSE, Delta with plain loads, and
// adds each finished dQ tile into dq_accum with one bulk reduction, while
// two consumer warpgroups run the products above
// (buildWarpSpecializedKernel). With -fa-wgmma-bwd-ws=false the 256 threads
// load with cp.async and reduce dQ themselves with red.global.add.v2.f32,
// with two barriers per tile: one publishes the tile's cp.async data, one
// dSᵀ (buildAsyncCopyKernel).
//
// Shared memory (128 B swizzle, 64-column slabs, D = 96 rounded up to two;
// Wgmma.h):
//   K [D/64][128][64] | V [Dv/64][128][64] | Q stage s [D/64][64][64] |
//   dO stage s [Dv/64][64][64] | dSᵀ buffer b [128 keys][64 queries] |
//   LSE, Delta stage s (f32 [2][64]) | dQ tile b (f32 [64][D], warp-
//   specialised kernel only)
//
// This file puts the kernels together from the tile scheduler, producer,
// mainloop and epilogue (HopperBackward.h).
//
//===----------------------------------------------------------------------===//

#include "HopperBackward.h"
#include "HopperFp8.h"

#include "fa/Dialect/AttnGPU/IR/AttnGPU.h"

#include "llvm/Support/CommandLine.h"

#include <cmath>

using namespace mlir;
using namespace mlir::fa;
using namespace mlir::fa::gpu_lowering;

// The kernel's structure (docs/hopper-notes.md has what each is worth on the
// H200).
static llvm::cl::opt<bool> clWarpSpecialized(
    "fa-wgmma-bwd-ws", llvm::cl::cat(mlir::fa::codegenOptionCategory()),
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

HopperBackwardSmem mlir::fa::gpu_lowering::hopperBackwardSmem(
    const KernelPlan &plan) {
  return HopperBackwardSmem{plan.headDim, plan.headDimV,        plan.blockQ,
                            plan.blockKV, plan.warpSpecialized, plan.splitRoles,
                            plan.isFp8()};
}

int64_t mlir::fa::wgmmaBackwardSharedBytes(const KernelPlan &plan) {
  return hopperBackwardSmem(plan).total();
}

HopperBackward::HopperBackward(KernelBuilder &kb, gpu::GPUModuleOp module,
                               gpu::GPUFuncOp func, const TiledLoopNest &loops)
    : kb(kb), b(kb.b), loc(kb.loc), plan(kb.plan), module(module),
      func(func), loops(loops), layout(hopperBackwardSmem(kb.plan)) {
  qMem = param(0);
  kMem = param(1);
  vMem = param(2);
  doMem = param(3);
  lseMem = param(4);
  deltaMem = param(5);
  dqMem = param(6);
  dkMem = param(7);
  dvMem = param(8);
  scale = param(14);
}

void HopperBackward::ifThen(Value cond, function_ref<void()> body) {
  auto ifOp = scf::IfOp::create(b, loc, cond, /*withElseRegion=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(&ifOp.getThenRegion().front());
  body();
}

void HopperBackward::fenceProxyAsyncShared() {
  NVVM::FenceProxyOp::create(
      b, loc, NVVM::ProxyKind::async_shared,
      NVVM::SharedSpaceAttr::get(b.getContext(),
                                 NVVM::SharedSpace::shared_cta));
}

//===----------------------------------------------------------------------===//
// Warp roles
//===----------------------------------------------------------------------===//

Value HopperBackward::consumerWarpgroup() {
  // (Warpgroup 0 of the warp-specialised kernel is the producer.)
  Value warpgroup = kb.divui(kb.tid, 128);
  return layout.warpSpecialized ? kb.sub(warpgroup, kb.idx(1)) : warpgroup;
}

Value HopperBackward::keyRow0Of(Value warpgroup) {
  return kb.add(kb.mul(keyGroupOf(warpgroup), kKeysPerWarpgroup),
                kb.mul(kb.remui(kb.warp, 4), 16));
}

//===----------------------------------------------------------------------===//
// The kernels
//===----------------------------------------------------------------------===//

void HopperBackward::build() {
  kb.setupThreadIds();
  KernelParams params = backwardMainParams(b.getContext(), plan);
  Block &entry = func.getBody().front();
  qT = stridedTensor(kb, qMem, params.strides(entry, 0));
  kT = stridedTensor(kb, kMem, params.strides(entry, 1));
  vT = stridedTensor(kb, vMem, params.strides(entry, 2));
  doT = stridedTensor(kb, doMem, params.strides(entry, 3));
  dkT = stridedTensor(kb, dkMem, params.strides(entry, 4));
  dvT = stridedTensor(kb, dvMem, params.strides(entry, 5));
  if (plan.blockSparse) {
    blockMask = param(params.blockMaskParam);
    maskHeads = kb.toIndex(param(params.blockMaskParam + 1));
  }
  setupKeyBlock();
  if (plan.varlen)
    setupSequence(params.cuSeqlensParam);
  // 16-bit elements (fp8: the gradients' bf16, as the TMA boxes are typed;
  // its e4m3 tiles are addressed in bytes).
  kb.smem = kb.sharedView(module, plan.outputElemType(), layout.total() / 2);
  stats = kb.sharedView(module, b.getF32Type(), layout.total() / 4);
  descBase = wgmmaDescriptorBase(kb);
  dqAddr = kb.globalAddress(dqMem);
  if (!layout.warpSpecialized)
    loadKeyValueAsync();
  setupQueryTiles();
  scaleLog2 = softmaxScaleLog2(kb, scale);
  firstHead = kb.mul(kvHead, headsPerKvHead);
  if (layout.warpSpecialized)
    buildWarpSpecializedKernel();
  else
    buildAsyncCopyKernel();
  gpu::ReturnOp::create(b, loc);
}

SmallVector<Value> HopperBackward::forEachConsumerTile(
    ArrayRef<Value> init,
    function_ref<void(const ConsumerTile &, SmallVector<Value> &,
                      SmallVector<Value> &, SmallVector<Value> &)>
        body,
    int64_t extraCount) {
  const int64_t dkValues = plan.headDim / 2;
  const int64_t gradValues = static_cast<int64_t>(init.size()) - extraCount;
  // The 128-row tile walks in i32: at its consumers' 240 registers the
  // 64-bit trip count's high word spilled. The 64-row tiles keep the
  // 64-bit walk, which measured 2-5% faster at d128 (PERF.md, 2026-12-07).
  Value zero = kb.idx(0), count = tileCount, one = kb.idx(1);
  if (dqByRows()) {
    zero = kb.c32(0);
    count = kb.toI32(tileCount);
    one = kb.c32(1);
  }
  auto loop = scf::ForOp::create(b, loc, zero, count, one, init);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(loop.getBody());
  ValueRange carried = loop.getRegionIterArgs();
  SmallVector<Value> dK(carried.begin(), carried.begin() + dkValues);
  SmallVector<Value> dV(carried.begin() + dkValues,
                        carried.begin() + gradValues);
  SmallVector<Value> extra(carried.begin() + gradValues, carried.end());
  KernelBuilder::ThreadIds outerIds = kb.threadIds();
  kb.setupOpaqueThreadIds();
  // The 128-row tile takes its query-tile range (varlen: and its sequence's
  // rows) again in each tile.
  const CtaSizes outerSizes = ctaSizes();
  if (dqByRows())
    rederiveSizes();
  ConsumerTile tile;
  tile.index = dqByRows() ? kb.toIndex(loop.getInductionVar())
                          : loop.getInductionVar();
  tile.warpgroup = consumerWarpgroup();
  tile.keyRow0 = keyRow0Of(tile.warpgroup);
  tile.descriptorBase = opaqueI64(kb, descBase);
  body(tile, dK, dV, extra);
  SmallVector<Value> yield = fenceOperands(b, loc, dK);
  yield.append(fenceOperands(b, loc, dV));
  yield.append(extra);
  scf::YieldOp::create(b, loc, yield);
  kb.setThreadIds(outerIds);
  setCtaSizes(outerSizes);
  return SmallVector<Value>(loop.getResults());
}

/// 256 threads, two warpgroups of 64 keys, that load the next tile with
/// cp.async while they compute this one.
void HopperBackward::buildAsyncCopyKernel() {
  SmallVector<Value> init(plan.headDim / 2 + plan.headDimV / 2, kb.f32(0));
  ifThen(kb.lt(kb.idx(0), tileCount), [&] {
    loadQueryTileAsync(firstHead, kb.mul(tileBegin, plan.blockQ), kb.idx(0));
  });
  SmallVector<Value> results = forEachConsumerTile(
      init, [&](const ConsumerTile &tile, SmallVector<Value> &dK,
                SmallVector<Value> &dV, SmallVector<Value> &) {
        Value t = tile.index;
        Value stage = kb.remui(t, layout.stages());
        Value qRowsBase = queryRowsBaseOf(headOf(t));
        Value qBegin = qBeginOf(t);
        Value dsBuffer = dsBufferOf(t);
        // This tile's Q, dO, LSE and Delta (also K and V, on the first
        // tile); the barrier also ends every read of the other stage and of
        // dSᵀ by the last tile.
        publishQueryTile();
        prefetchQueryTile(kb.add(t, 1));
        issueTileProducts(tile, stage, dsBuffer, dV, dK);
        // Both warpgroups' dSᵀ, then this tile's dQ.
        fenceProxyAsyncShared();
        gpu::BarrierOp::create(b, loc);
        SmallVector<Value> dqAcc =
            issueDQ(tile.descriptorBase, tile.warpgroup, dsBuffer);
        NVVM::WgmmaWaitGroupSyncOp::create(b, loc, 0);
        reduceDQToGlobal(dqAcc, tile.warpgroup, qBegin, qRowsBase);
      });
  kb.waitAsync(0);
  storeDKAndDV(results);
}

// The warp-specialised kernel (-fa-wgmma-bwd-ws), 384 threads. Warpgroup 0
// gives up its registers and produces: thread 0 loads K and V once and Q and
// dO of every tile by TMA into the 2-stage ring, warp 2 copies the tile's
// LSE and Delta (ld.global, st.shared; zero past Nq), thread 32 adds each
// finished dQ tile into dq_accum with one bulk reduction. Warpgroups 1 and 2
// are the consumers of the same mainloop, without cp.async: dSᵀ is
// double-buffered (one named barrier per tile) and dQ goes into a
// double-buffered shared tile instead of red.global.
//
// mbarriers (BackwardBarriers): K/V full (2 arrivals + bytes), queryFull[s]
// (Q and dO arrive.expect_tx + the 32 lanes of warp 2), queryEmpty[s] (256
// consumer threads), dqFull[b] (256), dqEmpty[b] (the dQ reducer). Tile t
// uses slot t mod 2 of each ring for the (t / 2)-th time.
void HopperBackward::buildWarpSpecializedKernel() {
  // One CTA per SM (.minnctapersm 1): without it ptxas may aim for a lower
  // register count at entry than the .maxntid cap, and then ignores
  // setmaxnreg (C7508) and spills the consumers.
  func->setAttr(NVVM::NVVMDialect::getMinctasmAttrName(),
                b.getI32IntegerAttr(1));
  // 4-D maps {D, N, H, B}: the caller's strides address heads and batches.
  qMap = tmaMap(kb, param(15), plan.blockQ, 4);
  kMap = tmaMap(kb, param(16), plan.blockKV, 4);
  vMap = tmaMap(kb, param(17), plan.blockKV, 4);
  doMap = tmaMap(kb, param(18), plan.blockQ, 4);
  initBarriers();
  hasTiles = kb.lt(kb.idx(0), tileCount);

  const int32_t producerRegs =
      plan.isFp8() ? kFp8BackwardProducerRegs : kProducerRegs;
  auto roles = attn_gpu::WarpSpecializeOp::build(
      b, loc, producerRegs,
      attn_gpu::consumerRegisters(plan.warps * 32, producerRegs));
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(&roles.getProducerBlock());
  emitProducerWarpgroup();
  b.setInsertionPointToStart(&roles.getConsumerBlock());
  emitConsumerWarpgroups();
}

void HopperBackward::initBarriers() {
  const bool fp8 = plan.isFp8();
  barriers = createBarrierGroup(kb, fp8 ? BackwardBarriers::fp8Count
                                        : BackwardBarriers::count);
  ifThen(kb.eq(kb.tid, kb.idx(0)), [&] {
    auto init = [&](int64_t first, int64_t n, int64_t arrivals) {
      for (int64_t i = first; i < first + n; ++i)
        initBarrier(kb, barriers, i, arrivals);
    };
    init(BackwardBarriers::keyValueFull, 1, 2);
    // The TMA thread's two tiles; fp8: they land on queryLoaded, and
    // queryFull waits for the transposing warps 2-3.
    init(BackwardBarriers::queryFull, 2, fp8 ? 64 : 2 + 32);
    if (fp8) {
      init(BackwardBarriers::queryLoaded, 2, 2);
      init(BackwardBarriers::keyTransposed, 1, 64);
      for (int64_t i = 0; i < layout.dsBuffers(); ++i)
        memref::StoreOp::create(b, loc, kb.f32(0), stats,
                                ValueRange{kb.idx(layout.amaxBase() / 4 + i)});
    }
    // Released by the consumers, or, dQ staged in the slot, its reducer.
    init(BackwardBarriers::queryEmpty, 2, plan.splitRoles ? 1 : 256);
    init(BackwardBarriers::dqFull, 2, 256);
    init(BackwardBarriers::dqEmpty, 2, 1);
  });
  gpu::BarrierOp::create(b, loc);
}

void HopperBackward::emitProducerWarpgroup() {
  batchHeads32 = kb.toI32(kb.mul(batch, heads));
  nq32 = kb.toI32(nq);
  headRows32 = plan.varlen ? kb.toI32(nqTotal) : nq32;
  seqStartQ32 = plan.varlen ? kb.toI32(seqStartQ) : Value();
  emitTmaLoads();
  if (plan.isFp8())
    emitFp8Transposes();
  else
    emitRowStatsLoads();
  if (plan.splitRoles)
    emitDQPanelReductions();
  else
    emitDQReductions();
}

void HopperBackward::emitConsumerWarpgroups() {
  if (plan.splitRoles)
    return emitSplitRoleConsumers();
  if (plan.isFp8())
    return emitFp8Consumers();
  const BarrierRing ring{layout.stages()};
  ifThen(hasTiles, [&] {
    waitBarrier(kb, barriers, BackwardBarriers::keyValueFull, kb.idx(0),
                phaseParity(kb, kb.idx(0)));
  });
  SmallVector<Value> init(plan.headDim / 2 + plan.headDimV / 2, kb.f32(0));
  SmallVector<Value> results = forEachConsumerTile(
      init, [&](const ConsumerTile &tile, SmallVector<Value> &dK,
                SmallVector<Value> &dV, SmallVector<Value> &) {
        Value t = tile.index;
        Value slot = ring.slot(kb, t);
        Value dsBuffer = dsBufferOf(t);
        // Waits come before wgmma.fence (ptxas serialises the wgmmas of a
        // sequence with a wait loop inside, C7519).
        waitBarrier(kb, barriers, BackwardBarriers::queryFull, slot,
                    ring.fullParity(kb, t));
        issueTileProducts(tile, slot, dsBuffer, dV, dK);
        // Both consumers' dSᵀ (generic stores, read by wgmma), then dQ. The
        // other dSᵀ buffer is free: both consumers passed this barrier
        // after their dQ of the last tile completed.
        fenceProxyAsyncShared();
        namedBarrier(b, loc, "bar.sync", 1, 256);
        SmallVector<Value> dqAcc =
            issueDQ(tile.descriptorBase, tile.warpgroup, dsBuffer);
        NVVM::WgmmaWaitGroupSyncOp::create(b, loc, 0);
        // Q, dO, LSE and Delta of the slot are read.
        arriveBarrier(kb, barriers, BackwardBarriers::queryEmpty, slot);
        SmallVector<Value> dq = unpackDQ(dqAcc);
        // dQ into buffer `slot` once the reducer has added its last
        // contents.
        waitBarrier(kb, barriers, BackwardBarriers::dqEmpty, slot,
                    ring.emptyParity(kb, t));
        storeDQTile(dq, tile.warpgroup, slot);
        fenceProxyAsyncShared();
        arriveBarrier(kb, barriers, BackwardBarriers::dqFull, slot);
      });
  storeDKAndDV(results);
}

void mlir::fa::gpu_lowering::buildBackwardMainWgmma(KernelBuilder &kb,
                                                    gpu::GPUModuleOp module,
                                                    gpu::GPUFuncOp func,
                                                    const TiledLoopNest &loops) {
  HopperBackward(kb, module, func, loops).build();
}
