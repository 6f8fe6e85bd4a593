//===- SplitKv.h - the kernels of a split-KV plan ---------------*- C++ -*-===//
//
// A split-KV plan (KernelPlan::splitKv) lowers to the mma.sync forward with
// a split grid dimension, writing partial (O, LSE) rows to a workspace, and
// a merge kernel joining them (docs/ABI.md); their parameter lists are
// KernelParams.h's.
//
//===----------------------------------------------------------------------===//

#ifndef FA_LIB_CONVERSION_ATTNTOGPU_SPLITKV_H
#define FA_LIB_CONVERSION_ATTNTOGPU_SPLITKV_H

#include "fa/Conversion/AttnToGPU.h"

namespace mlir::fa {

/// Emits `fa_merge_<tag>` into `module`: one warp per output row, grid
/// (ceil(rows / warps), 1, 1).
gpu::GPUFuncOp buildMergeKernel(OpBuilder &b, Location loc,
                                gpu::GPUModuleOp module, const KernelPlan &plan);

/// Emits `fa_kv_append_<tag>` into `module` (KvAppendKernel.cpp): one
/// thread per element of the new keys (grid y = 0), values (1) and, with
/// rotary, queries (2); grid x covers the largest.
gpu::GPUFuncOp buildKvAppendKernel(OpBuilder &b, Location loc,
                                   gpu::GPUModuleOp module,
                                   const KernelPlan &plan);

} // namespace mlir::fa

#endif // FA_LIB_CONVERSION_ATTNTOGPU_SPLITKV_H
