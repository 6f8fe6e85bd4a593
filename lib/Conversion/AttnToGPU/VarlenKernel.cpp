//===- VarlenKernel.cpp - a varlen batch's rows inside a kernel -*- C++ -*-===//

#include "VarlenKernel.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

using namespace mlir;
using namespace mlir::fa::gpu_lowering;

Type mlir::fa::gpu_lowering::cuSeqlensParamType(MLIRContext *ctx) {
  return LLVM::LLVMPointerType::get(ctx, /*addressSpace=*/1);
}

Value mlir::fa::gpu_lowering::loadSequenceOffset(OpBuilder &b, Location loc,
                                                 Value offsets, Value index) {
  Value i64 = arith::IndexCastOp::create(b, loc, b.getI64Type(), index);
  Value address =
      LLVM::GEPOp::create(b, loc, offsets.getType(), b.getI32Type(), offsets,
                          ValueRange{i64});
  // Nothing writes cu_seqlens during the grid: ld.global.nc.
  return LLVM::LoadOp::create(b, loc, b.getI32Type(), address,
                              /*alignment=*/4, /*isVolatile=*/false,
                              /*isNonTemporal=*/false, /*isInvariant=*/true);
}

SequenceRows mlir::fa::gpu_lowering::loadSequenceRows(OpBuilder &b,
                                                      Location loc,
                                                      Value offsets, Value seq,
                                                      Value total) {
  auto clamp = [&](Value v, Value lo, Value hi) -> Value {
    return arith::MinSIOp::create(b, loc, arith::MaxSIOp::create(b, loc, v, lo),
                                  hi);
  };
  auto offsetAt = [&](Value i) -> Value {
    return arith::IndexCastOp::create(b, loc, b.getIndexType(),
                                      loadSequenceOffset(b, loc, offsets, i));
  };
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  Value one = arith::ConstantIndexOp::create(b, loc, 1);
  Value start = clamp(offsetAt(seq), zero, total);
  Value next = arith::AddIOp::create(b, loc, seq, one);
  Value end = clamp(offsetAt(next), start, total);
  return {start, arith::SubIOp::create(b, loc, end, start)};
}
