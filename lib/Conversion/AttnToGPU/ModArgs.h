//===- ModArgs.h - score_mod tensors as kernel parameters -------*- C++ -*-===//
//
// The mod_args of a score_mod or mask_mod reach the kernels that evaluate scores (fa_fwd,
// fa_bwd) as parameters after every other one (docs/ABI.md): per mod_arg, a
// global pointer to its row-major elements, then its extents as i32.
//
//===----------------------------------------------------------------------===//

#ifndef FA_LIB_CONVERSION_ATTNTOGPU_MODARGS_H
#define FA_LIB_CONVERSION_ATTNTOGPU_MODARGS_H

#include "KernelParams.h"
#include "fa/Dialect/Attn/Transforms/Transforms.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"

namespace mlir::fa::gpu_lowering {

/// The mod_arg types of `spec` (its score_mod's or mask_mod's block
/// arguments after kv_idx).
SmallVector<RankedTensorType> modArgTypes(const attn::ScoreSpec &spec);

/// Appends the mod_arg parameters of `plan`: a pointer and the extents of
/// each mod_arg.
void addModArgParams(KernelParams &params, MLIRContext *ctx,
                     const KernelPlan &plan);

/// Reads of the mod_args from the parameters of `func` from `first` on
/// (KernelParams::modArgParam): extents from its i32 parameters, elements
/// by invariant loads from the global space (ld.global.nc, the read-only
/// path).
attn::ModArgAccess modArgAccess(gpu::GPUFuncOp func, const KernelPlan &plan,
                                unsigned first);

} // namespace mlir::fa::gpu_lowering

#endif // FA_LIB_CONVERSION_ATTNTOGPU_MODARGS_H
