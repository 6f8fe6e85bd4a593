//===- ScoreModProgram.cpp - random score_mod programs ----------*- C++ -*-===//
//
// Generation keeps every value finite and moderate without clamping: each
// subtree carries a bound on its magnitude, logs and square roots see
// x·x + 1 or |x| + 1, divisors are x·x + 1, |x| + 1 or exp(tanh x), exp
// and exp2 take a raw operand only when it is small (exp(tanh x) otherwise),
// and an operand that would push a bound past kMaxBound is squashed by
// tanh. Score-dependent selects choose between the two values they compare
// (a max or min written with arith.cmpf), so the score_mod stays continuous
// and f32 and f64 can only disagree near a kink, which the checker bounds.
//
//===----------------------------------------------------------------------===//

#include "ScoreModProgram.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

using namespace fa_check;

namespace {
/// A nominal bound on the scaled score (unit-variance inputs give scores of
/// roughly unit variance); the bounds only steer generation.
constexpr double kScoreBound = 4;
/// Largest magnitude a subtree may reach before an operand is squashed.
constexpr double kMaxBound = 16;
/// exp/exp2 take their operand raw below this bound.
constexpr double kRawExpBound = 2.5;
/// Smaller programs are drawn again: a few ops test little.
constexpr size_t kMinValues = 6;
} // namespace

const char *fa_check::opName(ModOp op) {
  switch (op) {
  case ModOp::Score: return "score";
  case ModOp::Const: return "arith.constant";
  case ModOp::Index: return "index";
  case ModOp::Add: return "arith.addf";
  case ModOp::Sub: return "arith.subf";
  case ModOp::Mul: return "arith.mulf";
  case ModOp::Div: return "arith.divf";
  case ModOp::Neg: return "arith.negf";
  case ModOp::CmpF: return "arith.cmpf";
  case ModOp::Select: return "arith.select";
  case ModOp::MaximumF: return "arith.maximumf";
  case ModOp::MinimumF: return "arith.minimumf";
  case ModOp::MaxNumF: return "arith.maxnumf";
  case ModOp::MinNumF: return "arith.minnumf";
  case ModOp::Tanh: return "math.tanh";
  case ModOp::Exp: return "math.exp";
  case ModOp::Exp2: return "math.exp2";
  case ModOp::Log: return "math.log";
  case ModOp::Sqrt: return "math.sqrt";
  case ModOp::Abs: return "math.absf";
  }
  return "";
}

std::set<ModOp> fa_check::differentiableOps() {
  return {ModOp::Add,      ModOp::Sub,      ModOp::Mul,     ModOp::Div,
          ModOp::Neg,      ModOp::CmpF,     ModOp::Select,  ModOp::MaximumF,
          ModOp::MinimumF, ModOp::MaxNumF,  ModOp::MinNumF, ModOp::Tanh,
          ModOp::Exp,      ModOp::Exp2,     ModOp::Log,     ModOp::Sqrt,
          ModOp::Abs};
}

static const char *predicateName(Cmp p) {
  switch (p) {
  case Cmp::OGT: return "ogt";
  case Cmp::OGE: return "oge";
  case Cmp::OLT: return "olt";
  case Cmp::OLE: return "ole";
  }
  return "";
}

//===----------------------------------------------------------------------===//
// Generation
//===----------------------------------------------------------------------===//

namespace fa_check {
/// Builds a program bottom-up; every subtree returns its node and a bound on
/// its magnitude.
class ProgramGenerator {
public:
  ProgramGenerator(std::mt19937_64 &rng, const Position &maxIndex)
      : rng(rng), maxIndex(maxIndex) {}

  struct Sub {
    int node;
    double bound;
  };

  Sub tree(int depth) {
    if (depth == 0 || uniform(0, 7) == 0)
      return leaf();
    switch (uniform(0, 12)) {
    case 0: return sum(ModOp::Add, depth);
    case 1: return sum(ModOp::Sub, depth);
    case 2: return product(depth);
    case 3: return quotient(depth);
    case 4: return unary(ModOp::Neg, tree(depth - 1));
    case 5: return unary(ModOp::Abs, tree(depth - 1));
    case 6: return squash(tree(depth - 1));
    case 7: return exponential(ModOp::Exp, tree(depth - 1));
    case 8: return exponential(ModOp::Exp2, tree(depth - 1));
    case 9: return logarithm(tree(depth - 1));
    case 10: return squareRoot(tree(depth - 1));
    case 11: return extremum(depth);
    default: return select(depth);
    }
  }

  std::vector<ModNode> nodes;

private:
  int64_t uniform(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  }

  int add(ModNode n) {
    for (int operand : {n.lhs, n.rhs, n.cond})
      if (operand >= 0)
        n.readsScore |= nodes[operand].readsScore;
    n.readsScore |= n.op == ModOp::Score;
    nodes.push_back(n);
    return int(nodes.size()) - 1;
  }
  Sub make(ModOp op, int lhs, int rhs, double bound) {
    ModNode n{op};
    n.lhs = lhs;
    n.rhs = rhs;
    return {add(n), bound};
  }

  Sub leaf() {
    switch (uniform(0, 3)) {
    case 0:
    case 1: return {add(ModNode{ModOp::Score}), kScoreBound};
    case 2: return constant(double(uniform(-32, 32)) / 16);
    default: return indexLeaf();
    }
  }
  /// Multiples of 1/16 are exact in f16 and bf16, so the naive baseline
  /// sees the same constants.
  Sub constant(double v) {
    ModNode n{ModOp::Const};
    n.constant = v;
    return {add(n), std::fabs(v)};
  }
  /// An index times a power of two that keeps it within 4.
  Sub indexLeaf() {
    ModNode n{ModOp::Index};
    n.position = int(uniform(0, 3));
    double largest = double(maxIndex[n.position]), scale = 1;
    while (largest * scale > 4)
      scale /= 2;
    n.constant = uniform(0, 1) ? scale : -scale;
    return {add(n), largest * scale};
  }

  Sub unary(ModOp op, Sub a) { return make(op, a.node, -1, a.bound); }
  Sub squash(Sub a) { return make(ModOp::Tanh, a.node, -1, 1); }
  /// Squashes the larger operand until `bound(a, b)` is within kMaxBound.
  template <typename Bound> void fit(Sub &a, Sub &b, Bound bound) {
    while (bound(a.bound, b.bound) > kMaxBound)
      (a.bound >= b.bound ? a : b) = squash(a.bound >= b.bound ? a : b);
  }

  Sub sum(ModOp op, int depth) {
    Sub a = tree(depth - 1), b = tree(depth - 1);
    fit(a, b, [](double x, double y) { return x + y; });
    return make(op, a.node, b.node, a.bound + b.bound);
  }
  Sub product(int depth) {
    Sub a = tree(depth - 1), b = tree(depth - 1);
    fit(a, b, [](double x, double y) { return x * y; });
    return make(ModOp::Mul, a.node, b.node, a.bound * b.bound);
  }
  /// A value >= `lower` > 0 made from `x`: x·x + 1, |x| + 1 or exp(tanh x).
  Sub positive(Sub x, double &lower) {
    lower = 1;
    switch (uniform(0, 2)) {
    case 0: {
      if (x.bound > 4)
        x = squash(x);
      Sub square = make(ModOp::Mul, x.node, x.node, x.bound * x.bound);
      return make(ModOp::Add, square.node, constant(1).node, square.bound + 1);
    }
    case 1: {
      Sub a = unary(ModOp::Abs, x);
      return make(ModOp::Add, a.node, constant(1).node, a.bound + 1);
    }
    default:
      lower = std::exp(-1.0);
      return make(ModOp::Exp, squash(x).node, -1, std::exp(1.0));
    }
  }
  Sub quotient(int depth) {
    Sub a = tree(depth - 1);
    double lower;
    Sub den = positive(tree(depth - 1), lower);
    if (a.bound / lower > kMaxBound)
      a = squash(a);
    return make(ModOp::Div, a.node, den.node, a.bound / lower);
  }
  Sub exponential(ModOp op, Sub a) {
    if (a.bound > kRawExpBound)
      a = squash(a);
    double bound = op == ModOp::Exp ? std::exp(a.bound) : std::exp2(a.bound);
    return make(op, a.node, -1, bound);
  }
  Sub logarithm(Sub a) {
    double lower;
    Sub arg = positive(a, lower);
    return make(ModOp::Log, arg.node, -1, std::log(arg.bound) + 1);
  }
  Sub squareRoot(Sub a) {
    double lower;
    Sub arg = positive(a, lower);
    return make(ModOp::Sqrt, arg.node, -1, std::sqrt(arg.bound));
  }
  Sub extremum(int depth) {
    Sub a = tree(depth - 1), b = tree(depth - 1);
    ModOp ops[] = {ModOp::MaximumF, ModOp::MinimumF, ModOp::MaxNumF,
                   ModOp::MinNumF};
    return make(ops[uniform(0, 3)], a.node, b.node,
                std::max(a.bound, b.bound));
  }
  Sub comparison(Sub a, Sub b) {
    ModNode n{ModOp::CmpF};
    n.predicate = static_cast<Cmp>(uniform(0, 3));
    n.lhs = a.node;
    n.rhs = b.node;
    return {add(n), 1};
  }
  /// Either a max/min spelt as cmpf + select on the two compared values, or
  /// a choice between any two values on a comparison of indices (exact in
  /// every precision).
  Sub select(int depth) {
    Sub a = tree(depth - 1), b = tree(depth - 1);
    ModNode n{ModOp::Select};
    if (uniform(0, 1)) {
      n.cond = comparison(a, b).node;
    } else {
      Sub lhs = indexLeaf();
      Sub rhs = uniform(0, 1) ? indexLeaf() : constant(double(uniform(-32, 32)) / 16);
      n.cond = comparison(lhs, rhs).node;
    }
    bool swap = uniform(0, 1);
    n.lhs = swap ? b.node : a.node;
    n.rhs = swap ? a.node : b.node;
    return {add(n), std::max(a.bound, b.bound)};
  }

  std::mt19937_64 &rng;
  Position maxIndex;
};
} // namespace fa_check

ScoreModProgram ScoreModProgram::random(std::mt19937_64 &rng,
                                        const Position &maxIndex, int depth) {
  for (;;) {
    ProgramGenerator gen(rng, maxIndex);
    gen.tree(depth);
    const ModNode &root = gen.nodes.back();
    bool isLeaf = root.op == ModOp::Score || root.op == ModOp::Const ||
                  root.op == ModOp::Index;
    if (isLeaf || !root.readsScore || gen.nodes.size() < kMinValues)
      continue;
    ScoreModProgram p;
    p.nodes = std::move(gen.nodes);
    return p;
  }
}

//===----------------------------------------------------------------------===//
// Region text
//===----------------------------------------------------------------------===//

static std::string valueName(const std::vector<ModNode> &nodes, int n) {
  return nodes[n].op == ModOp::Score ? "%s" : "%v" + std::to_string(n);
}

static std::string f32Literal(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.9e", v);
  return buf;
}

std::string ScoreModProgram::regionBody() const {
  static const char *indexArgs[] = {"%b", "%h", "%i", "%j"};
  std::ostringstream os;
  os << "^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):\n";
  for (int n = 0; n < int(nodes.size()); ++n) {
    const ModNode &node = nodes[n];
    std::string v = valueName(nodes, n);
    auto operand = [&](int i) { return valueName(nodes, i); };
    switch (node.op) {
    case ModOp::Score:
      break;
    case ModOp::Const:
      os << "  " << v << " = arith.constant " << f32Literal(node.constant)
         << " : f32\n";
      break;
    case ModOp::Index:
      os << "  " << v << "i = arith.index_cast " << indexArgs[node.position]
         << " : index to i64\n"
         << "  " << v << "f = arith.sitofp " << v << "i : i64 to f32\n"
         << "  " << v << "m = arith.constant " << f32Literal(node.constant)
         << " : f32\n"
         << "  " << v << " = arith.mulf " << v << "f, " << v << "m : f32\n";
      break;
    case ModOp::CmpF:
      os << "  " << v << " = arith.cmpf " << predicateName(node.predicate)
         << ", " << operand(node.lhs) << ", " << operand(node.rhs) << " : f32\n";
      break;
    case ModOp::Select:
      os << "  " << v << " = arith.select " << operand(node.cond) << ", "
         << operand(node.lhs) << ", " << operand(node.rhs) << " : f32\n";
      break;
    default:
      os << "  " << v << " = " << opName(node.op) << " " << operand(node.lhs);
      if (node.rhs >= 0)
        os << ", " << operand(node.rhs);
      os << " : f32\n";
    }
  }
  os << "  attn.yield " << valueName(nodes, int(nodes.size()) - 1)
     << " : f32\n";
  return os.str();
}

//===----------------------------------------------------------------------===//
// Float64 evaluation
//===----------------------------------------------------------------------===//

static bool compare(Cmp p, double a, double b) {
  switch (p) {
  case Cmp::OGT: return a > b;
  case Cmp::OGE: return a >= b;
  case Cmp::OLT: return a < b;
  case Cmp::OLE: return a <= b;
  }
  return false;
}

/// Value and derivative of one node from its operands' (the calculus
/// written out independently of fa's derivative rules).
static Dual evaluateNode(const ModNode &n, const std::vector<Dual> &v,
                         double score, const Position &pos, bool flipped) {
  const Dual &a = n.lhs >= 0 ? v[n.lhs] : Dual{};
  const Dual &b = n.rhs >= 0 ? v[n.rhs] : Dual{};
  switch (n.op) {
  case ModOp::Score: return {score, 1};
  case ModOp::Const: return {n.constant, 0};
  case ModOp::Index: return {double(pos[n.position]) * n.constant, 0};
  case ModOp::Add: return {a.value + b.value, a.deriv + b.deriv};
  case ModOp::Sub: return {a.value - b.value, a.deriv - b.deriv};
  case ModOp::Mul:
    return {a.value * b.value, a.deriv * b.value + a.value * b.deriv};
  case ModOp::Div:
    return {a.value / b.value,
            (a.deriv * b.value - a.value * b.deriv) / (b.value * b.value)};
  case ModOp::Neg: return {-a.value, -a.deriv};
  case ModOp::CmpF:
    return {compare(n.predicate, a.value, b.value) != flipped ? 1.0 : 0.0, 0};
  case ModOp::Select: return v[n.cond].value != 0 ? a : b;
  case ModOp::MaximumF:
  case ModOp::MaxNumF: return (a.value >= b.value) != flipped ? a : b;
  case ModOp::MinimumF:
  case ModOp::MinNumF: return (a.value <= b.value) != flipped ? a : b;
  case ModOp::Tanh: {
    double t = std::tanh(a.value);
    return {t, (1 - t * t) * a.deriv};
  }
  case ModOp::Exp: {
    double e = std::exp(a.value);
    return {e, e * a.deriv};
  }
  case ModOp::Exp2: {
    double e = std::exp2(a.value);
    return {e, e * std::log(2.0) * a.deriv};
  }
  case ModOp::Log: return {std::log(a.value), a.deriv / a.value};
  case ModOp::Sqrt: {
    double r = std::sqrt(a.value);
    return {r, a.deriv / (2 * r)};
  }
  case ModOp::Abs:
    return (a.value < 0) != flipped ? Dual{-a.value, -a.deriv} : a;
  }
  return {};
}

Dual ScoreModProgram::evaluate(double score, const Position &pos,
                               const Round &round, int flip) const {
  std::vector<Dual> v(nodes.size());
  for (size_t n = 0; n < nodes.size(); ++n) {
    Dual d = evaluateNode(nodes[n], v, score, pos, int(n) == flip);
    bool isBool = nodes[n].op == ModOp::CmpF;
    v[n] = isBool ? d : Dual{round(d.value), round(d.deriv)};
  }
  return v.back();
}

std::vector<int> ScoreModProgram::nearKinks(double score, const Position &pos,
                                            double tolerance,
                                            double scoreStep) const {
  std::vector<Dual> v(nodes.size());
  std::vector<int> near;
  for (size_t n = 0; n < nodes.size(); ++n) {
    const ModNode &node = nodes[n];
    v[n] = evaluateNode(node, v, score, pos, false);
    if (!node.readsScore)
      continue;
    Dual a = node.lhs >= 0 ? v[node.lhs] : Dual{};
    Dual b = node.rhs >= 0 ? v[node.rhs] : Dual{};
    bool kink = node.op == ModOp::Abs || node.op == ModOp::CmpF ||
                node.op == ModOp::MaximumF || node.op == ModOp::MinimumF ||
                node.op == ModOp::MaxNumF || node.op == ModOp::MinNumF;
    double reach = tolerance * (std::fabs(a.value) + std::fabs(b.value)) +
                   scoreStep * std::fabs(a.deriv - b.deriv);
    if (kink && std::fabs(a.value - b.value) <= reach)
      near.push_back(int(n));
  }
  // A tie between equal functions (max(s, s), or s + b at b = 0 against s)
  // is no kink: both sides have the same derivative.
  auto exact = [](double x) { return x; };
  double deriv = evaluate(score, pos, exact).deriv;
  auto sameSlope = [&](int n) {
    double other = evaluate(score, pos, exact, n).deriv;
    return std::fabs(other - deriv) <= 1e-12 * (1 + std::fabs(deriv));
  };
  near.erase(std::remove_if(near.begin(), near.end(), sameSlope), near.end());
  return near;
}

double ScoreModProgram::magnitude(double score, const Position &pos) const {
  std::vector<Dual> v(nodes.size());
  double sum = 0;
  for (size_t n = 0; n < nodes.size(); ++n) {
    v[n] = evaluateNode(nodes[n], v, score, pos, false);
    if (nodes[n].op != ModOp::CmpF)
      sum += std::fabs(v[n].value);
  }
  return sum;
}

std::set<ModOp> ScoreModProgram::ops() const {
  std::set<ModOp> s;
  for (const ModNode &n : nodes)
    s.insert(n.op);
  return s;
}
