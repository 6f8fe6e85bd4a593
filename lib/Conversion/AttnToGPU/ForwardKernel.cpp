//===- ForwardKernel.cpp - the FlashAttention-2 forward kernel --*- C++ -*-===//
//
// One CTA per (query block, head, batch); warp w owns query rows
// [16w, 16w + 16) of the block. The key loop is written unpipelined: each
// iteration copies K(j) and V(j) (separate cp.async groups) and reads each
// after waiting for it. attn-gpu-pipeline then turns K and V into rings of
// plan.stages buffers (2 by default) with the copies stages − 1 iterations
// ahead, so the load of V(j) overlaps S(j) = Q·K(j)ᵀ and the softmax, and
// K(j+s-1) overlaps P·V(j); a deeper ring keeps more bytes in flight where
// the kernel waits on memory (decode).
//
// Split-KV (plan.splitKv): grid z runs over (batch, split) pairs; a CTA runs
// the key blocks of its split (the IR's, from the split's first key) and
// leaves its partial O (f32) and LSE in the workspace for the merge kernel.
//
// Packed GQA (plan.packGqa): grid y runs over key heads; the CTA's rows hold
// the query heads of its key head (attn_gpu.packed_rows), so each K/V block
// it loads serves all of them. Q rows are gathered and O/LSE rows scattered
// by (head, query); the band, score_mod and mask_mod take each row's own.
//
// Paged (plan.paged): K and V are pools [pages, page_size, Hkv, D]; each
// key tile is gathered row by row through the sequence's page-table row
// (attn_gpu.async_copy paged), and the CTA's keys end at its seqused_k.
//
// Every plan is built at the GPU tile level (attn_gpu ops), which
// convert-attn-gpu-to-nvvm lowers to the fragment code (Fragments.h).
//
//===----------------------------------------------------------------------===//

#include "Fragments.h"
#include "SplitKv.h"
#include "TiledLoopNest.h"
#include "VarlenKernel.h"

#include "fa/Dialect/Attn/Transforms/Transforms.h"
#include "fa/Dialect/AttnGPU/IR/AttnGPU.h"
#include "mlir/IR/IRMapping.h"

using namespace mlir;
using namespace mlir::fa;
using namespace mlir::fa::gpu_lowering;

namespace ag = mlir::fa::attn_gpu;

namespace {
/// The forward kernel as attn_gpu tile ops: the tiled loops mapped to the
/// grid (CTA = (query block, head, batch), or key head when packed), the
/// key-block loop kept as an scf.for carrying the (max, sum, acc)
/// fragments, its body the schedule of the file comment. The index
/// arithmetic is the kernel's own; the tile ops lower in place
/// (ConvertAttnGPUToNVVM.cpp), so the kernel's code is the one the fragment
/// builders always emitted.
class ForwardTileBuilder {
public:
  ForwardTileBuilder(OpBuilder &b, Location loc, const KernelPlan &plan,
                     gpu::GPUFuncOp func, const KernelParams &params)
      : b(b), loc(loc), ctx(b.getContext()), plan(plan), kb(b, loc, plan),
        entry(func.getBody().front()), params(params) {}

  void build(gpu::GPUModuleOp module, const TiledLoopNest &loops);

private:
  Value arg(unsigned i) { return entry.getArgument(i); }
  void mapGrid();
  void mapPages();
  void declareSharedTiles();
  /// A tile of the shared buffer at element `offset` (the plan's layout).
  Value sharedTile(int64_t rows, int64_t cols, int64_t stride,
                   int64_t offset);
  Value kTile();
  Value vTile();
  void copyAsync(Value mem, Value base, Value rowBegin, Value rowLimit,
                 Value tile, Value rowStride);
  Value keyOf(Value block);
  void loadQuery();
  Value keyBounds();
  ScoreRows scoreRows() {
    return {batch, head, qBegin, nq, nk, rowBase, rows};
  }
  ag::FragmentType f32Fragment(int64_t cols, ag::FragmentLayout layout);
  scf::ForOp buildKeyLoop(Value bounds);
  Value applyMods(Value s, Value kBegin, Value bounds);
  void buildEpilogue(scf::ForOp loop);

  OpBuilder &b;
  Location loc;
  MLIRContext *ctx;
  const KernelPlan &plan;
  KernelBuilder kb;
  Block &entry;
  const KernelParams &params;
  // The CTA's place: problem sizes, block ids, the split, the heads.
  Value heads, kvHeads, nq, nk, qBlock, head, batch, split, splits, kvHead;
  // Paged: the page table's capacity (the kernel's nk), the parameters of
  // the gather and the CTA's row of the page table.
  Value keyCapacity, pageTable, sequsedK, pageSize, numPages, tableBase;
  StridedTensor qT, kT, vT;
  Value qRowsBase, qBase, kBase, vBase, qBegin;
  Value rows; // packed GQA: the tile's (head, query) rows
  // The key blocks of the CTA and the first key of its split.
  Value jBegin, jEnd, splitKey;
  Value qTile, rowBase, qOperand, qOperandRow, scaleLog2;
  int64_t qElems = 0, kElems = 0, vElems = 0;
};
} // namespace

/// Block ids → (query block, head or key head, batch, split); the bases of
/// Q, K and V in the caller's layout, formed once, out of the key loop.
void ForwardTileBuilder::mapGrid() {
  heads = kb.toIndex(arg(6)), kvHeads = kb.toIndex(arg(7));
  nq = kb.toIndex(arg(8)), nk = kb.toIndex(arg(9));
  qBlock = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
  head = gpu::BlockIdOp::create(b, loc, gpu::Dimension::y);
  batch = gpu::BlockIdOp::create(b, loc, gpu::Dimension::z);
  if (plan.splitKv) {
    splits = kb.toIndex(arg(11)); // after the scale (forwardParams)
    split = arith::RemUIOp::create(b, loc, batch, splits);
    batch = arith::DivUIOp::create(b, loc, batch, splits);
  }
  // GQA: query head h reads key/value head h / (H / Hkv).
  // Packed: blockIdx.y is the key head.
  Value group = arith::DivUIOp::create(b, loc, heads, kvHeads);
  kvHead = plan.packGqa ? head : arith::DivUIOp::create(b, loc, head, group);
  qT = stridedTensor(kb, arg(0), params.strides(entry, 0));
  kT = stridedTensor(kb, arg(1), params.strides(entry, 1));
  vT = stridedTensor(kb, arg(2), params.strides(entry, 2));
  qRowsBase = kb.mul(kb.add(kb.mul(batch, heads), head), nq);
  qBase = qT.headBase(kb, batch, head);
  kBase = kT.headBase(kb, batch, kvHead);
  vBase = vT.headBase(kb, batch, kvHead);
  keyCapacity = nk;
  if (plan.paged)
    mapPages();
  qBegin = kb.mul(qBlock, plan.blockQ);
  if (!plan.packGqa)
    return;
  auto packed = ag::PackedRowsOp::create(
      b, loc, ag::PackedRowsType::get(ctx), b.getIndexType(), head, qBlock,
      batch, heads, kvHeads, nq, plan.blockQ);
  rows = packed.getRows();
  qBegin = packed.getFirstQuery();
}

/// Paged: the pools have no batch (their rows are [page, row]), and the
/// CTA's key count is its sequence's seqused_k clamped to the capacity.
void ForwardTileBuilder::mapPages() {
  unsigned first = params.pageTableParam;
  pageTable = arg(first);
  sequsedK = arg(first + 1);
  Value maxPages = kb.toIndex(arg(first + 2));
  pageSize = kb.toIndex(arg(first + 3));
  numPages = kb.toIndex(arg(first + 4));
  tableBase = kb.mul(batch, maxPages);
  kBase = kb.mul(kvHead, kT.headStride);
  vBase = kb.mul(kvHead, vT.headStride);
  // Signed: a negative count sees no key (clamp(seqused_k, 0, capacity)).
  Value used = arith::IndexCastOp::create(
      b, loc, b.getIndexType(), loadSequenceOffset(b, loc, sequsedK, batch));
  used = arith::MaxSIOp::create(b, loc, used, kb.idx(0));
  nk = arith::MinSIOp::create(b, loc, used, keyCapacity);
}

/// Shared memory: Q | K | V (rows padded by 16 B, or swizzled);
/// attn-gpu-pipeline makes K and V rings.
void ForwardTileBuilder::declareSharedTiles() {
  qElems = plan.blockQ * plan.strideQK();
  kElems = plan.blockKV * plan.strideQK();
  vElems = plan.blockKV * plan.strideV();
  ag::SharedMemoryOp::create(b, loc, qElems + kElems + vElems, plan.elemType);
  qTile = sharedTile(plan.blockQ, plan.headDim, plan.strideQK(), 0);
}

Value ForwardTileBuilder::sharedTile(int64_t rows, int64_t cols,
                                     int64_t stride, int64_t offset) {
  auto type = ag::SharedTileType::get(ctx, rows, cols, plan.elemType, stride,
                                      plan.swizzledForwardTiles());
  return ag::SharedTileOp::create(b, loc, type, Value(), offset,
                                  IntegerAttr());
}

// TMA writes K and V as 64-column slabs (stride 64).
Value ForwardTileBuilder::kTile() {
  return sharedTile(plan.blockKV, plan.headDim,
                    plan.tma ? 64 : plan.strideQK(), qElems);
}

Value ForwardTileBuilder::vTile() {
  return sharedTile(plan.blockKV, plan.headDimV, plan.tma ? 64 : plan.strideV(),
                    qElems + kElems);
}

void ForwardTileBuilder::copyAsync(Value mem, Value base, Value rowBegin,
                                   Value rowLimit, Value tile,
                                   Value rowStride) {
  // Only K and V (arguments 1, 2) live in pages.
  bool paged = plan.paged && (mem == arg(1) || mem == arg(2));
  SmallVector<Value> paging;
  if (paged)
    paging = {tableBase, pageSize, numPages};
  // K and V are also boxes (0, row, kv head, batch) of their maps; paged,
  // of the pool's map, whose page coordinate comes through the table.
  Value map;
  SmallVector<Value> coords;
  if (plan.tma && (mem == arg(1) || mem == arg(2))) {
    map = arg(params.tensorMaps[mem == arg(1) ? 0 : 1]);
    coords = paged ? SmallVector<Value>{kvHead}
                   : SmallVector<Value>{kvHead, batch};
  }
  ag::AsyncCopyOp::create(b, loc, mem, base, rowBegin, rowLimit, rowStride,
                          tile, paged ? pageTable : Value(), paging, map,
                          coords);
}

/// The first key of block j: a split's blocks count from its first key.
Value ForwardTileBuilder::keyOf(Value block) {
  Value key = kb.mul(block, plan.blockKV);
  return splitKey ? kb.add(splitKey, key) : key;
}

/// Q (gathered when packed), then Q's fragments when they stay in
/// registers for the whole key loop. The pipeline's first K, V copies join
/// the wait.
void ForwardTileBuilder::loadQuery() {
  if (rows)
    ag::AsyncGatherOp::create(b, loc, arg(0), batch, qT.batchStride,
                              qT.headStride, qT.rowStride, rows, qTile);
  else
    copyAsync(arg(0), qBase, qBegin, nq, qTile, qT.rowStride);
  ag::AsyncWaitOp::create(b, loc, 0);
  gpu::BarrierOp::create(b, loc);
  rowBase = ag::WarpRowOffsetOp::create(b, loc, b.getIndexType());
  qOperand = qTile, qOperandRow = rowBase;
  if (plan.keepQInRegisters()) {
    qOperand = ag::LoadOperandAOp::create(
        b, loc,
        ag::FragmentType::get(ctx, 16, plan.paddedHeadDim(), plan.elemType,
                              ag::FragmentLayout::OperandA),
        qTile, rowBase);
    qOperandRow = Value();
  }
}

/// The band of keys of the warp's rows and of the tile.
Value ForwardTileBuilder::keyBounds() {
  return buildKeyBounds(b, loc, plan.spec, scoreRows(), plan.blockQ);
}

ag::FragmentType ForwardTileBuilder::f32Fragment(int64_t cols,
                                                 ag::FragmentLayout layout) {
  return ag::FragmentType::get(ctx, 16, cols, b.getF32Type(), layout);
}

/// score_mod, mask_mod, then the band: only tiles crossing the band's edge
/// or Nk evaluate it.
Value ForwardTileBuilder::applyMods(Value s, Value kBegin, Value bounds) {
  s = buildScoreMods(b, loc, plan.spec, s, arg(10), scoreRows(), kBegin);
  return ag::MaskOp::create(b, loc, s.getType(), s, bounds, kBegin);
}

/// The key-block loop, unpipelined (attn-gpu-pipeline builds its ring):
/// K(j) and V(j) are copied, S = Q·K(j)ᵀ once K(j) has landed, the mods
/// and the band, the online softmax, and O += P·V(j) once V(j) has.
scf::ForOp ForwardTileBuilder::buildKeyLoop(Value bounds) {
  // Loop state: row max, row sum (rows layout), O accumulator (16 × Dv).
  Type rowsType = f32Fragment(1, ag::FragmentLayout::Rows);
  Type accType = f32Fragment(plan.headDimV, ag::FragmentLayout::Accumulator);
  Type scoresType = f32Fragment(plan.blockKV, ag::FragmentLayout::Accumulator);
  SmallVector<Value> init{
      ag::FillOp::create(b, loc, rowsType, kb.negInf()),
      ag::FillOp::create(b, loc, rowsType, kb.f32(0)),
      ag::FillOp::create(b, loc, accType, kb.f32(0))};
  auto loop = scf::ForOp::create(b, loc, jBegin, jEnd, kb.idx(1), init);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(loop.getBody());
  ValueRange it = loop.getRegionIterArgs();
  Value kBegin = keyOf(loop.getInductionVar());
  // The previous iteration's reads of K and V are done.
  gpu::BarrierOp::create(b, loc);
  Value k = kTile();
  copyAsync(arg(1), kBase, kBegin, nk, k, kT.rowStride);
  Value v = vTile();
  copyAsync(arg(2), vBase, kBegin, nk, v, vT.rowStride);

  // S = Q·K(j)ᵀ once K(j) has landed (V(j) may still be in flight).
  ag::AsyncWaitOp::create(b, loc, 1);
  gpu::BarrierOp::create(b, loc);
  Value s = ag::MmaQKOp::create(b, loc, scoresType, qOperand, qOperandRow, k);
  s = applyMods(s, kBegin, bounds);
  auto update = ag::OnlineSoftmaxOp::create(b, loc, scoresType, rowsType,
                                            rowsType, accType, s, it[0], it[1],
                                            it[2], ValueRange{scaleLog2},
                                            /*scale_block=*/IntegerAttr(),
                                            /*lazy_rescale_log2=*/FloatAttr(),
                                            /*poly_exp2=*/IntegerAttr());

  // O += P·V(j); P goes from accumulator layout to A fragments in registers.
  ag::AsyncWaitOp::create(b, loc, 0);
  gpu::BarrierOp::create(b, loc);
  Value acc = ag::MmaPVOp::create(b, loc, accType, update.getProbs(), v,
                                  /*first_column=*/Value(),
                                  update.getNewAcc());
  scf::YieldOp::create(
      b, loc, SmallVector<Value>{update.getNewMax(), update.getNewSum(), acc});
  return loop;
}

/// Epilogue: O = acc / l, LSE = ln2·(m + log2 l); empty rows give 0 and -inf.
/// A split stores its partial rows [split, batch, head, ...] in f32,
/// contiguous in the workspace (packed rows at their (head, query)); O is
/// otherwise in the caller's layout.
void ForwardTileBuilder::buildEpilogue(scf::ForOp loop) {
  const int64_t dv = plan.headDimV;
  Value outRowsBase = qRowsBase, outBase, outRowStride;
  if (rows) {
    // Each row's place comes from rows (and the split): no bases.
    outRowsBase = outBase = kb.idx(0);
  } else if (plan.splitKv) {
    outRowsBase = kb.add(
        kb.mul(kb.mul(kb.mul(split, kb.toIndex(arg(5))), heads), nq),
        qRowsBase);
    outBase = kb.mul(outRowsBase, dv);
  } else {
    StridedTensor oT = stridedTensor(kb, arg(3), params.strides(entry, 3));
    outBase = oT.headBase(kb, batch, head);
    outRowStride = oT.rowStride;
  }
  ValueRange res = loop.getResults();
  Type rowsType = res[0].getType();
  // Only an unsplit plan's forward takes sinks (a split one's merge joins
  // them), and that is never packed: `head` is the query head whose sink
  // joins every row.
  auto final = ag::FinalizeSoftmaxOp::create(
      b, loc, rowsType, rowsType, res[0], res[1],
      loadSink(kb, entry, params, head), /*shift=*/Value());
  ag::StoreOutputOp::create(b, loc, res[2], final.getInvSum(), final.getLse(),
                            arg(3), outBase, outRowStride, arg(4), outRowsBase,
                            qBegin, rowBase, nq, rows, rows ? split : Value(),
                            rows && split ? arg(5) : Value(),
                            /*staging=*/Value(), /*staging_group=*/Value());
}

void ForwardTileBuilder::build(gpu::GPUModuleOp module,
                               const TiledLoopNest &loops) {
  // The merge may be scheduled as soon as every CTA of the split runs; a
  // kv-append plan's split reads what fa_kv_append wrote only after it.
  if (plan.dependentMerge())
    inlinePtx(b, loc, "griddepcontrol.launch_dependents;");
  if (plan.dependentForward())
    inlinePtx(b, loc, "griddepcontrol.wait;");
  mapGrid();
  declareSharedTiles();
  // The key blocks of the tiled loop (those that meet this block's band).
  std::tie(jBegin, jEnd) = loops.cloneTileRange(
      b,
      {batch, head, qBlock, heads, kvHeads, nq, keyCapacity, split, splits,
       /*cuSeqlensQ=*/{}, /*cuSeqlensK=*/{}, plan.paged ? sequsedK : Value(),
       plan.spec.windowLeftValue, plan.spec.windowRightValue},
      &splitKey);
  loadQuery();
  scaleLog2 = softmaxScaleLog2(kb, arg(10));
  Value bounds = keyBounds();
  scf::ForOp loop = buildKeyLoop(bounds);
  ag::AsyncWaitOp::create(b, loc, 0);
  buildEpilogue(loop);
  gpu::ReturnOp::create(b, loc);
}

gpu::GPUFuncOp mlir::fa::buildForwardKernel(OpBuilder &b, Location loc,
                                            gpu::GPUModuleOp module,
                                            const KernelPlan &plan,
                                            const TiledLoopNest &loops) {
  MLIRContext *ctx = b.getContext();
  OpBuilder::InsertionGuard guard(b);
  KernelParams params = forwardParams(ctx, plan);
  auto func = createKernelFunc(b, loc, module, "fa_fwd_" + plan.tag(), params,
                               plan, plan.forwardSharedBytes());
  func->setAttr(attn::kKernelPlanAttr, kernelPlanAttr(ctx, plan));
  KernelPlan bound =
      bindWindowParams(b, loc, plan, func.getBody().front(), params);
  ForwardTileBuilder(b, loc, bound, func, params).build(module, loops);
  return func;
}
