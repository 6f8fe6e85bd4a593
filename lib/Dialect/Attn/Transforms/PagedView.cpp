//===- PagedView.cpp - attn.paged_view as a gather --------------*- C++ -*-===//
//
// The CPU's reading of a paged cache: every key of every sequence gathered
// through the page table into the dense tensor the view stands for. This is
// the reference semantics; the GPU kernels gather per key tile instead.
//
//===----------------------------------------------------------------------===//

#include "fa/Dialect/Attn/Transforms/Transforms.h"
#include "Utils.h"

using namespace mlir;
using namespace mlir::fa::attn;
using namespace mlir::fa::attn::detail;

/// The page holding key `key` of sequence `seq`: page_table[seq, key / size]
/// clamped into [0, num_pages).
static Value pageOf(OpBuilder &b, Location loc, Value pageTable, Value seq,
                    Value key, Value pageSize, Value numPages) {
  Value slot = arith::DivUIOp::create(b, loc, key, pageSize);
  Value raw = tensor::ExtractOp::create(b, loc, pageTable, ValueRange{seq, slot});
  Value page = arith::IndexCastOp::create(b, loc, b.getIndexType(), raw);
  Value last = arith::SubIOp::create(b, loc, numPages, cIndex(b, loc, 1));
  page = arith::MaxSIOp::create(b, loc, page, cIndex(b, loc, 0));
  return arith::MinSIOp::create(b, loc, page, last);
}

LogicalResult mlir::fa::attn::decomposePagedView(RewriterBase &rw,
                                                 PagedViewOp op) {
  Location loc = op.getLoc();
  rw.setInsertionPoint(op);
  Value pages = op.getPages(), pageTable = op.getPageTable();
  auto type = cast<RankedTensorType>(op.getResult().getType());
  SmallVector<OpFoldResult> sizes{
      tensor::getMixedSize(rw, loc, pageTable, 0),
      tensor::getMixedSize(rw, loc, pages, 2),
      arith::MulIOp::create(rw, loc, dimValue(rw, loc, pageTable, 1),
                            dimValue(rw, loc, pages, 1))
          .getResult(),
      tensor::getMixedSize(rw, loc, pages, 3)};
  Value init = tensor::EmptyOp::create(rw, loc, sizes, type.getElementType());
  if (init.getType() != type)
    init = tensor::CastOp::create(rw, loc, type, init);
  Value pageSize = dimValue(rw, loc, pages, 1);
  Value numPages = dimValue(rw, loc, pages, 0);
  AffineMap id = rw.getMultiDimIdentityMap(4);
  auto gather = linalg::GenericOp::create(
      rw, loc, TypeRange{type}, ValueRange{}, ValueRange{init},
      ArrayRef<AffineMap>{id}, iterators(4),
      [&](OpBuilder &b, Location l, ValueRange) {
        Value seq = linalg::IndexOp::create(b, l, 0);
        Value head = linalg::IndexOp::create(b, l, 1);
        Value key = linalg::IndexOp::create(b, l, 2);
        Value col = linalg::IndexOp::create(b, l, 3);
        Value page = pageOf(b, l, pageTable, seq, key, pageSize, numPages);
        Value row = arith::RemUIOp::create(b, l, key, pageSize);
        Value x = tensor::ExtractOp::create(b, l, pages,
                                            ValueRange{page, row, head, col});
        linalg::YieldOp::create(b, l, x);
      });
  rw.replaceOp(op, gather.getResult(0));
  return success();
}
