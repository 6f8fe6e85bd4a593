//===- TiledLoopNest.h - the tiled loops a kernel runs ----------*- C++ -*-===//
//
// The loop nest that attn-tile (forward) or attn-recompute-backward
// (backward) built around a planned tile op. A kernel runs one iteration of
// the nest's parallel loops per CTA and the nest's tile loop (the key blocks
// of a query block, the query blocks of a key block) inside; the loop's
// bounds are the passes' IR, cloned into the kernel, so a rewrite of them
// (a narrower band, a split of the key range) reaches the GPU.
//
//===----------------------------------------------------------------------===//

#ifndef FA_CONVERSION_ATTNTOGPU_TILEDLOOPNEST_H
#define FA_CONVERSION_ATTNTOGPU_TILEDLOOPNEST_H

#include "fa/Dialect/Attn/IR/Attn.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace mlir::fa {

/// The kernel's values for the free values of the tile loop's bounds.
struct TileLoopInputs {
  Value batch;    ///< the CTA's batch index
  Value head;     ///< query head (forward) or key head (backward)
  Value block;    ///< the CTA's query block (forward) or key block (backward)
  Value heads, kvHeads, nq, nk; ///< the problem's sizes (index)
  /// Split-KV only: the CTA's key split and the run-time split count.
  Value split = {}, splits = {};
  /// Varlen only: the kernel's cu_seqlens_q and cu_seqlens_k parameters
  /// (VarlenKernel.h); nq and nk are then the token totals.
  Value cuSeqlensQ = {}, cuSeqlensK = {};
  /// Paged only: the kernel's seqused_k parameter (i32 [B], global); nk is
  /// then the page table's capacity.
  Value sequsedK = {};
  /// Run-time windows only: the sizes bound at the kernel's entry (index,
  /// bindWindowParams), for the tile op's window operands.
  Value windowLeft = {}, windowRight = {};
};

/// Clones the attn op's score_mod or mask_mod region `mod` into the tile
/// op region `into`, its attn.yield an attn_gpu.yield: the kernel applies
/// the tiled IR's own mod.
void cloneModRegion(OpBuilder &b, Region &mod, Region &into);

/// Where a forward's score tile ops place a lane's rows: the warp's 16 rows
/// from `row` of the query tile at `qBegin` of (batch, head) (packed GQA:
/// their heads and queries are `rows`'s), in a problem of nq × nk.
struct ScoreRows {
  Value batch, head, qBegin, nq, nk, row;
  Value rows = {};
};

/// attn_gpu.key_bounds of `spec`'s mask for the lane's rows of `at`, in a
/// block of `blockRows` queries from `blockBegin` (default: at.qBegin).
Value buildKeyBounds(OpBuilder &b, Location loc, const attn::ScoreSpec &spec,
                     const ScoreRows &at, int64_t blockRows,
                     Value blockBegin = {});

/// `spec`'s score_mod (scaled by `scale`), then its mask_mod, on the scores
/// `s` of the key block from `keyBegin` (either or both absent: `s`).
Value buildScoreMods(OpBuilder &b, Location loc, const attn::ScoreSpec &spec,
                     Value s, Value scale, const ScoreRows &at,
                     Value keyBegin);

/// Where a backward's Sᵀ tile ops place a lane's elements: the warp's 16
/// keys from `row` of the key block at `keyBegin` as rows, the queries of
/// the tile at `qBegin` as columns, of (batch, head) in a problem of
/// nq × nk.
struct TransposedScores {
  Value batch, head, qBegin, keyBegin, nq, nk, row;
};

/// `spec`'s score_mod (scaled by `scale`; each element's d(score)/dSᵀ into
/// `derivative`), then its mask_mod, on Sᵀ (either or both absent: `s`).
Value buildTransposedScoreMods(OpBuilder &b, Location loc,
                               const attn::ScoreSpec &spec, Value s,
                               Value scale, const TransposedScores &at,
                               Value &derivative);

/// attn_gpu.transposed_bounds of `spec`'s mask for the Sᵀ tile of
/// `blockKeys` keys from at.keyBegin (with `blockIndex`: its block of
/// `blockKeys` keys from there) × `blockQueries` queries from at.qBegin:
/// the tile's first query as the mask reads it, and whether the tile lies
/// wholly inside.
std::pair<Value, Value> buildTransposedBounds(OpBuilder &b, Location loc,
                                              const attn::ScoreSpec &spec,
                                              const TransposedScores &at,
                                              int64_t blockKeys,
                                              int64_t blockQueries,
                                              Value blockIndex = {});

/// `s` where `inside`, else `masked(s)`: an scf.if of the score fragment, so
/// that a tile that needs no mask skips its ops.
Value buildUnlessInside(OpBuilder &b, Location loc, Value s, Value inside,
                        function_ref<Value(Value)> masked);

/// `s` where `inside`, else `masked` (a mask_mod, if any) and then
/// attn_gpu.transposed_mask at `at` (its qBegin the bounds' query): an
/// scf.if, so that a tile inside the band skips both.
Value buildTransposedMask(OpBuilder &b, Location loc, Value s,
                          const TransposedScores &at, Value inside,
                          bool opaqueLengths,
                          function_ref<Value(Value)> masked = nullptr);

class TiledLoopNest {
public:
  /// The nest around `tile` (attn.online_attention or attn.backward_tile),
  /// or a diagnostic on `tile` when its tile loop's bounds read a value the
  /// kernel does not have.
  static FailureOr<TiledLoopNest> get(Operation *tile);

  /// [begin, end) of the tile loop for the CTA at `in`, cloned at `b`; in
  /// the split form also the first key of the CTA's split (`keyOffset`:
  /// the split's key blocks count from it).
  std::pair<Value, Value> cloneTileRange(OpBuilder &b,
                                         const TileLoopInputs &in,
                                         Value *keyOffset = nullptr) const;

  /// Whether the nest lies in the key-split loop of attn-split-kv.
  bool isSplit() const { return static_cast<bool>(splitKeyOffset); }
  /// Whether attn-tile packed GQA heads: the forall runs over key heads.
  bool isPacked() const;
  /// Whether the bounds read cu_seqlens (attn-tile of a varlen batch).
  bool isVarlen() const { return static_cast<bool>(cuSeqlensQ); }
  /// Whether K and V are attn.paged_view's of a paged cache.
  bool isPaged() const { return static_cast<bool>(sequsedK); }

private:
  TiledLoopNest(Operation *tile, scf::ForOp tileLoop, scf::ForallOp forall,
                scf::ForOp keyLoop, Value query, Value key, Value value)
      : tile(tile), tileLoop(tileLoop), forall(forall), keyLoop(keyLoop),
        query(query), key(key), value(value) {}

  /// Finds the key-split loop around the nest and the offset of the
  /// split's key slice; fails on a split form the kernels cannot run.
  LogicalResult findSplit();
  /// Finds the cu_seqlens tensors of a varlen tile: the offsets its
  /// sequence lengths (the tile's nq, nk operands) are read from; or, when
  /// K is a paged view, the seqused_k its key count is read from.
  LogicalResult findVarlen();

  /// The kernel value of `leaf` (a loop index or a tensor size), or null;
  /// a static head dim is a constant created at `b` (returned as `leaf`
  /// itself without a builder).
  Value inputFor(OpBuilder *b, Value leaf, const TileLoopInputs &in) const;
  /// Collects, in program order, the ops that compute the tile loop's
  /// bounds from leaves; fails unless they are pure and region-free.
  LogicalResult collectBoundOps();

  // Op handles are mutable: their accessors are not const.
  Operation *tile;
  mutable scf::ForOp tileLoop; ///< key blocks (forward), query blocks (backward)
  mutable scf::ForallOp forall;
  mutable scf::ForOp keyLoop;  ///< backward only: the loop over key blocks
  mutable scf::ForallOp splitLoop; ///< split-KV only: over the key splits
  Value splitKeyOffset; ///< split-KV only: the first key of the split
  Value query, key, value; ///< the untiled operands the sizes are read from
  Value cuSeqlensQ, cuSeqlensK; ///< varlen only: the offsets tensors
  Value sequsedK; ///< paged only: the key counts
  SmallVector<Value, 2> windowSizes; ///< the tile op's run-time window sizes
  SmallVector<Operation *> boundOps;
};

} // namespace mlir::fa

#endif // FA_CONVERSION_ATTNTOGPU_TILEDLOOPNEST_H
