//===- KernelParams.cpp - the kernels' parameter lists ----------*- C++ -*-===//

#include "KernelParams.h"

#include "Fragments.h"
#include "ModArgs.h"
#include "VarlenKernel.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"

using namespace mlir;
using namespace mlir::fa;
using namespace mlir::fa::gpu_lowering;

unsigned KernelParams::addTensorMap(MLIRContext *ctx) {
  unsigned index = add(LLVM::LLVMPointerType::get(ctx));
  tensorMaps.push_back(static_cast<int32_t>(index));
  return index;
}

void KernelParams::addStrides(MLIRContext *ctx, int tensors) {
  strideParam = static_cast<int32_t>(types.size());
  for (int i = 0; i < tensors * kStridesPerTensor; ++i)
    add(IntegerType::get(ctx, 64));
}

std::array<Value, 3> KernelParams::strides(Block &entry, int tensor) const {
  unsigned first = strideParam + tensor * kStridesPerTensor;
  return {entry.getArgument(first), entry.getArgument(first + 1),
          entry.getArgument(first + 2)};
}

Value mlir::fa::gpu_lowering::loadSink(KernelBuilder &kb, Block &entry,
                                       const KernelParams &params,
                                       Value head) {
  if (params.sinksParam < 0)
    return {};
  return memref::LoadOp::create(kb.b, kb.loc,
                                entry.getArgument(params.sinksParam),
                                ValueRange{head});
}

KernelPlan mlir::fa::gpu_lowering::bindWindowParams(OpBuilder &b, Location loc,
                                                   const KernelPlan &plan,
                                                   Block &entry,
                                                   const KernelParams &params) {
  KernelPlan bound = plan;
  if (params.windowParam < 0)
    return bound;
  // Unsigned, a negative size is above any length: one min per side.
  Value most = arith::MaxUIOp::create(b, loc, entry.getArgument(params.nqParam),
                                      entry.getArgument(params.nqParam + 1));
  auto size = [&](unsigned side) -> Value {
    Value s = arith::MinUIOp::create(
        b, loc, entry.getArgument(params.windowParam + side), most);
    return arith::IndexCastUIOp::create(b, loc, b.getIndexType(), s);
  };
  bound.spec.windowLeftValue = size(0);
  bound.spec.windowRightValue = size(1);
  return bound;
}

KernelParams mlir::fa::gpu_lowering::mainKernelParams(MLIRContext *ctx,
                                                      const KernelPlan &plan) {
  return plan.backward ? backwardMainParams(ctx, plan)
                       : forwardParams(ctx, plan);
}

KernelParamIndices mlir::fa::kernelParamIndices(MLIRContext *ctx,
                                               const KernelPlan &plan) {
  KernelParams main = mainKernelParams(ctx, plan);
  KernelParamIndices at;
  if (!main.tensorMaps.empty())
    at.tensorMap = main.tensorMaps.front();
  at.descale = main.descaleParam;
  at.stride = main.strideParam;
  at.cuSeqlens = main.cuSeqlensParam;
  at.blockMask = main.blockMaskParam;
  at.pageTable = main.pageTableParam;
  at.modArg = main.modArgParam;
  at.semaphore = main.semaphoreParam;
  at.window = main.windowParam;
  // A split forward's sinks are fa_merge's (its partials have none).
  at.sinks = plan.splitKv ? mergeParams(ctx, plan).sinksParam
                          : main.sinksParam;
  return at;
}

/// Appends a plan's run-time window sizes (the last parameters).
static void addWindowSizes(KernelParams &p, MLIRContext *ctx,
                           const KernelPlan &plan) {
  if (!plan.spec.runtimeWindow())
    return;
  p.windowParam = static_cast<int32_t>(p.types.size());
  p.add(IntegerType::get(ctx, 32)); // left
  p.add(IntegerType::get(ctx, 32)); // right
}

/// `count` flat global tensors of element type `type`.
static void addTensors(KernelParams &p, Type type, int count) {
  for (int i = 0; i < count; ++i)
    p.add(flatMemRef(type));
}

/// `count` i32 sizes.
static void addSizes(KernelParams &p, MLIRContext *ctx, int count) {
  for (int i = 0; i < count; ++i)
    p.add(IntegerType::get(ctx, 32));
}

KernelParams mlir::fa::gpu_lowering::forwardParams(MLIRContext *ctx,
                                                   const KernelPlan &plan) {
  KernelParams p;
  addTensors(p, plan.elemType, 3); // q, k, v
  // o; a split writes its partial O in f32 (the workspace).
  addTensors(p, plan.splitKv ? Float32Type::get(ctx) : plan.outputElemType(),
             1);
  addTensors(p, Float32Type::get(ctx), 1); // lse
  addSizes(p, ctx, 5);                     // batch, heads, kv_heads, nq, nk
  p.nqParam = static_cast<int32_t>(p.types.size()) - 2;
  p.add(Float32Type::get(ctx));            // scale
  if (plan.splitKv)
    addSizes(p, ctx, 1); // the split count, last
  if (plan.strategy == MmaStrategy::Wgmma) {
    for (int i = 0; i < 3; ++i) // q, k, v
      p.addTensorMap(ctx);
    if (plan.persistent)
      p.add(LLVM::LLVMPointerType::get(ctx)); // tile counter
    if (plan.isFp8()) {
      p.descaleParam = static_cast<int32_t>(p.types.size());
      addTensors(p, Float32Type::get(ctx), 3); // descale q, k, v [B, Hkv]
    }
  }
  if (plan.tma) { // the split forward's producer loads K and V by TMA
    p.addTensorMap(ctx);
    p.addTensorMap(ctx);
  }
  p.addStrides(ctx, plan.splitKv ? 3 : 4); // q, k, v (, o)
  if (plan.varlen) {
    p.cuSeqlensParam = static_cast<int32_t>(p.types.size());
    p.add(cuSeqlensParamType(ctx)); // cu_seqlens_q
    p.add(cuSeqlensParamType(ctx)); // cu_seqlens_k
  }
  if (plan.paged) {
    p.pageTableParam = static_cast<int32_t>(p.types.size());
    p.add(cuSeqlensParamType(ctx)); // page_table (i32, global)
    p.add(cuSeqlensParamType(ctx)); // seqused_k (i32, global)
    addSizes(p, ctx, 3);            // max_pages, page_size, num_pages
  }
  if (plan.blockSparse) {
    p.blockMaskParam = static_cast<int32_t>(p.types.size());
    p.add(cuSeqlensParamType(ctx)); // block_mask (i32, global)
    addSizes(p, ctx, 1);            // mask_heads
  }
  addModArgParams(p, ctx, plan);
  // A split forward's partials are computed without the sinks: the merge
  // takes them.
  if (plan.sinks && !plan.splitKv) {
    p.sinksParam = static_cast<int32_t>(p.types.size());
    addTensors(p, Float32Type::get(ctx), 1); // sinks
  }
  addWindowSizes(p, ctx, plan);
  return p;
}

KernelParams mlir::fa::gpu_lowering::backwardSinkParams(MLIRContext *ctx,
                                                        const KernelPlan &plan) {
  KernelParams p;
  addTensors(p, Float32Type::get(ctx), 4); // lse, delta, sinks, d_sinks
  addSizes(p, ctx, 3);                     // batch, heads, nq
  if (plan.varlen) { // LSE and Delta [H, Tq]: the rows before cu_seqlens_q[B]
    p.cuSeqlensParam = static_cast<int32_t>(p.types.size());
    p.add(cuSeqlensParamType(ctx));
  }
  return p;
}

KernelParams mlir::fa::gpu_lowering::backwardPreParams(MLIRContext *ctx,
                                                       const KernelPlan &plan) {
  KernelParams p;
  addTensors(p, plan.outputElemType(), 1); // o (bf16 for fp8)
  // do; fp8 bytes as i8, decoded by cvt (no f8 type reaches LLVM).
  addTensors(p, plan.isFp8() ? IntegerType::get(ctx, 8) : plan.elemType, 1);
  addTensors(p, Float32Type::get(ctx), 2); // delta, dq_accum
  addSizes(p, ctx, 3);                     // batch, heads, nq
  p.addStrides(ctx, 2);                    // o, do
  if (plan.isFp8()) { // dO's factors [B, Hkv]: Delta of the dequantised dO
    p.descaleParam = static_cast<int32_t>(p.types.size());
    addTensors(p, Float32Type::get(ctx), 1); // descale_do
    addSizes(p, ctx, 1);                     // kv_heads
  }
  return p;
}

KernelParams mlir::fa::gpu_lowering::backwardMainParams(MLIRContext *ctx,
                                                        const KernelPlan &plan) {
  KernelParams p;
  addTensors(p, plan.elemType, 4);         // q, k, v, do
  addTensors(p, Float32Type::get(ctx), 3); // lse, delta, dq_accum
  addTensors(p, plan.outputElemType(), 2); // dk, dv (bf16 for fp8)
  addSizes(p, ctx, 5);                     // batch, heads, kv_heads, nq, nk
  p.nqParam = static_cast<int32_t>(p.types.size()) - 2;
  p.add(Float32Type::get(ctx));            // scale
  if (plan.warpSpecialized)
    for (int i = 0; i < 4; ++i) // q, k, v, do
      p.addTensorMap(ctx);
  if (plan.isFp8()) {
    p.descaleParam = static_cast<int32_t>(p.types.size());
    addTensors(p, Float32Type::get(ctx), 4); // descale q, k, v, do [B, Hkv]
  }
  if (plan.deterministic)
    p.semaphoreParam = static_cast<int32_t>(
        p.add(LLVM::LLVMPointerType::get(ctx))); // dQ semaphores
  p.addStrides(ctx, 6); // q, k, v, do, dk, dv
  if (plan.varlen) {
    p.cuSeqlensParam = static_cast<int32_t>(p.types.size());
    p.add(cuSeqlensParamType(ctx)); // cu_seqlens_q
    p.add(cuSeqlensParamType(ctx)); // cu_seqlens_k
  }
  if (plan.blockSparse) {
    p.blockMaskParam = static_cast<int32_t>(p.types.size());
    p.add(cuSeqlensParamType(ctx)); // block_mask (i32, global)
    addSizes(p, ctx, 1);            // mask_heads
  }
  addModArgParams(p, ctx, plan);
  addWindowSizes(p, ctx, plan); // last
  return p;
}

KernelParams mlir::fa::gpu_lowering::backwardPostParams(MLIRContext *ctx,
                                                        const KernelPlan &plan) {
  KernelParams p;
  addTensors(p, Float32Type::get(ctx), 1); // dq_accum
  addTensors(p, plan.outputElemType(), 1); // dq (bf16 for fp8)
  addSizes(p, ctx, 3);                     // batch, heads, nq
  p.addStrides(ctx, 1);                    // dq
  return p;
}

KernelParams mlir::fa::gpu_lowering::kvAppendParams(MLIRContext *ctx,
                                                    const KernelPlan &plan) {
  KernelParams p;
  addTensors(p, plan.elemType, 6); // k_new, v_new, k/v caches, q, q_out
  addTensors(p, IntegerType::get(ctx, 32), 2); // cache_seqlens, page_table
  addTensors(p, Float32Type::get(ctx), 2);     // cos, sin
  addSizes(p, ctx, kAppendParamCount - kAppendBatch);
  return p;
}

KernelParams mlir::fa::gpu_lowering::quantizeParams(MLIRContext *ctx,
                                                    const KernelPlan &plan) {
  KernelParams p;
  addTensors(p, plan.quantizeSourceType(ctx), 1); // x
  addTensors(p, IntegerType::get(ctx, 8), 1);     // x8
  addTensors(p, Float32Type::get(ctx), 2);        // amax, descale
  addSizes(p, ctx, kQuantParamCount - kQuantBatch);
  return p;
}

KernelParams mlir::fa::gpu_lowering::mergeParams(MLIRContext *ctx,
                                                 const KernelPlan &plan) {
  KernelParams p;
  addTensors(p, Float32Type::get(ctx), 2); // o_part, lse_part (the workspace)
  addTensors(p, plan.elemType, 1);         // o
  addTensors(p, Float32Type::get(ctx), 1); // lse
  addSizes(p, ctx, 4); // rows (B·H·Nq), splits, heads, nq
  p.addStrides(ctx, 1); // o
  if (plan.sinks) {
    p.sinksParam = static_cast<int32_t>(p.types.size());
    addTensors(p, Float32Type::get(ctx), 1); // sinks, last
  }
  return p;
}
