//===- BlockMask.h - the block mask of block-sparse kernels -----*- C++ -*-===//
//
// A block mask classifies each (query block, key block) of a mask_mod as
// empty (no element visible), partial (some) or full (all, and every key
// inside Nk): block-sparse forwards visit the full and partial key blocks
// of their query block only and evaluate the mask_mod on the partial ones.
// It is one i32 buffer in caller-owned device memory, built by the
// fa_block_mask and fa_block_lists entries of the kernel's module and
// reusable across launches of the same shapes (docs/ABI.md "Block
// sparsity"). With R = batch · mask_heads rows (mask_heads 1: one mask for
// every head; else one per query head), NQB = ceil(nq / block_q) and
// NKB = ceil(nk / block_kv), the buffer holds, in order:
//   kv_count [R, NQB], full_kv_count [R, NQB], q_count [R, NKB],
//   full_q_count [R, NKB], kv_index [R, NQB, NKB], full_kv_index
//   [R, NQB, NKB], q_index [R, NKB, NQB], full_q_index [R, NKB, NQB],
//   block_class [R, NQB, NKB] (0 empty, 1 partial, 2 full), kv_order
//   [R, NQB], q_order [R, NKB].
// The q lists (per key block, ascending query blocks) are the transposed
// structure a backward walks. The orders list a row's query blocks (key
// blocks) by decreasing length of their lists, ties ascending: a
// block-sparse forward's (backward's) CTAs take the blocks in that order,
// every head's first (BlockMaskLine::gridPlace), so the longest walks start
// first and the short ones fill the grid's tail.
//
//===----------------------------------------------------------------------===//

#ifndef FA_LIB_CONVERSION_ATTNTOGPU_BLOCKMASK_H
#define FA_LIB_CONVERSION_ATTNTOGPU_BLOCKMASK_H

#include "fa/Conversion/AttnToGPU.h"

namespace mlir::fa::gpu_lowering {

class KernelBuilder;

/// Block classes as stored in block_class.
enum BlockClass : int32_t { kBlockEmpty = 0, kBlockPartial = 1, kBlockFull = 2 };

/// Element offsets (index) of the arrays of one block mask.
struct BlockMaskLayout {
  Value queryBlocks, keyBlocks; ///< NQB, NKB
  Value kvCount, fullKvCount, qCount, fullQCount;
  Value kvIndex, fullKvIndex, qIndex, fullQIndex, blockClass;
  Value kvOrder, qOrder;

  /// The layout for `rows` = batch · mask_heads and the block counts of
  /// nq and nk under `plan`'s block_q, block_kv.
  static BlockMaskLayout get(KernelBuilder &kb, Value rows, Value nq,
                             Value nk);
};

/// One line of a block mask as a kernel walks it: a query block's key blocks
/// (forward) or a key block's query blocks (backward), the full ones first,
/// then the partial ones. Counts are clamped to the line's blocks, so a
/// buffer that is not a block mask cannot make a walk longer than the dense
/// one.
struct BlockMaskLine {
  Value mask;                  ///< the i32 buffer
  Value full, count;           ///< full blocks; full + partial
  Value fullList, partialList; ///< element offsets of the two index lists

  /// Line `line` of the lists at (full count, count, full index, index)
  /// offsets, `blocks` entries each.
  static BlockMaskLine read(KernelBuilder &kb, Value mask, Value fullCounts,
                            Value counts, Value fullIndex, Value index,
                            Value line, Value blocks);
  /// The block listed at place `i` of the walk (i < count), as stored.
  Value blockAt(KernelBuilder &kb, Value i) const;

  /// The line a kernel walks in row (batch, head mod mask_heads) of the
  /// mask of `batches` · `maskHeads` rows (mask_heads is 1 or H): query
  /// block `block`'s key blocks, or with `transposed` key block `block`'s
  /// query blocks. `head` is emitted after the mask's layout, which
  /// `layout` receives if given.
  static BlockMaskLine walk(KernelBuilder &kb, Value mask, Value batches,
                            Value maskHeads, Value nq, Value nk, Value batch,
                            function_ref<Value()> head, Value block,
                            bool transposed,
                            BlockMaskLayout *layout = nullptr);

  /// A block-sparse grid (blocks, heads, batch) read place-major in groups
  /// of `groupHeads` heads: CTA (x, y) is l = y · gridDim.x + x; group
  /// l / (blocks · G) takes its n heads' places in turn (place r / n of head
  /// first + r mod n, r the CTA's rank in the group). So every head's
  /// longest walks start early (the heads share one mask row or each has
  /// its own), not one head's after another's, where the last head's long
  /// walks were the grid's tail; the group bounds how many heads' rows
  /// share the L2 at once. Returns (place, head).
  static std::pair<Value, Value> gridPlace(KernelBuilder &kb, Value heads,
                                           int64_t groupHeads);
  /// gridPlace's (place, head) of the l-th CTA (or persistent tile) of a
  /// batch over `blocks` places of each of `heads` heads.
  static std::pair<Value, Value> placeOf(KernelBuilder &kb, Value l,
                                         Value blocks, Value heads,
                                         int64_t groupHeads);

  /// The block CTA `rank` of a grid over query blocks (with `transposed`,
  /// key blocks) takes: entry `rank` of its row's order, clamped into the
  /// row's blocks (any buffer contents keep the kernel in bounds).
  static Value orderedBlock(KernelBuilder &kb, Value mask, Value batches,
                            Value maskHeads, Value nq, Value nk, Value batch,
                            Value head, Value rank, bool transposed);
};

/// Heads a block-sparse forward / backward grid interleaves (gridPlace):
/// measured at 16k tokens, 8 documents, 16 heads, d128 (PERF.md, 2026-12-06):
/// the forward gains as much from 4 as from all 16 and loses 8% at 2; the
/// backward, whose CTAs keep Q, dO and dQ rows of their heads in L2, runs
/// 2–4% faster at 2 than at 16.
constexpr int64_t kForwardOrderHeads = 4;
constexpr int64_t kBackwardOrderHeads = 2;

/// Element `index` (index) of the i32 global buffer `base`, read through
/// the read-only path (nothing writes it while the kernel runs).
Value loadBlockMaskWord(KernelBuilder &kb, Value base, Value index);
/// Stores `value` (i32) into element `index` of `base`.
void storeBlockMaskWord(KernelBuilder &kb, Value base, Value index,
                        Value value);

} // namespace mlir::fa::gpu_lowering

namespace mlir::fa {

/// Emits `fa_block_mask_<tag>` (classifies every block by evaluating the
/// plan's mask_mod on its elements; grid (NKB, NQB, R), one warp each),
/// `fa_block_lists_<tag>` (turns the classes into the count and index
/// lists; grid (NQB + NKB, R, 1), 32 threads) and `fa_block_order_<tag>`
/// (ranks each row's query and key blocks by their counts; grid (2, R, 1),
/// kBlockOrderThreads) into `module`.
void buildBlockMaskKernels(OpBuilder &b, Location loc, gpu::GPUModuleOp module,
                           const KernelPlan &plan);

} // namespace mlir::fa

#endif // FA_LIB_CONVERSION_ATTNTOGPU_BLOCKMASK_H
