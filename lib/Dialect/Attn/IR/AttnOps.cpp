//===- AttnOps.cpp - attn dialect ops and verifiers -------------*- C++ -*-===//

#include "fa/Dialect/Attn/IR/Attn.h"

#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>

using namespace mlir;
using namespace mlir::fa::attn;

#include "attn/AttnDialect.cpp.inc"
#include "attn/AttnEnums.cpp.inc"
#define GET_ATTRDEF_CLASSES
#include "attn/AttnAttrs.cpp.inc"

void AttnDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "attn/AttnOps.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "attn/AttnAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// Shared verification
//===----------------------------------------------------------------------===//

static std::string shapeStr(int64_t extent) {
  return ShapedType::isDynamic(extent) ? "?" : std::to_string(extent);
}

static std::string shapeStr(ArrayRef<int64_t> shape) {
  std::string s = "[";
  llvm::raw_string_ostream os(s);
  llvm::interleave(
      shape, os,
      [&](int64_t d) {
        if (ShapedType::isDynamic(d))
          os << "?";
        else
          os << d;
      },
      ", ");
  os << "]";
  return s;
}

/// True when both extents are known and differ.
static bool differ(int64_t a, int64_t b) {
  return !ShapedType::isDynamic(a) && !ShapedType::isDynamic(b) && a != b;
}

/// Checks `type` against an expected shape (dynamic entries match anything)
/// and element type.
static LogicalResult expectTensor(Operation *op, StringRef name, Type type,
                                  ArrayRef<int64_t> shape, Type elemType) {
  auto t = cast<RankedTensorType>(type);
  bool bad = t.getRank() != static_cast<int64_t>(shape.size());
  for (int64_t i = 0; !bad && i < t.getRank(); ++i)
    bad = differ(t.getDimSize(i), shape[i]);
  if (bad)
    return op->emitOpError("expected ")
           << name << " shape " << shapeStr(shape) << ", got "
           << shapeStr(t.getShape());
  if (t.getElementType() != elemType)
    return op->emitOpError("expected ")
           << name << " element type " << elemType << ", got "
           << t.getElementType();
  return success();
}

namespace {
/// Extents of one attention problem, read off Q, K and V and refined by
/// every other operand and result: an extent dynamic in Q, K and V is fixed
/// by the first tensor that gives it, and must agree everywhere else.
struct Dims {
  int64_t b, h, hkv, nq, nk, d, dv;
  Type elem;
};
} // namespace

/// Takes `size` for an extent not known yet.
static void learn(int64_t &known, int64_t size) {
  if (ShapedType::isDynamic(known))
    known = size;
}

/// expectTensor against the extents known so far, then learns the ones
/// `type` fixes.
static LogicalResult expectAndLearn(Operation *op, StringRef name, Type type,
                                    ArrayRef<int64_t *> extents,
                                    Type elemType) {
  SmallVector<int64_t> shape;
  for (int64_t *e : extents)
    shape.push_back(*e);
  if (failed(expectTensor(op, name, type, shape, elemType)))
    return failure();
  for (auto [e, size] :
       llvm::zip(extents, cast<RankedTensorType>(type).getShape()))
    learn(*e, size);
  return success();
}

static LogicalResult verifyHeadRatio(Operation *op, const Dims &d) {
  if (!ShapedType::isDynamic(d.h) && !ShapedType::isDynamic(d.hkv) &&
      (d.hkv == 0 || d.h % d.hkv != 0))
    return op->emitOpError("expected key head count to divide query head "
                           "count, got ")
           << d.hkv << " and " << d.h;
  return success();
}

static FailureOr<Dims> verifyQKV(Operation *op, RankedTensorType qt,
                                  RankedTensorType kt, RankedTensorType vt) {
  for (auto [name, t] : {std::pair<StringRef, RankedTensorType>{"query", qt},
                         {"key", kt},
                         {"value", vt}}) {
    if (t.getRank() != 4)
      return op->emitOpError("expected ")
             << name << " to have rank 4 [batch, heads, seq, head_dim], got rank "
             << t.getRank();
  }
  Type elem = qt.getElementType();
  if (!(elem.isF16() || elem.isBF16() || elem.isF32() ||
        isa<Float8E4M3FNType>(elem)))
    return op->emitOpError("expected query element type f16, bf16, f32 or "
                           "f8E4M3FN, got ")
           << elem;
  for (auto [name, t] : {std::pair<StringRef, RankedTensorType>{"key", kt},
                         {"value", vt}})
    if (t.getElementType() != elem)
      return op->emitOpError("expected ")
             << name << " element type to match query element type, got "
             << t.getElementType() << " and " << elem;
  Dims d{qt.getDimSize(0), qt.getDimSize(1), kt.getDimSize(1), qt.getDimSize(2),
         kt.getDimSize(2), qt.getDimSize(3), vt.getDimSize(3), elem};
  for (auto [name, t] : {std::pair<StringRef, RankedTensorType>{"query", qt},
                         {"key", kt},
                         {"value", vt}}) {
    int64_t hd = t.getDimSize(3);
    if (ShapedType::isDynamic(hd))
      return op->emitOpError("expected static head dim of ") << name;
    if (hd < 1 || hd > 256)
      return op->emitOpError("expected ")
             << name << " head dim in [1, 256], got " << hd;
  }
  int64_t batch = d.b;
  learn(batch, kt.getDimSize(0));
  if (differ(kt.getDimSize(0), d.b) || differ(vt.getDimSize(0), batch))
    return op->emitOpError("expected key and value batch size to equal query "
                           "batch size, got ")
           << shapeStr(kt.getDimSize(0)) << ", " << shapeStr(vt.getDimSize(0))
           << " and " << shapeStr(d.b);
  learn(d.b, batch);
  learn(d.b, vt.getDimSize(0));
  if (differ(vt.getDimSize(1), d.hkv))
    return op->emitOpError("expected value head count to equal key head "
                           "count, got ")
           << vt.getDimSize(1) << " and " << d.hkv;
  learn(d.hkv, vt.getDimSize(1));
  if (failed(verifyHeadRatio(op, d)))
    return failure();
  if (differ(vt.getDimSize(2), d.nk))
    return op->emitOpError("expected value sequence length to equal key "
                           "sequence length, got ")
           << vt.getDimSize(2) << " and " << d.nk;
  learn(d.nk, vt.getDimSize(2));
  if (kt.getDimSize(3) != d.d)
    return op->emitOpError("expected key head dim to equal query head dim, got ")
           << kt.getDimSize(3) << " and " << d.d;
  return d;
}

static FailureOr<Dims> verifyQKV(Operation *op, Value q, Value k, Value v) {
  return verifyQKV(op, cast<RankedTensorType>(q.getType()),
                   cast<RankedTensorType>(k.getType()),
                   cast<RankedTensorType>(v.getType()));
}

/// The sequence offsets of a varlen op: rank-1 i32 tensors of one size B + 1
/// (at least 1). Returns B (dynamic if neither size is static).
static FailureOr<int64_t> verifySeqOffsets(Operation *op, Value cuQ,
                                           Value cuK) {
  if (!cuQ || !cuK)
    return op->emitOpError("expected both cu_seqlens_q and cu_seqlens_k or "
                           "neither");
  int64_t size = ShapedType::kDynamic;
  for (auto [name, value] :
       {std::pair<StringRef, Value>{"cu_seqlens_q", cuQ}, {"cu_seqlens_k", cuK}}) {
    auto t = cast<RankedTensorType>(value.getType());
    if (t.getRank() != 1 || !t.getElementType().isInteger(32))
      return op->emitOpError("expected ")
             << name << " to be a rank-1 tensor of i32 [batch + 1], got " << t;
    if (t.getDimSize(0) == 0)
      return op->emitOpError("expected ")
             << name << " to hold at least one offset, got 0";
    if (differ(size, t.getDimSize(0)))
      return op->emitOpError("expected cu_seqlens_q and cu_seqlens_k of one "
                             "size, got ")
             << size << " and " << t.getDimSize(0);
    learn(size, t.getDimSize(0));
  }
  return ShapedType::isDynamic(size) ? size : size - 1;
}

/// verifyQKV for a varlen op's packed tensors Q [Tq,H,D], K [Tk,Hkv,D],
/// V [Tk,Hkv,Dv]: checked as the head-major [1,H,T,D] the passes view them
/// as, with the batch taken from the offsets and Nq, Nk the token totals.
static FailureOr<Dims> verifyPackedQKV(Operation *op, Value q, Value k,
                                       Value v, Value cuQ, Value cuK) {
  FailureOr<int64_t> batch = verifySeqOffsets(op, cuQ, cuK);
  if (failed(batch))
    return failure();
  SmallVector<RankedTensorType> headMajor;
  for (auto [name, value] : {std::pair<StringRef, Value>{"query", q},
                             {"key", k},
                             {"value", v}}) {
    auto t = cast<RankedTensorType>(value.getType());
    if (t.getRank() != 3)
      return op->emitOpError("expected varlen ")
             << name << " to have rank 3 [tokens, heads, head_dim], got rank "
             << t.getRank();
    headMajor.push_back(RankedTensorType::get(
        {1, t.getDimSize(1), t.getDimSize(0), t.getDimSize(2)},
        t.getElementType()));
  }
  FailureOr<Dims> d = verifyQKV(op, headMajor[0], headMajor[1], headMajor[2]);
  if (succeeded(d))
    d->b = *batch;
  return d;
}

//===----------------------------------------------------------------------===//
// Paged KV caches
//===----------------------------------------------------------------------===//

/// The dense [B, Hkv, max_pages·page_size, D] type a pool of pages
/// [num_pages, page_size, Hkv, D] reads as through a page table [B, max_pages].
static RankedTensorType pagedViewType(RankedTensorType pages,
                                      RankedTensorType pageTable) {
  int64_t pageSize = pages.getDimSize(1), maxPages = pageTable.getDimSize(1);
  int64_t keys = ShapedType::isDynamic(pageSize) || ShapedType::isDynamic(maxPages)
                     ? ShapedType::kDynamic
                     : pageSize * maxPages;
  return RankedTensorType::get({pageTable.getDimSize(0), pages.getDimSize(2),
                                keys, pages.getDimSize(3)},
                               pages.getElementType());
}

/// A page table is i32 [B, max_pages]; a pool of pages has rank 4 and at
/// least one page where its extent is static.
static LogicalResult verifyPagesAndTable(Operation *op, StringRef name,
                                         RankedTensorType pages,
                                         RankedTensorType pageTable) {
  if (pageTable.getRank() != 2 || !pageTable.getElementType().isInteger(32))
    return op->emitOpError("expected page_table to be a rank-2 tensor of i32 "
                           "[batch, max_pages], got ")
           << pageTable;
  if (pages.getRank() != 4)
    return op->emitOpError("expected paged ")
           << name << " to have rank 4 [num_pages, page_size, heads, "
           << "head_dim], got rank " << pages.getRank();
  if (pages.getDimSize(0) == 0)
    return op->emitOpError("expected paged ")
           << name << " to hold at least one page, got 0";
  return success();
}

/// verifyQKV for a paged op: K and V pools of one page layout, checked as
/// the dense views attn.paged_view makes of them; page_size a multiple of 16
/// (the GPU kernels' key rows per cp.async chunk), seqused_k i32 [B].
static FailureOr<Dims> verifyPagedQKV(Operation *op, Value q, Value k, Value v,
                                      Value pageTable, Value sequsedK) {
  if (!pageTable || !sequsedK)
    return op->emitOpError("expected both page_table and seqused_k or neither");
  auto kt = cast<RankedTensorType>(k.getType());
  auto vt = cast<RankedTensorType>(v.getType());
  auto pt = cast<RankedTensorType>(pageTable.getType());
  if (failed(verifyPagesAndTable(op, "key", kt, pt)) ||
      failed(verifyPagesAndTable(op, "value", vt, pt)))
    return failure();
  for (int64_t i : {0, 1})
    if (differ(kt.getDimSize(i), vt.getDimSize(i)))
      return op->emitOpError("expected key and value pages of one layout, "
                             "got ")
             << shapeStr(kt.getShape()) << " and " << shapeStr(vt.getShape());
  int64_t batch = cast<RankedTensorType>(q.getType()).getDimSize(0);
  if (differ(pt.getDimSize(0), batch))
    return op->emitOpError("expected a page_table row per sequence, got ")
           << pt.getDimSize(0) << " rows and batch " << batch;
  int64_t pageSize = kt.getDimSize(1);
  if (!ShapedType::isDynamic(pageSize) && (pageSize <= 0 || pageSize % 16 != 0))
    return op->emitOpError("expected page_size to be a positive multiple of "
                           "16, got ")
           << pageSize;
  FailureOr<Dims> d = verifyQKV(op, cast<RankedTensorType>(q.getType()),
                                pagedViewType(kt, pt), pagedViewType(vt, pt));
  if (failed(d))
    return failure();
  if (failed(expectTensor(op, "seqused_k", sequsedK.getType(), {d->b},
                          IntegerType::get(op->getContext(), 32))))
    return failure();
  return d;
}

/// The extents a score_mod's reads are bounded by: a varlen op's q_idx and
/// kv_idx stay below each sequence's own length, unknown here.
static Dims scoreModExtents(Dims d, bool varlen) {
  if (varlen)
    d.nq = d.nk = ShapedType::kDynamic;
  return d;
}

/// The name of score_mod block argument `i` in diagnostics.
static std::string scoreModArgName(unsigned i) {
  const char *names[] = {"score", "b", "h", "q_idx", "kv_idx"};
  if (i < ScoreSpec::kScoreModPositionArgs)
    return names[i];
  return "mod_arg #" + std::to_string(i - ScoreSpec::kScoreModPositionArgs);
}

/// mod_args are ranked tensors of f32, f16, bf16, i32 or i64 (what a kernel
/// can load from global memory and the runtime can describe).
static LogicalResult verifyModArgTypes(Operation *op, ValueRange modArgs) {
  for (auto [i, arg] : llvm::enumerate(modArgs)) {
    auto type = cast<RankedTensorType>(arg.getType());
    Type elem = type.getElementType();
    if (!(elem.isF32() || elem.isF16() || elem.isBF16() ||
          elem.isInteger(32) || elem.isInteger(64)))
      return op->emitOpError("expected mod_arg #")
             << i << " element type f32, f16, bf16, i32 or i64, got " << elem;
    if (type.getRank() == 0)
      return op->emitOpError("expected mod_arg #")
             << i << " of rank at least 1, got " << type;
  }
  return success();
}

/// Every use of a mod_arg block argument is the tensor of a tensor.extract:
/// a GPU kernel turns each read into a load from its parameter; any other
/// use would have no lowering.
static LogicalResult verifyModArgReadsOnly(Operation *op, Block &block,
                                           unsigned positionArgs,
                                           const std::string &regionName) {
  for (BlockArgument arg : block.getArguments().drop_front(positionArgs))
    for (OpOperand &use : arg.getUses()) {
      auto read = dyn_cast<tensor::ExtractOp>(use.getOwner());
      if (!read || use.getOperandNumber() != 0)
        return op->emitOpError("expected ")
               << (regionName == "score_mod" ? std::string() : regionName + "'s ")
               << "mod_arg #" << arg.getArgNumber() - positionArgs
               << " to be read by tensor.extract only, got a use by '"
               << use.getOwner()->getName() << "'";
    }
  return success();
}

static LogicalResult verifyScoreMod(Operation *op, Region &scoreMod,
                                    ValueRange modArgs) {
  if (!scoreMod.hasOneBlock())
    return op->emitOpError("expected score_mod to have one block");
  Block &block = scoreMod.front();
  Builder b(op->getContext());
  SmallVector<Type> expected{b.getF32Type(), b.getIndexType(),
                             b.getIndexType(), b.getIndexType(),
                             b.getIndexType()};
  llvm::append_range(expected, modArgs.getTypes());
  if (block.getNumArguments() != expected.size()) {
    InFlightDiagnostic diag = op->emitOpError("expected score_mod to take ")
                              << expected.size()
                              << " arguments (score: f32, b, h, q_idx, "
                                 "kv_idx: index";
    if (!modArgs.empty())
      diag << ", then one per mod_arg of its type";
    diag << "), got " << block.getNumArguments() << ": (";
    llvm::interleaveComma(block.getArgumentTypes(), diag);
    return diag << ")";
  }
  for (auto [i, arg] : llvm::enumerate(block.getArguments()))
    if (arg.getType() != expected[i])
      return op->emitOpError("expected score_mod argument #")
             << i << " (" << scoreModArgName(i) << ") of type " << expected[i]
             << ", got " << arg.getType();
  if (failed(verifyModArgReadsOnly(op, block,
                                   ScoreSpec::kScoreModPositionArgs,
                                   "score_mod")))
    return failure();
  auto yield = dyn_cast<YieldOp>(block.getTerminator());
  if (!yield || yield.getValues().size() != 1 ||
      !yield.getValues()[0].getType().isF32())
    return op->emitOpError("expected score_mod to end in attn.yield of one f32");
  return success();
}

/// The name of mask_mod block argument `i` in diagnostics.
static std::string maskModArgName(unsigned i) {
  const char *names[] = {"b", "h", "q_idx", "kv_idx"};
  if (i < ScoreSpec::kMaskModPositionArgs)
    return names[i];
  return "mod_arg #" + std::to_string(i - ScoreSpec::kMaskModPositionArgs);
}

static LogicalResult verifyMaskMod(Operation *op, Region &maskMod,
                                   ValueRange modArgs) {
  if (!maskMod.hasOneBlock())
    return op->emitOpError("expected mask_mod to have one block");
  Block &block = maskMod.front();
  Builder b(op->getContext());
  SmallVector<Type> expected(ScoreSpec::kMaskModPositionArgs,
                             b.getIndexType());
  llvm::append_range(expected, modArgs.getTypes());
  if (block.getNumArguments() != expected.size()) {
    InFlightDiagnostic diag = op->emitOpError("expected mask_mod to take ")
                              << expected.size()
                              << " arguments (b, h, q_idx, kv_idx: index";
    if (!modArgs.empty())
      diag << ", then one per mod_arg of its type";
    diag << "), got " << block.getNumArguments() << ": (";
    llvm::interleaveComma(block.getArgumentTypes(), diag);
    return diag << ")";
  }
  for (auto [i, arg] : llvm::enumerate(block.getArguments()))
    if (arg.getType() != expected[i])
      return op->emitOpError("expected mask_mod argument #")
             << i << " (" << maskModArgName(i) << ") of type " << expected[i]
             << ", got " << arg.getType();
  if (failed(verifyModArgReadsOnly(op, block, ScoreSpec::kMaskModPositionArgs,
                                   "mask_mod")))
    return failure();
  auto yield = dyn_cast<YieldOp>(block.getTerminator());
  if (!yield || yield.getValues().size() != 1 ||
      !yield.getValues()[0].getType().isInteger(1)) {
    InFlightDiagnostic diag =
        op->emitOpError("expected mask_mod to end in attn.yield of one i1");
    if (yield)
      diag << ", got (" << yield.getValues().getTypes() << ")";
    return diag;
  }
  return success();
}

/// mask window takes its sizes either as window_left/window_right (>= -1;
/// -1 is unbounded) or as the two run-time `window(...)` operands.
static LogicalResult verifyWindow(Operation *op, MaskKind mask,
                                  std::optional<int64_t> left,
                                  std::optional<int64_t> right,
                                  ValueRange runtimeSizes) {
  if (mask != MaskKind::Window) {
    if (left || right || !runtimeSizes.empty())
      return op->emitOpError("window sizes apply only to mask window, got "
                             "mask ")
             << stringifyMaskKind(mask);
    return success();
  }
  if (!runtimeSizes.empty()) {
    if (runtimeSizes.size() != 2)
      return op->emitOpError("expected two run-time window sizes (left, "
                             "right), got ")
             << runtimeSizes.size();
    if (left || right)
      return op->emitOpError("expected the window sizes either as "
                             "window_left/window_right or as window(...) "
                             "operands, got both");
    return success();
  }
  if (!left || !right)
    return op->emitOpError("expected window_left and window_right, or "
                           "window(%left, %right), with mask window");
  if (*left < -1 || *right < -1)
    return op->emitOpError("expected window sizes >= -1 (-1: unbounded), "
                           "got ")
           << *left << " and " << *right;
  return success();
}

static LogicalResult verifyScoreAttrs(Operation *op, std::optional<float> scale,
                                      MaskKind mask, std::optional<int64_t> left,
                                      std::optional<int64_t> right,
                                      ValueRange runtimeWindow,
                                      Region &scoreMod, Region &maskMod,
                                      ValueRange modArgs) {
  if (scale && (!std::isfinite(*scale) || *scale == 0.0f))
    return op->emitOpError("expected scale to be finite and non-zero, got ")
           << *scale;
  if (failed(verifyWindow(op, mask, left, right, runtimeWindow)))
    return failure();
  if (scoreMod.empty() && maskMod.empty()) {
    if (!modArgs.empty())
      return op->emitOpError("expected a score_mod or mask_mod to read the ")
             << modArgs.size() << " mod_args, got none";
    return success();
  }
  if (failed(verifyModArgTypes(op, modArgs)))
    return failure();
  if (!scoreMod.empty() && failed(verifyScoreMod(op, scoreMod, modArgs)))
    return failure();
  if (!maskMod.empty() && failed(verifyMaskMod(op, maskMod, modArgs)))
    return failure();
  return success();
}

/// A score_mod's or mask_mod's reads of captured tensors where the verifier can bound
/// the index (the lowering clamps the rest, AttentionOp's rule): a constant,
/// or b, h, q_idx, kv_idx themselves against static extents, must lie inside
/// the tensor, and an indexed dimension must not be empty.
static LogicalResult verifyModReads(Region &scoreMod, const Dims &d,
                                    bool isMaskMod) {
  if (scoreMod.empty())
    return success();
  Block &block = scoreMod.front();
  // Extents of the position arguments, by block argument number.
  SmallVector<int64_t> extents{d.b, d.h, d.nq, d.nk};
  if (!isMaskMod)
    extents.insert(extents.begin(), 0);
  unsigned positionArgs = isMaskMod ? ScoreSpec::kMaskModPositionArgs
                                    : ScoreSpec::kScoreModPositionArgs;
  StringRef regionName = isMaskMod ? "mask_mod" : "score_mod";
  auto argName = [&](unsigned i) {
    return isMaskMod ? maskModArgName(i) : scoreModArgName(i);
  };
  WalkResult walk = scoreMod.walk([&](tensor::ExtractOp read) {
    auto type = cast<RankedTensorType>(read.getTensor().getType());
    for (auto [dim, index] : llvm::enumerate(read.getIndices())) {
      int64_t size = type.getDimSize(dim);
      if (ShapedType::isDynamic(size))
        continue;
      if (size == 0) {
        read.emitOpError("reads dimension ")
            << dim << " of a tensor captured by a " << regionName
            << ", which is empty";
        return WalkResult::interrupt();
      }
      llvm::APInt constant;
      if (matchPattern(index, m_ConstantInt(&constant)) &&
          (constant.getSExtValue() < 0 || constant.getSExtValue() >= size)) {
        read.emitOpError("index #")
            << dim << " = " << constant.getSExtValue()
            << " is outside the captured tensor's dimension of size " << size;
        return WalkResult::interrupt();
      }
      auto arg = dyn_cast<BlockArgument>(index);
      // The score (score_mod's argument 0) and the mod_args are no positions.
      if (!arg || arg.getOwner() != &block ||
          arg.getArgNumber() >= positionArgs ||
          (!isMaskMod && arg.getArgNumber() == 0))
        continue;
      int64_t extent = extents[arg.getArgNumber()];
      if (!ShapedType::isDynamic(extent) && extent > size) {
        read.emitOpError("index #")
            << dim << " is " << argName(arg.getArgNumber()) << ", up to "
            << extent - 1
            << ", outside the captured tensor's dimension of size " << size;
        return WalkResult::interrupt();
      }
    }
    return WalkResult::advance();
  });
  return failure(walk.wasInterrupted());
}

template <typename OpTy>
static ScoreSpec buildScoreSpec(OpTy op) {
  ScoreSpec s;
  auto qType = cast<RankedTensorType>(op.getQuery().getType());
  int64_t d = qType.getDimSize(qType.getRank() - 1);
  s.scale = op.getScale() ? op.getScale()->convertToDouble()
                          : 1.0 / std::sqrt(static_cast<double>(d));
  s.mask = op.getMask();
  s.windowLeft = op.getWindowLeft().value_or(0);
  s.windowRight = op.getWindowRight().value_or(0);
  if (op.getWindowSizes().size() == 2) {
    s.windowLeftValue = op.getWindowSizes()[0];
    s.windowRightValue = op.getWindowSizes()[1];
  }
  s.scoreMod = op.getScoreMod().empty() ? nullptr : &op.getScoreMod();
  s.maskMod = op.getMaskMod().empty() ? nullptr : &op.getMaskMod();
  llvm::append_range(s.modArgs, op.getModArgs());
  return s;
}

template <typename OpTy>
static LogicalResult verifyScoreAttrs(OpTy op) {
  return verifyScoreAttrs(op, op.getScale() ? std::optional<float>(
                                                  op.getScale()->convertToFloat())
                                            : std::nullopt,
                          op.getMask(), op.getWindowLeft(),
                          op.getWindowRight(), op.getWindowSizes(),
                          op.getScoreMod(),
                          op.getMaskMod(), op.getModArgs());
}

/// The tile ops locate their block with offsets [b, h, q, kv] and lengths
/// [nq, nk] of the whole problem.
static LogicalResult verifyPosition(Operation *op, ValueRange offsets,
                                    ValueRange lengths) {
  if (offsets.size() != 4 || lengths.size() != 2)
    return op->emitOpError("expected 4 offsets [b, h, q, kv] and 2 lengths "
                           "[nq, nk], got ")
           << offsets.size() << " and " << lengths.size();
  return success();
}

/// Sinks are one f32 logit per query head: a rank-1 f32 tensor [H].
static LogicalResult verifySinks(Operation *op, Value sinks, int64_t heads) {
  if (!sinks)
    return success();
  auto t = cast<RankedTensorType>(sinks.getType());
  if (t.getRank() != 1 || !t.getElementType().isF32())
    return op->emitOpError("expected sinks to be a rank-1 tensor of f32 "
                           "[heads], got ")
           << t;
  if (differ(t.getDimSize(0), heads))
    return op->emitOpError("expected sinks of one per query head, got ")
           << t.getDimSize(0) << " sinks and " << heads << " heads";
  return success();
}

/// A backward returns d_sinks exactly when it takes sinks, of their type.
static LogicalResult verifyGradSinks(Operation *op, Value sinks,
                                     Value gradSinks) {
  if (!sinks && !gradSinks)
    return success();
  if (!sinks)
    return op->emitOpError("expected no grad_sinks result without sinks");
  if (!gradSinks)
    return op->emitOpError("expected a grad_sinks result of type ")
           << sinks.getType() << " with sinks";
  if (gradSinks.getType() != sinks.getType())
    return op->emitOpError("expected grad_sinks of the sinks' type ")
           << sinks.getType() << ", got " << gradSinks.getType();
  return success();
}

//===----------------------------------------------------------------------===//
// fp8 descale factors
//===----------------------------------------------------------------------===//

/// fp8 Q, K, V come with their descale factors, f32 [B, Hkv] each, or Q and
/// K per 64-row block ([B, H, ceil(Nq/64)], [B, Hkv, ceil(Nk/64)]; the
/// extents dynamic for a tile op, which takes the whole problem's), and
/// the other element types with none. fp8 has no score_mod, mask_mod or
/// varlen form.
static LogicalResult verifyDescales(Operation *op, const Dims &d,
                                    ValueRange descales, bool hasMods,
                                    bool varlen) {
  bool fp8 = isa<Float8E4M3FNType>(d.elem);
  bool given = llvm::any_of(descales, [](Value v) { return bool(v); });
  if (!fp8 && given)
    return op->emitOpError("expected descale factors only with f8E4M3FN "
                           "inputs, got ")
           << d.elem;
  if (!fp8)
    return success();
  if (!llvm::all_of(descales, [](Value v) { return bool(v); }))
    return op->emitOpError("expected descale(q, k, v) factors with f8E4M3FN "
                           "inputs");
  if (hasMods || varlen)
    return op->emitOpError("expected no ")
           << (varlen ? "varlen batch" : "score_mod or mask_mod")
           << " with f8E4M3FN inputs (the fp8 forward has neither)";
  Type f32 = Float32Type::get(op->getContext());
  const char *names[] = {"descale_q", "descale_k", "descale_v"};
  SmallVector<int64_t> shapes[3] = {{d.b, d.hkv}, {d.b, d.hkv}, {d.b, d.hkv}};
  if (isBlockDescale(descales[0])) { // Q and K per 64-row block
    auto blocks = [](int64_t n) {
      return ShapedType::isDynamic(n) ? n
                                      : llvm::divideCeil(n, kDescaleBlockRows);
    };
    shapes[0] = {d.b, d.h, blocks(d.nq)};
    shapes[1] = {d.b, d.hkv, blocks(d.nk)};
  }
  for (auto [name, v, shape] : llvm::zip(names, descales, shapes))
    if (failed(expectTensor(op, name, v.getType(), shape, f32)))
      return failure();
  return success();
}

/// The output element type: bf16 for fp8 inputs, else the inputs' type.
static Type outputElementType(Type elem) {
  if (isa<Float8E4M3FNType>(elem))
    return BFloat16Type::get(elem.getContext());
  return elem;
}

/// The fp8 backward's descale(q, k, v, do), f32 [B, Hkv] each; the
/// forward's rules otherwise (verifyDescales), and no block descales or
/// sinks.
static LogicalResult verifyBackwardDescales(AttentionBackwardOp op,
                                            const Dims &d, bool varlen) {
  Value descales[] = {op.getDescaleQ(), op.getDescaleK(), op.getDescaleV()};
  bool hasMods = !op.getScoreMod().empty() || !op.getMaskMod().empty();
  if (failed(verifyDescales(op, d, descales, hasMods, varlen)))
    return failure();
  bool fp8 = isa<Float8E4M3FNType>(d.elem);
  if (!fp8 && op.getDescaleDo())
    return op.emitOpError("expected descale factors only with f8E4M3FN "
                          "inputs, got ")
           << d.elem;
  if (!fp8)
    return success();
  if (!op.getDescaleDo())
    return op.emitOpError("expected descale(q, k, v, do) factors with "
                          "f8E4M3FN inputs");
  if (isBlockDescale(op.getDescaleQ()))
    return op.emitOpError("expected descale_q [B, Hkv]: the fp8 backward "
                          "takes no block descales");
  if (op.getSinks())
    return op.emitOpError("expected no sinks with fp8 inputs (descale)");
  Type f32 = Float32Type::get(op.getContext());
  return expectTensor(op, "descale_do", op.getDescaleDo().getType(),
                      {d.b, d.hkv}, f32);
}

//===----------------------------------------------------------------------===//
// AttentionOp
//===----------------------------------------------------------------------===//

LogicalResult AttentionOp::verify() {
  bool varlen = getCuSeqlensQ() || getCuSeqlensK();
  bool paged = getPageTable() || getSequsedK();
  if (paged && varlen)
    return emitOpError("expected a paged cache or a varlen batch, not both");
  FailureOr<Dims> d =
      varlen ? verifyPackedQKV(*this, getQuery(), getKey(), getValue(),
                               getCuSeqlensQ(), getCuSeqlensK())
      : paged ? verifyPagedQKV(*this, getQuery(), getKey(), getValue(),
                               getPageTable(), getSequsedK())
              : verifyQKV(*this, getQuery(), getKey(), getValue());
  if (failed(d))
    return failure();
  if (paged && getDescaleQ())
    return emitOpError("expected no paged cache with fp8 inputs (descale)");
  if (failed(verifyScoreAttrs(*this)) ||
      failed(verifyDescales(*this, *d,
                            {getDescaleQ(), getDescaleK(), getDescaleV()},
                            !getScoreMod().empty() || !getMaskMod().empty(),
                            varlen)) ||
      failed(verifySinks(*this, getSinks(), d->h)))
    return failure();
  if (getSinks() && getDescaleQ())
    return emitOpError("expected no sinks with fp8 inputs (descale): no "
                       "kernel joins a sink to the fp8 forward yet");
  Type f32 = Float32Type::get(getContext());
  if (varlen) {
    if (failed(expectAndLearn(*this, "output", getOutput().getType(),
                              {&d->nq, &d->h, &d->dv}, d->elem)) ||
        failed(expectAndLearn(*this, "lse", getLse().getType(),
                              {&d->h, &d->nq}, f32)))
      return failure();
    return failure(
        failed(verifyModReads(getScoreMod(), scoreModExtents(*d, true),
                              /*isMaskMod=*/false)) ||
        failed(verifyModReads(getMaskMod(), scoreModExtents(*d, true),
                              /*isMaskMod=*/true)));
  }
  if (failed(expectAndLearn(*this, "output", getOutput().getType(),
                            {&d->b, &d->h, &d->nq, &d->dv},
                            outputElementType(d->elem))) ||
      failed(expectAndLearn(*this, "lse", getLse().getType(),
                            {&d->b, &d->h, &d->nq}, f32)) ||
      failed(verifyHeadRatio(*this, *d)))
    return failure();
  // A paged sequence's kv_idx stays below its own key count, unknown here.
  Dims modExtents = scoreModExtents(*d, false);
  if (paged)
    modExtents.nk = ShapedType::kDynamic;
  return failure(failed(verifyModReads(getScoreMod(), modExtents, false)) ||
                 failed(verifyModReads(getMaskMod(), modExtents, true)));
}

ScoreSpec AttentionOp::getScoreSpec() { return buildScoreSpec(*this); }

//===----------------------------------------------------------------------===//
// AttentionBackwardOp
//===----------------------------------------------------------------------===//

LogicalResult AttentionBackwardOp::verify() {
  bool varlen = getCuSeqlensQ() || getCuSeqlensK();
  FailureOr<Dims> d =
      varlen ? verifyPackedQKV(*this, getQuery(), getKey(), getValue(),
                               getCuSeqlensQ(), getCuSeqlensK())
             : verifyQKV(*this, getQuery(), getKey(), getValue());
  if (failed(d) || failed(verifyScoreAttrs(*this)) ||
      failed(verifySinks(*this, getSinks(), d->h)) ||
      failed(verifyGradSinks(*this, getSinks(), getGradSinks())) ||
      failed(verifyBackwardDescales(*this, *d, varlen)))
    return failure();
  Type f32 = Float32Type::get(getContext());
  // fp8: O and the gradients are bf16, dO is e4m3 as Q, K and V.
  Type gradElem = outputElementType(d->elem);
  if (varlen) {
    SmallVector<int64_t *> oShape{&d->nq, &d->h, &d->dv};
    if (failed(expectAndLearn(*this, "output", getOutput().getType(), oShape,
                              d->elem)) ||
        failed(expectAndLearn(*this, "grad_output", getGradOutput().getType(),
                              oShape, d->elem)) ||
        failed(expectAndLearn(*this, "lse", getLse().getType(),
                              {&d->h, &d->nq}, f32)) ||
        failed(expectAndLearn(*this, "grad_query", getGradQuery().getType(),
                              {&d->nq, &d->h, &d->d}, d->elem)) ||
        failed(expectAndLearn(*this, "grad_key", getGradKey().getType(),
                              {&d->nk, &d->hkv, &d->d}, d->elem)) ||
        failed(expectAndLearn(*this, "grad_value", getGradValue().getType(),
                              {&d->nk, &d->hkv, &d->dv}, d->elem)))
      return failure();
    return failure(
        failed(verifyModReads(getScoreMod(), scoreModExtents(*d, true),
                              /*isMaskMod=*/false)) ||
        failed(verifyModReads(getMaskMod(), scoreModExtents(*d, true),
                              /*isMaskMod=*/true)));
  }
  SmallVector<int64_t *> oShape{&d->b, &d->h, &d->nq, &d->dv};
  if (failed(expectAndLearn(*this, "output", getOutput().getType(), oShape,
                            gradElem)) ||
      failed(expectAndLearn(*this, "grad_output", getGradOutput().getType(),
                            oShape, d->elem)) ||
      failed(expectAndLearn(*this, "lse", getLse().getType(),
                            {&d->b, &d->h, &d->nq}, f32)) ||
      failed(expectAndLearn(*this, "grad_query", getGradQuery().getType(),
                            {&d->b, &d->h, &d->nq, &d->d}, gradElem)) ||
      failed(expectAndLearn(*this, "grad_key", getGradKey().getType(),
                            {&d->b, &d->hkv, &d->nk, &d->d}, gradElem)) ||
      failed(expectAndLearn(*this, "grad_value", getGradValue().getType(),
                            {&d->b, &d->hkv, &d->nk, &d->dv}, gradElem)) ||
      failed(verifyHeadRatio(*this, *d)))
    return failure();
  return failure(failed(verifyModReads(getScoreMod(), *d, false)) ||
                 failed(verifyModReads(getMaskMod(), *d, true)));
}

ScoreSpec AttentionBackwardOp::getScoreSpec() { return buildScoreSpec(*this); }

//===----------------------------------------------------------------------===//
// OnlineAttentionOp
//===----------------------------------------------------------------------===//

LogicalResult OnlineAttentionOp::verify() {
  FailureOr<Dims> d = verifyQKV(*this, getQuery(), getKey(), getValue());
  if (failed(d) || failed(verifyScoreAttrs(*this)) ||
      failed(verifyPosition(*this, getOffsets(), getLengths())))
    return failure();
  Dims whole = *d; // the descales cover the whole problem, not this tile
  whole.b = whole.h = whole.hkv = whole.nq = whole.nk = ShapedType::kDynamic;
  if (failed(verifyDescales(*this, whole,
                            {getDescaleQ(), getDescaleK(), getDescaleV()},
                            !getScoreMod().empty() || !getMaskMod().empty(),
                            getCuSeqlensQ() || getCuSeqlensK())))
    return failure();
  if (Value used = getSequsedK()) {
    if (getCuSeqlensQ() || getCuSeqlensK())
      return emitOpError("expected seqused_k or a varlen problem, not both");
    auto t = cast<RankedTensorType>(used.getType());
    if (t.getRank() != 1 || !t.getElementType().isInteger(32))
      return emitOpError("expected seqused_k to be a rank-1 tensor of i32 "
                         "[batch], got ")
             << t;
  }
  if (getCuSeqlensQ() || getCuSeqlensK()) {
    if (failed(verifySeqOffsets(*this, getCuSeqlensQ(), getCuSeqlensK())))
      return failure();
    if (differ(d->b, 1))
      return emitOpError("expected a varlen problem viewed with one batch, "
                         "got batch ")
             << d->b;
  }
  Type f32 = Float32Type::get(getContext());
  SmallVector<int64_t> rows{d->b, d->h, d->nq};
  if (failed(expectTensor(*this, "acc", getAcc().getType(),
                          {d->b, d->h, d->nq, d->dv}, f32)) ||
      failed(expectTensor(*this, "max", getMax().getType(), rows, f32)) ||
      failed(expectTensor(*this, "sum", getSum().getType(), rows, f32)))
    return failure();
  if (getNewAcc().getType() != getAcc().getType() ||
      getNewMax().getType() != getMax().getType() ||
      getNewSum().getType() != getSum().getType())
    return emitOpError("expected result types to equal the (acc, max, sum) "
                       "operand types");
  return success();
}

ScoreSpec OnlineAttentionOp::getScoreSpec() { return buildScoreSpec(*this); }

//===----------------------------------------------------------------------===//
// BackwardTileOp
//===----------------------------------------------------------------------===//

LogicalResult BackwardTileOp::verify() {
  FailureOr<Dims> d = verifyQKV(*this, getQuery(), getKey(), getValue());
  if (failed(d) || failed(verifyScoreAttrs(*this)) ||
      failed(verifyPosition(*this, getOffsets(), getLengths())))
    return failure();
  if (differ(d->h, d->hkv))
    return emitOpError("expected one key head per query head in a tile, got ")
           << d->hkv << " and " << d->h;
  Type f32 = Float32Type::get(getContext());
  SmallVector<int64_t> rows{d->b, d->h, d->nq};
  if (failed(expectTensor(*this, "grad_output", getGradOutput().getType(),
                          {d->b, d->h, d->nq, d->dv}, d->elem)) ||
      failed(expectTensor(*this, "lse", getLse().getType(), rows, f32)) ||
      failed(expectTensor(*this, "delta", getDelta().getType(), rows, f32)))
    return failure();
  for (auto [name, acc, in] :
       {std::tuple<StringRef, Value, Value>{"grad_query", getGradQuery(),
                                            getQuery()},
        {"grad_key", getGradKey(), getKey()},
        {"grad_value", getGradValue(), getValue()}})
    if (failed(expectTensor(*this, name, acc.getType(),
                            cast<RankedTensorType>(in.getType()).getShape(),
                            f32)))
      return failure();
  if (getNewGradQuery().getType() != getGradQuery().getType() ||
      getNewGradKey().getType() != getGradKey().getType() ||
      getNewGradValue().getType() != getGradValue().getType())
    return emitOpError("expected result types to equal the gradient "
                       "accumulator types");
  return success();
}

ScoreSpec BackwardTileOp::getScoreSpec() { return buildScoreSpec(*this); }

//===----------------------------------------------------------------------===//
// MergeOp
//===----------------------------------------------------------------------===//

LogicalResult MergeOp::verify() {
  auto parts = cast<RankedTensorType>(getPartialOutput().getType());
  auto partLse = cast<RankedTensorType>(getPartialLse().getType());
  if (parts.getRank() != 5)
    return emitOpError("expected partial_output to have rank 5 [splits, "
                       "batch, heads, seq, head_dim], got rank ")
           << parts.getRank();
  Type f32 = Float32Type::get(getContext());
  if (parts.getElementType() != f32)
    return emitOpError("expected partial_output element type f32, got ")
           << parts.getElementType();
  ArrayRef<int64_t> p = parts.getShape();
  if (p[0] == 0)
    return emitOpError("expected at least one partial result, got 0");
  if (ShapedType::isDynamic(p[4]))
    return emitOpError("expected static head dim of partial_output");
  if (failed(expectTensor(*this, "partial_lse", partLse,
                          {p[0], p[1], p[2], p[3]}, f32)))
    return failure();
  auto out = cast<RankedTensorType>(getOutput().getType());
  Type elem = out.getElementType();
  if (!(elem.isF16() || elem.isBF16() || elem.isF32()))
    return emitOpError("expected output element type f16, bf16 or f32, got ")
           << elem;
  if (failed(expectTensor(*this, "output", out, {p[1], p[2], p[3], p[4]},
                          elem)) ||
      failed(expectTensor(*this, "lse", getLse().getType(),
                          {p[1], p[2], p[3]}, f32)) ||
      failed(verifySinks(*this, getSinks(), p[2])))
    return failure();
  return success();
}

//===----------------------------------------------------------------------===//
// PagedViewOp
//===----------------------------------------------------------------------===//

LogicalResult PagedViewOp::verify() {
  auto pages = cast<RankedTensorType>(getPages().getType());
  auto table = cast<RankedTensorType>(getPageTable().getType());
  if (failed(verifyPagesAndTable(*this, "pages", pages, table)))
    return failure();
  RankedTensorType view = pagedViewType(pages, table);
  if (failed(expectTensor(*this, "result", getResult().getType(),
                          view.getShape(), pages.getElementType())))
    return failure();
  return success();
}

//===----------------------------------------------------------------------===//
// RotaryOp
//===----------------------------------------------------------------------===//

int64_t RotaryOp::getRotaryDim() {
  int64_t half = cast<RankedTensorType>(getCos().getType()).getDimSize(1);
  return ShapedType::isDynamic(half) ? half : 2 * half;
}

/// Whether `t` is f32 or the element type `elem` of the rotated rows.
static bool isRotaryTableType(Type t, Type elem) {
  return t.isF32() || t == elem;
}

LogicalResult RotaryOp::verify() {
  auto x = cast<RankedTensorType>(getInput().getType());
  if (x.getRank() != 4)
    return emitOpError("expected input to have rank 4 [batch, tokens, heads, "
                       "head_dim], got rank ")
           << x.getRank();
  Type elem = x.getElementType();
  if (!(elem.isF16() || elem.isBF16() || elem.isF32()))
    return emitOpError("expected input element type f16, bf16 or f32, got ")
           << elem;
  auto cos = cast<RankedTensorType>(getCos().getType());
  if (cos.getRank() != 2)
    return emitOpError("expected cos to have rank 2 [max_pos, rotary_dim / "
                       "2], got rank ")
           << cos.getRank();
  if (!isRotaryTableType(cos.getElementType(), elem))
    return emitOpError("expected cos element type f32 or ")
           << elem << ", got " << cos.getElementType();
  if (failed(expectTensor(*this, "sin", getSin().getType(), cos.getShape(),
                          cos.getElementType())))
    return failure();
  if (cos.getDimSize(0) == 0)
    return emitOpError("expected cos and sin to hold at least one position, "
                       "got 0");
  int64_t rotaryDim = getRotaryDim(), d = x.getDimSize(3);
  if (ShapedType::isDynamic(rotaryDim) || ShapedType::isDynamic(d))
    return emitOpError("expected static head_dim and rotary_dim / 2, got ")
           << shapeStr(d) << " and " << shapeStr(cos.getDimSize(1));
  if (rotaryDim == 0 || rotaryDim > d)
    return emitOpError("expected rotary_dim (2 x cos columns) in [2, "
                       "head_dim], got ")
           << rotaryDim << " and head_dim " << d;
  if (failed(expectTensor(*this, "start", getStart().getType(),
                          {x.getDimSize(0)},
                          IntegerType::get(getContext(), 32))) ||
      failed(expectTensor(*this, "result", getResult().getType(),
                          x.getShape(), elem)))
    return failure();
  return success();
}

//===----------------------------------------------------------------------===//
// KvAppendOp
//===----------------------------------------------------------------------===//

/// The new rows [B, Nnew, Hkv, D] of one cache: rank 4, the cache's element
/// type and the cache's heads and head dim.
static LogicalResult verifyAppendedRows(Operation *op, StringRef name,
                                        RankedTensorType rows,
                                        RankedTensorType cache) {
  if (rows.getRank() != 4)
    return op->emitOpError("expected ")
           << name << " to have rank 4 [batch, new_tokens, kv_heads, "
           << "head_dim], got rank " << rows.getRank();
  if (cache.getRank() != 4)
    return op->emitOpError("expected ")
           << name << " cache to have rank 4, got rank " << cache.getRank();
  Type elem = rows.getElementType();
  if (!(elem.isF16() || elem.isBF16() || elem.isF32()))
    return op->emitOpError("expected ")
           << name << " element type f16, bf16 or f32, got " << elem;
  if (cache.getElementType() != elem)
    return op->emitOpError("expected ")
           << name << " cache element type " << elem << ", got "
           << cache.getElementType();
  for (int64_t i : {2, 3})
    if (differ(rows.getDimSize(i), cache.getDimSize(i)))
      return op->emitOpError("expected ")
             << name << " rows of the cache's [kv_heads, head_dim] "
             << shapeStr(cache.getShape().drop_front(2)) << ", got "
             << shapeStr(rows.getShape().drop_front(2));
  return success();
}

LogicalResult KvAppendOp::verify() {
  auto k = cast<RankedTensorType>(getKey().getType());
  auto v = cast<RankedTensorType>(getValue().getType());
  auto kc = cast<RankedTensorType>(getKeyCache().getType());
  auto vc = cast<RankedTensorType>(getValueCache().getType());
  if (failed(verifyAppendedRows(*this, "key", k, kc)) ||
      failed(verifyAppendedRows(*this, "value", v, vc)))
    return failure();
  for (int64_t i : {0, 1, 2})
    if (differ(k.getDimSize(i), v.getDimSize(i)))
      return emitOpError("expected key and value of one [batch, new_tokens, "
                         "kv_heads], got ")
             << shapeStr(k.getShape()) << " and " << shapeStr(v.getShape());
  if (k.getElementType() != v.getElementType())
    return emitOpError("expected key and value of one element type, got ")
           << k.getElementType() << " and " << v.getElementType();
  // The first two extents address rows: [B, Ncap] or [num_pages, page_size].
  for (int64_t i : {0, 1})
    if (differ(kc.getDimSize(i), vc.getDimSize(i)))
      return emitOpError("expected key and value caches of one layout, got ")
             << shapeStr(kc.getShape()) << " and " << shapeStr(vc.getShape());
  int64_t batch = k.getDimSize(0);
  if (isPaged()) {
    auto table = cast<RankedTensorType>(getPageTable().getType());
    if (failed(verifyPagesAndTable(*this, "key cache", kc, table)))
      return failure();
    if (differ(table.getDimSize(0), batch))
      return emitOpError("expected a page_table row per sequence, got ")
             << table.getDimSize(0) << " rows and batch " << batch;
  } else if (differ(kc.getDimSize(0), batch)) {
    return emitOpError("expected a contiguous cache row per sequence, got ")
           << kc.getDimSize(0) << " and batch " << batch;
  }
  if (failed(expectTensor(*this, "cache_seqlens", getCacheSeqlens().getType(),
                          {batch}, IntegerType::get(getContext(), 32))) ||
      failed(expectTensor(*this, "new_key_cache", getNewKeyCache().getType(),
                          kc.getShape(), kc.getElementType())) ||
      failed(expectTensor(*this, "new_value_cache",
                          getNewValueCache().getType(), vc.getShape(),
                          vc.getElementType())))
    return failure();
  return success();
}

#define GET_OP_CLASSES
#include "attn/AttnOps.cpp.inc"

//===----------------------------------------------------------------------===//
// HadamardOp, QuantizeOp
//===----------------------------------------------------------------------===//

static bool isAttnInputFloat(Type t) {
  return t.isF16() || t.isBF16() || t.isF32();
}

int64_t HadamardOp::getGroupSize() {
  int64_t d = cast<RankedTensorType>(getInput().getType()).getShape().back();
  return d & -d;
}

LogicalResult HadamardOp::verify() {
  auto x = cast<RankedTensorType>(getInput().getType());
  if (x.getRank() == 0 || !isAttnInputFloat(x.getElementType()))
    return emitOpError("expected a ranked tensor of f16, bf16 or f32, got ")
           << x;
  int64_t d = x.getShape().back();
  if (ShapedType::isDynamic(d) || d == 0)
    return emitOpError("expected a static, non-empty last dimension, got ")
           << shapeStr(d);
  return expectTensor(*this, "result", getResult().getType(), x.getShape(),
                      x.getElementType());
}

int64_t QuantizeOp::getHeadsPerFactor() {
  if (isBlockDescale(getDescale()))
    return 1;
  return cast<RankedTensorType>(getInput().getType()).getDimSize(1) /
         cast<RankedTensorType>(getDescale().getType()).getDimSize(1);
}

LogicalResult QuantizeOp::verify() {
  auto x = cast<RankedTensorType>(getInput().getType());
  if (x.getRank() != 4 || !isAttnInputFloat(x.getElementType()))
    return emitOpError("expected input [B, H, N, D] of f16, bf16 or f32, got ")
           << x;
  MLIRContext *ctx = getContext();
  if (failed(expectTensor(*this, "result", getResult().getType(), x.getShape(),
                          Float8E4M3FNType::get(ctx))))
    return failure();
  auto s = cast<RankedTensorType>(getDescale().getType());
  Type f32 = Float32Type::get(ctx);
  int64_t b = x.getDimSize(0), h = x.getDimSize(1), n = x.getDimSize(2);
  if (s.getRank() == 3) {
    int64_t blocks =
        ShapedType::isDynamic(n) ? n : llvm::divideCeil(n, kDescaleBlockRows);
    return expectTensor(*this, "descale (block form)", s, {b, h, blocks}, f32);
  }
  if (s.getRank() != 2)
    return emitOpError("expected descale [B, G] (one factor per group of "
                       "heads) or [B, H, ceil(N/64)] (per 64-row block), "
                       "got ")
           << shapeStr(s.getShape());
  int64_t groups = s.getDimSize(1);
  if (ShapedType::isDynamic(h) || ShapedType::isDynamic(groups))
    return emitOpError("expected a static head count and descale groups, got "
                       "H = ")
           << shapeStr(h) << " and G = " << shapeStr(groups);
  if (groups == 0 || h % groups != 0)
    return emitOpError("expected descale groups G to divide the head count, "
                       "got H = ")
           << h << " and G = " << groups;
  return expectTensor(*this, "descale", s, {b, groups}, f32);
}
