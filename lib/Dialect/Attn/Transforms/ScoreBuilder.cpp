//===- ScoreBuilder.cpp - scores, masks and their derivatives ---*- C++ -*-===//
//
// One place that knows how a score is formed (scale, score_mod) and which
// (q, kv) pairs a mask keeps; the forward, the backward and the tiling all
// use it so they agree on the band.
//
//===----------------------------------------------------------------------===//

#include "fa/Dialect/Attn/Transforms/Transforms.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>

using namespace mlir;
using namespace mlir::fa::attn;

static Value cIndex(OpBuilder &b, Location loc, int64_t v) {
  return arith::ConstantIndexOp::create(b, loc, v);
}

/// Offset of the band's diagonal: key kv = q + off is the diagonal.
static Value diagonalOffset(OpBuilder &b, Location loc, const ScoreSpec &spec,
                            Value nq, Value nk) {
  if (spec.bottomRight())
    return arith::SubIOp::create(b, loc, nk, nq);
  return cIndex(b, loc, 0);
}

Value mlir::fa::attn::normalizeWindowSize(OpBuilder &b, Location loc,
                                          Value size) {
  Type i64 = b.getI64Type();
  if (size.getType() != i64)
    size = arith::ExtSIOp::create(b, loc, i64, size);
  // Unsigned, a negative size is above 2^63: one min makes it unbounded.
  Value bound = arith::ConstantIntOp::create(b, loc, i64, kUnboundedWindow);
  Value clamped = arith::MinUIOp::create(b, loc, size, bound);
  return arith::IndexCastOp::create(b, loc, b.getIndexType(), clamped);
}

namespace {
enum class WindowSide { Left, Right };
} // namespace

/// Whether a side of the band has a bound: a compile-time size >= 0, or any
/// run-time one (unbounded at run time is a bound no problem reaches).
static bool isBounded(const ScoreSpec &spec, WindowSide side) {
  int64_t size = side == WindowSide::Left ? spec.left() : spec.right();
  return spec.runtimeWindow() || size >= 0;
}

/// The keys a side of the band allows past the diagonal, as an index, or
/// null where the side is unbounded at compile time. The one place the band
/// reads a window size: a compile-time size is clamped to kUnboundedWindow
/// and a run-time one normalised (normalizeWindowSize) unless it was at the
/// kernel's entry, so diag ± size never overflows.
static Value windowSize(OpBuilder &b, Location loc, const ScoreSpec &spec,
                        WindowSide side) {
  bool left = side == WindowSide::Left;
  if (spec.runtimeWindow()) {
    Value size = left ? spec.windowLeftValue : spec.windowRightValue;
    if (size.getType().isIndex())
      return size;
    return normalizeWindowSize(b, loc, size);
  }
  if (!isBounded(spec, side))
    return {};
  int64_t size = left ? spec.left() : spec.right();
  return cIndex(b, loc, std::min(size, kUnboundedWindow));
}

/// i1: the enum mask's band test alone.
static Value buildBandPredicate(OpBuilder &b, Location loc,
                                const ScoreSpec &spec,
                                const ScorePosition &pos) {
  Value diag = arith::AddIOp::create(
      b, loc, pos.q, diagonalOffset(b, loc, spec, pos.nq, pos.nk));
  Value ok = arith::ConstantIntOp::create(b, loc, 1, 1);
  if (Value left = windowSize(b, loc, spec, WindowSide::Left)) {
    Value lo = arith::SubIOp::create(b, loc, diag, left);
    Value c = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, pos.kv, lo);
    ok = arith::AndIOp::create(b, loc, ok, c);
  }
  if (Value right = windowSize(b, loc, spec, WindowSide::Right)) {
    Value hi = arith::AddIOp::create(b, loc, diag, right);
    Value c = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sle, pos.kv, hi);
    ok = arith::AndIOp::create(b, loc, ok, c);
  }
  return ok;
}

Value mlir::fa::attn::buildMaskPredicate(OpBuilder &b, Location loc,
                                         const ScoreSpec &spec,
                                         const ScorePosition &pos,
                                         const ModArgAccess *modArgs) {
  if (!spec.maskMod)
    return buildBandPredicate(b, loc, spec, pos);
  Value maskMod = buildMaskModPredicate(b, loc, spec, pos, modArgs);
  if (spec.mask == MaskKind::None)
    return maskMod;
  return arith::AndIOp::create(b, loc, buildBandPredicate(b, loc, spec, pos),
                               maskMod);
}

std::pair<Value, Value> mlir::fa::attn::buildKeyBand(OpBuilder &b, Location loc,
                                                     const ScoreSpec &spec,
                                                     Value qBegin, Value qEnd,
                                                     Value nq, Value nk) {
  Value off = diagonalOffset(b, loc, spec, nq, nk);
  Value lo, hi;
  if (isBounded(spec, WindowSide::Left))
    lo = arith::SubIOp::create(b, loc, arith::AddIOp::create(b, loc, qBegin, off),
                               windowSize(b, loc, spec, WindowSide::Left));
  if (isBounded(spec, WindowSide::Right))
    hi = arith::AddIOp::create(b, loc, arith::AddIOp::create(b, loc, qEnd, off),
                               windowSize(b, loc, spec, WindowSide::Right));
  return {lo, hi};
}

std::pair<Value, Value> mlir::fa::attn::buildQueryBand(OpBuilder &b,
                                                       Location loc,
                                                       const ScoreSpec &spec,
                                                       Value kBegin, Value kEnd,
                                                       Value nq, Value nk) {
  Value off = diagonalOffset(b, loc, spec, nq, nk);
  Value lo, hi;
  if (isBounded(spec, WindowSide::Right))
    lo = arith::SubIOp::create(b, loc, arith::SubIOp::create(b, loc, kBegin, off),
                               windowSize(b, loc, spec, WindowSide::Right));
  if (isBounded(spec, WindowSide::Left))
    hi = arith::AddIOp::create(b, loc, arith::SubIOp::create(b, loc, kEnd, off),
                               windowSize(b, loc, spec, WindowSide::Left));
  return {lo, hi};
}

std::pair<Value, Value>
mlir::fa::attn::buildBlockRange(OpBuilder &b, Location loc,
                                std::pair<Value, Value> band, Value extent,
                                int64_t blockSize) {
  auto [lo, hi] = band;
  auto maxsi = [&](Value x, Value y) {
    return arith::MaxSIOp::create(b, loc, x, y).getResult();
  };
  Value from = lo ? maxsi(lo, cIndex(b, loc, 0)) : cIndex(b, loc, 0);
  Value to = hi ? maxsi(arith::MinSIOp::create(b, loc, hi, extent),
                        cIndex(b, loc, 0))
                : extent;
  Value begin = arith::DivUIOp::create(b, loc, from, cIndex(b, loc, blockSize));
  Value last = arith::AddIOp::create(b, loc, to, cIndex(b, loc, blockSize - 1));
  Value end = arith::DivUIOp::create(b, loc, last, cIndex(b, loc, blockSize));
  return {begin, maxsi(end, begin)};
}

Value mlir::fa::attn::buildBlockInsideMask(OpBuilder &b, Location loc,
                                           const ScoreSpec &spec, Value qBegin,
                                           Value qEnd, Value kBegin, Value kEnd,
                                           Value nq, Value nk) {
  // A mask_mod can mask any element: no block is known to lie inside it.
  if (!spec.maskIsBand())
    return arith::ConstantIntOp::create(b, loc, 0, 1);
  Value one = cIndex(b, loc, 1);
  Value off = diagonalOffset(b, loc, spec, nq, nk);
  Value ok = arith::ConstantIntOp::create(b, loc, 1, 1);
  // The corner farthest from the diagonal decides each side.
  if (isBounded(spec, WindowSide::Left)) {
    // kBegin >= (qEnd - 1) + off - left
    Value lastQ = arith::SubIOp::create(b, loc, qEnd, one);
    Value lo = arith::SubIOp::create(b, loc, arith::AddIOp::create(b, loc, lastQ, off),
                                     windowSize(b, loc, spec, WindowSide::Left));
    ok = arith::AndIOp::create(
        b, loc, ok,
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, kBegin, lo));
  }
  if (isBounded(spec, WindowSide::Right)) {
    // kEnd - 1 <= qBegin + off + right
    Value lastK = arith::SubIOp::create(b, loc, kEnd, one);
    Value hi = arith::AddIOp::create(b, loc, arith::AddIOp::create(b, loc, qBegin, off),
                                     windowSize(b, loc, spec, WindowSide::Right));
    ok = arith::AndIOp::create(
        b, loc, ok,
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sle, lastK, hi));
  }
  return ok;
}

//===----------------------------------------------------------------------===//
// score_mod: inlining and forward-mode differentiation
//===----------------------------------------------------------------------===//

/// Ops whose derivative the backward knows. Ops outside this list are allowed
/// in score_mod as long as they do not depend on the score.
static bool isDifferentiable(Operation *op) {
  return isa<arith::AddFOp, arith::SubFOp, arith::MulFOp, arith::DivFOp,
             arith::NegFOp, arith::SelectOp, arith::MaximumFOp,
             arith::MinimumFOp, arith::MaxNumFOp, arith::MinNumFOp,
             arith::CmpFOp, math::TanhOp, math::ExpOp, math::Exp2Op,
             math::LogOp, math::SqrtOp, math::AbsFOp, YieldOp>(op);
}

/// Whether `op` reads a value of `values`, as an operand or from inside one of
/// its regions (a region may use values defined above it).
static bool readsAnyOf(Operation &op, const llvm::DenseSet<Value> &values) {
  auto isRead = [&](Value v) { return values.contains(v); };
  WalkResult found = op.walk([&](Operation *inner) {
    return llvm::any_of(inner->getOperands(), isRead) ? WalkResult::interrupt()
                                                      : WalkResult::advance();
  });
  return found.wasInterrupted();
}

LogicalResult mlir::fa::attn::verifyDifferentiable(const ScoreSpec &spec,
                                                   Operation *diagOp) {
  if (!spec.scoreMod)
    return success();
  Block &block = spec.scoreMod->front();
  llvm::DenseSet<Value> depends{block.getArgument(0)};
  for (Operation &op : block) {
    if (!readsAnyOf(op, depends))
      continue;
    // buildScore differentiates the top-level ops only: a score that flows
    // through a region (scf.if, scf.for, scf.execute_region) would reach the
    // yield without a tangent and be taken for a constant.
    if (op.getNumRegions() != 0) {
      InFlightDiagnostic diag =
          diagOp->emitOpError("cannot differentiate score_mod op '")
          << op.getName()
          << "' with respect to the score: the score flows through its region";
      diag.attachNote(op.getLoc()) << "score-dependent region op here";
      return diag;
    }
    if (!isDifferentiable(&op))
      return diagOp->emitOpError("cannot differentiate score_mod op '")
             << op.getName() << "' with respect to the score";
    for (Value r : op.getResults())
      depends.insert(r);
  }
  return success();
}

/// A score_mod's read of a captured tensor, with each index clamped into
/// [0, size - 1] of its dimension (the rule AttentionOp documents): a
/// position-derived index past a bias table's end reads its last entry, not
/// memory outside it.
/// A mod_arg read through `access` (a GPU kernel's parameters) goes the same
/// way, through its extents and loads.
/// `region` is the score_mod's or mask_mod's block, whose arguments from
/// `positionArgs` on are the mod_args.
static Value buildClampedRead(OpBuilder &b, Location loc, tensor::ExtractOp read,
                              IRMapping &map, Block &region,
                              unsigned positionArgs,
                              const ModArgAccess *access) {
  std::optional<unsigned> modArg;
  if (auto arg = dyn_cast<BlockArgument>(read.getTensor());
      access && arg && arg.getOwner() == &region &&
      arg.getArgNumber() >= positionArgs)
    modArg = arg.getArgNumber() - positionArgs;
  Value source = map.lookupOrDefault(read.getTensor());
  SmallVector<Value> indices;
  for (auto [dim, index] : llvm::enumerate(read.getIndices())) {
    Value size = modArg ? access->size(b, loc, *modArg, dim)
                        : tensor::DimOp::create(b, loc, source, dim).getResult();
    Value last = arith::SubIOp::create(b, loc, size, cIndex(b, loc, 1));
    Value below = arith::MinSIOp::create(b, loc, map.lookupOrDefault(index), last);
    indices.push_back(arith::MaxSIOp::create(b, loc, below, cIndex(b, loc, 0)));
  }
  if (modArg)
    return access->load(b, loc, *modArg, indices);
  return tensor::ExtractOp::create(b, loc, source, indices);
}

Value mlir::fa::attn::buildScore(OpBuilder &b, Location loc,
                                 const ScoreSpec &spec, Value dot,
                                 const ScorePosition &pos, Value *derivative,
                                 Value scale, const ModArgAccess *modArgs) {
  auto cst = [&](double v) -> Value {
    return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v));
  };
  auto scaleValue = [&]() { return scale ? scale : cst(spec.scale); };
  Value score = arith::MulFOp::create(b, loc, dot, scaleValue());
  if (!spec.scoreMod) {
    if (derivative)
      *derivative = scaleValue();
    return score;
  }
  Block &block = spec.scoreMod->front();
  IRMapping map;
  map.map(block.getArgument(0), score);
  map.map(block.getArgument(1), pos.b);
  map.map(block.getArgument(2), pos.h);
  map.map(block.getArgument(3), pos.q);
  map.map(block.getArgument(4), pos.kv);
  if (!modArgs)
    for (auto [i, tensor] : llvm::enumerate(spec.modArgs))
      map.map(spec.modArgOperand(i), tensor);
  // Tangents w.r.t. the scaled score; a missing entry is zero.
  llvm::DenseMap<Value, Value> tangent;
  if (derivative)
    tangent[score] = cst(1.0);
  auto t = [&](Value v) -> Value { return tangent.lookup(map.lookupOrDefault(v)); };
  auto zeroIfNull = [&](Value v) { return v ? v : cst(0.0); };
  Value result;
  for (Operation &op : block) {
    // attn.yield, or the tile level's attn_gpu.yield of the same region.
    if (op.hasTrait<OpTrait::IsTerminator>()) {
      result = map.lookup(op.getOperand(0));
      break;
    }
    if (auto read = dyn_cast<tensor::ExtractOp>(op)) {
      map.map(read.getResult(),
              buildClampedRead(b, loc, read, map, block,
                               ScoreSpec::kScoreModPositionArgs, modArgs));
      continue;
    }
    Operation *clone = b.clone(op, map);
    if (!derivative || clone->getNumResults() != 1 ||
        !isa<FloatType>(clone->getResult(0).getType()))
      continue;
    bool anyTangent = llvm::any_of(op.getOperands(), [&](Value v) { return t(v); });
    if (!anyTangent)
      continue;
    Value y = clone->getResult(0);
    auto operand = [&](unsigned i) { return map.lookup(op.getOperand(i)); };
    // Operand tangents, null where an operand does not depend on the score:
    // the rules below leave out those terms instead of multiplying by 0.
    Value tA = op.getNumOperands() > 0 ? t(op.getOperand(0)) : Value();
    Value tB = op.getNumOperands() > 1 ? t(op.getOperand(1)) : Value();
    auto ta = [&]() { return zeroIfNull(tA); };
    auto tb = [&]() { return zeroIfNull(tB); };
    Value d =
        llvm::TypeSwitch<Operation *, Value>(&op)
            .Case<arith::AddFOp>([&](auto) -> Value {
              if (!tA || !tB)
                return tA ? tA : tB;
              return arith::AddFOp::create(b, loc, tA, tB);
            })
            .Case<arith::SubFOp>([&](auto) -> Value {
              if (!tB)
                return tA;
              if (!tA)
                return arith::NegFOp::create(b, loc, tB);
              return arith::SubFOp::create(b, loc, tA, tB);
            })
            .Case<arith::MulFOp>([&](auto) -> Value {
              Value l = tA ? arith::MulFOp::create(b, loc, tA, operand(1))
                           : Value();
              Value r = tB ? arith::MulFOp::create(b, loc, operand(0), tB)
                           : Value();
              if (!l || !r)
                return l ? l : r;
              return arith::AddFOp::create(b, loc, l, r);
            })
            .Case<arith::DivFOp>([&](auto) -> Value {
              // (ta - y·tb) / b
              Value num = tA;
              if (tB) {
                Value yt = arith::MulFOp::create(b, loc, y, tB);
                num = tA ? arith::SubFOp::create(b, loc, tA, yt).getResult()
                         : arith::NegFOp::create(b, loc, yt).getResult();
              }
              return arith::DivFOp::create(b, loc, num, operand(1));
            })
            .Case<arith::NegFOp>(
                [&](auto) { return arith::NegFOp::create(b, loc, ta()); })
            .Case<arith::SelectOp>([&](auto) -> Value {
              Value tt = zeroIfNull(t(op.getOperand(1)));
              Value tf = zeroIfNull(t(op.getOperand(2)));
              return arith::SelectOp::create(b, loc, operand(0), tt, tf);
            })
            .Case<arith::MaximumFOp, arith::MaxNumFOp>([&](auto) -> Value {
              Value c = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGE,
                                              operand(0), operand(1));
              return arith::SelectOp::create(b, loc, c, ta(), tb());
            })
            .Case<arith::MinimumFOp, arith::MinNumFOp>([&](auto) -> Value {
              Value c = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLE,
                                              operand(0), operand(1));
              return arith::SelectOp::create(b, loc, c, ta(), tb());
            })
            .Case<math::TanhOp>([&](auto) -> Value {
              Value y2 = arith::MulFOp::create(b, loc, y, y);
              Value g = arith::SubFOp::create(b, loc, cst(1.0), y2);
              return arith::MulFOp::create(b, loc, g, ta());
            })
            .Case<math::ExpOp>(
                [&](auto) { return arith::MulFOp::create(b, loc, y, ta()); })
            .Case<math::Exp2Op>([&](auto) -> Value {
              Value g = arith::MulFOp::create(b, loc, y, cst(M_LN2));
              return arith::MulFOp::create(b, loc, g, ta());
            })
            .Case<math::LogOp>([&](auto) {
              return arith::DivFOp::create(b, loc, ta(), operand(0));
            })
            .Case<math::SqrtOp>([&](auto) -> Value {
              Value twoY = arith::MulFOp::create(b, loc, y, cst(2.0));
              return arith::DivFOp::create(b, loc, ta(), twoY);
            })
            .Case<math::AbsFOp>([&](auto) -> Value {
              Value neg = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT,
                                                operand(0), cst(0.0));
              return arith::SelectOp::create(
                  b, loc, neg, arith::NegFOp::create(b, loc, ta()), ta());
            })
            .Default([&](Operation *) { return Value(); });
    if (d)
      tangent[y] = d;
  }
  if (derivative) {
    Value dScore = zeroIfNull(tangent.lookup(result));
    *derivative = arith::MulFOp::create(b, loc, dScore, scaleValue());
  }
  return result;
}

void mlir::fa::attn::mapMaskModPositions(const ScoreSpec &spec,
                                         const ScorePosition &pos,
                                         IRMapping &map,
                                         const ModArgAccess *modArgs) {
  Block &block = spec.maskMod->front();
  Value positions[] = {pos.b, pos.h, pos.q, pos.kv};
  for (auto [i, value] : llvm::enumerate(positions))
    if (value)
      map.map(block.getArgument(i), value);
  if (!modArgs)
    for (auto [i, tensor] : llvm::enumerate(spec.modArgs))
      map.map(spec.maskModArgOperand(i), tensor);
}

/// Clones one op of the mask_mod's block; a read of a mod_arg is clamped
/// into its extents (buildClampedRead).
static void cloneMaskModOp(OpBuilder &b, Location loc, Operation &op,
                           Block &block, IRMapping &map,
                           const ModArgAccess *modArgs) {
  if (auto read = dyn_cast<tensor::ExtractOp>(op)) {
    map.map(read.getResult(),
            buildClampedRead(b, loc, read, map, block,
                             ScoreSpec::kMaskModPositionArgs, modArgs));
    return;
  }
  b.clone(op, map);
}

Value mlir::fa::attn::buildMaskModPredicate(OpBuilder &b, Location loc,
                                            const ScoreSpec &spec,
                                            const ScorePosition &pos,
                                            const ModArgAccess *modArgs) {
  Block &block = spec.maskMod->front();
  IRMapping map;
  mapMaskModPositions(spec, pos, map, modArgs);
  for (Operation &op : block) {
    // attn.yield, or the tile level's attn_gpu.yield of the same region.
    if (op.hasTrait<OpTrait::IsTerminator>())
      return map.lookup(op.getOperand(0));
    cloneMaskModOp(b, loc, op, block, map, modArgs);
  }
  llvm_unreachable("the verifiers require mask_mod to end in a yield");
}

/// The stage of `v`, a value used in the mask_mod's `block`: q_idx, kv_idx,
/// the stage found for its op, or fixed (b, h, mod_args; values defined
/// inside the op being staged, which `stages` does not hold yet).
static unsigned stageOfValue(Block &block,
                             const DenseMap<Operation *, unsigned> &stages,
                             Value v) {
  if (v == block.getArgument(2))
    return mlir::fa::attn::kMaskModQuery;
  if (v == block.getArgument(3))
    return mlir::fa::attn::kMaskModKey;
  if (Operation *def = v.getDefiningOp())
    return stages.lookup(def);
  return mlir::fa::attn::kMaskModFixed;
}

DenseMap<Operation *, unsigned>
mlir::fa::attn::maskModStages(const ScoreSpec &spec) {
  Block &block = spec.maskMod->front();
  DenseMap<Operation *, unsigned> stages;
  for (Operation &op : block) {
    if (op.hasTrait<OpTrait::IsTerminator>())
      break;
    unsigned stage = kMaskModFixed;
    // Its operands and, for ops with regions, every value its nested ops use
    // (those defined inside stay out of `stages`, so they add nothing).
    op.walk([&](Operation *inner) {
      for (Value v : inner->getOperands())
        stage |= stageOfValue(block, stages, v);
    });
    stages[&op] = stage;
  }
  return stages;
}

std::optional<mlir::fa::attn::SeparableMaskCompare>
mlir::fa::attn::separableMaskCompare(
    const ScoreSpec &spec, const DenseMap<Operation *, unsigned> &stages) {
  Block &block = spec.maskMod->front();
  auto compare =
      block.getTerminator()->getOperand(0).getDefiningOp<arith::CmpIOp>();
  if (!compare || compare->getBlock() != &block)
    return std::nullopt;
  Value lhs = compare.getLhs(), rhs = compare.getRhs();
  unsigned l = stageOfValue(block, stages, lhs);
  unsigned r = stageOfValue(block, stages, rhs);
  // Each side reads at most one of the indices, and not the other's.
  if (l == kMaskModElement || r == kMaskModElement || (l & r) != 0)
    return std::nullopt;
  if (l == kMaskModKey || r == kMaskModQuery)
    return SeparableMaskCompare{compare, rhs, lhs};
  return SeparableMaskCompare{compare, lhs, rhs};
}

Value mlir::fa::attn::buildMaskModStage(
    OpBuilder &b, Location loc, const ScoreSpec &spec,
    const DenseMap<Operation *, unsigned> &stages, unsigned stage,
    IRMapping &map, const ModArgAccess *modArgs) {
  Block &block = spec.maskMod->front();
  for (Operation &op : block) {
    if (op.hasTrait<OpTrait::IsTerminator>())
      return map.lookupOrNull(op.getOperand(0));
    if (stages.lookup(&op) == stage)
      cloneMaskModOp(b, loc, op, block, map, modArgs);
  }
  llvm_unreachable("the verifiers require mask_mod to end in a yield");
}

//===----------------------------------------------------------------------===//
// score_mod: how q_idx enters the score
//===----------------------------------------------------------------------===//

namespace {
/// What a score_mod value reads, and whether it splits as f(no q_idx) +
/// g(q_idx, nothing of the score's element: neither s nor kv_idx).
struct QueryTerm {
  bool query = false;   ///< reads q_idx
  bool element = false; ///< reads s or kv_idx
  bool split = true;    ///< when it reads both: is a sum of the two kinds
  bool uniform() const { return !query && !element; }
  bool separable() const { return !(query && element) || split; }
};
} // namespace

/// A sum or difference of two terms: separable when both are.
static QueryTerm sumTerm(QueryTerm a, QueryTerm b) {
  return {a.query || b.query, a.element || b.element,
          a.separable() && b.separable()};
}

/// What reads q_idx other than through sums, products and exact casts: a
/// term g that could be infinite for some rows (a select, a table read, a
/// division by it), which a shift by g(q_r) − g(q_0) cannot carry.
static constexpr QueryTerm kMixed{true, true, false};

/// A product (or a quotient by `b`): a factor of neither kind distributes.
static QueryTerm productTerm(QueryTerm a, QueryTerm b, bool quotient) {
  if (b.uniform())
    return a;
  if (a.uniform() && !quotient)
    return b;
  if (quotient && b.query)
    return kMixed;
  return {a.query || b.query, a.element || b.element,
          !(a.query || b.query) || !(a.element || b.element)};
}

bool mlir::fa::attn::scoreModQueryAdditive(Region &region) {
  Block &block = region.front();
  DenseMap<Value, QueryTerm> terms;
  terms[block.getArgument(0)] = {false, true, true};
  terms[block.getArgument(3)] = {true, false, true};
  terms[block.getArgument(4)] = {false, true, true};
  // b, h, the mod_args, constants and values from outside: neither kind.
  auto termOf = [&](Value v) { return terms.lookup(v); };
  for (Operation &op : block.without_terminator()) {
    QueryTerm t;
    if (isa<arith::AddFOp, arith::SubFOp, arith::AddIOp, arith::SubIOp>(op)) {
      t = sumTerm(termOf(op.getOperand(0)), termOf(op.getOperand(1)));
    } else if (isa<arith::MulFOp, arith::MulIOp, arith::DivFOp>(op)) {
      t = productTerm(termOf(op.getOperand(0)), termOf(op.getOperand(1)),
                      isa<arith::DivFOp>(op));
    } else if (isa<arith::NegFOp, arith::SIToFPOp, arith::IndexCastOp,
                   arith::ExtSIOp, arith::ExtFOp>(op)) {
      t = termOf(op.getOperand(0));
    } else {
      // Anything else: of no kind, of the element's, or mixed.
      op.walk([&](Operation *inner) {
        for (Value v : inner->getOperands()) {
          QueryTerm u = termOf(v);
          t.query |= u.query;
          t.element |= u.element;
        }
      });
      if (t.query)
        t = kMixed;
    }
    for (Value r : op.getResults())
      terms[r] = t;
  }
  QueryTerm score = termOf(block.getTerminator()->getOperand(0));
  return score.query && score.separable();
}
