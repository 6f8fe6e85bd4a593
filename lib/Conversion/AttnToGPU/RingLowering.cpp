//===- RingLowering.cpp - the producer warp and its rings -------*- C++ -*-===//
//
// Lowers attn-gpu-warp-specialize's ops: attn_gpu.producer_warp becomes a
// branch on the warp index, the ring ops mbarrier instructions on the
// barriers after the kernel's tiles (inline PTX on 32-bit shared
// addresses: the copies signal with cp.async.mbarrier.arrive.noinc, which
// no dialect has), attn_gpu.tma_copy one thread's expect_tx and TMA boxes,
// attn_gpu.page_walk the table reads of a paged TMA tile, attn_gpu.ring_arrive
// one thread's arrival after its warp's copies.
//
//===----------------------------------------------------------------------===//

#include "TileLowering.h"
#include "VarlenKernel.h"
#include "Wgmma.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

using namespace mlir;
using namespace mlir::fa;
using namespace mlir::fa::gpu_lowering;
namespace ag = mlir::fa::attn_gpu;

void mlir::fa::gpu_lowering::lowerProducerWarp(ag::ProducerWarpOp op) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  Value tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
  Value warp = arith::DivUIOp::create(
      b, loc, tid, arith::ConstantIndexOp::create(b, loc, 32));
  Value isProducer = arith::CmpIOp::create(
      b, loc, arith::CmpIPredicate::eq, warp,
      arith::ConstantIndexOp::create(b, loc, op.getConsumerWarps()));
  // The consumers' CTA barriers (Q's) wait for their own warps only.
  int64_t consumerThreads = op.getConsumerWarps() * 32;
  op.getConsumerBlock().walk([&](gpu::BarrierOp barrier) {
    OpBuilder at(barrier);
    namedBarrier(at, barrier.getLoc(), "bar.sync", 1, consumerThreads);
    barrier.erase();
  });
  // The producer's tensor maps into the TMA unit's cache before its first
  // box: the descriptor fetch leaves the first tile's latency.
  SetVector<Value> maps;
  op.getProducerBlock().walk(
      [&](ag::TmaCopyOp copy) { maps.insert(copy.getTensorMap()); });
  OpBuilder atStart = OpBuilder::atBlockBegin(&op.getProducerBlock());
  for (Value map : maps)
    prefetchTensorMapAt(atStart, loc, map);
  inlineRoles(b, loc, isProducer, op.getProducerBlock(), op.getConsumerBlock());
  op.erase();
}

void mlir::fa::gpu_lowering::inlineRoles(
    OpBuilder &b, Location loc, Value isProducer, Block &producer,
    Block &consumer,
    function_ref<void(OpBuilder &, Block &role, bool producer)> begin) {
  auto roles = scf::IfOp::create(b, loc, isProducer, /*withElseRegion=*/true);
  OpBuilder::InsertionGuard guard(b);
  for (auto [role, into, isProducerRole] :
       {std::make_tuple(&producer, &roles.getThenRegion().front(), true),
        std::make_tuple(&consumer, &roles.getElseRegion().front(), false)}) {
    b.setInsertionPointToStart(into);
    if (begin)
      begin(b, *role, isProducerRole);
    into->getOperations().splice(into->getTerminator()->getIterator(),
                                 role->getOperations());
  }
}

namespace {

/// `text` with 32-bit operands `operands` ("r"), ordered against the
/// kernel's other memory accesses.
void ringPtx(KernelBuilder &kb, StringRef text, ValueRange operands) {
  std::string constraints;
  for (size_t i = 0; i < operands.size(); ++i)
    constraints += "r,";
  constraints += "~{memory}";
  inlinePtx(kb.b, kb.loc, text, operands, constraints);
}

/// The shared address (i32) of barrier `index` (index) of the ring whose
/// barriers start at byte `at`.
Value barrierAddress(KernelBuilder &kb, int64_t at, Value index) {
  OpBuilder &b = kb.b;
  Type i32 = b.getI32Type();
  Value base = arith::TruncIOp::create(b, kb.loc, i32, sharedAddress(kb));
  Value offset = kb.toI32(kb.add(kb.mul(index, 8), kb.idx(at)));
  return arith::AddIOp::create(b, kb.loc, base, offset);
}

/// A ring op's slot, and the parity (i32) of the phase that its use of the
/// slot completes (`round` 0: BarrierRing's full parity) or that the previous
/// round's completed (1: its empty parity).
template <typename OpTy>
std::pair<Value, Value> slotAndParity(KernelBuilder &kb, OpTy op,
                                      Value iteration, int64_t round) {
  BarrierRing ring{static_cast<int64_t>(op.getSlots())};
  Value parity = round ? ring.emptyParity(kb, iteration)
                       : ring.fullParity(kb, iteration);
  return {ring.slot(kb, iteration),
          arith::ExtUIOp::create(kb.b, kb.loc, kb.b.getI32Type(), parity)};
}

constexpr StringLiteral kWaitPtx =
    "{\n.reg .pred p;\nfa_ring_wait:\n"
    "mbarrier.try_wait.parity.shared::cta.b64 p, [$0], $1;\n"
    "@!p bra fa_ring_wait;\n}";

struct RingInitLowering : TileOpLowering<ag::RingInitOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult
  matchAndRewrite(ag::RingInitOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    KernelBuilder kb = builderFor(op, rewriter);
    auto first = scf::IfOp::create(
        rewriter, op.getLoc(),
        arith::CmpIOp::create(rewriter, op.getLoc(), arith::CmpIPredicate::eq,
                              kb.tid, kb.idx(0)),
        /*withElseRegion=*/false);
    OpBuilder::InsertionGuard g(rewriter);
    rewriter.setInsertionPointToStart(&first.getThenRegion().front());
    int64_t slots = op.getSlots();
    for (int64_t i = 0; i < 2 * slots; ++i) {
      int64_t arrivals = i < slots ? op.getProducers() : op.getConsumers();
      ringPtx(kb,
              ("mbarrier.init.shared::cta.b64 [$0], " + Twine(arrivals) + ";")
                  .str(),
              barrierAddress(kb, op.getAt(), kb.idx(i)));
    }
    rewriter.eraseOp(op);
    return success();
  }
};

/// The four uses of a slot: the barrier (full or empty), the round its
/// phase parity counts, and the instruction.
template <typename OpTy, bool Empty, int64_t Round>
struct RingUseLowering : TileOpLowering<OpTy> {
  using TileOpLowering<OpTy>::TileOpLowering;
  LogicalResult
  matchAndRewrite(OpTy op, typename TileOpLowering<OpTy>::OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    KernelBuilder kb = this->builderFor(op, rewriter);
    auto [slot, parity] =
        slotAndParity(kb, op, adaptor.getIteration().front(), Round);
    Value index = Empty ? kb.add(slot, kb.idx(op.getSlots())) : slot;
    Value at = barrierAddress(kb, op.getAt(), index);
    if constexpr (std::is_same_v<OpTy, ag::RingCommitOp>)
      ringPtx(kb, "cp.async.mbarrier.arrive.noinc.shared::cta.b64 [$0];", at);
    else if constexpr (std::is_same_v<OpTy, ag::RingReleaseOp>)
      ringPtx(kb, "mbarrier.arrive.shared::cta.b64 _, [$0];", at);
    else
      ringPtx(kb, kWaitPtx, {at, parity});
    rewriter.eraseOp(op);
    return success();
  }
};

/// One thread arms the slot's full barrier with the tile's bytes, then
/// loads each 64-column slab as a box of the 4-D map (paged: each 16-key
/// group of each slab, at its walked page); the boxes complete their bytes
/// on that barrier.
struct TmaCopyLowering : TileOpLowering<ag::TmaCopyOp> {
  using TileOpLowering::TileOpLowering;
  static constexpr int64_t kElemBytes = 2; // f16 / bf16 tiles

  LogicalResult
  matchAndRewrite(ag::TmaCopyOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    KernelBuilder kb = builderFor(op, rewriter);
    Location loc = op.getLoc();
    SharedTile tile = sharedTile(op.getTile(), adaptor.getTile());
    BarrierRing ring{static_cast<int64_t>(op.getSlots())};
    Value full = barrierAddress(
        kb, op.getAt(), ring.slot(kb, adaptor.getIteration().front()));
    auto issuer = scf::IfOp::create(
        rewriter, loc,
        arith::CmpIOp::create(rewriter, loc, arith::CmpIPredicate::eq, kb.tid,
                              kb.idx(op.getThread())),
        /*withElseRegion=*/false);
    OpBuilder::InsertionGuard g(rewriter);
    rewriter.setInsertionPointToStart(&issuer.getThenRegion().front());
    ringPtx(kb,
            ("mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], " +
             Twine(tile.rows * tile.cols * kElemBytes) + ";")
                .str(),
            full);
    Value map = LLVM::PtrToIntOp::create(rewriter, loc, rewriter.getI64Type(),
                                         adaptor.getTensorMap().front());
    Value row = adaptor.getRow().front();
    SmallVector<Value> coords;
    for (ValueRange c : adaptor.getCoords())
      coords.push_back(kb.toI32(c.front()));
    if (op.getPages().empty()) {
      coords.insert(coords.begin(), kb.toI32(row));
      issueBoxes(kb, map, tile, /*firstRow=*/0, tile.rows, coords, full);
    } else {
      // A box per 16-key group at (offset_g, head, page_g).
      SmallVector<Value> pages;
      for (ValueRange p : adaptor.getPages())
        pages.push_back(p.front());
      for (int64_t g = 0; 2 * g < static_cast<int64_t>(pages.size()); ++g)
        issueBoxes(kb, map, tile, g * kPagedTmaBoxRows, kPagedTmaBoxRows,
                   {pages[2 * g + 1], coords.front(), pages[2 * g]}, full);
    }
    rewriter.eraseOp(op);
    return success();
  }

  /// A box per 64-column slab of tile rows [firstRow, firstRow + rows) at
  /// map coordinates (64·slab, outer...).
  static void issueBoxes(KernelBuilder &kb, Value map, const SharedTile &tile,
                         int64_t firstRow, int64_t rows,
                         ArrayRef<Value> outer, Value full) {
    OpBuilder &b = kb.b;
    Value smem =
        arith::TruncIOp::create(b, kb.loc, b.getI32Type(), sharedAddress(kb));
    for (int64_t slab = 0; slab < tile.cols / 64; ++slab) {
      Value elem = kb.add(tile.base, slab * tile.rows * 64 + firstRow * 64);
      Value dst = arith::AddIOp::create(b, kb.loc, smem,
                                        kb.toI32(kb.mul(elem, kElemBytes)));
      SmallVector<Value> operands{
          dst, map, arith::ConstantIntOp::create(b, kb.loc, slab * 64, 32)};
      llvm::append_range(operands, outer);
      operands.push_back(full);
      inlinePtx(b, kb.loc,
                "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::"
                "complete_tx::bytes [$0], [$1, {$2, $3, $4, $5}], [$6];",
                operands, "r,l,r,r,r,r,r,~{memory}");
    }
  }
};

/// The table walk: group g's key, row + 16g held below the limit, lies in
/// table slot key / size at offset key mod size; one i32 division for the
/// first group, the next ones step on (16 <= size: at most one wrap). i32
/// is enough: the runtime keeps max_pages·page_size below 2^31. The pages
/// are clamped into [0, count) as the cp.async gather clamps them.
struct PageWalkLowering : TileOpLowering<ag::PageWalkOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult
  matchAndRewrite(ag::PageWalkOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    KernelBuilder kb = builderFor(op, rewriter);
    OpBuilder &b = kb.b;
    Location loc = op.getLoc();
    constexpr int64_t group = kPagedTmaBoxRows;
    Value size = kb.toI32(op.getPageSize());
    Value lastPage = kb.toI32(kb.sub(op.getNumPages(), kb.idx(1)));
    Value last = kb.toI32(kb.sub(op.getLimit(), kb.idx(1)));
    Value key = kb.toI32(op.getRow());
    Value slot = arith::DivUIOp::create(b, loc, key, size);
    Value inPage = arith::RemUIOp::create(b, loc, key, size);
    SmallVector<Value> walk;
    for (int64_t g = 0; g < static_cast<int64_t>(op.getGroups()); ++g) {
      if (g) {
        inPage = arith::AddIOp::create(b, loc, inPage, kb.c32(group));
        Value wrap = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::uge,
                                           inPage, size);
        inPage = kb.select(wrap, arith::SubIOp::create(b, loc, inPage, size),
                           inPage);
        slot = arith::AddIOp::create(
            b, loc, slot, arith::ExtUIOp::create(b, loc, b.getI32Type(), wrap));
      }
      // A group past the limit reads the last key's slot.
      Value past = arith::CmpIOp::create(
          b, loc, arith::CmpIPredicate::ugt,
          arith::AddIOp::create(b, loc, key, kb.c32(g * group)), last);
      Value read = kb.select(
          past, arith::DivUIOp::create(b, loc, last, size), slot);
      Value raw = loadSequenceOffset(b, loc, op.getPageTable(),
                                     kb.add(op.getFirst(), kb.toIndex(read)));
      walk.push_back(arith::MinSIOp::create(
          b, loc, arith::MaxSIOp::create(b, loc, raw, kb.c32(0)), lastPage));
      walk.push_back(inPage);
    }
    rewriter.replaceOp(op, walk);
    return success();
  }
};

/// The producer warp's lanes have waited for their copies; after the
/// warp's barrier (the lanes' writes visible to each other) one thread
/// arrives on the slot's full barrier.
struct RingArriveLowering : TileOpLowering<ag::RingArriveOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult
  matchAndRewrite(ag::RingArriveOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    KernelBuilder kb = builderFor(op, rewriter);
    Location loc = op.getLoc();
    BarrierRing ring{static_cast<int64_t>(op.getSlots())};
    Value full = barrierAddress(
        kb, op.getAt(), ring.slot(kb, adaptor.getIteration().front()));
    ringPtx(kb, "bar.warp.sync -1;", {});
    auto arriver = scf::IfOp::create(
        rewriter, loc,
        arith::CmpIOp::create(rewriter, loc, arith::CmpIPredicate::eq, kb.tid,
                              kb.idx(op.getThread())),
        /*withElseRegion=*/false);
    OpBuilder::InsertionGuard g(rewriter);
    rewriter.setInsertionPointToStart(&arriver.getThenRegion().front());
    ringPtx(kb, "mbarrier.arrive.shared::cta.b64 _, [$0];", full);
    rewriter.eraseOp(op);
    return success();
  }
};

} // namespace

void mlir::fa::gpu_lowering::populateRingLowering(
    RewritePatternSet &patterns, const TypeConverter &converter,
    KernelLowerings &kernels) {
  MLIRContext *ctx = patterns.getContext();
  patterns.add<RingInitLowering,
               RingUseLowering<ag::RingAcquireOp, /*Empty=*/true, 1>,
               RingUseLowering<ag::RingCommitOp, /*Empty=*/false, 0>,
               RingUseLowering<ag::RingWaitOp, /*Empty=*/false, 0>,
               RingUseLowering<ag::RingReleaseOp, /*Empty=*/true, 0>,
               TmaCopyLowering, PageWalkLowering, RingArriveLowering>(
      converter, ctx, kernels);
}
