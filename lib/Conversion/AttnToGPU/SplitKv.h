//===- SplitKv.h - the kernels of a split-KV plan ---------------*- C++ -*-===//
//
// A split-KV plan (KernelPlan::splitKv) lowers to the mma.sync forward with
// a split grid dimension, writing partial (O, LSE) rows to a workspace, and
// a merge kernel joining them (docs/ABI.md). The parameter lists of the
// forward kernels are built here, in one place.
//
//===----------------------------------------------------------------------===//

#ifndef FA_LIB_CONVERSION_ATTNTOGPU_SPLITKV_H
#define FA_LIB_CONVERSION_ATTNTOGPU_SPLITKV_H

#include "fa/Conversion/AttnToGPU.h"

namespace mlir::fa {

/// The parameters of the mma.sync `fa_fwd_<tag>`: q, k, v, o, lse; batch,
/// heads, kv_heads, nq, nk: i32; scale: f32. A split-KV forward takes o as
/// the f32 partial-O workspace and lse as the partial-LSE workspace, and the
/// split count (i32) last.
SmallVector<Type> forwardKernelParams(MLIRContext *ctx, const KernelPlan &plan);

/// The parameters of `fa_merge_<tag>`: o_part, lse_part (f32 workspace),
/// o (element type), lse (f32); rows = batch·heads·nq, splits: i32.
SmallVector<Type> splitKvMergeParams(MLIRContext *ctx, const KernelPlan &plan);

/// Emits `fa_merge_<tag>` into `module`: one warp per output row, grid
/// (ceil(rows / warps), 1, 1).
gpu::GPUFuncOp buildMergeKernel(OpBuilder &b, Location loc,
                                gpu::GPUModuleOp module, const KernelPlan &plan);

} // namespace mlir::fa

#endif // FA_LIB_CONVERSION_ATTNTOGPU_SPLITKV_H
