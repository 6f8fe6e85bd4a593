//===- HopperForward.h - the parts of the wgmma forward ---------*- C++ -*-===//
//
// The wgmma/TMA forward for sm_90a (what it computes and its shared-memory
// layout: HopperForwardKernel.cpp) in the parts of CUTLASS/FA3's forward,
// one file each, as the wgmma backward (HopperBackward.h):
//   HopperForwardKernel.cpp    the schedule's switches, the kernel put
//                              together from the parts below, the warp roles
//   HopperForwardProducer.cpp  the tile scheduler (a grid of tiles, the
//                              persistent counter, varlen sequences, block-
//                              sparse key lists) and the TMA loads of Q and
//                              the K/V ring; fp8's V transpose
//   HopperForwardMainloop.cpp  a consumer's key tiles: S = Q·Kᵀ and P·V on
//                              wgmma, the score step (score_mod, masks,
//                              online softmax), the ping-pong turns
//   HopperForwardEpilogue.cpp  O / l and the LSE: through shared memory with
//                              16-byte stores, or from registers
//
//===----------------------------------------------------------------------===//

#ifndef FA_LIB_CONVERSION_ATTNTOGPU_HOPPERFORWARD_H
#define FA_LIB_CONVERSION_ATTNTOGPU_HOPPERFORWARD_H

#include "BlockMask.h"
#include "HopperFp8.h"
#include "TiledLoopNest.h"
#include "VarlenKernel.h"
#include "Wgmma.h"

#include <functional>

namespace mlir::fa::gpu_lowering {

/// Growth of a row max (powers of 2) that the lazy rescale absorbs.
constexpr double kLazyRescaleLog2 = 8.0;

/// The producer's register budget after the role split: kProducerRegs
/// (Wgmma.h), except where it needs more; the consumers take the rest
/// (attn_gpu::consumerRegisters). A persistent producer walks the tiles (in
/// i32, to fit) and issues 4-D TMA loads (head and batch coordinates): 24
/// registers spill there, 32 fit (32·128 + 2·232·128 <= 168·384).
constexpr int32_t kPersistentProducerRegs = 32;
/// A persistent block-sparse producer also walks the block mask (its
/// lists' offsets in 64 bits): 32 or 40 registers spill there (the
/// document mask's d128 kernel), 48 fit beside consumers of 224.
constexpr int32_t kPersistentSparseProducerRegs = 48;

/// Byte offsets and wgmma descriptors of the kernel's shared tiles.
struct HopperSmem {
  int64_t d, dv, bq, bkv, stages;
  bool persistent;
  /// fp8: 1-byte elements, and a ring of Vᵀ tiles [Dv][bkv] after V's.
  bool fp8 = false;
  /// Block-sparse (with persistent): the tile's words carry its walk.
  bool blockSparse = false;
  /// Bytes of a row of `cols` elements in whole 128 B slab rows (D = 96
  /// in 16 bits: 256).
  int64_t rowBytes(int64_t cols) const {
    return llvm::alignTo(cols * (fp8 ? 1 : 2), kSlabRowBytes);
  }
  int64_t qBytes() const { return bq * rowBytes(d); }
  int64_t kBytes() const { return bkv * rowBytes(d); }
  int64_t vBytes() const { return bkv * rowBytes(dv); }
  /// Vᵀ: one [Dv][128 keys] slab of 128 B rows per 128 keys (the last one
  /// partly used when bkv is not a multiple of 128).
  int64_t vtBytes() const {
    return fp8 ? dv * llvm::alignTo(bkv, kSlabRowBytes) : 0;
  }
  int64_t kBase() const { return qBytes(); }
  int64_t vBase() const { return qBytes() + stages * kBytes(); }
  int64_t vtBase() const { return vBase() + stages * vBytes(); }
  int64_t tiles() const { return vtBase() + stages * vtBytes(); }
  /// A persistent grid's tile words (u32) follow the tiles: the current
  /// tile; block-sparse, also its query block, key-block count and full
  /// count (kTileWord*), then the key block of each ring slot.
  int64_t tileWords() const {
    return persistent ? (blockSparse ? kSlotKeyBlocks + stages : 1) : 0;
  }
  int64_t total() const { return tiles() + llvm::alignTo(4 * tileWords(), 16); }
  static constexpr int64_t kTileWordTile = 0, kTileWordQBlock = 1,
                           kTileWordCount = 2, kTileWordFull = 3,
                           kSlotKeyBlocks = 4;
};

/// The mbarriers of one CTA, all in one group: Q full, Q empty (persistent
/// grid only), then K full, V full, K empty and V empty rings, and for fp8
/// a Vᵀ full ring (completed by the transposing threads).
struct Barriers {
  Value group;
  int64_t stages;
  bool persistent = false;
  bool fp8 = false;
  int64_t qCount() const { return persistent ? 2 : 1; }
  int64_t count() const { return qCount() + (fp8 ? 5 : 4) * stages; }
  int64_t vtFull() const { return qCount() + 4 * stages; }
  int64_t qFull() const { return 0; }
  int64_t qEmpty() const { return 1; }
  int64_t kFull() const { return qCount(); }
  int64_t vFull() const { return qCount() + stages; }
  int64_t kEmpty() const { return qCount() + 2 * stages; }
  int64_t vEmpty() const { return qCount() + 3 * stages; }
  /// Full barriers complete on the producer's arrival plus the TMA bytes,
  /// empty ones on the consumers' arrivals.
  bool isEmpty(int64_t i) const {
    return (persistent && i == qEmpty()) ||
           (i >= kEmpty() && i < kEmpty() + 2 * stages);
  }
  /// Threads whose arrivals complete barrier i's phase.
  int64_t arrivals(int64_t i, int64_t consumerThreads) const {
    if (fp8 && i >= vtFull())
      return kFp8TransposeThreads;
    return isEmpty(i) ? consumerThreads : 1;
  }
};

/// Emits the producer and consumer code; shares the ids and bases of the CTA.
class HopperForward {
public:
  HopperForward(KernelBuilder &kb, const HopperSmem &layout,
                const TiledLoopNest &loops)
      : kb(kb), b(kb.b), loc(kb.loc), plan(kb.plan), layout(layout),
        loops(loops) {}

  /// Fills the body of `func` (parameters as docs/ABI.md's wgmma entries).
  void build(gpu::GPUModuleOp module, gpu::GPUFuncOp func,
             const KernelParams &params);
  SmallVector<Value>
  rescaleUnlessUnit(Value alpha[2], ArrayRef<Value> acc,
                    function_ref<void(SmallVector<Value> &)> rescale);

private:
  KernelBuilder &kb;
  OpBuilder &b;
  Location loc;
  const KernelPlan &plan;
  HopperSmem layout;
  const TiledLoopNest &loops;
  Barriers bars;
  Value qMap, kMap, vMap;
  // fp8: the descale tensors (f32 [B, Hkv], or Q's and K's per 64-row
  // block: KernelPlan::descaleBlock).
  Value descaleQ, descaleK, descaleV;
  Value batches, heads, kvHeads, nq, nk;
  // The sizes the tiled loop's bounds read: nq, nk, or a varlen batch's
  // token totals (then nq, nk are the CTA's sequence's lengths).
  Value boundNq, boundNk;
  // Varlen: cu_seqlens_q, cu_seqlens_k and the first packed row of the
  // CTA's sequence in Q/O/LSE and in K/V (VarlenKernel.h); null if dense.
  Value cuSeqlensQ, cuSeqlensK, seqStartQ, seqStartK;
  // Block-sparse: the block mask (i32, global) and its head count; the
  // current tile's full-block count and the first element of its full and
  // partial key-block lists (BlockMask.h).
  Value blockMask, maskHeads, fullBlocks;
  BlockMaskLine keyLine; // the query block's key blocks (producer)
  Value tileQBlock;      // the producer's query block (persistent)
  // O in the caller's layout (the strides of fa_fwd's last parameters).
  StridedTensor oT;
  // The sinks parameter (f32 [H]) of a plan with sinks; null otherwise.
  Value sinksMem;
  // The current query tile: its (batch, head), first row, key-tile range,
  // and its place in the CTA's sequence of tiles (tileIter) and of K/V ring
  // slots (ringBase); both are 0 unless the grid is persistent.
  Value kvHead, qBegin, head, batch, jBegin, jEnd, tileIter, ringBase;
  Value ringBase32; // ringBase as i32 (the producer's key loop)
  Value descBase; // i64: swizzle mode | SBO | shared base >> 4
  // Persistent grid: the tile counter (u32, global), the u32 view of shared
  // memory holding the current tile, which role is being emitted, and the
  // producer's store of the current tile (forEachTile).
  Value tileCounter, tileSlot;
  bool isConsumer = false;
  std::function<void()> publishTile;

  /// Maskless: ring iteration 0 reads the last key tile (ragged when Nk is
  /// not a multiple of block_kv), iteration i > 0 key tile jBegin + i - 1.
  bool raggedFirst() const { return plan.schedule.raggedFirst; }

  bool rescaleInTurn() const { return plan.schedule.rescaleInTurn; }

  bool fp8() const { return plan.isFp8(); }
  /// The consumer warpgroups' threads: 64 query rows each (block_q / 64).
  int64_t consumerThreads() const { return plan.warps * 32 - 128; }
  /// Columns of a `cols`-element tile as counted by the 16-bit TMA boxes and
  /// descriptor steps (fp8 rows are half as many bytes).
  int64_t boxCols(int64_t cols) const { return fp8() ? cols / 2 : cols; }
  /// The Vᵀ full barrier for fp8, V's own otherwise: what P·V waits for.
  int64_t pvFull() const { return fp8() ? bars.vtFull() : bars.vFull(); }

  Value i64(int64_t v) {
    return arith::ConstantOp::create(b, loc, b.getI64IntegerAttr(v));
  }
  /// Bit 0 of `v` (index) as i1, the parity operand of the mbarrier waits.
  Value parityOf(Value v) { return phaseParity(kb, v); }

  /// One descriptor: start `byteOffset` (index), leading byte offset `lbo`.
  Value descriptor(Value byteOffset, int64_t lbo);

  /// Waits for phase `parity` of ring barrier `barrier` + `stage`.
  void wait(int64_t barrier, Value stage, Value parity);
  /// Arrives (this thread) on ring barrier `barrier` + `stage`.
  void arrive(int64_t barrier, Value stage);

  /// Expects the tile's bytes on its full barrier and issues one TMA box per
  /// 64 columns.
  void loadTile(Value map, int64_t rows, int64_t cols, Value byteBase,
                Value row, ArrayRef<Value> headBatch, int64_t fullBarrier,
                Value stage);

  /// Sets the tile members for query block `qBlock` of (batch, head).
  void setTile(Value qBlock, Value headIdx, Value batchIdx);
  /// Block-sparse: the key loop of query block `qBlock` runs over its full
  /// then its partial key blocks; sets jBegin = 0, jEnd = their count.
  /// `sizes`: batches, mask heads, nq, nk as the walk reads them.
  void setBlockSparseTile(Value qBlock, ArrayRef<Value> sizes);
  /// Block-sparse: the key tile (index) of ring iteration `it` (index).
  Value listedKeyTile(Value it);
  /// A persistent block-sparse grid: the producer walks the block mask and
  /// publishes each tile's walk in the tile words and each ring slot's key
  /// block beside it, so the consumers hold no list state.
  bool persistentSparse() const { return plan.persistent && plan.blockSparse; }
  /// Tile word `word` (i32) of layout.tileWords(); stores `value` (i32).
  Value tileWord(Value word);
  void storeTileWord(Value word, Value value);
  /// Persistent block-sparse consumers: the key tile (index) in ring slot
  /// `stage`, read after its K full wait; null otherwise.
  Value slotKeyTile(Value stage);
  /// Persistent block-sparse: tile t (i32) of `qBlocks` (i32) query blocks a
  /// (batch, head), in the block mask's grid order (gridPlace's groups).
  void enterBlockSparseTile(Value t, Value qBlocks);
  /// Varlen: reads sequence `seq`'s rows; nq, nk become its lengths.
  void setSequence(Value seq);
  /// The batch coordinate of the TMA boxes (0 for a packed varlen tensor).
  Value tmaBatch(Value batchIdx) { return seqStartQ ? kb.idx(0) : batchIdx; }
  /// `row` of the CTA's sequence as a packed row (itself if dense).
  Value packedRow(Value seqStart, Value row) {
    return seqStart ? kb.add(seqStart, row) : row;
  }
  /// Runs `body` for each query tile of this CTA: the grid's own, or, on a
  /// persistent grid, tiles blockIdx.x, + gridDim.x, ...
  void forEachTile(function_ref<void()> body);

  /// The producer thread: per tile Q, then K(j) and V(j) into free ring
  /// slots.
  void emitProducer();
  void emitProducerTile();
  /// fp8: warps 1-3 of the producer warpgroup transpose each V tile into
  /// its Vᵀ slot once it lands, then arrive on its Vᵀ full barrier.
  void emitTransposer();
  /// A consumer warpgroup: per tile the KV loop and the O / LSE epilogue.
  void emitConsumer(Value consumer, Value oMem, Value lseMem, Value scale);
  void emitConsumerTile(Value consumer, Value oMem, Value lseMem, Value scale);

  /// What the parts of one consumer warpgroup's tile share.
  struct ConsumerState {
    Value consumer;   // 0 or 1
    Value rowBase;    // this warp's first row in the Q tile
    Value qRow0;      // the warpgroup's first query
    Value qRow0Bytes; // its rows' byte offset in the Q slabs
    Value scale, scaleLog2;
    Value oDescale; // fp8: descale_v of the tile's (batch, key head)
    Value bounds; // attn_gpu.key_bounds of the warpgroup's rows
    Value isFirst; // consumer == 0 (ping-pong's barrier ids)
  };
  ConsumerState beginConsumerTile(Value consumer, Value scale);
  /// The key tiles of the tile: (max, sum) per row, then O (unnormalised).
  SmallVector<Value> emitKeyTiles(const ConsumerState &t);
  /// The first key tile's S and softmax (one branch per width when ragged):
  /// (max, sum), then P packed as wgmma A registers.
  SmallVector<Value> emitFirstKeyTile(const ConsumerState &t,
                                      ArrayRef<Value> init);
  /// The body of the steady-state loop: S(j) and P·V(j-1) in flight.
  void emitKeyTile(const ConsumerState &t, scf::ForOp loop, int64_t pEnd);
  /// P·V of the last key tile; (max, sum, O).
  SmallVector<Value> emitLastPV(const ConsumerState &t, ValueRange res,
                                int64_t pEnd);
  /// O / l and LSE into global memory.
  void emitOutput(const ConsumerState &t, ArrayRef<Value> res, Value oMem,
                  Value lseMem);
  /// Applies the score_mod to S of key tile `keyTile`, masks it where its
  /// `keys` keys cross the band's edge or Nk (when `masked`), then updates
  /// the softmax state; returns P (f32, in place of S) and the rescale
  /// factor of each row. The factor comes from the shared update applied to
  /// a unit accumulator, so the O accumulator can be rescaled after
  /// P·V(j-1) lands. Block-sparse: `iteration` (the ring iteration) tells a
  /// full key tile (no mask_mod, no bound) from a partial one.
  SmallVector<Value> scoreStep(const ConsumerState &t, Value keyTile,
                               bool masked, Value scores, int64_t keys,
                               SoftmaxState &state, Value alpha[2],
                               Value iteration,
                               ArrayRef<Value> keyFactors = {});
  /// Block descales: the index of row `row`'s factor among `rows` rows of
  /// the (batch, head) pair `headRow` (clamped to the last block).
  Value descaleBlockAt(Value headRow, Value rows, Value row);
  /// Block descales: K's factors of key tile `keyTile`'s first `keys` keys,
  /// one per 64 (none without block descales).
  SmallVector<Value> keyDescales(Value keyTile, int64_t keys);
  /// P as A registers (Wgmma.h). Packing happens only once no wgmma is in
  /// flight: registers of a later wgmma defined while one runs make ptxas
  /// serialise them (C7513).
  SmallVector<Value> packP(ArrayRef<Value> s);
  /// The K/V ring slot and full-barrier parity of ring iteration `it` of
  /// this tile (the CTA's ringBase + it).
  Value ringStage(Value it);
  Value ringParity(Value it);
  /// Ping-pong (attn_gpu.turn_begin / turn_end): a consumer's GEMMs are
  /// issued in its turn, so one warpgroup's softmax runs under the other's
  /// GEMMs. Both consumers pass the same number of turns (prologue, one per
  /// loop trip, epilogue); consumer 0's own arrival (emitConsumer) lets it
  /// go first.
  void turnBegin(const ConsumerState &t);
  void turnEnd(const ConsumerState &t);
  /// On a persistent grid the producer refills Q for the next tile once
  /// every consumer thread is past its last Q·Kᵀ.
  void releaseQ();
  /// O ×= the factors f of its rows (a warp-uniform skip under the lazy
  /// rescale).
  SmallVector<Value> rescaleBy(Value f[2], SmallVector<Value> o);

  /// Descriptors of Q (this consumer's rows) and K(stage), per k16 step.
  SmallVector<Value> qkDescriptors(Value qRow0Bytes, Value stage);
  /// Descriptors of V(stage), per k16 step.
  SmallVector<Value> pvDescriptors(Value stage);
  /// S = Q·K(stage)ᵀ over the stage's first `keys` keys, issued on the
  /// tensor cores (not waited for): an attn_gpu.wgmma_qk, its accumulator
  /// fragment.
  Value issueQK(ArrayRef<Value> descs, int64_t keys);
  /// acc += P·V(stage) issued with P in registers (not waited for): an
  /// attn_gpu.wgmma_pv, its lane values.
  SmallVector<Value> issuePV(ArrayRef<Value> p, ArrayRef<Value> descs,
                             ArrayRef<Value> acc);
};

} // namespace mlir::fa::gpu_lowering

#endif // FA_LIB_CONVERSION_ATTNTOGPU_HOPPERFORWARD_H
