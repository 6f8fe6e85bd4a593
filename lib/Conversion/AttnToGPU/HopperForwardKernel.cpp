//===- HopperForwardKernel.cpp - wgmma/TMA forward for sm_90a ---*- C++ -*-===//
//
// The FlashAttention-3 shape of the forward on Hopper. 384 threads in three
// warpgroups: warpgroup 0 gives up its registers (setmaxnreg 24) and one of
// its threads issues TMA loads of the Q tile and of a `stages`-deep K/V ring,
// each completing on a "full" mbarrier; warpgroups 1 and 2 raise theirs
// (setmaxnreg 240) and own 64 query rows each. A consumer computes
// S = Q·Kᵀ with shared-memory wgmma, keeps P in registers as the A operand of
// P·V (register-A wgmma) and frees a ring slot by arriving on its "empty"
// mbarrier. S(j) and P·V(j-1) are issued together so the tensor cores run
// P·V(j-1) while the softmax of tile j runs.
//
// On a persistent grid (-fa-wgmma-persistent; by default maskless D <= 64)
// one CTA per SM takes query tiles from a counter (forEachTile). Q gets an
// "empty" mbarrier: the consumers free it after their last Q·Kᵀ, so the next
// tile's first K and its Q load under this tile's last softmax, P·V and
// epilogue, which stores O from registers (Q's buffer is already refilling).
//
// Shared memory (128 B swizzle; a 64-column slab per TMA box):
//   Q [D/64][128 rows][64] | K stage s [D/64][BKV][64] | V stage s [Dv/64][BKV][64]
// wgmma descriptors: K-major Q and K advance 32 B per k16 step inside a
// slab, SBO = 1024 B (8 rows of 128 B); V is N-major ("transposed" B):
// LBO = one slab (BKV·128 B), SBO = 1024 B, +2048 B per k16 step.
//
//===----------------------------------------------------------------------===//

#include "BlockMask.h"
#include "HopperFp8.h"
#include "TiledLoopNest.h"
#include "VarlenKernel.h"
#include "Wgmma.h"

#include "fa/Dialect/Attn/Transforms/Transforms.h"
#include "fa/Dialect/AttnGPU/IR/AttnGPU.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "llvm/Support/CommandLine.h"

#include <cmath>
#include <functional>

using namespace mlir;
using namespace mlir::fa;
using namespace mlir::fa::gpu_lowering;
namespace ag = mlir::fa::attn_gpu;

llvm::cl::OptionCategory &mlir::fa::codegenOptionCategory() {
  static llvm::cl::OptionCategory category(
      "fa code generation (A/B switches of the wgmma kernels; each choice "
      "that departs from the measured default is named in the kernel tag)");
  return category;
}

// Switches for A/B measurements of the consumer schedule and the epilogue
// (docs/hopper-notes.md records what each is worth on the H200; together
// they pay, ping-pong alone loses on causal masks).
static llvm::cl::opt<bool> clPingPong(
    "fa-wgmma-ping-pong", llvm::cl::cat(mlir::fa::codegenOptionCategory()),
    llvm::cl::desc("wgmma forward: the consumer warpgroups take turns issuing "
                   "their GEMMs (named barriers 1 and 2)"),
    llvm::cl::init(true));
static llvm::cl::opt<bool> clSmemEpilogue(
    "fa-wgmma-smem-epilogue", llvm::cl::cat(mlir::fa::codegenOptionCategory()),
    llvm::cl::desc("wgmma forward: O goes through the Q tile's shared memory "
                   "and leaves with 16-byte stores"),
    llvm::cl::init(true));
static llvm::cl::opt<bool> clLazyRescale(
    "fa-wgmma-lazy-rescale", llvm::cl::cat(mlir::fa::codegenOptionCategory()),
    llvm::cl::desc("wgmma forward: a row keeps its softmax base until its max "
                   "grows by more than 2^8, and a warp skips rescaling O "
                   "when none of its rows moved"),
    llvm::cl::init(false));

static llvm::cl::opt<llvm::cl::boolOrDefault> clRescaleInTurn(
    "fa-wgmma-rescale-in-turn", llvm::cl::cat(mlir::fa::codegenOptionCategory()),
    llvm::cl::desc("wgmma forward: O is rescaled by the previous tile's "
                   "factors between issuing S(j) and P·V(j-1), inside the "
                   "ping-pong turn, instead of before asking for it "
                   "(default: for D > 64 except on a persistent grid with "
                   "block_kv > 128, where it was measured to pay)"));

static llvm::cl::opt<llvm::cl::boolOrDefault> clRaggedFirst(
    "fa-wgmma-ragged-first", llvm::cl::cat(mlir::fa::codegenOptionCategory()),
    llvm::cl::desc("wgmma forward without a mask: the last, ragged key tile "
                   "runs first, Q·Kᵀ and softmax on the multiple of 64 keys "
                   "that covers it; the loop's tiles are then full and "
                   "unmasked (default: on, except on the persistent D > 64 "
                   "grid, whose consumer has no register to spare)"));

static llvm::cl::opt<llvm::cl::boolOrDefault> clPersistent(
    "fa-wgmma-persistent", llvm::cl::cat(mlir::fa::codegenOptionCategory()),
    llvm::cl::desc("wgmma forward: one CTA per SM takes query tiles from a "
                   "counter; the next tile's Q and first K tile load under "
                   "this tile's last P·V and epilogue (default: for maskless "
                   "forwards with D <= 64, where it was measured to pay)"));

/// Growth of a row max (powers of 2) that the lazy rescale absorbs.
constexpr double kLazyRescaleLog2 = 8.0;

std::string mlir::fa::wgmmaVariantKey() {
  return std::string("pp") + (clPingPong ? "1" : "0") + ".epi" +
         (clSmemEpilogue ? "1" : "0") + ".lazy" + (clLazyRescale ? "1" : "0") +
         ".rit" + std::to_string(static_cast<int>(clRescaleInTurn.getValue())) +
         ".ragged" + std::to_string(static_cast<int>(clRaggedFirst.getValue())) +
         ".persist" + std::to_string(static_cast<int>(clPersistent.getValue()));
}

/// `opt` where it is given, otherwise the measured default.
static bool optionOr(const llvm::cl::opt<llvm::cl::boolOrDefault> &opt,
                     bool measured) {
  return opt == llvm::cl::BOU_UNSET ? measured : opt == llvm::cl::BOU_TRUE;
}

WgmmaForwardSchedule
mlir::fa::measuredWgmmaForwardSchedule(const KernelPlan &plan) {
  WgmmaForwardSchedule measured;
  // O takes the previous tile's factors inside the turn (FA3's order), so
  // the 64 multiplies leave the path from a tile's softmax to its next
  // issue: +2-3% causal, +0.5-1.5% maskless at d128, +0-2% on the
  // persistent causal block_kv 128 grid; d64 maskless lost 3-5%; 8 B of
  // spills on persistent grids with wider key tiles (block_kv 176).
  measured.rescaleInTurn =
      plan.headDim > 64 && !(plan.persistent && plan.blockKV > 128);
  // Maskless, the ragged last tile first: +1-9% at d64 and, with the
  // in-turn rescale, +2-5% at d128. The persistent D > 64 consumer has no
  // register to spare for the prologue's width branches (8 B of spills at
  // block_kv 176).
  // A block-sparse key loop reads its key tiles from the block mask's
  // lists, in their order.
  measured.raggedFirst = plan.spec.mask == attn::MaskKind::None &&
                         !(plan.persistent && plan.headDim > 64) &&
                         !plan.blockSparse;
  // fp8: O (bf16) is twice as wide as the Q tile (fp8) it would pass
  // through: it leaves from registers.
  measured.smemEpilogue = !plan.isFp8();
  return measured;
}

WgmmaForwardSchedule mlir::fa::wgmmaForwardSchedule(const KernelPlan &plan) {
  WgmmaForwardSchedule schedule = measuredWgmmaForwardSchedule(plan);
  schedule.pingPong = clPingPong;
  schedule.smemEpilogue = clSmemEpilogue && schedule.smemEpilogue;
  schedule.lazyRescale = clLazyRescale;
  schedule.rescaleInTurn = optionOr(clRescaleInTurn, schedule.rescaleInTurn);
  // The switch can only turn ragged-first off: where the measured default
  // does not take it (a mask, the persistent D > 64 consumer) it cannot run.
  schedule.raggedFirst =
      schedule.raggedFirst && optionOr(clRaggedFirst, true);
  return schedule;
}

bool mlir::fa::wgmmaPersistentGrid(const attn::ScoreSpec &spec,
                                   int64_t headDim) {
  // Measured on the H200 (PERF.md): +0 to +13% for maskless D = 64. At
  // D = 128 it pays only below ~2k keys: block_kv 192 spills on this grid
  // and the persistent 176 loses 2-6% per key tile from 4k on; causal
  // tiles lose 4-10% from 2k on against one CTA per tile.
  return optionOr(clPersistent,
                  spec.mask == attn::MaskKind::None && headDim <= 64);
}

namespace {
/// Rows of one consumer warpgroup.
constexpr int64_t kRowsPerConsumer = 64;
/// Register budgets after the role split: kProducerRegs / kConsumerRegs
/// (Wgmma.h), except where the producer needs more. A persistent producer
/// walks the tiles (in i32, to fit) and issues 4-D TMA loads (head and
/// batch coordinates): 24 registers spill there, 32 fit, and 32·128 +
/// 2·232·128 stays within 168·384.
constexpr int32_t kPersistentProducerRegs = 32;
constexpr int32_t kPersistentConsumerRegs = 232;
/// fp8: the producer warpgroup's transposing warps need more than 24
/// registers; 40·128 + 2·232·128 = 168·384.
constexpr int32_t kFp8ProducerRegs = 40;
constexpr int32_t kFp8ConsumerRegs = 232;
/// Threads of the two consumer warpgroups.
constexpr int64_t kConsumerThreads = 256;

/// Byte offsets and wgmma descriptors of the kernel's shared tiles.
struct HopperSmem {
  int64_t d, dv, bq, bkv, stages;
  bool persistent;
  /// fp8: 1-byte elements, and a ring of Vᵀ tiles [Dv][bkv] after V's.
  bool fp8 = false;
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
  /// A persistent grid's current tile (u32) follows the tiles.
  int64_t total() const { return tiles() + (persistent ? 16 : 0); }
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
  // fp8: the descale tensors (f32 [B, Hkv]) and the i32 view of shared
  // memory the V transpose moves words through.
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
  BlockMaskLine keyLine; // the query block's key blocks
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
  /// Columns of a `cols`-element tile as counted by the 16-bit TMA boxes and
  /// descriptor steps (fp8 rows are half as many bytes).
  int64_t boxCols(int64_t cols) const { return fp8() ? cols / 2 : cols; }
  /// The Vᵀ full barrier for fp8, V's own otherwise: what P·V waits for.
  int64_t pvFull() const { return fp8() ? bars.vtFull() : bars.vFull(); }

  Value i64(int64_t v) {
    return arith::ConstantOp::create(b, loc, b.getI64IntegerAttr(v));
  }
  Value eq(Value x, Value y) {
    return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, x, y);
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
  void setBlockSparseTile(Value qBlock);
  /// Block-sparse: the key tile (index) of ring iteration `it` (index).
  Value listedKeyTile(Value it);
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
    RowKeyBounds bounds;
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
                               bool masked, Value sStruct, int64_t keys,
                               SoftmaxState &state, Value alpha[2],
                               Value iteration);
  /// P as A registers (Wgmma.h). Packing happens only once no wgmma is in
  /// flight: registers of a later wgmma defined while one runs make ptxas
  /// serialise them (C7513).
  SmallVector<Value> packP(ArrayRef<Value> s);
  /// Whether the score_mod is evaluated at each lane's first row's query
  /// (a query-additive mod, attn::scoreModQueryAdditive): its per-key terms
  /// are then shared by the lane's two rows.
  bool queryAnchored() const {
    return plan.spec.scoreMod &&
           attn::scoreModQueryAdditive(*plan.spec.scoreMod);
  }
  /// The K/V ring slot and full-barrier parity of ring iteration `it` of
  /// this tile (the CTA's ringBase + it).
  Value ringStage(Value it);
  Value ringParity(Value it);
  /// Ping-pong: consumer c issues its GEMMs after `bar.sync 1 + c` and then
  /// lets the other one issue (`bar.arrive 2 - c`), so one warpgroup's
  /// softmax runs under the other's GEMMs. Both consumers pass the same
  /// number of issue points (prologue, one per loop trip, epilogue);
  /// consumer 0's own arrival (emitConsumer) lets it go first. Ids are
  /// constants on each side of a branch.
  void perConsumer(const ConsumerState &t, StringRef op, int64_t id0,
                   int64_t id1);
  void turnBegin(const ConsumerState &t);
  void turnEnd(const ConsumerState &t);
  /// On a persistent grid the producer refills Q for the next tile once
  /// every consumer thread is past its last Q·Kᵀ.
  void releaseQ();
  /// O ×= the factors f of its rows (a warp-uniform skip under the lazy
  /// rescale).
  SmallVector<Value> rescaleBy(Value f[2], SmallVector<Value> o);

  /// O (accumulator layout, unnormalised) → this consumer's rows of the Q
  /// tile → global memory in 16-byte row chunks; LSE by one lane per row.
  void emitSmemEpilogue(Value consumer, ValueRange acc, Value invSum[2],
                        Value lse[2], Value oMem, Value lseMem,
                        Value qRowsBase, Value oBase, Value rowBase);

  /// Descriptors of Q (this consumer's rows) and K(stage), per k16 step.
  SmallVector<Value> qkDescriptors(Value qRow0Bytes, Value stage);
  /// Descriptors of V(stage), per k16 step.
  SmallVector<Value> pvDescriptors(Value stage);
  /// S = Q·K(stage)ᵀ over the stage's first `keys` keys, issued on the
  /// tensor cores (not waited for).
  Value issueQK(ArrayRef<Value> descs, int64_t keys);
  /// acc += P·V(stage) issued with P in registers (not waited for).
  SmallVector<Value> issuePV(ArrayRef<Value> p, ArrayRef<Value> descs,
                             ArrayRef<Value> acc);
};
} // namespace

//===----------------------------------------------------------------------===//
// Shared memory, TMA and mbarriers
//===----------------------------------------------------------------------===//

Value HopperForward::descriptor(Value byteOffset, int64_t lbo) {
  return wgmmaDescriptor(kb, descBase, byteOffset, lbo);
}

void HopperForward::wait(int64_t barrier, Value stage, Value parity) {
  waitBarrier(kb, bars.group, barrier, stage, parity);
}

void HopperForward::arrive(int64_t barrier, Value stage) {
  arriveBarrier(kb, bars.group, barrier, stage);
}

void HopperForward::loadTile(Value map, int64_t rows, int64_t cols,
                             Value byteBase, Value row,
                             ArrayRef<Value> headBatch, int64_t fullBarrier,
                             Value stage) {
  tmaLoadTile(kb, bars.group, map, rows, cols, byteBase, row, headBatch,
              kb.add(stage, fullBarrier));
}

//===----------------------------------------------------------------------===//
// Producer: Q once, then K(j), V(j) into ring slot j mod stages
//===----------------------------------------------------------------------===//

void HopperForward::setTile(Value qBlock, Value headIdx, Value batchIdx) {
  head = headIdx;
  batch = batchIdx;
  // GQA: query head h reads key/value head h / (H / Hkv). The tensor maps
  // are 4-D (D, N, H, B) over the caller's strides, so TMA zero-fills rows
  // past Nq / Nk of each head.
  kvHead = arith::DivUIOp::create(
      b, loc, head, arith::DivUIOp::create(b, loc, heads, kvHeads));
  qBegin = kb.mul(qBlock, plan.blockQ);
  if (plan.blockSparse) {
    setBlockSparseTile(qBlock);
    return;
  }
  // The key blocks of the tiled loop (those that meet this tile's band).
  TileLoopInputs in{batch, head, qBlock, heads, kvHeads, boundNq, boundNk};
  in.cuSeqlensQ = cuSeqlensQ;
  in.cuSeqlensK = cuSeqlensK;
  in.windowLeft = plan.spec.windowLeftValue;
  in.windowRight = plan.spec.windowRightValue;
  std::tie(jBegin, jEnd) = loops.cloneTileRange(b, in);
}

void HopperForward::setBlockSparseTile(Value qBlock) {
  // Row (batch, head mod mask_heads) of the mask: mask_heads is 1 or H.
  BlockMaskLayout l =
      BlockMaskLayout::get(kb, kb.mul(batches, maskHeads), nq, nk);
  Value maskRow = kb.add(kb.mul(batch, maskHeads),
                         arith::RemUIOp::create(b, loc, head, maskHeads));
  // Its indices, unclamped, only misplace tiles, which TMA and the
  // mask_mod's clamped reads keep inside the tensors.
  keyLine = BlockMaskLine::read(
      kb, blockMask, l.fullKvCount, l.kvCount, l.fullKvIndex, l.kvIndex,
      kb.add(kb.mul(maskRow, l.queryBlocks), qBlock), l.keyBlocks);
  fullBlocks = keyLine.full;
  jBegin = kb.idx(0);
  jEnd = keyLine.count;
}

Value HopperForward::listedKeyTile(Value it) {
  return kb.toIndex(keyLine.blockAt(kb, it));
}

void HopperForward::setSequence(Value seq) {
  SequenceRows q = loadSequenceRows(b, loc, cuSeqlensQ, seq, boundNq);
  SequenceRows k = loadSequenceRows(b, loc, cuSeqlensK, seq, boundNk);
  seqStartQ = q.start;
  seqStartK = k.start;
  nq = q.length;
  nk = k.length;
}

void HopperForward::forEachTile(function_ref<void()> body) {
  if (!plan.persistent) { // the tile was set up in build()
    body();
    return;
  }
  // Tile t of a persistent grid: (batch, head) pair t / qBlocks, and a head's
  // query blocks from the last (the longest under a causal mask), so the
  // CTAs running at one time share one or two heads' K/V in L2 and the short
  // causal blocks fill the end. CTA x starts with tile x; whoever finishes
  // a tile takes the next from the counter (gridDim.x + its old value), so
  // the hardware's order of completion balances tiles of unequal length.
  // The producer thread fetches and publishes the tile in shared memory
  // before Q's arrival on "Q full" (release), the consumers read it after
  // their wait on "Q full" (acquire); a tile ≥ tiles ends both loops. The
  // tile state is 32-bit (the runtime caps the tile count below 2^31): it
  // stays live across the KV loop, where the consumers' registers are
  // tightest.
  Type i32 = b.getI32Type();
  Value qBlocks = kb.toI32(kb.ceilDiv(nq, plan.blockQ));
  Value heads32 = kb.toI32(heads);
  Value tiles = arith::MulIOp::create(
      b, loc, arith::MulIOp::create(b, loc, qBlocks, heads32),
      kb.toI32(batches));
  auto enter = [&](Value t, Value k32, Value g32) {
    tileIter = kb.toIndex(k32);
    ringBase = kb.toIndex(g32);
    ringBase32 = g32;
    Value bh = arith::DivUIOp::create(b, loc, t, qBlocks);
    Value qRev = arith::RemUIOp::create(b, loc, t, qBlocks);
    Value qBlock = arith::SubIOp::create(
        b, loc, arith::SubIOp::create(b, loc, qBlocks, qRev), kb.c32(1));
    setTile(kb.toIndex(qBlock),
            kb.toIndex(arith::RemUIOp::create(b, loc, bh, heads32)),
            kb.toIndex(arith::DivUIOp::create(b, loc, bh, heads32)));
  };
  Value slot = kb.idx(layout.tiles() / 4);
  auto nextRing = [&](Value g32) {
    return arith::AddIOp::create(b, loc, g32, kb.toI32(kb.sub(jEnd, jBegin)))
        .getResult();
  };

  if (!isConsumer) {
    // Producer: (tile, tiles done, ring slots used).
    Value first = kb.toI32(gpu::BlockIdOp::create(b, loc, gpu::Dimension::x));
    auto loop = scf::WhileOp::create(
        b, loc, TypeRange{i32, i32, i32},
        ValueRange{first, kb.c32(0), kb.c32(0)},
        [&](OpBuilder &, Location, ValueRange args) {
          Value more = arith::CmpIOp::create(
              b, loc, arith::CmpIPredicate::ult, args[0], tiles);
          scf::ConditionOp::create(b, loc, more, args);
        },
        [&](OpBuilder &, Location, ValueRange args) {
          enter(args[0], args[1], args[2]);
          publishTile = [&, t = args[0]] {
            memref::StoreOp::create(b, loc, t, tileSlot, ValueRange{slot});
          };
          body();
          // The last of the `tiles` fetches of a launch (values 0 ..
          // tiles - 1) puts the counter back to 0 for the next launch.
          Value old = LLVM::AtomicRMWOp::create(
              b, loc, LLVM::AtomicBinOp::add, tileCounter, kb.c32(1),
              LLVM::AtomicOrdering::monotonic);
          Value last = arith::CmpIOp::create(
              b, loc, arith::CmpIPredicate::eq, old,
              arith::SubIOp::create(b, loc, tiles, kb.c32(1)));
          {
            auto ifOp = scf::IfOp::create(b, loc, last, false);
            OpBuilder::InsertionGuard g(b);
            b.setInsertionPointToStart(&ifOp.getThenRegion().front());
            LLVM::StoreOp::create(b, loc, kb.c32(0), tileCounter);
          }
          Value next = arith::AddIOp::create(
              b, loc,
              kb.toI32(gpu::GridDimOp::create(b, loc, gpu::Dimension::x)), old);
          scf::YieldOp::create(
              b, loc,
              ValueRange{next,
                         arith::AddIOp::create(b, loc, args[1], kb.c32(1)),
                         nextRing(args[2])});
        });
    // The end: an empty tile behind the last Q, with no bytes to wait for.
    Value k32 = loop.getResult(1);
    wait(bars.qEmpty(), kb.idx(0), parityOf(kb.add(kb.toIndex(k32), 1)));
    memref::StoreOp::create(b, loc, loop.getResult(0), tileSlot,
                            ValueRange{slot});
    arrive(bars.qFull(), kb.idx(0));
    return;
  }
  // Consumers: (tiles done, ring slots used); the tile comes with its Q.
  scf::WhileOp::create(
      b, loc, TypeRange{i32, i32, i32}, ValueRange{kb.c32(0), kb.c32(0)},
      [&](OpBuilder &, Location, ValueRange args) {
        wait(bars.qFull(), kb.idx(0), parityOf(kb.toIndex(args[0])));
        Value t = memref::LoadOp::create(b, loc, tileSlot, ValueRange{slot});
        Value more =
            arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, t, tiles);
        scf::ConditionOp::create(b, loc, more, ValueRange{t, args[0], args[1]});
      },
      [&](OpBuilder &, Location, ValueRange args) {
        enter(args[0], args[1], args[2]);
        body();
        scf::YieldOp::create(
            b, loc,
            ValueRange{arith::AddIOp::create(b, loc, args[1], kb.c32(1)),
                       nextRing(args[2])});
      });
}

void HopperForward::emitProducer() {
  // The maps are kernel parameters: fetched ahead of the first loads, with
  // no proxy fence (nothing writes them during the grid).
  for (Value map : {qMap, kMap, vMap})
    prefetchTensorMap(kb, map);
  forEachTile([&] { emitProducerTile(); });
}

void HopperForward::emitProducerTile() {
  const int64_t bkv = plan.blockKV;
  // The key loop counts in i32: a persistent producer runs in 24 registers.
  Value j0 = kb.toI32(jBegin), j1 = kb.toI32(jEnd);
  Value kvHead32 = kb.toI32(kvHead), batch32 = kb.toI32(batch);
  Value n = arith::SubIOp::create(b, loc, j1, j0); // ring iterations
  // Ring iteration i of this tile reads key tile keyTileOf(i) (i32) into
  // slot (ringBase + i) mod stages once it is free. A fresh barrier passes a
  // wait on the parity before its first phase, so round 0 finds every slot
  // empty.
  auto keyTileOf = [&](Value i) -> Value {
    if (plan.blockSparse)
      return kb.toI32(listedKeyTile(kb.toIndex(i)));
    if (!raggedFirst())
      return arith::AddIOp::create(b, loc, j0, i);
    // j0 - 1 + (i == 0 ? n : i): n is live as the loop bound anyway.
    Value isFirst = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                                          i, kb.c32(0));
    return arith::AddIOp::create(
        b, loc, arith::SelectOp::create(b, loc, isFirst, n, i),
        arith::SubIOp::create(b, loc, j0, kb.c32(1)));
  };
  auto loadKV = [&](Value i, bool isK) {
    Value it = arith::AddIOp::create(b, loc, ringBase32, i);
    Value stage =
        kb.toIndex(arith::RemUIOp::create(b, loc, it, kb.c32(layout.stages)));
    Value round = arith::DivUIOp::create(b, loc, it, kb.c32(layout.stages));
    Value parity = arith::TruncIOp::create(
        b, loc, b.getI1Type(), arith::AddIOp::create(b, loc, round, kb.c32(1)));
    wait(isK ? bars.kEmpty() : bars.vEmpty(), stage, parity);
    int64_t bytes = isK ? layout.kBytes() : layout.vBytes();
    loadTile(isK ? kMap : vMap, bkv,
             boxCols(isK ? plan.headDim : plan.headDimV),
             kb.add(kb.mul(stage, bytes), isK ? layout.kBase() : layout.vBase()),
             packedRow(seqStartK, kb.toIndex(arith::MulIOp::create(
                                      b, loc, keyTileOf(i), kb.c32(bkv)))),
             {kb.toIndex(kvHead32), tmaBatch(kb.toIndex(batch32))},
             isK ? bars.kFull() : bars.vFull(), stage);
  };
  auto loadQ = [&] {
    loadTile(qMap, plan.blockQ, boxCols(plan.headDim), kb.idx(0),
             packedRow(seqStartQ, qBegin), {head, tmaBatch(batch)},
             bars.qFull(), kb.idx(0));
  };
  auto loadFrom = [&](int64_t from) {
    auto loop = scf::ForOp::create(b, loc, kb.c32(from), n, kb.c32(1));
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(loop.getBody());
    loadKV(loop.getInductionVar(), /*isK=*/true);
    loadKV(loop.getInductionVar(), /*isK=*/false);
  };
  if (!plan.persistent) {
    loadQ();
    loadFrom(0);
    return;
  }
  // The first K tile goes ahead of Q: its slot frees at the previous tile's
  // second-to-last Q·Kᵀ, Q's buffer at its last; the first V after Q.
  Value any =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, j0, j1);
  auto ifAny = [&](function_ref<void()> fn) {
    auto ifOp = scf::IfOp::create(b, loc, any, false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&ifOp.getThenRegion().front());
    fn();
  };
  ifAny([&] { loadKV(kb.c32(0), /*isK=*/true); });
  wait(bars.qEmpty(), kb.idx(0), parityOf(kb.add(tileIter, 1)));
  publishTile();
  loadQ();
  ifAny([&] {
    loadKV(kb.c32(0), /*isK=*/false);
    loadFrom(1);
  });
}

void HopperForward::emitTransposer() {
  // Ring iteration i: V(i) lands in slot i mod stages (its full barrier),
  // Vᵀ(i) is written to the same slot of the Vᵀ ring. The slot is free: the
  // producer refilled V only after the consumers' P·V of the previous round
  // released it (V empty), which came after that round's Vᵀ full.
  const BarrierRing ring{layout.stages};
  auto loop = scf::ForOp::create(b, loc, kb.idx(0), kb.sub(jEnd, jBegin),
                                 kb.idx(1));
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(loop.getBody());
  Value it = loop.getInductionVar();
  Value stage = ring.slot(kb, it);
  wait(bars.vFull(), stage, ring.fullParity(kb, it));
  transposeVTile(kb, kb.add(kb.mul(stage, layout.vBytes()), layout.vBase()),
                 kb.add(kb.mul(stage, layout.vtBytes()), layout.vtBase()),
                 plan.blockKV, plan.headDimV);
  // Vᵀ is read next by wgmma (the async proxy).
  NVVM::FenceProxyOp::create(
      b, loc, NVVM::ProxyKind::async_shared,
      NVVM::SharedSpaceAttr::get(b.getContext(), NVVM::SharedSpace::shared_cta));
  arrive(bars.vtFull(), stage);
}

//===----------------------------------------------------------------------===//
// Consumers
//===----------------------------------------------------------------------===//

SmallVector<Value> HopperForward::qkDescriptors(Value qRow0Bytes,
                                                Value stage) {
  const int64_t bkv = plan.blockKV;
  Value kStage = kb.add(kb.mul(stage, layout.kBytes()), layout.kBase());
  SmallVector<Value> descs;
  // 32 B per k step: k16 of 16-bit or k32 of fp8 elements.
  for (int64_t ks = 0; ks < boxCols(plan.headDim) / 16; ++ks) {
    int64_t slab = ks / 4, inSlab = (ks % 4) * 32;
    descs.push_back(descriptor(
        kb.add(qRow0Bytes, slab * plan.blockQ * kSlabRowBytes + inSlab), 16));
    descs.push_back(
        descriptor(kb.add(kStage, slab * bkv * kSlabRowBytes + inSlab), 16));
  }
  return descs;
}

SmallVector<Value> HopperForward::pvDescriptors(Value stage) {
  const int64_t bkv = plan.blockKV;
  if (fp8()) { // K-major Vᵀ: +32 B per k32 step of its 128 B rows, a slab
               // of Dv rows per 128 keys
    Value vtStage = kb.add(kb.mul(stage, layout.vtBytes()), layout.vtBase());
    SmallVector<Value> descs;
    for (int64_t kk = 0; kk < bkv / 32; ++kk)
      descs.push_back(descriptor(
          kb.add(vtStage, (kk / 4) * plan.headDimV * kSlabRowBytes +
                              (kk % 4) * 32),
          16));
    return descs;
  }
  Value vStage = kb.add(kb.mul(stage, layout.vBytes()), layout.vBase());
  SmallVector<Value> descs;
  for (int64_t kk = 0; kk < bkv / 16; ++kk)
    descs.push_back(descriptor(kb.add(vStage, kk * 16 * kSlabRowBytes),
                               bkv * kSlabRowBytes));
  return descs;
}

Value HopperForward::issueQK(ArrayRef<Value> descs, int64_t keys) {
  SmallVector<Value> q, k;
  for (int64_t ks = 0; ks < static_cast<int64_t>(descs.size()) / 2; ++ks) {
    q.push_back(descs[2 * ks]);
    k.push_back(descs[2 * ks + 1]);
  }
  if (fp8())
    return issueWgmmaSharedFp8(kb, keys, q, k);
  return issueWgmmaShared(kb, keys, q, k, NVVM::MMALayout::row,
                          NVVM::MMALayout::col);
}

SmallVector<Value> HopperForward::issuePV(ArrayRef<Value> p,
                                          ArrayRef<Value> descs,
                                          ArrayRef<Value> acc) {
  return issueWgmmaRegisterA(kb, p, descs, acc);
}

void HopperForward::emitConsumer(Value consumer, Value oMem, Value lseMem,
                                 Value scale) {
  // Ping-pong: consumer 0's own arrival lets it issue first (see
  // emitConsumerTile); once per CTA, as every tile passes the same number
  // of turns in both consumers.
  if (plan.schedule.pingPong) {
    auto ifOp = scf::IfOp::create(b, loc, eq(consumer, kb.idx(0)),
                                  /*withElseRegion=*/false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&ifOp.getThenRegion().front());
    namedBarrier(b, loc, "bar.arrive", 1, kConsumerThreads);
  }
  isConsumer = true;
  forEachTile([&] { emitConsumerTile(consumer, oMem, lseMem, scale); });
}

HopperForward::ConsumerState HopperForward::beginConsumerTile(Value consumer,
                                                             Value scale) {
  ConsumerState t;
  t.consumer = consumer;
  Value warpInGroup = kb.remui(kb.warp, 4);
  t.rowBase = kb.add(kb.mul(consumer, kRowsPerConsumer),
                     kb.mul(warpInGroup, 16)); // this warp's rows
  t.qRow0 = kb.add(qBegin, kb.mul(consumer, kRowsPerConsumer));
  t.qRow0Bytes = kb.mul(consumer, kRowsPerConsumer * kSlabRowBytes);
  // fp8: S of the dequantised inputs is S·dq·dk, and O takes dv at the end.
  if (fp8()) {
    Value at = kb.add(kb.mul(batch, kvHeads), kvHead);
    auto load = [&](Value mem) {
      return memref::LoadOp::create(b, loc, mem, ValueRange{at}).getResult();
    };
    scale = arith::MulFOp::create(
        b, loc, scale,
        arith::MulFOp::create(b, loc, load(descaleQ), load(descaleK)));
    t.oDescale = load(descaleV);
  }
  t.scale = scale;
  t.scaleLog2 = softmaxScaleLog2(kb, scale);
  t.bounds = rowKeyBounds(kb, {batch, head, qBegin, Value(), nq, nk},
                          t.rowBase, t.qRow0, kRowsPerConsumer);
  t.isFirst = eq(consumer, kb.idx(0));
  return t;
}

SmallVector<Value> HopperForward::scoreStep(const ConsumerState &t,
                                            Value keyTile, bool masked,
                                            Value sStruct, int64_t keys,
                                            SoftmaxState &state,
                                            Value alpha[2], Value iteration) {
  const int64_t bkv = plan.blockKV;
  SmallVector<Value> s =
      fenceOperands(b, loc, unpackStruct(b, loc, sStruct, keys / 2));
  attn::ScorePosition tile{batch, head, qBegin, Value(), nq, nk};
  if (plan.spec.scoreMod)
    applyScoreMod(kb, s, tile, t.rowBase, kb.mul(keyTile, bkv), t.scale,
                  queryAnchored());
  if (plan.blockSparse) {
    Value maskKey = kb.opaqueIndex(kb.mul(keyTile, bkv));
    s = kb.maskUnlessInside(
        kb.lt(iteration, fullBlocks), s, [&](SmallVector<Value> &partial) {
          applyMaskMod(kb, partial, tile, t.rowBase, kb.mul(keyTile, bkv));
          maskScores(kb, partial, t.bounds, maskKey);
        });
  } else {
    applyMaskMod(kb, s, tile, t.rowBase, kb.mul(keyTile, bkv));
  }
  if (masked && !plan.blockSparse) {
    Value maskKey = kb.opaqueIndex(kb.mul(keyTile, bkv));
    s = kb.maskUnlessInside(tileInside(kb, t.bounds, maskKey, keys), s,
                            [&](SmallVector<Value> &masked) {
                              maskScores(kb, masked, t.bounds, maskKey);
                            });
  }
  SmallVector<Value> unit(4, kb.f32(1.0));
  onlineSoftmaxUpdate(kb, s, unit, state, t.scaleLog2,
                      plan.schedule.lazyRescale ? kLazyRescaleLog2 : 0.0);
  alpha[0] = unit[0];
  alpha[1] = unit[2];
  return s;
}

SmallVector<Value> HopperForward::packP(ArrayRef<Value> s) {
  return fp8() ? packFp8A(kb, s) : accumulatorToWgmmaA(kb, s);
}

Value HopperForward::ringStage(Value it) {
  return BarrierRing{layout.stages}.slot(kb, kb.add(ringBase, it));
}

Value HopperForward::ringParity(Value it) {
  return BarrierRing{layout.stages}.fullParity(kb, kb.add(ringBase, it));
}

void HopperForward::perConsumer(const ConsumerState &t, StringRef op,
                                int64_t id0, int64_t id1) {
  auto ifOp = scf::IfOp::create(b, loc, t.isFirst, /*withElseRegion=*/true);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(&ifOp.getThenRegion().front());
  namedBarrier(b, loc, op, id0, kConsumerThreads);
  b.setInsertionPointToStart(&ifOp.getElseRegion().front());
  namedBarrier(b, loc, op, id1, kConsumerThreads);
}

void HopperForward::turnBegin(const ConsumerState &t) {
  if (plan.schedule.pingPong)
    perConsumer(t, "bar.sync", 1, 2);
}

void HopperForward::turnEnd(const ConsumerState &t) {
  if (plan.schedule.pingPong)
    perConsumer(t, "bar.arrive", 2, 1);
}

void HopperForward::releaseQ() {
  if (plan.persistent)
    arrive(bars.qEmpty(), kb.idx(0));
}

SmallVector<Value> HopperForward::rescaleBy(Value f[2], SmallVector<Value> o) {
  const int64_t accN = plan.headDimV / 2;
  auto mul = [&](SmallVector<Value> &x) {
    for (int64_t n = 0; n < accN / 4; ++n)
      for (int64_t i = 0; i < 4; ++i)
        x[n * 4 + i] = arith::MulFOp::create(b, loc, x[n * 4 + i], f[i / 2]);
  };
  if (plan.schedule.lazyRescale)
    return rescaleUnlessUnit(f, o, mul);
  mul(o);
  return o;
}

SmallVector<Value> HopperForward::emitFirstKeyTile(const ConsumerState &t,
                                                   ArrayRef<Value> init) {
  // The first key tile's S and softmax; no P·V yet. Without a mask it is
  // the last tile, ragged unless block_kv divides Nk: Q·Kᵀ and the softmax
  // run on the multiple of 64 keys that covers it and P is 0 past them (V's
  // rows past Nk are TMA's zeros).
  const int64_t bkv = plan.blockKV, sN = bkv / 2;
  const bool ragged = raggedFirst();
  Value zero = kb.idx(0), stage0 = ringStage(zero);
  wait(bars.kFull(), stage0, ringParity(zero));
  SmallVector<Value> qk0 = qkDescriptors(t.qRow0Bytes, stage0);
  Value firstTile = plan.blockSparse ? listedKeyTile(zero)
                    : ragged         ? kb.sub(jEnd, kb.idx(1))
                                     : jBegin;
  auto firstWidth = [&](int64_t keys) {
    turnBegin(t);
    NVVM::WgmmaFenceAlignedOp::create(b, loc);
    Value s0 = issueQK(qk0, keys);
    NVVM::WgmmaGroupSyncAlignedOp::create(b, loc);
    turnEnd(t);
    NVVM::WgmmaWaitGroupSyncOp::create(b, loc, 0);
    arrive(bars.kEmpty(), stage0);
    SoftmaxState st{{init[0], init[1]}, {init[2], init[3]}};
    Value alpha[2];
    SmallVector<Value> pF32 =
        scoreStep(t, firstTile, /*masked=*/true, s0, keys, st, alpha, zero);
    pF32.resize(sN, kb.f32(0.0));
    SmallVector<Value> out{st.rowMax[0], st.rowMax[1], st.rowSum[0],
                           st.rowSum[1]};
    llvm::append_range(out, packP(pF32));
    return out;
  };
  // One branch per width, uniform across the CTA (both consumers pass the
  // same turns).
  SmallVector<int64_t> widths;
  for (int64_t w = kSlabCols; ragged && w < bkv; w += kSlabCols)
    widths.push_back(w);
  widths.push_back(bkv);
  Value ragKeys = ragged ? kb.sub(nk, kb.mul(firstTile, bkv)) : Value();
  SmallVector<Type> firstTypes(4, b.getF32Type());
  firstTypes.append(fp8() ? sN / 4 : sN / 2, b.getI32Type()); // packed P
  std::function<SmallVector<Value>(size_t)> emitWidths =
      [&](size_t i) -> SmallVector<Value> {
    if (i + 1 == widths.size())
      return firstWidth(widths[i]);
    Value fits = kb.lt(ragKeys, kb.idx(widths[i] + 1));
    auto ifOp = scf::IfOp::create(b, loc, firstTypes, fits, true);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&ifOp.getThenRegion().front());
    scf::YieldOp::create(b, loc, firstWidth(widths[i]));
    b.setInsertionPointToStart(&ifOp.getElseRegion().front());
    scf::YieldOp::create(b, loc, emitWidths(i + 1));
    return SmallVector<Value>(ifOp.getResults());
  };
  return emitWidths(0);
}

void HopperForward::emitKeyTile(const ConsumerState &t, scf::ForOp loop,
                                int64_t pEnd) {
  // S(j) and P·V(j-1) in flight together.
  const int64_t bkv = plan.blockKV, accN = plan.headDimV / 2;
  const bool ragged = raggedFirst(), inTurn = rescaleInTurn();
  Value j = loop.getInductionVar();
  ValueRange args = loop.getRegionIterArgs();
  SoftmaxState st{{args[0], args[1]}, {args[2], args[3]}};
  SmallVector<Value> acc(args.begin() + 4, args.begin() + 4 + accN);
  SmallVector<Value> p(args.begin() + 4 + accN,
                       args.begin() + (args.size() - pEnd));
  Value it = kb.sub(j, jBegin), prev = kb.sub(it, kb.idx(1));
  Value stage = ringStage(it), prevStage = ringStage(prev);

  // Waits and descriptors come before wgmma.fence: a wait loop or a
  // descriptor computed inside the issue sequence makes ptxas re-fence and
  // serialise the wgmmas (C7519, C7513).
  wait(bars.kFull(), stage, ringParity(it));
  wait(pvFull(), prevStage, ringParity(prev));
  SmallVector<Value> qk = qkDescriptors(t.qRow0Bytes, stage);
  SmallVector<Value> pv = pvDescriptors(prevStage);
  turnBegin(t);
  NVVM::WgmmaFenceAlignedOp::create(b, loc);
  Value s = issueQK(qk, bkv);
  NVVM::WgmmaGroupSyncAlignedOp::create(b, loc);
  if (inTurn) {
    // S(j) runs while O takes the factors of P(j-1)'s tile.
    Value f[2] = {args[args.size() - 2], args[args.size() - 1]};
    acc = rescaleBy(f, acc);
    NVVM::WgmmaFenceAlignedOp::create(b, loc);
  }
  SmallVector<Value> accNext = issuePV(p, pv, acc);
  NVVM::WgmmaGroupSyncAlignedOp::create(b, loc);
  turnEnd(t);
  NVVM::WgmmaWaitGroupSyncOp::create(b, loc, 1); // S(j) done
  arrive(bars.kEmpty(), stage);
  // Ragged first, iteration j reads key tile j - 1 (raggedFirst()).
  Value keyTile = plan.blockSparse ? listedKeyTile(it)
                  : ragged && (plan.spec.scoreMod || plan.spec.maskMod)
                      ? kb.sub(j, kb.idx(1))
                      : j;
  Value a[2];
  SmallVector<Value> pF32 =
      scoreStep(t, keyTile, /*masked=*/!ragged, s, bkv, st, a, it);
  NVVM::WgmmaWaitGroupSyncOp::create(b, loc, 0); // P·V(j-1) done
  arrive(bars.vEmpty(), prevStage);
  accNext = fenceOperands(b, loc, accNext);
  SmallVector<Value> pNext = packP(fenceOperands(b, loc, pF32));
  if (!inTurn)
    accNext = rescaleBy(a, accNext);
  SmallVector<Value> yield{st.rowMax[0], st.rowMax[1], st.rowSum[0],
                           st.rowSum[1]};
  yield.append(accNext);
  yield.append(pNext);
  if (inTurn)
    yield.append({a[0], a[1]});
  scf::YieldOp::create(b, loc, yield);
}

SmallVector<Value> HopperForward::emitLastPV(const ConsumerState &t,
                                             ValueRange res, int64_t pEnd) {
  // P·V of the last tile.
  const int64_t accN = plan.headDimV / 2;
  releaseQ();
  SmallVector<Value> acc(res.begin() + 4, res.begin() + 4 + accN);
  SmallVector<Value> p(res.begin() + 4 + accN,
                       res.begin() + (res.size() - pEnd));
  if (rescaleInTurn()) {
    Value f[2] = {res[res.size() - 2], res[res.size() - 1]};
    acc = rescaleBy(f, acc);
  }
  Value last = kb.sub(kb.sub(jEnd, jBegin), kb.idx(1));
  Value lastStage = ringStage(last);
  wait(pvFull(), lastStage, ringParity(last));
  SmallVector<Value> pvLast = pvDescriptors(lastStage);
  turnBegin(t);
  NVVM::WgmmaFenceAlignedOp::create(b, loc);
  acc = issuePV(p, pvLast, acc);
  NVVM::WgmmaGroupSyncAlignedOp::create(b, loc);
  turnEnd(t);
  NVVM::WgmmaWaitGroupSyncOp::create(b, loc, 0);
  arrive(bars.vEmpty(), lastStage);
  acc = fenceOperands(b, loc, acc);
  SmallVector<Value> out(res.begin(), res.begin() + 4);
  out.append(acc);
  return out;
}

SmallVector<Value> HopperForward::emitKeyTiles(const ConsumerState &t) {
  // (max, sum) per row, then O: the first key tile, the steady state, the
  // last P·V; (-inf, 0, 0) without any key tile.
  const int64_t accN = plan.headDimV / 2;
  SmallVector<Value> init{kb.negInf(), kb.negInf(), kb.f32(0), kb.f32(0)};
  init.append(accN, kb.f32(0));
  SmallVector<Type> resTypes(init.size(), b.getF32Type());
  auto any = scf::IfOp::create(b, loc, resTypes, kb.lt(jBegin, jEnd),
                               /*withElseRegion=*/true);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(&any.getElseRegion().front());
  releaseQ();
  scf::YieldOp::create(b, loc, init);

  b.setInsertionPointToStart(&any.getThenRegion().front());
  SmallVector<Value> first = emitFirstKeyTile(t, init);
  SmallVector<Value> carried(first.begin(), first.begin() + 4);
  carried.append(init.begin() + 4, init.end());
  carried.append(first.begin() + 4, first.end()); // P of the first tile
  // In-turn rescale: the factors of the tile whose P·V is issued next (1
  // before the first: O is 0).
  const bool inTurn = rescaleInTurn();
  if (inTurn)
    carried.append({kb.f32(1.0), kb.f32(1.0)});
  const int64_t pEnd = inTurn ? 2 : 0; // carried values after P
  auto loop = scf::ForOp::create(b, loc, kb.add(jBegin, 1), jEnd, kb.idx(1),
                                 carried);
  {
    OpBuilder::InsertionGuard g2(b);
    b.setInsertionPointToStart(loop.getBody());
    emitKeyTile(t, loop, pEnd);
  }
  scf::YieldOp::create(b, loc, emitLastPV(t, loop.getResults(), pEnd));
  return SmallVector<Value>(any.getResults());
}

void HopperForward::emitConsumerTile(Value consumer, Value oMem, Value lseMem,
                                     Value scale) {
  ConsumerState t = beginConsumerTile(consumer, scale);
  if (!plan.persistent) // (forEachTile waited for a persistent tile's Q)
    wait(bars.qFull(), kb.idx(0), parityOf(tileIter));
  SmallVector<Value> res = emitKeyTiles(t);
  emitOutput(t, res, oMem, lseMem);
}

void HopperForward::emitOutput(const ConsumerState &t, ArrayRef<Value> res,
                               Value oMem, Value lseMem) {
  // O = acc / l, LSE = ln2·(m + log2 l); empty rows give 0 and -inf.
  const int64_t dv = plan.headDimV;
  SoftmaxState state{{res[0], res[1]}, {res[2], res[3]}};
  Value invSum[2], lse[2];
  Value sink = sinksMem ? memref::LoadOp::create(b, loc, sinksMem,
                                                 ValueRange{head})
                              .getResult()
                        : Value();
  // A query-anchored mod's rows take their shift back (as
  // attn-gpu-anchor-score-mod does for the tile-level forward).
  Value shift[2];
  const Value *rowShift = nullptr;
  if (queryAnchored()) {
    scoreModRowShift(kb, {batch, head, qBegin, Value(), nq, nk}, t.rowBase,
                     t.scale, shift);
    rowShift = shift;
  }
  finalizeSoftmax(kb, state, invSum, lse, sink, rowShift);
  if (fp8())
    for (Value &f : invSum)
      f = arith::MulFOp::create(b, loc, f, t.oDescale);
  // LSE [B, H, Nq], or a varlen batch's [H, Tq] from the sequence's row;
  // O's rows likewise count from the sequence's first packed row.
  Value qRowsBase =
      seqStartQ ? kb.add(kb.mul(head, boundNq), seqStartQ)
                : kb.mul(kb.add(kb.mul(batch, heads), head), nq);
  Value oBase = seqStartQ ? oT.rowOffset(kb, oT.headBase(kb, kb.idx(0), head),
                                         seqStartQ)
                          : oT.headBase(kb, batch, head);
  // (A persistent grid's next Q may already be landing in the Q tile.)
  if (plan.schedule.smemEpilogue && !plan.persistent) {
    emitSmemEpilogue(t.consumer, ValueRange(res).drop_front(4), invSum, lse,
                     oMem, lseMem, qRowsBase, oBase, t.rowBase);
    return;
  }
  for (int64_t r = 0; r < 2; ++r) {
    Value row = kb.add(qBegin, kb.add(t.rowBase, kb.add(kb.groupId, r * 8)));
    auto ifOp = scf::IfOp::create(b, loc, kb.lt(row, nq), false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&ifOp.getThenRegion().front());
    Value rowOff = oT.rowOffset(kb, oBase, row);
    for (int64_t n = 0; n < dv / 8; ++n) {
      Value lo = arith::MulFOp::create(b, loc, res[4 + n * 4 + 2 * r], invSum[r]);
      Value hi =
          arith::MulFOp::create(b, loc, res[4 + n * 4 + 2 * r + 1], invSum[r]);
      Value col = kb.add(kb.mul(kb.threadInGroup, 2), n * 8);
      kb.storePair(kb.truncPair(lo, hi), oMem, kb.add(rowOff, col));
    }
    auto lseIf =
        scf::IfOp::create(b, loc, eq(kb.threadInGroup, kb.idx(0)), false);
    b.setInsertionPointToStart(&lseIf.getThenRegion().front());
    memref::StoreOp::create(b, loc, lse[r], lseMem,
                            ValueRange{kb.add(qRowsBase, row)});
  }
}

void HopperForward::emitSmemEpilogue(Value consumer, ValueRange acc,
                                     Value invSum[2], Value lse[2], Value oMem,
                                     Value lseMem, Value qRowsBase,
                                     Value oBase, Value rowBase) {
  const int64_t dv = plan.headDimV, bq = plan.blockQ;
  const int64_t slabBytes = bq * kSlabRowBytes;
  // The Q rows of this consumer are read only by its own wgmmas, all retired
  // here, so its O can take their place. Same 128 B swizzle as the TMA boxes
  // (16 B chunk c of row r at c ^ (r mod 8)): lanes g = 0..7 of one store hit
  // eight distinct chunks, so the 4-byte stores are conflict-free.
  Value rowL[2];
  for (int64_t r = 0; r < 2; ++r)
    rowL[r] = kb.add(rowBase, kb.add(kb.groupId, r * 8)); // row in 0..127
  Value laneBytes = kb.mul(kb.threadInGroup, 4);
  for (int64_t c8 = 0; c8 < 8; ++c8) {
    Value chunk = arith::XOrIOp::create(b, loc, kb.groupId, kb.idx(c8));
    Value inRow = kb.add(kb.mul(chunk, 16), laneBytes);
    for (int64_t n = c8; n < dv / 8; n += 8) {
      int64_t slab = n / 8;
      for (int64_t r = 0; r < 2; ++r) {
        Value lo = arith::MulFOp::create(b, loc, acc[n * 4 + 2 * r], invSum[r]);
        Value hi =
            arith::MulFOp::create(b, loc, acc[n * 4 + 2 * r + 1], invSum[r]);
        Value bytes = kb.add(kb.add(kb.mul(rowL[r], kSlabRowBytes), inRow),
                             slab * slabBytes);
        kb.storePair(kb.truncPair(lo, hi), kb.smem, kb.divui(bytes, 2));
      }
    }
  }
  for (int64_t r = 0; r < 2; ++r) {
    Value row = kb.add(qBegin, rowL[r]);
    auto lseIf = scf::IfOp::create(
        b, loc,
        arith::AndIOp::create(b, loc, eq(kb.threadInGroup, kb.idx(0)),
                              kb.lt(row, nq)),
        false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&lseIf.getThenRegion().front());
    memref::StoreOp::create(b, loc, lse[r], lseMem,
                            ValueRange{kb.add(qRowsBase, row)});
  }
  // Only this warpgroup's 128 threads meet (barriers 3 and 4).
  {
    auto ifOp = scf::IfOp::create(b, loc, eq(consumer, kb.idx(0)),
                                  /*withElseRegion=*/true);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&ifOp.getThenRegion().front());
    namedBarrier(b, loc, "bar.sync", 3, 128);
    b.setInsertionPointToStart(&ifOp.getElseRegion().front());
    namedBarrier(b, loc, "bar.sync", 4, 128);
  }
  // Each thread moves 16 B chunks: consecutive threads take consecutive
  // chunks of a row, so a warp writes whole 256 B rows.
  const int64_t chunksPerRow = dv / 8;
  const int64_t chunks = kRowsPerConsumer * chunksPerRow;
  Value t = kb.remui(kb.tid, 128);
  Value row0 = kb.mul(consumer, kRowsPerConsumer);
  auto vecTy = VectorType::get({8}, plan.elemType);
  for (int64_t k = 0; k < chunks / 128; ++k) {
    Value q = kb.add(t, k * 128);
    Value rowInWg = kb.divui(q, chunksPerRow);
    Value cc = kb.remui(q, chunksPerRow);
    Value r = kb.add(row0, rowInWg);
    Value swz = arith::XOrIOp::create(b, loc, kb.remui(cc, 8),
                                      kb.remui(rowInWg, 8));
    Value bytes = kb.add(kb.add(kb.mul(kb.divui(cc, 8), slabBytes),
                                kb.mul(r, kSlabRowBytes)),
                         kb.mul(swz, 16));
    Value v = vector::LoadOp::create(b, loc, vecTy, kb.smem,
                                     ValueRange{kb.divui(bytes, 2)},
                                     /*nontemporal=*/false,
                                     llvm::MaybeAlign(16));
    Value row = kb.add(qBegin, r);
    auto ifOp = scf::IfOp::create(b, loc, kb.lt(row, nq), false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&ifOp.getThenRegion().front());
    Value off = kb.add(oT.rowOffset(kb, oBase, row), kb.mul(cc, 8));
    vector::StoreOp::create(b, loc, v, oMem, ValueRange{off},
                            /*nontemporal=*/false, llvm::MaybeAlign(16));
  }
}

//===----------------------------------------------------------------------===//
// The kernel
//===----------------------------------------------------------------------===//

/// Applies `rescale` to `acc` unless every lane of the warp has α = 1 for
/// both its rows: under the lazy rescale most tiles leave every base alone,
/// and a warp-uniform branch then skips the accumulator's multiplies.
SmallVector<Value> HopperForward::rescaleUnlessUnit(
    Value alpha[2], ArrayRef<Value> acc,
    function_ref<void(SmallVector<Value> &)> rescale) {
  Value one = kb.f32(1.0);
  Value unit = arith::AndIOp::create(
      b, loc,
      arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, alpha[0], one),
      arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, alpha[1], one));
  Value allUnit = NVVM::VoteSyncOp::create(
      b, loc, b.getI1Type(),
      arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(-1)), unit,
      NVVM::VoteSyncKind::all);
  SmallVector<Type> types(acc.size(), b.getF32Type());
  auto ifOp = scf::IfOp::create(b, loc, types, allUnit, /*withElse=*/true);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&ifOp.getThenRegion().front());
    scf::YieldOp::create(b, loc, ValueRange(acc));
    b.setInsertionPointToStart(&ifOp.getElseRegion().front());
    SmallVector<Value> o(acc);
    rescale(o);
    scf::YieldOp::create(b, loc, o);
  }
  return SmallVector<Value>(ifOp.getResults());
}

void HopperForward::build(gpu::GPUModuleOp module, gpu::GPUFuncOp func,
                          const KernelParams &params) {
  Block &entry = func.getBody().front();
  auto arg = [&](unsigned i) { return entry.getArgument(i); };
  Value oMem = arg(3), lseMem = arg(4), scale = arg(10);
  kb.setupThreadIds();
  batches = kb.toIndex(arg(5));
  heads = kb.toIndex(arg(6));
  kvHeads = kb.toIndex(arg(7));
  nq = boundNq = kb.toIndex(arg(8));
  nk = boundNk = kb.toIndex(arg(9));
  if (plan.varlen) {
    cuSeqlensQ = arg(params.cuSeqlensParam);
    cuSeqlensK = arg(params.cuSeqlensParam + 1);
  }
  if (plan.blockSparse) {
    blockMask = arg(params.blockMaskParam);
    maskHeads = kb.toIndex(arg(params.blockMaskParam + 1));
  }
  qMap = tmaMap(kb, arg(11), plan.blockQ, /*rank=*/4);
  kMap = tmaMap(kb, arg(12), plan.blockKV, /*rank=*/4);
  vMap = tmaMap(kb, arg(13), plan.blockKV, /*rank=*/4);
  if (fp8()) { // (fp8 plans are never persistent: no tile counter)
    descaleQ = arg(14);
    descaleK = arg(15);
    descaleV = arg(16);
  }
  oT = stridedTensor(kb, oMem, params.strides(entry, 3));
  if (params.sinksParam >= 0)
    sinksMem = arg(params.sinksParam);

  // One tile per CTA: set up once for both roles (forEachTile).
  if (!plan.persistent) {
    tileIter = ringBase = kb.idx(0);
    ringBase32 = kb.c32(0);
    Value qBlock = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
    Value headIdx = gpu::BlockIdOp::create(b, loc, gpu::Dimension::y);
    Value batchIdx = gpu::BlockIdOp::create(b, loc, gpu::Dimension::z);
    if (plan.varlen) // (plans refuse a persistent varlen grid)
      setSequence(batchIdx);
    setTile(qBlock, headIdx, batchIdx);
  }

  // Typed as O's 16-bit elements (the epilogue's stores); fp8 tiles are
  // addressed in bytes through descriptors, TMA and 32-bit shared offsets.
  kb.smem = kb.sharedView(module, plan.outputElemType(), layout.total() / 2);
  if (plan.persistent) {
    tileCounter = arg(14);
    tileSlot = kb.sharedView(module, b.getI32Type(), layout.total() / 4);
  }
  descBase = wgmmaDescriptorBase(kb);

  bars.stages = layout.stages;
  bars.persistent = plan.persistent;
  bars.fp8 = fp8();
  bars.group = createBarrierGroup(kb, bars.count());
  Value isThread0 = eq(kb.tid, kb.idx(0));
  {
    auto ifOp = scf::IfOp::create(b, loc, isThread0, false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&ifOp.getThenRegion().front());
    // Full barriers complete on the producer's arrive + the TMA bytes; empty
    // barriers on every consumer thread's arrive.
    for (int64_t i = 0; i < bars.count(); ++i)
      initBarrier(kb, bars.group, i, bars.arrivals(i, kConsumerThreads));
  }
  gpu::BarrierOp::create(b, loc);

  OpBuilder::InsertionGuard whole(b);
  if (plan.varlen) {
    // The grid runs over the query blocks of the longest sequence: a CTA
    // whose block starts past its own sequence's end has nothing to do.
    auto active = scf::IfOp::create(b, loc, kb.lt(qBegin, nq), false);
    b.setInsertionPointToStart(&active.getThenRegion().front());
  }
  auto roles = ag::WarpSpecializeOp::build(
      b, loc,
      fp8()             ? kFp8ProducerRegs
      : plan.persistent ? kPersistentProducerRegs
                        : kProducerRegs,
      fp8()             ? kFp8ConsumerRegs
      : plan.persistent ? kPersistentConsumerRegs
                        : kConsumerRegs);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&roles.getProducerBlock());
    auto one = scf::IfOp::create(b, loc, isThread0, /*withElseRegion=*/fp8());
    b.setInsertionPointToStart(&one.getThenRegion().front());
    emitProducer();
    if (fp8()) {
      b.setInsertionPointToStart(&one.getElseRegion().front());
      auto transposer = scf::IfOp::create(
          b, loc,
          arith::CmpIOp::create(b, loc, arith::CmpIPredicate::uge, kb.warp,
                                kb.idx(1)),
          false);
      b.setInsertionPointToStart(&transposer.getThenRegion().front());
      emitTransposer();
    }

    b.setInsertionPointToStart(&roles.getConsumerBlock());
    emitConsumer(roles.getConsumerBlock().getArgument(0), oMem, lseMem,
                 scale);
  }
  b.setInsertionPointToEnd(&entry);
  gpu::ReturnOp::create(b, loc);
}

int64_t mlir::fa::wgmmaForwardSharedBytes(const KernelPlan &plan) {
  return HopperSmem{plan.headDim,  plan.headDimV, plan.blockQ,
                    plan.blockKV,  plan.stages,   plan.persistent,
                    plan.isFp8()}
      .total();
}

gpu::GPUFuncOp mlir::fa::buildForwardKernelWgmma(OpBuilder &b, Location loc,
                                                 gpu::GPUModuleOp module,
                                                 const KernelPlan &plan,
                                                 const TiledLoopNest &loops) {
  OpBuilder::InsertionGuard guard(b);
  // known_block_size gives the register cap at entry (.maxntid) that lets
  // setmaxnreg take effect.
  KernelParams params = forwardParams(b.getContext(), plan);
  auto func = createKernelFunc(b, loc, module, "fa_fwd_" + plan.tag(), params,
                               plan, wgmmaForwardSharedBytes(plan));
  KernelPlan bound =
      bindWindowParams(b, loc, plan, func.getBody().front(), params);
  KernelBuilder kb(b, loc, bound);
  HopperForward(kb,
                HopperSmem{plan.headDim, plan.headDimV, plan.blockQ,
                           plan.blockKV, plan.stages, plan.persistent,
                           plan.isFp8()},
                loops)
      .build(module, func, params);
  return func;
}
