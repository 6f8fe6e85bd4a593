//===- TiledLoopNest.cpp - the tiled loops a kernel runs --------*- C++ -*-===//

#include "TiledLoopNest.h"
#include "VarlenKernel.h"

#include "fa/Dialect/Attn/IR/Attn.h"
#include "fa/Dialect/Attn/Transforms/Transforms.h"
#include "fa/Dialect/AttnGPU/IR/AttnGPU.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

using namespace mlir;
using namespace mlir::fa;

/// The tensor a chain of extract_slice ops reads.
static Value untiled(Value v) {
  while (auto slice = v.getDefiningOp<tensor::ExtractSliceOp>())
    v = slice.getSource();
  return v;
}

FailureOr<TiledLoopNest> TiledLoopNest::get(Operation *tile) {
  auto tileLoop = tile->getParentOfType<scf::ForOp>();
  auto forall = tile->getParentOfType<scf::ForallOp>();
  if (!tileLoop || !forall || !forall->isProperAncestor(tileLoop))
    return tile->emitOpError("expected to lie in the tile loop of a tiled "
                             "loop nest (from attn-tile or "
                             "attn-recompute-backward)");
  Value query, key, value;
  scf::ForOp keyLoop;
  if (auto fwd = dyn_cast<attn::OnlineAttentionOp>(tile)) {
    query = fwd.getQuery(), key = fwd.getKey(), value = fwd.getValue();
    if (forall.getRank() != 3)
      return tile->emitOpError("expected a (batch, head, query block) "
                               "forall, got rank ")
             << forall.getRank();
  } else {
    auto bwd = cast<attn::BackwardTileOp>(tile);
    query = bwd.getQuery(), key = bwd.getKey(), value = bwd.getValue();
    // The key-block loop is the forall's outermost loop.
    for (Operation *p = tileLoop; p != forall; p = p->getParentOp())
      if (auto loop = dyn_cast<scf::ForOp>(p); loop && p->getParentOp() == forall)
        keyLoop = loop;
    if (forall.getRank() != 2 || !keyLoop)
      return tile->emitOpError("expected a (batch, key head) forall around "
                               "a key-block loop");
  }
  TiledLoopNest nest(tile, tileLoop, forall, keyLoop, untiled(query),
                     untiled(key), untiled(value));
  if (auto fwd = dyn_cast<attn::OnlineAttentionOp>(tile))
    llvm::append_range(nest.windowSizes, fwd.getWindowSizes());
  else
    llvm::append_range(nest.windowSizes,
                       cast<attn::BackwardTileOp>(tile).getWindowSizes());
  if (nest.query == nest.key)
    return tile->emitOpError("expected distinct query and key tensors on "
                             "the GPU path (the kernel takes Nq and Nk as "
                             "separate arguments), got one value for both");
  if (failed(nest.findSplit()) || failed(nest.findVarlen()) ||
      failed(nest.collectBoundOps()))
    return failure();
  return nest;
}

bool TiledLoopNest::isPacked() const {
  return forall->hasAttr(attn::kPackGqaAttr);
}

LogicalResult TiledLoopNest::findSplit() {
  auto outer = forall->getParentOfType<scf::ForallOp>();
  if (!outer || !outer->hasAttr(attn::kKeySplitsAttr))
    return success();
  auto fwd = dyn_cast<attn::OnlineAttentionOp>(tile);
  if (!fwd || outer.getRank() != 1)
    return tile->emitOpError("expected a forward tile in a rank-1 key-split "
                             "loop (from attn-split-kv)");
  splitLoop = outer;
  // The split's key slice: the one taken inside the split loop.
  for (Value v = fwd.getKey(); auto slice = v.getDefiningOp<tensor::ExtractSliceOp>();
       v = slice.getSource())
    if (slice->getParentOp() == splitLoop.getOperation())
      splitKeyOffset = dyn_cast<Value>(slice.getMixedOffsets()[2]);
  if (!splitKeyOffset)
    return tile->emitOpError("expected the key slice of its split, at a "
                             "key offset computed from the split index, "
                             "inside the key-split loop");
  return success();
}

/// The tensor of the first tensor.extract that `v` is computed from (a
/// varlen length reads its sequence's offsets), or null.
static Value offsetsTensorOf(Value v) {
  SmallVector<Value> work{v};
  DenseSet<Value> seen;
  while (!work.empty()) {
    Value x = work.pop_back_val();
    if (!seen.insert(x).second)
      continue;
    Operation *def = x.getDefiningOp();
    if (!def || def->getNumRegions() != 0)
      continue;
    if (auto extract = dyn_cast<tensor::ExtractOp>(def))
      return extract.getTensor();
    llvm::append_range(work, def->getOperands());
  }
  return {};
}

LogicalResult TiledLoopNest::findVarlen() {
  auto fwd = dyn_cast<attn::OnlineAttentionOp>(tile);
  ValueRange lengths = fwd ? fwd.getLengths()
                           : cast<attn::BackwardTileOp>(tile).getLengths();
  // Dense lengths are the tensors' sizes; varlen ones are read from
  // cu_seqlens, both or neither.
  // A paged cache's (forward) tile reads its sequence's key count from
  // seqused_k.
  if (fwd && key.getDefiningOp<attn::PagedViewOp>()) {
    sequsedK = offsetsTensorOf(lengths[1]);
    if (!sequsedK)
      return tile->emitOpError("expected the key count of a paged tile read "
                               "from seqused_k (attn-tile of a paged cache)");
    return success();
  }
  cuSeqlensQ = offsetsTensorOf(lengths[0]);
  cuSeqlensK = offsetsTensorOf(lengths[1]);
  if (static_cast<bool>(cuSeqlensQ) != static_cast<bool>(cuSeqlensK))
    return tile->emitOpError("expected both lengths of the tile read from "
                             "cu_seqlens (attn-tile of a varlen batch) or "
                             "neither");
  return success();
}

Value TiledLoopNest::inputFor(OpBuilder *b, Value leaf,
                              const TileLoopInputs &in) const {
  if (cuSeqlensQ && leaf == cuSeqlensQ)
    return in.cuSeqlensQ;
  if (cuSeqlensK && leaf == cuSeqlensK)
    return in.cuSeqlensK;
  if (sequsedK && leaf == sequsedK)
    return in.sequsedK;
  // A run-time window size: the kernel's bound index, in the operand's type.
  for (auto [i, size] : llvm::enumerate(windowSizes)) {
    if (leaf != size)
      continue;
    Value bound = i == 0 ? in.windowLeft : in.windowRight;
    if (!b || !bound || bound.getType() == leaf.getType())
      return bound;
    return arith::IndexCastOp::create(*b, leaf.getLoc(), leaf.getType(), bound);
  }
  if (auto arg = dyn_cast<BlockArgument>(leaf)) {
    if (splitLoop && arg == splitLoop.getInductionVars()[0])
      return in.split;
    ValueRange ivs = forall.getInductionVars();
    if (!keyLoop) {
      if (arg == ivs[0]) return in.batch;
      if (arg == ivs[1]) return in.head;
      if (arg == ivs[2]) return in.block;
      return {};
    }
    if (arg == ivs[0]) return in.batch;
    if (arg == ivs[1]) return in.head;
    if (arg == keyLoop.getInductionVar()) return in.block;
    return {};
  }
  auto dim = leaf.getDefiningOp<tensor::DimOp>();
  if (!dim)
    return {};
  std::optional<int64_t> index = dim.getConstantIndex();
  if (splitLoop && index == 0 &&
      llvm::is_contained(splitLoop.getOutputs(), dim.getSource()))
    return in.splits; // the split count, as the partials' extent
  // The key count of a split's key slice is the split's, not the problem's;
  // its head count (attn-split-kv slices keys only) is the problem's.
  for (Value v = dim.getSource();
       auto slice = v.getDefiningOp<tensor::ExtractSliceOp>();
       v = slice.getSource())
    if (splitLoop && slice->getParentOp() == splitLoop.getOperation() &&
        index != 1)
      return {};
  Value source = untiled(dim.getSource());
  if (!index || (source != query && source != key && source != value))
    return {};
  auto type = cast<RankedTensorType>(source.getType());
  if (*index == 3 && !type.isDynamicDim(3))
    return b ? arith::ConstantIndexOp::create(*b, leaf.getLoc(),
                                              type.getDimSize(3))
             : leaf;
  if (*index == 1) return source == query ? in.heads : in.kvHeads;
  if (*index == 2) return source == query ? in.nq : in.nk;
  return {}; // the batch count: the grid's, not the loop's
}

LogicalResult TiledLoopNest::collectBoundOps() {
  // inputFor with stand-ins: without a builder it creates nothing.
  Value lb = tileLoop.getLowerBound(), ub = tileLoop.getUpperBound();
  TileLoopInputs stub{lb, lb, lb, lb, lb, lb, lb, lb, lb, lb, lb, lb, lb, lb};
  SmallVector<Value> work{lb, ub};
  if (splitKeyOffset)
    work.push_back(splitKeyOffset);
  DenseSet<Value> seen;
  DenseSet<Operation *> ops;
  while (!work.empty()) {
    Value x = work.pop_back_val();
    if (!seen.insert(x).second || inputFor(nullptr, x, stub))
      continue;
    Operation *def = x.getDefiningOp();
    if (!def || isa<tensor::DimOp>(def))
      return tile->emitOpError("expected the tile loop's bounds to depend on "
                               "the CTA's block indices and the problem's "
                               "sizes only, got ")
             << x;
    // Free of memory effects, not necessarily speculatable: the kernel runs
    // them where the IR does, once per CTA (a split's bounds divide by the
    // run-time split count).
    if (!isMemoryEffectFree(def) || def->getNumRegions() != 0)
      return tile->emitOpError("expected the tile loop's bounds to be "
                               "computed by pure ops, got ")
             << def->getName();
    ops.insert(def);
    llvm::append_range(work, def->getOperands());
  }
  // Program order, so the kernel computes them in the order the passes did.
  Operation *nest = splitLoop ? splitLoop.getOperation() : forall.getOperation();
  nest->getParentOp()->walk([&](Operation *op) {
    if (ops.contains(op))
      boundOps.push_back(op);
  });
  return success();
}

std::pair<Value, Value>
TiledLoopNest::cloneTileRange(OpBuilder &b, const TileLoopInputs &in,
                              Value *keyOffset) const {
  IRMapping map;
  auto lookup = [&](Value v) {
    if (!map.contains(v)) {
      Value input = inputFor(&b, v, in);
      assert(input && "a leaf of the tile loop's bounds without a kernel "
                      "value (TileLoopInputs)");
      map.map(v, input);
    }
    return map.lookup(v);
  };
  for (Operation *op : boundOps) {
    for (Value operand : op->getOperands())
      lookup(operand);
    // An offset of cu_seqlens or a key count of seqused_k: a load from the
    // kernel's parameter.
    if (auto extract = dyn_cast<tensor::ExtractOp>(op);
        extract && (isVarlen() || isPaged())) {
      map.map(extract.getResult(),
              gpu_lowering::loadSequenceOffset(
                  b, op->getLoc(), map.lookup(extract.getTensor()),
                  map.lookup(extract.getIndices()[0])));
      continue;
    }
    b.clone(*op, map);
  }
  Value begin = lookup(tileLoop.getLowerBound());
  Value end = lookup(tileLoop.getUpperBound());
  if (keyOffset)
    *keyOffset = splitKeyOffset ? lookup(splitKeyOffset) : Value();
  return {begin, end};
}

void mlir::fa::cloneModRegion(OpBuilder &b, Region &mod, Region &into) {
  IRMapping map;
  mod.cloneInto(&into, map);
  Operation *yield = into.front().getTerminator();
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPoint(yield);
  attn_gpu::YieldOp::create(b, yield->getLoc(), yield->getOperand(0));
  yield->erase();
}

namespace {
/// A mask op's window: sizes bound at the kernel's entry (a kernel for
/// every window), or fixed ones as attributes.
struct WindowOperands {
  SmallVector<Value, 2> sizes;
  IntegerAttr left, right;
};
} // namespace

static WindowOperands windowOperands(OpBuilder &b,
                                     const attn::ScoreSpec &spec) {
  WindowOperands window;
  if (spec.runtimeWindow()) {
    window.sizes = {spec.windowLeftValue, spec.windowRightValue};
  } else if (spec.mask == attn::MaskKind::Window) {
    window.left = b.getI64IntegerAttr(spec.windowLeft);
    window.right = b.getI64IntegerAttr(spec.windowRight);
  }
  return window;
}

Value mlir::fa::buildKeyBounds(OpBuilder &b, Location loc,
                               const attn::ScoreSpec &spec,
                               const ScoreRows &at, int64_t blockRows,
                               Value blockBegin) {
  WindowOperands window = windowOperands(b, spec);
  return attn_gpu::KeyBoundsOp::create(
      b, loc,
      attn_gpu::KeyBoundsType::get(b.getContext(),
                                   spec.mask == attn::MaskKind::Window,
                                   spec.hasMask()),
      at.batch, at.head, at.qBegin, at.nq, at.nk, at.row, at.rows, blockBegin,
      window.sizes, blockRows, spec.maskMod != nullptr, spec.mask,
      window.left, window.right);
}

Value mlir::fa::buildScoreMods(OpBuilder &b, Location loc,
                               const attn::ScoreSpec &spec, Value s,
                               Value scale, const ScoreRows &at,
                               Value keyBegin) {
  Type type = s.getType();
  if (spec.scoreMod) {
    auto mod = attn_gpu::ScoreModOp::create(b, loc, type, s, scale, at.batch,
                                            at.head, at.qBegin, at.nq, at.nk,
                                            at.row, keyBegin, at.rows);
    cloneModRegion(b, *spec.scoreMod, mod.getScoreMod());
    s = mod.getResult();
  }
  if (spec.maskMod) {
    auto mod = attn_gpu::MaskModOp::create(b, loc, type, s, at.batch, at.head,
                                           at.qBegin, at.nq, at.nk, at.row,
                                           keyBegin, at.rows);
    cloneModRegion(b, *spec.maskMod, mod.getMaskMod());
    s = mod.getResult();
  }
  return s;
}

Value mlir::fa::buildTransposedScoreMods(OpBuilder &b, Location loc,
                                         const attn::ScoreSpec &spec, Value s,
                                         Value scale,
                                         const TransposedScores &at,
                                         Value &derivative) {
  Type type = s.getType();
  if (spec.scoreMod) {
    auto mod = attn_gpu::TransposedScoreModOp::create(
        b, loc, type, type, s, scale, at.batch, at.head, at.qBegin, at.nq,
        at.nk, at.row, at.keyBegin);
    cloneModRegion(b, *spec.scoreMod, mod.getScoreMod());
    s = mod.getResult();
    derivative = mod.getDerivative();
  }
  if (spec.maskMod) {
    auto mod = attn_gpu::TransposedMaskModOp::create(
        b, loc, type, s, at.batch, at.head, at.qBegin, at.nq, at.nk, at.row,
        at.keyBegin);
    cloneModRegion(b, *spec.maskMod, mod.getMaskMod());
    s = mod.getResult();
  }
  return s;
}

std::pair<Value, Value> mlir::fa::buildTransposedBounds(
    OpBuilder &b, Location loc, const attn::ScoreSpec &spec,
    const TransposedScores &at, int64_t blockKeys, int64_t blockQueries,
    Value blockIndex) {
  WindowOperands window = windowOperands(b, spec);
  auto bounds = attn_gpu::TransposedBoundsOp::create(
      b, loc, b.getIndexType(), b.getI1Type(), at.qBegin, at.keyBegin, at.nq,
      at.nk, blockIndex, window.sizes, blockKeys, blockQueries, spec.mask,
      window.left, window.right);
  return {bounds.getQuery(), bounds.getInside()};
}

Value mlir::fa::buildTransposedMask(OpBuilder &b, Location loc, Value s,
                                    const TransposedScores &at, Value inside,
                                    bool opaqueLengths,
                                    function_ref<Value(Value)> masked) {
  return buildUnlessInside(b, loc, s, inside, [&](Value m) {
    if (masked)
      m = masked(m);
    return attn_gpu::TransposedMaskOp::create(
        b, loc, m.getType(), m, at.batch, at.head, at.qBegin, at.keyBegin,
        at.nq, at.nk, at.row, opaqueLengths);
  });
}

Value mlir::fa::buildUnlessInside(OpBuilder &b, Location loc, Value s,
                                  Value inside,
                                  function_ref<Value(Value)> masked) {
  auto ifOp = scf::IfOp::create(b, loc, s.getType(), inside,
                                /*withElseRegion=*/true);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(&ifOp.getThenRegion().front());
  scf::YieldOp::create(b, loc, s);
  b.setInsertionPointToStart(&ifOp.getElseRegion().front());
  scf::YieldOp::create(b, loc, masked(s));
  return ifOp.getResult(0);
}
