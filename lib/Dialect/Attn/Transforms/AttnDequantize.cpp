//===- AttnDequantize.cpp - attn-dequantize ---------------------*- C++ -*-===//
//
// The CPU form of the fp8 forward and backward: f8E4M3FN Q, K, V (and dO)
// are decoded and scaled by their descale factors (per batch and key head,
// or per 64-row block) into f32, attention or its backward runs in f32 (the
// naive fp8 reference of the tests is the same arithmetic), and O or dQ,
// dK, dV are rounded to bf16. The GPU path never runs this:
// the sm_90a kernel multiplies fp8 on the tensor cores and applies the factors
// to S and O.
//
//===----------------------------------------------------------------------===//

#include "fa/Dialect/Attn/Transforms/Passes.h"
#include "fa/Dialect/Attn/Transforms/Transforms.h"
#include "Utils.h"

#include <cmath>

namespace mlir::fa::attn {
#define GEN_PASS_DEF_ATTNDEQUANTIZEPASS
#include "fa/Dialect/Attn/Transforms/Passes.h.inc"
} // namespace mlir::fa::attn

using namespace mlir;
using namespace mlir::fa::attn;
using namespace mlir::fa::attn::detail;

/// The f32 value of the e4m3 (OCP "FN") byte `bits` (i8): sign, 4 exponent
/// bits of bias 7, 3 mantissa bits; exponent 0 is subnormal (m·2^-9) and
/// S.1111.111 is NaN (there is no infinity). Written with integer ops so
/// that no fp8 arithmetic reaches the LLVM lowering.
static Value decodeE4M3(OpBuilder &b, Location loc, Value bits) {
  Type i32 = b.getI32Type();
  auto c = [&](int64_t v) {
    return arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(v));
  };
  Value x = arith::ExtUIOp::create(b, loc, i32, bits);
  Value sign = arith::ShLIOp::create(
      b, loc, arith::AndIOp::create(b, loc, x, c(0x80)), c(24));
  Value exp = arith::AndIOp::create(
      b, loc, arith::ShRUIOp::create(b, loc, x, c(3)), c(0xF));
  Value mant = arith::AndIOp::create(b, loc, x, c(0x7));
  // Normal: 2^(e-7)·(1 + m/8) is the f32 of exponent e + 120, mantissa m<<20.
  Value normal = arith::OrIOp::create(
      b, loc,
      arith::ShLIOp::create(b, loc, arith::AddIOp::create(b, loc, exp, c(120)),
                            c(23)),
      arith::ShLIOp::create(b, loc, mant, c(20)));
  Value subnormal = arith::BitcastOp::create(
      b, loc, i32,
      arith::MulFOp::create(b, loc,
                            arith::UIToFPOp::create(b, loc, b.getF32Type(), mant),
                            cF32(b, loc, std::ldexp(1.0, -9))));
  Value isSub =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, exp, c(0));
  Value isNan = arith::CmpIOp::create(
      b, loc, arith::CmpIPredicate::eq, arith::AndIOp::create(b, loc, x, c(0x7F)),
      c(0x7F));
  Value magnitude = arith::SelectOp::create(
      b, loc, isNan, c(0x7FC00000),
      arith::SelectOp::create(b, loc, isSub, subnormal, normal));
  return arith::BitcastOp::create(b, loc, b.getF32Type(),
                                  arith::OrIOp::create(b, loc, sign, magnitude));
}

/// f32 x·descale[b, h / group] of the fp8 tensor `x` [B, H, N, D], or
/// x·descale[b, h / group, n / 64] for a block descale.
static Value dequantize(OpBuilder &b, Location loc, Value x, Value descale,
                        Value group) {
  auto type = cast<RankedTensorType>(x.getType());
  SmallVector<OpFoldResult> sizes = tensor::getMixedSizes(b, loc, x);
  Value empty = tensor::EmptyOp::create(b, loc, sizes, b.getF32Type());
  MLIRContext *ctx = b.getContext();
  AffineMap id = AffineMap::getMultiDimIdentityMap(type.getRank(), ctx);
  return linalg::GenericOp::create(
             b, loc, empty.getType(), ValueRange{x}, ValueRange{empty},
             ArrayRef<AffineMap>{id, id}, iterators(type.getRank()),
             [&](OpBuilder &nb, Location l, ValueRange args) {
               Value bits = arith::BitcastOp::create(nb, l, nb.getI8Type(),
                                                     args[0]);
               Value factor = descaleFactorAt(nb, l, descale, group);
               Value v = arith::MulFOp::create(nb, l, decodeE4M3(nb, l, bits),
                                               factor);
               linalg::YieldOp::create(nb, l, ValueRange{v});
             })
      .getResult(0);
}

/// `x` (f32) rounded element-wise to `elem`.
static Value truncateTo(OpBuilder &b, Location loc, Value x, Type elem) {
  auto type = cast<RankedTensorType>(x.getType());
  Value empty = tensor::EmptyOp::create(b, loc, tensor::getMixedSizes(b, loc, x),
                                        elem);
  AffineMap id = AffineMap::getMultiDimIdentityMap(type.getRank(),
                                                   b.getContext());
  return linalg::GenericOp::create(
             b, loc, empty.getType(), ValueRange{x}, ValueRange{empty},
             ArrayRef<AffineMap>{id, id}, iterators(type.getRank()),
             [&](OpBuilder &nb, Location l, ValueRange args) {
               Value t = arith::TruncFOp::create(nb, l, elem, args[0]);
               linalg::YieldOp::create(nb, l, ValueRange{t});
             })
      .getResult(0);
}

static void dequantizeAttention(IRRewriter &rw, AttentionOp op) {
  Location loc = op.getLoc();
  rw.setInsertionPoint(op);
  Value q = op.getQuery(), k = op.getKey(), v = op.getValue();
  Value group = arith::DivUIOp::create(rw, loc, dimValue(rw, loc, q, 1),
                                       dimValue(rw, loc, k, 1));
  Value one = cIndex(rw, loc, 1);
  // Block descales are per query head; the others per key head.
  Value qf = dequantize(rw, loc, q, op.getDescaleQ(),
                        isBlockDescale(op.getDescaleQ()) ? one : group);
  Value kf = dequantize(rw, loc, k, op.getDescaleK(), one);
  Value vf = dequantize(rw, loc, v, op.getDescaleV(), one);
  auto oType = cast<RankedTensorType>(op.getOutput().getType());
  auto oF32 = RankedTensorType::get(oType.getShape(), rw.getF32Type());
  // The default scale is 1/sqrt(D) of the f32 op as of the fp8 one.
  auto f32Op = AttentionOp::create(
      rw, loc, TypeRange{oF32, op.getLse().getType()}, qf, kf, vf,
      /*cu_seqlens_q=*/Value(), /*cu_seqlens_k=*/Value(), ValueRange{},
      Value(), Value(), Value(), /*sinks=*/Value(), /*page_table=*/Value(),
      /*seqused_k=*/Value(), op.getScaleAttr(),
      op.getMaskAttr(),
      op.getWindowLeftAttr(), op.getWindowRightAttr(), op.getWindowSizes());
  Value o = truncateTo(rw, loc, f32Op.getOutput(), oType.getElementType());
  rw.replaceOp(op, ValueRange{o, f32Op.getLse()});
}

/// `x` (bf16 or f32) as f32.
static Value extendToF32(OpBuilder &b, Location loc, Value x) {
  auto type = cast<RankedTensorType>(x.getType());
  if (type.getElementType().isF32())
    return x;
  Value empty = tensor::EmptyOp::create(
      b, loc, tensor::getMixedSizes(b, loc, x), b.getF32Type());
  AffineMap id =
      AffineMap::getMultiDimIdentityMap(type.getRank(), b.getContext());
  return linalg::GenericOp::create(
             b, loc, empty.getType(), ValueRange{x}, ValueRange{empty},
             ArrayRef<AffineMap>{id, id}, iterators(type.getRank()),
             [&](OpBuilder &nb, Location l, ValueRange args) {
               Value e = arith::ExtFOp::create(nb, l, nb.getF32Type(), args[0]);
               linalg::YieldOp::create(nb, l, ValueRange{e});
             })
      .getResult(0);
}

/// The f32 type of `v`'s shape.
static RankedTensorType f32Like(Value v) {
  auto t = cast<RankedTensorType>(v.getType());
  return RankedTensorType::get(t.getShape(), Float32Type::get(t.getContext()));
}

static void dequantizeBackward(IRRewriter &rw, AttentionBackwardOp op) {
  // Q and dO read the factor of their query head's key head; K and V their
  // own.
  Location loc = op.getLoc();
  rw.setInsertionPoint(op);
  Value q = op.getQuery(), k = op.getKey();
  Value group = arith::DivUIOp::create(rw, loc, dimValue(rw, loc, q, 1),
                                       dimValue(rw, loc, k, 1));
  Value one = cIndex(rw, loc, 1);
  Value qf = dequantize(rw, loc, q, op.getDescaleQ(), group);
  Value kf = dequantize(rw, loc, k, op.getDescaleK(), one);
  Value vf = dequantize(rw, loc, op.getValue(), op.getDescaleV(), one);
  Value dof = dequantize(rw, loc, op.getGradOutput(), op.getDescaleDo(), group);
  Value of = extendToF32(rw, loc, op.getOutput());
  auto f32Op = AttentionBackwardOp::create(
      rw, loc,
      TypeRange{f32Like(op.getGradQuery()), f32Like(op.getGradKey()),
                f32Like(op.getGradValue())},
      qf, kf, vf, of, dof, op.getLse(), /*cu_seqlens_q=*/Value(),
      /*cu_seqlens_k=*/Value(), ValueRange{}, Value(), Value(), Value(),
      Value(), /*sinks=*/Value(), op.getScaleAttr(), op.getMaskAttr(),
      op.getWindowLeftAttr(), op.getWindowRightAttr(), op.getWindowSizes());
  SmallVector<Value> grads;
  for (auto [f32Grad, grad] :
       llvm::zip(f32Op.getResults().take_front(3), op.getResults()))
    grads.push_back(
        truncateTo(rw, loc, f32Grad,
                   cast<RankedTensorType>(grad.getType()).getElementType()));
  rw.replaceOp(op, grads);
}

namespace {
struct AttnDequantizePass final
    : mlir::fa::attn::impl::AttnDequantizePassBase<AttnDequantizePass> {
  void runOnOperation() override {
    IRRewriter rw(&getContext());
    for (AttentionOp op : fp8Attentions(getOperation()))
      dequantizeAttention(rw, op);
    SmallVector<AttentionBackwardOp> backwards;
    getOperation()->walk([&](AttentionBackwardOp op) {
      if (op.getDescaleQ())
        backwards.push_back(op);
    });
    for (AttentionBackwardOp op : backwards)
      dequantizeBackward(rw, op);
  }
};
} // namespace
