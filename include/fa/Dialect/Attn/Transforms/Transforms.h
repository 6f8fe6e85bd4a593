//===- Transforms.h - attn rewrites as functions ----------------*- C++ -*-===//
//
// The algorithms behind the passes, callable on one op so that other drivers
// (the GPU lowering, tests) can apply them.
//
//===----------------------------------------------------------------------===//

#ifndef FA_DIALECT_ATTN_TRANSFORMS_TRANSFORMS_H
#define FA_DIALECT_ATTN_TRANSFORMS_TRANSFORMS_H

#include <functional>

#include "fa/Dialect/Attn/IR/Attn.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/PatternMatch.h"

namespace mlir::fa::attn {

/// The discardable attribute by which a target's planning pass (attn-gpu-plan)
/// hands its kernel plan, a dictionary holding at least `block_q` and
/// `block_kv`, through the rewrites below to the target's lowering.
inline constexpr llvm::StringLiteral kKernelPlanAttr = "attn.kernel_plan";

/// block_q and block_kv of the kernel plan on `op`, if it carries one.
inline std::optional<std::pair<int64_t, int64_t>>
plannedBlockSizes(Operation *op) {
  auto plan = op->getAttrOfType<DictionaryAttr>(kKernelPlanAttr);
  if (!plan)
    return std::nullopt;
  auto q = plan.getAs<IntegerAttr>("block_q");
  auto kv = plan.getAs<IntegerAttr>("block_kv");
  if (!q || !kv)
    return std::nullopt;
  return std::make_pair(q.getInt(), kv.getInt());
}

/// The discardable unit attribute on attn-tile's scf.forall when it runs
/// over (batch, key head, query block) with packed GQA tiles.
inline constexpr llvm::StringLiteral kPackGqaAttr = "attn.pack_gqa";

/// Whether the kernel plan on `op`, if it carries one, packs GQA heads
/// (its `pack_gqa` field).
inline std::optional<bool> plannedPackGqa(Operation *op) {
  auto plan = op->getAttrOfType<DictionaryAttr>(kKernelPlanAttr);
  if (!plan)
    return std::nullopt;
  return plan.contains("pack_gqa");
}

/// Copies the kernel plan of `from`, if it has one, onto `to`.
inline void copyKernelPlan(Operation *from, Operation *to) {
  if (Attribute plan = from->getAttr(kKernelPlanAttr))
    to->setAttr(kKernelPlanAttr, plan);
}

/// attn.attention → init + attn.online_attention + finalisation (seed 4.2.2).
LogicalResult rewriteToOnlineSoftmax(RewriterBase &rewriter, AttentionOp op);

/// The finalisation of the online form: O = acc·(1/l) in `outputElementType`
/// and LSE = ln2·(m + log2 l) per row (O = 0, LSE = −inf where l = 0), for
/// (acc, m, l) of any leading rank (a whole problem, or split partials) and
/// the extents `accSizes` (of acc; the rows' are all but its last). With
/// `sinks` (f32 [H], rows [.., H, Nq]) each row's sink joins here, once
/// (OnlineSoftmaxMath::finalizeRowWithSink).
std::pair<Value, Value>
finalizeOnlineAttention(OpBuilder &builder, Location loc, Value acc, Value max,
                        Value sum, Type outputElementType,
                        ArrayRef<OpFoldResult> accSizes, Value sinks = {});

/// The discardable attribute (the split count, i64) on the scf.forall of
/// attn-split-kv: attn-tile tiles the online ops directly inside it as whole
/// problems, and the GPU lowering maps it to the grid's split dimension.
inline constexpr llvm::StringLiteral kKeySplitsAttr = "attn.key_splits";

/// Whether `op` is a whole problem (or one key split of one) that attn-tile
/// still has to tile, rather than a tile inside attn-tile's loops.
inline bool isUntiledProblem(Operation *op) {
  auto loop = op->getParentOfType<scf::ForallOp>();
  return !loop || loop->hasAttr(kKeySplitsAttr);
}

/// attn.online_attention over a whole problem, with its finalisation →
/// an scf.forall over `splits` key ranges (whole key blocks of `blockKV`
/// keys: split s takes blocks [s·nblk/S, (s+1)·nblk/S)), each finalised
/// into a partial (O f32, LSE), joined by attn.merge.
LogicalResult splitKeyRange(RewriterBase &rewriter, OnlineAttentionOp op,
                            int64_t splits, int64_t blockKV);

/// attn.online_attention → forall over (b, h, Q block) × for over KV blocks.
/// Packed GQA (`packGqa`): forall over (b, key head hk, Q block) instead,
/// each tile holding the G = H / Hkv query heads [hk·G, hk·G + G) of
/// max(blockQ / G, 1) queries, so a key block is read once for the group.
LogicalResult tileOnlineAttention(RewriterBase &rewriter, OnlineAttentionOp op,
                                  int64_t blockQ, int64_t blockKV,
                                  bool packGqa = false);

struct RecomputeBackwardOptions {
  int64_t blockQ = 64;
  int64_t blockKV = 64;
  bool deterministic = true;
};
/// attn.attention_backward → D = rowsum(dO∘O), KV-outer / Q-inner loops of
/// attn.backward_tile (seed 4.3).
LogicalResult lowerAttentionBackward(RewriterBase &rewriter,
                                     AttentionBackwardOp op,
                                     const RecomputeBackwardOptions &options);

/// attn.online_attention / attn.backward_tile → linalg, arith, math.
LogicalResult decomposeOnlineAttention(RewriterBase &rewriter,
                                       OnlineAttentionOp op);
LogicalResult decomposeBackwardTile(RewriterBase &rewriter, BackwardTileOp op);
/// attn.merge → linalg: the largest partial LSE, the partials' weights, their
/// weighted sum and the merged row's finalisation (OnlineSoftmaxMath).
LogicalResult decomposeMerge(RewriterBase &rewriter, MergeOp op);
/// attn.paged_view → a linalg.generic gathering every key of every sequence
/// through the page table (the CPU's reference reading of a paged cache).
LogicalResult decomposePagedView(RewriterBase &rewriter, PagedViewOp op);

/// attn.rotary → a linalg.generic over the rotated rows (KvAppend.cpp).
LogicalResult decomposeRotary(RewriterBase &rewriter, RotaryOp op);
/// attn.kv_append → a loop over the new rows inserting each into the cache
/// at its (page, row); rows past the capacity are not written.
LogicalResult decomposeKvAppend(RewriterBase &rewriter, KvAppendOp op);

/// attn.hadamard → a linalg.generic summing each group's ±x in f32 against
/// Sylvester's matrix, then the 1/√g scale and one rounding (Quantize.cpp).
LogicalResult decomposeHadamard(RewriterBase &rewriter, HadamardOp op);
/// attn.quantize → row maxima of |x|, the factors (a loop over the rows each
/// covers), and x / factor clamped and rounded to e4m3 by integer ops.
LogicalResult decomposeQuantize(RewriterBase &rewriter, QuantizeOp op);

/// Where column `col` (index) of a row sits in attn.rotary: whether it is
/// rotated (col < rotaryDim), its pair's index into cos/sin, the column it
/// pairs with, and whether it is the pair's first element. `rotaryDim`
/// (index) and `interleaved` (i1) may be run-time values (the GPU kernel's
/// parameters) or constants.
struct RotaryColumn {
  Value rotated, pair, partner, first;
};
RotaryColumn rotaryColumn(OpBuilder &b, Location loc, Value col,
                          Value rotaryDim, Value interleaved);
/// One pair (x1, x2) rotated by (c, s) in f32: (x1·c − x2·s, x1·s + x2·c),
/// each product rounded separately (the CPU and GPU lowerings share it).
std::pair<Value, Value> rotaryPair(OpBuilder &b, Location loc, Value x1,
                                   Value x2, Value c, Value s);
/// Column `col`'s rotated f32 value from its own value `x` and its
/// partner's (both f32).
Value rotaryValue(OpBuilder &b, Location loc, const RotaryColumn &col, Value x,
                  Value partner, Value c, Value s);

/// rowSums + Σ_j P_ij over one (query block, key block) tile, P recomputed
/// from `lse` exactly as decomposeBackwardTile recomputes it (f32 inputs;
/// the block at `offsets` [b, h, q, kv] of lengths [nq, nk], masked per
/// element). attn-recompute-backward divides dO by these sums, which
/// cancels what the f32 LSE and scores lost to rounding.
Value addProbabilityRowSums(OpBuilder &b, Location loc, const ScoreSpec &spec,
                            Value q, Value k, Value lse, Value rowSums,
                            ValueRange offsets, ValueRange lengths);

//===----------------------------------------------------------------------===//
// Score evaluation shared by the rewrites (ScoreBuilder.cpp)
//===----------------------------------------------------------------------===//

/// Absolute indices of one score element and the problem's lengths.
struct ScorePosition {
  Value b, h, q, kv; // index
  Value nq, nk;      // index
};


/// How a score_mod reaches its mod_args where they are not tensors: a GPU
/// kernel reads them from its parameters. Without one, buildScore reads the
/// op's tensors (spec.modArgs) with tensor.extract.
struct ModArgAccess {
  /// Extent `dim` of mod_arg `arg`, as an index.
  std::function<Value(OpBuilder &, Location, unsigned arg, unsigned dim)> size;
  /// Element `indices` (each inside its extent) of mod_arg `arg`.
  std::function<Value(OpBuilder &, Location, unsigned arg, ValueRange indices)>
      load;
};

/// i1: whether key `kv` is visible from query `q` under `spec`'s mask: the
/// enum mask's band and the mask_mod, both. mod_args are read through
/// `modArgs` when given (see ModArgAccess).
Value buildMaskPredicate(OpBuilder &b, Location loc, const ScoreSpec &spec,
                         const ScorePosition &pos,
                         const ModArgAccess *modArgs = nullptr);

/// i1: the mask_mod alone (spec.maskMod must be set), inlined at `pos`.
Value buildMaskModPredicate(OpBuilder &b, Location loc, const ScoreSpec &spec,
                            const ScorePosition &pos,
                            const ModArgAccess *modArgs = nullptr);

/// What a value of the mask_mod depends on among q_idx and kv_idx (bits):
/// a kernel that evaluates the mask_mod on a whole block emits each stage
/// once per what it depends on (per block, per query row, per key, per
/// element) instead of every op per element.
enum MaskModStage : unsigned {
  kMaskModFixed = 0,   ///< neither (b, h, the mod_args and constants only)
  kMaskModQuery = 1,   ///< q_idx, not kv_idx
  kMaskModKey = 2,     ///< kv_idx, not q_idx
  kMaskModElement = 3, ///< both
};

/// The stage of each op of spec.maskMod's block (its terminator excluded):
/// the union of its operands' (and its regions' uses from above).
DenseMap<Operation *, unsigned> maskModStages(const ScoreSpec &spec);

/// A mask_mod that yields one integer compare of a value that reads q_idx but
/// not kv_idx (`query`) with one that reads kv_idx but not q_idx (`key`;
/// either may read neither), in either order: `document[q] == document[kv]`,
/// `q >= prefix[b] or ...` is not one, `q / 64 <= kv / 64` is. A block's
/// class then follows from each side's range over the block's rows and keys
/// (the block-mask kernel's interval classification) instead of every element.
struct SeparableMaskCompare {
  arith::CmpIOp compare;
  Value query, key; ///< the compare's operands by the index they read
};
std::optional<SeparableMaskCompare>
separableMaskCompare(const ScoreSpec &spec,
                     const DenseMap<Operation *, unsigned> &stages);

/// Clones the mask_mod's ops of `stage` (by `stages`, from maskModStages) at
/// b's insertion point. `map` holds the position arguments the stage reads
/// and the clones of the earlier stages' ops it uses (mapMaskModPositions
/// and the maps those stages filled), and receives the clones. Returns the
/// yielded i1 once `map` holds it, else null.
Value buildMaskModStage(OpBuilder &b, Location loc, const ScoreSpec &spec,
                        const DenseMap<Operation *, unsigned> &stages,
                        unsigned stage, IRMapping &map,
                        const ModArgAccess *modArgs = nullptr);

/// Whether the score_mod `region` yields f(s, b, h, kv) + g(b, h, q) (either
/// may be absent, and g must read q_idx): q_idx enters only through terms
/// added to the score, through sums, differences, negations, products with
/// values that read none of s, q_idx and kv_idx, and exact casts (positions
/// below 2^24 convert exactly), so g is finite. ALiBi's
/// s + slope[h]·f32(kv − q) is one; s − slope·|q − kv| and s + bias[q] (a
/// table may hold −inf) are not. A row's softmax does not see g: a kernel may
/// evaluate every row of a tile at one query and move the difference of g
/// into the row's LSE (the GPU forward's query-anchored score_mod).
bool scoreModQueryAdditive(Region &region);

/// Maps the mask_mod's position arguments that `pos` sets (null ones are
/// left out) and, without `modArgs`, its mod_args to spec.modArgs.
void mapMaskModPositions(const ScoreSpec &spec, const ScorePosition &pos,
                         IRMapping &map, const ModArgAccess *modArgs);

/// The score after scaling and score_mod, in natural units, for the raw dot
/// product `dot`. When `derivative` is non-null it receives d(score)/d(dot).
/// A non-null `scale` (f32, e.g. a kernel parameter) replaces spec.scale.
/// mod_args are read through `modArgs` when given (see ModArgAccess); they
/// are constants of the derivative.
Value buildScore(OpBuilder &b, Location loc, const ScoreSpec &spec, Value dot,
                 const ScorePosition &pos, Value *derivative = nullptr,
                 Value scale = {}, const ModArgAccess *modArgs = nullptr);

/// Fails, naming the op, when the score_mod region holds an op the backward
/// cannot differentiate with respect to the score.
LogicalResult verifyDifferentiable(const ScoreSpec &spec, Operation *diagOp);

/// Window sizes are clamped to this many keys: a larger window is unbounded
/// for any problem below 2^40 positions, and diag ± size stays far from
/// overflowing i64 (a window of INT64_MAX once masked every row).
constexpr int64_t kUnboundedWindow = int64_t(1) << 40;

/// A run-time window size (i64 or i32; negative: unbounded) as an index in
/// [0, kUnboundedWindow]: one unsigned min, no branch. GPU kernels bind it
/// once at their entry into ScoreSpec::windowLeftValue/windowRightValue.
Value normalizeWindowSize(OpBuilder &b, Location loc, Value size);

/// Lowest and one-past-highest key index (absolute) that query rows
/// [qBegin, qEnd) can see; unbounded sides return null.
std::pair<Value, Value> buildKeyBand(OpBuilder &b, Location loc,
                                     const ScoreSpec &spec, Value qBegin,
                                     Value qEnd, Value nq, Value nk);

/// Lowest and one-past-highest query index (absolute) that can see some key
/// in [kBegin, kEnd); unbounded sides return null.
std::pair<Value, Value> buildQueryBand(OpBuilder &b, Location loc,
                                       const ScoreSpec &spec, Value kBegin,
                                       Value kEnd, Value nq, Value nk);

/// The blocks of `blockSize` positions of [0, extent) that meet the band
/// [lo, hi) (a null side is unbounded): [begin, end), with end == begin when
/// the band misses [0, extent) (bottom-right causal with Nq > Nk puts whole
/// query blocks above it), never a wrapped-around count. The key-block loop
/// of attn-tile and the query-block loop of attn-recompute-backward, which
/// the GPU kernels run as the passes computed them.
std::pair<Value, Value> buildBlockRange(OpBuilder &b, Location loc,
                                        std::pair<Value, Value> band,
                                        Value extent, int64_t blockSize);

/// i1: whether every (q, kv) in [qBegin, qEnd) × [kBegin, kEnd) is visible, so
/// the block needs no mask (never under a mask_mod, which can hit any block).
Value buildBlockInsideMask(OpBuilder &b, Location loc, const ScoreSpec &spec,
                           Value qBegin, Value qEnd, Value kBegin, Value kEnd,
                           Value nq, Value nk);

} // namespace mlir::fa::attn

#endif // FA_DIALECT_ATTN_TRANSFORMS_TRANSFORMS_H
