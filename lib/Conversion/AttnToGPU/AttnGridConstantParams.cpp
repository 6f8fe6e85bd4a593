//===- AttnGridConstantParams.cpp - attn-grid-constant-params ---*- C++ -*-===//
//
// Turns the tensor-map parameters a kernel lists in fa.grid_constant_params
// into by-value __grid_constant__ parameters of its llvm.func. gpu.func
// cannot carry the attributes (its lowering drops argument attributes and
// the NVVM verifier wants byval beside grid_constant), so they are set here,
// once the kernel is an llvm.func.
//
//===----------------------------------------------------------------------===//

#include "Fragments.h"
#include "KernelParams.h"
#include "fa/Conversion/Passes.h"

namespace mlir::fa {
#define GEN_PASS_DEF_ATTNGRIDCONSTANTPARAMSPASS
#include "fa/Conversion/Passes.h.inc"
} // namespace mlir::fa

using namespace mlir;
using namespace mlir::fa;
using namespace mlir::fa::gpu_lowering;

/// Replaces every use of parameter `index` of `func` with its generic
/// address computed just before the user.
static void addressAtEachUse(LLVM::LLVMFuncOp func, unsigned index) {
  BlockArgument param = func.getArgument(index);
  std::string text = ("mov.b64 $0, " + func.getSymName() + "_param_" +
                      Twine(index) + ";\n\tcvta.param.u64 $0, $0;")
                         .str();
  for (OpOperand &use : llvm::make_early_inc_range(param.getUses())) {
    OpBuilder b(use.getOwner());
    Location loc = use.getOwner()->getLoc();
    // Side effects keep LLVM from hoisting it back to the entry.
    Value address =
        gpu_lowering::inlinePtx(b, loc, b.getI64Type(), text, {}, "=l");
    use.set(LLVM::IntToPtrOp::create(b, loc, param.getType(), address));
  }
}

namespace {
struct AttnGridConstantParamsPass final
    : fa::impl::AttnGridConstantParamsPassBase<AttnGridConstantParamsPass> {
  void runOnOperation() override {
    LLVM::LLVMFuncOp func = getOperation();
    auto listed = func->getAttrOfType<DenseI32ArrayAttr>(
        kGridConstantParamsAttr);
    if (!listed)
      return;
    MLIRContext *ctx = func.getContext();
    Builder b(ctx);
    Type mapBytes =
        LLVM::LLVMArrayType::get(IntegerType::get(ctx, 8), kTensorMapBytes);
    for (int32_t index : listed.asArrayRef()) {
      if (index < 0 || index >= static_cast<int32_t>(func.getNumArguments()) ||
          !isa<LLVM::LLVMPointerType>(func.getArgument(index).getType())) {
        func.emitOpError("expected ")
            << kGridConstantParamsAttr << " to list !llvm.ptr parameters, got "
            << index << " of " << func.getNumArguments() << " parameters";
        return signalPassFailure();
      }
      func.setArgAttr(index, LLVM::LLVMDialect::getByValAttrName(),
                      TypeAttr::get(mapBytes));
      func.setArgAttr(index, LLVM::LLVMDialect::getAlignAttrName(),
                      b.getI64IntegerAttr(64));
      func.setArgAttr(index, NVVM::NVVMDialect::getGridConstantAttrName(),
                      b.getUnitAttr());
      addressAtEachUse(func, index);
    }
    func->removeAttr(kGridConstantParamsAttr);
  }
};
} // namespace
