//===- OnlineSoftmaxMath.h - the online-softmax arithmetic ------*- C++ -*-===//
//
// The arithmetic of seed 4.2.2 and of Delta (4.3) on f32 values, written once
// for both targets: the CPU decomposition calls it inside linalg bodies, the
// GPU lowering on register fragments. Maxima are in base-2 units, so the
// scale·log2(e) factor is one multiply (or one FMA) before exp2. Only the
// reductions (linalg reductions, lane shuffles) and exp2/log2 (math ops,
// ex2.approx) differ by target and are the caller's.
//
//===----------------------------------------------------------------------===//

#ifndef FA_DIALECT_ATTN_TRANSFORMS_ONLINESOFTMAXMATH_H
#define FA_DIALECT_ATTN_TRANSFORMS_ONLINESOFTMAXMATH_H

#include "mlir/IR/Builders.h"

#include <functional>

namespace mlir::fa::attn {

/// Builds the online-softmax terms with the target's exp2 and log2.
struct OnlineSoftmaxMath {
  OpBuilder &b;
  Location loc;
  std::function<Value(Value)> exp2;
  std::function<Value(Value)> log2;

  /// With the math dialect's exp2 and log2 (the CPU decomposition).
  static OnlineSoftmaxMath withMathOps(OpBuilder &b, Location loc);

  /// What the exponents subtract for a row whose running max is `max`: the
  /// max itself, or 0 while the row has seen no visible key (max = −inf), so
  /// that 2^(−inf − (−inf)) never appears and α and P are exactly 0.
  Value exponentBase(Value max);

  /// α = 2^(m_old − base(m_new)): the factor by which l and acc shrink when
  /// the running max grows.
  Value rescaleFactor(Value oldMax, Value base);

  /// P = 2^(t − base) for a score t already in base-2 units.
  Value probability(Value t, Value base);

  /// P = 2^(s·scaleLog2 − base) for a raw score s: scale·log2(e) folded into
  /// one FMA with the negated base `negBase`.
  Value probabilityFolded(Value s, Value scaleLog2, Value negBase);

  /// The finalisation of a row from its max m and sum l: (1/l, LSE) with
  /// LSE = ln2·(m + log2 l); a row that saw no key (l = 0) gives 1/l = 0
  /// (so O = 0) and LSE = −inf.
  std::pair<Value, Value> finalizeRow(Value max, Value sum);

  /// finalizeRow with an attention sink: the logit `sink` (natural units)
  /// joins the finished row (m, l) once, as one more key without a value:
  /// m' = max(m, sink·log2e), α = 2^(m − m'), l' = α·l + 2^(sink·log2e − m').
  /// Returns (α/l', LSE = ln2·(m' + log2 l')), so O = acc·α/l'. Exact for
  /// any common base of (m, l, acc) (also a lazily rescaled one); a row with
  /// no visible key gives O = 0 and LSE = sink, a sink of −inf changes
  /// nothing.
  std::pair<Value, Value> finalizeRowWithSink(Value max, Value sum,
                                              Value sink);

  /// The term of row (b, q) in d sink_h = −Σ e^{sink_h − LSE}·Delta:
  /// −2^((sink − LSE)·log2e)·Delta, or 0 for a row with LSE = −inf.
  Value sinkGradientTerm(Value sink, Value lse, Value delta);

  /// The backward's base for recomputing P = 2^(s·scale·log2e − LSE·log2e):
  /// LSE·log2(e), or +inf for a row that saw no key (LSE = −inf), so that
  /// its P is exactly 0.
  Value lseBase2(Value lse);
  /// −lseBase2(lse): the addend of probabilityFolded's exponent (−inf for a
  /// row that saw no key).
  Value exponentAddend(Value lse);

  /// The weight of a partial result with log-sum-exp `lse` in a merge
  /// whose largest partial LSE is `maxLse` (natural units):
  /// w = 2^((lse − base(maxLse))·log2e), so a partial that saw no key
  /// (lse = −inf) weighs exactly 0, also when every partial is empty.
  Value mergeWeight(Value lse, Value maxLse);

  /// The finalisation of a merged row from its largest partial LSE M and
  /// weight sum W: (1/W, LSE = M + ln W); a row no partial saw (W = 0)
  /// gives 1/W = 0 (so O = 0) and LSE = −inf.
  std::pair<Value, Value> finalizeMerge(Value maxLse, Value weightSum);

  /// dS = P∘(dP − Delta)·dscore: the softmax gradient of one score element,
  /// dscore being scale or the score_mod chain factor d(score)/d(S), or
  /// null where P carries it already.
  Value scoreGradient(Value p, Value dp, Value delta, Value dscore);
  /// The same with the scale joined to Delta ahead (negScaledDelta =
  /// −Delta·scale, once a row): P∘(dP·scale − Delta·scale), one FMA and one
  /// multiply an element.
  Value scoreGradientScaledDelta(Value p, Value dp, Value negScaledDelta,
                                 Value scale);
};

/// One term of Delta = rowsum(dO∘O): ext(O)·ext(dO) in f32, for scalars or
/// vectors of the input element type.
Value buildDeltaTerm(OpBuilder &b, Location loc, Value o, Value dO);

} // namespace mlir::fa::attn

#endif // FA_DIALECT_ATTN_TRANSFORMS_ONLINESOFTMAXMATH_H
