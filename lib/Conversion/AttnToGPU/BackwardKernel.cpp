//===- BackwardKernel.cpp - the FlashAttention-2 backward kernels -*- C++
//-*-===//
//
// Seed 4.3 as three kernels (docs/ABI.md):
//   fa_bwd_pre   Delta = rowsum(dO∘O), dq_accum = 0. All threads work and
//                a warp's accesses are contiguous: the lanes of a row (a
//                power of two ≥ its chunk count, ≤ 32) take consecutive
//                chunks of O and dO (16 bytes, or as wide as the rows'
//                alignment allows) and sum their partial products with xor
//                shuffles; dq_accum's rows are zeroed as one run of chunks.
//   fa_bwd       one CTA per key block and key head (dsplit CTAs, each
//                owning a column slice of dK, dV and dQ, when D + Dv > 256;
//                Sᵀ and dPᵀ are recomputed by each); warp w owns keys
//                [16w, 16w + 16). For every query head of the GQA group and
//                every query tile in the key block's band it recomputes
//                Sᵀ = K·Qᵀ and Pᵀ = exp(Sᵀ − LSE), then
//                dV += Pᵀ·dO, dPᵀ = V·dOᵀ, dSᵀ = Pᵀ∘(dPᵀ − Delta)·scale,
//                dK += dSᵀ·Q (dK, dV in registers), and dQ += dS·K through
//                dSᵀ in shared memory and f32 vector reductions into
//                dq_accum (not bit-deterministic run to run).
//                The next query tile's Q, dO, LSE and Delta are loaded with
//                cp.async while the dQ products of the current tile run.
//   fa_bwd_post  dQ = dq_accum in the element type, the block's rows as one
//                run of f32 chunks (16 bytes unless D % 4 ≠ 0), thread t
//                taking t + k·threads.
// fa_bwd (mma.sync) is built at the GPU tile level (attn_gpu ops, lowered
// by BackwardTileLowering.cpp); with mma = wgmma (sm_90a) its body is
// HopperBackwardKernel.cpp's.
//
//===----------------------------------------------------------------------===//

#include "TiledLoopNest.h"
#include "VarlenKernel.h"
#include "Wgmma.h"

#include "fa/Dialect/AttnGPU/IR/AttnGPU.h"

#include "fa/Dialect/Attn/Transforms/OnlineSoftmaxMath.h"
#include "fa/Dialect/Attn/Transforms/Transforms.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "llvm/Support/MathExtras.h"

#include <cmath>

using namespace mlir;
using namespace mlir::fa;
using namespace mlir::fa::gpu_lowering;

namespace ag = mlir::fa::attn_gpu;

namespace {
/// This CTA's block of query rows (grid (ceil(Nq/block_q), heads, batch)).
/// The rows of one (batch, head) pair are contiguous in Delta and dq_accum,
/// so the block is one contiguous run of their rows; O, dO and dQ are the
/// caller's, addressed through their strides from (batch, head, row0).
struct QueryBlock {
  Value first; // index: the block's first row among all (batch, head) rows
  Value count; // index: min(block_q, Nq − its first row in the head), ≥ 1
  Value batch, head, row0; // index: the block's (batch, head, first row)
};
} // namespace

/// `v` (index) through an opaque 64-bit move, re-evaluated where it is
/// used: a row stride read this way inside the query-tile loops keeps LLVM
/// from hoisting every copy's row·stride product out of them (with odd head
/// dims, one per 2-byte copy), which would hold them all in registers.
static Value opaqueIndex64(KernelBuilder &kb, Value v) {
  OpBuilder &b = kb.b;
  Value i64v = arith::IndexCastOp::create(b, kb.loc, b.getI64Type(), v);
  return arith::IndexCastOp::create(b, kb.loc, b.getIndexType(),
                                    opaqueI64(kb, i64v));
}

/// `ptr` (a global pointer) through an opaque 64-bit move: loads through it
/// stay where they are (LLVM cannot hoist them out of a loop), so values
/// derived from them are re-read instead of held in registers.
static Value opaquePointer(KernelBuilder &kb, Value ptr) {
  OpBuilder &b = kb.b;
  Value i64v = LLVM::PtrToIntOp::create(b, kb.loc, b.getI64Type(), ptr);
  return LLVM::IntToPtrOp::create(b, kb.loc, ptr.getType(),
                                  opaqueI64(kb, i64v));
}

static QueryBlock queryBlock(KernelBuilder &kb, Value headsArg, Value nqArg) {
  OpBuilder &b = kb.b;
  Location loc = kb.loc;
  Value heads = kb.toIndex(headsArg);
  Value nq = kb.toIndex(nqArg);
  Value qBlock = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
  Value head = gpu::BlockIdOp::create(b, loc, gpu::Dimension::y);
  Value batch = gpu::BlockIdOp::create(b, loc, gpu::Dimension::z);
  Value row0 = kb.mul(qBlock, kb.plan.blockQ);
  Value first = kb.add(kb.mul(kb.add(kb.mul(batch, heads), head), nq), row0);
  return {first, kb.minsi(kb.sub(nq, row0), kb.idx(kb.plan.blockQ)), batch,
          head, row0};
}

/// Calls `fn(at, ok)` for this thread's chunks (`width` elements, dividing
/// `cols`) of the block's rows of a row-major matrix with `cols` columns: the
/// block is one run of block_q · cols / width chunks, thread t takes chunks t,
/// t + threads, …, so a warp touches consecutive chunks. `at` is the chunk's
/// element offset; `ok` is false for chunks of rows at or past Nq.
static void forEachBlockChunk(KernelBuilder &kb, const QueryBlock &block,
                              int64_t cols, int64_t width,
                              function_ref<void(Value, Value)> fn) {
  const int64_t perRow = cols / width, threads = kb.plan.threads();
  Value base = kb.mul(block.first, cols);
  Value limit = kb.mul(block.count, perRow);
  for (int64_t c0 = 0; c0 < kb.plan.blockQ * perRow; c0 += threads) {
    Value chunk = kb.add(kb.tid, c0);
    fn(kb.add(base, kb.mul(chunk, width)), kb.lt(chunk, limit));
  }
}

/// A `vector.load` of `type`, aligned to its size, from `mem[ok ? at : safe]`:
/// unconditional, so that no branch separates a thread's loads and they are
/// all in flight at once; `safe` is an offset inside the block for the
/// lanes whose chunk lies past Nq or past the row (their data is dropped).
static Value loadClamped(KernelBuilder &kb, Value mem, Value at, Value ok,
                         Value safe, VectorType type) {
  int64_t bytes = type.getNumElements() * type.getElementTypeBitWidth() / 8;
  return vector::LoadOp::create(kb.b, kb.loc, type, mem,
                                ValueRange{kb.select(ok, at, safe)}, false,
                                llvm::MaybeAlign(bytes));
}

/// fa_bwd_pre, every thread of the CTA busy and each warp's accesses
/// contiguous. Delta: the `lanes` consecutive lanes of a row (the power of
/// two ≥ its chunk count, at most 32) take its chunks j, j + lanes, … of O and
/// dO (threads / lanes rows at a time), form f32 partial dot products, sum
/// them with a butterfly of shuffles over the row's lanes, and the row's
/// lane 0 stores. dq_accum: the block's D-column rows as one run of chunks.
/// Eight e4m3 bytes (vector<8xi8>) as f32 times `factor`, by cvt to f16
/// pairs.
static Value decodeE4M3x8(KernelBuilder &kb, Value bytes, Value factor) {
  OpBuilder &b = kb.b;
  Location loc = kb.loc;
  Type f32 = b.getF32Type();
  auto pairs = vector::BitCastOp::create(
      b, loc, VectorType::get({4}, b.getI16Type()), bytes);
  Value out = arith::ConstantOp::create(
      b, loc, VectorType::get({8}, f32),
      DenseElementsAttr::get(VectorType::get({8}, f32), b.getF32FloatAttr(0)));
  for (int64_t i = 0; i < 4; ++i) {
    Value pair = vector::ExtractOp::create(b, loc, pairs, i).getResult();
    Value halves =
        inlinePtx(b, loc, b.getI32Type(), "cvt.rn.f16x2.e4m3x2 $0, $1;",
                  ValueRange{pair}, "=r,h", /*sideEffects=*/false);
    Value h2 = vector::BitCastOp::create(
        b, loc, VectorType::get({2}, b.getF16Type()),
        vector::BroadcastOp::create(
            b, loc, VectorType::get({1}, b.getI32Type()), halves));
    for (int64_t j = 0; j < 2; ++j) {
      Value half = vector::ExtractOp::create(b, loc, h2, j);
      Value x = arith::ExtFOp::create(b, loc, f32, half);
      out = vector::InsertOp::create(
          b, loc, arith::MulFOp::create(b, loc, x, factor), out, 2 * i + j);
    }
  }
  return out;
}

static void buildPreKernel(OpBuilder &b, Location loc, gpu::GPUModuleOp module,
                           const KernelPlan &plan) {
  // fp8: O in bf16, dO's e4m3 bytes scaled by their descale.
  Type elem = plan.outputElemType(), f32 = b.getF32Type();
  Type doElem = plan.isFp8() ? b.getI8Type() : elem;
  KernelParams params = backwardPreParams(b.getContext(), plan);
  auto func = createKernelFunc(b, loc, module, "fa_bwd_pre_" + plan.tag(),
                               params, plan, 0);
  Block &entry = func.getBody().front();
  Value oMem = entry.getArgument(0), doMem = entry.getArgument(1),
        deltaMem = entry.getArgument(2), dqMem = entry.getArgument(3);
  KernelBuilder kb(b, loc, plan);
  kb.setupThreadIds();
  QueryBlock block = queryBlock(kb, entry.getArgument(5), entry.getArgument(6));
  // O and dO in the caller's layout: each thread's rows from the block's
  // first row of the head.
  StridedTensor oT = stridedTensor(kb, oMem, params.strides(entry, 0));
  StridedTensor doT = stridedTensor(kb, doMem, params.strides(entry, 1));
  Value oFirst = oT.rowOffset(kb, oT.headBase(kb, block.batch, block.head),
                              block.row0);
  Value doFirst = doT.rowOffset(kb, doT.headBase(kb, block.batch, block.head),
                                block.row0);

  // Chunks of 8 elements (16 bytes) when Dv allows, else as wide as the
  // rows' alignment.
  const int64_t dv = plan.headDimV,
                width = rowChunkElems(dv, elem.getIntOrFloatBitWidth() / 8);
  const int64_t chunks = dv / width;
  const int64_t lanes = std::min<int64_t>(llvm::PowerOf2Ceil(chunks), 32);
  const int64_t perLane = llvm::divideCeil(chunks, lanes);
  Value laneInRow = kb.remui(kb.tid, lanes);
  Value rowInStep = kb.divui(kb.tid, lanes);
  auto v8 = VectorType::get({width}, elem);
  auto doVec = VectorType::get({width}, doElem);
  Value doFactor;
  if (plan.isFp8()) { // descale_do[b, h / (H / Hkv)]
    const unsigned at = params.descaleParam;
    Value heads = kb.toIndex(entry.getArgument(5));
    Value kvHeads = kb.toIndex(entry.getArgument(at + 1));
    Value kvHead = arith::DivUIOp::create(
        b, loc, block.head, arith::DivUIOp::create(b, loc, heads, kvHeads));
    doFactor = memref::LoadOp::create(
        b, loc, entry.getArgument(at),
        ValueRange{kb.add(kb.mul(block.batch, kvHeads), kvHead)});
  }
  // Every load first; lanes whose row lies at or past Nq or whose chunk lies
  // past the row read the block's first chunk and add nothing.
  SmallVector<Value> rows, oks, oChunks, doChunks;
  for (int64_t r0 = 0; r0 < plan.blockQ; r0 += plan.threads() / lanes) {
    Value row = kb.add(rowInStep, r0);
    rows.push_back(row);
    for (int64_t c0 = 0; c0 < chunks; c0 += lanes) {
      Value chunk = kb.add(laneInRow, c0);
      Value ok = kb.lt(row, block.count);
      if (c0 + lanes > chunks)
        ok = arith::AndIOp::create(b, loc, ok, kb.lt(chunk, kb.idx(chunks)));
      Value col = kb.mul(chunk, width);
      Value oAt = kb.add(kb.add(oFirst, kb.mul(row, oT.rowStride)), col);
      Value doAt = kb.add(kb.add(doFirst, kb.mul(row, doT.rowStride)), col);
      oks.push_back(ok);
      oChunks.push_back(loadClamped(kb, oMem, oAt, ok, oFirst, v8));
      Value dO = loadClamped(kb, doMem, doAt, ok, doFirst, doVec);
      doChunks.push_back(doFactor ? decodeE4M3x8(kb, dO, doFactor) : dO);
    }
  }
  // The shuffles run on all lanes (full mask); only the stores are guarded.
  Value isFirstLane = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                                            laneInRow, kb.idx(0));
  for (auto [r, row] : llvm::enumerate(rows)) {
    Value sum = kb.f32(0);
    for (int64_t c = 0; c < perLane; ++c) {
      int64_t i = r * perLane + c;
      Value prod = attn::buildDeltaTerm(b, loc, oChunks[i], doChunks[i]);
      sum = kb.select(oks[i],
                      vector::ReductionOp::create(
                          b, loc, vector::CombiningKind::ADD, prod, sum),
                      sum);
    }
    for (int64_t mask = lanes / 2; mask > 0; mask /= 2)
      sum = arith::AddFOp::create(b, loc, sum, kb.shuffleXor(sum, mask));
    Value ok =
        arith::AndIOp::create(b, loc, isFirstLane, kb.lt(row, block.count));
    auto ifOp = scf::IfOp::create(b, loc, ok, false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&ifOp.getThenRegion().front());
    memref::StoreOp::create(b, loc, sum, deltaMem,
                            ValueRange{kb.add(block.first, row)});
  }

  const int64_t accWidth = rowChunkElems(plan.headDim, 4);
  auto f4 = VectorType::get({accWidth}, f32);
  Value zero = arith::ConstantOp::create(
      b, loc, f4, DenseElementsAttr::get(f4, b.getF32FloatAttr(0)));
  forEachBlockChunk(kb, block, plan.headDim, accWidth, [&](Value at, Value ok) {
    auto ifOp = scf::IfOp::create(b, loc, ok, false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&ifOp.getThenRegion().front());
    vector::StoreOp::create(b, loc, zero, dqMem, ValueRange{at}, false,
                            llvm::MaybeAlign(accWidth * 4));
  });
  gpu::ReturnOp::create(b, loc);
}

/// fa_bwd_post: the block's rows of dq_accum as one run of f32 chunks (4
/// columns, 16 bytes; fewer when D % 4 ≠ 0 leaves rows less aligned),
/// thread t taking chunks t, t + threads, …; all loads first (chunks past Nq
/// read the block's first), then the stores of the element type where `ok`.
/// The warp-specialised wgmma backward (D in {64, 96, 128}, 4-column chunks)
/// leaves chunk c of query row r at chunk c ^ (r mod 8) of its dq_accum row
/// (docs/ABI.md): its post kernel reads chunk c from there.
static void buildPostKernel(OpBuilder &b, Location loc, gpu::GPUModuleOp module,
                            const KernelPlan &plan) {
  // dQ in bf16 for fp8 inputs.
  Type elem = plan.outputElemType(), f32 = b.getF32Type();
  KernelParams params = backwardPostParams(b.getContext(), plan);
  auto func = createKernelFunc(b, loc, module, "fa_bwd_post_" + plan.tag(),
                               params, plan, 0);
  // The panels' addresses beside every chunk in flight spill 8 B where
  // ptxas aims for two CTAs per SM (80 registers); one is plenty.
  if (plan.dqAccumPanels() > 1)
    func->setAttr(NVVM::NVVMDialect::getMinctasmAttrName(),
                  b.getI32IntegerAttr(1));
  Block &entry = func.getBody().front();
  Value accMem = entry.getArgument(0), dqMem = entry.getArgument(1);
  KernelBuilder kb(b, loc, plan);
  kb.setupThreadIds();
  QueryBlock block = queryBlock(kb, entry.getArgument(3), entry.getArgument(4));
  // dQ in the caller's layout (the layout of q).
  StridedTensor dqT = stridedTensor(kb, dqMem, params.strides(entry, 0));
  Value dqFirst = dqT.rowOffset(kb, dqT.headBase(kb, block.batch, block.head),
                                block.row0);
  const int64_t width = rowChunkElems(plan.headDim, 4);
  auto f4 = VectorType::get({width}, f32), e4 = VectorType::get({width}, elem);
  Value safe = kb.mul(block.first, plan.headDim);
  SmallVector<Value> ats, oks, values;
  const int64_t perRow = plan.headDim / width;
  int64_t first = 0;
  forEachBlockChunk(kb, block, plan.headDim, width, [&](Value at, Value ok) {
    Value chunk = kb.add(kb.tid, first);
    Value row = kb.divui(chunk, perRow), c = kb.remui(chunk, perRow);
    ats.push_back(kb.add(kb.add(dqFirst, kb.mul(row, dqT.rowStride)),
                         kb.mul(c, width)));
    oks.push_back(ok);
    Value from = at;
    if (plan.dqAccumPanels() > 1) {
      // Panel p = c / perPanel of the (batch, head)'s rows, first·D − row0·D
      // = (batch·H + head)·Nq·D floats in: row 2·(b·H + h)·Nq + p·Nq + r0 +
      // row of D/P floats, chunk (c mod perPanel) ^ (row mod 8).
      const int64_t panels = plan.dqAccumPanels();
      const int64_t perPanel = perRow / panels, panelCols = plan.headDim / panels;
      Value headRows = kb.sub(block.first, block.row0);
      Value p = kb.divui(c, perPanel);
      Value cc = arith::XOrIOp::create(b, loc, kb.remui(c, perPanel),
                                       kb.remui(row, 8));
      Value panelRow = kb.add(
          kb.add(kb.mul(headRows, panels),
                 kb.mul(p, kb.toIndex(entry.getArgument(4)))),
          kb.add(block.row0, row));
      from = kb.add(kb.mul(panelRow, panelCols), kb.mul(cc, width));
    } else if (plan.dqAccumSwizzled()) {
      // The block starts at a multiple of block_q (of 8) rows of its head,
      // so the chunk's row in the block gives r mod 8.
      Value swizzled = arith::XOrIOp::create(b, loc, c, kb.remui(row, 8));
      from = kb.add(kb.sub(at, kb.mul(c, width)), kb.mul(swizzled, width));
    }
    first += plan.threads();
    values.push_back(loadClamped(kb, accMem, from, ok, safe, f4));
  });
  for (auto [at, ok, v] : llvm::zip_equal(ats, oks, values)) {
    auto ifOp = scf::IfOp::create(b, loc, ok, false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&ifOp.getThenRegion().front());
    Value out = elem.isF32() ? v : arith::TruncFOp::create(b, loc, e4, v);
    vector::StoreOp::create(
        b, loc, out, dqMem, ValueRange{at}, false,
        llvm::MaybeAlign(width * elem.getIntOrFloatBitWidth() / 8));
  }
  gpu::ReturnOp::create(b, loc);
}

/// fa_bwd with the parameters of docs/ABI.md, for either body.
static gpu::GPUFuncOp createMainKernel(OpBuilder &b, Location loc,
                                       gpu::GPUModuleOp module,
                                       const KernelPlan &plan,
                                       const KernelParams &params) {
  return createKernelFunc(b, loc, module, "fa_bwd_" + plan.tag(), params,
                          plan, plan.backwardSharedBytes());
}

namespace {
/// fa_bwd (mma.sync) as attn_gpu tile ops: the tiled loops mapped to the
/// grid (CTA = (key block and column slice, key head, batch)), the query
/// heads of the GQA group and the query blocks of the tiled loop as two
/// scf.for loops carrying the dK and dV fragments, their body the schedule
/// of the file comment. The index arithmetic is the kernel's own; the tile
/// ops lower in place (ConvertAttnGPUToNVVM.cpp), so the kernel's code is
/// the one the fragment builders always emitted.
class BackwardTileBuilder {
public:
  BackwardTileBuilder(OpBuilder &b, Location loc, const KernelPlan &plan,
                      gpu::GPUFuncOp func, const KernelParams &params)
      : b(b), loc(loc), ctx(b.getContext()), plan(plan), kb(b, loc, plan),
        entry(func.getBody().front()), params(params) {}

  void build(gpu::GPUModuleOp module, const TiledLoopNest &loops);

private:
  Value arg(unsigned i) { return entry.getArgument(i); }
  void mapGrid();
  void declareSharedTiles();
  void loadQueryTile(Value head, Value qBegin);
  /// The first row of (batch, head) in LSE, Delta and dq_accum: [B, H, Nq],
  /// or a varlen batch's [H, Tq] from the sequence's first query.
  Value rowsBaseOf(Value head) {
    if (plan.varlen)
      return kb.add(kb.mul(head, nqTotal), seqStartQ);
    return kb.mul(kb.add(kb.mul(batch, heads), head), nq);
  }
  /// Row 0 of `head` of this CTA's batch in `t`: a varlen batch's packed
  /// tensors start the sequence at row `seqStart` of batch 0.
  Value headBase(const StridedTensor &t, Value head, Value seqStart) {
    if (!plan.varlen)
      return t.headBase(kb, batch, head);
    return kb.add(t.headBase(kb, kb.idx(0), head),
                  kb.mul(seqStart, t.rowStride));
  }
  ag::FragmentType f32Fragment(int64_t cols,
                               ag::FragmentLayout layout =
                                   ag::FragmentLayout::Accumulator) {
    return ag::FragmentType::get(ctx, 16, cols, b.getF32Type(), layout);
  }
  std::pair<Value, Value> recomputeScores(Value head, Value qBegin,
                                          Value &derivative);
  void buildQueryTile(scf::ForOp headLoop, scf::ForOp tileLoop, Value head,
                      Value qRowsBase);
  void prefetchNextTile(scf::ForOp headLoop, scf::ForOp tileLoop);
  void loadSequence(Value cuQ, Value cuK);
  void storeGradients(ValueRange res);

  OpBuilder &b;
  Location loc;
  MLIRContext *ctx;
  const KernelPlan &plan;
  KernelBuilder kb;
  Block &entry;
  const KernelParams &params;
  Value heads, kvHeads, nq, nk, kBlock, kvHead, batch, group, kBegin;
  // Varlen: the token totals, the offsets and the CTA's sequence's first
  // query and key rows (nq, nk are then the sequence's lengths).
  Value nqTotal, nkTotal, cuSeqlensQ, cuSeqlensK, seqStartQ, seqStartK;
  Value colK, colV; // first column of this CTA's slices; null for dsplit 1
  Value stats, dqAddress, scaleLog2, keyRow0, iBegin, iEnd;
  Value kTile, vTile, qTile, doTile, dsTile;
  StridedTensor qT, kT, vT, doT;
};
} // namespace

/// Block ids → (key block and column slice, key head, batch). Grid x
/// enumerates (key block, column slice) with the slices of one key block
/// adjacent, so they read the same K/V rows close together in time.
void BackwardTileBuilder::mapGrid() {
  heads = kb.toIndex(arg(10)), kvHeads = kb.toIndex(arg(11));
  nq = kb.toIndex(arg(12)), nk = kb.toIndex(arg(13));
  kBlock = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
  if (plan.dsplit > 1) {
    Value part = kb.remui(kBlock, plan.dsplit);
    kBlock = kb.divui(kBlock, plan.dsplit);
    colK = kb.mul(part, plan.sliceHeadDim());
    colV = kb.mul(part, plan.sliceHeadDimV());
  }
  kvHead = gpu::BlockIdOp::create(b, loc, gpu::Dimension::y);
  batch = gpu::BlockIdOp::create(b, loc, gpu::Dimension::z);
  group = arith::DivUIOp::create(b, loc, heads, kvHeads);
  kBegin = kb.mul(kBlock, plan.blockKV);
  if (!plan.varlen)
    return;
  // Grid z is the sequence; its rows are clamped as attn-tile's IR clamps
  // them, so bad offsets never address memory outside the tensors.
  nqTotal = nq, nkTotal = nk;
  cuSeqlensQ = arg(params.cuSeqlensParam);
  cuSeqlensK = arg(params.cuSeqlensParam + 1);
  loadSequence(cuSeqlensQ, cuSeqlensK);
}

/// The CTA's sequence's first rows and lengths from the offsets at cuQ and
/// cuK (nq, nk, seqStartQ, seqStartK).
void BackwardTileBuilder::loadSequence(Value cuQ, Value cuK) {
  SequenceRows q = loadSequenceRows(b, loc, cuQ, batch, nqTotal);
  SequenceRows k = loadSequenceRows(b, loc, cuK, batch, nkTotal);
  seqStartQ = q.start, nq = q.length;
  seqStartK = k.start, nk = k.length;
}

/// Shared memory: K | V (resident) | Q | dO (per query tile) | dSᵀ, rows
/// padded by 16 B; the query tile's LSE and Delta in K's row padding, seen
/// through the buffer's f32 view.
void BackwardTileBuilder::declareSharedTiles() {
  const int64_t bq = plan.blockQ, bkv = plan.blockKV;
  const int64_t kElems = bkv * plan.strideQK(), vElems = bkv * plan.strideV(),
                qElems = bq * plan.strideQK(), doElems = bq * plan.strideV();
  const int64_t pad = plan.chunkElems(); // 16 B
  const int64_t smemElems =
      kElems + vElems + qElems + doElems + bkv * (bq + pad);
  ag::SharedMemoryOp::create(b, loc, smemElems, plan.elemType);
  stats = ag::SharedF32ViewOp::create(
      b, loc,
      MemRefType::get({smemElems * plan.elemBytes() / 4}, b.getF32Type(),
                      MemRefLayoutAttrInterface(), b.getI64IntegerAttr(3)));
  dqAddress = kb.globalAddress(arg(6));
  auto tile = [&](int64_t offset, int64_t rows, int64_t cols, int64_t stride) {
    auto type =
        ag::SharedTileType::get(ctx, rows, cols, plan.elemType, stride,
                                /*swizzle=*/false);
    return ag::SharedTileOp::create(b, loc, type, Value(), offset,
                                    IntegerAttr());
  };
  kTile = tile(0, bkv, plan.headDim, plan.strideQK());
  vTile = tile(kElems, bkv, plan.headDimV, plan.strideV());
  qTile = tile(kElems + vElems, bq, plan.headDim, plan.strideQK());
  doTile = tile(kElems + vElems + qElems, bq, plan.headDimV, plan.strideV());
  dsTile = tile(kElems + vElems + qElems + doElems, bkv, bq, bq + pad);
}

/// Q, dO, LSE and Delta of the query tile at qBegin of query head `head`
/// (rows at or past Nq zero-filled). Q's and dO's strides are read afresh
/// (opaqueIndex64) in each tile's loads.
void BackwardTileBuilder::loadQueryTile(Value head, Value qBegin) {
  auto opaque = [&](const StridedTensor &t) {
    return StridedTensor{t.mem, opaqueIndex64(kb, t.batchStride),
                         opaqueIndex64(kb, t.headStride),
                         opaqueIndex64(kb, t.rowStride)};
  };
  StridedTensor q = opaque(qT), dO = opaque(doT);
  ag::AsyncCopyOp::create(b, loc, arg(0), headBase(q, head, seqStartQ),
                          qBegin, nq, q.rowStride, qTile, Value(),
                          ValueRange());
  ag::AsyncCopyOp::create(b, loc, arg(3), headBase(dO, head, seqStartQ),
                          qBegin, nq, dO.rowStride, doTile, Value(),
                          ValueRange());
  ag::AsyncCopyRowStatsOp::create(b, loc, arg(4), arg(5), rowsBaseOf(head),
                                  qBegin, nq, stats, kTile, plan.blockQ);
}

/// Sᵀ = K·Qᵀ for the warp's 16 keys × the tile's queries; score_mod
/// (before the mask: a mod of −inf need not stay −inf), with d(score)/dSᵀ
/// kept in `derivative` for dSᵀ; mask_mod; the band and the lengths; then
/// Pᵀ from LSE. Returns Pᵀ and the columns' Delta.
std::pair<Value, Value>
BackwardTileBuilder::recomputeScores(Value head, Value qBegin,
                                     Value &derivative) {
  Type scoresType = f32Fragment(plan.blockQ);
  Value s =
      ag::MmaQKOp::create(b, loc, scoresType, kTile, keyRow0, qTile);
  TransposedScores at{batch, head, qBegin, kBegin, nq, nk, keyRow0};
  s = buildTransposedScoreMods(b, loc, plan.spec, s, arg(14), at,
                               derivative);
  auto [maskQuery, inside] =
      buildTransposedBounds(b, loc, plan.spec, at, plan.blockKV, plan.blockQ);
  TransposedScores edge = at;
  edge.qBegin = maskQuery;
  s = buildTransposedMask(b, loc, s, edge, inside, /*opaqueLengths=*/false);
  auto probs = ag::RecomputeProbsOp::create(
      b, loc, scoresType, f32Fragment(plan.blockQ, ag::FragmentLayout::Columns),
      s, stats, Value(), kTile, scaleLog2);
  return {probs.getProbs(), probs.getDelta()};
}

/// One query tile: (after its loads land) Pᵀ, dV += Pᵀ·dO, dPᵀ = V·dOᵀ,
/// dSᵀ = Pᵀ∘(dPᵀ − Delta)·scale into shared memory, dK += dSᵀ·Q; the next
/// tile's loads start, then dQ += dS·K reduces into dq_accum.
void BackwardTileBuilder::buildQueryTile(scf::ForOp headLoop,
                                         scf::ForOp tileLoop, Value head,
                                         Value qRowsBase) {
  ValueRange it = tileLoop.getRegionIterArgs();
  Value dK = it[0], dV = it[1];
  Value qBegin = kb.mul(tileLoop.getInductionVar(), plan.blockQ);
  // Varlen: where the band reads both lengths (its diagonal at nk - nq),
  // the sequence's rows are re-read in each tile (L1-resident words) rather
  // than held in registers across the loops (measured by ptxas: 412 bytes
  // of spills at d128 causal_bottom_right without, 44 with; masks that need
  // fewer of them spill more when they re-read).
  bool bottomRight = plan.spec.mask == attn::MaskKind::CausalBottomRight ||
                     plan.spec.mask == attn::MaskKind::Window;
  if (plan.varlen && bottomRight)
    loadSequence(opaquePointer(kb, cuSeqlensQ), opaquePointer(kb, cuSeqlensK));
  // This tile's Q, dO, LSE and Delta (also K and V, on the first tile);
  // the barrier also ends the previous tile's reads of dSᵀ.
  ag::AsyncWaitOp::create(b, loc, 0);
  gpu::BarrierOp::create(b, loc);
  Value derivative;
  auto [probs, delta] = recomputeScores(head, qBegin, derivative);
  dV = ag::MmaPVOp::create(b, loc, dV.getType(), probs, doTile, colV, dV);
  Type scoresType = probs.getType();
  Value dp = ag::MmaQKOp::create(b, loc, scoresType, vTile, keyRow0, doTile);
  Value ds = ag::ScoreGradientOp::create(
      b, loc, scoresType, probs, dp, delta, Value(), Value(),
      derivative ? Value() : arg(14), derivative, /*prescaled=*/false);
  ag::StoreTileOp::create(b, loc, ds, dsTile, keyRow0);
  dK = ag::MmaPVOp::create(b, loc, dK.getType(), ds, qTile, colK, dK);
  // dSᵀ is complete and Q, dO, LSE and Delta are dead: start loading the
  // next tile (of this head, else of the next head in the group).
  gpu::BarrierOp::create(b, loc);
  prefetchNextTile(headLoop, tileLoop);
  ag::ReduceDQOp::create(b, loc, dsTile, kTile, colK, dqAddress, qRowsBase,
                         qBegin, nq, plan.sliceHeadDim(), plan.headDim);
  scf::YieldOp::create(b, loc, ValueRange{dK, dV});
}

/// The next query tile's loads: the next tile of this head, else the first
/// of the next head in the group, none after the last.
void BackwardTileBuilder::prefetchNextTile(scf::ForOp headLoop,
                                           scf::ForOp tileLoop) {
  Value nextTile = kb.add(tileLoop.getInductionVar(), 1);
  Value wrap = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge,
                                     nextTile, iEnd);
  Value nextHead = kb.add(headLoop.getInductionVar(),
                          kb.select(wrap, kb.idx(1), kb.idx(0)));
  nextTile = kb.select(wrap, iBegin, nextTile);
  auto nextIf = scf::IfOp::create(b, loc, kb.lt(nextHead, group), false);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(&nextIf.getThenRegion().front());
  loadQueryTile(kb.add(kb.mul(kvHead, group), nextHead),
                kb.mul(nextTile, plan.blockQ));
}

/// dK (the scale is already in dS) and dV of the warp's keys below Nk, this
/// CTA's columns, in the caller's layout.
void BackwardTileBuilder::storeGradients(ValueRange res) {
  if (plan.varlen)
    loadSequence(opaquePointer(kb, cuSeqlensQ), opaquePointer(kb, cuSeqlensK));
  Value keyRow = kb.add(kBegin, keyRow0);
  auto store = [&](Value acc, const StridedTensor &t, int64_t cols,
                   Value first) {
    Value base = headBase(t, kvHead, seqStartK);
    if (first)
      base = kb.add(base, first);
    ag::StoreAccumulatorOp::create(b, loc, acc, t.mem, base, keyRow, nk,
                                   t.rowStride, cols);
  };
  store(res[0], stridedTensor(kb, arg(7), params.strides(entry, 4)),
        plan.headDim, colK);
  store(res[1], stridedTensor(kb, arg(8), params.strides(entry, 5)),
        plan.headDimV, colV);
}

void BackwardTileBuilder::build(gpu::GPUModuleOp module,
                                const TiledLoopNest &loops) {
  mapGrid();
  declareSharedTiles();
  // Q, K, V, dO, dK and dV in the caller's layout; LSE, Delta and dq_accum
  // are fa's, contiguous. K and V stay for the whole CTA.
  qT = stridedTensor(kb, arg(0), params.strides(entry, 0));
  kT = stridedTensor(kb, arg(1), params.strides(entry, 1));
  vT = stridedTensor(kb, arg(2), params.strides(entry, 2));
  doT = stridedTensor(kb, arg(3), params.strides(entry, 3));
  OpBuilder::InsertionGuard whole(b);
  if (plan.varlen) {
    // The grid runs over the key blocks of the longest sequence: a CTA
    // whose block starts past its own sequence's keys has nothing to do.
    auto active = scf::IfOp::create(b, loc, kb.lt(kBegin, nk), false);
    b.setInsertionPointToStart(&active.getThenRegion().front());
  }
  ag::AsyncCopyOp::create(b, loc, arg(1), headBase(kT, kvHead, seqStartK),
                          kBegin, nk, kT.rowStride, kTile, Value(),
                          ValueRange());
  ag::AsyncCopyOp::create(b, loc, arg(2), headBase(vT, kvHead, seqStartK),
                          kBegin, nk, vT.rowStride, vTile, Value(),
                          ValueRange());
  // The query blocks of the tiled loop (those that meet this key block's
  // band); a varlen loop reads its sequence's lengths from the offsets.
  TileLoopInputs in{batch, kvHead, kBlock, heads, kvHeads, nq, nk};
  if (plan.varlen) {
    in.nq = nqTotal, in.nk = nkTotal;
    in.cuSeqlensQ = cuSeqlensQ, in.cuSeqlensK = cuSeqlensK;
  }
  in.windowLeft = plan.spec.windowLeftValue;
  in.windowRight = plan.spec.windowRightValue;
  std::tie(iBegin, iEnd) = loops.cloneTileRange(b, in);
  scaleLog2 = softmaxScaleLog2(kb, arg(14));
  keyRow0 = ag::WarpRowOffsetOp::create(b, loc, b.getIndexType());
  Value zero = kb.f32(0);
  SmallVector<Value> init{
      ag::FillOp::create(b, loc, f32Fragment(plan.sliceHeadDim()), zero),
      ag::FillOp::create(b, loc, f32Fragment(plan.sliceHeadDimV()), zero)};
  loadQueryTile(kb.mul(kvHead, group), kb.mul(iBegin, plan.blockQ));
  auto headLoop = scf::ForOp::create(b, loc, kb.idx(0), group, kb.idx(1), init);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(headLoop.getBody());
    Value head = kb.add(kb.mul(kvHead, group), headLoop.getInductionVar());
    Value qRowsBase = rowsBaseOf(head);
    auto tileLoop = scf::ForOp::create(b, loc, iBegin, iEnd, kb.idx(1),
                                       headLoop.getRegionIterArgs());
    {
      OpBuilder::InsertionGuard g1(b);
      b.setInsertionPointToStart(tileLoop.getBody());
      buildQueryTile(headLoop, tileLoop, head, qRowsBase);
    }
    scf::YieldOp::create(b, loc, tileLoop.getResults());
  }
  ag::AsyncWaitOp::create(b, loc, 0);
  storeGradients(headLoop.getResults());
  b.setInsertionPointToEnd(&entry);
  gpu::ReturnOp::create(b, loc);
}

void mlir::fa::buildBackwardKernels(OpBuilder &b, Location loc,
                                    gpu::GPUModuleOp module,
                                    const KernelPlan &plan,
                                    const TiledLoopNest &loops) {
  OpBuilder::InsertionGuard guard(b);
  buildPreKernel(b, loc, module, plan);
  KernelParams params = backwardMainParams(b.getContext(), plan);
  gpu::GPUFuncOp func = createMainKernel(b, loc, module, plan, params);
  KernelPlan bound =
      bindWindowParams(b, loc, plan, func.getBody().front(), params);
  func->setAttr(attn::kKernelPlanAttr, kernelPlanAttr(b.getContext(), plan));
  if (plan.strategy == MmaStrategy::Wgmma) {
    KernelBuilder kb(b, loc, bound);
    buildBackwardMainWgmma(kb, module, func, loops);
  } else {
    BackwardTileBuilder(b, loc, bound, func, params).build(module, loops);
  }
  buildPostKernel(b, loc, module, plan);
  if (plan.sinks)
    buildBackwardSinkKernel(b, loc, module, plan);
}
