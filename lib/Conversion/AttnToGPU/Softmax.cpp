//===- Softmax.cpp - the online softmax in registers ------------*- C++ -*-===//
//
// Seed 4.2.2 on mma.sync accumulators: each lane holds two rows (g, g+8) of
// its warp's 16, spread over the 4 lanes of a quad, so a row reduction is a
// lane-local reduction plus two xor shuffles. Maxima are kept in base-2
// units so scale·log2(e) folds into one FMA before exp2.
//
//===----------------------------------------------------------------------===//

#include "Fragments.h"
#include "ModArgs.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/Matchers.h"

#include <cmath>

using namespace mlir;
using namespace mlir::fa::gpu_lowering;

RowKeyBounds mlir::fa::gpu_lowering::rowKeyBounds(
    KernelBuilder &kb, const attn::ScorePosition &tile, Value firstQuery,
    function_ref<Value(int64_t)> rowQuery, function_ref<Value()> lastQuery) {
  const attn::ScoreSpec &spec = kb.plan.spec;
  // [lo, hi) of query `q`, the upper side clamped to Nk.
  auto band = [&](Value q) {
    auto [lo, hi] = attn::buildKeyBand(kb.b, kb.loc, spec, q,
                                       kb.add(q, kb.idx(1)), tile.nq, tile.nk);
    return std::make_pair(lo, hi ? kb.minsi(hi, tile.nk) : tile.nk);
  };
  RowKeyBounds bounds;
  // The first row has the lowest upper edge, the last the highest lower one.
  // Without a mask every row ends at Nk = tileHi, hi stays null and the
  // bounds stay index-typed: the maskless key loops keep the code they were
  // tuned with.
  bounds.tileHi = band(firstQuery).second;
  if (spec.hasMask()) {
    bounds.tileHi = kb.toI32(bounds.tileHi);
    Value laneKey = kb.mul(kb.threadInGroup, 2);
    for (int64_t r = 0; r < 2; ++r) {
      auto [lo, hi] = band(rowQuery(r));
      bounds.lo[r] = lo ? kb.toI32(kb.sub(lo, laneKey)) : Value();
      bounds.hi[r] = kb.toI32(kb.sub(hi, laneKey));
    }
  }
  Value lastLo = band(lastQuery()).first;
  bounds.tileLo = lastLo ? kb.toI32(lastLo) : Value();
  return bounds;
}

/// k0 (index) and constants in the type of `bounds` (i32 under a mask,
/// index without).
static Value boundsType(KernelBuilder &kb, const RowKeyBounds &bounds,
                        Value index) {
  return bounds.tileHi.getType().isIndex() ? index : kb.toI32(index);
}
static Value boundsConst(KernelBuilder &kb, const RowKeyBounds &bounds,
                         int64_t v) {
  return bounds.tileHi.getType().isIndex() ? kb.idx(v) : kb.c32(v);
}

Value mlir::fa::gpu_lowering::tileInside(KernelBuilder &kb,
                                         const RowKeyBounds &bounds,
                                         Value k0Index, int64_t width) {
  OpBuilder &b = kb.b;
  Value k0 = boundsType(kb, bounds, k0Index);
  Value ok = arith::CmpIOp::create(
      b, kb.loc, arith::CmpIPredicate::sle,
      arith::AddIOp::create(b, kb.loc, k0, boundsConst(kb, bounds, width)),
      bounds.tileHi);
  if (bounds.tileLo)
    ok = arith::AndIOp::create(
        b, kb.loc, ok,
        arith::CmpIOp::create(b, kb.loc, arith::CmpIPredicate::sge, k0,
                              bounds.tileLo));
  return ok;
}

void mlir::fa::gpu_lowering::maskScores(KernelBuilder &kb,
                                        MutableArrayRef<Value> s,
                                        const RowKeyBounds &bounds,
                                        Value k0Index) {
  OpBuilder &b = kb.b;
  Value k0 = boundsType(kb, bounds, k0Index);
  // Without a mask both rows end at Nk, relative to this lane's first key.
  Value noMaskHi;
  if (!bounds.hi[0])
    noMaskHi = arith::SubIOp::create(
        b, kb.loc, bounds.tileHi,
        arith::AddIOp::create(
            b, kb.loc, k0,
            boundsType(kb, bounds, kb.mul(kb.threadInGroup, 2))));
  Value lo[2], hi[2];
  for (int64_t r = 0; r < 2; ++r) {
    lo[r] = bounds.lo[r] ? arith::SubIOp::create(b, kb.loc, bounds.lo[r], k0)
                         : Value();
    hi[r] = bounds.hi[r] ? arith::SubIOp::create(b, kb.loc, bounds.hi[r], k0)
                         : noMaskHi;
  }
  for (int64_t n = 0; n < static_cast<int64_t>(s.size()) / 4; ++n)
    for (int64_t i = 0; i < 4; ++i) {
      Value c = boundsConst(kb, bounds, n * 8 + i % 2);
      Value ok = kb.lt(c, hi[i / 2]);
      if (lo[i / 2])
        ok = arith::AndIOp::create(
            b, kb.loc, ok,
            arith::CmpIOp::create(b, kb.loc, arith::CmpIPredicate::sge, c,
                                  lo[i / 2]));
      s[n * 4 + i] = kb.select(ok, s[n * 4 + i], kb.negInf());
    }
}

Value mlir::fa::gpu_lowering::softmaxScaleLog2(KernelBuilder &kb,
                                              Value scale) {
  if (kb.plan.spec.scoreMod)
    return kb.f32(M_LOG2E);
  return arith::MulFOp::create(kb.b, kb.loc, scale, kb.f32(M_LOG2E));
}

/// Whether `v` is the same for every score of the kernel: a constant, a
/// kernel parameter (the scale), or a product of those.
static bool isKernelInvariant(Value v) {
  if (matchPattern(v, m_Constant()))
    return true;
  if (auto mul = v.getDefiningOp<arith::MulFOp>())
    return isKernelInvariant(mul.getLhs()) && isKernelInvariant(mul.getRhs());
  auto arg = dyn_cast<BlockArgument>(v);
  return arg && isa<gpu::GPUFuncOp>(arg.getOwner()->getParentOp());
}

/// (x·a)·c → x·(a·c) for invariant a and c where x·a has no other use: the
/// score's chain of multiplies (scale, 1/30, 2·log2e for softcap's tanh)
/// becomes one per score, the other a loop invariant that LLVM hoists.
/// Re-associating changes the rounding by at most an ulp of the product.
static void foldScaleChains(KernelBuilder &kb, Block *block, Operation *before,
                            Block::iterator end, ArrayRef<Value *> tracked) {
  OpBuilder &b = kb.b;
  OpBuilder::InsertionGuard guard(b);
  Block::iterator it =
      before ? std::next(Block::iterator(before)) : block->begin();
  SmallVector<arith::MulFOp> muls;
  for (; it != end; ++it)
    if (auto mul = dyn_cast<arith::MulFOp>(&*it))
      muls.push_back(mul);
  for (arith::MulFOp outer : muls) {
    auto inner = outer.getLhs().getDefiningOp<arith::MulFOp>();
    if (!inner || !inner->hasOneUse() || !isKernelInvariant(outer.getRhs()) ||
        !isKernelInvariant(inner.getRhs()) ||
        llvm::any_of(tracked, [&](Value *v) { return *v == inner.getResult(); }))
      continue;
    b.setInsertionPoint(outer);
    Value factor =
        arith::MulFOp::create(b, kb.loc, inner.getRhs(), outer.getRhs());
    outer.getLhsMutable().assign(inner.getLhs());
    outer.getRhsMutable().assign(factor);
    inner->erase();
  }
}

/// v without its constant offsets (v = x + c + ...), and their sum.
static std::pair<Value, int64_t> peelOffsets(Value v) {
  int64_t offset = 0;
  IntegerAttr c;
  while (auto add = v.getDefiningOp<arith::AddIOp>()) {
    if (!matchPattern(add.getRhs(), m_Constant(&c)))
      break;
    offset += c.getInt();
    v = add.getLhs();
  }
  return {v, offset};
}

/// f32(a − b) of index positions (ALiBi's kv − q) as f32(a' − b') + c, the
/// constant offsets of both sides (the key's column in the tile) moved into
/// an f32 add: one conversion (a quarter-rate instruction, as exp2 is) per
/// row and tile, an add per column. Exact while positions stay below 2^24;
/// beyond, within an ulp of the position.
static Value distributedPositionToF32(KernelBuilder &kb, arith::SIToFPOp op) {
  auto cast = op.getIn().getDefiningOp<arith::IndexCastOp>();
  if (!op.getType().isF32() || !cast || !cast.getType().isInteger(32))
    return {};
  auto sub = cast.getIn().getDefiningOp<arith::SubIOp>();
  if (!sub)
    return {};
  OpBuilder &b = kb.b;
  auto [lhs, lhsOffset] = peelOffsets(sub.getLhs());
  auto [rhs, rhsOffset] = peelOffsets(sub.getRhs());
  Value diff = arith::SubIOp::create(b, kb.loc, lhs, rhs);
  Value i32 = arith::IndexCastOp::create(b, kb.loc, b.getI32Type(), diff);
  Value f = arith::SIToFPOp::create(b, kb.loc, b.getF32Type(), i32);
  int64_t offset = lhsOffset - rhsOffset;
  return offset ? arith::AddFOp::create(b, kb.loc, f,
                                        kb.f32(static_cast<double>(offset)))
                      .getResult()
                : f;
}

/// Lets the mod's f32 multiplies and adds contract into FMAs, as CUDA C's
/// default does: the score's scale·s + bias becomes one instruction and is
/// rounded once instead of twice.
static void allowContraction(Block *block, Operation *before,
                             Block::iterator end) {
  Block::iterator it =
      before ? std::next(Block::iterator(before)) : block->begin();
  for (; it != end; ++it)
    if (isa<arith::AddFOp, arith::SubFOp, arith::MulFOp>(&*it)) {
      auto math = cast<arith::ArithFastMathInterface>(&*it);
      math->setAttr(math.getFastMathAttrName(),
                    arith::FastMathFlagsAttr::get(
                        it->getContext(), math.getFastMathFlagsAttr().getValue() |
                                              arith::FastMathFlags::contract));
    }
}

/// tanh on the special-function unit. With `afn` (math.tanh ... fastmath<afn>:
/// the mod accepts approximate functions) one tanh.approx.f32, relative error
/// 2^-11, as flash-attn's softcap: a softcap forward at 0.77-0.84x the plain
/// one, but LSE errors up to 1.4x the differential tests' tolerance (PERF.md).
/// Otherwise 1 − 2/(2^(2x·log2e) + 1): absolute error ~2e-7, two MUFU
/// instructions (0.63-0.67x), against libdevice tanhf's ~20.
static Value lowerTanh(KernelBuilder &kb, math::TanhOp tanh) {
  OpBuilder &b = kb.b;
  if (bitEnumContainsAll(tanh.getFastmath(), arith::FastMathFlags::afn))
    return LLVM::TanhOp::create(
        b, kb.loc, tanh.getOperand(),
        LLVM::FastmathFlagsAttr::get(b.getContext(), LLVM::FastmathFlags::afn));
  Value e = kb.exp2(arith::MulFOp::create(b, kb.loc, tanh.getOperand(),
                                          kb.f32(2 * M_LOG2E)));
  Value sum = arith::AddFOp::create(b, kb.loc, e, kb.f32(1.0));
  Value r = LLVM::CallIntrinsicOp::create(
                b, kb.loc, b.getF32Type(),
                b.getStringAttr("llvm.nvvm.rcp.approx.ftz.f"), ValueRange{sum})
                .getResult(0);
  return LLVM::FMAOp::create(b, kb.loc, r, kb.f32(-2.0), kb.f32(1.0));
}

/// The score_mod's math for the GPU: transcendentals on the special-function
/// unit, as the kernels' own softmax computes exp2 — tanh (lowerTanh), exp and
/// log through ex2/lg2.approx —, a division by
/// a constant as a multiplication by its reciprocal (≤ 1.5 ulp), and
/// positions' differences converted per operand (distributedPositionToF32).
/// Rewrites the ops of the
/// insertion block after `before` (null: from its start) up to the builder's
/// insertion point; the values in `tracked` (the score, its derivative)
/// follow their replacements.
static void lowerScoreModMath(KernelBuilder &kb, Operation *before,
                              ArrayRef<Value *> tracked) {
  OpBuilder &b = kb.b;
  Block *block = b.getInsertionBlock();
  Block::iterator end = b.getInsertionPoint();
  Block::iterator it =
      before ? std::next(Block::iterator(before)) : block->begin();
  SmallVector<Operation *> ops;
  for (; it != end; ++it)
    ops.push_back(&*it);
  OpBuilder::InsertionGuard guard(b);
  for (Operation *op : ops) {
    b.setInsertionPoint(op);
    Value replacement;
    if (auto tanh = dyn_cast<math::TanhOp>(op)) {
      replacement = lowerTanh(kb, tanh);
    } else if (auto toFloat = dyn_cast<arith::SIToFPOp>(op)) {
      replacement = distributedPositionToF32(kb, toFloat);
      if (!replacement)
        continue;
    } else if (auto exp = dyn_cast<math::ExpOp>(op)) {
      replacement = kb.exp2(
          arith::MulFOp::create(b, kb.loc, exp.getOperand(), kb.f32(M_LOG2E)));
    } else if (auto exp2 = dyn_cast<math::Exp2Op>(op)) {
      replacement = kb.exp2(exp2.getOperand());
    } else if (auto log = dyn_cast<math::LogOp>(op)) {
      replacement = arith::MulFOp::create(b, kb.loc, kb.log2(log.getOperand()),
                                          kb.f32(M_LN2));
    } else if (auto div = dyn_cast<arith::DivFOp>(op)) {
      FloatAttr c;
      if (!div.getType().isF32() || !matchPattern(div.getRhs(), m_Constant(&c)))
        continue;
      replacement = arith::MulFOp::create(b, kb.loc, div.getLhs(),
                                          kb.f32(1.0 / c.getValueAsDouble()));
    } else {
      continue;
    }
    for (Value *v : tracked)
      if (*v == op->getResult(0))
        *v = replacement;
    op->getResult(0).replaceAllUsesWith(replacement);
    op->erase();
  }
  foldScaleChains(kb, block, before, end, tracked);
  // The mma.sync kernels run near 255 registers, where the contracted
  // schedule spills (d64 ALiBi 28 B, d256 clamp 36 B): wgmma kernels only.
  if (kb.plan.strategy == fa::MmaStrategy::Wgmma)
    allowContraction(block, before, end);
}

/// The last op before the builder's insertion point (null at a block start).
static Operation *lastOpBefore(OpBuilder &b) {
  Block::iterator ip = b.getInsertionPoint();
  return ip == b.getInsertionBlock()->begin() ? nullptr : &*std::prev(ip);
}

/// The kernel the builder is inserting into (its mod_arg parameters).
/// The kernel being built, found from its thread id: the insertion block
/// may be a loop body not yet attached to its op (an scf.while's body
/// builder runs before the op exists), the kernel's entry block never is.
static gpu::GPUFuncOp enclosingKernel(KernelBuilder &kb) {
  return kb.tid.getParentRegion()->getParentOfType<gpu::GPUFuncOp>();
}

/// The mod_args of the fa_fwd or fa_bwd kernel `kb` builds.
static fa::attn::ModArgAccess kernelModArgs(KernelBuilder &kb) {
  KernelParams params = mainKernelParams(kb.b.getContext(), kb.plan);
  return modArgAccess(enclosingKernel(kb), kb.plan, params.modArgParam);
}

/// attn::buildScore on one fragment element, its score_mod's math lowered
/// for the GPU (lowerScoreModMath).
static Value buildGpuScore(KernelBuilder &kb, Value s,
                           const fa::attn::ScorePosition &pos, Value *derivative,
                           Value scale) {
  Operation *before = lastOpBefore(kb.b);
  fa::attn::ModArgAccess modArgs = kernelModArgs(kb);
  Value score = fa::attn::buildScore(kb.b, kb.loc, kb.plan.spec, s, pos,
                                     derivative, scale, &modArgs);
  SmallVector<Value *, 2> tracked{&score};
  if (derivative)
    tracked.push_back(derivative);
  lowerScoreModMath(kb, before, tracked);
  return score;
}

void mlir::fa::gpu_lowering::applyScoreMod(
    KernelBuilder &kb, MutableArrayRef<Value> s,
    const attn::ScorePosition &tile,
    function_ref<std::pair<Value, Value>(int64_t)> rowHeadQuery, Value keyBase,
    Value scale, bool queryAnchored) {
  Value head[2], query[2];
  for (int64_t r = 0; r < 2; ++r)
    std::tie(head[r], query[r]) = rowHeadQuery(r);
  if (queryAnchored)
    query[1] = query[0];
  Value laneKey = kb.add(keyBase, kb.mul(kb.threadInGroup, 2));
  for (int64_t n = 0; n < static_cast<int64_t>(s.size()) / 4; ++n)
    for (int64_t i = 0; i < 4; ++i) {
      attn::ScorePosition pos = tile;
      pos.h = head[i / 2];
      pos.q = query[i / 2];
      pos.kv = kb.add(laneKey, n * 8 + i % 2);
      s[n * 4 + i] = buildGpuScore(kb, s[n * 4 + i], pos,
                                   /*derivative=*/nullptr, scale);
    }
}

void mlir::fa::gpu_lowering::scoreModRowShift(
    KernelBuilder &kb, const attn::ScorePosition &tile,
    function_ref<std::pair<Value, Value>(int64_t)> rowHeadQuery, Value scale,
    Value shift[2]) {
  Value anchor = rowHeadQuery(0).second;
  for (int64_t r = 0; r < 2; ++r) {
    attn::ScorePosition pos = tile;
    pos.h = rowHeadQuery(r).first;
    pos.kv = anchor;
    pos.q = rowHeadQuery(r).second;
    Value own = buildGpuScore(kb, kb.f32(0), pos, /*derivative=*/nullptr, scale);
    pos.q = anchor;
    Value anchored =
        buildGpuScore(kb, kb.f32(0), pos, /*derivative=*/nullptr, scale);
    shift[r] = arith::SubFOp::create(kb.b, kb.loc, own, anchored);
  }
}

SmallVector<Value> mlir::fa::gpu_lowering::applyScoreModTransposed(
    KernelBuilder &kb, MutableArrayRef<Value> s,
    const attn::ScorePosition &tile, Value keyRow0, Value scale) {
  Value key[2];
  for (int64_t r = 0; r < 2; ++r)
    key[r] = kb.add(tile.kv, kb.add(keyRow0, kb.add(kb.groupId, r * 8)));
  Value laneQuery = kb.add(tile.q, kb.mul(kb.threadInGroup, 2));
  SmallVector<Value> chain(s.size());
  for (int64_t n = 0; n < static_cast<int64_t>(s.size()) / 4; ++n)
    for (int64_t i = 0; i < 4; ++i) {
      attn::ScorePosition pos = tile;
      pos.q = kb.add(laneQuery, n * 8 + i % 2);
      pos.kv = key[i / 2];
      s[n * 4 + i] =
          buildGpuScore(kb, s[n * 4 + i], pos, &chain[n * 4 + i], scale);
    }
  return chain;
}

/// attn::buildMaskModPredicate on one fragment element: `s` where the plan's
/// mask_mod keeps `pos`, -inf where it masks it out.
static Value maskModElement(KernelBuilder &kb, Value s,
                            const fa::attn::ScorePosition &pos) {
  fa::attn::ModArgAccess modArgs = kernelModArgs(kb);
  Value keep = fa::attn::buildMaskModPredicate(kb.b, kb.loc, kb.plan.spec, pos,
                                               &modArgs);
  return kb.select(keep, s, kb.negInf());
}

void mlir::fa::gpu_lowering::applyMaskMod(
    KernelBuilder &kb, MutableArrayRef<Value> s,
    const attn::ScorePosition &tile,
    function_ref<std::pair<Value, Value>(int64_t)> rowHeadQuery,
    Value keyBase) {
  if (!kb.plan.spec.maskMod)
    return;
  Value head[2], query[2];
  for (int64_t r = 0; r < 2; ++r)
    std::tie(head[r], query[r]) = rowHeadQuery(r);
  // The key offset goes through an opaque copy, as the band's mask does:
  // otherwise LLVM hoists per-element addresses out of the key loop.
  Value laneKey =
      kb.add(kb.opaqueIndex(keyBase), kb.mul(kb.threadInGroup, 2));
  for (int64_t n = 0; n < static_cast<int64_t>(s.size()) / 4; ++n)
    for (int64_t i = 0; i < 4; ++i) {
      attn::ScorePosition pos = tile;
      pos.h = head[i / 2];
      pos.q = query[i / 2];
      pos.kv = kb.add(laneKey, n * 8 + i % 2);
      s[n * 4 + i] = maskModElement(kb, s[n * 4 + i], pos);
    }
}

void mlir::fa::gpu_lowering::applyMaskModTransposed(
    KernelBuilder &kb, MutableArrayRef<Value> s,
    const attn::ScorePosition &tile, Value keyRow0) {
  if (!kb.plan.spec.maskMod)
    return;
  Value key[2];
  for (int64_t r = 0; r < 2; ++r)
    key[r] = kb.add(tile.kv, kb.add(keyRow0, kb.add(kb.groupId, r * 8)));
  Value laneQuery = kb.add(tile.q, kb.mul(kb.threadInGroup, 2));
  for (int64_t n = 0; n < static_cast<int64_t>(s.size()) / 4; ++n)
    for (int64_t i = 0; i < 4; ++i) {
      attn::ScorePosition pos = tile;
      pos.q = kb.add(laneQuery, n * 8 + i % 2);
      pos.kv = key[i / 2];
      s[n * 4 + i] = maskModElement(kb, s[n * 4 + i], pos);
    }
}

/// Sᵀ elements a tile's mask removes get -inf: keys past Nk, queries past Nq,
/// and pairs outside the band. As in the forward, the band depends only on
/// kv − q, so positions are relative to this lane's first query column.
void mlir::fa::gpu_lowering::maskScoresTransposed(
    KernelBuilder &kb, MutableArrayRef<Value> s,
    const attn::ScorePosition &tile, Value keyRow0) {
  OpBuilder &b = kb.b;
  Value laneQuery = kb.add(tile.q, kb.mul(kb.threadInGroup, 2));
  Value queriesLeft = kb.sub(tile.nq, laneQuery);
  Value relKey[2], keyOk[2];
  for (int64_t r = 0; r < 2; ++r) {
    Value key = kb.add(tile.kv, kb.add(keyRow0, kb.add(kb.groupId, r * 8)));
    keyOk[r] = kb.lt(key, tile.nk);
    relKey[r] = kb.sub(key, laneQuery);
  }
  for (int64_t n = 0; n < static_cast<int64_t>(s.size()) / 4; ++n)
    for (int64_t i = 0; i < 4; ++i) {
      attn::ScorePosition pos = tile;
      pos.q = kb.idx(n * 8 + i % 2);
      pos.kv = relKey[i / 2];
      Value ok = arith::AndIOp::create(b, kb.loc, keyOk[i / 2],
                                       kb.lt(pos.q, queriesLeft));
      // The band only: pos is relative here, and applyMaskModTransposed
      // has applied the mask_mod at absolute positions.
      if (kb.plan.spec.mask != attn::MaskKind::None)
        ok = arith::AndIOp::create(
            b, kb.loc, ok,
            attn::buildMaskPredicate(b, kb.loc, kb.plan.spec.bandOnly(), pos));
      s[n * 4 + i] = kb.select(ok, s[n * 4 + i], kb.negInf());
    }
}

Value mlir::fa::gpu_lowering::transposedTileInside(KernelBuilder &kb,
                                                  Value qBegin, Value qEnd,
                                                  Value kBegin, Value kEnd,
                                                  Value nq, Value nk,
                                                  bool lengthsFirst) {
  OpBuilder &b = kb.b;
  auto sle = [&](Value x, Value y) {
    return arith::CmpIOp::create(b, kb.loc, arith::CmpIPredicate::sle, x, y);
  };
  // Block-sparse: the block lists classify the mask_mod's blocks (a full
  // one needs no mask_mod; the caller tests which), so the band is the enum
  // mask's alone. With the mask_mod in it no tile would lie inside.
  const attn::ScoreSpec spec =
      kb.plan.blockSparse ? kb.plan.spec.bandOnly() : kb.plan.spec;
  auto band = [&] {
    return attn::buildBlockInsideMask(b, kb.loc, spec, qBegin, qEnd, kBegin,
                                      kEnd, nq, nk);
  };
  Value bandInside = lengthsFirst ? Value() : band();
  Value keysIn = sle(kEnd, nk);
  Value queriesIn = sle(qEnd, nq);
  Value lengths = arith::AndIOp::create(b, kb.loc, queriesIn, keysIn);
  if (lengthsFirst)
    bandInside = band();
  return arith::AndIOp::create(b, kb.loc, bandInside, lengths);
}

/// Max (or sum) over the 4 lanes sharing a row.
static Value quadReduce(KernelBuilder &kb, Value v, bool isMax) {
  for (int64_t m : {1, 2}) {
    Value other = kb.shuffleXor(v, m);
    v = isMax ? kb.maxf(v, other)
              : arith::AddFOp::create(kb.b, kb.loc, v, other).getResult();
  }
  return v;
}

void mlir::fa::gpu_lowering::onlineSoftmaxUpdate(
    KernelBuilder &kb, MutableArrayRef<Value> s, MutableArrayRef<Value> acc,
    SoftmaxState &state, ArrayRef<Value> scaleLog2, int64_t scaleBlock,
    double lazyRescaleLog2, int64_t polyExp2) {
  OpBuilder &b = kb.b;
  Location loc = kb.loc;
  const int64_t sTiles = s.size() / 4, accTiles = acc.size() / 4;
  // n8 tiles per scale: all of them, or a scale block's.
  const int64_t tilesPerScale = scaleBlock ? scaleBlock / 8 : sTiles;
  auto scaleOf = [&](int64_t n) { return scaleLog2[n / tilesPerScale]; };
  attn::OnlineSoftmaxMath math = kb.softmaxMath();
  for (int64_t r = 0; r < 2; ++r) {
    // Each block's maximum times its (positive) scale; the lanes of a row
    // share the scales, so the quad reduction may come last.
    Value scaledMax;
    for (int64_t g = 0; g < static_cast<int64_t>(scaleLog2.size()); ++g) {
      Value tileMax = kb.negInf();
      for (int64_t n = g * tilesPerScale;
           n < std::min(sTiles, (g + 1) * tilesPerScale); ++n)
        for (int64_t c = 0; c < 2; ++c)
          tileMax = kb.maxf(tileMax, s[n * 4 + 2 * r + c]);
      if (scaleLog2.size() == 1)
        tileMax = quadReduce(kb, tileMax, /*isMax=*/true);
      Value scaled = arith::MulFOp::create(b, loc, tileMax, scaleLog2[g]);
      scaledMax = g ? kb.maxf(scaledMax, scaled) : scaled;
    }
    if (scaleLog2.size() > 1)
      scaledMax = quadReduce(kb, scaledMax, /*isMax=*/true);
    Value newMax = kb.maxf(state.rowMax[r], scaledMax);
    if (lazyRescaleLog2 > 0) {
      // Keep the old base while the max grows by at most the threshold: P and
      // the row sum then run up to 2^threshold, harmless in f32 and exact
      // relative to the bf16/f16 rounding of P, and α stays exactly 1. A row
      // at -inf compares false (NaN or +inf) and takes the new max.
      Value growth = arith::SubFOp::create(b, loc, newMax, state.rowMax[r]);
      Value keep = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLE,
                                         growth, kb.f32(lazyRescaleLog2));
      newMax = kb.select(keep, state.rowMax[r], newMax);
    }
    Value base = math.exponentBase(newMax);
    Value negBase = arith::NegFOp::create(b, loc, base);
    Value alpha = math.rescaleFactor(state.rowMax[r], base);
    Value sum = arith::MulFOp::create(b, loc, state.rowSum[r], alpha);
    for (int64_t n = 0; n < sTiles; ++n)
      for (int64_t c = 0; c < 2; ++c) {
        Value &e = s[n * 4 + 2 * r + c];
        // k of every 8 tiles, spread: those where n·k mod 8 < k.
        if (polyExp2 && (n * polyExp2) % 8 < polyExp2)
          e = kb.exp2Poly(LLVM::FMAOp::create(b, loc, e, scaleOf(n), negBase));
        else
          e = math.probabilityFolded(e, scaleOf(n), negBase);
        sum = arith::AddFOp::create(b, loc, sum, e);
      }
    for (int64_t n = 0; n < accTiles; ++n)
      for (int64_t c = 0; c < 2; ++c) {
        Value &e = acc[n * 4 + 2 * r + c];
        e = arith::MulFOp::create(b, loc, e, alpha);
      }
    state.rowMax[r] = newMax;
    state.rowSum[r] = sum;
  }
}

void mlir::fa::gpu_lowering::finalizeSoftmax(KernelBuilder &kb,
                                             SoftmaxState &state,
                                             Value invSum[2], Value lse[2],
                                             Value sink, const Value *shift) {
  attn::OnlineSoftmaxMath math = kb.softmaxMath();
  OpBuilder &b = kb.b;
  for (int64_t r = 0; r < 2; ++r) {
    Value l = quadReduce(kb, state.rowSum[r], /*isMax=*/false);
    Value rowSink = sink && shift
                        ? arith::SubFOp::create(b, kb.loc, sink, shift[r])
                        : sink;
    std::tie(invSum[r], lse[r]) =
        sink ? math.finalizeRowWithSink(state.rowMax[r], l, rowSink)
             : math.finalizeRow(state.rowMax[r], l);
    // −inf (no visible key) stays −inf: the shift is finite.
    if (shift)
      lse[r] = arith::AddFOp::create(b, kb.loc, lse[r], shift[r]);
  }
}
