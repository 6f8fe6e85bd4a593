//===- WgmmaLowering.cpp - the wgmma GEMMs and ping-pong turns --*- C++ -*-===//
//
// Lowers the wgmma kernels' tile ops in place: attn_gpu.wgmma_qk and
// attn_gpu.wgmma_pv to wgmma.mma_async (Wgmma.h; an accumulator fragment
// becomes the lane's N/2 f32 values), attn_gpu.turn_begin / turn_end to the
// named barriers of the ping-pong. They need no kernel plan: the operand
// type and the accumulator's width are the op's own. With fill and the
// online softmax's ops (lowered in ConvertAttnGPUToNVVM.cpp) they are the
// plan-free tile ops a wgmma kernel's builder emits among its own code.
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
    Value s = plan.isFp8()
                  ? issueWgmmaSharedFp8(kb, n, q, k)
                  : issueWgmmaShared(kb, n, q, k, layoutA, layoutB);
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

void mlir::fa::gpu_lowering::populateWgmmaLowering(
    RewritePatternSet &patterns, const TypeConverter &converter) {
  patterns.add<WgmmaQKLowering, WgmmaPVLowering,
               TurnLowering<ag::TurnBeginOp, true>,
               TurnLowering<ag::TurnEndOp, false>>(converter,
                                                   patterns.getContext());
}
