//===- Varlen.h - packed-sequence helpers of the attn rewrites --*- C++ -*-===//
//
// A varlen batch packs B sequences along the token axis ([T, H, D]) and
// names each one's rows by cu_seqlens (i32 [B+1]). The rewrites view the
// packed tensors head-major with one batch ([1, H, T, D]), so the online
// softmax, its finalisation and Delta stay the dense code; only the loops
// that cut blocks (attn-tile, attn-recompute-backward) read the offsets.
//
//===----------------------------------------------------------------------===//

#ifndef FA_LIB_DIALECT_ATTN_TRANSFORMS_VARLEN_H
#define FA_LIB_DIALECT_ATTN_TRANSFORMS_VARLEN_H

#include "mlir/IR/Builders.h"

namespace mlir::fa::attn::detail {

/// [T, H, D] → [1, H, T, D] (a transpose and a unit batch).
Value packedToHeadMajor(OpBuilder &b, Location loc, Value packed);
/// [1, H, T, D] → [T, H, D]; the inverse of packedToHeadMajor.
Value headMajorToPacked(OpBuilder &b, Location loc, Value headMajor);
/// [H, T] → [1, H, T] (the rows of a varlen LSE).
Value addUnitBatch(OpBuilder &b, Location loc, Value rows);
/// [1, H, T] → [H, T].
Value dropUnitBatch(OpBuilder &b, Location loc, Value rows);

/// The rows of one sequence in its packed tensor: [start, start + length).
/// Offsets outside [0, total] or decreasing are clamped so that a bad
/// cu_seqlens can never address memory outside the tensor (the callers
/// that own the data reject it with a diagnostic first).
struct SequenceSpan {
  Value start, length; // index
};
SequenceSpan sequenceSpan(OpBuilder &b, Location loc, Value cuSeqlens,
                          Value seq, Value total);

/// The number of sequences B of cu_seqlens [B+1].
Value sequenceCount(OpBuilder &b, Location loc, Value cuSeqlens);

/// The longest sequence's length (0 for B = 0), by a loop over the offsets:
/// the tiled loops run to it and each sequence bounds its own blocks.
Value longestSequence(OpBuilder &b, Location loc, Value cuSeqlens,
                      Value total);

/// Rows of the block starting at `start` of a sequence of `length` rows:
/// min(block, length - start), and 0 past the sequence's end.
Value rowsInBlock(OpBuilder &b, Location loc, Value length, Value start,
                  Value block);

} // namespace mlir::fa::attn::detail

#endif // FA_LIB_DIALECT_ATTN_TRANSFORMS_VARLEN_H
