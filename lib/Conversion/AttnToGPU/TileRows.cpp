//===- TileRows.cpp - which (head, query) a forward tile row holds -------===//

#include "TileRows.h"

using namespace mlir;
using namespace mlir::fa::gpu_lowering;

TileRows TileRows::packed(KernelBuilder &kb, Value batch, Value heads,
                          Value kvHeads, Value nq, Value kvHead, Value qBlock,
                          int64_t blockRows) {
  TileRows rows;
  rows.batch = batch, rows.heads = heads, rows.nq = nq;
  rows.group = arith::DivUIOp::create(kb.b, kb.loc, heads, kvHeads);
  // The same n as attn-tile's packed tiling: max(block_q / G, 1).
  Value perHead =
      arith::DivUIOp::create(kb.b, kb.loc, kb.idx(blockRows), rows.group);
  rows.queries = arith::MaxUIOp::create(kb.b, kb.loc, perHead, kb.idx(1));
  rows.head = kb.mul(kvHead, rows.group);
  rows.qBegin = kb.mul(qBlock, rows.queries);
  return rows;
}

TileRows TileRows::fromValues(ValueRange v) {
  assert(v.size() == 7 && "packed rows lower to 7 values");
  TileRows rows;
  rows.batch = v[0], rows.heads = v[1], rows.nq = v[2], rows.head = v[3];
  rows.qBegin = v[4], rows.group = v[5], rows.queries = v[6];
  return rows;
}

SmallVector<Value> TileRows::values() const {
  return {batch, heads, nq, head, qBegin, group, queries};
}

Value TileRows::lastQuery(KernelBuilder &kb) const {
  return kb.sub(kb.add(qBegin, queries), kb.idx(1));
}

std::pair<Value, Value> TileRows::at(KernelBuilder &kb, Value row) const {
  Value g = arith::RemUIOp::create(kb.b, kb.loc, row, group);
  Value q = arith::DivUIOp::create(kb.b, kb.loc, row, group);
  return {kb.add(head, g), kb.add(qBegin, q)};
}

Value TileRows::valid(KernelBuilder &kb, Value row) const {
  auto [h, q] = at(kb, row);
  Value ok = kb.lt(q, nq);
  // Rows past G·n would repeat the next tile's first queries.
  Value inTile = kb.lt(q, kb.add(qBegin, queries));
  return arith::AndIOp::create(kb.b, kb.loc, ok, inTile);
}

Value TileRows::globalRow(KernelBuilder &kb, Value h, Value query) const {
  return kb.add(kb.mul(kb.add(kb.mul(batch, heads), h), nq), query);
}

Value TileRows::splitRowBase(KernelBuilder &kb, Value split,
                             Value batches) const {
  return kb.mul(kb.mul(kb.mul(split, batches), heads), nq);
}

Value TileRows::laneRow(KernelBuilder &kb, Value rowBase, int64_t r) {
  return kb.add(rowBase, kb.add(kb.groupId, r * 8));
}
