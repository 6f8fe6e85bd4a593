//===- ModArgs.cpp - score_mod tensors as kernel parameters -----*- C++ -*-===//

#include "ModArgs.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

using namespace mlir;
using namespace mlir::fa;
using namespace mlir::fa::gpu_lowering;

SmallVector<RankedTensorType>
mlir::fa::gpu_lowering::modArgTypes(const attn::ScoreSpec &spec) {
  // Both regions take every mod_arg; either names their types.
  SmallVector<RankedTensorType> types;
  ValueRange args;
  if (spec.scoreMod)
    args = spec.scoreMod->front().getArguments().drop_front(
        attn::ScoreSpec::kScoreModPositionArgs);
  else if (spec.maskMod)
    args = spec.maskMod->front().getArguments().drop_front(
        attn::ScoreSpec::kMaskModPositionArgs);
  for (Value arg : args)
    types.push_back(cast<RankedTensorType>(arg.getType()));
  return types;
}

/// A pointer into the global space: NVPTX turns invariant loads through it
/// into ld.global.nc.
static LLVM::LLVMPointerType globalPointer(MLIRContext *ctx) {
  return LLVM::LLVMPointerType::get(ctx, /*addressSpace=*/1);
}

void mlir::fa::gpu_lowering::addModArgParams(KernelParams &params,
                                             MLIRContext *ctx,
                                             const KernelPlan &plan) {
  SmallVector<RankedTensorType> types = modArgTypes(plan.spec);
  if (!types.empty())
    params.modArgParam = static_cast<int32_t>(params.types.size());
  for (RankedTensorType type : types) {
    params.add(globalPointer(ctx));
    for (int64_t d = 0; d < type.getRank(); ++d)
      params.add(IntegerType::get(ctx, 32));
  }
}

attn::ModArgAccess mlir::fa::gpu_lowering::modArgAccess(gpu::GPUFuncOp func,
                                                        const KernelPlan &plan,
                                                        unsigned firstParam) {
  SmallVector<RankedTensorType> types = modArgTypes(plan.spec);
  // Per mod_arg: its pointer parameter, then its extents.
  SmallVector<unsigned> first;
  unsigned next = firstParam;
  for (RankedTensorType t : types) {
    first.push_back(next);
    next += 1 + t.getRank();
  }
  SmallVector<Value> params(func.getArguments());
  auto param = [params](unsigned i) { return params[i]; };
  auto extent = [=](OpBuilder &b, Location loc, unsigned arg, unsigned dim) {
    return arith::IndexCastOp::create(b, loc, b.getIndexType(),
                                      param(first[arg] + 1 + dim))
        .getResult();
  };
  attn::ModArgAccess access;
  access.size = extent;
  access.load = [=](OpBuilder &b, Location loc, unsigned arg,
                    ValueRange indices) -> Value {
    // Row-major: ((i0·n1 + i1)·n2 + i2)…
    Value linear = indices[0];
    for (unsigned d = 1; d < indices.size(); ++d)
      linear = arith::AddIOp::create(
          b, loc,
          arith::MulIOp::create(b, loc, linear, extent(b, loc, arg, d)),
          indices[d]);
    Value offset =
        arith::IndexCastOp::create(b, loc, b.getI64Type(), linear);
    Type elem = types[arg].getElementType();
    auto ptr = globalPointer(b.getContext());
    Value address = LLVM::GEPOp::create(b, loc, ptr, elem, param(first[arg]),
                                        ValueRange{offset});
    return LLVM::LoadOp::create(b, loc, elem, address, /*alignment=*/0,
                                /*isVolatile=*/false, /*isNonTemporal=*/false,
                                /*isInvariant=*/true);
  };
  return access;
}
