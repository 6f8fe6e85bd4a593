//===- BlockMaskKernel.cpp - build a block mask from a mask_mod -*- C++ -*-===//
//
// The two entries that fill a block mask (BlockMask.h) for a block-sparse
// forward, both generated from the plan's mask_mod and block sizes:
// fa_block_mask evaluates the mask_mod on every element of one (query
// block, key block) per CTA and stores its class; fa_block_lists turns each
// row (query block) and column (key block) of classes into the ascending
// lists of partial and full blocks with one warp's ballots.
//
//===----------------------------------------------------------------------===//

#include "BlockMask.h"
#include "Fragments.h"
#include "ModArgs.h"
#include "VarlenKernel.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;
using namespace mlir::fa;
using namespace mlir::fa::gpu_lowering;

BlockMaskLayout BlockMaskLayout::get(KernelBuilder &kb, Value rows, Value nq,
                                     Value nk) {
  BlockMaskLayout l;
  l.queryBlocks = kb.ceilDiv(nq, kb.plan.blockQ);
  l.keyBlocks = kb.ceilDiv(nk, kb.plan.blockKV);
  Value perQuery = kb.mul(rows, l.queryBlocks);
  Value perKey = kb.mul(rows, l.keyBlocks);
  Value pairs = kb.mul(perQuery, l.keyBlocks);
  l.kvCount = kb.idx(0);
  l.fullKvCount = perQuery;
  l.qCount = kb.add(l.fullKvCount, perQuery);
  l.fullQCount = kb.add(l.qCount, perKey);
  l.kvIndex = kb.add(l.fullQCount, perKey);
  l.fullKvIndex = kb.add(l.kvIndex, pairs);
  l.qIndex = kb.add(l.fullKvIndex, pairs);
  l.fullQIndex = kb.add(l.qIndex, pairs);
  l.blockClass = kb.add(l.fullQIndex, pairs);
  return l;
}

/// The address of i32 element `index` of the global buffer `base`.
static Value wordAddress(KernelBuilder &kb, Value base, Value index) {
  Value i64 = arith::IndexCastOp::create(kb.b, kb.loc, kb.b.getI64Type(), index);
  return LLVM::GEPOp::create(kb.b, kb.loc, base.getType(), kb.b.getI32Type(),
                             base, ValueRange{i64});
}

Value mlir::fa::gpu_lowering::loadBlockMaskWord(KernelBuilder &kb, Value base,
                                                Value index) {
  return loadSequenceOffset(kb.b, kb.loc, base, index);
}

void mlir::fa::gpu_lowering::storeBlockMaskWord(KernelBuilder &kb, Value base,
                                                Value index, Value value) {
  LLVM::StoreOp::create(kb.b, kb.loc, value, wordAddress(kb, base, index),
                        /*alignment=*/4);
}

/// block_mask, batch, mask_heads, nq, nk (and, for fa_block_mask, the
/// mask_mod's tensors).
static KernelParams blockMaskParams(MLIRContext *ctx, const KernelPlan &plan,
                                    bool withModArgs) {
  KernelParams p;
  p.add(cuSeqlensParamType(ctx)); // block_mask: i32, global
  for (int i = 0; i < 4; ++i)
    p.add(IntegerType::get(ctx, 32));
  if (withModArgs)
    addModArgParams(p, ctx, plan);
  return p;
}

/// One i1 of each thread combined over the CTA by bar.red.{and,or}.
static Value ctaReduce(KernelBuilder &kb, Value pred, NVVM::BarrierReduction op) {
  OpBuilder &b = kb.b;
  Value asI32 = arith::ExtUIOp::create(b, kb.loc, b.getI32Type(), pred);
  Value red = NVVM::BarrierOp::create(
                  b, kb.loc, TypeRange{b.getI32Type()}, Value(), Value(),
                  NVVM::BarrierReductionAttr::get(b.getContext(), op), asI32)
                  ->getResult(0);
  return arith::CmpIOp::create(b, kb.loc, arith::CmpIPredicate::ne, red,
                               kb.c32(0));
}

/// fa_block_mask: CTA (key block, query block, row z = b·mask_heads + h).
/// Thread t evaluates query rows t, t + 128, … of the block over all its
/// keys inside Nk; the block is full when every such element is visible and
/// the block lies inside Nk (a full block skips the Nk bound as well).
static void buildClassKernel(OpBuilder &b, Location loc,
                             gpu::GPUModuleOp module, const KernelPlan &plan) {
  KernelPlan ctaPlan = plan;
  ctaPlan.warps = kBlockMaskThreads / 32;
  KernelParams params =
      blockMaskParams(b.getContext(), plan, /*withModArgs=*/true);
  auto func = createKernelFunc(b, loc, module, "fa_block_mask_" + plan.tag(),
                               params, ctaPlan, /*sharedBytes=*/0);
  Block &entry = func.getBody().front();
  auto arg = [&](unsigned i) { return entry.getArgument(i); };
  KernelBuilder kb(b, loc, ctaPlan);
  kb.setupThreadIds();
  Value mask = arg(0), batches = kb.toIndex(arg(1)),
        maskHeads = kb.toIndex(arg(2)), nq = kb.toIndex(arg(3)),
        nk = kb.toIndex(arg(4));
  Value keyBlock = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
  Value queryBlock = gpu::BlockIdOp::create(b, loc, gpu::Dimension::y);
  Value row = gpu::BlockIdOp::create(b, loc, gpu::Dimension::z);
  Value batch = arith::DivUIOp::create(b, loc, row, maskHeads);
  Value head = arith::RemUIOp::create(b, loc, row, maskHeads);
  Value key0 = kb.mul(keyBlock, plan.blockKV);
  Value keys = kb.minsi(kb.idx(plan.blockKV), kb.sub(nk, key0));
  attn::ModArgAccess modArgs = modArgAccess(func, plan);

  Type i1 = b.getI1Type();
  Value yes = arith::ConstantOp::create(b, loc, b.getBoolAttr(true));
  Value no = arith::ConstantOp::create(b, loc, b.getBoolAttr(false));
  auto rows = scf::ForOp::create(b, loc, kb.tid, kb.idx(plan.blockQ),
                                 kb.idx(kBlockMaskThreads),
                                 ValueRange{no, yes});
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(rows.getBody());
    Value query = kb.add(kb.mul(queryBlock, plan.blockQ), rows.getInductionVar());
    // Rows past Nq are never stored: they neither make a block partial nor
    // keep it from being full.
    auto inside = scf::IfOp::create(b, loc, TypeRange{i1, i1},
                                    kb.lt(query, nq), /*withElse=*/true);
    b.setInsertionPointToStart(&inside.getThenRegion().front());
    auto cols = scf::ForOp::create(b, loc, kb.idx(0), keys, kb.idx(1),
                                   ValueRange{no, yes});
    {
      OpBuilder::InsertionGuard g2(b);
      b.setInsertionPointToStart(cols.getBody());
      attn::ScorePosition pos{batch, head, query,
                              kb.add(key0, cols.getInductionVar()), nq, nk};
      Value keep =
          attn::buildMaskModPredicate(b, loc, plan.spec, pos, &modArgs);
      Value any = arith::OrIOp::create(b, loc, cols.getRegionIterArgs()[0], keep);
      Value all = arith::AndIOp::create(b, loc, cols.getRegionIterArgs()[1], keep);
      scf::YieldOp::create(b, loc, ValueRange{any, all});
    }
    scf::YieldOp::create(b, loc, cols.getResults());
    b.setInsertionPointToStart(&inside.getElseRegion().front());
    scf::YieldOp::create(b, loc, ValueRange{no, yes});
    b.setInsertionPointAfter(inside);
    ValueRange acc = rows.getRegionIterArgs();
    scf::YieldOp::create(
        b, loc,
        ValueRange{arith::OrIOp::create(b, loc, acc[0], inside.getResult(0)),
                   arith::AndIOp::create(b, loc, acc[1], inside.getResult(1))});
  }
  Value wholeTile = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                                          keys, kb.idx(plan.blockKV));
  Value any = ctaReduce(kb, rows.getResult(0), NVVM::BarrierReduction::OR);
  Value all = ctaReduce(
      kb, arith::AndIOp::create(b, loc, rows.getResult(1), wholeTile),
      NVVM::BarrierReduction::AND);
  auto first = scf::IfOp::create(b, loc, kb.lt(kb.tid, kb.idx(1)), false);
  b.setInsertionPointToStart(&first.getThenRegion().front());
  Value cls = kb.select(any, kb.select(all, kb.c32(kBlockFull), kb.c32(kBlockPartial)),
                        kb.c32(kBlockEmpty));
  BlockMaskLayout l = BlockMaskLayout::get(kb, kb.mul(batches, maskHeads), nq, nk);
  Value at = kb.add(l.blockClass,
                    kb.add(kb.mul(kb.add(kb.mul(row, l.queryBlocks), queryBlock),
                                  l.keyBlocks),
                           keyBlock));
  storeBlockMaskWord(kb, mask, at, cls);
  b.setInsertionPointToEnd(&entry);
  gpu::ReturnOp::create(b, loc);
}

/// Where one line of classes (a query block's key blocks or a key block's
/// query blocks) comes from and where its lists go.
struct ClassLine {
  Value count;                   ///< blocks in the line
  Value classBase, classStride;  ///< class of block c at base + c·stride
  Value partialList, fullList;   ///< first element of each index list
  Value partialCount, fullCount; ///< element of each count
};

/// One warp compacts `line`: 32 blocks per step, each lane's block placed
/// after the lanes below it of the same class (ballot, popc).
static void emitClassLine(KernelBuilder &kb, Value mask, const ClassLine &line) {
  OpBuilder &b = kb.b;
  Location loc = kb.loc;
  Type i32 = b.getI32Type();
  Value allLanes = kb.c32(-1);
  Value lane32 = kb.toI32(kb.lane);
  Value below = arith::SubIOp::create(
      b, loc, arith::ShLIOp::create(b, loc, kb.c32(1), lane32), kb.c32(1));
  auto steps = scf::ForOp::create(b, loc, kb.idx(0), line.count, kb.idx(32),
                                  ValueRange{kb.c32(0), kb.c32(0)});
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(steps.getBody());
    Value block = kb.add(steps.getInductionVar(), kb.lane);
    Value inLine = kb.lt(block, line.count);
    Value clamped = kb.minsi(block, kb.sub(line.count, kb.idx(1)));
    Value cls = loadBlockMaskWord(
        kb, mask, kb.add(line.classBase, kb.mul(clamped, line.classStride)));
    auto place = [&](int32_t which, Value list, Value before) -> Value {
      Value mine = arith::AndIOp::create(
          b, loc, inLine,
          arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, cls,
                                kb.c32(which)));
      Value ballot = NVVM::VoteSyncOp::create(b, loc, i32, allLanes, mine,
                                              NVVM::VoteSyncKind::ballot);
      Value rank = LLVM::CtPopOp::create(
          b, loc, i32, arith::AndIOp::create(b, loc, ballot, below));
      auto ifOp = scf::IfOp::create(b, loc, mine, false);
      {
        OpBuilder::InsertionGuard g2(b);
        b.setInsertionPointToStart(&ifOp.getThenRegion().front());
        Value slot = kb.toIndex(arith::AddIOp::create(b, loc, before, rank));
        storeBlockMaskWord(kb, mask, kb.add(list, slot), kb.toI32(block));
      }
      return arith::AddIOp::create(b, loc, before,
                                   LLVM::CtPopOp::create(b, loc, i32, ballot));
    };
    ValueRange counts = steps.getRegionIterArgs();
    Value partial = place(kBlockPartial, line.partialList, counts[0]);
    Value full = place(kBlockFull, line.fullList, counts[1]);
    scf::YieldOp::create(b, loc, ValueRange{partial, full});
  }
  auto first = scf::IfOp::create(b, loc, kb.lt(kb.lane, kb.idx(1)), false);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(&first.getThenRegion().front());
  storeBlockMaskWord(kb, mask, line.partialCount, steps.getResult(0));
  storeBlockMaskWord(kb, mask, line.fullCount, steps.getResult(1));
}

/// fa_block_lists: CTA (line, row z); lines [0, NQB) are query blocks (their
/// key-block lists), [NQB, NQB + NKB) key blocks (their query-block lists).
static void buildListsKernel(OpBuilder &b, Location loc,
                             gpu::GPUModuleOp module, const KernelPlan &plan) {
  KernelPlan warpPlan = plan;
  warpPlan.warps = kBlockListsThreads / 32;
  KernelParams params =
      blockMaskParams(b.getContext(), plan, /*withModArgs=*/false);
  auto func = createKernelFunc(b, loc, module, "fa_block_lists_" + plan.tag(),
                               params, warpPlan, /*sharedBytes=*/0);
  Block &entry = func.getBody().front();
  auto arg = [&](unsigned i) { return entry.getArgument(i); };
  KernelBuilder kb(b, loc, warpPlan);
  kb.setupThreadIds();
  Value mask = arg(0);
  Value rows = kb.mul(kb.toIndex(arg(1)), kb.toIndex(arg(2)));
  BlockMaskLayout l =
      BlockMaskLayout::get(kb, rows, kb.toIndex(arg(3)), kb.toIndex(arg(4)));
  Value lineIdx = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
  Value row = gpu::BlockIdOp::create(b, loc, gpu::Dimension::y);
  auto isQuery = scf::IfOp::create(b, loc, kb.lt(lineIdx, l.queryBlocks),
                                   /*withElse=*/true);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&isQuery.getThenRegion().front());
    Value at = kb.add(kb.mul(row, l.queryBlocks), lineIdx);
    Value first = kb.mul(at, l.keyBlocks);
    emitClassLine(kb, mask,
                  {l.keyBlocks, kb.add(l.blockClass, first), kb.idx(1),
                   kb.add(l.kvIndex, first), kb.add(l.fullKvIndex, first),
                   kb.add(l.kvCount, at), kb.add(l.fullKvCount, at)});

    b.setInsertionPointToStart(&isQuery.getElseRegion().front());
    Value keyBlock = kb.sub(lineIdx, l.queryBlocks);
    Value atKey = kb.add(kb.mul(row, l.keyBlocks), keyBlock);
    Value firstKey = kb.mul(atKey, l.queryBlocks);
    Value classBase = kb.add(
        l.blockClass,
        kb.add(kb.mul(kb.mul(row, l.queryBlocks), l.keyBlocks), keyBlock));
    emitClassLine(kb, mask,
                  {l.queryBlocks, classBase, l.keyBlocks,
                   kb.add(l.qIndex, firstKey), kb.add(l.fullQIndex, firstKey),
                   kb.add(l.qCount, atKey), kb.add(l.fullQCount, atKey)});
  }
  b.setInsertionPointToEnd(&entry);
  gpu::ReturnOp::create(b, loc);
}

void mlir::fa::buildBlockMaskKernels(OpBuilder &b, Location loc,
                                     gpu::GPUModuleOp module,
                                     const KernelPlan &plan) {
  OpBuilder::InsertionGuard guard(b);
  buildClassKernel(b, loc, module, plan);
  buildListsKernel(b, loc, module, plan);
}
