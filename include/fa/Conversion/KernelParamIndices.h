//===- KernelParamIndices.h - where a kernel's parameters start -*- C++ -*-===//
//
// Shared by the kernel builders' parameter lists (lib/Conversion), the bundle
// manifest (lib/Compiler) and, through the manifest, the runtime; no MLIR
// types, so the compiler's public headers can carry it.
//
//===----------------------------------------------------------------------===//

#ifndef FA_CONVERSION_KERNELPARAMINDICES_H
#define FA_CONVERSION_KERNELPARAMINDICES_H

#include <cstdint>

namespace mlir::fa {

/// Where the optional parameter groups of fa_fwd (fa_bwd) start, from the
/// parameter list the kernel is built with; -1 where the plan has none. The
/// bundle manifest's "*_param" fields (docs/ABI.md): one source for the
/// kernels, the manifest and, through it, the runtime.
struct KernelParamIndices {
  int64_t tensorMap = -1; ///< sm_90a TMA: the first tensor map (q's)
  int64_t descale = -1;   ///< fp8: descale_q, descale_k, descale_v
  int64_t stride = -1;    ///< the strides (3 per tensor)
  int64_t cuSeqlens = -1; ///< varlen: cu_seqlens_q, cu_seqlens_k
  int64_t blockMask = -1; ///< block-sparse: block_mask, mask_heads
  int64_t pageTable = -1; ///< paged: page_table, seqused_k, 3 sizes
  int64_t sinks = -1;     ///< sinks (fa_merge's for a split forward)
  int64_t modArg = -1;    ///< the first mod_arg
  int64_t semaphore = -1; ///< deterministic: the dQ semaphores
  int64_t window = -1;    ///< run-time windows: left, right
};

/// Rows of the boxes of a paged TMA decode kernel's pool maps (manifest
/// "box"): a 16-key group never straddles a page, whose size is a multiple
/// of 16.
constexpr int64_t kPagedTmaBoxRows = 16;

} // namespace mlir::fa

#endif // FA_CONVERSION_KERNELPARAMINDICES_H
