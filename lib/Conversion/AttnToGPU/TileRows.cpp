//===- TileRows.cpp - which (head, query) a forward tile row holds -------===//

#include "TileRows.h"

using namespace mlir;
using namespace mlir::fa::gpu_lowering;

TileRows TileRows::plain(KernelBuilder &kb, Value batch, Value heads, Value nq,
                         Value head, Value qBegin) {
  TileRows rows;
  rows.batch = batch, rows.heads = heads, rows.nq = nq;
  rows.head = head, rows.qBegin = qBegin;
  return rows;
}

TileRows TileRows::packed(KernelBuilder &kb, Value batch, Value heads,
                          Value kvHeads, Value nq, Value kvHead,
                          Value qBlock) {
  TileRows rows;
  rows.batch = batch, rows.heads = heads, rows.nq = nq;
  rows.group = arith::DivUIOp::create(kb.b, kb.loc, heads, kvHeads);
  // The same n as attn-tile's packed tiling: max(block_q / G, 1).
  Value perHead =
      arith::DivUIOp::create(kb.b, kb.loc, kb.idx(kb.plan.blockQ), rows.group);
  rows.queries = arith::MaxUIOp::create(kb.b, kb.loc, perHead, kb.idx(1));
  rows.head = kb.mul(kvHead, rows.group);
  rows.qBegin = kb.mul(qBlock, rows.queries);
  return rows;
}

Value TileRows::lastQuery(KernelBuilder &kb) const {
  if (!isPacked())
    return kb.add(qBegin, kb.plan.blockQ - 1);
  return kb.sub(kb.add(qBegin, queries), kb.idx(1));
}

std::pair<Value, Value> TileRows::at(KernelBuilder &kb, Value row) const {
  if (!isPacked())
    return {head, kb.add(qBegin, row)};
  Value g = arith::RemUIOp::create(kb.b, kb.loc, row, group);
  Value q = arith::DivUIOp::create(kb.b, kb.loc, row, group);
  return {kb.add(head, g), kb.add(qBegin, q)};
}

Value TileRows::valid(KernelBuilder &kb, Value row) const {
  auto [h, q] = at(kb, row);
  Value ok = kb.lt(q, nq);
  if (!isPacked())
    return ok;
  // Rows past G·n would repeat the next tile's first queries.
  Value inTile = kb.lt(q, kb.add(qBegin, queries));
  return arith::AndIOp::create(kb.b, kb.loc, ok, inTile);
}

Value TileRows::globalRow(KernelBuilder &kb, Value h, Value query) const {
  return kb.add(kb.mul(kb.add(kb.mul(batch, heads), h), nq), query);
}

Value TileRows::laneRow(KernelBuilder &kb, Value rowBase, int64_t r) {
  return kb.add(rowBase, kb.add(kb.groupId, r * 8));
}
