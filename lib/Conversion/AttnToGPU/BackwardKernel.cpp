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
// With mma = wgmma (sm_90a) fa_bwd's body is HopperBackwardKernel.cpp's.
//
//===----------------------------------------------------------------------===//

#include "TiledLoopNest.h"
#include "Wgmma.h"

#include "fa/Dialect/Attn/Transforms/OnlineSoftmaxMath.h"
#include "fa/Dialect/Attn/Transforms/Transforms.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "llvm/Support/MathExtras.h"

#include <cmath>

using namespace mlir;
using namespace mlir::fa;
using namespace mlir::fa::gpu_lowering;

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
  auto asmOp = LLVM::InlineAsmOp::create(
      b, kb.loc, b.getI64Type(), ValueRange{i64v}, "mov.b64 $0, $1;", "=l,l",
      /*has_side_effects=*/true, /*is_align_stack=*/false,
      LLVM::TailCallKind::None, /*asm_dialect=*/nullptr,
      /*operand_attrs=*/nullptr);
  return arith::IndexCastOp::create(b, kb.loc, b.getIndexType(),
                                    asmOp.getResult(0));
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
static void buildPreKernel(OpBuilder &b, Location loc, gpu::GPUModuleOp module,
                           const KernelPlan &plan) {
  Type elem = plan.elemType, f32 = b.getF32Type();
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
  const int64_t dv = plan.headDimV, width = rowChunkElems(dv, 2);
  const int64_t chunks = dv / width;
  const int64_t lanes = std::min<int64_t>(llvm::PowerOf2Ceil(chunks), 32);
  const int64_t perLane = llvm::divideCeil(chunks, lanes);
  Value laneInRow = kb.remui(kb.tid, lanes);
  Value rowInStep = kb.divui(kb.tid, lanes);
  auto v8 = VectorType::get({width}, elem);
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
      doChunks.push_back(loadClamped(kb, doMem, doAt, ok, doFirst, v8));
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
  Type elem = plan.elemType, f32 = b.getF32Type();
  KernelParams params = backwardPostParams(b.getContext(), plan);
  auto func = createKernelFunc(b, loc, module, "fa_bwd_post_" + plan.tag(),
                               params, plan, 0);
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
    if (plan.warpSpecialized) {
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
    vector::StoreOp::create(b, loc, arith::TruncFOp::create(b, loc, e4, v),
                            dqMem, ValueRange{at}, false,
                            llvm::MaybeAlign(width * 2));
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

static void buildMainKernel(OpBuilder &b, Location loc, gpu::GPUModuleOp module,
                            gpu::GPUFuncOp func, const KernelParams &params,
                            const KernelPlan &plan,
                            const TiledLoopNest &loops) {
  const int64_t d = plan.headDim, dv = plan.headDimV;
  // Tensor-core steps run over the head dims padded to 16 (zeros in shared
  // memory); n8 tiles wholly past D / Dv are not accumulated, and columns
  // past them are neither stored nor reduced.
  const int64_t dPad = plan.paddedHeadDim(), dvPad = plan.paddedHeadDimV();
  // Columns of dK and dQ (wk, of Q and K) and of dV (wv, of dO) this CTA
  // accumulates; with dsplit = 1 all of them (any head dim), else slices
  // that are multiples of 8. Both are padded to 16 like the head dims: an n8
  // tile wholly past the slice is skipped.
  const int64_t wk = plan.sliceHeadDim(), wv = plan.sliceHeadDimV();
  const int64_t wkPad = (wk + 15) / 16 * 16;
  const int64_t bq = plan.blockQ, bkv = plan.blockKV;
  Type f32 = b.getF32Type();
  Block &entry = func.getBody().front();
  auto arg = [&](unsigned i) { return entry.getArgument(i); };
  Value qMem = arg(0), kMem = arg(1), vMem = arg(2), doMem = arg(3),
        lseMem = arg(4), deltaMem = arg(5), dqMem = arg(6), dkMem = arg(7),
        dvMem = arg(8), scale = arg(14);

  KernelBuilder kb(b, loc, plan);
  kb.setupThreadIds();
  Value heads = kb.toIndex(arg(10)), kvHeads = kb.toIndex(arg(11));
  Value nq = kb.toIndex(arg(12)), nk = kb.toIndex(arg(13));
  // Grid x enumerates (key block, column slice) with the slices of one key
  // block adjacent, so they read the same K/V rows close together in time.
  Value kBlock = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
  Value colK, colV; // first column of this CTA's slices; null for dsplit 1
  if (plan.dsplit > 1) {
    Value part = kb.remui(kBlock, plan.dsplit);
    kBlock = kb.divui(kBlock, plan.dsplit);
    colK = kb.mul(part, wk);
    colV = kb.mul(part, wv);
  }
  // Column `off` of a slice starting at `first` (a constant for dsplit 1).
  auto sliceCol = [&](Value first, int64_t off) {
    return first ? kb.add(first, off) : kb.idx(off);
  };
  // acc += srcᵀ-tile (bq keys-major accumulator `src`, as A) · the `width`
  // columns from `first` of `tile`; the second n8 tile of the last pair is
  // padding when width % 16 = 8. Serves dV += Pᵀ·dO and dK += dSᵀ·Q.
  auto accumulateSlice = [&](ArrayRef<Value> src, const SharedTile &tile,
                             Value first, int64_t width,
                             MutableArrayRef<Value> acc) {
    const int64_t widthPad = (width + 15) / 16 * 16;
    for (int64_t kk = 0; kk < bq / 16; ++kk) {
      SmallVector<Value, 4> a = accumulatorToA(kb, src.slice(kk * 8, 8));
      for (int64_t np = 0; np < widthPad / 16; ++np) {
        SmallVector<Value, 4> bf =
            kb.loadBFromKMajor(tile, kk * 16, sliceCol(first, np * 16));
        kb.mma(a, {bf[0], bf[1]}, acc.slice(np * 8, 4));
        if (np * 16 + 8 < width)
          kb.mma(a, {bf[2], bf[3]}, acc.slice(np * 8 + 4, 4));
      }
    }
  };
  Value kvHead = gpu::BlockIdOp::create(b, loc, gpu::Dimension::y);
  Value batch = gpu::BlockIdOp::create(b, loc, gpu::Dimension::z);
  Value group = arith::DivUIOp::create(b, loc, heads, kvHeads);
  Value kBegin = kb.mul(kBlock, bkv);

  // Shared memory: K | V (resident) | Q | dO (per query tile) | dSᵀ.
  const int64_t kElems = bkv * plan.strideQK(), vElems = bkv * plan.strideV(),
                qElems = bq * plan.strideQK(), doElems = bq * plan.strideV();
  const int64_t smemElems = kElems + vElems + qElems + doElems + bkv * (bq + 8);
  kb.setupSharedMemory(module, smemElems);
  // LSE and Delta of the query tile live in the 16-byte row padding of K
  // (never read by ldmatrix): value c (LSE c < bq, Delta bq + c) is float
  // c % 4 of K row c / 4, so a lane's column pair is one 8-byte load.
  assert(plan.strideQK() - dPad == 8 && 2 * bq <= 4 * bkv &&
         2 * bq <= plan.threads() && "row statistics do not fit K's padding");
  Value stats = kb.sharedView(module, f32, smemElems / 2);
  auto statSlot = [&](Value c) {
    return kb.add(kb.mul(kb.divui(c, 4), plan.strideQK() / 2),
                  kb.add(kb.remui(c, 4), dPad / 2));
  };
  Value dqAddr = kb.globalAddress(dqMem);
  SharedTile kTile{kb.idx(0), bkv, d, plan.strideQK()};
  SharedTile vTile{kb.idx(kElems), bkv, dv, plan.strideV()};
  SharedTile qTile{kb.idx(kElems + vElems), bq, d, plan.strideQK()};
  SharedTile doTile{kb.idx(kElems + vElems + qElems), bq, dv, plan.strideV()};
  SharedTile dsTile{kb.idx(kElems + vElems + qElems + doElems), bkv, bq,
                    bq + 8};

  // Q, K, V, dO, dK and dV in the caller's layout; LSE, Delta and dq_accum
  // are fa's, contiguous.
  StridedTensor qT = stridedTensor(kb, qMem, params.strides(entry, 0));
  StridedTensor kT = stridedTensor(kb, kMem, params.strides(entry, 1));
  StridedTensor vT = stridedTensor(kb, vMem, params.strides(entry, 2));
  StridedTensor doT = stridedTensor(kb, doMem, params.strides(entry, 3));
  kb.copyTileAsync(kMem, kT.headBase(kb, batch, kvHead), kBegin, nk, kTile,
                   kT.rowStride);
  kb.copyTileAsync(vMem, vT.headBase(kb, batch, kvHead), kBegin, nk, vTile,
                   vT.rowStride);

  // Q's and dO's strides read afresh in each tile's loads (opaqueIndex64).
  auto opaque = [&](const StridedTensor &t) {
    return StridedTensor{t.mem, opaqueIndex64(kb, t.batchStride),
                         opaqueIndex64(kb, t.headStride),
                         opaqueIndex64(kb, t.rowStride)};
  };
  auto rowsBaseOf = [&](Value head) {
    return kb.mul(kb.add(kb.mul(batch, heads), head), nq);
  };
  // Q, dO, LSE and Delta of the query tile at qBegin of query head `head`;
  // rows at or past Nq are zero-filled.
  auto loadQueryTile = [&](Value head, Value qBegin) {
    StridedTensor q = opaque(qT), dO = opaque(doT);
    kb.copyTileAsync(qMem, q.headBase(kb, batch, head), qBegin, nq, qTile,
                     q.rowStride);
    kb.copyTileAsync(doMem, dO.headBase(kb, batch, head), qBegin, nq, doTile,
                     dO.rowStride);
    kb.copyRowStatsAsync(stats, lseMem, deltaMem, rowsBaseOf(head), qBegin, nq,
                         bq, [&] { return statSlot(kb.tid); });
    kb.commitAsync();
  };

  // The query blocks of the tiled loop (those that meet this key block's
  // band).
  TileLoopInputs in{batch, kvHead, kBlock, heads, kvHeads, nq, nk};
  in.windowLeft = plan.spec.windowLeftValue;
  in.windowRight = plan.spec.windowRightValue;
  auto [iBegin, iEnd] = loops.cloneTileRange(b, in);
  Value scaleLog2 = softmaxScaleLog2(kb, scale);
  attn::OnlineSoftmaxMath math = kb.softmaxMath();
  Value keyRow0 = kb.mul(kb.warp, 16);

  const int64_t dkN = llvm::divideCeil(wk, 8) * 4,
                dvN = llvm::divideCeil(wv, 8) * 4, sN = bq / 8 * 4;
  SmallVector<Value> init(dkN + dvN, kb.f32(0));
  loadQueryTile(kb.mul(kvHead, group), kb.mul(iBegin, bq));
  auto headLoop = scf::ForOp::create(b, loc, kb.idx(0), group, kb.idx(1), init);
  {
    OpBuilder::InsertionGuard g0(b);
    b.setInsertionPointToStart(headLoop.getBody());
    Value head = kb.add(kb.mul(kvHead, group), headLoop.getInductionVar());
    Value qRowsBase = rowsBaseOf(head);
    auto tileLoop = scf::ForOp::create(b, loc, iBegin, iEnd, kb.idx(1),
                                       headLoop.getRegionIterArgs());
    {
      OpBuilder::InsertionGuard g1(b);
      b.setInsertionPointToStart(tileLoop.getBody());
      ValueRange it = tileLoop.getRegionIterArgs();
      SmallVector<Value> dK(it.begin(), it.begin() + dkN);
      SmallVector<Value> dV(it.begin() + dkN, it.end());
      Value qBegin = kb.mul(tileLoop.getInductionVar(), bq);

      // This tile's Q, dO, LSE and Delta (also K and V, on the first tile);
      // the barrier also ends the previous tile's reads of dSᵀ.
      kb.waitAsync(0);
      gpu::BarrierOp::create(b, loc);

      // Sᵀ = K·Qᵀ for this warp's 16 keys × bq queries.
      SmallVector<Value> s(sN, kb.f32(0));
      for (int64_t ks = 0; ks < dPad / 16; ++ks) {
        SmallVector<Value, 4> a = kb.loadA(kTile, keyRow0, ks * 16);
        for (int64_t np = 0; np < bq / 16; ++np) {
          SmallVector<Value, 4> bf =
              kb.loadBFromNMajor(qTile, kb.idx(np * 16), ks * 16);
          kb.mma(a, {bf[0], bf[1]}, MutableArrayRef<Value>(s).slice(np * 8, 4));
          kb.mma(a, {bf[2], bf[3]},
                 MutableArrayRef<Value>(s).slice(np * 8 + 4, 4));
        }
      }
      // score_mod before the mask (a mod of −inf need not stay −inf), with
      // d(score)/d(Sᵀ) kept for dSᵀ.
      SmallVector<Value> chain;
      if (plan.spec.scoreMod)
        chain = applyScoreModTransposed(
            kb, s, {batch, head, qBegin, kBegin, nq, nk}, keyRow0, scale);
      applyMaskModTransposed(kb, s, {batch, head, qBegin, kBegin, nq, nk},
                             keyRow0);
      // The mask sees the tile position through an opaque copy so LLVM does
      // not hoist per-element offsets out of the loop (as in the forward).
      Value maskQuery = kb.opaqueIndex(qBegin);
      Value qEnd = kb.add(maskQuery, bq), kEnd = kb.add(kBegin, bkv);
      Value inside = attn::buildBlockInsideMask(b, loc, plan.spec, maskQuery,
                                                qEnd, kBegin, kEnd, nq, nk);
      inside = arith::AndIOp::create(
          b, loc, inside,
          arith::AndIOp::create(
              b, loc,
              arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sle, qEnd,
                                    nq),
              arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sle, kEnd,
                                    nk)));
      s = kb.maskUnlessInside(inside, s, [&](SmallVector<Value> &masked) {
        maskScoresTransposed(kb, masked, {batch, head, maskQuery, kBegin, nq, nk},
                    keyRow0);
      });

      // Per query column: LSE (base 2; −inf rows give P = 0) and Delta.
      // Columns past Nq read 0 and are masked (P = 0).
      SmallVector<Value> lse2(bq / 4), delta(bq / 4);
      auto f2 = VectorType::get({2}, f32);
      for (int64_t n = 0; n < bq / 8; ++n) {
        Value col = kb.add(kb.mul(kb.threadInGroup, 2), n * 8);
        Value l2 =
            vector::LoadOp::create(b, loc, f2, stats, ValueRange{statSlot(col)},
                                   false, llvm::MaybeAlign(8));
        Value d2 = vector::LoadOp::create(b, loc, f2, stats,
                                          ValueRange{statSlot(kb.add(col, bq))},
                                          false, llvm::MaybeAlign(8));
        for (int64_t c = 0; c < 2; ++c) {
          Value l = vector::ExtractOp::create(b, loc, l2, ArrayRef<int64_t>{c});
          lse2[n * 2 + c] = math.lseBase2(l);
          delta[n * 2 + c] =
              vector::ExtractOp::create(b, loc, d2, ArrayRef<int64_t>{c});
        }
      }
      // Pᵀ = 2^(Sᵀ·scale·log2e − LSE·log2e) (the score_mod's score·log2e).
      for (int64_t n = 0; n < bq / 8; ++n)
        for (int64_t i = 0; i < 4; ++i) {
          Value &e = s[n * 4 + i];
          Value negL = arith::NegFOp::create(b, loc, lse2[n * 2 + i % 2]);
          e = math.probabilityFolded(e, scaleLog2, negL);
        }

      // dV += Pᵀ·dO (this CTA's columns of dO).
      accumulateSlice(s, doTile, colV, wv, dV);
      // dPᵀ = V·dOᵀ.
      SmallVector<Value> dp(sN, kb.f32(0));
      for (int64_t ks = 0; ks < dvPad / 16; ++ks) {
        SmallVector<Value, 4> a = kb.loadA(vTile, keyRow0, ks * 16);
        for (int64_t np = 0; np < bq / 16; ++np) {
          SmallVector<Value, 4> bf =
              kb.loadBFromNMajor(doTile, kb.idx(np * 16), ks * 16);
          kb.mma(a, {bf[0], bf[1]},
                 MutableArrayRef<Value>(dp).slice(np * 8, 4));
          kb.mma(a, {bf[2], bf[3]},
                 MutableArrayRef<Value>(dp).slice(np * 8 + 4, 4));
        }
      }
      // dSᵀ = Pᵀ∘(dPᵀ − Delta)·scale (·d(score)/d(Sᵀ) with a score_mod),
      // kept in registers and in shared memory.
      for (int64_t n = 0; n < bq / 8; ++n)
        for (int64_t i = 0; i < 4; ++i) {
          dp[n * 4 + i] = math.scoreGradient(
              s[n * 4 + i], dp[n * 4 + i], delta[n * 2 + i % 2],
              chain.empty() ? scale : chain[n * 4 + i]);
        }
      for (int64_t n = 0; n < bq / 8; ++n)
        for (int64_t r = 0; r < 2; ++r) {
          Value row = kb.add(keyRow0, kb.add(kb.groupId, r * 8));
          Value col = kb.add(kb.mul(kb.threadInGroup, 2), n * 8);
          Value at =
              kb.add(dsTile.base, kb.add(kb.mul(row, dsTile.stride), col));
          vector::StoreOp::create(
              b, loc, kb.truncPair(dp[n * 4 + 2 * r], dp[n * 4 + 2 * r + 1]),
              kb.smem, ValueRange{at}, false, llvm::MaybeAlign(4));
        }
      // dK += dSᵀ·Q (this CTA's columns of Q).
      accumulateSlice(dp, qTile, colK, wk, dK);

      // dSᵀ is complete and Q, dO, LSE and Delta are dead: start loading the
      // next tile (of this head, else of the next head in the group).
      gpu::BarrierOp::create(b, loc);
      Value nextTile = kb.add(tileLoop.getInductionVar(), 1);
      Value wrap = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge,
                                         nextTile, iEnd);
      Value nextHead = kb.add(headLoop.getInductionVar(),
                              kb.select(wrap, kb.idx(1), kb.idx(0)));
      nextTile = kb.select(wrap, iBegin, nextTile);
      auto nextIf = scf::IfOp::create(b, loc, kb.lt(nextHead, group), false);
      {
        OpBuilder::InsertionGuard g2(b);
        b.setInsertionPointToStart(&nextIf.getThenRegion().front());
        loadQueryTile(kb.add(kb.mul(kvHead, group), nextHead),
                      kb.mul(nextTile, bq));
      }

      // dQ += dS·K (this CTA's columns of K): warps split the bq × wk tile
      // into 16-row groups and, when there are more warps than row groups,
      // 16-column pairs round-robin.
      const int64_t rowGroups = bq / 16, colSplit = plan.warps / rowGroups;
      Value rowGroup = kb.remui(kb.warp, rowGroups);
      Value colPart = kb.divui(kb.warp, rowGroups);
      Value qRow0 = kb.mul(rowGroup, 16);
      // Byte address of this lane's first dq_accum column in rows g, g + 8.
      Value dqRow[2], dqRowOk[2];
      for (int64_t r = 0; r < 2; ++r) {
        Value row = kb.add(qBegin, kb.add(qRow0, kb.add(kb.groupId, r * 8)));
        dqRowOk[r] = kb.lt(row, nq);
        Value rowElem = kb.mul(kb.add(qRowsBase, row), d);
        Value col = kb.mul(kb.threadInGroup, 2);
        Value elem = kb.add(rowElem, colK ? kb.add(colK, col) : col);
        dqRow[r] = kb.add(dqAddr, kb.mul(elem, 4));
      }
      SmallVector<SmallVector<Value, 4>> dsA;
      for (int64_t kk = 0; kk < bkv / 16; ++kk)
        dsA.push_back(kb.loadAFromTransposed(dsTile, qRow0, kk * 16));
      for (int64_t np = 0; np < wkPad / 16; ++np) {
        // The second n8 tile of the last pair is padding when wk % 16 = 8.
        const int64_t tiles = np * 16 + 8 < wk ? 2 : 1;
        Value mine = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                                           colPart, kb.idx(np % colSplit));
        auto pairIf = scf::IfOp::create(b, loc, mine, false);
        OpBuilder::InsertionGuard g3(b);
        b.setInsertionPointToStart(&pairIf.getThenRegion().front());
        SmallVector<Value> dq(8, kb.f32(0));
        for (int64_t kk = 0; kk < bkv / 16; ++kk) {
          SmallVector<Value, 4> bf =
              kb.loadBFromKMajor(kTile, kk * 16, sliceCol(colK, np * 16));
          kb.mma(dsA[kk], {bf[0], bf[1]},
                 MutableArrayRef<Value>(dq).slice(0, 4));
          if (tiles == 2)
            kb.mma(dsA[kk], {bf[2], bf[3]},
                   MutableArrayRef<Value>(dq).slice(4, 4));
        }
        for (int64_t r = 0; r < 2; ++r) {
          auto rowIf = scf::IfOp::create(b, loc, dqRowOk[r], false);
          OpBuilder::InsertionGuard g4(b);
          b.setInsertionPointToStart(&rowIf.getThenRegion().front());
          // Pairs are 8-byte aligned unless D is odd.
          for (int64_t t = 0; t < tiles; ++t)
            forColumnPair(
                kb, np * 2 + t, wk, d % 2 == 0, dq[t * 4 + 2 * r],
                dq[t * 4 + 2 * r + 1], [&](int64_t off, ValueRange v) {
                  kb.redAddF32(dqRow[r], (np * 16 + t * 8 + off) * 4, v);
                });
        }
      }
      SmallVector<Value> yield(dK);
      yield.append(dV);
      scf::YieldOp::create(b, loc, yield);
    }
    scf::YieldOp::create(b, loc, tileLoop.getResults());
  }
  kb.waitAsync(0);

  // dK (scale already in dS) and dV for keys < Nk, this CTA's columns.
  SmallVector<Value> res(headLoop.getResults());
  Value keyRow = kb.add(kBegin, keyRow0);
  auto store = [&](ArrayRef<Value> acc, const StridedTensor &t, int64_t cols,
                   Value first, int64_t width) {
    Value base = t.headBase(kb, batch, kvHead);
    if (first)
      base = kb.add(base, first);
    storeAccumulator(kb, acc, t.mem, base, keyRow, nk, width, {}, cols,
                     t.rowStride);
  };
  store(ArrayRef<Value>(res).take_front(dkN),
        stridedTensor(kb, dkMem, params.strides(entry, 4)), d, colK, wk);
  store(ArrayRef<Value>(res).drop_front(dkN),
        stridedTensor(kb, dvMem, params.strides(entry, 5)), dv, colV, wv);
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
  if (plan.strategy == MmaStrategy::Wgmma) {
    KernelBuilder kb(b, loc, bound);
    buildBackwardMainWgmma(kb, module, func, loops);
  } else {
    buildMainKernel(b, loc, module, func, params, bound, loops);
  }
  buildPostKernel(b, loc, module, plan);
  if (plan.sinks)
    buildBackwardSinkKernel(b, loc, module, plan);
}
