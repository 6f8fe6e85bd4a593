//===- OnlineSoftmaxMath.cpp - the online-softmax arithmetic ----*- C++ -*-===//

#include "fa/Dialect/Attn/Transforms/OnlineSoftmaxMath.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::fa::attn;

static Value f32Constant(OpBuilder &b, Location loc, double v) {
  return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v));
}

OnlineSoftmaxMath OnlineSoftmaxMath::withMathOps(OpBuilder &b,
                                                 Location loc) {
  return {b, loc,
          [&b, loc](Value x) -> Value { return math::Exp2Op::create(b, loc, x); },
          [&b, loc](Value x) -> Value { return math::Log2Op::create(b, loc, x); }};
}

Value OnlineSoftmaxMath::exponentBase(Value max) {
  Value none = arith::CmpFOp::create(
      b, loc, arith::CmpFPredicate::OEQ, max,
      f32Constant(b, loc, -std::numeric_limits<double>::infinity()));
  return arith::SelectOp::create(b, loc, none, f32Constant(b, loc, 0.0), max);
}

Value OnlineSoftmaxMath::rescaleFactor(Value oldMax, Value base) {
  return exp2(arith::SubFOp::create(b, loc, oldMax, base));
}

Value OnlineSoftmaxMath::probability(Value t, Value base) {
  return exp2(arith::SubFOp::create(b, loc, t, base));
}

Value OnlineSoftmaxMath::probabilityFolded(Value s, Value scaleLog2,
                                           Value negBase) {
  return exp2(LLVM::FMAOp::create(b, loc, s, scaleLog2, negBase));
}

std::pair<Value, Value> OnlineSoftmaxMath::finalizeRow(Value max, Value sum) {
  Value empty = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, sum,
                                      f32Constant(b, loc, 0.0));
  Value inv = arith::DivFOp::create(b, loc, f32Constant(b, loc, 1.0), sum);
  Value invSum = arith::SelectOp::create(b, loc, empty,
                                         f32Constant(b, loc, 0.0), inv);
  Value lse2 = arith::AddFOp::create(b, loc, max, log2(sum));
  Value lse = arith::MulFOp::create(b, loc, lse2, f32Constant(b, loc, M_LN2));
  lse = arith::SelectOp::create(
      b, loc, empty,
      f32Constant(b, loc, -std::numeric_limits<double>::infinity()), lse);
  return {invSum, lse};
}

std::pair<Value, Value>
OnlineSoftmaxMath::finalizeRowWithSink(Value max, Value sum, Value sink) {
  Value sink2 = arith::MulFOp::create(b, loc, sink, f32Constant(b, loc, M_LOG2E));
  Value joined = arith::MaximumFOp::create(b, loc, max, sink2);
  Value base = exponentBase(joined);
  Value alpha = rescaleFactor(max, base);
  Value sinkTerm = probability(sink2, base);
  Value sumJoined = arith::AddFOp::create(
      b, loc, arith::MulFOp::create(b, loc, alpha, sum), sinkTerm);
  auto [invSum, lse] = finalizeRow(joined, sumJoined);
  return {arith::MulFOp::create(b, loc, alpha, invSum), lse};
}

Value OnlineSoftmaxMath::sinkGradientTerm(Value sink, Value lse, Value delta) {
  Value empty = arith::CmpFOp::create(
      b, loc, arith::CmpFPredicate::OEQ, lse,
      f32Constant(b, loc, -std::numeric_limits<double>::infinity()));
  Value diff = arith::SubFOp::create(b, loc, sink, lse);
  Value p = exp2(arith::MulFOp::create(b, loc, diff, f32Constant(b, loc, M_LOG2E)));
  Value term = arith::NegFOp::create(b, loc, arith::MulFOp::create(b, loc, p, delta));
  return arith::SelectOp::create(b, loc, empty, f32Constant(b, loc, 0.0), term);
}

Value OnlineSoftmaxMath::lseBase2(Value lse) {
  const double inf = std::numeric_limits<double>::infinity();
  Value empty = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, lse,
                                      f32Constant(b, loc, -inf));
  Value lse2 = arith::MulFOp::create(b, loc, lse, f32Constant(b, loc, M_LOG2E));
  return arith::SelectOp::create(b, loc, empty, f32Constant(b, loc, inf), lse2);
}

Value OnlineSoftmaxMath::exponentAddend(Value lse) {
  return arith::NegFOp::create(b, loc, lseBase2(lse));
}

Value OnlineSoftmaxMath::mergeWeight(Value lse, Value maxLse) {
  Value diff = arith::SubFOp::create(b, loc, lse, exponentBase(maxLse));
  return exp2(arith::MulFOp::create(b, loc, diff, f32Constant(b, loc, M_LOG2E)));
}

std::pair<Value, Value> OnlineSoftmaxMath::finalizeMerge(Value maxLse,
                                                         Value weightSum) {
  Value empty = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ,
                                      weightSum, f32Constant(b, loc, 0.0));
  Value inv = arith::DivFOp::create(b, loc, f32Constant(b, loc, 1.0), weightSum);
  Value invSum = arith::SelectOp::create(b, loc, empty,
                                         f32Constant(b, loc, 0.0), inv);
  Value lnSum = arith::MulFOp::create(b, loc, log2(weightSum),
                                      f32Constant(b, loc, M_LN2));
  Value lse = arith::AddFOp::create(b, loc, maxLse, lnSum);
  lse = arith::SelectOp::create(
      b, loc, empty,
      f32Constant(b, loc, -std::numeric_limits<double>::infinity()), lse);
  return {invSum, lse};
}

Value OnlineSoftmaxMath::scoreGradient(Value p, Value dp, Value delta,
                                       Value dscore) {
  Value diff = arith::SubFOp::create(b, loc, dp, delta);
  Value ds = arith::MulFOp::create(b, loc, p, diff);
  return dscore ? arith::MulFOp::create(b, loc, ds, dscore) : ds;
}

Value OnlineSoftmaxMath::scoreGradientScaledDelta(Value p, Value dp,
                                                  Value negScaledDelta,
                                                  Value scale) {
  return arith::MulFOp::create(
      b, loc, p, LLVM::FMAOp::create(b, loc, dp, scale, negScaledDelta));
}

Value mlir::fa::attn::buildDeltaTerm(OpBuilder &b, Location loc, Value o,
                                     Value dO) {
  auto toF32 = [&](Value v) -> Value {
    Type f32 = b.getF32Type();
    if (auto vec = dyn_cast<VectorType>(v.getType()))
      f32 = VectorType::get(vec.getShape(), f32);
    if (v.getType() == f32)
      return v;
    return arith::ExtFOp::create(b, loc, f32, v);
  };
  // dO is extended first: the order the recorded GPU kernels were built in.
  Value dOF32 = toF32(dO);
  return arith::MulFOp::create(b, loc, toF32(o), dOF32);
}
