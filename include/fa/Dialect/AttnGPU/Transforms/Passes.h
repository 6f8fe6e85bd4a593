//===- Passes.h - attn_gpu schedule passes ----------------------*- C++ -*-===//

#ifndef FA_DIALECT_ATTNGPU_TRANSFORMS_PASSES_H
#define FA_DIALECT_ATTNGPU_TRANSFORMS_PASSES_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::fa::attn_gpu {

#define GEN_PASS_DECL
#include "fa/Dialect/AttnGPU/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "fa/Dialect/AttnGPU/Transforms/Passes.h.inc"

} // namespace mlir::fa::attn_gpu

#endif // FA_DIALECT_ATTNGPU_TRANSFORMS_PASSES_H
