//===- HopperForwardKernel.cpp - wgmma/TMA forward for sm_90a ---*- C++ -*-===//
//
// The FlashAttention-3 shape of the forward on Hopper. 384 threads in three
// warpgroups: warpgroup 0 gives up its registers (setmaxnreg 24) and one of
// its threads issues TMA loads of the Q tile and of a `stages`-deep K/V ring,
// each completing on a "full" mbarrier; warpgroups 1 and 2 raise theirs
// (setmaxnreg 240) and own 64 query rows each. With block_q 192 a third
// consumer warpgroup (512 threads, 160 registers each) owns rows 128-191. A
// consumer computes S = Q·Kᵀ with shared-memory wgmma, keeps P in registers as
// the A operand of P·V (register-A wgmma) and frees a ring slot by arriving on
// its "empty" mbarrier. S(j) and P·V(j-1) are issued together so the tensor
// cores run P·V(j-1) while the softmax of tile j runs.
//
// On a persistent grid (-fa-wgmma-persistent; by default maskless D <= 64)
// one CTA per SM takes query tiles from a counter (forEachTile). Q gets an
// "empty" mbarrier: the consumers free it after their last Q·Kᵀ, so the next
// tile's first K and its Q load under this tile's last softmax, P·V and
// epilogue, which stores O from registers (Q's buffer is already refilling).
//
// Shared memory (128 B swizzle; a 64-column slab per TMA box):
//   Q [D/64][block_q rows][64] | K stage s [D/64][BKV][64] |
//   V stage s [Dv/64][BKV][64]
// wgmma descriptors: K-major Q and K advance 32 B per k16 step inside a
// slab, SBO = 1024 B (8 rows of 128 B); V is N-major ("transposed" B):
// LBO = one slab (BKV·128 B), SBO = 1024 B, +2048 B per k16 step.
//
// This file puts the kernel together; its parts (producer, mainloop,
// epilogue) are the files HopperForward.h lists.
//
//===----------------------------------------------------------------------===//

#include "HopperForward.h"

#include "fa/Dialect/Attn/Transforms/Transforms.h"
#include "fa/Dialect/AttnGPU/IR/AttnGPU.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "llvm/Support/CommandLine.h"

#include <cmath>
#include <functional>

using namespace mlir;
using namespace mlir::fa;
using namespace mlir::fa::gpu_lowering;
namespace ag = mlir::fa::attn_gpu;

llvm::cl::OptionCategory &mlir::fa::codegenOptionCategory() {
  static llvm::cl::OptionCategory category(
      "fa code generation (A/B switches of the wgmma kernels; each choice "
      "that departs from the measured default is named in the kernel tag)");
  return category;
}

// Switches for A/B measurements of the consumer schedule and the epilogue
// (docs/hopper-notes.md records what each is worth on the H200; together
// they pay, ping-pong alone loses on causal masks).
static llvm::cl::opt<llvm::cl::boolOrDefault> clPingPong(
    "fa-wgmma-ping-pong", llvm::cl::cat(mlir::fa::codegenOptionCategory()),
    llvm::cl::desc("wgmma forward: the consumer warpgroups take turns issuing "
                   "their GEMMs (named barriers 1 and 2) (default: for every "
                   "operand type but fp8, where it was measured to lose)"));
static llvm::cl::opt<bool> clSmemEpilogue(
    "fa-wgmma-smem-epilogue", llvm::cl::cat(mlir::fa::codegenOptionCategory()),
    llvm::cl::desc("wgmma forward: O goes through the Q tile's shared memory "
                   "and leaves with 16-byte stores"),
    llvm::cl::init(true));
static llvm::cl::opt<llvm::cl::boolOrDefault> clLazyRescale(
    "fa-wgmma-lazy-rescale", llvm::cl::cat(mlir::fa::codegenOptionCategory()),
    llvm::cl::desc("wgmma forward: a row keeps its softmax base until its max "
                   "grows by more than 2^8, and a warp skips rescaling O "
                   "when none of its rows moved (default: for Dv > 128, "
                   "where it was measured to pay)"));

static llvm::cl::opt<llvm::cl::boolOrDefault> clRescaleInTurn(
    "fa-wgmma-rescale-in-turn", llvm::cl::cat(mlir::fa::codegenOptionCategory()),
    llvm::cl::desc("wgmma forward: O is rescaled by the previous tile's "
                   "factors between issuing S(j) and P·V(j-1), inside the "
                   "ping-pong turn, instead of before asking for it "
                   "(default: for D > 64 except on a persistent grid with "
                   "block_kv > 128, where it was measured to pay)"));

static llvm::cl::opt<llvm::cl::boolOrDefault> clRaggedFirst(
    "fa-wgmma-ragged-first", llvm::cl::cat(mlir::fa::codegenOptionCategory()),
    llvm::cl::desc("wgmma forward without a mask: the last, ragged key tile "
                   "runs first, Q·Kᵀ and softmax on the multiple of 64 keys "
                   "that covers it; the loop's tiles are then full and "
                   "unmasked (default: on, except on the persistent D > 64 "
                   "grid, whose consumer has no register to spare)"));

static llvm::cl::opt<int> clPolyExp2(
    "fa-wgmma-poly-exp2", llvm::cl::cat(mlir::fa::codegenOptionCategory()),
    llvm::cl::desc("wgmma forward: of every 8 n8 tiles of scores, this many "
                   "take their exponentials from a polynomial on the FMA "
                   "pipe instead of ex2.approx on the special-function unit "
                   "(0-8; default -1: the measured choice, 2 for fp8 at "
                   "D = 256, else 0)"),
    llvm::cl::init(-1));

static llvm::cl::opt<llvm::cl::boolOrDefault> clPersistent(
    "fa-wgmma-persistent", llvm::cl::cat(mlir::fa::codegenOptionCategory()),
    llvm::cl::desc("wgmma forward: one CTA per SM takes query tiles from a "
                   "counter; the next tile's Q and first K tile load under "
                   "this tile's last P·V and epilogue (default: for maskless "
                   "forwards with D <= 64, where it was measured to pay)"));

std::string mlir::fa::wgmmaVariantKey() {
  return std::string("pp") +
         std::to_string(static_cast<int>(clPingPong.getValue())) + ".epi" +
         (clSmemEpilogue ? "1" : "0") + ".lazy" +
         std::to_string(static_cast<int>(clLazyRescale.getValue())) + ".rit" +
         std::to_string(static_cast<int>(clRescaleInTurn.getValue())) +
         ".ragged" +
         std::to_string(static_cast<int>(clRaggedFirst.getValue())) +
         ".persist" +
         std::to_string(static_cast<int>(clPersistent.getValue())) + ".pe" +
         std::to_string(clPolyExp2.getValue());
}

/// `opt` where it is given, otherwise the measured default.
static bool optionOr(const llvm::cl::opt<llvm::cl::boolOrDefault> &opt,
                     bool measured) {
  return opt == llvm::cl::BOU_UNSET ? measured : opt == llvm::cl::BOU_TRUE;
}

WgmmaForwardSchedule
mlir::fa::measuredWgmmaForwardSchedule(const KernelPlan &plan) {
  WgmmaForwardSchedule measured;
  // O takes the previous tile's factors inside the turn (FA3's order), so
  // the 64 multiplies leave the path from a tile's softmax to its next
  // issue: +2-3% causal, +0.5-1.5% maskless at d128, +0-2% on the
  // persistent causal block_kv 128 grid; d64 maskless lost 3-5%; 8 B of
  // spills on persistent grids with wider key tiles (block_kv 176).
  measured.rescaleInTurn =
      plan.headDim > 64 && !(plan.persistent && plan.blockKV > 128);
  // O's 2·Dv/8 multiplies a rescale weigh most at Dv = 256: skipping them
  // while a row's max grows by at most 2^8 gave +2-12% (bf16) and +5-9%
  // (fp8) there, within noise at Dv = 128 (PERF.md).
  // fp8 d128 too: +1-2% beside ping-pong off (PERF.md, 2026-12-05).
  measured.lazyRescale = plan.headDimV > 128 || plan.isFp8();
  // fp8's GEMMs are half as long as bf16's: the turns' named barriers cost
  // more than the overlap of one warpgroup's softmax with the other's
  // GEMMs gains (H200: +14-16% at d256 without a mask, +1-4% at d128).
  // The turns alternate two consumer warpgroups (block_q 128).
  measured.pingPong = !plan.isFp8() && plan.blockQ == 128;
  // Maskless, the ragged last tile first: +1-9% at d64 and, with the
  // in-turn rescale, +2-5% at d128. The persistent D > 64 consumer has no
  // register to spare for the prologue's width branches (8 B of spills at
  // block_kv 176).
  // A block-sparse key loop reads its key tiles from the block mask's
  // lists, in their order.
  measured.raggedFirst = plan.spec.mask == attn::MaskKind::None &&
                         !(plan.persistent && plan.headDim > 64) &&
                         !plan.blockSparse;
  // fp8: O (bf16) is twice as wide as the Q tile (fp8) it would pass
  // through: it leaves from registers.
  measured.smemEpilogue = !plan.isFp8();
  // fp8 at D = 256: a quarter of the exponentials on the FMA pipe gave
  // +0.2-4% (H200); at fp8 d128 and bf16 d64 it lost 2-7% (PERF.md,
  // 2026-12-06).
  measured.polyExp2 = plan.isFp8() && plan.headDim == 256 ? 2 : 0;
  return measured;
}

WgmmaForwardSchedule mlir::fa::wgmmaForwardSchedule(const KernelPlan &plan) {
  WgmmaForwardSchedule schedule = measuredWgmmaForwardSchedule(plan);
  schedule.pingPong = optionOr(clPingPong, schedule.pingPong);
  schedule.smemEpilogue = clSmemEpilogue && schedule.smemEpilogue;
  schedule.lazyRescale = optionOr(clLazyRescale, schedule.lazyRescale);
  schedule.rescaleInTurn = optionOr(clRescaleInTurn, schedule.rescaleInTurn);
  // The switch can only turn ragged-first off: where the measured default
  // does not take it (a mask, the persistent D > 64 consumer) it cannot run.
  schedule.raggedFirst =
      schedule.raggedFirst && optionOr(clRaggedFirst, true);
  if (clPolyExp2 != -1)
    schedule.polyExp2 = clPolyExp2;
  return schedule;
}

bool mlir::fa::wgmmaPersistentGrid(const attn::ScoreSpec &spec,
                                   int64_t headDim) {
  // Measured on the H200 (PERF.md): +0 to +13% for maskless D = 64. At
  // D = 128 it pays only below ~2k keys: block_kv 192 spills on this grid
  // and the persistent 176 loses 2-6% per key tile from 4k on; causal
  // tiles lose 4-10% from 2k on against one CTA per tile.
  return optionOr(clPersistent,
                  spec.mask == attn::MaskKind::None && headDim <= 64);
}

//===----------------------------------------------------------------------===//
// Shared memory, TMA and mbarriers
//===----------------------------------------------------------------------===//

Value HopperForward::descriptor(Value byteOffset, int64_t lbo) {
  return wgmmaDescriptor(kb, descBase, byteOffset, lbo);
}

void HopperForward::wait(int64_t barrier, Value stage, Value parity) {
  waitBarrier(kb, bars.group, barrier, stage, parity);
}

void HopperForward::arrive(int64_t barrier, Value stage) {
  arriveBarrier(kb, bars.group, barrier, stage);
}

void HopperForward::loadTile(Value map, int64_t rows, int64_t cols,
                             Value byteBase, Value row,
                             ArrayRef<Value> headBatch, int64_t fullBarrier,
                             Value stage) {
  tmaLoadTile(kb, bars.group, map, rows, cols, byteBase, row, headBatch,
              kb.add(stage, fullBarrier));
}

//===----------------------------------------------------------------------===//
// The kernel
//===----------------------------------------------------------------------===//

/// Applies `rescale` to `acc` unless every lane of the warp has α = 1 for
/// both its rows: under the lazy rescale most tiles leave every base alone,
/// and a warp-uniform branch then skips the accumulator's multiplies.
SmallVector<Value> HopperForward::rescaleUnlessUnit(
    Value alpha[2], ArrayRef<Value> acc,
    function_ref<void(SmallVector<Value> &)> rescale) {
  Value one = kb.f32(1.0);
  Value unit = arith::AndIOp::create(
      b, loc,
      arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, alpha[0], one),
      arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, alpha[1], one));
  Value allUnit = NVVM::VoteSyncOp::create(
      b, loc, b.getI1Type(),
      arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(-1)), unit,
      NVVM::VoteSyncKind::all);
  SmallVector<Type> types(acc.size(), b.getF32Type());
  auto ifOp = scf::IfOp::create(b, loc, types, allUnit, /*withElse=*/true);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&ifOp.getThenRegion().front());
    scf::YieldOp::create(b, loc, ValueRange(acc));
    b.setInsertionPointToStart(&ifOp.getElseRegion().front());
    SmallVector<Value> o(acc);
    rescale(o);
    scf::YieldOp::create(b, loc, o);
  }
  return SmallVector<Value>(ifOp.getResults());
}

void HopperForward::build(gpu::GPUModuleOp module, gpu::GPUFuncOp func,
                          const KernelParams &params) {
  Block &entry = func.getBody().front();
  auto arg = [&](unsigned i) { return entry.getArgument(i); };
  Value oMem = arg(3), lseMem = arg(4), scale = arg(10);
  kb.setupThreadIds();
  batches = kb.toIndex(arg(5));
  heads = kb.toIndex(arg(6));
  kvHeads = kb.toIndex(arg(7));
  nq = boundNq = kb.toIndex(arg(8));
  nk = boundNk = kb.toIndex(arg(9));
  if (plan.varlen) {
    cuSeqlensQ = arg(params.cuSeqlensParam);
    cuSeqlensK = arg(params.cuSeqlensParam + 1);
  }
  if (plan.blockSparse) {
    blockMask = arg(params.blockMaskParam);
    maskHeads = kb.toIndex(arg(params.blockMaskParam + 1));
  }
  qMap = tmaMap(kb, arg(11), plan.blockQ, /*rank=*/4);
  kMap = tmaMap(kb, arg(12), plan.blockKV, /*rank=*/4);
  vMap = tmaMap(kb, arg(13), plan.blockKV, /*rank=*/4);
  if (fp8()) { // (fp8 plans are never persistent: no tile counter)
    descaleQ = arg(14);
    descaleK = arg(15);
    descaleV = arg(16);
  }
  oT = stridedTensor(kb, oMem, params.strides(entry, 3));
  if (params.sinksParam >= 0)
    sinksMem = arg(params.sinksParam);

  // One tile per CTA: set up once for both roles (forEachTile).
  if (!plan.persistent) {
    tileIter = ringBase = kb.idx(0);
    ringBase32 = kb.c32(0);
    Value qBlock, headIdx, batchIdx;
    if (plan.blockSparse) { // the longest key-block walks first
      Value place;
      std::tie(place, headIdx) =
          BlockMaskLine::gridPlace(kb, heads, kForwardOrderHeads);
      batchIdx = gpu::BlockIdOp::create(b, loc, gpu::Dimension::z);
      qBlock = BlockMaskLine::orderedBlock(kb, blockMask, batches, maskHeads,
                                           nq, nk, batchIdx, headIdx, place,
                                           /*transposed=*/false);
    } else {
      qBlock = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
      headIdx = gpu::BlockIdOp::create(b, loc, gpu::Dimension::y);
      batchIdx = gpu::BlockIdOp::create(b, loc, gpu::Dimension::z);
    }
    if (plan.varlen) // (plans refuse a persistent varlen grid)
      setSequence(batchIdx);
    setTile(qBlock, headIdx, batchIdx);
  }

  // Typed as O's 16-bit elements (the epilogue's stores); fp8 tiles are
  // addressed in bytes through descriptors, TMA and 32-bit shared offsets.
  kb.smem = kb.sharedView(module, plan.outputElemType(), layout.total() / 2);
  if (plan.persistent) {
    tileCounter = arg(14);
    tileSlot = kb.sharedView(module, b.getI32Type(), layout.total() / 4);
  }
  descBase = wgmmaDescriptorBase(kb);

  bars.stages = layout.stages;
  bars.persistent = plan.persistent;
  bars.fp8 = fp8();
  bars.group = createBarrierGroup(kb, bars.count());
  Value isThread0 = kb.eq(kb.tid, kb.idx(0));
  {
    auto ifOp = scf::IfOp::create(b, loc, isThread0, false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&ifOp.getThenRegion().front());
    // Full barriers complete on the producer's arrive + the TMA bytes; empty
    // barriers on every consumer thread's arrive.
    for (int64_t i = 0; i < bars.count(); ++i)
      initBarrier(kb, bars.group, i, bars.arrivals(i, consumerThreads()));
  }
  gpu::BarrierOp::create(b, loc);

  OpBuilder::InsertionGuard whole(b);
  if (plan.varlen) {
    // The grid runs over the query blocks of the longest sequence: a CTA
    // whose block starts past its own sequence's end has nothing to do.
    auto active = scf::IfOp::create(b, loc, kb.lt(qBegin, nq), false);
    b.setInsertionPointToStart(&active.getThenRegion().front());
  }
  // The consumers take what the producer leaves: 240 registers each for
  // two warpgroups beside FA3's 24, 160 for three (block_q 192).
  const int32_t producerRegs = fp8() ? kFp8ProducerRegs
                               : persistentSparse()
                                   ? kPersistentSparseProducerRegs
                               : plan.persistent ? kPersistentProducerRegs
                                                 : kProducerRegs;
  auto roles = ag::WarpSpecializeOp::build(
      b, loc, producerRegs,
      ag::consumerRegisters(plan.warps * 32, producerRegs));
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&roles.getProducerBlock());
    auto one = scf::IfOp::create(b, loc, isThread0, /*withElseRegion=*/fp8());
    b.setInsertionPointToStart(&one.getThenRegion().front());
    emitProducer();
    if (fp8()) {
      b.setInsertionPointToStart(&one.getElseRegion().front());
      auto transposer = scf::IfOp::create(
          b, loc,
          arith::CmpIOp::create(b, loc, arith::CmpIPredicate::uge, kb.warp,
                                kb.idx(1)),
          false);
      b.setInsertionPointToStart(&transposer.getThenRegion().front());
      emitTransposer();
    }

    b.setInsertionPointToStart(&roles.getConsumerBlock());
    emitConsumer(roles.getConsumerBlock().getArgument(0), oMem, lseMem,
                 scale);
  }
  b.setInsertionPointToEnd(&entry);
  gpu::ReturnOp::create(b, loc);
}

static HopperSmem forwardSmem(const KernelPlan &plan) {
  return HopperSmem{plan.headDim, plan.headDimV,   plan.blockQ,
                    plan.blockKV, plan.stages,     plan.persistent,
                    plan.isFp8(), plan.blockSparse};
}

int64_t mlir::fa::wgmmaForwardSharedBytes(const KernelPlan &plan) {
  return forwardSmem(plan).total();
}

gpu::GPUFuncOp mlir::fa::buildForwardKernelWgmma(OpBuilder &b, Location loc,
                                                 gpu::GPUModuleOp module,
                                                 const KernelPlan &plan,
                                                 const TiledLoopNest &loops) {
  OpBuilder::InsertionGuard guard(b);
  // known_block_size gives the register cap at entry (.maxntid) that lets
  // setmaxnreg take effect.
  KernelParams params = forwardParams(b.getContext(), plan);
  auto func = createKernelFunc(b, loc, module, "fa_fwd_" + plan.tag(), params,
                               plan, wgmmaForwardSharedBytes(plan));
  // Its score path's tile ops lower with the plan (convert-attn-gpu-to-nvvm).
  func->setAttr(attn::kKernelPlanAttr, kernelPlanAttr(b.getContext(), plan));
  KernelPlan bound =
      bindWindowParams(b, loc, plan, func.getBody().front(), params);
  KernelBuilder kb(b, loc, bound);
  HopperForward(kb, forwardSmem(plan), loops).build(module, func, params);
  return func;
}
