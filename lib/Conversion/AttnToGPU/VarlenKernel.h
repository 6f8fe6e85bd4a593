//===- VarlenKernel.h - a varlen batch's rows inside a kernel ---*- C++ -*-===//
//
// A varlen forward runs one CTA per (sequence, head, query block of the
// longest sequence). Its parameters are the packed tensors [T, H, D] (the
// TMA maps are the dense 4-D ones with one batch and the packed strides),
// the token totals as nq, nk, and cu_seqlens_q / cu_seqlens_k (i32 [B+1],
// global pointers read with ld.global.nc). Each CTA reads its sequence's
// rows from them, clamped as attn-tile's IR clamps them (Varlen.h), so a
// bad offset can never address memory outside the packed tensors.
//
//===----------------------------------------------------------------------===//

#ifndef FA_LIB_CONVERSION_ATTNTOGPU_VARLENKERNEL_H
#define FA_LIB_CONVERSION_ATTNTOGPU_VARLENKERNEL_H

#include "mlir/IR/Builders.h"

namespace mlir::fa::gpu_lowering {

/// The type of a cu_seqlens parameter: a pointer into the global space, so
/// that NVPTX turns its invariant loads into ld.global.nc.
Type cuSeqlensParamType(MLIRContext *ctx);

/// Offset `index` (index) of the cu_seqlens at `offsets` (a parameter of
/// cuSeqlensParamType), an i32.
Value loadSequenceOffset(OpBuilder &b, Location loc, Value offsets,
                         Value index);

/// The rows [start, start + length) of sequence `seq` of a packed tensor of
/// `total` rows, clamped to [0, total] and never decreasing.
struct SequenceRows {
  Value start, length; // index
};
SequenceRows loadSequenceRows(OpBuilder &b, Location loc, Value offsets,
                              Value seq, Value total);

} // namespace mlir::fa::gpu_lowering

#endif // FA_LIB_CONVERSION_ATTNTOGPU_VARLENKERNEL_H
