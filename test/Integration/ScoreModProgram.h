//===- ScoreModProgram.h - random score_mod programs ------------*- C++ -*-===//
//
// Random score_mod regions for fa-check: expression trees over every op the
// backward has a derivative rule for, with the score, constants and the
// indices as leaves. A program prints as the region fa compiles and
// evaluates in float64 (value and derivative with respect to the score) for
// the reference, so both sides read the same tree.
//
//===----------------------------------------------------------------------===//

#ifndef FA_TEST_INTEGRATION_SCOREMODPROGRAM_H
#define FA_TEST_INTEGRATION_SCOREMODPROGRAM_H

#include <array>
#include <cstdint>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace fa_check {

/// One op of a program; `Index` is an index argument cast to f32 and scaled.
enum class ModOp {
  Score, Const, Index, Add, Sub, Mul, Div, Neg, CmpF, Select,
  MaximumF, MinimumF, MaxNumF, MinNumF, Tanh, Exp, Exp2, Log, Sqrt, Abs
};

/// The arith.cmpf predicates programs use.
enum class Cmp { OGT, OGE, OLT, OLE };

/// One SSA value of a program. Operands name earlier nodes.
struct ModNode {
  ModOp op;
  int lhs = -1, rhs = -1, cond = -1;
  double constant = 0; // Const: the value; Index: the multiplier
  int position = 0;    // Index: 0..3 for b, h, q_idx, kv_idx
  Cmp predicate = Cmp::OGT;
  bool readsScore = false;
};

/// A value and its derivative with respect to the score.
struct Dual {
  double value = 0, deriv = 0;
};

/// Rounding applied to every node (the identity for the f64 reference).
using Round = std::function<double(double)>;

/// (b, h, q_idx, kv_idx) of one score element.
using Position = std::array<int64_t, 4>;

class ScoreModProgram {
public:
  /// A random program of depth at most `depth` that reads the score;
  /// `maxIndex` is the largest value each index takes in the problem.
  static ScoreModProgram random(std::mt19937_64 &rng, const Position &maxIndex,
                                int depth);

  /// The region's text: `^bb0(...)` through `attn.yield`.
  std::string regionBody() const;

  /// Value and derivative at `score`, every node rounded by `round`. `flip`
  /// names a node that takes the other side of its kink (abs, max/min, a
  /// score-dependent comparison), for bounding what an ambiguous kink costs.
  Dual evaluate(double score, const Position &pos, const Round &round,
                int flip = -1) const;

  /// The score-dependent kinks at `score` whose sides differ in slope and
  /// that lie within `tolerance` relative to their operands plus what a
  /// change of the score by `scoreStep` moves them: f32 and f64, or the two
  /// points of a difference quotient, may take different sides of them.
  std::vector<int> nearKinks(double score, const Position &pos,
                             double tolerance, double scoreStep = 0) const;

  /// Σ |value| over the program's values at `score`: the scale of the
  /// rounding error of evaluating it in f32 (amplification aside).
  double magnitude(double score, const Position &pos) const;

  /// The ops the program holds (for coverage and case descriptions).
  std::set<ModOp> ops() const;
  size_t size() const { return nodes.size(); }

private:
  std::vector<ModNode> nodes; // SSA order; the last one is yielded
  friend class ProgramGenerator;
};

/// The name of `op` as it appears in the region (e.g. "math.exp2").
const char *opName(ModOp op);

/// The ops a program may use: those the backward has a rule for.
std::set<ModOp> differentiableOps();

} // namespace fa_check

#endif // FA_TEST_INTEGRATION_SCOREMODPROGRAM_H
