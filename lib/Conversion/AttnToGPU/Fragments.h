//===- Fragments.h - registers, shared tiles, tensor-core ops ---*- C++ -*-===//
//
// The layout level of the GPU lowering. A warp's share of an mma.sync
// m16n8k16 is a handful of scalar SSA values (a "fragment"); shared tiles are
// row-padded regions of one dynamic shared buffer. Every lane-to-element map
// of the kernels lives here, so the mainloops read as tile algebra.
//
// m16n8k16 register layouts (g = lane / 4, t = lane % 4):
//   A (16×16, row):  a0 (g, 2t..2t+1)  a1 (g+8, 2t..)  a2 (g, 2t+8..)  a3 (g+8, 2t+8..)
//   B (16×8,  col):  b0 (k 2t..2t+1, n g)  b1 (k 2t+8.., n g)
//   C (16×8, f32):   c0,c1 (g, 2t..2t+1)   c2,c3 (g+8, 2t..2t+1)
//
//===----------------------------------------------------------------------===//

#ifndef FA_LIB_CONVERSION_ATTNTOGPU_FRAGMENTS_H
#define FA_LIB_CONVERSION_ATTNTOGPU_FRAGMENTS_H

#include "KernelParams.h"
#include "fa/Conversion/AttnToGPU.h"
#include "fa/Dialect/Attn/Transforms/OnlineSoftmaxMath.h"
#include "fa/Dialect/Attn/Transforms/Transforms.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <numeric>

namespace mlir::fa::gpu_lowering {

/// One inline PTX block (NVVM has no op for it): `text` names the result $0
/// when `result` is a type, then the operands. A side-effecting block stays
/// where it is and in order; a pure one LLVM may move, merge or drop.
Value inlinePtx(OpBuilder &b, Location loc, Type result, StringRef text,
                ValueRange operands, StringRef constraints,
                bool sideEffects = true);
/// A side-effecting block without a result (the bulk copies, semaphores,
/// barriers), clobbering memory unless `constraints` says otherwise.
void inlinePtx(OpBuilder &b, Location loc, StringRef text,
               ValueRange operands = {}, StringRef constraints = "~{memory}");

/// Static extent of the flat global memrefs of the ABI: the bare-pointer
/// calling convention needs static shapes; sizes come in as i32 params.
constexpr int64_t kFlatExtent = int64_t(1) << 40;

/// The ABI's flat global memref of element type `t`.
MemRefType flatMemRef(Type t);

/// Elements of `elemBytes` bytes that one aligned access of at most 16 bytes
/// moves within the rows of a contiguous matrix with `cols` columns: rows
/// start only gcd(cols, 16 / elemBytes) elements aligned (docs/ABI.md).
inline int64_t rowChunkElems(int64_t cols, int64_t elemBytes) {
  return std::gcd(cols, 16 / elemBytes);
}

/// A `gpu.func` kernel entry `name` at the end of `module` with the ABI's
/// attributes: `known_block_size` (plan.threads(); ptxas then caps registers
/// per thread, which `setmaxnreg` needs) and `fa.shared_bytes`. The builder
/// is left at the start of its body.
/// Its by-value tensor maps are listed in kGridConstantParamsAttr.
gpu::GPUFuncOp createKernelFunc(OpBuilder &b, Location loc,
                                gpu::GPUModuleOp module, StringRef name,
                                const KernelParams &params,
                                const KernelPlan &plan, int64_t sharedBytes);

/// A row-padded tile inside the dynamic shared buffer. It holds `cols`
/// columns of its global matrix (the row length there), followed by zeros up
/// to the next multiple of 16 so k16 / n16 steps never read stale data.
struct SharedTile {
  Value base;     // index: element offset of row 0 (may select a stage)
  int64_t rows;
  int64_t cols;
  int64_t stride; // elements between rows
  /// Chunk c (8 elements) of row r at chunk c xor (r mod 8); stride = cols,
  /// or 64 for 64-column slabs of rows × 64 (a TMA box's layout).
  bool swizzle = false;
  bool slabbed() const { return swizzle && stride == 64 && cols > 64; }
};

/// Registers per thread of the TMA decode kernel (KernelPlan::tma).
constexpr int32_t kTmaDecodeRegisters = 168;

class KernelBuilder;

/// A global [B, H, N, D] tensor addressed through the caller's strides
/// (elements, index; the last dimension's stride is 1): element (b, h, n, d)
/// is at b·batchStride + h·headStride + n·rowStride + d, 64-bit throughout.
struct StridedTensor {
  Value mem;
  Value batchStride, headStride, rowStride;

  /// The element offset of row 0 of head `head` of batch `batch`: the base
  /// every tile of that (batch, head) adds its rows to.
  Value headBase(KernelBuilder &kb, Value batch, Value head) const;
  /// The element offset of row `row` of the head at `headBase`.
  Value rowOffset(KernelBuilder &kb, Value headBase, Value row) const;
};

/// `mem` with the three i64 stride parameters `strides` (KernelParams).
StridedTensor stridedTensor(KernelBuilder &kb, Value mem,
                            const std::array<Value, 3> &strides);

/// Emits the index arithmetic, data movement and tensor-core ops of one
/// kernel; the mainloops are written against it.
class KernelBuilder {
public:
  KernelBuilder(OpBuilder &b, Location loc, const KernelPlan &plan)
      : b(b), loc(loc), plan(plan) {}

  OpBuilder &b;
  Location loc;
  const KernelPlan &plan;
  Value tid, warp, lane, groupId, threadInGroup; // index
  Value smem;                                    // memref<N x elem, 3>
  /// Threads that share a tile copy, `tid` counting them (0: the CTA's).
  int64_t copyThreads = 0;
  /// The boundary-tile dispatch of the mainloops: `scores` unchanged when
  /// `inside` holds (the tile lies wholly inside the mask), else the scores
  /// after `applyMask` edits them; one scf.if yielding the fragment values.
  SmallVector<Value>
  maskUnlessInside(Value inside, ValueRange scores,
                   function_ref<void(SmallVector<Value> &)> applyMask);


  // Scalars.
  Value idx(int64_t v);
  /// An i32 constant (loops that run in 32 bits to save registers).
  Value c32(int64_t v);
  Value f32(double v);
  Value add(Value x, Value y);
  Value sub(Value x, Value y);
  Value mul(Value x, Value y);
  Value mul(Value x, int64_t y) { return mul(x, idx(y)); }
  Value add(Value x, int64_t y) { return add(x, idx(y)); }
  /// The first of this lane's two columns (2t, 2t + 1) in the 8-column
  /// group of an m16n8 fragment that starts at column `first`.
  Value laneColumn(int64_t first) { return add(mul(threadInGroup, 2), first); }
  Value divui(Value x, int64_t y);
  Value remui(Value x, int64_t y);
  Value ceilDiv(Value x, int64_t y);
  /// Tiles [begin, end) of `tile` rows that meet the band [lo, hi) of a mask
  /// (attn::buildBlockRange, the passes' own loop bounds).
  std::pair<Value, Value> tileRange(std::pair<Value, Value> band, Value extent,
                                    int64_t tile);
  Value minsi(Value x, Value y);
  Value maxsi(Value x, Value y);
  Value lt(Value x, Value y);
  Value eq(Value x, Value y);
  Value select(Value c, Value x, Value y);
  Value toIndex(Value i32);
  Value toI32(Value index);
  /// `v` through a side-effecting `mov` (kOpaqueMove), so LLVM cannot
  /// reason across it.
  Value opaqueIndex(Value v);
  static constexpr llvm::StringLiteral kOpaqueMove = "mov.u32 $0, $1;";

  /// Thread, warp and lane ids; `threads` is the CTA size.
  void setupThreadIds();
  /// The warp and lane ids of thread id `tid`, built at the insertion point.
  void deriveThreadIds(Value tid);
  /// The same ids derived from an opaque copy of the thread id: inside a
  /// loop body, LLVM then cannot hoist lane-dependent addresses out of the
  /// loop (where they would hold 64-bit registers for its whole length).
  void setupOpaqueThreadIds();
  struct ThreadIds {
    Value tid, warp, lane, groupId, threadInGroup;
  };
  ThreadIds threadIds() const {
    return {tid, warp, lane, groupId, threadInGroup};
  }
  void setThreadIds(const ThreadIds &ids) {
    tid = ids.tid;
    warp = ids.warp;
    lane = ids.lane;
    groupId = ids.groupId;
    threadInGroup = ids.threadInGroup;
  }
  /// The dynamic shared buffer as memref<elems x elem, 3>, backed by a
  /// size-0 public global so PTX gets a real `.extern .shared`.
  void setupSharedMemory(gpu::GPUModuleOp module, int64_t elems);
  /// The same dynamic shared buffer as memref<elems x elemType, 3> (every
  /// `.extern .shared` array starts at the buffer's base).
  Value sharedView(gpu::GPUModuleOp module, Type elemType, int64_t elems);

  /// The global-space address (index) of element 0 of a flat global memref,
  /// for inline PTX that takes addresses.
  Value globalAddress(Value mem);
  /// `red.global.add.v2.f32 [addr + byteOffset], {lo, hi}` for two values
  /// (one 8-byte reduction instead of two scalar atomics; needs PTX 8.1,
  /// sm_90), `red.global.add.f32` for one.
  void redAddF32(Value addr, int64_t byteOffset, ValueRange values);

  /// Copies rows [rowBegin, rowBegin + tile.rows) of a row-major global
  /// matrix (row length `tile.cols`, rows at or past `rowLimit` and the
  /// columns padding `tile.cols` to a multiple of 16 zero-filled) into `tile`;
  /// all threads take part. Copies are as wide as the rows' alignment allows
  /// (rowChunkElems): 16, 8 or 4-byte cp.async, or 2-byte loads and shared
  /// stores for odd `tile.cols`. Commits the copies as one cp.async group.
  /// Global rows are `rowStride` elements apart (index; `tile.cols` when
  /// null), a multiple of the chunk width (the runtime checks strides).
  void copyTileAsync(Value gmem, Value gBase, Value rowBegin, Value rowLimit,
                     const SharedTile &tile, Value rowStride = {});
  /// A gathered tile row: `row` (index); `step`, `row` minus the row of
  /// the previous call (a constant > 0), or 0 where unrelated: a source may
  /// then carry what it derived for the previous row (a page split). In a
  /// blocked copy, the thread copies `run` consecutive rows (a power of
  /// two) from a multiple of `run`, and `row` is the `offset`-th of them.
  struct GatherRow {
    Value row;
    int64_t step = 0, offset = 0, run = 1;
  };
  /// The global element offset of a gathered tile row and whether it is
  /// copied (i1).
  using RowSource = function_ref<std::pair<Value, Value>(const GatherRow &)>;
  /// copyTileAsync of gathered rows: tile row r starts at element
  /// `rowSource(r).first` of gmem when `rowSource(r).second` (i1) holds,
  /// else it is zeros (packed GQA's Q tile, in the caller's layout).
  /// `blocked`: where the layout allows, each thread copies a run of
  /// consecutive rows (GatherRow::run > 1) rather than rows a pass apart.
  void copyGatheredTileAsync(Value gmem, RowSource rowSource,
                             const SharedTile &tile, bool blocked = false);
  /// The f32 row statistics (LSE, Delta) of the `rows` query rows from
  /// `qBegin` of the head whose rows start at `qRowsBase`, into `stats` at
  /// `dst()` (evaluated once, per thread): threads [0, rows) copy LSE,
  /// [rows, 2·rows) Delta, 4-byte cp.async; rows at or past `nq` read zero.
  /// Does not commit.
  void copyRowStatsAsync(Value stats, Value lseMem, Value deltaMem,
                         Value qRowsBase, Value qBegin, Value nq, int64_t rows,
                         function_ref<Value()> dst);
  /// The same rows into a 128 B-swizzled tile at element offset `base`
  /// (Wgmma.h): 64-column slabs of `rows` rows, 16 B chunk c of row r at
  /// chunk c ^ (r mod 8); `cols` a multiple of 8. Commits the copies as one
  /// cp.async group.
  /// Global rows are `rowStride` elements apart (`cols` when null).
  void copyTileAsyncSwizzled(Value gmem, Value gBase, Value rowBegin,
                             Value rowLimit, int64_t rows, int64_t cols,
                             Value base, Value rowStride = {});
  /// Commits the cp.async copies issued since the last commit as one group.
  /// (cp.async.commit_group itself, not nvgpu's token form: a group whose
  /// copies are all predicated has no token to name.)
  void commitAsync();
  /// Waits until at most `pending` cp.async groups are in flight.
  void waitAsync(int64_t pending);

  /// ldmatrix .x4 at element offset `offset` of the shared buffer: four 8×8
  /// matrices addressed by lanes 0-7, 8-15, 16-23, 24-31, as packed registers.
  SmallVector<Value, 4> ldmatrixX4(Value offset, bool transpose);
  /// The element offset of (row, col) of `t` (its swizzle applied).
  Value tileOffset(const SharedTile &t, Value row, Value col);
  /// A fragment (16 rows × mmaK k) of a row-major tile at (row0, k0).
  SmallVector<Value, 4> loadA(const SharedTile &t, Value row0, int64_t k0);
  /// B fragments of two n8 tiles from a tile stored n-major (K for Q·Kᵀ):
  /// rows n0..n0+15, k0..k0+mmaK-1 → {b0,b1} of n-tile 0, {b0,b1} of n-tile
  /// 1. (f32: each lane register holds one f32; 16-bit types, two.)
  SmallVector<Value, 4> loadBFromNMajor(const SharedTile &t, Value n0,
                                        int64_t k0);
  /// B fragments of two n8 tiles from a tile stored k-major (V for P·V):
  /// rows k0..k0+15, columns n0..n0+15, through ldmatrix .trans.
  SmallVector<Value, 4> loadBFromKMajor(const SharedTile &t, int64_t k0,
                                        Value n0);

  /// A fragment (16 rows × 16 k) of a tile stored transposed ([k][row]),
  /// through ldmatrix .trans: rows row0..row0+15, k k0..k0+15.
  SmallVector<Value, 4> loadAFromTransposed(const SharedTile &t, Value row0,
                                            int64_t k0);

  /// c += a·b for one m16n8k16 tile (4 f32 accumulators).
  void mma(ArrayRef<Value> a, ArrayRef<Value> bFrag, MutableArrayRef<Value> c);
  /// The TF32 operand registers of f32 fragment values: each rounded to
  /// TF32 (plan.tf32), or the rounded values followed by their rounded
  /// remainders x − round(x) (3xTF32).
  SmallVector<Value, 8> splitTf32(ArrayRef<Value> x);
  /// TF32 operands (f32 values) whose k runs along a tile's rows, where no
  /// ldmatrix moves single f32 of a column: scalar loads, each 8-key step's
  /// keys in the order of an accumulator's columns (k t ↔ row 2t, k t + 4 ↔
  /// row 2t + 1), so that accumulatorToTf32A's registers pair with them.
  /// B of the n8 tile at n0 from a k-major tile (V for P·V): rows k0 + 2t,
  /// k0 + 2t + 1 of column n0 + g.
  SmallVector<Value, 2> loadTf32BFromKMajor(const SharedTile &t, int64_t k0,
                                            Value n0);
  /// A (16 rows) from a tile stored [k][row] (dSᵀ for dS·K): rows k0 + 2t,
  /// k0 + 2t + 1 of columns row0 + g, row0 + g + 8.
  SmallVector<Value, 4> loadTf32AFromTransposed(const SharedTile &t,
                                                Value row0, int64_t k0);
  /// c += a·b for one m16n8k8 TF32 tile from splitTf32's registers (a: 4
  /// or 8, b: 2 or 4): one MMA, or the three of 3xTF32 (small·big,
  /// big·small, big·big; the small·small term is below f32's precision)
  /// into zero, then added to c in f32.
  void mmaTf32(ArrayRef<Value> a, ArrayRef<Value> b, MutableArrayRef<Value> c);
  /// Two f32 → one packed register of the element type (A/B operand).
  Value pack(Value lo, Value hi);
  /// Two f32 → vector<2 x elem>, for stores.
  Value truncPair(Value lo, Value hi);

  Value exp2(Value x);
  /// 2^x on the FMA pipe (no special-function unit): 2^j·p(f) with j the
  /// integer nearest x, f = x − j, p a degree-3 minimax polynomial (relative
  /// error below 1e-4), j added to p's exponent bits; 0 for x < −125
  /// (−inf included), x at most 127.
  Value exp2Poly(Value x);
  Value log2(Value x);
  /// The online-softmax arithmetic (OnlineSoftmaxMath) with the exp2 and
  /// log2 above.
  attn::OnlineSoftmaxMath softmaxMath();
  Value shuffleXor(Value x, int64_t mask);
  Value maxf(Value x, Value y);
  Value negInf() { return f32(-INFINITY); }

private:
  /// copyTileAsync's loop: `dst(row, chunk, col)` is the shared element
  /// offset of chunk `chunk` (rowChunkElems columns from `col`) of tile row
  /// `row`.
  /// With `rowSource` the rows are gathered (copyGatheredTileAsync) and
  /// rowBegin / rowLimit are unused (rowSource gives element offsets).
  void copyRowsAsync(
      Value gmem, Value gBase, Value rowBegin, Value rowLimit, int64_t rows,
      int64_t cols, function_ref<Value(Value, Value, Value)> dst,
      Value rowStride = {}, RowSource rowSource = nullptr,
      bool blocked = false);

public:

  /// The type of one packed operand register (i32 for bf16, vector<2xf16>).
  Type fragType();
  /// A store of 2 elements (vector<2 x elem>), aligned to the pair.
  void storePair(Value vec, Value mem, Value index);
};

/// `value` combined over the CTA (`combine`: a sum, or a maximum of values
/// >= 0), the same in every thread: over each warp's lanes by xor shuffles,
/// then 0 and the `warps` warps in order through as many f32 of dynamic
/// shared memory. Deterministic (no atomics).
Value reduceOverCta(KernelBuilder &kb, gpu::GPUModuleOp module, Value value,
                    int64_t warps, function_ref<Value(Value, Value)> combine);

/// A accumulator (16 × 16 from two n8 tiles, 8 f32) as an A fragment: the
/// accumulator and A layouts agree lane for lane, so this is only packing.
SmallVector<Value, 4> accumulatorToA(KernelBuilder &kb, ArrayRef<Value> c);

/// Emits the accesses of the column pair 8n + 2t, +1 that lane t holds in n8
/// tile `n` of an accumulator row: `emit(0, {lo, hi})` as one pair when
/// `pairs` (rows start at even columns, so the pair is aligned), else
/// `emit(0, {lo})` and `emit(1, {hi})`; columns at or past `cols` are
/// skipped (the last n8 tile of a head dim that is not a multiple of 8).
void forColumnPair(KernelBuilder &kb, int64_t n, int64_t cols, bool pairs,
                   Value lo, Value hi,
                   function_ref<void(int64_t, ValueRange)> emit);

/// Stores lane t's columns 8n + 2t, +1 (`lo`, `hi`) of the row at element
/// `rowOff` of `mem`, a row-major matrix with rows of `rowStride` elements;
/// only columns < `cols` (forColumnPair).
void storeColumnPair(KernelBuilder &kb, Value mem, Value rowOff, int64_t n,
                     int64_t cols, int64_t rowStride, Value lo, Value hi);

/// storeColumnPair for an f32 matrix (a split's partial O): 8-byte pairs
/// where the row length is even.
void storeColumnPairF32(KernelBuilder &kb, Value mem, Value rowOff, int64_t n,
                        int64_t cols, Value lo, Value hi);

/// Stores accumulator tiles (rows g, g+8 of 16 starting at `row0`, `cols`
/// columns in n8 tiles from `base`) to a row-major global matrix with rows of
/// `rowStride` elements (`cols` when 0), rows < `rowLimit` only, each value
/// multiplied by `rowScale[r]` when given. A caller's tensor passes its row
/// stride as `dynamicRowStride` (index), which then addresses the rows;
/// `rowStride` still gives the rows' alignment (the runtime checks strides
/// are multiples of it).
void storeAccumulator(KernelBuilder &kb, ArrayRef<Value> acc, Value mem,
                      Value base, Value row0, Value rowLimit, int64_t cols,
                      ArrayRef<Value> rowScale = {}, int64_t rowStride = 0,
                      Value dynamicRowStride = {});

/// Online-softmax state of one warp's 16 rows as held by one lane: rows g and
/// g+8 (see Fragments.h).
struct SoftmaxState {
  Value rowMax[2]; // base-2 units, -inf before any key
  Value rowSum[2]; // lane-local partial sums; reduced in finalize
};

/// The keys each of a lane's two accumulator rows can see (mask band, and
/// below Nk), for the accumulator layout of mma.sync m16n8 tiles, which the
/// wgmma m64nN accumulator shares per warp: lane (g, t) holds rows
/// rowBase + g, +8 and columns 8n + 2t, +1 of a tile. Computed once per
/// query tile as 32-bit bounds, so a key loop tests each element with one
/// compare per band edge and keeps three to six 32-bit values live instead of
/// the row and length indices: column c of the lane (0 at its first column)
/// in a key tile starting at k0 is visible iff lo[r] <= k0 + c < hi[r]; a tile
/// [k0, k0 + w) is inside the band for every row of the block iff
/// tileLo <= k0 and k0 + w <= tileHi. Null lo / tileLo: no left edge; null
/// hi: no mask, every row ends at tileHi = Nk, kept as an index.
struct RowKeyBounds {
  Value lo[2], hi[2];
  Value tileLo, tileHi;
};
/// Bounds for the lane's rows r = 0, 1 (g and g + 8 of its warp's 16),
/// which hold queries `rowQuery(r)`, in a block whose queries run from
/// `firstQuery` to `lastQuery()` (`tile.kv` unused).
RowKeyBounds rowKeyBounds(KernelBuilder &kb, const attn::ScorePosition &tile,
                          Value firstQuery,
                          function_ref<Value(int64_t)> rowQuery,
                          function_ref<Value()> lastQuery);
/// i1: the `width` keys from k0 (index) need no mask.
Value tileInside(KernelBuilder &kb, const RowKeyBounds &bounds, Value k0,
                 int64_t width);
/// Sets the scores of keys outside `bounds` to -inf in the tile at key k0
/// (index).
void maskScores(KernelBuilder &kb, MutableArrayRef<Value> s,
                const RowKeyBounds &bounds, Value k0);

/// The factor taking a raw score to base-2 units: scale·log2(e), or log2(e)
/// alone under a score_mod, which applies the scale itself (applyScoreMod).
Value softmaxScaleLog2(KernelBuilder &kb, Value scale);

/// Applies the plan's score_mod to S in accumulator layout: lane (g, t) holds
/// rows r = 0, 1 (g and g + 8) of (head, query) `rowHeadQuery(r)` and keys
/// keyBase + 8n + 2t, +1. Each score becomes score_mod(scale·s, b, h, q, kv)
/// through attn::buildScore, the builder of the CPU decomposition, with the
/// kernel's run-time `scale`. With `queryAnchored` (a query-additive mod:
/// attn::scoreModQueryAdditive) both rows take the first row's query;
/// scoreModRowShift gives what that moved.
void applyScoreMod(KernelBuilder &kb, MutableArrayRef<Value> s,
                   const attn::ScorePosition &tile,
                   function_ref<std::pair<Value, Value>(int64_t)> rowHeadQuery,
                   Value keyBase, Value scale, bool queryAnchored = false);
/// Row r's shift under a query-anchored applyScoreMod: g(q_r) − g(q_0) =
/// score_mod(0, b, h_r, q_r, q_0) − score_mod(0, b, h_r, q_0, q_0), which
/// finalizeSoftmax adds back to the row's LSE. Rows as in applyScoreMod.
void scoreModRowShift(
    KernelBuilder &kb, const attn::ScorePosition &tile,
    function_ref<std::pair<Value, Value>(int64_t)> rowHeadQuery, Value scale,
    Value shift[2]);

/// The same for Sᵀ (keys as rows, queries as columns) of the backward: lane
/// (g, t) holds keys tile.kv + keyRow0 + g, +8 and queries tile.q + 8n + 2t,
/// +1. Returns each element's d(score)/d(Sᵀ) for dSᵀ.
SmallVector<Value> applyScoreModTransposed(KernelBuilder &kb,
                                           MutableArrayRef<Value> s,
                                           const attn::ScorePosition &tile,
                                           Value keyRow0, Value scale);

/// Sets the scores the plan's mask_mod masks out to -inf (nothing without
/// one), for S in accumulator layout as in applyScoreMod: after the
/// score_mod, on every element of every tile (a mask_mod can hit any).
void applyMaskMod(KernelBuilder &kb, MutableArrayRef<Value> s,
                  const attn::ScorePosition &tile,
                  function_ref<std::pair<Value, Value>(int64_t)> rowHeadQuery,
                  Value keyBase);
/// applyMaskMod for Sᵀ of the backward, laid out as in
/// applyScoreModTransposed.
void applyMaskModTransposed(KernelBuilder &kb, MutableArrayRef<Value> s,
                            const attn::ScorePosition &tile, Value keyRow0);

/// The same for Sᵀ (keys as rows, queries as columns) of the backward: lane
/// (g, t) holds keys keyRow0 + g, +8 and queries 8n + 2t, +1 of the tile at
/// `tile`; queries past Nq are masked too.
void maskScoresTransposed(KernelBuilder &kb, MutableArrayRef<Value> s,
                          const attn::ScorePosition &tile, Value keyRow0);

/// Whether the Sᵀ tile of keys [kBegin, kEnd) × queries [qBegin, qEnd) lies
/// wholly inside the plan's band and below both lengths: its elements need
/// no mask (block-sparse: the enum mask's band alone; the block lists say
/// which blocks need the mask_mod). `lengthsFirst` builds the length tests
/// before the band's: the order reaches the PTX, and the wgmma backward's
/// measured code has them first, the mma.sync backward's after.
Value transposedTileInside(KernelBuilder &kb, Value qBegin, Value qEnd,
                           Value kBegin, Value kEnd, Value nq, Value nk,
                           bool lengthsFirst);

/// Rescales `acc` and turns the scores `s` (n8 tiles × 4, raw Q·Kᵀ) into P in
/// place, updating `state`; `scaleLog2` is scale·log2(e), one value, or
/// with `scaleBlock` one per that many columns (positive values). With
/// lazyRescaleLog2 > 0 a row keeps its base (α = 1) until its max has grown
/// by more than that many powers of 2. With polyExp2 = k, k of every 8 n8
/// tiles take their exponentials from KernelBuilder::exp2Poly.
void onlineSoftmaxUpdate(KernelBuilder &kb, MutableArrayRef<Value> s,
                         MutableArrayRef<Value> acc, SoftmaxState &state,
                         ArrayRef<Value> scaleLog2, int64_t scaleBlock,
                         double lazyRescaleLog2 = 0, int64_t polyExp2 = 0);

/// Reduces the row sums over the 4 lanes of a row; returns 1/l (0 where l = 0)
/// per row and LSE = ln2·(m + log2 l) (−inf where l = 0). With `sink` (f32,
/// the head's attention-sink logit) the sink joins each row once
/// (OnlineSoftmaxMath::finalizeRowWithSink). With `shift` (scoreModRowShift:
/// the rows' scores were shifted by −shift) the sink is shifted as the scores
/// were and the LSE takes the shift back.
void finalizeSoftmax(KernelBuilder &kb, SoftmaxState &state, Value invSum[2],
                     Value lse[2], Value sink = {},
                     const Value *shift = nullptr);

} // namespace mlir::fa::gpu_lowering

#endif // FA_LIB_CONVERSION_ATTNTOGPU_FRAGMENTS_H
