//===- Passes.h - attn passes -----------------------------------*- C++ -*-===//

#ifndef FA_DIALECT_ATTN_TRANSFORMS_PASSES_H
#define FA_DIALECT_ATTN_TRANSFORMS_PASSES_H

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Pass/Pass.h"

namespace mlir::fa::attn {

#define GEN_PASS_DECL
#include "fa/Dialect/Attn/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "fa/Dialect/Attn/Transforms/Passes.h.inc"

} // namespace mlir::fa::attn

#endif // FA_DIALECT_ATTN_TRANSFORMS_PASSES_H
