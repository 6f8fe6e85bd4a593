//===- HopperBackward.h - the parts of the wgmma backward -------*- C++ -*-===//
//
// The wgmma main backward (fa_bwd, docs/ABI.md; what it computes:
// HopperBackwardKernel.cpp) in the parts of the wgmma forward and of
// CUTLASS/FA3's backward, one file each:
//   HopperBackwardKernel.cpp    the two kernels, put together from the
//                               parts below, and the warp roles
//   HopperBackwardScheduler.cpp the tile scheduler: the key block and the
//                               query tiles a CTA walks
//   HopperBackwardProducer.cpp  K and V, and each query tile's Q, dO, LSE and
//                               Delta: cp.async, or TMA on the mbarrier ring
//   HopperBackwardMainloop.cpp  one query tile's products: Sᵀ, dPᵀ, Pᵀ, dSᵀ,
//                               dV += Pᵀ·dO, dK += dSᵀ·Q, dQ = dS·K
//   HopperBackwardEpilogue.cpp  dQ into dq_accum (red.global, or one bulk
//                               reduction per tile, in key-block order when
//                               deterministic), the dK and dV stores
//   HopperBackwardRoles.cpp     above D = 128: both consumer warpgroups on
//                               one 64-key block, split by role; dQ by
//                               column panels
//   HopperBackwardFp8.cpp       the e4m3 kernel: transposing producer
//                               warps, e4m3 products, dS scaled per tile
//
//===----------------------------------------------------------------------===//

#ifndef FA_LIB_CONVERSION_ATTNTOGPU_HOPPERBACKWARD_H
#define FA_LIB_CONVERSION_ATTNTOGPU_HOPPERBACKWARD_H

#include "BlockMask.h"
#include "Wgmma.h"

namespace mlir::fa::gpu_lowering {

/// Keys of one consumer warpgroup (both share them with split roles); the
/// query tile is one m64 of dQ.
constexpr int64_t kKeysPerWarpgroup = 64;
/// global[0, bytes) += shared[0, bytes) as f32, one bulk reduction of the
/// current bulk group (i64 global, i32 shared address, i32 bytes).
void bulkReduceAddF32(OpBuilder &b, Location loc, Value globalAddr,
                      Value sharedAddr, Value bytes);

/// Named barrier of the split roles' Pᵀ exchange (1 is the dSᵀ barrier).
constexpr int64_t kExchangeBarrier = 2;

/// Byte offsets of the kernel's shared tiles (each 1024 B aligned).
/// fp8 (D = Dv = 128): e4m3 tiles of one 128 B slab, and the K-major
/// transposes the e4m3 products need (HopperBackwardFp8.cpp): Kᵀ once, Qᵀ
/// and dOᵀ per stage ([128 columns][128 B rows] holding the tile's 64
/// queries), dS [64 queries][128 keys] for dQ.
struct HopperBackwardSmem {
  int64_t d, dv, bq, bkv;
  bool warpSpecialized, splitRoles, fp8;
  int64_t stages() const { return 2; } // Q, dO, LSE, Delta
  /// dSᵀ: the warp-specialised consumers write the next tile's dSᵀ while
  /// the other buffer may still be read by this tile's dQ.
  int64_t dsBuffers() const { return warpSpecialized ? 2 : 1; }
  /// Columns of a tile in whole 64-column slabs (D = 96: 128; TMA fills
  /// the columns past D with zeros, cp.async leaves them unwritten, and no
  /// product reads them).
  static int64_t slabbed(int64_t cols) { return llvm::alignTo(cols, kSlabCols); }
  int64_t elemBytes() const { return fp8 ? 1 : 2; }
  int64_t kBytes() const { return bkv * slabbed(d) * elemBytes(); }
  int64_t vBytes() const { return bkv * slabbed(dv) * elemBytes(); }
  /// fp8: a transposed tile, `cols` rows of 128 B.
  int64_t transposedBytes(int64_t cols) const {
    return fp8 ? cols * kSlabRowBytes : 0;
  }
  int64_t qBytes() const { return bq * slabbed(d) * elemBytes(); }
  int64_t doBytes() const { return bq * slabbed(dv) * elemBytes(); }
  int64_t dsBytes() const { return bkv * bq * elemBytes(); }
  /// dSᵀ holds 64 queries a slab (128 B rows of the bkv keys): a 128-row
  /// tile's queries 64-127 are the second.
  int64_t dsSlabBytes() const { return bkv * kSlabRowBytes; }
  int64_t vBase() const { return kBytes(); }
  int64_t ktBase() const { return vBase() + vBytes(); }
  int64_t qBase() const { return ktBase() + transposedBytes(d); }
  int64_t qtBase() const { return qBase() + stages() * qBytes(); }
  int64_t doBase() const { return qtBase() + stages() * transposedBytes(d); }
  int64_t dotBase() const { return doBase() + stages() * doBytes(); }
  int64_t dsBase() const { return dotBase() + stages() * transposedBytes(dv); }
  int64_t statsBase() const { return dsBase() + dsBuffers() * dsBytes(); }
  /// The row statistics as floats: LSE row c of stage s is float
  /// statsFloat() + 2·bq·s + c, Delta row c is bq floats further.
  int64_t statsFloat() const { return statsBase() / 4; }
  /// Split roles: Pᵀ·scale (f32, an m64 accumulator per thread of
  /// warpgroup 0) for warpgroup 1's dSᵀ; one buffer.
  int64_t exchangeBytes() const { return splitRoles ? bkv * bq * 4 : 0; }
  int64_t exchangeBase() const { return statsBase() + stages() * 2 * bq * 4; }
  /// Split roles at Dv < D: warpgroup 1's dQ panel (bq × D/2 f32) outgrows
  /// the slot's dO tile, so each stage has a panel buffer of its own.
  int64_t dqPanelBytes() const {
    return splitRoles && dv != d ? bq * d / 2 * 4 : 0;
  }
  int64_t dqPanelBase() const { return exchangeBase() + exchangeBytes(); }
  /// The warp-specialised kernel's dQ tiles (f32, rows of D, chunk-swizzled;
  /// see storeDQTile), double-buffered; none with split roles (panels).
  int64_t dqBytes() const {
    return warpSpecialized && !splitRoles ? bq * d * 4 : 0;
  }
  int64_t dqBase() const { return dqPanelBase() + stages() * dqPanelBytes(); }
  /// fp8: each dS buffer's |dS| maximum over the CTA (f32 bits, u32).
  int64_t amaxBase() const { return dqBase() + 2 * dqBytes(); }
  int64_t total() const { return amaxBase() + (fp8 ? 4 * dsBuffers() : 0); }
};

HopperBackwardSmem hopperBackwardSmem(const KernelPlan &plan);

/// A consumer warpgroup's share of dQ = dS·K is D/2 columns. K is dQ's B
/// operand, N-major, and a wgmma's N-major B may not start inside one
/// 64-column slab and run into the next, so a share that would (D = 96:
/// columns 48-95) is taken in two pieces: warpgroup w's piece covers
/// columns [firstColumn + w·step, + width), each inside one slab.
///   D = 64, 128:  one piece of D/2;
///   D = 96:       32 at 0 / 64, and 16 at 32 / 48;
///   D = 192:      64 at 0 / 128, and 32 at 64 / 96.
struct DQPiece {
  int64_t width, firstColumn, step;
};
SmallVector<DQPiece, 2> dqPieces(int64_t headDim);

/// The mbarriers of the warp-specialised kernel, one group: K/V full, then
/// the query-tile ring (Q, dO, LSE, Delta; full and empty) and the dQ-tile
/// ring (full and empty), two slots each.
struct BackwardBarriers {
  static constexpr int64_t keyValueFull = 0, queryFull = 1, queryEmpty = 3,
                           dqFull = 5, dqEmpty = 7, count = 9;
  /// fp8: each slot's TMA data (Q and dO, for the transposers; queryFull
  /// then waits for their Qᵀ, dOᵀ and the row statistics), and Kᵀ.
  static constexpr int64_t queryLoaded = 9, keyTransposed = 11, fp8Count = 12;
};

/// fp8: named barrier of the tile's |dS| maximum (1 is the dSᵀ barrier, 2
/// the split roles' exchange).
constexpr int64_t kAmaxBarrier = 3;

/// One trip of a consumer loop, as this thread sees it. Everything
/// lane-dependent is rebuilt from opaque copies each trip
/// (setupOpaqueThreadIds); hoisted, it would hold ~100 registers across the
/// loop.
struct ConsumerTile {
  Value index;          // t, the tile's place in the CTA's walk
  Value warpgroup;      // the consumer warpgroup, 0 or 1
  Value keyRow0;        // the warp's first key (Sᵀ row) in the key block
  Value descriptorBase; // wgmmaDescriptorBase, opaque
};

/// Emits the kernel; the parts share the CTA's ids, bounds and buffers.
class HopperBackward {
public:
  HopperBackward(KernelBuilder &kb, gpu::GPUModuleOp module,
                 gpu::GPUFuncOp func, const TiledLoopNest &loops);

  /// Fills the body of the kernel: the warp-specialised one (plan
  /// .warpSpecialized) or the one whose 256 threads load with cp.async.
  void build();

private:
  KernelBuilder &kb;
  OpBuilder &b;
  Location loc;
  const KernelPlan &plan;
  gpu::GPUModuleOp module;
  gpu::GPUFuncOp func;
  const TiledLoopNest &loops;
  HopperBackwardSmem layout;

  // Parameters (fa_bwd of docs/ABI.md).
  Value qMem, kMem, vMem, doMem, lseMem, deltaMem, dqMem, dkMem, dvMem, scale;
  // Q, K, V, dO, dK and dV in the caller's layout (their stride
  // parameters); LSE, Delta and dq_accum are fa's, contiguous.
  StridedTensor qT, kT, vT, doT, dkT, dvT;
  Value heads, kvHeads, nq, nk; // index
  // Varlen: the token totals and the CTA's sequence's first query and key
  // rows (nq, nk are then the sequence's lengths; VarlenKernel.h).
  Value nqTotal, nkTotal, seqStartQ, seqStartK, cuSeqlensQ, cuSeqlensK;
  // The tile scheduler's choice: this CTA's key block of (batch, kvHead),
  // and its walk over tileCount
  // query tiles: tilesPerHead tiles [tileBegin, tileEnd) of each of the
  // headsPerKvHead query heads from firstHead.
  Value keyBlock, kvHead, batch, headsPerKvHead, keyBegin;
  Value tileBegin, tileEnd, tilesPerHead, tileCount, firstHead;
  // Shared memory: the f32 view of the row statistics (and dQ tiles), the
  // wgmma descriptor base; dq_accum's address; scale·log2(e).
  Value stats, descBase, dqAddr, scaleLog2;
  // The warp-specialised kernel: its mbarrier group, whether the CTA has
  // any tile, the tensor maps.
  Value barriers, hasTiles, qMap, kMap, vMap, doMap;
  // The producer's 32-bit values: batch·heads (the (batch, head) index of
  // query head 0), Nq, and the rows of a head in LSE, Delta and dq_accum
  // with the first of the CTA's (Nq and 0, or a varlen batch's Tq and its
  // sequence's first query).
  Value batchHeads32, nq32, headRows32, seqStartQ32;
  // The deterministic dQ order: the semaphores' address (i64), the query
  // tiles of a head and this CTA's key block (i32).
  Value semaphores, qTiles32, keyBlock32;
  // Block-sparse: the block mask (i32, global) and its head count; the
  // key block's full query blocks come first in the walk (fullTiles of
  // them), then its partial ones: this CTA's line of the mask's transposed
  // (q_) arrays.
  Value blockMask, maskHeads, fullTiles;
  BlockMaskLine queryLine; // the key block's query blocks
  Value queryBlocks; // NQB: listed indices are clamped below it

  Value param(unsigned i) { return func.getBody().front().getArgument(i); }
  /// A tile's columns in tmaLoadTile's 16-bit units (fp8: two a unit).
  int64_t boxCols(int64_t cols) const { return plan.isFp8() ? cols / 2 : cols; }
  Value add32(Value x, Value y) {
    return arith::AddIOp::create(b, loc, x, y).getResult();
  }
  Value mul32(Value x, Value y) {
    return arith::MulIOp::create(b, loc, x, y).getResult();
  }
  /// Emits `body` under `cond`.
  void ifThen(Value cond, function_ref<void()> body);
  /// cp.async data and generic stores, read next by wgmma or TMA (the async
  /// proxy), are made visible to it.
  void fenceProxyAsyncShared();

  // The tile scheduler (HopperBackwardScheduler.cpp).
  /// This CTA's key block and the ids of its key and value rows.
  void setupKeyBlock();
  /// Varlen: the CTA's sequence (grid z) from the offsets at parameter
  /// `cuSeqlensParam` and the next; nq, nk become its lengths.
  void setupSequence(unsigned cuSeqlensParam);
  /// Row `row` of the CTA's sequence in the packed tensors (itself if dense).
  Value packedQueryRow(Value row) {
    return seqStartQ ? kb.add(seqStartQ, row) : row;
  }
  Value packedKeyRow(Value row) {
    return seqStartK ? kb.add(seqStartK, row) : row;
  }
  /// The batch coordinate of the TMA boxes (0 for packed tensors).
  Value tmaBatch() { return seqStartQ ? kb.idx(0) : batch; }
  /// Row 0 of `head` of this CTA's batch in `t` (the sequence's first row of
  /// a varlen batch's packed tensor).
  Value headBase(const StridedTensor &t, Value head, Value seqStart) {
    if (!seqStart)
      return t.headBase(kb, batch, head);
    return t.rowOffset(kb, t.headBase(kb, kb.idx(0), head), seqStart);
  }
  /// The query tiles that meet the band of the key block, or, block-sparse,
  /// those its block mask lists.
  void setupQueryTiles();
  /// The query tiles [begin, end) of the tiled loop nest that meet key block
  /// `block`, for sizes nqRows, nkRows (varlen: the token totals).
  std::pair<Value, Value> queryTileRange(Value block, Value nqRows,
                                         Value nkRows);
  /// The sizes a tile or the epilogue reads that are fixed for the CTA. The
  /// 128-row tile takes them again where it reads them (rederiveSizes), from
  /// fresh reads of %ctaid and opaque copies of the parameters: carried
  /// across its tile loop they spilled at its consumers' 240 registers.
  struct CtaSizes {
    Value batch, tileBegin, tilesPerHead, nq, nk, seqStartQ, seqStartK;
  };
  CtaSizes ctaSizes() const {
    return {batch, tileBegin, tilesPerHead, nq, nk, seqStartQ, seqStartK};
  }
  void setCtaSizes(const CtaSizes &s) {
    std::tie(batch, tileBegin, tilesPerHead, nq, nk, seqStartQ, seqStartK) =
        std::tie(s.batch, s.tileBegin, s.tilesPerHead, s.nq, s.nk, s.seqStartQ,
                 s.seqStartK);
  }
  void rederiveSizes();
  /// Block-sparse: [tileBegin, tileEnd) = [0, full + partial) of the key
  /// block's lists, counts clamped to the query blocks.
  void setupListedQueryTiles();
  /// The query tile at place `walk` ∈ [tileBegin, tileEnd) of a head's walk:
  /// `walk` itself, or, block-sparse, the walk-th listed query block. The
  /// one source of the tile sequence: the consumers (qBeginOf) and every
  /// producer loop (forEachTile32) read their tiles through it.
  Value queryTileAt(Value walk);
  /// Block-sparse: whether tile t is a partial block (the mask_mod is
  /// evaluated on it); full blocks skip it.
  Value isPartialTile(Value t);
  /// The query head and first query row of tile t.
  Value headOf(Value t);
  Value qBeginOf(Value t);
  /// The first row of query head `head` in Q, dO, dq_accum, LSE and Delta.
  Value queryRowsBaseOf(Value head);
  /// Calls body(t, slot, qTile, head) for every tile t of the CTA on 32-bit
  /// values (slot = t mod 2); qTile and head step along with t.
  void forEachTile32(function_ref<void(Value, Value, Value, Value)> body);
  /// The last key block that adds into the query tile at qBegin (index).
  Value lastKeyBlockOf(Value qBegin);

  // The kernels and warp roles (HopperBackwardKernel.cpp).
  /// This thread's consumer warpgroup, its 64 keys' group in the key
  /// block (the warpgroup, or 0 with split roles) and its warp's first key.
  Value consumerWarpgroup();
  Value keyGroupOf(Value warpgroup) {
    return plan.splitRoles ? kb.idx(0) : warpgroup;
  }
  Value keyRow0Of(Value warpgroup);
  void buildAsyncCopyKernel();
  void buildWarpSpecializedKernel();
  void initBarriers();
  void emitProducerWarpgroup();
  void emitConsumerWarpgroups();
  /// The consumer loop over the CTA's tiles, dK and dV carried in
  /// registers; returns them (dK first).
  /// `init` is dK, dV, then `extraCount` values the body also carries (the
  /// fp8 dK exponent).
  SmallVector<Value> forEachConsumerTile(
      ArrayRef<Value> init,
      function_ref<void(const ConsumerTile &, SmallVector<Value> &dK,
                        SmallVector<Value> &dV, SmallVector<Value> &extra)>
          body,
      int64_t extraCount = 0);

  // The producer (HopperBackwardProducer.cpp).
  /// cp.async: K and V of the key block, once.
  void loadKeyValueAsync();
  /// cp.async: Q, dO, LSE and Delta of the tile at qBegin of query head
  /// `head`, into `stage`; rows at or past Nq read zero.
  void loadQueryTileAsync(Value head, Value qBegin, Value stage);
  /// cp.async: tile `next`'s loads, if there is such a tile.
  void prefetchQueryTile(Value next);
  /// Waits for this thread's cp.async data and makes it and the generic
  /// stores of dSᵀ visible to every warpgroup's wgmma.
  void publishQueryTile();
  /// TMA (one thread): K and V once, then Q and dO of each tile into the
  /// query-tile ring.
  void emitTmaLoads();
  /// One warp: LSE and Delta of each tile into the ring's slot.
  void emitRowStatsLoads();
  /// That warp's exponent addends −(LSE − `lseShift`)·log2 e (recompute_probs'
  /// folded_lse) and Delta (times `deltaFactor` if given) of the tile into
  /// slot `slot32` (`lane`: the lane id, i32).
  void storeRowStats(Value lane, Value slot32, Value qTile, Value head,
                     Value deltaFactor, double lseShift = 0);
  /// The stage's statistics come from storeRowStats (folded once a row), not
  /// copied as they are by cp.async.
  bool foldedStats() const { return layout.warpSpecialized; }
  /// dSᵀ takes the plain scale (no score_mod's derivative, no probabilities
  /// carrying it): the stage holds −Delta·scale (score_gradient's
  /// scaled_delta).
  bool scaledDelta() const {
    return foldedStats() && !plan.splitRoles && !plan.isFp8() &&
           !plan.spec.scoreMod;
  }
  /// 32-bit: the first row of query head `head` in LSE, Delta and
  /// dq_accum, and row `row` of the CTA's sequence in the packed Q and dO.
  Value rowsBase32(Value head) {
    return seqStartQ32 ? add32(mul32(head, headRows32), seqStartQ32)
                       : mul32(add32(batchHeads32, head), headRows32);
  }
  Value queryRow32(Value row) {
    return seqStartQ32 ? add32(seqStartQ32, row) : row;
  }
  /// Waits, on the producer side of a two-slot ring, for barrier `first` +
  /// slot to complete the phase of tile t's round plus `round`; returns the
  /// slot (index).
  Value waitForSlot32(int64_t first, Value t, Value slot32, int64_t round);

  // The consumer mainloop (HopperBackwardMainloop.cpp).
  /// Shared byte offsets: Q and dO of `stage`, tile t's dSᵀ buffer.
  Value qStageOf(Value stage);
  Value doStageOf(Value stage);
  Value dsBufferOf(Value t);
  /// Byte offset of warpgroup's keys in the key tile (K or V) at tileBase.
  Value keyTileOf(Value warpgroup, int64_t tileBase);
  /// Sᵀ = K·Qᵀ or dPᵀ = V·dOᵀ, both K-major, k = `cols`; one group.
  Value issueKeyByQuery(Value base, Value keyTile, Value queryTile,
                        int64_t cols);
  /// k16 step kk of the MN-major query tile at `tile` (Q or dO of a
  /// stage) as the B operand of dV += Pᵀ·dO or dK += dSᵀ·Q.
  Value queryTileStepAsB(Value base, Value tile, int64_t kk);
  /// dV += Pᵀ·dO and dK += dSᵀ·Q; one group.
  void issueDVAndDK(Value base, ArrayRef<Value> pA, ArrayRef<Value> dsA,
                    Value stage, SmallVector<Value> &dV,
                    SmallVector<Value> &dK);
  /// dQ = dS·K for warpgroup's D/2 columns (dqPieces), one accumulator
  /// per piece; one group.
  SmallVector<Value> issueDQ(Value base, Value warpgroup, Value dsBuffer);
  /// The accumulators of issueDQ as one list of values, piece by piece,
  /// through one operand fence.
  SmallVector<Value> unpackDQ(ArrayRef<Value> dqAcc);
  /// The first dQ column of warpgroup's `piece` (index).
  Value dqPieceColumn(const DQPiece &piece, Value warpgroup);
  /// 128-row query tiles: each warpgroup's dQ is 64 of the tile's rows with
  /// all D columns (A its slab of dSᵀ), not D/2 columns of all 64 rows.
  bool dqByRows() const { return plan.blockQ == 128; }
  /// The pieces of a warpgroup's dQ: dqPieces, or all D columns at once.
  SmallVector<DQPiece, 2> warpgroupDQPieces() const;
  /// The float index in `stats` of `stage`'s statistics: LSE, then Delta
  /// at + bq (attn_gpu.recompute_probs and score_gradient read them).
  Value rowStatsOf(Value stage);
  /// Pᵀ from Sᵀ in place; with a score_mod, returns each score's
  /// d(score)/d(Sᵀ) as a fragment (null without).
  Value computeP(SmallVector<Value> &s, const ConsumerTile &tile, Value stage);
  /// dSᵀ = Pᵀ∘(dPᵀ − Delta)·factor (attn_gpu.score_gradient with Delta
  /// from `stage`) in place of dPᵀ and into `dsBuffer`; the factor is
  /// `derivative` as computeP returns, else the scale, or with
  /// `prescaled` none (p carries it).
  void computeDS(ArrayRef<Value> p, SmallVector<Value> &dp, Value derivative,
                 Value stage, Value dsBuffer, Value keyRow0,
                 bool prescaled = false);
  /// dSᵀ (accumulator values of the warp's keys from keyRow0) into
  /// `dsBuffer`, bf16, swizzled for dQ's MN-major A.
  void storeDSTransposed(ArrayRef<Value> ds, Value dsBuffer, Value keyRow0);
  /// Sᵀ and dPᵀ issued, Pᵀ computed from Sᵀ while dPᵀ runs (`p`), dPᵀ
  /// waited for (`dp`); returns computeP's score_mod derivative.
  Value issuePAndDP(const ConsumerTile &tile, Value stage,
                    SmallVector<Value> &p, SmallVector<Value> &dp);
  /// One tile's products up to dV and dK, issued.
  void issueTileProducts(const ConsumerTile &tile, Value stage,
                         Value dsBuffer, SmallVector<Value> &dV,
                         SmallVector<Value> &dK);

  // fp8 e4m3 (HopperBackwardFp8.cpp).
  /// The CTA's descale factors (f32, of its batch and key head).
  Value descaleQ, descaleK, descaleV, descaleDo;
  void loadDescales();
  Value ktBase() { return kb.idx(layout.ktBase()); }
  Value qtStageOf(Value stage);
  Value dotStageOf(Value stage);
  /// Producer warps 2-3: Kᵀ once, then per tile the row statistics (warp
  /// 2; Delta divided by dP's factor descale_do·descale_v) and Qᵀ, dOᵀ.
  void emitFp8Transposes();
  /// The consumers' loop: products as issueTileProducts in e4m3, dS scaled
  /// per tile by a power of two from the CTA's |dS| maximum, dK carrying
  /// its exponent; then dK, dV descaled and stored.
  void emitFp8Consumers();
  /// One tile's products up to dV and dK (issued); `dkExp` the biased
  /// exponent of dK's scale, lowered (dK rescaled) when the tile needs a
  /// smaller one; returns the tile's dS exponent for dQ.
  Value issueTileProductsFp8(const ConsumerTile &tile, Value stage,
                             Value dsBuffer, SmallVector<Value> &dV,
                             SmallVector<Value> &dK, Value &dkExp);
  /// The biased exponent e of 2^(e−127) that puts the CTA's |dS·factor|
  /// maximum of this tile in [128, 256): a shared atomic max and a named
  /// barrier (`factor` > 0).
  Value tileScaleExponent(ArrayRef<Value> ds, Value factor, Value dsBuffer);
  /// dS·2^(e−127) as e4m3 into `dsBuffer`: [64 queries][128 keys], the keys
  /// of each 16 in Kᵀ's order (HopperFp8.h), 128 B swizzled.
  void storeDSFp8(ArrayRef<Value> ds, Value scale, Value dsBuffer,
                  Value keyRow0);
  /// dQ = dS·K for warpgroup's D/2 columns: dS and Kᵀ K-major.
  Value issueDQFp8(Value base, Value warpgroup, Value dsBuffer);

  // Split roles (HopperBackwardRoles.cpp).
  /// The consumers' loop: warpgroup 0's Pᵀ and dV, warpgroup 1's dPᵀ, dSᵀ
  /// and dK, both warpgroups' dQ; then the dV and dK stores.
  void emitSplitRoleConsumers();
  /// Warpgroup 0's share of a tile: Sᵀ, Pᵀ, Pᵀ·scale into the exchange,
  /// dV += Pᵀ·dO (`dV`: the first Dv/2 values of `acc`).
  void emitPRole(const ConsumerTile &tile, Value stage,
                 SmallVector<Value> &acc);
  /// Warpgroup 1's share: dPᵀ, then with the exchange's Pᵀ·scale dSᵀ into
  /// `dsBuffer`, dK += dSᵀ·Q (`acc`).
  void emitDSRole(const ConsumerTile &tile, Value stage, Value dsBuffer,
                  SmallVector<Value> &acc);
  /// Dv < D: each warpgroup's share in its branch (emitPRole, emitDSRole),
  /// its products waited for there.
  void emitRoleBranches(const ConsumerTile &tile, Value stage, Value dsBuffer,
                        SmallVector<Value> &acc);
  /// dQ of warpgroup w staged in its panel of the slot for the reducer,
  /// which releases the slot.
  void stageDQInQuerySlot(ArrayRef<Value> dqAcc, Value warpgroup, Value slot);
  /// One producer thread: dq_accum's panel p += warpgroup p's staged dQ,
  /// one bulk reduction a panel, then the slot is free for the next load.
  void emitDQPanelReductions();
  /// The exchange's float offset of this thread's accumulator value 4j + i
  /// (16 B per thread and j: lanes of a store are contiguous).
  Value exchangeFloat(int64_t j);

  // The epilogue (HopperBackwardEpilogue.cpp).
  /// red.global: dq_accum += dQ of the tile at qBegin.
  void reduceDQToGlobal(ArrayRef<Value> dqAcc, Value warpgroup, Value qBegin,
                        Value qRowsBase);
  /// The warp-specialised consumers: dQ (accumulator values) into dQ tile
  /// `slot`.
  void storeDQTile(ArrayRef<Value> dq, Value warpgroup, Value slot);
  /// dQ into the shared tile at byte tileBytes() of rows of `rowFloats`
  /// floats, chunk-swizzled: this warpgroup's pieces (dqPieces) at their
  /// place among D, or, `panel`, among its panel's D/2 columns from w·D/2.
  void storeDQTileAt(ArrayRef<Value> dq, Value warpgroup,
                     function_ref<Value()> tileBytes, int64_t rowFloats,
                     bool panel);
  /// Split roles: the shared byte offset of warpgroup p's dQ panel of
  /// `slot`, a tile no product reads once the warpgroup's own products are
  /// done: at D = Dv the slot's dO (p = 0, after dV) or Q (p = 1, after
  /// dK); at Dv < D, Q (0) or the stage's panel buffer (1).
  Value dqPanelOf(int64_t p, Value slot);
  /// D = Dv: a tile's products up to dV / dK (issued, in flight) for both
  /// roles, the score chain and the register-A product one wgmma sequence
  /// on each warpgroup's operands.
  void emitRoleProducts(const ConsumerTile &tile, Value stage, Value dsBuffer,
                        SmallVector<Value> &acc);
  /// Warpgroup 0: Pᵀ·d(score)/d(Sᵀ) into the exchange, then barrier 2.
  void exchangeScaledP(ArrayRef<Value> p, Value derivative);
  /// Warpgroup 1: after barrier 2, dSᵀ from the exchange in place of dPᵀ
  /// and into `dsBuffer`.
  void computeDSFromExchange(SmallVector<Value> &dp, Value stage,
                             Value dsBuffer, Value keyRow0);
  /// One producer thread: dq_accum += each dQ tile, one bulk reduction.
  void emitDQReductions();
  /// Deterministic: waits until the key blocks after this one have added
  /// into the tile; returns the tile's semaphore.
  Value waitForLaterKeyBlocks(Value head, Value qTile, Value qBegin32);
  /// dK and dV of this thread's keys (`results` of the consumer loop).
  void storeDKAndDV(ArrayRef<Value> results);
  /// The mma.sync backward's store_accumulator of a dK or dV accumulator
  /// (`cols` columns) of the warp's keys from keyRow, below Nk.
  void storeGradient(ArrayRef<Value> acc, int64_t cols, Value mem, Value base,
                     Value keyRow, Value rowStride);
};

} // namespace mlir::fa::gpu_lowering

#endif // FA_LIB_CONVERSION_ATTNTOGPU_HOPPERBACKWARD_H
