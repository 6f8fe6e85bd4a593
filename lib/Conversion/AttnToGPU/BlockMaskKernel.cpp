//===- BlockMaskKernel.cpp - build a block mask from a mask_mod -*- C++ -*-===//
//
// The three entries that fill a block mask (BlockMask.h) for a block-sparse
// kernel, generated from the plan's mask_mod and block sizes:
// fa_block_mask classifies one (query block, key block) per warp, from the
// ranges of a separable compare's two sides or from every element, and
// stores its class; fa_block_lists turns each
// row (query block) and column (key block) of classes into the ascending
// lists of partial and full blocks with one warp's ballots; fa_block_order
// ranks the lines of a row by their lengths, longest first.
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
  l.kvOrder = kb.add(l.blockClass, pairs);
  l.qOrder = kb.add(l.kvOrder, perQuery);
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

BlockMaskLine BlockMaskLine::read(KernelBuilder &kb, Value mask,
                                  Value fullCounts, Value counts,
                                  Value fullIndex, Value index, Value line,
                                  Value blocks) {
  auto clampedCount = [&](Value base, Value limit) {
    Value n = kb.toIndex(arith::MaxSIOp::create(
        kb.b, kb.loc, loadBlockMaskWord(kb, mask, kb.add(base, line)),
        kb.c32(0)));
    return kb.minsi(n, limit);
  };
  BlockMaskLine l;
  l.mask = mask;
  l.full = clampedCount(fullCounts, blocks);
  Value partial = clampedCount(counts, kb.sub(blocks, l.full));
  Value first = kb.mul(line, blocks);
  l.fullList = kb.add(fullIndex, first);
  l.partialList = kb.add(index, first);
  l.count = kb.add(l.full, partial);
  return l;
}

BlockMaskLine BlockMaskLine::walk(KernelBuilder &kb, Value mask,
                                  Value batches, Value maskHeads, Value nq,
                                  Value nk, Value batch,
                                  function_ref<Value()> head, Value block,
                                  bool transposed, BlockMaskLayout *layout) {
  BlockMaskLayout l =
      BlockMaskLayout::get(kb, kb.mul(batches, maskHeads), nq, nk);
  if (layout)
    *layout = l;
  Value h = head();
  Value row = kb.add(kb.mul(batch, maskHeads),
                     arith::RemUIOp::create(kb.b, kb.loc, h, maskHeads));
  // Unclamped indices only misplace tiles, which TMA and the mask_mod's
  // clamped reads keep inside the tensors.
  if (transposed)
    return read(kb, mask, l.fullQCount, l.qCount, l.fullQIndex, l.qIndex,
                kb.add(kb.mul(row, l.keyBlocks), block), l.queryBlocks);
  return read(kb, mask, l.fullKvCount, l.kvCount, l.fullKvIndex, l.kvIndex,
              kb.add(kb.mul(row, l.queryBlocks), block), l.keyBlocks);
}

std::pair<Value, Value> BlockMaskLine::gridPlace(KernelBuilder &kb,
                                                 Value heads,
                                                 int64_t groupHeads) {
  OpBuilder &b = kb.b;
  Location loc = kb.loc;
  Value x = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
  Value y = gpu::BlockIdOp::create(b, loc, gpu::Dimension::y);
  Value blocks = gpu::GridDimOp::create(b, loc, gpu::Dimension::x);
  return placeOf(kb, kb.add(kb.mul(y, blocks), x), blocks, heads, groupHeads);
}

std::pair<Value, Value> BlockMaskLine::placeOf(KernelBuilder &kb, Value l,
                                               Value blocks, Value heads,
                                               int64_t groupHeads) {
  OpBuilder &b = kb.b;
  Location loc = kb.loc;
  // Group g holds heads [g·G, g·G + n), n = min(G, heads − g·G), and its
  // blocks · n CTAs from l = g · blocks · G on. (Index or i32, as l.)
  Value g = arith::ConstantOp::create(
      b, loc, b.getIntegerAttr(l.getType(), groupHeads));
  Value span = kb.mul(blocks, g);
  Value group = arith::DivUIOp::create(b, loc, l, span);
  Value inGroup = kb.sub(l, kb.mul(group, span));
  Value first = kb.mul(group, g);
  Value n = kb.minsi(g, kb.sub(heads, first));
  return {arith::DivUIOp::create(b, loc, inGroup, n),
          kb.add(first, arith::RemUIOp::create(b, loc, inGroup, n))};
}

Value BlockMaskLine::orderedBlock(KernelBuilder &kb, Value mask,
                                  Value batches, Value maskHeads, Value nq,
                                  Value nk, Value batch, Value head,
                                  Value rank, bool transposed) {
  BlockMaskLayout l =
      BlockMaskLayout::get(kb, kb.mul(batches, maskHeads), nq, nk);
  Value row = kb.add(kb.mul(batch, maskHeads),
                     arith::RemUIOp::create(kb.b, kb.loc, head, maskHeads));
  Value blocks = transposed ? l.keyBlocks : l.queryBlocks;
  Value order = transposed ? l.qOrder : l.kvOrder;
  Value block = kb.toIndex(arith::MaxSIOp::create(
      kb.b, kb.loc,
      loadBlockMaskWord(kb, mask, kb.add(order, kb.add(kb.mul(row, blocks), rank))),
      kb.c32(0)));
  return kb.minsi(block, kb.sub(blocks, kb.idx(1)));
}

Value BlockMaskLine::blockAt(KernelBuilder &kb, Value i) const {
  Value at = kb.select(kb.lt(i, full), kb.add(fullList, i),
                       kb.add(partialList, kb.sub(i, full)));
  return loadBlockMaskWord(kb, mask, at);
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

/// fa_block_mask's warp: kKeyLanes lanes side by side over a block's keys,
/// 32 / kKeyLanes over its rows. Each lane evaluates the mask_mod on
/// ceil(block_kv / kKeyLanes) keys (key lane + kKeyLanes·j) of
/// ceil(block_q / kRowLanes) rows (row lane + kRowLanes·i), kRowsPerStep rows
/// at a time.
constexpr int64_t kKeyLanes = 8;
constexpr int64_t kRowLanes = kBlockMaskThreads / kKeyLanes;
constexpr int64_t kRowsPerStep = 4;

/// Copies every value mapping of `from` into `to`.
static void mapAll(IRMapping &to, const IRMapping &from) {
  for (auto [key, value] : from.getValueMap())
    to.map(key, value);
}

namespace {
/// The plan's mask_mod over one lane's elements of a block, emitted in its
/// stages (attn::maskModStages): what reads neither q_idx nor kv_idx once,
/// what reads only kv_idx once per key of the lane (before the row loop),
/// what reads only q_idx once per row, and only the rest per element, so a
/// document mask costs one compare per element.
struct StagedMaskMod {
  const attn::ScoreSpec &spec;
  const attn::ModArgAccess &modArgs;
  DenseMap<Operation *, unsigned> stages;
  IRMapping fixed;              ///< the clones of the stage reading neither
  SmallVector<IRMapping> perKey; ///< and of the kv_idx stage, per key

  /// Emits the fixed stage at (batch, head) and the key stage at each of
  /// `keys`.
  StagedMaskMod(OpBuilder &b, Location loc, const attn::ScoreSpec &spec,
                const attn::ModArgAccess &modArgs, Value batch, Value head,
                ArrayRef<Value> keys)
      : spec(spec), modArgs(modArgs), stages(attn::maskModStages(spec)) {
    attn::mapMaskModPositions(spec, {batch, head, {}, {}, {}, {}}, fixed,
                              &modArgs);
    attn::buildMaskModStage(b, loc, spec, stages, attn::kMaskModFixed, fixed,
                            &modArgs);
    for (Value kv : keys) {
      IRMapping &keyMap = perKey.emplace_back(fixed);
      attn::mapMaskModPositions(spec, {{}, {}, {}, kv, {}, {}}, keyMap,
                                &modArgs);
      attn::buildMaskModStage(b, loc, spec, stages, attn::kMaskModKey, keyMap,
                              &modArgs);
    }
  }

  /// `v` (a value of the query or fixed stage) at row `query`.
  Value atRow(OpBuilder &b, Location loc, Value query, Value v) const {
    IRMapping rowMap = fixed;
    attn::mapMaskModPositions(spec, {{}, {}, query, {}, {}, {}}, rowMap,
                              &modArgs);
    attn::buildMaskModStage(b, loc, spec, stages, attn::kMaskModQuery, rowMap,
                            &modArgs);
    return rowMap.lookup(v);
  }

  /// (any, all) folded over row `query` against every key: its q_idx stage
  /// once, then the element stage per key.
  std::pair<Value, Value> foldRow(OpBuilder &b, Location loc, Value query,
                                  Value any, Value all) const {
    IRMapping rowMap = fixed;
    attn::mapMaskModPositions(spec, {{}, {}, query, {}, {}, {}}, rowMap,
                              &modArgs);
    attn::buildMaskModStage(b, loc, spec, stages, attn::kMaskModQuery, rowMap,
                            &modArgs);
    for (const IRMapping &keyMap : perKey) {
      IRMapping element = keyMap;
      mapAll(element, rowMap);
      Value keep = attn::buildMaskModStage(
          b, loc, spec, stages, attn::kMaskModElement, element, &modArgs);
      any = arith::OrIOp::create(b, loc, any, keep);
      all = arith::AndIOp::create(b, loc, all, keep);
    }
    return {any, all};
  }
};
} // namespace

/// Whether `pred` compares its operands as unsigned integers.
static bool isUnsignedPredicate(arith::CmpIPredicate pred) {
  using P = arith::CmpIPredicate;
  return pred == P::ult || pred == P::ule || pred == P::ugt || pred == P::uge;
}

/// The signed or unsigned range of an integer across the warp (rangeType).
struct WarpRange {
  Value lo, hi;
};

/// The type a compare's sides are reduced in: i32 for integers of up to 32
/// bits, i64 for wider ones and index.
static Type rangeType(OpBuilder &b, Type t) {
  auto integer = dyn_cast<IntegerType>(t);
  return integer && integer.getWidth() <= 32 ? b.getI32Type() : b.getI64Type();
}

/// `v` (any integer or index) as `to`, sign- or zero-extended.
static Value widen(OpBuilder &b, Location loc, Value v, Type to,
                   bool isUnsigned) {
  if (v.getType().isIndex())
    return isUnsigned ? arith::IndexCastUIOp::create(b, loc, to, v).getResult()
                      : arith::IndexCastOp::create(b, loc, to, v).getResult();
  if (v.getType() == to)
    return v;
  return isUnsigned ? arith::ExtUIOp::create(b, loc, to, v).getResult()
                    : arith::ExtSIOp::create(b, loc, to, v).getResult();
}

/// Combines `v` (i32, or i64 by its two halves) with every lane's by a
/// butterfly of shuffles.
static Value warpAllReduce(KernelBuilder &kb, Value v,
                           function_ref<Value(Value, Value)> combine) {
  OpBuilder &b = kb.b;
  Location loc = kb.loc;
  Type i32 = b.getI32Type(), i64 = b.getI64Type();
  if (v.getType() == i32) {
    for (int64_t m = 16; m >= 1; m /= 2)
      v = combine(v, kb.shuffleXor(v, m));
    return v;
  }
  Value c32 = arith::ConstantOp::create(b, loc, b.getI64IntegerAttr(32));
  for (int64_t m = 16; m >= 1; m /= 2) {
    Value lo = arith::TruncIOp::create(b, loc, i32, v);
    Value hi = arith::TruncIOp::create(
        b, loc, i32, arith::ShRUIOp::create(b, loc, v, c32));
    Value other = arith::OrIOp::create(
        b, loc,
        arith::ShLIOp::create(
            b, loc, arith::ExtUIOp::create(b, loc, i64, kb.shuffleXor(hi, m)),
            c32),
        arith::ExtUIOp::create(b, loc, i64, kb.shuffleXor(lo, m)));
    v = combine(v, other);
  }
  return v;
}

/// The range of `values` (the lane's) across the warp.
static WarpRange warpRange(KernelBuilder &kb, ArrayRef<Value> values,
                           bool isUnsigned) {
  OpBuilder &b = kb.b;
  Location loc = kb.loc;
  auto min = [&](Value x, Value y) -> Value {
    return isUnsigned ? arith::MinUIOp::create(b, loc, x, y).getResult()
                      : arith::MinSIOp::create(b, loc, x, y).getResult();
  };
  auto max = [&](Value x, Value y) -> Value {
    return isUnsigned ? arith::MaxUIOp::create(b, loc, x, y).getResult()
                      : arith::MaxSIOp::create(b, loc, x, y).getResult();
  };
  Type type = rangeType(b, values.front().getType());
  Value lo = widen(b, loc, values.front(), type, isUnsigned), hi = lo;
  for (Value v : values.drop_front()) {
    Value x = widen(b, loc, v, type, isUnsigned);
    lo = min(lo, x);
    hi = max(hi, x);
  }
  return {warpAllReduce(kb, lo, min), warpAllReduce(kb, hi, max)};
}

/// (some element kept, every element kept) of `lhs` pred `rhs` over every
/// pair of the two ranges: sufficient for the block's elements, whose
/// pairs are among them; a block neither shows is classed partial and
/// evaluated per element by the kernels.
static std::pair<Value, Value> classifyRanges(OpBuilder &b, Location loc,
                                              arith::CmpIPredicate pred,
                                              WarpRange lhs, WarpRange rhs) {
  using P = arith::CmpIPredicate;
  bool isUnsigned = isUnsignedPredicate(pred);
  auto cmp = [&](P signedPred, Value x, Value y) -> Value {
    P p = signedPred;
    if (isUnsigned)
      p = signedPred == P::slt   ? P::ult
          : signedPred == P::sle ? P::ule
          : signedPred == P::sgt ? P::ugt
          : signedPred == P::sge ? P::uge
                                 : signedPred;
    return arith::CmpIOp::create(b, loc, p, x, y);
  };
  auto both = [&](Value x, Value y) -> Value {
    return arith::AndIOp::create(b, loc, x, y);
  };
  auto either = [&](Value x, Value y) -> Value {
    return arith::OrIOp::create(b, loc, x, y);
  };
  auto notOf = [&](Value x) -> Value {
    return arith::XOrIOp::create(
        b, loc, x, arith::ConstantOp::create(b, loc, b.getBoolAttr(true)));
  };
  // One value on both sides, and the ranges apart.
  Value single = both(both(cmp(P::eq, lhs.lo, lhs.hi), cmp(P::eq, rhs.lo, rhs.hi)),
                      cmp(P::eq, lhs.lo, rhs.lo));
  Value apart = either(cmp(P::slt, lhs.hi, rhs.lo), cmp(P::slt, rhs.hi, lhs.lo));
  Value every, none;
  switch (pred) {
  case P::eq:
    every = single, none = apart;
    break;
  case P::ne:
    every = apart, none = single;
    break;
  case P::slt:
  case P::ult:
    every = cmp(P::slt, lhs.hi, rhs.lo), none = cmp(P::sge, lhs.lo, rhs.hi);
    break;
  case P::sle:
  case P::ule:
    every = cmp(P::sle, lhs.hi, rhs.lo), none = cmp(P::sgt, lhs.lo, rhs.hi);
    break;
  case P::sgt:
  case P::ugt:
    every = cmp(P::sgt, lhs.lo, rhs.hi), none = cmp(P::sle, lhs.hi, rhs.lo);
    break;
  case P::sge:
  case P::uge:
    every = cmp(P::sge, lhs.lo, rhs.hi), none = cmp(P::slt, lhs.hi, rhs.lo);
    break;
  }
  return {notOf(none), every};
}

/// fa_block_mask for a mask_mod that compares a query-side value with a
/// key-side one (attn::separableMaskCompare): each lane evaluates the query
/// side at rows lane + 32i and the key side at keys lane + 32j of the block
/// (clamped onto its last row and key), the warp reduces both ranges and
/// classifies the block from them: O(block_q + block_kv) work per block
/// instead of O(block_q · block_kv). Returns (some kept, every kept).
static std::pair<Value, Value>
classifyByRanges(KernelBuilder &kb, attn::SeparableMaskCompare compare,
                 const StagedMaskMod &maskMod, ArrayRef<Value> laneRows) {
  OpBuilder &b = kb.b;
  Location loc = kb.loc;
  arith::CmpIPredicate pred = compare.compare.getPredicate();
  bool isUnsigned = isUnsignedPredicate(pred);
  SmallVector<Value> queryValues, keyValues;
  for (Value row : laneRows)
    queryValues.push_back(maskMod.atRow(b, loc, row, compare.query));
  for (const IRMapping &keyMap : maskMod.perKey)
    keyValues.push_back(keyMap.lookup(compare.key));
  WarpRange query = warpRange(kb, queryValues, isUnsigned);
  WarpRange key = warpRange(kb, keyValues, isUnsigned);
  bool queryIsLhs = compare.query == compare.compare.getLhs();
  return classifyRanges(b, loc, pred, queryIsLhs ? query : key,
                        queryIsLhs ? key : query);
}

/// The mask_mod on every element of the block (one warp; StagedMaskMod):
/// kKeyLanes lanes over its keys, the rest over its rows, a step of rows
/// while the warp has not seen both a kept and a hidden element (the block
/// is then partial whatever the rest holds). Returns (some kept, every
/// kept), warp-uniform.
static std::pair<Value, Value>
classifyByElements(KernelBuilder &kb, const KernelPlan &plan,
                   const attn::ModArgAccess &modArgs, Value batch, Value head,
                   Value key0, Value lastKey, Value query0, Value lastQuery) {
  OpBuilder &b = kb.b;
  Location loc = kb.loc;
  Value firstKey = kb.add(key0, kb.remui(kb.lane, kKeyLanes));
  Value rowLane = kb.divui(kb.lane, kKeyLanes);
  SmallVector<Value> laneKeys;
  int64_t keysPerLane = llvm::divideCeil(plan.blockKV, kKeyLanes);
  for (int64_t j = 0; j < keysPerLane; ++j)
    laneKeys.push_back(kb.minsi(kb.add(firstKey, kKeyLanes * j), lastKey));
  StagedMaskMod maskMod(b, loc, plan.spec, modArgs, batch, head, laneKeys);

  Type i1 = b.getI1Type();
  Value yes = arith::ConstantOp::create(b, loc, b.getBoolAttr(true));
  Value no = arith::ConstantOp::create(b, loc, b.getBoolAttr(false));
  auto vote = [&](Value pred, NVVM::VoteSyncKind kind) -> Value {
    return NVVM::VoteSyncOp::create(b, loc, i1, kb.c32(-1), pred, kind);
  };
  int64_t steps = llvm::divideCeil(llvm::divideCeil(plan.blockQ, kRowLanes),
                                   kRowsPerStep);
  auto loop = scf::ForOp::create(b, loc, kb.idx(0), kb.idx(steps), kb.idx(1),
                                 ValueRange{no, yes});
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(loop.getBody());
    Value any = loop.getRegionIterArgs()[0];
    Value all = loop.getRegionIterArgs()[1];
    Value someHidden = vote(arith::XOrIOp::create(b, loc, all, yes),
                            NVVM::VoteSyncKind::any);
    Value someKept = vote(any, NVVM::VoteSyncKind::any);
    Value partial = arith::AndIOp::create(b, loc, someHidden, someKept);
    auto known = scf::IfOp::create(b, loc, TypeRange{i1, i1}, partial,
                                   /*withElse=*/true);
    b.setInsertionPointToStart(&known.getThenRegion().front());
    scf::YieldOp::create(b, loc, ValueRange{any, all});
    b.setInsertionPointToStart(&known.getElseRegion().front());
    Value stepRow = kb.add(
        rowLane, kb.mul(loop.getInductionVar(), kRowLanes * kRowsPerStep));
    for (int64_t r = 0; r < kRowsPerStep; ++r) {
      Value query =
          kb.minsi(kb.add(kb.add(query0, stepRow), kRowLanes * r), lastQuery);
      std::tie(any, all) = maskMod.foldRow(b, loc, query, any, all);
    }
    scf::YieldOp::create(b, loc, ValueRange{any, all});
    b.setInsertionPointAfter(known);
    scf::YieldOp::create(b, loc, known.getResults());
  }
  return {vote(loop.getResult(0), NVVM::VoteSyncKind::any),
          vote(loop.getResult(1), NVVM::VoteSyncKind::all)};
}

/// fa_block_mask: one warp per (key block, query block, row z =
/// b·mask_heads + h), the mask_mod staged (StagedMaskMod): from the ranges
/// of its two sides where it is a separable compare (classifyByRanges), else
/// on every element (classifyByElements). Indices past the block's last row
/// (below Nq) or key (below Nk) are clamped onto it: evaluating a kept
/// element twice changes neither "some" nor "every", nor a range. The block
/// is full when every element is kept and it lies inside Nk.
static void buildClassKernel(OpBuilder &b, Location loc,
                             gpu::GPUModuleOp module, const KernelPlan &plan) {
  KernelPlan warpPlan = plan;
  warpPlan.warps = kBlockMaskThreads / 32;
  KernelParams params =
      blockMaskParams(b.getContext(), plan, /*withModArgs=*/true);
  auto func = createKernelFunc(b, loc, module, "fa_block_mask_" + plan.tag(),
                               params, warpPlan, /*sharedBytes=*/0);
  Block &entry = func.getBody().front();
  auto arg = [&](unsigned i) { return entry.getArgument(i); };
  KernelBuilder kb(b, loc, warpPlan);
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
  Value lastKey = kb.sub(kb.add(key0, keys), kb.idx(1));
  Value query0 = kb.mul(queryBlock, plan.blockQ);
  Value lastQuery =
      kb.sub(kb.minsi(kb.add(query0, plan.blockQ), nq), kb.idx(1));
  attn::ModArgAccess modArgs = modArgAccess(func, plan, params.modArgParam);
  Value wholeTile = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                                          keys, kb.idx(plan.blockKV));
  Value any, all;
  if (auto separable = attn::separableMaskCompare(
          plan.spec, attn::maskModStages(plan.spec))) {
    // Lanes side by side over the block's keys and, apart, its rows.
    SmallVector<Value> laneKeys, laneRows;
    for (int64_t j = 0; j < (plan.blockKV + 31) / 32; ++j)
      laneKeys.push_back(
          kb.minsi(kb.add(kb.add(key0, kb.lane), 32 * j), lastKey));
    for (int64_t i = 0; i < (plan.blockQ + 31) / 32; ++i)
      laneRows.push_back(
          kb.minsi(kb.add(kb.add(query0, kb.lane), 32 * i), lastQuery));
    StagedMaskMod maskMod(b, loc, plan.spec, modArgs, batch, head, laneKeys);
    std::tie(any, all) = classifyByRanges(kb, *separable, maskMod, laneRows);
  } else {
    std::tie(any, all) = classifyByElements(kb, plan, modArgs, batch, head,
                                            key0, lastKey, query0, lastQuery);
  }
  // A full block also lies inside Nk (it skips the Nk bound as well).
  all = arith::AndIOp::create(b, loc, all, wholeTile);
  auto first = scf::IfOp::create(b, loc, kb.lt(kb.lane, kb.idx(1)), false);
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

/// An entry that reads only the block mask (fa_block_lists, fa_block_order):
/// `name` with kb.plan's threads and the parameters (block_mask, batch,
/// mask_heads, nq, nk), its thread ids set up; returns its entry block, the
/// buffer and the buffer's layout.
struct ListEntry {
  Block *entry;
  Value mask;
  BlockMaskLayout layout;
};
static ListEntry beginListEntry(KernelBuilder &kb, gpu::GPUModuleOp module,
                                const std::string &name) {
  KernelParams params =
      blockMaskParams(kb.b.getContext(), kb.plan, /*withModArgs=*/false);
  auto func = createKernelFunc(kb.b, kb.loc, module, name, params, kb.plan,
                               /*sharedBytes=*/0);
  Block &entry = func.getBody().front();
  auto arg = [&](unsigned i) { return entry.getArgument(i); };
  kb.setupThreadIds();
  Value rows = kb.mul(kb.toIndex(arg(1)), kb.toIndex(arg(2)));
  return {&entry, arg(0),
          BlockMaskLayout::get(kb, rows, kb.toIndex(arg(3)),
                               kb.toIndex(arg(4)))};
}

/// fa_block_lists: CTA (line, row z); lines [0, NQB) are query blocks (their
/// key-block lists), [NQB, NQB + NKB) key blocks (their query-block lists).
static void buildListsKernel(OpBuilder &b, Location loc,
                             gpu::GPUModuleOp module, const KernelPlan &plan) {
  KernelPlan warpPlan = plan;
  warpPlan.warps = kBlockListsThreads / 32;
  KernelBuilder kb(b, loc, warpPlan);
  auto [entry, mask, l] = beginListEntry(kb, module, "fa_block_lists_" + plan.tag());
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
  b.setInsertionPointToEnd(entry);
  gpu::ReturnOp::create(b, loc);
}

/// fa_block_order: CTA (which, row z) ranks the row's query blocks (which
/// 0) by their key-block counts, or its key blocks (1) by their query-block
/// counts (full + partial), longest first and ties in ascending order, and
/// stores block i at its rank of kv_order / q_order: the grid order of the
/// block-sparse kernels (a CTA's time follows its walk's length). Thread t
/// ranks lines t, t + T, ... against every line of the row: O(n²/T) loads of
/// the counts, which the lists kernel before it wrote.
static void buildOrderKernel(OpBuilder &b, Location loc,
                             gpu::GPUModuleOp module, const KernelPlan &plan) {
  KernelPlan ctaPlan = plan;
  ctaPlan.warps = kBlockOrderThreads / 32;
  KernelBuilder kb(b, loc, ctaPlan);
  auto [entry, mask, l] = beginListEntry(kb, module, "fa_block_order_" + plan.tag());
  Value keys = kb.lt(kb.idx(0), gpu::BlockIdOp::create(b, loc, gpu::Dimension::x));
  Value row = gpu::BlockIdOp::create(b, loc, gpu::Dimension::y);
  Value lines = kb.select(keys, l.keyBlocks, l.queryBlocks);
  Value first = kb.mul(row, lines);
  Value counts = kb.add(kb.select(keys, l.qCount, l.kvCount), first);
  Value fullCounts = kb.add(kb.select(keys, l.fullQCount, l.fullKvCount), first);
  Value order = kb.add(kb.select(keys, l.qOrder, l.kvOrder), first);
  auto length = [&](Value line) {
    return arith::AddIOp::create(b, loc,
                                 loadBlockMaskWord(kb, mask, kb.add(counts, line)),
                                 loadBlockMaskWord(kb, mask, kb.add(fullCounts, line)))
        .getResult();
  };
  auto mine = scf::ForOp::create(b, loc, kb.tid, lines, kb.idx(kBlockOrderThreads));
  b.setInsertionPointToStart(mine.getBody());
  Value line = mine.getInductionVar();
  Value own = length(line);
  auto others = scf::ForOp::create(b, loc, kb.idx(0), lines, kb.idx(1),
                                   ValueRange{kb.idx(0)});
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(others.getBody());
    Value other = others.getInductionVar();
    Value theirs = length(other);
    Value before = arith::OrIOp::create(
        b, loc,
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sgt, theirs, own),
        arith::AndIOp::create(
            b, loc,
            arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, theirs, own),
            kb.lt(other, line)));
    Value rank = others.getRegionIterArgs()[0];
    scf::YieldOp::create(b, loc,
                         ValueRange{kb.select(before, kb.add(rank, kb.idx(1)), rank)});
  }
  storeBlockMaskWord(kb, mask, kb.add(order, others.getResult(0)), kb.toI32(line));
  b.setInsertionPointToEnd(entry);
  gpu::ReturnOp::create(b, loc);
}

void mlir::fa::buildBlockMaskKernels(OpBuilder &b, Location loc,
                                     gpu::GPUModuleOp module,
                                     const KernelPlan &plan) {
  OpBuilder::InsertionGuard guard(b);
  buildClassKernel(b, loc, module, plan);
  buildListsKernel(b, loc, module, plan);
  buildOrderKernel(b, loc, module, plan);
}
