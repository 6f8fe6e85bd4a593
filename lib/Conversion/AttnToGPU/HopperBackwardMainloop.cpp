//===- HopperBackwardMainloop.cpp - wgmma backward products -----*- C++ -*-===//
//
// The consumer mainloop of the wgmma backward (HopperBackward.h): one query
// tile's products for one warpgroup of 64 keys, with wgmma descriptors built
// from the tile's opaque base right before each issue.
//   Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ   K-major shared-memory wgmma, two groups
//   Pᵀ, dSᵀ                  in registers while dPᵀ runs, dSᵀ also into a
//                            swizzled shared buffer for dQ
//   dV += Pᵀ·dO, dK += dSᵀ·Q register-A wgmma, B the MN-major query tile
//   dQ = dS·K                both operands MN-major
//
//===----------------------------------------------------------------------===//

#include "HopperBackward.h"

#include "fa/Dialect/Attn/Transforms/OnlineSoftmaxMath.h"
#include "fa/Dialect/Attn/Transforms/Transforms.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

#include <cmath>

using namespace mlir;
using namespace mlir::fa;
using namespace mlir::fa::gpu_lowering;

Value HopperBackward::qStageOf(Value stage) {
  return kb.add(kb.mul(stage, layout.qBytes()), layout.qBase());
}

Value HopperBackward::doStageOf(Value stage) {
  return kb.add(kb.mul(stage, layout.doBytes()), layout.doBase());
}

Value HopperBackward::dsBufferOf(Value t) {
  return kb.add(kb.mul(kb.remui(t, layout.dsBuffers()), layout.dsBytes()),
                layout.dsBase());
}

Value HopperBackward::keyTileOf(Value warpgroup, int64_t tileBase) {
  return kb.add(kb.mul(warpgroup, kKeysPerWarpgroup * kSlabRowBytes),
                tileBase);
}

//===----------------------------------------------------------------------===//
// The products
//===----------------------------------------------------------------------===//

Value HopperBackward::issueKeyByQuery(Value base, Value keyTile,
                                      Value queryTile, int64_t cols) {
  const int64_t bq = plan.blockQ, bkv = plan.blockKV;
  SmallVector<Value> keyDescs, queryDescs;
  // 32 B per k step: k16 of 16-bit or k32 of fp8 elements.
  for (int64_t ks = 0; ks < cols * layout.elemBytes() / 32; ++ks) {
    int64_t slab = ks / 4, inSlab = (ks % 4) * 32;
    keyDescs.push_back(wgmmaDescriptor(
        kb, base, kb.add(keyTile, slab * bkv * kSlabRowBytes + inSlab), 16));
    queryDescs.push_back(wgmmaDescriptor(
        kb, base, kb.add(queryTile, slab * bq * kSlabRowBytes + inSlab), 16));
  }
  NVVM::WgmmaFenceAlignedOp::create(b, loc);
  Value acc = buildWgmmaQK(kb, bq, keyDescs, queryDescs);
  NVVM::WgmmaGroupSyncAlignedOp::create(b, loc);
  return acc;
}

Value HopperBackward::queryTileStepAsB(Value base, Value tile, int64_t kk) {
  // MN-major: the tile's rows are the k of the product.
  const int64_t bq = plan.blockQ;
  return wgmmaDescriptor(kb, base, kb.add(tile, kk * 16 * kSlabRowBytes),
                         bq * kSlabRowBytes);
}

void HopperBackward::issueDVAndDK(Value base, ArrayRef<Value> pA,
                                  ArrayRef<Value> dsA, Value stage,
                                  SmallVector<Value> &dV,
                                  SmallVector<Value> &dK) {
  SmallVector<Value> doDescs, qDescs;
  for (int64_t kk = 0; kk < plan.blockQ / 16; ++kk) {
    doDescs.push_back(queryTileStepAsB(base, doStageOf(stage), kk));
    qDescs.push_back(queryTileStepAsB(base, qStageOf(stage), kk));
  }
  NVVM::WgmmaFenceAlignedOp::create(b, loc);
  dV = buildWgmmaPV(kb, pA, doDescs, dV);
  dK = buildWgmmaPV(kb, dsA, qDescs, dK);
  NVVM::WgmmaGroupSyncAlignedOp::create(b, loc);
}

SmallVector<DQPiece, 2> mlir::fa::gpu_lowering::dqPieces(int64_t headDim) {
  const int64_t half = headDim / 2;
  if (half % kSlabCols == 0 || half <= kSlabCols / 2)
    return {DQPiece{half, 0, half}};
  // Outer pieces of `outer` columns at both ends of the row, the second
  // starting a slab; the middle split in two halves inside one slab.
  int64_t outer = half - half % 32;
  while (outer > 0 && (headDim - outer) % kSlabCols != 0)
    outer -= 32;
  const int64_t middle = (headDim - 2 * outer) / 2;
  assert(outer > 0 && (outer % kSlabCols) + 2 * middle <= kSlabCols &&
         "dQ pieces must each stay inside one slab");
  return {DQPiece{outer, 0, headDim - outer}, DQPiece{middle, outer, middle}};
}

SmallVector<DQPiece, 2> HopperBackward::warpgroupDQPieces() const {
  if (dqByRows())
    return {DQPiece{plan.headDim, 0, 0}};
  return dqPieces(plan.headDim);
}

Value HopperBackward::dqPieceColumn(const DQPiece &piece, Value warpgroup) {
  Value column = kb.mul(warpgroup, piece.step);
  return piece.firstColumn ? kb.add(column, piece.firstColumn) : column;
}

/// Byte offset of column `column` in a tile of 64-column slabs of `rows`.
static int64_t slabColumnBytes(int64_t column, int64_t rows) {
  return (column / kSlabCols) * rows * kSlabRowBytes + (column % kSlabCols) * 2;
}

SmallVector<Value> HopperBackward::issueDQ(Value base, Value warpgroup,
                                           Value dsBuffer) {
  // A is dSᵀ (M-major) in `dsBuffer`, B this warpgroup's pieces of K's
  // columns (N-major): slab w for D = 128, half a slab (64 B in) for D = 64
  // (dqPieces). A piece's two positions lie in the same or consecutive
  // slabs, so its offset is linear in w. 128-row tiles (dqByRows): A is
  // slab w of dSᵀ, the warpgroup's 64 rows, B all of K's columns.
  const int64_t bkv = plan.blockKV;
  const SmallVector<DQPiece, 2> pieces = warpgroupDQPieces();
  if (dqByRows())
    dsBuffer = kb.add(dsBuffer, kb.mul(warpgroup, layout.dsSlabBytes()));
  SmallVector<Value> kCols;
  for (const DQPiece &piece : pieces) {
    Value cols = kb.mul(warpgroup, slabColumnBytes(piece.step, bkv));
    kCols.push_back(piece.firstColumn
                        ? kb.add(cols, slabColumnBytes(piece.firstColumn, bkv))
                        : cols);
  }
  SmallVector<Value> dsDescs;
  SmallVector<SmallVector<Value>> kDescs(pieces.size());
  for (int64_t kk = 0; kk < bkv / 16; ++kk) {
    dsDescs.push_back(wgmmaDescriptor(
        kb, base, kb.add(dsBuffer, kk * 16 * kSlabRowBytes),
        bkv * kSlabRowBytes));
    for (auto [descs, cols] : llvm::zip_equal(kDescs, kCols))
      descs.push_back(wgmmaDescriptor(kb, base,
                                      kb.add(cols, kk * 16 * kSlabRowBytes),
                                      bkv * kSlabRowBytes));
  }
  NVVM::WgmmaFenceAlignedOp::create(b, loc);
  SmallVector<Value> accs;
  for (auto [piece, descs] : llvm::zip_equal(pieces, kDescs))
    accs.push_back(buildWgmmaQK(kb, piece.width, dsDescs, descs,
                                /*mnMajor=*/true));
  NVVM::WgmmaGroupSyncAlignedOp::create(b, loc);
  return accs;
}

SmallVector<Value> HopperBackward::unpackDQ(ArrayRef<Value> dqAcc) {
  SmallVector<Value> values;
  for (auto [piece, acc] : llvm::zip_equal(warpgroupDQPieces(), dqAcc))
    values.append(laneValues(b, loc, acc));
  return fenceOperands(b, loc, values);
}

//===----------------------------------------------------------------------===//
// Pᵀ and dSᵀ in registers
//===----------------------------------------------------------------------===//

Value HopperBackward::rowStatsOf(Value stage) {
  return kb.add(kb.mul(stage, 2 * plan.blockQ), layout.statsFloat());
}

Value HopperBackward::computeP(SmallVector<Value> &s, const ConsumerTile &tile,
                               Value stage) {
  // Pᵀ = exp2(Sᵀ·scale·log2e − LSE·log2e) in place, after the mma.sync
  // backward's tile ops: the whole-tile test of the warpgroup's 64 keys,
  // score_mod (before the mask: a mod of −inf need not stay −inf), mask_mod,
  // and on tiles not wholly inside the mask, which reads Nq, Nk through
  // opaque copies (the band's per-element bounds would otherwise be hoisted
  // as loop invariants).
  using attn_gpu::FragmentLayout;
  const int64_t bq = plan.blockQ;
  Value st = fragmentOf(b, loc, s, bq, FragmentLayout::Accumulator);
  // (Block-sparse: a load of the block list.)
  Value qBegin = qBeginOf(tile.index);
  TransposedScores at{batch, Value(), qBegin, keyBegin, nq, nk, tile.keyRow0};
  auto [maskQuery, inside] =
      buildTransposedBounds(b, loc, plan.spec, at, kKeysPerWarpgroup, bq,
                            keyGroupOf(tile.warpgroup));
  // Block-sparse: a full block keeps every element (and lies inside Nk), so
  // only partial blocks, and full ones at the Nq edge, take the masked path,
  // which alone evaluates the mask_mod.
  if (plan.blockSparse)
    inside = arith::AndIOp::create(
        b, loc, inside,
        arith::XOrIOp::create(b, loc, isPartialTile(tile.index),
                              arith::ConstantOp::create(
                                  b, loc, b.getBoolAttr(true))));
  at.head = headOf(tile.index);
  attn::ScoreSpec mods = plan.spec;
  if (plan.blockSparse)
    mods.maskMod = nullptr;
  Value derivative;
  st = buildTransposedScoreMods(b, loc, mods, st, scale, at, derivative);
  TransposedScores edge = at;
  edge.qBegin = maskQuery;
  st = buildTransposedMask(b, loc, st, edge, inside, /*opaqueLengths=*/true,
                           [&](Value masked) {
                             if (!plan.blockSparse)
                               return masked;
                             attn::ScoreSpec maskMod = plan.spec;
                             maskMod.scoreMod = nullptr;
                             Value none;
                             return buildTransposedScoreMods(
                                 b, loc, maskMod, masked, scale, edge, none);
                           });
  Value probs = attn_gpu::RecomputeProbsOp::create(
                    b, loc, st.getType(), Type(), st, stats, rowStatsOf(stage),
                    Value(), scaleLog2, foldedStats())
                    .getProbs();
  s = laneValues(b, loc, probs);
  return derivative;
}

void HopperBackward::computeDS(ArrayRef<Value> p, SmallVector<Value> &dp,
                               Value derivative, Value stage, Value dsBuffer,
                               Value keyRow0, bool prescaled) {
  using attn_gpu::FragmentLayout;
  const int64_t bq = plan.blockQ;
  auto fragment = [&](ArrayRef<Value> lanes) {
    return fragmentOf(b, loc, lanes, bq, FragmentLayout::Accumulator);
  };
  Value factor = prescaled || derivative ? Value() : scale;
  assert((!scaledDelta() || factor) && "scaled Delta without the scale");
  Value probs = fragment(p), dP = fragment(dp);
  Value ds = attn_gpu::ScoreGradientOp::create(
      b, loc, probs.getType(), probs, dP, Value(), stats, rowStatsOf(stage),
      factor, derivative, prescaled, scaledDelta());
  dp = laneValues(b, loc, ds);
  storeDSTransposed(dp, dsBuffer, keyRow0);
}

void HopperBackward::storeDSTransposed(ArrayRef<Value> ds, Value dsBuffer,
                                       Value keyRow0) {
  // Swizzled: chunk g ^ n of row keyRow0 + g (+8). Bits 4-6 of the byte
  // offset hold g, so the chunk is one xor with n·16 of the offset of chunk
  // g; lanes g = 0..7 of one store hit eight distinct 16 B chunks. A
  // 128-row tile's queries 64-127 (n ≥ 8) are a second slab of 128 keys.
  const int64_t bq = plan.blockQ;
  Value rowG = kb.add(keyRow0, kb.groupId);
  Value chunkG = kb.add(
      kb.add(kb.mul(rowG, kSlabRowBytes), kb.mul(kb.groupId, 16)),
      kb.add(kb.mul(kb.threadInGroup, 4), dsBuffer));
  for (int64_t n = 0; n < bq / 8; ++n) {
    Value bytes = arith::XOrIOp::create(b, loc, chunkG, kb.idx((n % 8) * 16));
    if (n >= 8)
      bytes = kb.add(bytes, (n / 8) * layout.dsSlabBytes());
    for (int64_t r = 0; r < 2; ++r)
      kb.storePair(kb.truncPair(ds[n * 4 + 2 * r], ds[n * 4 + 2 * r + 1]),
                   kb.smem, kb.divui(kb.add(bytes, r * 8 * kSlabRowBytes), 2));
  }
}

Value HopperBackward::issuePAndDP(const ConsumerTile &tile, Value stage,
                                  SmallVector<Value> &p,
                                  SmallVector<Value> &dp) {
  Value base = tile.descriptorBase;
  Value sAcc = issueKeyByQuery(base, keyTileOf(tile.warpgroup, 0),
                               qStageOf(stage), plan.headDim);
  Value dpAcc = issueKeyByQuery(base, keyTileOf(tile.warpgroup, layout.vBase()),
                                doStageOf(stage), plan.headDimV);
  NVVM::WgmmaWaitGroupSyncOp::create(b, loc, 1);
  p = fenceOperands(b, loc, laneValues(b, loc, sAcc));
  Value derivative = computeP(p, tile, stage);
  NVVM::WgmmaWaitGroupSyncOp::create(b, loc, 0);
  dp = fenceOperands(b, loc, laneValues(b, loc, dpAcc));
  return derivative;
}

void HopperBackward::issueTileProducts(const ConsumerTile &tile, Value stage,
                                       Value dsBuffer, SmallVector<Value> &dV,
                                       SmallVector<Value> &dK) {
  // Sᵀ and dPᵀ on the tensor cores, Pᵀ from Sᵀ while dPᵀ runs, dSᵀ, then
  // dV += Pᵀ·dO and dK += dSᵀ·Q issued. The A registers are packed while no
  // wgmma is in flight: registers of a later wgmma defined while one runs
  // make ptxas serialise them (C7513).
  Value base = tile.descriptorBase;
  SmallVector<Value> s, dp;
  Value derivative = issuePAndDP(tile, stage, s, dp);
  computeDS(s, dp, derivative, stage, dsBuffer, tile.keyRow0);
  SmallVector<Value> pA = accumulatorToWgmmaA(kb, s);
  SmallVector<Value> dsA = accumulatorToWgmmaA(kb, dp);
  issueDVAndDK(base, pA, dsA, stage, dV, dK);
}
