//===- Pipelines.h - fa's named pipelines and registration ------*- C++ -*-===//

#ifndef FA_PIPELINES_PIPELINES_H
#define FA_PIPELINES_PIPELINES_H

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace mlir::fa {

/// Options of `fa-lower-to-llvm`.
struct LowerToLLVMOptions : public PassPipelineOptions<LowerToLLVMOptions> {
  PassOptions::Option<int64_t> blockQ{*this, "block-q",
                                      llvm::cl::desc("query rows per tile"),
                                      llvm::cl::init(64)};
  PassOptions::Option<int64_t> blockKV{*this, "block-kv",
                                       llvm::cl::desc("key rows per tile"),
                                       llvm::cl::init(64)};
  PassOptions::Option<bool> deterministic{
      *this, "deterministic",
      llvm::cl::desc("accumulate dQ in a fixed order over key blocks"),
      llvm::cl::init(true)};
};

/// The attn rewrites down to linalg: recompute backward, online softmax,
/// tiling, decomposition, cleanup.
void buildAttnToLinalgPipeline(OpPassManager &pm,
                               const LowerToLLVMOptions &options);

/// attn.attention / attn.attention_backward on tensors → LLVM dialect for the
/// host (bufferised, loops, C interface wrappers for every public function).
void buildLowerToLLVMPipeline(OpPassManager &pm,
                              const LowerToLLVMOptions &options);

/// Dialects and interface models that fa's tools and pipelines use.
void registerDialects(DialectRegistry &registry);

/// Registers fa's passes and named pipelines with the global registry.
void registerPassesAndPipelines();

} // namespace mlir::fa

#endif // FA_PIPELINES_PIPELINES_H
