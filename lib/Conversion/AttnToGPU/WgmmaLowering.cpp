//===- WgmmaLowering.cpp - the wgmma GEMMs and ping-pong turns --*- C++ -*-===//
//
// Lowers the wgmma kernels' tile ops in place: attn_gpu.wgmma_qk and
// attn_gpu.wgmma_pv to wgmma.mma_async (Wgmma.h; an accumulator fragment
// becomes the lane's N/2 f32 values), attn_gpu.turn_begin / turn_end to the
// named barriers of the ping-pong. They need no kernel plan: the operand
// type and the accumulator's width are the op's own. With fill and the
// online softmax's ops (lowered in ConvertAttnGPUToNVVM.cpp) they are the
// plan-free tile ops a wgmma kernel's builder emits among its own code.
// Also the wgmma forward's epilogue staged in shared memory
// (attn_gpu.store_output `staged`), which ConvertAttnGPUToNVVM.cpp's
// store_output lowering hands here.
//
//===----------------------------------------------------------------------===//

#include "HopperFp8.h"
#include "TileLowering.h"
#include "Wgmma.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

using namespace mlir;
using namespace mlir::fa;
using namespace mlir::fa::gpu_lowering;
namespace ag = mlir::fa::attn_gpu;

namespace {

/// The one value each operand of a 1:1-converted variadic group lowers to.
SmallVector<Value> flat(ArrayRef<ValueRange> operands) {
  SmallVector<Value> values;
  for (ValueRange v : operands)
    values.append(v.begin(), v.end());
  return values;
}

/// A plan that says only what the wgmma builders read: the operand type.
KernelPlan operandPlan(Type operandType) {
  KernelPlan plan;
  plan.elemType = operandType;
  return plan;
}

struct WgmmaQKLowering : OpConversionPattern<ag::WgmmaQKOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(ag::WgmmaQKOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    KernelPlan plan = operandPlan(op.getOperandType());
    KernelBuilder kb(rewriter, op.getLoc(), plan);
    int64_t n = op.getScores().getType().getCols();
    SmallVector<Value> q = flat(adaptor.getQueryDescriptors());
    SmallVector<Value> k = flat(adaptor.getKeyDescriptors());
    // K-major: A row-major, B column-major; MN-major the other way round.
    using NVVM::MMALayout;
    MMALayout layoutA = op.getMnMajor() ? MMALayout::col : MMALayout::row;
    MMALayout layoutB = op.getMnMajor() ? MMALayout::row : MMALayout::col;
    Value s = issueWgmmaShared(kb, n, q, k, layoutA, layoutB);
    rewriter.replaceOpWithMultiple(
        op, {unpackStruct(rewriter, op.getLoc(), s, n / 2)});
    return success();
  }
};

struct WgmmaPVLowering : OpConversionPattern<ag::WgmmaPVOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(ag::WgmmaPVOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    KernelPlan plan = operandPlan(op.getOperandType());
    KernelBuilder kb(rewriter, op.getLoc(), plan);
    SmallVector<Value> acc = issueWgmmaRegisterA(
        kb, flat(adaptor.getProbs()), flat(adaptor.getValueDescriptors()),
        SmallVector<Value>(adaptor.getAcc()));
    rewriter.replaceOpWithMultiple(op, {acc});
    return success();
  }
};

/// turn_begin (Sync) waits on barrier 1 (consumer 0) or 2; turn_end arrives
/// on the other one.
template <typename TurnOp, bool Sync>
struct TurnLowering : OpConversionPattern<TurnOp> {
  using OpConversionPattern<TurnOp>::OpConversionPattern;
  LogicalResult
  matchAndRewrite(TurnOp op, typename TurnOp::Adaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    auto ifOp = scf::IfOp::create(rewriter, loc, adaptor.getFirst(),
                                  /*withElseRegion=*/true);
    StringRef barrier = Sync ? "bar.sync" : "bar.arrive";
    OpBuilder::InsertionGuard g(rewriter);
    rewriter.setInsertionPointToStart(&ifOp.getThenRegion().front());
    namedBarrier(rewriter, loc, barrier, Sync ? 1 : 2, kConsumerThreads);
    rewriter.setInsertionPointToStart(&ifOp.getElseRegion().front());
    namedBarrier(rewriter, loc, barrier, Sync ? 2 : 1, kConsumerThreads);
    rewriter.eraseOp(op);
    return success();
  }
};

} // namespace

bool mlir::fa::gpu_lowering::isPlanFreeTileOp(Operation *op) {
  return isa<ag::WgmmaQKOp, ag::WgmmaPVOp, ag::TurnBeginOp, ag::TurnEndOp,
             ag::FillOp, ag::OnlineSoftmaxOp, ag::FinalizeSoftmaxOp>(op);
}

const KernelPlan &mlir::fa::gpu_lowering::planFree() {
  static const KernelPlan plan;
  return plan;
}

/// attn_gpu.store_output staged in shared memory (the wgmma forward's
/// epilogue, `staged in %smem group %consumer`).
void mlir::fa::gpu_lowering::storeOutputStaged(KernelBuilder &kb,
                                               attn_gpu::StoreOutputOp op,
                                               ValueRange acc,
                                               ValueRange invSum,
                                               ValueRange lse) {
  OpBuilder &b = kb.b;
  Location loc = kb.loc;
  Value consumer = op.getStagingGroup(), smem = op.getStaging();
  Value oMem = op.getOutput(), lseMem = op.getLseOut();
  Value qRowsBase = op.getLseBase(), oBase = op.getOutputBase();
  Value rowBase = op.getRow(), qBegin = op.getQueryBegin(), nq = op.getNq();
  Value rowStride = op.getOutputRowStride();
  const int64_t dv = op.getAcc().getType().getCols(), bq = kb.plan.blockQ;
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
        kb.storePair(kb.truncPair(lo, hi), smem, kb.divui(bytes, 2));
      }
    }
  }
  for (int64_t r = 0; r < 2; ++r) {
    Value row = kb.add(qBegin, rowL[r]);
    auto lseIf = scf::IfOp::create(
        b, loc,
        arith::AndIOp::create(b, loc, kb.eq(kb.threadInGroup, kb.idx(0)),
                              kb.lt(row, nq)),
        false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&lseIf.getThenRegion().front());
    memref::StoreOp::create(b, loc, lse[r], lseMem,
                            ValueRange{kb.add(qRowsBase, row)});
  }
  // Only this warpgroup's 128 threads meet: named barrier 3 + consumer, in
  // a branch per consumer (the id is an immediate).
  {
    OpBuilder::InsertionGuard g(b);
    const int64_t consumers = bq / kRowsPerConsumer;
    for (int64_t c = 0; c + 1 < consumers; ++c) {
      auto ifOp = scf::IfOp::create(b, loc, kb.eq(consumer, kb.idx(c)),
                                    /*withElseRegion=*/true);
      b.setInsertionPointToStart(&ifOp.getThenRegion().front());
      namedBarrier(b, loc, "bar.sync", 3 + c, 128);
      b.setInsertionPointToStart(&ifOp.getElseRegion().front());
    }
    namedBarrier(b, loc, "bar.sync", 2 + consumers, 128);
  }
  // Each thread moves 16 B chunks: consecutive threads take consecutive
  // chunks of a row, so a warp writes whole 256 B rows.
  const int64_t chunksPerRow = dv / 8;
  const int64_t chunks = kRowsPerConsumer * chunksPerRow;
  Value t = kb.remui(kb.tid, 128);
  Value row0 = kb.mul(consumer, kRowsPerConsumer);
  auto vecTy = VectorType::get({8}, kb.plan.elemType);
  for (int64_t k = 0; k < chunks / 128; ++k) {
    Value q = kb.add(t, k * 128);
    Value rowInWg = kb.divui(q, chunksPerRow);
    Value cc = kb.remui(q, chunksPerRow);
    Value r = kb.add(row0, rowInWg);
    Value swz =
        arith::XOrIOp::create(b, loc, kb.remui(cc, 8), kb.remui(rowInWg, 8));
    Value bytes = kb.add(
        kb.add(kb.mul(kb.divui(cc, 8), slabBytes), kb.mul(r, kSlabRowBytes)),
        kb.mul(swz, 16));
    Value v = vector::LoadOp::create(
        b, loc, vecTy, smem, ValueRange{kb.divui(bytes, 2)},
        /*nontemporal=*/false, llvm::MaybeAlign(16));
    Value row = kb.add(qBegin, r);
    auto ifOp = scf::IfOp::create(b, loc, kb.lt(row, nq), false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&ifOp.getThenRegion().front());
    Value off = kb.add(kb.add(oBase, kb.mul(row, rowStride)), kb.mul(cc, 8));
    vector::StoreOp::create(b, loc, v, oMem, ValueRange{off},
                            /*nontemporal=*/false, llvm::MaybeAlign(16));
  }
}

void mlir::fa::gpu_lowering::populateWgmmaLowering(
    RewritePatternSet &patterns, const TypeConverter &converter) {
  patterns.add<WgmmaQKLowering, WgmmaPVLowering,
               TurnLowering<ag::TurnBeginOp, true>,
               TurnLowering<ag::TurnEndOp, false>>(converter,
                                                   patterns.getContext());
}
