//===- Wgmma.cpp - sm_90a warpgroup MMA building blocks ---------*- C++ -*-===//

#include "Wgmma.h"

#include "fa/Dialect/AttnGPU/IR/AttnGPU.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

using namespace mlir;
namespace ag = mlir::fa::attn_gpu;
using namespace mlir::fa::gpu_lowering;

static Value i64(OpBuilder &b, Location loc, int64_t v) {
  return arith::ConstantOp::create(b, loc, b.getI64IntegerAttr(v));
}

Type mlir::fa::gpu_lowering::wgmmaAccType(OpBuilder &b, int64_t n) {
  return LLVM::LLVMStructType::getLiteral(
      b.getContext(), SmallVector<Type>(n, b.getF32Type()));
}

SmallVector<Value> mlir::fa::gpu_lowering::unpackStruct(OpBuilder &b,
                                                        Location loc, Value s,
                                                        int64_t n) {
  SmallVector<Value> v;
  for (int64_t i = 0; i < n; ++i)
    v.push_back(LLVM::ExtractValueOp::create(b, loc, s, ArrayRef<int64_t>{i}));
  return v;
}

SmallVector<Value>
mlir::fa::gpu_lowering::fenceOperands(OpBuilder &b, Location loc,
                                      ArrayRef<Value> vals) {
  const int64_t n = vals.size();
  std::string constraints;
  for (int64_t i = 0; i < n; ++i)
    constraints += (i ? ",=f" : "=f");
  for (int64_t i = 0; i < n; ++i)
    constraints += "," + std::to_string(i);
  return unpackStruct(
      b, loc, inlinePtx(b, loc, wgmmaAccType(b, n), "", vals, constraints), n);
}

void mlir::fa::gpu_lowering::namedBarrier(OpBuilder &b, Location loc,
                                          StringRef op, int64_t id,
                                          int64_t threads) {
  // The id stays an immediate (one held in a register makes ptxas reserve
  // all 16 barriers); the memory clobber keeps shared-memory accesses on
  // their side.
  std::string text =
      (op + " " + llvm::Twine(id) + ", " + llvm::Twine(threads) + ";").str();
  inlinePtx(b, loc, text);
}

Value mlir::fa::gpu_lowering::packI32(KernelBuilder &kb, Value lo, Value hi) {
  Value v = kb.truncPair(lo, hi);
  v = vector::BitCastOp::create(kb.b, kb.loc,
                                VectorType::get({1}, kb.b.getI32Type()), v);
  return vector::ExtractOp::create(kb.b, kb.loc, v, ArrayRef<int64_t>{0});
}

Value mlir::fa::gpu_lowering::sharedAddress(KernelBuilder &kb) {
  return arith::IndexCastUIOp::create(
      kb.b, kb.loc, kb.b.getI64Type(),
      memref::ExtractAlignedPointerAsIndexOp::create(kb.b, kb.loc, kb.smem));
}

Value mlir::fa::gpu_lowering::tmaMap(KernelBuilder &kb, Value ptr,
                                     int64_t rows, int64_t rank) {
  OpBuilder &b = kb.b;
  SmallVector<int64_t> shape(rank - 2, 1);
  shape.append({rows, kSlabCols});
  // In 16-bit units: an fp8 box of 128 columns is typed as 64 pairs, as the
  // shared tiles are (the runtime encodes the map's real element type).
  auto box = MemRefType::get(shape, kb.plan.outputElemType(),
                             MemRefLayoutAttrInterface(),
                             b.getI64IntegerAttr(3));
  auto type = nvgpu::TensorMapDescriptorType::get(
      b.getContext(), box, nvgpu::TensorMapSwizzleKind::SWIZZLE_128B,
      nvgpu::TensorMapL2PromoKind::L2PROMO_256B,
      nvgpu::TensorMapOOBKind::OOB_ZERO,
      nvgpu::TensorMapInterleaveKind::INTERLEAVE_NONE);
  return UnrealizedConversionCastOp::create(b, kb.loc, type, ptr).getResult(0);
}

void mlir::fa::gpu_lowering::prefetchTensorMap(KernelBuilder &kb, Value map) {
  prefetchTensorMapAt(
      kb.b, kb.loc,
      map.getDefiningOp<UnrealizedConversionCastOp>().getOperand(0));
}

void mlir::fa::gpu_lowering::prefetchTensorMapAt(OpBuilder &b, Location loc,
                                                 Value ptr) {
  inlinePtx(b, loc, "prefetch.tensormap [$0];", ValueRange{ptr}, "l");
}

void mlir::fa::gpu_lowering::tmaLoadTile(KernelBuilder &kb, Value group,
                                         Value map, int64_t rows, int64_t cols,
                                         Value byteBase, Value row,
                                         ArrayRef<Value> outer, Value barrier) {
  OpBuilder &b = kb.b;
  Location loc = kb.loc;
  // A last box partly past the head dim (D = 96) is still whole in shared
  // memory: TMA writes its out-of-bounds columns as zeros and counts them
  // in the transaction bytes.
  const int64_t slabs = llvm::divideCeil(cols, kSlabCols);
  nvgpu::MBarrierArriveExpectTxOp::create(
      b, loc, group, kb.idx(rows * slabs * kSlabCols * 2), barrier, Value());
  // A box-shaped view of the shared buffer at each slab.
  const size_t outerDims = outer.size();
  SmallVector<int64_t> shape(outerDims, 1), strides(outerDims,
                                                     rows * kSlabCols);
  shape.append({rows, kSlabCols});
  strides.append({kSlabCols, 1});
  auto slabType = MemRefType::get(
      shape, cast<MemRefType>(kb.smem.getType()).getElementType(),
      StridedLayoutAttr::get(b.getContext(), ShapedType::kDynamic, strides),
      b.getI64IntegerAttr(3));
  SmallVector<OpFoldResult> sizes(outerDims, b.getIndexAttr(1)),
      viewStrides(outerDims, b.getIndexAttr(rows * kSlabCols));
  sizes.append({b.getIndexAttr(rows), b.getIndexAttr(kSlabCols)});
  viewStrides.append({b.getIndexAttr(kSlabCols), b.getIndexAttr(1)});
  for (int64_t slab = 0; slab < slabs; ++slab) {
    Value elemOffset =
        kb.divui(kb.add(byteBase, slab * rows * kSlabRowBytes), 2);
    Value dst = memref::ReinterpretCastOp::create(
        b, loc, slabType, kb.smem, OpFoldResult(elemOffset), sizes,
        viewStrides);
    // The map's columns are elements: 128 per slab for fp8.
    int64_t slabElems = kb.plan.isFp8() ? 2 * kSlabCols : kSlabCols;
    SmallVector<Value> coords{kb.idx(slab * slabElems), row};
    coords.append(outer.begin(), outer.end());
    nvgpu::TmaAsyncLoadOp::create(b, loc, dst, group, map, coords, barrier,
                                  Value(), Value());
  }
}

Value mlir::fa::gpu_lowering::wgmmaDescriptorBase(KernelBuilder &kb) {
  OpBuilder &b = kb.b;
  Location loc = kb.loc;
  Value base = sharedAddress(kb);
  // 128 B swizzle (bits 62-63 = 1), SBO = 1024 B (bits 32-45).
  int64_t hi = (int64_t(1) << 62) | (int64_t(1024 >> 4) << 32);
  // The start field holds 14 bits of (addr >> 4); shared offsets stay below
  // 256 KB, so base + tile offset never carries out of it.
  Value start = arith::AndIOp::create(
      b, loc, arith::ShRUIOp::create(b, loc, base, i64(b, loc, 4)),
      i64(b, loc, 0x3FFF));
  return arith::OrIOp::create(b, loc, i64(b, loc, hi), start);
}

Value mlir::fa::gpu_lowering::wgmmaDescriptor(KernelBuilder &kb,
                                              Value descBase, Value byteOffset,
                                              int64_t lbo) {
  OpBuilder &b = kb.b;
  Location loc = kb.loc;
  // Start address (>> 4) in bits 0-13, LBO (>> 4) in bits 16-29; the shared
  // buffer ends below 228 KB, so the start never carries into bit 14.
  Value off = arith::IndexCastUIOp::create(b, loc, b.getI64Type(), byteOffset);
  Value start = arith::ShRUIOp::create(b, loc, off, i64(b, loc, 4));
  Value d = arith::AddIOp::create(b, loc, descBase, start);
  d = arith::AddIOp::create(b, loc, d, i64(b, loc, (lbo >> 4) << 16));
  // Pinned by a side-effecting copy where it is built, before wgmma.fence:
  // LLVM would otherwise sink the arithmetic between the fence and the wgmma
  // (ptxas then serialises the wgmmas) or hoist loop-invariant descriptors
  // out of the loop (64-bit registers held across it).
  return opaqueI64(kb, d);
}

Value mlir::fa::gpu_lowering::opaqueI64(KernelBuilder &kb, Value v) {
  return inlinePtx(kb.b, kb.loc, kb.b.getI64Type(), "mov.b64 $0, $1;",
                   ValueRange{v}, "=l,l");
}

static NVVM::WGMMATypes wgmmaType(KernelBuilder &kb) {
  if (kb.plan.isFp8())
    return NVVM::WGMMATypes::e4m3;
  return kb.plan.elemType.isBF16() ? NVVM::WGMMATypes::bf16
                                   : NVVM::WGMMATypes::f16;
}

Value mlir::fa::gpu_lowering::issueWgmmaShared(KernelBuilder &kb, int64_t n,
                                               ArrayRef<Value> aDescs,
                                               ArrayRef<Value> bDescs,
                                               NVVM::MMALayout layoutA,
                                               NVVM::MMALayout layoutB) {
  OpBuilder &b = kb.b;
  Location loc = kb.loc;
  NVVM::WGMMATypes ty = wgmmaType(kb);
  Type accTy = wgmmaAccType(b, n / 2);
  Value acc = LLVM::PoisonOp::create(b, loc, accTy);
  const int64_t k = kb.plan.isFp8() ? 32 : 16;
  for (int64_t ks = 0; ks < static_cast<int64_t>(aDescs.size()); ++ks)
    acc = NVVM::WgmmaMmaAsyncOp::create(
        b, loc, accTy, acc, aDescs[ks], bDescs[ks],
        NVVM::MMAShapeAttr::get(b.getContext(), 64, n, k), ty, ty,
        NVVM::WGMMATypes::f32,
        ks == 0 ? NVVM::WGMMAScaleOut::zero : NVVM::WGMMAScaleOut::one,
        NVVM::WGMMAScaleIn::one, NVVM::WGMMAScaleIn::one, layoutA, layoutB,
        /*satfinite=*/nullptr);
  return acc;
}

SmallVector<Value> mlir::fa::gpu_lowering::issueWgmmaRegisterA(
    KernelBuilder &kb, ArrayRef<Value> a, ArrayRef<Value> bDescs,
    ArrayRef<Value> acc) {
  // MLIR's wgmma op takes A only from shared memory: register A goes
  // through inline PTX. Operands: $0..$(n-1) accumulators (tied inputs
  // after), a0-a3, the B descriptor. scale-d is a predicate set from an
  // immediate: a register defined between wgmma.fence and the wgmma would
  // make ptxas serialise the wgmma pipeline (C7513). 8-bit wgmma (fp8
  // plans) has k = 32 and no transpose immediate (both operands K-major).
  OpBuilder &b = kb.b;
  Location loc = kb.loc;
  const int64_t n = acc.size();
  const bool fp8 = kb.plan.isFp8();
  std::string ab = fp8 ? "e4m3" : kb.plan.elemType.isBF16() ? "bf16" : "f16";
  std::string outs;
  for (int64_t i = 0; i < n; ++i)
    outs += (i ? ", $" : "$") + std::to_string(i);
  std::string asmText =
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned.m64n" +
      std::to_string(2 * n) + (fp8 ? "k32" : "k16") + ".f32." + ab + "." + ab +
      " {" + outs + "}, {$" + std::to_string(n) + ", $" +
      std::to_string(n + 1) + ", $" + std::to_string(n + 2) + ", $" +
      std::to_string(n + 3) + "}, $" + std::to_string(n + 4) +
      (fp8 ? ", p, 1, 1;\n}" : ", p, 1, 1, 1;\n}");
  std::string constraints;
  for (int64_t i = 0; i < n; ++i)
    constraints += (i ? ",=f" : "=f");
  constraints += ",r,r,r,r,l";
  for (int64_t i = 0; i < n; ++i)
    constraints += "," + std::to_string(i);

  SmallVector<Value> cur(acc);
  for (int64_t kk = 0; kk < static_cast<int64_t>(bDescs.size()); ++kk) {
    SmallVector<Value> operands(a.begin() + kk * 4, a.begin() + kk * 4 + 4);
    operands.push_back(bDescs[kk]);
    operands.append(cur);
    cur = unpackStruct(
        b, loc,
        inlinePtx(b, loc, wgmmaAccType(b, n), asmText, operands, constraints),
        n);
  }
  return cur;
}

SmallVector<Value>
mlir::fa::gpu_lowering::accumulatorToWgmmaA(KernelBuilder &kb,
                                            ArrayRef<Value> c) {
  SmallVector<Value> a;
  for (int64_t n = 0; n < static_cast<int64_t>(c.size()) / 4; ++n) {
    a.push_back(packI32(kb, c[n * 4], c[n * 4 + 1]));
    a.push_back(packI32(kb, c[n * 4 + 2], c[n * 4 + 3]));
  }
  return a;
}

Value mlir::fa::gpu_lowering::createBarrierGroup(KernelBuilder &kb,
                                                 int64_t count) {
  MLIRContext *ctx = kb.b.getContext();
  auto groupType = nvgpu::MBarrierGroupType::get(
      ctx, gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup),
      count);
  return nvgpu::MBarrierCreateOp::create(kb.b, kb.loc, groupType);
}

void mlir::fa::gpu_lowering::initBarrier(KernelBuilder &kb, Value group,
                                         int64_t index, int64_t arrivals) {
  nvgpu::MBarrierInitOp::create(kb.b, kb.loc, group, kb.idx(arrivals),
                                kb.idx(index), Value());
}

void mlir::fa::gpu_lowering::waitBarrier(KernelBuilder &kb, Value group,
                                         int64_t first, Value slot,
                                         Value parity) {
  nvgpu::MBarrierTryWaitParityOp::create(kb.b, kb.loc, group, parity,
                                         kb.idx(10000000),
                                         kb.add(slot, first));
}

void mlir::fa::gpu_lowering::arriveBarrier(KernelBuilder &kb, Value group,
                                           int64_t first, Value slot) {
  auto tokenType = nvgpu::MBarrierTokenType::get(kb.b.getContext());
  nvgpu::MBarrierArriveOp::create(kb.b, kb.loc, tokenType, group,
                                  kb.add(slot, first));
}

Value BarrierRing::slot32(KernelBuilder &kb, Value iteration) const {
  return kb.toIndex(
      arith::RemUIOp::create(kb.b, kb.loc, iteration, kb.c32(stages)));
}

/// Bit 0 of the i32 round of `iteration` plus `plus` as an i1.
static Value roundParity32(KernelBuilder &kb, Value iteration, int64_t stages,
                           int64_t plus) {
  Value round = arith::DivUIOp::create(kb.b, kb.loc, iteration, kb.c32(stages));
  if (plus)
    round = arith::AddIOp::create(kb.b, kb.loc, round, kb.c32(plus));
  return arith::TruncIOp::create(kb.b, kb.loc, kb.b.getI1Type(), round);
}

Value BarrierRing::fullParity32(KernelBuilder &kb, Value iteration) const {
  return roundParity32(kb, iteration, stages, 0);
}

Value BarrierRing::emptyParity32(KernelBuilder &kb, Value iteration) const {
  return roundParity32(kb, iteration, stages, 1);
}

Value mlir::fa::gpu_lowering::phaseParity(KernelBuilder &kb, Value v) {
  return arith::IndexCastUIOp::create(kb.b, kb.loc, kb.b.getI1Type(),
                                      kb.remui(v, 2));
}

ag::FragmentType mlir::fa::gpu_lowering::accumulatorType(MLIRContext *ctx,
                                                         int64_t cols) {
  return ag::FragmentType::get(ctx, 16, cols, Float32Type::get(ctx),
                               ag::FragmentLayout::Accumulator);
}

Value mlir::fa::gpu_lowering::buildWgmmaQK(KernelBuilder &kb, int64_t n,
                                           ArrayRef<Value> aDescs,
                                           ArrayRef<Value> bDescs,
                                           bool mnMajor) {
  auto op = ag::WgmmaQKOp::create(kb.b, kb.loc,
                                  accumulatorType(kb.b.getContext(), n),
                                  aDescs, bDescs,
                                  TypeAttr::get(kb.plan.elemType));
  op.setMnMajor(mnMajor);
  return op;
}

SmallVector<Value> mlir::fa::gpu_lowering::buildWgmmaPV(KernelBuilder &kb,
                                                        ArrayRef<Value> a,
                                                        ArrayRef<Value> bDescs,
                                                        ArrayRef<Value> acc) {
  auto type = accumulatorType(kb.b.getContext(), 2 * acc.size());
  Value accFragment = fragmentOf(kb.b, kb.loc, acc, type.getCols(),
                                 type.getLayout());
  Value result = ag::WgmmaPVOp::create(kb.b, kb.loc, type, a, bDescs,
                                       accFragment,
                                       TypeAttr::get(kb.plan.elemType));
  return laneValues(kb.b, kb.loc, result);
}

SmallVector<Value> mlir::fa::gpu_lowering::laneValues(OpBuilder &b,
                                                      Location loc,
                                                      Value fragment) {
  auto type = cast<ag::FragmentType>(fragment.getType());
  SmallVector<Type> lanes(type.getLaneValueCount(), b.getF32Type());
  return SmallVector<Value>(
      UnrealizedConversionCastOp::create(b, loc, lanes, fragment)
          .getResults());
}

Value mlir::fa::gpu_lowering::fragmentOf(OpBuilder &b, Location loc,
                                         ArrayRef<Value> lanes, int64_t cols,
                                         ag::FragmentLayout layout) {
  auto type = ag::FragmentType::get(b.getContext(), 16, cols, b.getF32Type(),
                                    layout);
  assert(type.getLaneValueCount() == static_cast<int64_t>(lanes.size()) &&
         "a fragment's lane values");
  return UnrealizedConversionCastOp::create(b, loc, type, lanes).getResult(0);
}

SmallVector<Type>
mlir::fa::gpu_lowering::keyBoundsLaneTypes(ag::KeyBoundsType type) {
  MLIRContext *ctx = type.getContext();
  Type i32 = IntegerType::get(ctx, 32);
  // tileHi stays an index without a mask (Softmax.cpp: rowKeyBounds).
  SmallVector<Type> lanes{type.getRight() ? i32 : IndexType::get(ctx)};
  if (type.getLeft())
    lanes.append(3, i32);
  if (type.getRight())
    lanes.append(2, i32);
  return lanes;
}

RowKeyBounds mlir::fa::gpu_lowering::unpackKeyBounds(ValueRange lanes,
                                                     ag::KeyBoundsType type) {
  RowKeyBounds bounds{};
  bounds.tileHi = lanes[0];
  unsigned i = 1;
  if (type.getLeft()) {
    bounds.lo[0] = lanes[i++], bounds.lo[1] = lanes[i++];
    bounds.tileLo = lanes[i++];
  }
  if (type.getRight())
    bounds.hi[0] = lanes[i++], bounds.hi[1] = lanes[i++];
  return bounds;
}

RowKeyBounds mlir::fa::gpu_lowering::keyBoundsLanes(OpBuilder &b,
                                                    Location loc,
                                                    Value bounds) {
  auto type = cast<ag::KeyBoundsType>(bounds.getType());
  auto lanes = UnrealizedConversionCastOp::create(
      b, loc, keyBoundsLaneTypes(type), bounds);
  return unpackKeyBounds(lanes.getResults(), type);
}
