//===- QuantizeKernel.cpp - attn.quantize on the GPU ------------*- C++ -*-===//
//
// attn.quantize, with attn.hadamard before it optional, beside an fp8
// forward (plans with `quantize`): x [B, H, N, D] of bf16, f16 or f32 into
// e4m3 bytes and descales with the CPU lowering's arithmetic (Quantize.cpp):
// factor = amax / 448 (1 where amax is 0), x8 = e4m3(x / factor) rounded to
// nearest even and saturated at ±448, the rotation x·R / √D by Sylvester's
// Hadamard matrix (D a power of two: one group).
//
// Two entries over (ceil(N/64), H, B) CTAs of 64 rows. A factor per block
// (descale [B, H, ceil(N/64)]) takes fa_quantize alone: the CTA reduces its
// rows' max |x| (rotated), writes the factor, then reads the rows again (from
// the caches) for the e4m3 rows. A factor per group of g heads (descale
// [B, H/g]) takes fa_quantize_amax first, which writes each block's max to a
// workspace; fa_quantize then reduces the g·ceil(N/64) maxima of its group.
// Warp w owns rows 8w..8w+7, one per loop trip; lane l holds
// columns 128s + 4l + e of a row, so a warp moves 128 contiguous columns per
// access and the rotation's butterflies run over e and s in registers and
// over l by xor shuffles.
//
//===----------------------------------------------------------------------===//

#include "Fragments.h"
#include "HopperFp8.h"
#include "KernelParams.h"

#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <cmath>

using namespace mlir;
using namespace mlir::fa;
using namespace mlir::fa::gpu_lowering;

namespace {
constexpr int64_t kLaneColumns = 4;      // consecutive columns per access
constexpr int64_t kSegmentColumns = 128; // one warp access
constexpr int64_t kRowsPerWarp = kQuantizeRows / (kQuantizeThreads / 32);

/// The values and indices one CTA of either entry works with.
struct QuantizeBlock {
  KernelBuilder &kb;
  Block &entry;
  gpu::GPUModuleOp module;
  int64_t headDim;
  Type sourceType;
  Value block, head, batch; // the CTA's (index)
  Value arg(unsigned i) { return entry.getArgument(i); }
  Value size(unsigned i) { return kb.toIndex(arg(i)); }
  Value rotate() {
    return arith::CmpIOp::create(
        kb.b, kb.loc, arith::CmpIPredicate::ne, arg(kQuantRotate),
        arith::ConstantIntOp::create(kb.b, kb.loc, 0, 32));
  }
  /// Element offset of the CTA's row `row` (0..63) and of the lane's first
  /// column in segment 0.
  Value rowStart(Value row) {
    Value head0 = kb.add(kb.mul(batch, size(kQuantHeads)), head);
    Value r = kb.add(kb.mul(block, kQuantizeRows), row);
    return kb.mul(kb.add(kb.mul(head0, size(kQuantRows)), r), headDim);
  }
};
} // namespace

/// The lane's D/32 values of a row (f32, zeros past N): segment s, column e
/// at [s·4 + e].
static SmallVector<Value> loadRow(QuantizeBlock &q, Value start, Value valid) {
  KernelBuilder &kb = q.kb;
  OpBuilder &b = kb.b;
  Location loc = kb.loc;
  int64_t segments = q.headDim / kSegmentColumns;
  auto vecTy = VectorType::get({kLaneColumns}, q.sourceType);
  SmallVector<Type> types(segments * kLaneColumns, b.getF32Type());
  auto load = scf::IfOp::create(b, loc, types, valid, /*withElse=*/true);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(&load.getThenRegion().front());
  SmallVector<Value> vals;
  int64_t bytes = kLaneColumns * q.sourceType.getIntOrFloatBitWidth() / 8;
  for (int64_t s = 0; s < segments; ++s) {
    Value at = kb.add(kb.add(start, s * kSegmentColumns),
                      kb.mul(kb.lane, kLaneColumns));
    Value v =
        vector::LoadOp::create(b, loc, vecTy, q.arg(kQuantX), ValueRange{at},
                               false, llvm::MaybeAlign(bytes));
    for (int64_t e = 0; e < kLaneColumns; ++e) {
      Value x = vector::ExtractOp::create(b, loc, v, e);
      if (!q.sourceType.isF32())
        x = arith::ExtFOp::create(b, loc, b.getF32Type(), x);
      vals.push_back(x);
    }
  }
  scf::YieldOp::create(b, loc, vals);
  b.setInsertionPointToStart(&load.getElseRegion().front());
  scf::YieldOp::create(b, loc, SmallVector<Value>(vals.size(), kb.f32(0)));
  return SmallVector<Value>(load.getResults());
}

/// x·R / √D over the row the warp holds (`vals` as loadRow leaves them):
/// the Walsh-Hadamard butterflies (a + b, a − b) over each bit of the
/// column index, in Sylvester's order.
static void rotateRow(QuantizeBlock &q, SmallVector<Value> &vals) {
  KernelBuilder &kb = q.kb;
  OpBuilder &b = kb.b;
  Location loc = kb.loc;
  auto add = [&](Value x, Value y) -> Value {
    return arith::AddFOp::create(b, loc, x, y);
  };
  auto sub = [&](Value x, Value y) -> Value {
    return arith::SubFOp::create(b, loc, x, y);
  };
  auto inRegisters = [&](int64_t stride) {
    for (int64_t i = 0; i < static_cast<int64_t>(vals.size()); ++i)
      if (!(i & stride)) {
        Value lo = vals[i], hi = vals[i + stride];
        vals[i] = add(lo, hi), vals[i + stride] = sub(lo, hi);
      }
  };
  // Columns 4l + e: bits 0-1 are e, bits 2-6 the lane, bit 7 the segment.
  for (int64_t stride = 1; stride < kLaneColumns; stride *= 2)
    inRegisters(stride);
  for (int64_t mask = 1; mask < 32; mask *= 2) {
    Value bit = kb.remui(kb.divui(kb.lane, mask), 2);
    Value high =
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne, bit, kb.idx(0));
    for (Value &v : vals) {
      Value partner = kb.shuffleXor(v, mask);
      v = kb.select(high, sub(partner, v), add(v, partner));
    }
  }
  for (int64_t stride = kLaneColumns;
       stride < static_cast<int64_t>(vals.size()); stride *= 2)
    inRegisters(stride);
  Value norm = kb.f32(1.0 / std::sqrt(static_cast<double>(q.headDim)));
  for (Value &v : vals)
    v = arith::MulFOp::create(b, loc, v, norm);
}

/// One of the warp's rows: its start, whether it exists, its values
/// (rotated when the call asks).
struct QuantizeRow {
  Value start, valid;
  SmallVector<Value> vals;
};

/// Folds `body` over the warp's eight rows in an scf.for carrying one f32:
/// a row in flight per trip keeps the kernels at ~40 registers and many
/// warps per SM, which hid the memory latency better than eight rows in
/// flight at 80-127 registers (H100: 0.74 against 0.83 ms, PERF.md).
static Value foldRows(QuantizeBlock &q, Value init,
                      function_ref<Value(const QuantizeRow &, Value)> body) {
  KernelBuilder &kb = q.kb;
  auto loop = scf::ForOp::create(kb.b, kb.loc, kb.idx(0), kb.idx(kRowsPerWarp),
                                 kb.idx(1), ValueRange{init});
  OpBuilder::InsertionGuard g(kb.b);
  kb.b.setInsertionPointToStart(loop.getBody());
  Value row = kb.add(kb.mul(kb.warp, kRowsPerWarp), loop.getInductionVar());
  Value valid =
      kb.lt(kb.add(kb.mul(q.block, kQuantizeRows), row), q.size(kQuantRows));
  Value start = q.rowStart(row);
  SmallVector<Value> vals = loadRow(q, start, valid);
  auto rotate = scf::IfOp::create(kb.b, kb.loc, TypeRange(ValueRange(vals)),
                                  q.rotate(), true);
  {
    OpBuilder::InsertionGuard g2(kb.b);
    kb.b.setInsertionPointToStart(&rotate.getThenRegion().front());
    SmallVector<Value> rotated = vals;
    rotateRow(q, rotated);
    scf::YieldOp::create(kb.b, kb.loc, rotated);
    kb.b.setInsertionPointToStart(&rotate.getElseRegion().front());
    scf::YieldOp::create(kb.b, kb.loc, vals);
  }
  QuantizeRow r{start, valid, SmallVector<Value>(rotate.getResults())};
  scf::YieldOp::create(kb.b, kb.loc, body(r, loop.getRegionIterArg(0)));
  return loop.getResult(0);
}

static Value ctaMax(QuantizeBlock &q, Value x) {
  return reduceOverCta(q.kb, q.module, x, kQuantizeThreads / 32,
                       [&](Value a, Value b) { return q.kb.maxf(a, b); });
}

/// max |x| over the CTA's rows.
static Value rowsAmax(QuantizeBlock &q) {
  Value m = foldRows(q, q.kb.f32(0), [&](const QuantizeRow &row, Value m) {
    for (Value v : row.vals)
      m = q.kb.maxf(m, math::AbsFOp::create(q.kb.b, q.kb.loc, v));
    return m;
  });
  return ctaMax(q, m);
}

/// Stores `value` (f32) at `mem`[at] from thread 0 only, when `also`.
static void storeFromThread0(KernelBuilder &kb, Value value, Value mem,
                             Value at, Value also) {
  Value first = kb.eq(kb.tid, kb.idx(0));
  auto store = scf::IfOp::create(
      kb.b, kb.loc, arith::AndIOp::create(kb.b, kb.loc, first, also), false);
  OpBuilder::InsertionGuard g(kb.b);
  kb.b.setInsertionPointToStart(&store.getThenRegion().front());
  memref::StoreOp::create(kb.b, kb.loc, value, mem, ValueRange{at});
}

/// fa_quantize_amax (per-group descales only): amax[b, h, block] = max |x|
/// over the block's rows.
static void buildAmaxBody(QuantizeBlock &q) {
  KernelBuilder &kb = q.kb;
  Value amax = rowsAmax(q);
  Value blocks = kb.ceilDiv(q.size(kQuantRows), kQuantizeRows);
  Value head0 = kb.add(kb.mul(q.batch, q.size(kQuantHeads)), q.head);
  storeFromThread0(kb, amax, q.arg(kQuantAmax),
                   kb.add(kb.mul(head0, blocks), q.block),
                   kb.lt(q.block, blocks));
}

/// The maximum over every block of heads [h − h mod g, +g), g =
/// heads_per_factor > 0: fa_quantize_amax's maxima.
static Value groupAmax(QuantizeBlock &q, Value blocks) {
  KernelBuilder &kb = q.kb;
  OpBuilder &b = kb.b;
  Location loc = kb.loc;
  Value group = q.size(kQuantHeadsPerFactor);
  Value firstHead =
      kb.sub(q.head, arith::RemUIOp::create(b, loc, q.head, group));
  Value head0 = kb.add(kb.mul(q.batch, q.size(kQuantHeads)), firstHead);
  Value begin = kb.mul(head0, blocks);
  auto loop =
      scf::ForOp::create(b, loc, kb.tid, kb.mul(group, blocks),
                         kb.idx(kQuantizeThreads), ValueRange{kb.f32(0)});
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(loop.getBody());
    Value a = memref::LoadOp::create(
        b, loc, q.arg(kQuantAmax),
        ValueRange{kb.add(begin, loop.getInductionVar())});
    scf::YieldOp::create(b, loc, kb.maxf(loop.getRegionIterArg(0), a));
  }
  return ctaMax(q, loop.getResult(0));
}

/// The CTA's `factor` into the descale: [b, h, block] in the block form,
/// else [b, h / g] from the group's first CTA.
static void storeDescale(QuantizeBlock &q, Value factor, Value blocks) {
  KernelBuilder &kb = q.kb;
  OpBuilder &b = kb.b;
  Location loc = kb.loc;
  Value group = q.size(kQuantHeadsPerFactor);
  Value perBlock = kb.eq(group, kb.idx(0));
  Value head0 = kb.add(kb.mul(q.batch, q.size(kQuantHeads)), q.head);
  Value blockAt = kb.add(kb.mul(head0, blocks), q.block);
  Value safeGroup = kb.maxsi(group, kb.idx(1));
  Value groups = arith::DivUIOp::create(b, loc, q.size(kQuantHeads), safeGroup);
  Value groupAt = kb.add(kb.mul(q.batch, groups),
                         arith::DivUIOp::create(b, loc, q.head, safeGroup));
  Value firstOfGroup = arith::AndIOp::create(
      b, loc,
      kb.eq(arith::RemUIOp::create(b, loc, q.head, safeGroup), kb.idx(0)),
      kb.eq(q.block, kb.idx(0)));
  storeFromThread0(kb, factor, q.arg(kQuantDescale),
                   kb.select(perBlock, blockAt, groupAt),
                   kb.select(perBlock, kb.lt(q.block, blocks), firstOfGroup));
}

/// fa_quantize: the factor (of its own block's rows, or of its group's
/// maxima), its descale entry, the e4m3 rows.
static void buildQuantizeBody(QuantizeBlock &q) {
  KernelBuilder &kb = q.kb;
  OpBuilder &b = kb.b;
  Location loc = kb.loc;
  Value blocks = kb.ceilDiv(q.size(kQuantRows), kQuantizeRows);
  Value group = q.size(kQuantHeadsPerFactor);
  Value perBlock = kb.eq(group, kb.idx(0));
  auto covered =
      scf::IfOp::create(b, loc, TypeRange{b.getF32Type()}, perBlock, true);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&covered.getThenRegion().front());
    scf::YieldOp::create(b, loc, rowsAmax(q));
    b.setInsertionPointToStart(&covered.getElseRegion().front());
    scf::YieldOp::create(b, loc, groupAmax(q, blocks));
  }
  Value amax = covered.getResult(0);
  Value positive =
      arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, amax, kb.f32(0));
  Value factor = kb.select(
      positive, arith::DivFOp::create(b, loc, amax, kb.f32(448.0)), kb.f32(1));
  storeDescale(q, factor, blocks);

  // The rows again (in the block form the second read hits the caches).
  auto bytesTy = VectorType::get({kLaneColumns}, b.getI8Type());
  foldRows(q, kb.f32(0), [&](const QuantizeRow &row, Value unused) {
    auto store = scf::IfOp::create(b, loc, row.valid, false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&store.getThenRegion().front());
    for (int64_t s = 0; s < q.headDim / kSegmentColumns; ++s) {
      SmallVector<Value, 4> x;
      for (int64_t e = 0; e < kLaneColumns; ++e)
        x.push_back(arith::DivFOp::create(
            b, loc, row.vals[s * kLaneColumns + e], factor));
      Value packed = packE4M3x4(kb, x[0], x[1], x[2], x[3]);
      Value word = vector::BroadcastOp::create(
          b, loc, VectorType::get({1}, b.getI32Type()), packed);
      Value bytes = vector::BitCastOp::create(b, loc, bytesTy, word);
      Value at = kb.add(kb.add(row.start, s * kSegmentColumns),
                        kb.mul(kb.lane, kLaneColumns));
      vector::StoreOp::create(b, loc, bytes, q.arg(kQuantX8), ValueRange{at},
                              /*nontemporal=*/false, llvm::MaybeAlign(4));
    }
    return unused;
  });
}

void mlir::fa::gpu_lowering::buildQuantizeKernels(OpBuilder &b, Location loc,
                                                  gpu::GPUModuleOp module,
                                                  const KernelPlan &plan) {
  OpBuilder::InsertionGuard guard(b);
  KernelPlan ctaPlan = plan;
  ctaPlan.warps = kQuantizeThreads / 32;
  KernelParams params = quantizeParams(b.getContext(), plan);
  for (bool amax : {true, false}) {
    std::string name =
        (amax ? "fa_quantize_amax_" : "fa_quantize_") + plan.tag();
    auto func = createKernelFunc(b, loc, module, name, params, ctaPlan,
                                 kQuantizeSharedBytes);
    KernelBuilder kb(b, loc, ctaPlan);
    kb.setupThreadIds();
    QuantizeBlock q{kb,
                    func.getBody().front(),
                    module,
                    plan.headDim,
                    plan.quantizeSourceType(b.getContext()),
                    gpu::BlockIdOp::create(b, loc, gpu::Dimension::x),
                    gpu::BlockIdOp::create(b, loc, gpu::Dimension::y),
                    gpu::BlockIdOp::create(b, loc, gpu::Dimension::z)};
    if (amax)
      buildAmaxBody(q);
    else
      buildQuantizeBody(q);
    gpu::ReturnOp::create(b, loc);
    b.setInsertionPointAfter(func);
  }
}
