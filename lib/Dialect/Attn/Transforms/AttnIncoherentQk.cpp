//===- AttnIncoherentQk.cpp - attn-incoherent-qk ----------------*- C++ -*-===//
//
// FA3's incoherent processing as a rewrite before the attention op: the
// f32/bf16 Q and K that an fp8 attn.attention quantises (attn.quantize) are
// rotated by an orthonormal Hadamard matrix first. Attention is unchanged in
// exact arithmetic; e4m3 rounding is not, since an outlier column no longer
// sets the rounding step of its whole head.
//
//===----------------------------------------------------------------------===//

#include "Utils.h"
#include "fa/Dialect/Attn/IR/Attn.h"
#include "fa/Dialect/Attn/Transforms/Passes.h"

namespace mlir::fa::attn {
#define GEN_PASS_DEF_ATTNINCOHERENTQKPASS
#include "fa/Dialect/Attn/Transforms/Passes.h.inc"
} // namespace mlir::fa::attn

using namespace mlir;
using namespace mlir::fa::attn;
using namespace mlir::fa::attn::detail;

/// The attn.quantize that gives both the fp8 tensor `x8` and its `descale`.
static QuantizeOp quantizeOf(Value x8, Value descale) {
  auto quantize = x8.getDefiningOp<QuantizeOp>();
  if (!quantize || x8 != quantize.getResult() ||
      descale != quantize.getDescale())
    return nullptr;
  return quantize;
}

/// Whether `use` is one of `op`'s Q, K, descale_q or descale_k operands.
static bool isRotatedOperand(AttentionOp op, OpOperand &use) {
  return &use == &op.getQueryMutable() || &use == &op.getKeyMutable() ||
         &use == &op.getDescaleQMutable()[0] ||
         &use == &op.getDescaleKMutable()[0];
}

/// `quantize` as the op's own: one that anything else also reads (another
/// op, or this op's V) is copied for Q and K, so the rest keep the
/// unrotated values.
static QuantizeOp ownQuantize(IRRewriter &rw, AttentionOp op,
                              QuantizeOp quantize) {
  bool shared = llvm::any_of(quantize->getUses(), [&](OpOperand &use) {
    return !isRotatedOperand(op, use);
  });
  if (!shared)
    return quantize;
  rw.setInsertionPoint(op);
  auto copy = cast<QuantizeOp>(rw.clone(*quantize));
  rw.modifyOpInPlace(op, [&] {
    for (OpOperand &o : op->getOpOperands())
      if (o.get().getDefiningOp() == quantize && isRotatedOperand(op, o))
        o.set(copy->getResult(cast<OpResult>(o.get()).getResultNumber()));
  });
  return copy;
}

static void rotateInput(IRRewriter &rw, QuantizeOp quantize) {
  Value x = quantize.getInput();
  if (x.getDefiningOp<HadamardOp>())
    return;
  rw.setInsertionPoint(quantize);
  Value rotated = HadamardOp::create(rw, quantize.getLoc(), x.getType(), x);
  rw.modifyOpInPlace(quantize,
                     [&] { quantize.getInputMutable().assign(rotated); });
}

namespace {
struct AttnIncoherentQkPass final
    : mlir::fa::attn::impl::AttnIncoherentQkPassBase<AttnIncoherentQkPass> {
  void runOnOperation() override {
    IRRewriter rw(&getContext());
    for (AttentionOp op : fp8Attentions(getOperation())) {
      QuantizeOp q = quantizeOf(op.getQuery(), op.getDescaleQ());
      QuantizeOp k = quantizeOf(op.getKey(), op.getDescaleK());
      if (!q || !k) {
        op.emitWarning("Q and K are not quantised here (attn.quantize of "
                       "both the fp8 input and its descale): they cannot be "
                       "rotated");
        continue;
      }
      q = ownQuantize(rw, op, q);
      k = quantizeOf(op.getKey(), op.getDescaleK());
      k = ownQuantize(rw, op, k);
      rotateInput(rw, q);
      if (k != q)
        rotateInput(rw, k);
    }
  }
};
} // namespace
