//===- ConvertAttnGPUToNVVM.cpp - convert-attn-gpu-to-nvvm ------*- C++ -*-===//
//
// Lowers the attn_gpu tile level to the fragment builders' code (Fragments.h,
// Softmax.cpp): a 1:N dialect conversion in which a register fragment
// becomes the values one lane holds, a shared tile its element offset and
// key bounds their 32-bit edges, packed rows the values TileRows keeps. Each
// tile op is replaced in place, in
// program order, so the kernel is the one the builders emit directly: the
// lane ids are made at the kernel's entry, the shared buffer where
// attn_gpu.shared_memory stands.
//
//===----------------------------------------------------------------------===//

#include "Fragments.h"
#include "HopperFp8.h"
#include "TileLowering.h"
#include "TileRows.h"
#include "Wgmma.h"
#include "VarlenKernel.h"

#include "fa/Conversion/Passes.h"
#include "fa/Dialect/AttnGPU/IR/AttnGPU.h"

#include "mlir/Dialect/SCF/Transforms/Patterns.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Transforms/DialectConversion.h"

namespace mlir::fa {
#define GEN_PASS_DEF_CONVERTATTNGPUTONVVMPASS
#include "fa/Conversion/Passes.h.inc"
} // namespace mlir::fa

using namespace mlir;
using namespace mlir::fa;
using namespace mlir::fa::gpu_lowering;
namespace ag = mlir::fa::attn_gpu;

namespace {

/// Fails unless the kernel's packed_rows and mask_mod ops agree with its
/// plan's pack_gqa and its key_bounds.
static LogicalResult checkRowsAndMaskMod(gpu::GPUFuncOp func,
                                         DictionaryAttr planAttr,
                                         ag::KeyBoundsOp bounds) {
  FailureOr<ag::PackedRowsOp> rows = uniqueTileOp<ag::PackedRowsOp>(func, true);
  FailureOr<ag::MaskModOp> maskMod = uniqueTileOp<ag::MaskModOp>(func, true);
  if (failed(rows) || failed(maskMod))
    return failure();
  bool packGqa = planAttr.contains("pack_gqa");
  if (packGqa != static_cast<bool>(*rows))
    return func.emitOpError("expected ")
           << (packGqa ? "one" : "no") << " 'attn_gpu.packed_rows' for a plan "
           << (packGqa ? "with" : "without") << " pack_gqa";
  if (bounds.getMaskMod() != static_cast<bool>(*maskMod))
    return bounds.emitOpError("expected mask_mod on the key bounds exactly "
                              "when the kernel has an 'attn_gpu.mask_mod'");
  return success();
}

/// Fails if a key loop of a plan with `stages` > 1 still copies into a
/// single buffer: attn-gpu-pipeline has not built its ring.
static LogicalResult checkPipelined(gpu::GPUFuncOp func, int64_t stages) {
  if (stages < 2)
    return success();
  WalkResult walk = func.walk([&](ag::AsyncCopyOp copy) {
    auto tile = copy.getTile().getDefiningOp<ag::SharedTileOp>();
    if (!copy->getParentOfType<scf::ForOp>() || !tile || tile.getStage())
      return WalkResult::advance();
    copy.emitOpError("expected the key loop's copies pipelined over the "
                     "plan's ")
        << stages << " stages (run attn-gpu-pipeline first)";
    return WalkResult::interrupt();
  });
  return failure(walk.wasInterrupted());
}

/// The kernel plan of a tile-level kernel, resolved again from its
/// `attn.kernel_plan` and what its tile ops carry: the element type and
/// head dims (the K and V tiles), the mask (key_bounds), the score_mod and
/// mask_mod, packed rows (pack_gqa).
static FailureOr<KernelPlan> tileKernelPlan(gpu::GPUFuncOp func) {
  auto planAttr = func->getAttrOfType<DictionaryAttr>(attn::kKernelPlanAttr);
  if (!planAttr)
    return func.emitOpError("expected an '")
           << attn::kKernelPlanAttr << "' on a tile-level kernel";
  // The backward's kernel reduces dQ.
  bool backward = false;
  func.walk([&](ag::ReduceDQOp) { backward = true; });
  if (backward)
    return backwardTileKernelPlan(func, planAttr);
  FailureOr<ag::MmaQKOp> qk = uniqueTileOp<ag::MmaQKOp>(func);
  if (failed(qk))
    return failure();
  FailureOr<ag::MmaPVOp> pv = uniqueTileOp<ag::MmaPVOp>(func);
  if (failed(pv))
    return failure();
  FailureOr<ag::KeyBoundsOp> bounds = uniqueTileOp<ag::KeyBoundsOp>(func);
  if (failed(bounds))
    return failure();
  FailureOr<ag::ScoreModOp> mod = uniqueTileOp<ag::ScoreModOp>(func, true);
  if (failed(mod) || failed(checkRowsAndMaskMod(func, planAttr, *bounds)))
    return failure();
  ag::MaskModOp maskMod = *uniqueTileOp<ag::MaskModOp>(func, true);
  ag::SharedTileType key = qk->getKey().getType();
  ag::SharedTileType value = pv->getValue().getType();
  attn::ScoreSpec spec = maskSpecOf(*bounds);
  spec.scoreMod = *mod ? &mod->getScoreMod() : nullptr;
  spec.maskMod = maskMod ? &maskMod.getMaskMod() : nullptr;
  FailureOr<KernelPlan> plan =
      resolveTilePlan(func, planAttr, /*backward=*/false, key.getElementType(),
                      key.getCols(), value.getCols(), spec);
  if (failed(plan) || failed(checkPipelined(func, plan->stages)))
    return failure();
  // The producer warp's threads copy nothing unless its rings were built.
  bool rings = false;
  func.walk([&](ag::RingInitOp) { rings = true; });
  if (plan->producerWarp != rings)
    return func.emitOpError("expected ")
           << (rings ? "no " : "") << "attn_gpu.ring_init for a plan "
           << (plan->producerWarp ? "with" : "without")
           << " producer_warp (run attn-gpu-warp-specialize)";
  return plan;
}

/// The plan of a wgmma kernel (the kernel builders' of convert-attn-to-gpu),
/// resolved again from its `attn.kernel_plan` and its tile ops: the operand
/// type and head dims (the GEMMs), the mask (key_bounds), the score_mod and
/// mask_mod; a backward's (Sᵀ ops) as wgmmaBackwardKernelPlan resolves it.
static FailureOr<KernelPlan> wgmmaKernelPlan(gpu::GPUFuncOp func) {
  auto planAttr = func->getAttrOfType<DictionaryAttr>(attn::kKernelPlanAttr);
  if (!planAttr)
    return func.emitOpError("expected an '")
           << attn::kKernelPlanAttr << "' on a wgmma kernel with tile ops";
  ag::WgmmaQKOp qk;
  ag::WgmmaPVOp pv;
  ag::ScoreModOp mod;
  ag::MaskModOp maskMod;
  bool backward = false;
  func.walk([&](Operation *op) {
    backward |= isa<ag::TransposedBoundsOp>(op);
    if (auto o = dyn_cast<ag::WgmmaQKOp>(op); o && !qk)
      qk = o;
    if (auto o = dyn_cast<ag::WgmmaPVOp>(op); o && !pv)
      pv = o;
    if (auto o = dyn_cast<ag::ScoreModOp>(op); o && !mod)
      mod = o;
    if (auto o = dyn_cast<ag::MaskModOp>(op); o && !maskMod)
      maskMod = o;
  });
  if (backward)
    return wgmmaBackwardKernelPlan(func, planAttr);
  FailureOr<ag::KeyBoundsOp> bounds = uniqueTileOp<ag::KeyBoundsOp>(func);
  if (failed(bounds))
    return failure();
  if (!pv)
    return func.emitOpError("expected an 'attn_gpu.wgmma_pv' in a wgmma "
                            "forward with tile ops");
  // A k step reads 32 bytes of each row.
  Type elemType = qk.getOperandType();
  int64_t headDim = static_cast<int64_t>(qk.getQueryDescriptors().size()) *
                    256 / elemType.getIntOrFloatBitWidth();
  attn::ScoreSpec spec = maskSpecOf(*bounds);
  spec.scoreMod = mod ? &mod.getScoreMod() : nullptr;
  spec.maskMod = maskMod ? &maskMod.getMaskMod() : nullptr;
  return resolveTilePlan(func, planAttr, /*backward=*/false, elemType,
                         headDim, pv.getResult().getType().getCols(), spec);
}

/// The user of `x` that divides it (OpTy: arith.divui or arith.remui) by
/// the constant `by`, if any.
template <typename OpTy> static Value userBy(Value x, int64_t by) {
  for (Operation *user : x.getUsers())
    if (auto op = dyn_cast<OpTy>(user);
        op && op.getLhs() == x && getConstantIntValue(op.getRhs()) == by)
      return op;
  return {};
}

/// Whether `v` is the thread id x: gpu.thread_id or its opaque copy
/// (KernelBuilder::opaqueIndex).
static bool isThreadIdX(Value v) {
  if (auto cast = v.getDefiningOp<arith::IndexCastUIOp>())
    if (auto move = cast.getIn().getDefiningOp<LLVM::InlineAsmOp>();
        move && move.getAsmString() == KernelBuilder::kOpaqueMove &&
        move->getNumOperands() == 1)
      if (auto in = move->getOperand(0).getDefiningOp<arith::IndexCastUIOp>())
        v = in.getIn();
  auto id = v.getDefiningOp<gpu::ThreadIdOp>();
  return id && id.getDimension() == gpu::Dimension::x;
}

/// The lane ids of a kernel's tile ops: made first in a tile-level kernel;
/// a builder's kernel's own (KernelBuilder::deriveThreadIds: every thread
/// id divided by 32, then its lane by 4), so that none is computed twice.
static LogicalResult laneIds(gpu::GPUFuncOp func, KernelLowering &k,
                             bool builder) {
  if (!builder) {
    OpBuilder b = OpBuilder::atBlockBegin(&func.getBody().front());
    KernelBuilder kb(b, func.getLoc(), k.plan);
    kb.setupThreadIds();
    k.ids.push_back({kb.tid.getDefiningOp(), kb.threadIds()});
    return success();
  }
  func.walk([&](arith::DivUIOp div) {
    KernelBuilder::ThreadIds ids{};
    ids.tid = div.getLhs();
    if (!isThreadIdX(ids.tid) || getConstantIntValue(div.getRhs()) != 32)
      return;
    ids.warp = div;
    ids.lane = userBy<arith::RemUIOp>(ids.tid, 32);
    if (ids.lane) {
      ids.groupId = userBy<arith::DivUIOp>(ids.lane, 4);
      ids.threadInGroup = userBy<arith::RemUIOp>(ids.lane, 4);
    }
    if (ids.groupId && ids.threadInGroup)
      k.ids.push_back({ids.tid.getDefiningOp(), ids});
  });
  WalkResult walk = func.walk([&](Operation *op) {
    if (!isa<ag::AttnGPUDialect>(op->getDialect()) || isPlanFreeTileOp(op) ||
        k.idsAt(op))
      return WalkResult::advance();
    op->emitOpError("expected lane ids derived before it from the kernel's "
                    "thread id (KernelBuilder::setupThreadIds)");
    return WalkResult::interrupt();
  });
  return failure(walk.wasInterrupted());
}

/// The lane's values of the tile level's types.
static void addTileTypeConversions(TypeConverter &converter) {
  converter.addConversion([](Type t) { return t; });
  converter.addConversion(
      [](ag::SharedTileType t) -> Type { return IndexType::get(t.getContext()); });
  converter.addConversion([](ag::FragmentType t, SmallVectorImpl<Type> &out) {
    // Packed pairs in operand_a (KernelBuilder::fragType), f32 otherwise.
    Type lane = t.getElementType();
    if (t.getLayout() == ag::FragmentLayout::OperandA && !lane.isF32())
      lane = t.getElementType().isBF16()
                 ? Type(IntegerType::get(t.getContext(), 32))
                 : Type(VectorType::get({2}, t.getElementType()));
    out.append(t.getLaneValueCount(), lane);
    return success();
  });
  converter.addConversion([](ag::PackedRowsType t, SmallVectorImpl<Type> &out) {
    out.append(7, IndexType::get(t.getContext())); // TileRows::values
    return success();
  });
  converter.addConversion([](ag::KeyBoundsType t, SmallVectorImpl<Type> &out) {
    llvm::append_range(out, keyBoundsLaneTypes(t));
    return success();
  });
  // The wgmma kernels' builder code reads the lane values of their tile
  // ops' fragments and key bounds through casts (HopperForwardMainloop.cpp,
  // HopperBackwardMainloop.cpp): the casts stay until the pass folds each
  // pair.
  converter.addSourceMaterialization(
      [](OpBuilder &b, Type t, ValueRange lanes, Location loc) -> Value {
        if (!isa<ag::FragmentType, ag::KeyBoundsType>(t))
          return {};
        return UnrealizedConversionCastOp::create(b, loc, t, lanes)
            .getResult(0);
      });
  converter.addTargetMaterialization([](OpBuilder &b, TypeRange lanes,
                                        ValueRange fragment, Location loc,
                                        Type original) -> SmallVector<Value> {
    if (!isa<ag::FragmentType, ag::KeyBoundsType>(original))
      return {};
    return SmallVector<Value>(
        UnrealizedConversionCastOp::create(b, loc, lanes, fragment)
            .getResults());
  });
}

struct SharedMemoryLowering : TileOpLowering<ag::SharedMemoryOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult
  matchAndRewrite(ag::SharedMemoryOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    KernelBuilder kb = builderFor(op, rewriter);
    kb.setupSharedMemory(op->getParentOfType<gpu::GPUModuleOp>(),
                         op.getElements());
    kernelOf(op).smem = kb.smem;
    rewriter.eraseOp(op);
    return success();
  }
};

struct SharedTileLowering : TileOpLowering<ag::SharedTileOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult
  matchAndRewrite(ag::SharedTileOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    KernelBuilder kb = builderFor(op, rewriter);
    Value base = kb.idx(op.getOffset());
    if (op.getStage())
      base = kb.add(kb.mul(adaptor.getStage().front(), *op.getStageElements()),
                    op.getOffset());
    rewriter.replaceOp(op, base);
    return success();
  }
};

struct AsyncCopyLowering : TileOpLowering<ag::AsyncCopyOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult
  matchAndRewrite(ag::AsyncCopyOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    KernelBuilder kb = copyBuilder(op, rewriter);
    SharedTile tile = sharedTile(op.getTile(), adaptor.getTile());
    if (op.getPageTable())
      copyPagedTile(kb, op, tile);
    else
      kb.copyTileAsync(op.getSource(), op.getBase(), op.getRowBegin(),
                       op.getRowLimit(), tile, op.getRowStride());
    rewriter.eraseOp(op);
    return success();
  }

  /// 1 / size in f64, formed once per copy (loop-invariant: hoisted).
  static Value pageSizeInverse(KernelBuilder &kb, Value size32) {
    OpBuilder &b = kb.b;
    Value s = arith::UIToFPOp::create(b, kb.loc, b.getF64Type(), size32);
    Value one = arith::ConstantOp::create(b, kb.loc, b.getF64FloatAttr(1.0));
    return arith::DivFOp::create(b, kb.loc, one, s);
  }

  /// (key / size, key mod size), i32, without an integer division (a 64-bit
  /// one is a ~70-instruction routine per row of every tile): q = trunc((key
  /// + 1/2) · fl(1/size)) in f64. (key + 1/2) / size lies at least
  /// 1/(2·size) from an integer, and the product's error is below (key /
  /// size)·2^-52, so q is exact for every key below 2^51; keys are i32 (the
  /// kernel's nk).
  static std::pair<Value, Value> splitKey(KernelBuilder &kb, Value key32,
                                          Value size32, Value inverse) {
    OpBuilder &b = kb.b;
    Location loc = kb.loc;
    Type i32 = b.getI32Type(), f64 = b.getF64Type();
    Value half = arith::ConstantOp::create(b, loc, b.getF64FloatAttr(0.5));
    Value x = arith::AddFOp::create(
        b, loc, arith::UIToFPOp::create(b, loc, f64, key32), half);
    Value q = arith::FPToUIOp::create(
        b, loc, i32, arith::MulFOp::create(b, loc, x, inverse));
    Value r = arith::SubIOp::create(
        b, loc, key32, arith::MulIOp::create(b, loc, q, size32));
    return {q, r};
  }

  /// The split of the key `step` (at most the page size: 16) past a split
  /// one: the offset moves on and wraps into the next page at most once.
  static std::pair<Value, Value> stepKey(KernelBuilder &kb,
                                         std::pair<Value, Value> previous,
                                         int64_t step, Value size32) {
    OpBuilder &b = kb.b;
    Location loc = kb.loc;
    Value in = arith::AddIOp::create(b, loc, previous.second, kb.c32(step));
    Value wrap =
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::uge, in, size32);
    in = kb.select(wrap, arith::SubIOp::create(b, loc, in, size32), in);
    Value slot = arith::AddIOp::create(
        b, loc, previous.first,
        arith::ExtUIOp::create(b, loc, b.getI32Type(), wrap));
    return {slot, in};
  }

  /// The i32 page size and its f64 reciprocal, formed once per copy.
  struct PageSizes {
    Value size32, inverse;
    static PageSizes of(KernelBuilder &kb, ag::AsyncCopyOp op) {
      Value size32 = arith::IndexCastUIOp::create(
          kb.b, kb.loc, kb.b.getI32Type(), op.getPageSize());
      return {size32, pageSizeInverse(kb, size32)};
    }
  };

  /// The pool's last page (i32), formed in each path that reads the table.
  static Value lastPageOf(KernelBuilder &kb, ag::AsyncCopyOp op) {
    return arith::IndexCastUIOp::create(kb.b, kb.loc, kb.b.getI32Type(),
                                        kb.sub(op.getNumPages(), kb.idx(1)));
  }

  /// The page of table slot `slot` (i32) of the sequence, clamped into
  /// [0, lastPage]. Signed: a negative entry clamps to page 0, as the CPU
  /// path does.
  static Value loadPage(KernelBuilder &kb, ag::AsyncCopyOp op, Value slot,
                        Value lastPage) {
    OpBuilder &b = kb.b;
    Value raw = gpu_lowering::loadSequenceOffset(
        b, kb.loc, op.getPageTable(),
        kb.add(op.getTableBase(), kb.toIndex(slot)));
    return arith::MinSIOp::create(
        b, kb.loc, arith::MaxSIOp::create(b, kb.loc, raw, kb.c32(0)),
        lastPage);
  }

  /// The pool's row of offset `inPage` (i32) of `page` (i32), in 64 bits
  /// (num_pages·page_size is unbounded).
  static Value poolRow(KernelBuilder &kb, ag::AsyncCopyOp op, Value page,
                       Value inPage) {
    return kb.add(kb.mul(kb.toIndex(page), op.getPageSize()),
                  kb.toIndex(inPage));
  }

  /// A tile whose keys all lie in one page (a uniform test: page sizes that
  /// are multiples of the tile's rows always, smaller ones never) is one
  /// contiguous run of pool rows: one table read for the tile, then the
  /// contiguous copy. Others gather row by row (copyPagedRows).
  static void copyPagedTile(KernelBuilder &kb, ag::AsyncCopyOp op,
                            const SharedTile &tile) {
    OpBuilder &b = kb.b;
    Location loc = kb.loc;
    PageSizes sizes = PageSizes::of(kb, op);
    Value begin = op.getRowBegin();
    auto [slot, inPage] =
        splitKey(kb, arith::IndexCastUIOp::create(b, loc, b.getI32Type(), begin),
                 sizes.size32, sizes.inverse);
    Value onePage = arith::CmpIOp::create(
        b, loc, arith::CmpIPredicate::ule,
        arith::AddIOp::create(b, loc, inPage, kb.c32(tile.rows)),
        sizes.size32);
    auto ifOp = scf::IfOp::create(b, loc, onePage, /*withElseRegion=*/true);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&ifOp.getThenRegion().front());
    // A tile past the limit reads slot 0 (never past the table row).
    Value page = loadPage(
        kb, op, kb.select(kb.lt(begin, op.getRowLimit()), slot, kb.c32(0)),
        lastPageOf(kb, op));
    // Pool row of key `begin`; the limit moves with it.
    Value first = poolRow(kb, op, page, inPage);
    kb.copyTileAsync(op.getSource(), op.getBase(), first,
                     kb.add(first, kb.sub(op.getRowLimit(), begin)), tile,
                     op.getRowStride());
    // Tiles from a multiple of 16 keys (every split-KV key tile) gather
    // 16-key groups; others row by row.
    b.setInsertionPointToStart(&ifOp.getElseRegion().front());
    Value aligned = arith::CmpIOp::create(
        b, loc, arith::CmpIPredicate::eq,
        kb.remui(begin, kKeyGroup), kb.idx(0));
    auto alignedIf = scf::IfOp::create(b, loc, aligned, /*withElse=*/true);
    b.setInsertionPointToStart(&alignedIf.getThenRegion().front());
    copyPagedGroups(kb, op, tile, sizes);
    b.setInsertionPointToStart(&alignedIf.getElseRegion().front());
    copyPagedRows(kb, op, tile, sizes);
  }

  /// Keys [16g, 16g + 16) never straddle a page: page sizes are multiples
  /// of 16 (the runtime's check).
  static constexpr int64_t kKeyGroup = 16;

  /// The rows of a tile that begins at a multiple of kKeyGroup keys, each
  /// thread copying a run of consecutive rows (a blocked gather): the rows
  /// of a run that lie in one 16-key group share its page, read once per
  /// group (at the run's first row, or every 16th of a longer run), and
  /// follow each other in the pool. Rows where the gather is not blocked
  /// take copyPagedRows' way.
  static void copyPagedGroups(KernelBuilder &kb, ag::AsyncCopyOp op,
                              const SharedTile &tile, const PageSizes &sizes) {
    Value lastPage = lastPageOf(kb, op);
    std::pair<Value, Value> previous;
    // The element offset of the previous row: the next row of its group is
    // one stride on.
    Value rowStart;
    kb.copyGatheredTileAsync(
        op.getSource(),
        [&](const KernelBuilder::GatherRow &at) {
          if (at.run == 1)
            return pagedRow(kb, op, at, sizes, lastPage, previous);
          if (at.offset % kKeyGroup == 0) {
            // The group's first row: split and read as a lone row.
            auto first = pagedRow(kb, op, KernelBuilder::GatherRow{at.row},
                                  sizes, lastPage, previous);
            rowStart = first.first;
            return first;
          }
          Value valid =
              kb.lt(kb.add(op.getRowBegin(), at.row), op.getRowLimit());
          rowStart = kb.add(rowStart, op.getRowStride());
          return std::make_pair(rowStart, valid);
        },
        tile, /*blocked=*/true);
  }

  /// Each tile row's element offset through the page table: key n at row
  /// page·size + n mod size. Rows at or past the limit read page slot 0 of
  /// the sequence (never past its table row) and copy nothing. A thread's
  /// rows follow each other by a constant step: the first is split by the
  /// f64 reciprocal, the next ones step on from it; keys, slots and pages
  /// in i32 (the runtime keeps max_pages·page_size below 2^31), the pool's
  /// row and the element offset in 64 bits.
  static void copyPagedRows(KernelBuilder &kb, ag::AsyncCopyOp op,
                            const SharedTile &tile, const PageSizes &sizes) {
    Value lastPage = lastPageOf(kb, op);
    // The split of the previous call's key.
    std::pair<Value, Value> previous;
    kb.copyGatheredTileAsync(
        op.getSource(),
        [&](const KernelBuilder::GatherRow &at) {
          return pagedRow(kb, op, at, sizes, lastPage, previous);
        },
        tile);
  }

  /// One gathered row's element offset and whether it is copied; `previous`
  /// holds the split of the previous call's key (stepped on from it where
  /// the row follows it by at most a page).
  static std::pair<Value, Value>
  pagedRow(KernelBuilder &kb, ag::AsyncCopyOp op,
           const KernelBuilder::GatherRow &at, const PageSizes &sizes,
           Value lastPage, std::pair<Value, Value> &previous) {
    Value key = kb.add(op.getRowBegin(), at.row);
    Value valid = kb.lt(key, op.getRowLimit());
    previous = at.step > 0 && at.step <= kKeyGroup && previous.first
                   ? stepKey(kb, previous, at.step, sizes.size32)
                   : splitKey(kb,
                              arith::IndexCastUIOp::create(
                                  kb.b, kb.loc, kb.b.getI32Type(), key),
                              sizes.size32, sizes.inverse);
    auto [pageSlot, inPage] = previous;
    Value page =
        loadPage(kb, op, kb.select(valid, pageSlot, kb.c32(0)), lastPage);
    Value matrixRow = poolRow(kb, op, page, inPage);
    return std::make_pair(
        kb.add(op.getBase(), kb.mul(matrixRow, op.getRowStride())), valid);
  }
};

struct AsyncWaitLowering : TileOpLowering<ag::AsyncWaitOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult
  matchAndRewrite(ag::AsyncWaitOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    builderFor(op, rewriter).waitAsync(op.getPending());
    rewriter.eraseOp(op);
    return success();
  }
};

struct PackedRowsLowering : TileOpLowering<ag::PackedRowsOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult
  matchAndRewrite(ag::PackedRowsOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    KernelBuilder kb = builderFor(op, rewriter);
    TileRows rows = TileRows::packed(kb, op.getBatch(), op.getHeads(),
                                     op.getKvHeads(), op.getNq(),
                                     op.getKeyHead(), op.getQueryBlock(),
                                     op.getBlockRows());
    SmallVector<Value> first{rows.firstQuery()};
    rewriter.replaceOpWithMultiple(op, {rows.values(), first});
    return success();
  }
};

namespace {
/// The (head, query) of a lane's accumulator row r (0, 1) in a score op's
/// fragment: the tile's head at query_begin + row + g + 8r, or with packed
/// rows their (head, query) of tile row row + g + 8r.
struct LaneRows {
  KernelBuilder &kb;
  attn::ScorePosition tile;
  Value row;
  std::optional<TileRows> packed;

  template <typename OpTy>
  LaneRows(KernelBuilder &kb, OpTy op, ValueRange packedValues)
      : kb(kb), tile{op.getBatch(), op.getHead(), op.getQueryBegin(),
                     Value(),       op.getNq(),   op.getNk()},
        row(op.getRow()) {
    if (op.getRows())
      packed = TileRows::fromValues(packedValues);
  }
  std::pair<Value, Value> operator()(int64_t r) const {
    if (packed)
      return packed->at(kb, TileRows::laneRow(kb, row, r));
    return {tile.h, kb.add(tile.q, kb.add(row, kb.add(kb.groupId, r * 8)))};
  }
};
} // namespace

struct AsyncGatherLowering : TileOpLowering<ag::AsyncGatherOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult
  matchAndRewrite(ag::AsyncGatherOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    KernelBuilder kb = copyBuilder(op, rewriter);
    TileRows rows = TileRows::fromValues(adaptor.getRows());
    StridedTensor source{op.getSource(), op.getBatchStride(),
                         op.getHeadStride(), op.getRowStride()};
    kb.copyGatheredTileAsync(
        op.getSource(),
        [&](const KernelBuilder::GatherRow &at) {
          auto [h, q] = rows.at(kb, at.row);
          return std::make_pair(
              source.rowOffset(kb, source.headBase(kb, op.getBatch(), h), q),
              rows.valid(kb, at.row));
        },
        sharedTile(op.getTile(), adaptor.getTile()));
    rewriter.eraseOp(op);
    return success();
  }
};

struct WarpRowOffsetLowering : TileOpLowering<ag::WarpRowOffsetOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult
  matchAndRewrite(ag::WarpRowOffsetOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    KernelBuilder kb = builderFor(op, rewriter);
    rewriter.replaceOp(op, kb.mul(kb.warp, 16));
    return success();
  }
};

struct LoadOperandALowering : TileOpLowering<ag::LoadOperandAOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult
  matchAndRewrite(ag::LoadOperandAOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    KernelBuilder kb = builderFor(op, rewriter);
    SharedTile tile = sharedTile(op.getTile(), adaptor.getTile());
    SmallVector<Value> frags;
    const int64_t k = kb.plan.mmaK();
    for (int64_t ks = 0; ks < op.getFragment().getType().getCols() / k; ++ks)
      llvm::append_range(frags, kb.loadA(tile, op.getRow(), ks * k));
    // TF32: Q is rounded once, not at each key tile's Q·Kᵀ (MmaQKLowering).
    if (kb.plan.isF32() && kb.plan.tf32)
      for (Value &f : frags)
        f = arith::BitcastOp::create(rewriter, op.getLoc(),
                                     rewriter.getF32Type(),
                                     kb.splitTf32(f).front());
    rewriter.replaceOpWithMultiple(op, {frags});
    return success();
  }
};

struct FillLowering : TileOpLowering<ag::FillOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult
  matchAndRewrite(ag::FillOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    SmallVector<Value> values(op.getResult().getType().getLaneValueCount(),
                              adaptor.getValue().front());
    rewriter.replaceOpWithMultiple(op, {values});
    return success();
  }
};

struct KeyBoundsLowering : TileOpLowering<ag::KeyBoundsOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult
  matchAndRewrite(ag::KeyBoundsOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    KernelBuilder kb = builderFor(op, rewriter);
    Value first = op.getBlockBegin() ? op.getBlockBegin() : op.getQueryBegin();
    LaneRows lanes(kb, op, adaptor.getRows());
    // The block's last query: its last row's, or its last head's.
    auto lastQuery = [&]() {
      return lanes.packed ? lanes.packed->lastQuery(kb)
                          : kb.add(first, op.getBlockRows() - 1);
    };
    RowKeyBounds bounds = rowKeyBounds(
        kb, lanes.tile, first, [&](int64_t r) { return lanes(r).second; },
        lastQuery);
    SmallVector<Value> values{bounds.tileHi};
    ag::KeyBoundsType type = op.getBounds().getType();
    if (type.getLeft())
      values.append({bounds.lo[0], bounds.lo[1], bounds.tileLo});
    if (type.getRight())
      values.append({bounds.hi[0], bounds.hi[1]});
    if (llvm::is_contained(values, Value()))
      return rewriter.notifyMatchFailure(op, "mask without the band's edges");
    rewriter.replaceOpWithMultiple(op, {values});
    return success();
  }
};

struct MmaQKLowering : TileOpLowering<ag::MmaQKOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult
  matchAndRewrite(ag::MmaQKOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    KernelBuilder kb = builderFor(op, rewriter);
    ag::SharedTileType keyType = op.getKey().getType();
    const int64_t dPad = (keyType.getCols() + 15) / 16 * 16;
    const int64_t bkv = keyType.getRows();
    const int64_t k = kb.plan.mmaK();
    SmallVector<Value> s(bkv / 8 * 4, kb.f32(0));
    SharedTile kt = sharedTile(op.getKey(), adaptor.getKey());
    bool queryInRegisters = !op.getQueryRow();
    ValueRange qFrags = adaptor.getQuery();
    // f32: each k8 step's operands split once into TF32 registers; a
    // TF32 Q in registers was rounded when it was loaded.
    auto operand = [&](ArrayRef<Value> x) {
      return kb.plan.isF32() ? kb.splitTf32(x) : SmallVector<Value, 8>(x);
    };
    auto queryOperand = [&](ArrayRef<Value> x) {
      if (!kb.plan.isF32() || !kb.plan.tf32)
        return operand(x);
      SmallVector<Value, 8> bits;
      for (Value v : x)
        bits.push_back(arith::BitcastOp::create(rewriter, op.getLoc(),
                                                rewriter.getI32Type(), v));
      return bits;
    };
    auto mma = [&](ArrayRef<Value> a, ArrayRef<Value> bf, int64_t n8) {
      MutableArrayRef<Value> c = MutableArrayRef<Value>(s).slice(n8 * 4, 4);
      kb.plan.isF32() ? kb.mmaTf32(a, operand(bf), c) : kb.mma(a, bf, c);
    };
    for (int64_t ks = 0; ks < dPad / k; ++ks) {
      SmallVector<Value, 8> a =
          queryInRegisters
              ? queryOperand(SmallVector<Value, 4>(qFrags.slice(ks * 4, 4)))
              : operand(kb.loadA(sharedTile(op.getQuery(), qFrags),
                                 op.getQueryRow(), ks * k));
      for (int64_t np = 0; np < bkv / 16; ++np) {
        SmallVector<Value, 4> bf =
            kb.loadBFromNMajor(kt, kb.idx(np * 16), ks * k);
        mma(a, {bf[0], bf[1]}, 2 * np);
        mma(a, {bf[2], bf[3]}, 2 * np + 1);
      }
    }
    rewriter.replaceOpWithMultiple(op, {s});
    return success();
  }
};

/// The mod's ops applied to each score of the lane's rows.
static void applyMod(KernelBuilder &kb, MutableArrayRef<Value> s,
              const LaneRows &lanes, ag::ScoreModOp op) {
  applyScoreMod(kb, s, lanes.tile, lanes, op.getKeyBegin(), op.getScale(),
                op.getQueryAnchored());
}
static void applyMod(KernelBuilder &kb, MutableArrayRef<Value> s,
              const LaneRows &lanes, ag::MaskModOp op) {
  applyMaskMod(kb, s, lanes.tile, lanes, op.getKeyBegin());
}

/// score_mod and mask_mod. The ops are built outside the rewriter: the score
/// builder's GPU math rewrites the ops it has just built (Softmax.cpp:
/// lowerScoreModMath) and the predicate builder clones the region's ops,
/// every one of them already legal.
template <typename ModOp>
struct ModLowering : TileOpLowering<ModOp> {
  using TileOpLowering<ModOp>::TileOpLowering;
  using OneToNOpAdaptor =
      typename OpConversionPattern<ModOp>::OneToNOpAdaptor;
  LogicalResult
  matchAndRewrite(ModOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    OpBuilder b(op);
    KernelBuilder kb = this->builderFor(op, b);
    SmallVector<Value> s(adaptor.getScores());
    LaneRows lanes(kb, op, adaptor.getRows());
    applyMod(kb, s, lanes, op);
    rewriter.replaceOpWithMultiple(op, {s});
    return success();
  }
};

struct ScoreModShiftLowering : TileOpLowering<ag::ScoreModShiftOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult
  matchAndRewrite(ag::ScoreModShiftOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    // Built outside the rewriter, as score_mod's ops are (ModLowering).
    OpBuilder b(op);
    KernelBuilder kb = builderFor(op, b);
    LaneRows lanes(kb, op, adaptor.getRows());
    Value shift[2];
    scoreModRowShift(kb, lanes.tile, lanes, op.getScale(), shift);
    SmallVector<Value> rows{shift[0], shift[1]};
    rewriter.replaceOpWithMultiple(op, {rows});
    return success();
  }
};

struct MaskLowering : TileOpLowering<ag::MaskOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult
  matchAndRewrite(ag::MaskOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    KernelBuilder kb = builderFor(op, rewriter);
    RowKeyBounds bounds =
        unpackKeyBounds(adaptor.getBounds(), op.getBounds().getType());
    if (op.getEveryElement()) { // its key offset made opaque by the caller
      SmallVector<Value> s(adaptor.getScores());
      maskScores(kb, s, bounds, op.getKeyBegin());
      rewriter.replaceOpWithMultiple(op, {s});
      return success();
    }
    // The key offset goes through an opaque copy: otherwise LLVM splits the
    // loop at the causal diagonal and the two copies spill at D = 128.
    Value maskKey = kb.opaqueIndex(op.getKeyBegin());
    int64_t width = op.getScores().getType().getCols();
    SmallVector<Value> s = kb.maskUnlessInside(
        tileInside(kb, bounds, maskKey, width), adaptor.getScores(),
        [&](SmallVector<Value> &masked) {
          maskScores(kb, masked, bounds, maskKey);
        });
    rewriter.replaceOpWithMultiple(op, {s});
    return success();
  }
};

struct OnlineSoftmaxLowering : TileOpLowering<ag::OnlineSoftmaxOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult
  matchAndRewrite(ag::OnlineSoftmaxOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    KernelBuilder kb(rewriter, op.getLoc(), planFree());
    ValueRange m = adaptor.getMax(), l = adaptor.getSum();
    SoftmaxState state{{m[0], m[1]}, {l[0], l[1]}};
    SmallVector<Value> s(adaptor.getScores()), acc(adaptor.getAcc());
    FloatAttr lazy = op.getLazyRescaleLog2Attr();
    SmallVector<Value> scales;
    for (ValueRange scale : adaptor.getScaleLog2())
      scales.push_back(scale.front());
    IntegerAttr block = op.getScaleBlockAttr();
    IntegerAttr poly = op.getPolyExp2Attr();
    onlineSoftmaxUpdate(kb, s, acc, state, scales, block ? block.getInt() : 0,
                        lazy ? lazy.getValueAsDouble() : 0.0,
                        poly ? poly.getInt() : 0);
    SmallVector<Value> newMax{state.rowMax[0], state.rowMax[1]};
    SmallVector<Value> newSum{state.rowSum[0], state.rowSum[1]};
    rewriter.replaceOpWithMultiple(op, {s, newMax, newSum, acc});
    return success();
  }
};

/// acc += P·V in TF32 m16n8k8 steps. P's n8 tile of scores is the A
/// operand as it stands, its keys taken in the order 2t, 2t + 1 → k t, t + 4
/// (a0..a3 = c0, c2, c1, c3); V's B registers follow that order
/// (KernelBuilder::loadTf32BFromKMajor).
static void accumulatePVTf32(KernelBuilder &kb, ValueRange p,
                             const SharedTile &vt, int64_t keys, int64_t dv,
                             Value first, MutableArrayRef<Value> acc) {
  for (int64_t kk = 0; kk < keys / 8; ++kk) {
    ValueRange c = p.slice(kk * 4, 4);
    SmallVector<Value, 8> a = kb.splitTf32({c[0], c[2], c[1], c[3]});
    for (int64_t n = 0; n < llvm::divideCeil(dv, 8); ++n) {
      Value col = first ? kb.add(first, n * 8) : kb.idx(n * 8);
      kb.mmaTf32(a, kb.splitTf32(kb.loadTf32BFromKMajor(vt, kk * 8, col)),
                 acc.slice(n * 4, 4));
    }
  }
}

struct MmaPVLowering : TileOpLowering<ag::MmaPVOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult
  matchAndRewrite(ag::MmaPVOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    KernelBuilder kb = builderFor(op, rewriter);
    ag::SharedTileType valueType = op.getValue().getType();
    // The accumulator's columns: Dv, or a split backward's slice from
    // first_column.
    const int64_t dv = op.getAcc().getType().getCols();
    const int64_t dvPad = (dv + 15) / 16 * 16;
    Value first = op.getFirstColumn();
    SharedTile vt = sharedTile(op.getValue(), adaptor.getValue());
    ValueRange p = adaptor.getProbs();
    SmallVector<Value> acc(adaptor.getAcc());
    if (kb.plan.isF32()) {
      accumulatePVTf32(kb, p, vt, valueType.getRows(), dv, first, acc);
      rewriter.replaceOpWithMultiple(op, {acc});
      return success();
    }
    for (int64_t kk = 0; kk < valueType.getRows() / 16; ++kk) {
      ValueRange p0 = p.slice(kk * 8, 4), p1 = p.slice(kk * 8 + 4, 4);
      SmallVector<Value, 4> a{kb.pack(p0[0], p0[1]), kb.pack(p0[2], p0[3]),
                              kb.pack(p1[0], p1[1]), kb.pack(p1[2], p1[3])};
      for (int64_t dp = 0; dp < dvPad / 16; ++dp) {
        Value col = first ? kb.add(first, dp * 16) : kb.idx(dp * 16);
        SmallVector<Value, 4> bf = kb.loadBFromKMajor(vt, kk * 16, col);
        kb.mma(a, {bf[0], bf[1]}, MutableArrayRef<Value>(acc).slice(dp * 8, 4));
        // n8 tiles wholly past the columns are not accumulated.
        if (dp * 16 + 8 < dv)
          kb.mma(a, {bf[2], bf[3]},
                 MutableArrayRef<Value>(acc).slice(dp * 8 + 4, 4));
      }
    }
    rewriter.replaceOpWithMultiple(op, {acc});
    return success();
  }
};

struct FinalizeSoftmaxLowering : TileOpLowering<ag::FinalizeSoftmaxOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult
  matchAndRewrite(ag::FinalizeSoftmaxOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    KernelBuilder kb(rewriter, op.getLoc(), planFree());
    ValueRange m = adaptor.getMax(), l = adaptor.getSum();
    SoftmaxState state{{m[0], m[1]}, {l[0], l[1]}};
    Value invSum[2], lse[2];
    ValueRange sink = adaptor.getSink(), shift = adaptor.getShift();
    Value shifts[2] = {shift.empty() ? Value() : shift[0],
                       shift.empty() ? Value() : shift[1]};
    finalizeSoftmax(kb, state, invSum, lse, sink.empty() ? Value() : sink[0],
                    shift.empty() ? nullptr : shifts);
    SmallVector<Value> inv{invSum[0], invSum[1]}, lses{lse[0], lse[1]};
    rewriter.replaceOpWithMultiple(op, {inv, lses});
    return success();
  }
};

/// store_output of packed rows: each lane row at its (head, query)'s row of
/// the f32 partials and LSE, padding rows and rows past Nq skipped.
static void storePackedRows(KernelBuilder &kb, ag::StoreOutputOp op,
                            ValueRange acc, ValueRange invSum, ValueRange lse,
                            const TileRows &rows) {
  OpBuilder &b = kb.b;
  const int64_t dv = op.getAcc().getType().getCols();
  for (int64_t r = 0; r < 2; ++r) {
    Value tileRow = TileRows::laneRow(kb, op.getRow(), r);
    auto [h, q] = rows.at(kb, tileRow);
    Value rowValid = rows.valid(kb, tileRow);
    Value row = rows.globalRow(kb, h, q);
    if (op.getSplit())
      row = kb.add(rows.splitRowBase(kb, op.getSplit(),
                                     kb.toIndex(op.getBatches())),
                   row);
    row = kb.add(op.getLseBase(), row);
    auto ifOp = scf::IfOp::create(b, kb.loc, rowValid, false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&ifOp.getThenRegion().front());
    Value rowOff = kb.add(op.getOutputBase(), kb.mul(row, dv));
    for (int64_t n = 0, e = llvm::divideCeil(dv, 8); n < e; ++n) {
      Value lo = arith::MulFOp::create(b, kb.loc, acc[n * 4 + 2 * r], invSum[r]);
      Value hi =
          arith::MulFOp::create(b, kb.loc, acc[n * 4 + 2 * r + 1], invSum[r]);
      storeColumnPairF32(kb, op.getOutput(), rowOff, n, dv, lo, hi);
    }
    Value first = arith::CmpIOp::create(b, kb.loc, arith::CmpIPredicate::eq,
                                        kb.threadInGroup, kb.idx(0));
    auto lseIf = scf::IfOp::create(b, kb.loc, first, false);
    b.setInsertionPointToStart(&lseIf.getThenRegion().front());
    memref::StoreOp::create(b, kb.loc, lse[r], op.getLseOut(), ValueRange{row});
  }
}

struct StoreOutputLowering : TileOpLowering<ag::StoreOutputOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult
  matchAndRewrite(ag::StoreOutputOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    KernelBuilder kb = builderFor(op, rewriter);
    if (op.getRows()) {
      storePackedRows(kb, op, adaptor.getAcc(), adaptor.getInvSum(),
                      adaptor.getLse(), TileRows::fromValues(adaptor.getRows()));
      rewriter.eraseOp(op);
      return success();
    }
    if (op.getStaging()) {
      storeOutputStaged(kb, op, adaptor.getAcc(), adaptor.getInvSum(),
                        adaptor.getLse());
      rewriter.eraseOp(op);
      return success();
    }
    Location loc = op.getLoc();
    ValueRange acc = adaptor.getAcc();
    ValueRange invSum = adaptor.getInvSum(), lse = adaptor.getLse();
    const int64_t dv = op.getAcc().getType().getCols();
    Value rowStride = op.getOutputRowStride();
    for (int64_t r = 0; r < 2; ++r) {
      Value row = kb.add(op.getQueryBegin(),
                         kb.add(op.getRow(), kb.add(kb.groupId, r * 8)));
      auto ifOp = scf::IfOp::create(rewriter, loc, kb.lt(row, op.getNq()),
                                    /*withElseRegion=*/false);
      OpBuilder::InsertionGuard g(rewriter);
      rewriter.setInsertionPointToStart(&ifOp.getThenRegion().front());
      Value rowOff = rowStride
                         ? kb.add(op.getOutputBase(), kb.mul(row, rowStride))
                         : kb.add(op.getOutputBase(), kb.mul(row, dv));
      for (int64_t n = 0, e = llvm::divideCeil(dv, 8); n < e; ++n) {
        Value lo = arith::MulFOp::create(rewriter, loc, acc[n * 4 + 2 * r],
                                         invSum[r]);
        Value hi = arith::MulFOp::create(rewriter, loc, acc[n * 4 + 2 * r + 1],
                                         invSum[r]);
        if (rowStride)
          storeColumnPair(kb, op.getOutput(), rowOff, n, dv, dv, lo, hi);
        else
          storeColumnPairF32(kb, op.getOutput(), rowOff, n, dv, lo, hi);
      }
      Value first = arith::CmpIOp::create(rewriter, loc,
                                          arith::CmpIPredicate::eq,
                                          kb.threadInGroup, kb.idx(0));
      auto lseIf = scf::IfOp::create(rewriter, loc, first, false);
      rewriter.setInsertionPointToStart(&lseIf.getThenRegion().front());
      memref::StoreOp::create(rewriter, loc, lse[r], op.getLseOut(),
                              ValueRange{kb.add(op.getLseBase(), row)});
    }
    rewriter.eraseOp(op);
    return success();
  }
};

struct TransposeFp8TileLowering : TileOpLowering<ag::TransposeFp8TileOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult
  matchAndRewrite(ag::TransposeFp8TileOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    KernelBuilder kb = builderFor(op, rewriter);
    kb.smem = op.getSmem();
    transposeVTile(kb, op.getVBase(), op.getVtBase(), op.getRows(),
                   op.getCols(), op.getFirstWarp(), op.getWarps());
    rewriter.eraseOp(op);
    return success();
  }
};

/// The warpgroup roles as one branch on tid / 128: warpgroup 0 lowers its
/// registers and runs the producer, the others raise theirs and run the
/// consumers with their index. The bodies need no plan: this runs before
/// the tile ops' conversion, on every kernel.
static void lowerWarpSpecialize(ag::WarpSpecializeOp op) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  auto idx = [&](int64_t v) {
    return arith::ConstantIndexOp::create(b, loc, v).getResult();
  };
  Value tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
  Value group = arith::DivUIOp::create(b, loc, tid, idx(128));
  Value isProducer = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                                           group, idx(0));
  // Each role first sets its register budget; a consumer's block argument
  // is its index among the consumer warpgroups.
  inlineRoles(b, loc, isProducer, op.getProducerBlock(), op.getConsumerBlock(),
              [&](OpBuilder &at, Block &role, bool producer) {
                NVVM::SetMaxRegisterOp::create(
                    at, loc,
                    producer ? op.getProducerRegisters()
                             : op.getConsumerRegisters(),
                    producer ? NVVM::SetMaxRegisterAction::decrease
                             : NVVM::SetMaxRegisterAction::increase);
                if (role.getNumArguments() && !role.getArgument(0).use_empty())
                  role.getArgument(0).replaceAllUsesWith(
                      arith::SubIOp::create(at, loc, group, idx(1)));
              });
  op.erase();
}

struct ConvertAttnGPUToNVVMPass final
    : fa::impl::ConvertAttnGPUToNVVMPassBase<ConvertAttnGPUToNVVMPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = &getContext();
    // The GPU path lowers every attn op on the way here; one left behind
    // would be a kernel silently missing.
    WalkResult left = module.walk([](Operation *op) {
      if (!isa<attn::AttnDialect>(op->getDialect()))
        return WalkResult::advance();
      op->emitOpError("was not lowered to GPU kernels (run "
                      "convert-attn-to-gpu on the tiled form first)");
      return WalkResult::interrupt();
    });
    if (left.wasInterrupted())
      return signalPassFailure();
    // Anchoring a mod whose q_idx enters otherwise would be a wrong answer.
    WalkResult unanchorable = module.walk([](ag::ScoreModOp op) {
      if (!op.getQueryAnchored() ||
          attn::scoreModQueryAdditive(op.getScoreMod()))
        return WalkResult::advance();
      op.emitOpError("is query_anchored, but q_idx does not enter its "
                     "score_mod as an added term");
      return WalkResult::interrupt();
    });
    if (unanchorable.wasInterrupted())
      return signalPassFailure();
    SmallVector<ag::WarpSpecializeOp> roles;
    module.walk([&](ag::WarpSpecializeOp op) { roles.push_back(op); });
    for (ag::WarpSpecializeOp op : roles)
      lowerWarpSpecialize(op);
    SmallVector<ag::ProducerWarpOp> producers;
    module.walk([&](ag::ProducerWarpOp op) { producers.push_back(op); });
    for (ag::ProducerWarpOp op : producers)
      lowerProducerWarp(op);
    KernelLowerings kernels;
    bool planFreeOps = false;
    WalkResult walk = module.walk([&](gpu::GPUFuncOp func) {
      // (A builder's kernel may hold tile ops that need no plan.) A wgmma
      // kernel is a builder's, with its own lane ids.
      bool tileLevel = false, wgmma = false;
      func.walk([&](Operation *op) {
        bool planFree = isPlanFreeTileOp(op);
        planFreeOps |= planFree;
        tileLevel |= isa<ag::AttnGPUDialect>(op->getDialect()) && !planFree;
        wgmma |= isa<ag::WgmmaQKOp>(op);
      });
      if (!tileLevel)
        return WalkResult::advance();
      FailureOr<KernelPlan> plan =
          wgmma ? wgmmaKernelPlan(func) : tileKernelPlan(func);
      if (failed(plan))
        return WalkResult::interrupt();
      auto &k = kernels[func];
      k = std::make_unique<KernelLowering>();
      k->plan = *plan;
      if (failed(laneIds(func, *k, wgmma)))
        return WalkResult::interrupt();
      func->removeAttr(attn::kKernelPlanAttr);
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return signalPassFailure();
    if (kernels.empty() && !planFreeOps)
      return;

    TypeConverter converter;
    addTileTypeConversions(converter);
    ConversionTarget target(*ctx);
    target.addIllegalDialect<ag::AttnGPUDialect>();
    target.markUnknownOpDynamicallyLegal([](Operation *) { return true; });
    RewritePatternSet patterns(ctx);
    scf::populateSCFStructuralTypeConversionsAndLegality(converter, patterns,
                                                         target);
    patterns.add<SharedMemoryLowering, SharedTileLowering, AsyncCopyLowering,
                 AsyncWaitLowering, PackedRowsLowering, AsyncGatherLowering,
                 WarpRowOffsetLowering, LoadOperandALowering, FillLowering,
                 KeyBoundsLowering, MmaQKLowering, ModLowering<ag::ScoreModOp>,
                 ScoreModShiftLowering,
                 ModLowering<ag::MaskModOp>, MaskLowering, OnlineSoftmaxLowering,
                 MmaPVLowering, FinalizeSoftmaxLowering, StoreOutputLowering,
                 TransposeFp8TileLowering>(
        converter, ctx, kernels);
    populateBackwardTileLowering(patterns, converter, kernels);
    populateRingLowering(patterns, converter, kernels);
    populateWgmmaLowering(patterns, converter);
    if (failed(applyPartialConversion(module, target, std::move(patterns))))
      return signalPassFailure();
    // No fragment outlives the tile level: the casts between the wgmma
    // kernels' builder code and their tile ops' lane values fold in pairs.
    SmallVector<UnrealizedConversionCastOp> casts;
    module.walk([&](UnrealizedConversionCastOp cast) {
      auto isTileType = llvm::IsaPred<ag::FragmentType, ag::KeyBoundsType>;
      if (llvm::any_of(cast->getOperandTypes(), isTileType) ||
          llvm::any_of(cast->getResultTypes(), isTileType))
        casts.push_back(cast);
    });
    SmallVector<UnrealizedConversionCastOp> unfolded;
    reconcileUnrealizedCasts(casts, &unfolded);
    if (!unfolded.empty()) {
      unfolded.front().emitOpError("expected the lane values of a fragment "
                                   "or key bounds, left after the tile "
                                   "level's lowering");
      return signalPassFailure();
    }
  }
};
} // namespace

FailureOr<KernelPlan> mlir::fa::gpu_lowering::resolveTilePlan(
    gpu::GPUFuncOp func, DictionaryAttr planAttr, bool backward, Type elemType,
    int64_t headDim, int64_t headDimV, const attn::ScoreSpec &spec) {
  std::string error;
  FailureOr<KernelPlan> plan =
      resolveKernelPlan(backward, elemType, headDim, headDimV, spec,
                        kernelPlanOptions(planAttr), error);
  if (failed(plan))
    return func.emitOpError(error);
  if (auto name = planAttr.getAs<StringAttr>("score_mod"))
    plan->scoreModName = name.str();
  if (auto name = planAttr.getAs<StringAttr>("mask_mod"))
    plan->maskModName = name.str();
  auto tag = planAttr.getAs<StringAttr>("tag");
  if (!tag || tag.getValue() != plan->tag())
    return func.emitOpError("expected the kernel plan to name kernel ")
           << plan->tag() << ", got " << tag;
  return plan;
}
