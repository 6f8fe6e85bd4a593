//===- KvAppendKernel.cpp - new keys and values into the cache --*- C++ -*-===//
//
// flash_attn_with_kvcache's append on the GPU, the lowering of attn.rotary
// followed by attn.kv_append (KvAppend.cpp has the CPU's): one thread per
// element. Grid y picks the tensor: 0 the new keys (rotated when rotary_dim
// > 0) and 1 the new values, each written to row cache_seqlens[b] + n of
// its sequence through the page table (clamped into the pool, as the decode
// reads it) or at [b, row] of a contiguous cache, rows past the capacity
// dropped; 2 the queries, rotated into q_out. The rotation is rotaryPair,
// the same f32 arithmetic as the CPU's. Memory bound and tiny next to the
// decode, so plain scalar accesses.
//
//===----------------------------------------------------------------------===//

#include "Fragments.h"
#include "KernelParams.h"
#include "SplitKv.h"

#include "fa/Dialect/Attn/Transforms/Transforms.h"

using namespace mlir;
using namespace mlir::fa;
using namespace mlir::fa::gpu_lowering;

namespace {
/// What one grid row (y) of fa_kv_append reads and writes.
struct AppendedTensor {
  Value source, dest;       // flat memrefs
  Value tokens, heads, dim; // index extents of the source [B, N, H, D]
  bool rotate, toCache;
};

/// The kernel body's shared values.
struct AppendContext {
  KernelBuilder &kb;
  Block &entry;
  Value arg(unsigned i) { return entry.getArgument(i); }
  Value size(unsigned i) { return kb.toIndex(arg(i)); }
};
} // namespace

/// max(v, 0) of an i32 loaded from `mem` at `at`, as an index.
static Value loadNonNegative(KernelBuilder &kb, Value mem, Value at) {
  Value raw = memref::LoadOp::create(kb.b, kb.loc, mem, ValueRange{at});
  Value v = arith::IndexCastOp::create(kb.b, kb.loc, kb.b.getIndexType(), raw);
  return kb.maxsi(v, kb.idx(0));
}

/// Element `e`'s value after the rotation of column `col` (row base
/// `rowBase` of the flat source) at position `pos`.
static Value rotated(AppendContext &cx, Value source, Value rowBase, Value col,
                     Value x, Value pos) {
  KernelBuilder &kb = cx.kb;
  OpBuilder &b = kb.b;
  Location loc = kb.loc;
  Value interleaved = arith::CmpIOp::create(
      b, loc, arith::CmpIPredicate::ne, cx.arg(kAppendInterleaved),
      arith::ConstantIntOp::create(b, loc, 0, 32));
  attn::RotaryColumn rc = attn::rotaryColumn(
      b, loc, col, cx.size(kAppendRotaryDim), interleaved);
  auto rotate = scf::IfOp::create(b, loc, TypeRange{x.getType()}, rc.rotated,
                                  /*withElseRegion=*/true);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(&rotate.getThenRegion().front());
  Value partner = memref::LoadOp::create(b, loc, source,
                                         ValueRange{kb.add(rowBase, rc.partner)});
  Value half = kb.divui(cx.size(kAppendRotaryDim), 2);
  Value at = kb.add(kb.mul(pos, half), rc.pair);
  Value c = memref::LoadOp::create(b, loc, cx.arg(kAppendCos), ValueRange{at});
  Value s = memref::LoadOp::create(b, loc, cx.arg(kAppendSin), ValueRange{at});
  auto f32 = [&](Value v) {
    return v.getType().isF32()
               ? v
               : arith::ExtFOp::create(b, loc, b.getF32Type(), v).getResult();
  };
  Value o = attn::rotaryValue(b, loc, rc, f32(x), f32(partner), c, s);
  if (!x.getType().isF32())
    o = arith::TruncFOp::create(b, loc, x.getType(), o);
  scf::YieldOp::create(b, loc, o);
  b.setInsertionPointToStart(&rotate.getElseRegion().front());
  scf::YieldOp::create(b, loc, x);
  return rotate.getResult(0);
}

/// The flat cache index of row `pos` of sequence `seq`, or none past the
/// capacity (the returned condition).
static std::pair<Value, Value> cacheRow(AppendContext &cx, Value seq,
                                        Value pos) {
  KernelBuilder &kb = cx.kb;
  Value maxPages = cx.size(kAppendMaxPages), pageSize = cx.size(kAppendPageSize);
  Value paged = arith::CmpIOp::create(kb.b, kb.loc, arith::CmpIPredicate::ne,
                                      maxPages, kb.idx(0));
  // A contiguous cache is one page of page_size rows per sequence.
  Value capacity = kb.select(paged, kb.mul(maxPages, pageSize), pageSize);
  Value fits = kb.lt(pos, capacity);
  Value slotIndex = arith::DivUIOp::create(kb.b, kb.loc, pos, pageSize);
  auto lookup = scf::IfOp::create(kb.b, kb.loc, TypeRange{kb.b.getIndexType()},
                                  arith::AndIOp::create(kb.b, kb.loc, paged, fits),
                                  /*withElseRegion=*/true);
  {
    OpBuilder::InsertionGuard g(kb.b);
    kb.b.setInsertionPointToStart(&lookup.getThenRegion().front());
    Value raw = memref::LoadOp::create(
        kb.b, kb.loc, cx.arg(kAppendPageTable),
        ValueRange{kb.add(kb.mul(seq, maxPages), slotIndex)});
    Value page = arith::IndexCastOp::create(kb.b, kb.loc,
                                            kb.b.getIndexType(), raw);
    Value last = kb.sub(cx.size(kAppendNumPages), kb.idx(1));
    scf::YieldOp::create(kb.b, kb.loc,
                         kb.minsi(kb.maxsi(page, kb.idx(0)), last));
    kb.b.setInsertionPointToStart(&lookup.getElseRegion().front());
    scf::YieldOp::create(kb.b, kb.loc, seq);
  }
  Value slot = kb.select(paged, arith::RemUIOp::create(kb.b, kb.loc, pos, pageSize),
                         pos);
  return {kb.add(kb.mul(lookup.getResult(0), pageSize), slot), fits};
}

/// One element of `t`: thread `e` of the grid row.
static void appendElement(AppendContext &cx, const AppendedTensor &t, Value e) {
  KernelBuilder &kb = cx.kb;
  Value col = arith::RemUIOp::create(kb.b, kb.loc, e, t.dim);
  Value row = arith::DivUIOp::create(kb.b, kb.loc, e, t.dim);
  Value head = arith::RemUIOp::create(kb.b, kb.loc, row, t.heads);
  Value seqTok = arith::DivUIOp::create(kb.b, kb.loc, row, t.heads);
  Value tok = arith::RemUIOp::create(kb.b, kb.loc, seqTok, t.tokens);
  Value seq = arith::DivUIOp::create(kb.b, kb.loc, seqTok, t.tokens);
  Value start = loadNonNegative(kb, cx.arg(kAppendSeqlens), seq);
  Value pos = kb.add(start, tok);
  Value x = memref::LoadOp::create(kb.b, kb.loc, t.source, ValueRange{e});
  if (t.rotate) {
    // A query at one position per sequence (flash-attn's non-causal q).
    Value same = arith::CmpIOp::create(kb.b, kb.loc, arith::CmpIPredicate::ne,
                                       cx.arg(kAppendSamePosition),
                                       arith::ConstantIntOp::create(kb.b, kb.loc, 0, 32));
    Value ropePos = t.toCache ? pos : kb.select(same, start, pos);
    ropePos = kb.minsi(ropePos, kb.sub(cx.size(kAppendMaxPos), kb.idx(1)));
    x = rotated(cx, t.source, kb.sub(e, col), col, x, ropePos);
  }
  if (!t.toCache) {
    memref::StoreOp::create(kb.b, kb.loc, x, t.dest, ValueRange{e});
    return;
  }
  auto [cacheRowIndex, fits] = cacheRow(cx, seq, pos);
  auto write = scf::IfOp::create(kb.b, kb.loc, fits, false);
  OpBuilder::InsertionGuard g(kb.b);
  kb.b.setInsertionPointToStart(&write.getThenRegion().front());
  Value at = kb.add(kb.mul(kb.add(kb.mul(cacheRowIndex, t.heads), head), t.dim),
                    col);
  memref::StoreOp::create(kb.b, kb.loc, x, t.dest, ValueRange{at});
}

gpu::GPUFuncOp mlir::fa::buildKvAppendKernel(OpBuilder &b, Location loc,
                                             gpu::GPUModuleOp module,
                                             const KernelPlan &plan) {
  OpBuilder::InsertionGuard guard(b);
  KernelPlan ctaPlan = plan;
  ctaPlan.warps = kKvAppendThreads / 32;
  KernelParams params = kvAppendParams(b.getContext(), plan);
  auto func = createKernelFunc(b, loc, module, "fa_kv_append_" + plan.tag(),
                               params, ctaPlan, /*sharedBytes=*/0);
  Block &entry = func.getBody().front();
  // The split forward, its dependent, may be scheduled at once.
  if (plan.dependentForward())
    inlinePtx(b, loc, "griddepcontrol.launch_dependents;");
  KernelBuilder kb(b, loc, ctaPlan);
  AppendContext cx{kb, entry};
  Value cta = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
  Value which = gpu::BlockIdOp::create(b, loc, gpu::Dimension::y);
  Value tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
  Value e = kb.add(kb.mul(cta, kKvAppendThreads), tid);
  Value batch = cx.size(kAppendBatch), newTokens = cx.size(kAppendNewTokens),
        kvHeads = cx.size(kAppendKvHeads);
  AppendedTensor tensors[3] = {
      {cx.arg(kAppendKeyNew), cx.arg(kAppendKeyCache), newTokens, kvHeads,
       kb.idx(plan.headDim), /*rotate=*/true, /*toCache=*/true},
      {cx.arg(kAppendValueNew), cx.arg(kAppendValueCache), newTokens, kvHeads,
       kb.idx(plan.headDimV), /*rotate=*/false, /*toCache=*/true},
      {cx.arg(kAppendQuery), cx.arg(kAppendQueryOut),
       cx.size(kAppendQueryTokens), cx.size(kAppendHeads),
       kb.idx(plan.headDim), /*rotate=*/true, /*toCache=*/false}};
  for (auto [i, t] : llvm::enumerate(tensors)) {
    Value count = kb.mul(kb.mul(kb.mul(batch, t.tokens), t.heads), t.dim);
    Value mine = arith::AndIOp::create(
        b, loc,
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, which,
                              kb.idx(i)),
        kb.lt(e, count));
    auto body = scf::IfOp::create(b, loc, mine, false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&body.getThenRegion().front());
    appendElement(cx, t, e);
  }
  gpu::ReturnOp::create(b, loc);
  return func;
}
