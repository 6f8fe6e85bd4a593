//===- TileRows.h - which (head, query) a forward tile row holds -*- C++ -*-===//
//
// The one place the mma.sync forward maps a row of its query tile to a query
// head and a query: the Q loads, the mask, score_mod and the O/LSE stores all
// ask it (the lowering of !attn_gpu.packed_rows). Packed GQA: the CTA holds
// the G = H / Hkv heads of key head hk, n = max(block_q / G, 1) queries of
// each; row r is head hk·G + r mod G at query qBegin + r div G, and rows from
// G·n on are padding.
//
//===----------------------------------------------------------------------===//

#ifndef FA_LIB_CONVERSION_ATTNTOGPU_TILEROWS_H
#define FA_LIB_CONVERSION_ATTNTOGPU_TILEROWS_H

#include "Fragments.h"

namespace mlir::fa::gpu_lowering {

class TileRows {
public:
  /// Packed rows of key head `kvHead` for the CTA's query block `qBlock` of
  /// a `blockRows`-row tile.
  static TileRows packed(KernelBuilder &kb, Value batch, Value heads,
                         Value kvHeads, Value nq, Value kvHead, Value qBlock,
                         int64_t blockRows);
  /// The rows as the lowering carries them (an !attn_gpu.packed_rows value):
  /// (batch, H, Nq, first head, first query, G, queries of each head).
  static TileRows fromValues(ValueRange values);
  SmallVector<Value> values() const;

  /// The tile's first query and its last one of each head.
  Value firstQuery() const { return qBegin; }
  Value lastQuery(KernelBuilder &kb) const;
  /// (head, query) of tile row `row` (index).
  std::pair<Value, Value> at(KernelBuilder &kb, Value row) const;
  /// Whether tile row `row` is a real row of this CTA (i1).
  Value valid(KernelBuilder &kb, Value row) const;
  /// The row of (head, query) in the [B, H, Nq] rows of q, o and lse.
  Value globalRow(KernelBuilder &kb, Value head, Value query) const;
  /// The first row of split `split`'s partials, after the earlier splits'
  /// `batches`·H·Nq rows (split-KV decode).
  Value splitRowBase(KernelBuilder &kb, Value split, Value batches) const;
  /// The row (index) of a lane's accumulator row r (0, 1) in the tile.
  static Value laneRow(KernelBuilder &kb, Value rowBase, int64_t r);

private:
  Value batch, heads, nq;
  Value head;    // the first head hk·G
  Value qBegin;  // the tile's first query
  Value group;   // G
  Value queries; // queries of each head in the tile
};

} // namespace mlir::fa::gpu_lowering

#endif // FA_LIB_CONVERSION_ATTNTOGPU_TILEROWS_H
