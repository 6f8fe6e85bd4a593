//===- fa-opt.cpp - mlir-opt for the attn dialect ---------------*- C++ -*-===//
//
// Registers the attn dialect, fa's passes and pipelines, and the upstream
// dialects and passes needed to write and inspect the IR they produce.
//
//===----------------------------------------------------------------------===//

#include "fa/Pipelines/Pipelines.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/Affine/Transforms/Passes.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/Bufferization/Pipelines/Passes.h"
#include "mlir/Dialect/Bufferization/Transforms/Passes.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Dialect/SCF/Transforms/Passes.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  mlir::fa::registerDialects(registry);
  mlir::fa::registerPassesAndPipelines();
  mlir::registerTransformsPasses();
  mlir::registerLinalgPasses();
  mlir::registerSCFPasses();
  mlir::bufferization::registerBufferizationPasses();
  mlir::bufferization::registerBufferizationPipelines();
  mlir::memref::registerMemRefPasses();
  mlir::arith::registerArithPasses();
  mlir::affine::registerAffinePasses();
  mlir::registerConversionPasses();
  mlir::registerGPUPasses();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "fa optimizer driver\n", registry));
}
