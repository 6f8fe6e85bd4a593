//===- AttnGPUWarpSpecialize.cpp - attn-gpu-warp-specialize -----*- C++ -*-===//
//
// Gives the key loop's copies to a producer warp (Passes.td has the shape
// before and after). The unpipelined loop convert-attn-to-gpu writes is
// split in two: a producer loop that fills a `stages`-slot ring per copied
// tile and signals each slot on an mbarrier, and the consumers' loop, whose
// readers wait for their slot and release it, with no CTA barrier left in
// it. The epilogue after the loop runs on the consumers only.
//
//===----------------------------------------------------------------------===//

#include "fa/Dialect/AttnGPU/Transforms/Passes.h"

#include "KeyLoop.h"

#include "fa/Dialect/Attn/Transforms/Transforms.h"

#include "mlir/IR/IRMapping.h"

namespace mlir::fa::attn_gpu {
#define GEN_PASS_DEF_ATTNGPUWARPSPECIALIZEPASS
#include "fa/Dialect/AttnGPU/Transforms/Passes.h.inc"
} // namespace mlir::fa::attn_gpu

using namespace mlir;
using namespace mlir::fa;
using namespace mlir::fa::attn_gpu;

namespace {

/// Splits one matched key loop between the producer warp and the
/// consumers.
class WarpSpecializer {
public:
  WarpSpecializer(UnpipelinedLoop &m, const RingLayout &rings,
                  ArrayRef<int64_t> barriers)
      : m(m), loop(m.loop), rings(rings), barriers(barriers), b(loop) {}

  /// Builds the producer_warp op of `consumerWarps` consumers in place of
  /// the loop and what follows it.
  void run(int64_t consumerWarps);

private:
  Value idx(int64_t v) {
    return arith::ConstantIndexOp::create(b, loop.getLoc(), v);
  }
  /// The loop's iteration count so far and its ring slot at the builder's
  /// point, for induction variable `iv`.
  std::pair<Value, Value> iterationAndSlot(Value iv);
  Value ringSlot(SharedTileOp tile, Value slot);
  void buildProducer(Block &into);
  void rewriteConsumers();

  UnpipelinedLoop &m;
  scf::ForOp loop;
  const RingLayout &rings;
  ArrayRef<int64_t> barriers; // each copied tile's ring barriers (bytes)
  OpBuilder b;
};

std::pair<Value, Value> WarpSpecializer::iterationAndSlot(Value iv) {
  Location loc = loop.getLoc();
  Value it = arith::SubIOp::create(b, loc, iv, loop.getLowerBound());
  return {it, arith::RemUIOp::create(b, loc, it, idx(rings.stages))};
}

Value WarpSpecializer::ringSlot(SharedTileOp tile, Value slot) {
  return SharedTileOp::create(b, tile.getLoc(), tile.getType(), slot,
                              rings.newOffset.lookup(tile.getOffset()),
                              b.getI64IntegerAttr(slotElements(tile)));
}

/// The producer: per iteration and copied tile, wait for the slot to be
/// free, copy (the warp's lanes), signal it full; at the end, wait for its
/// copies before the warp exits.
void WarpSpecializer::buildProducer(Block &into) {
  Location loc = loop.getLoc();
  b.setInsertionPointToStart(&into);
  auto producer = scf::ForOp::create(b, loc, loop.getLowerBound(),
                                     loop.getUpperBound(), loop.getStep());
  AsyncWaitOp::create(b, loc, 0);
  b.setInsertionPointToStart(producer.getBody());
  auto [it, slot] = iterationAndSlot(producer.getInductionVar());
  IRMapping map;
  map.map(loop.getInductionVar(), producer.getInductionVar());
  for (auto [t, at] : llvm::zip(m.tiles, barriers)) {
    for (Operation *op : bodySlice(loop, copyOperands(t.copy)))
      b.clone(*op, map);
    map.map(t.tile.getResult(), ringSlot(t.tile, slot));
    RingAcquireOp::create(b, loc, it, at, rings.stages);
    Operation *copy = b.clone(*t.copy, map);
    copy->setAttr(AsyncCopyOp::getByWarpAttrName(copy->getName()),
                  b.getUnitAttr());
    RingCommitOp::create(b, loc, it, at, rings.stages);
  }
}

/// The consumers: each reader waits for its slot where it waited for its
/// copy, and releases it once read; the copies and barriers go.
void WarpSpecializer::rewriteConsumers() {
  Location loc = loop.getLoc();
  b.setInsertionPointToStart(loop.getBody());
  auto [it, slot] = iterationAndSlot(loop.getInductionVar());
  for (auto [t, at] : llvm::zip(m.tiles, barriers)) {
    t.wait->getNextNode()->erase(); // the barrier after the wait
    t.wait.erase();
    b.setInsertionPoint(t.reader);
    t.reader->replaceUsesOfWith(t.tile, ringSlot(t.tile, slot));
    RingWaitOp::create(b, loc, it, at, rings.stages);
    b.setInsertionPointAfter(t.reader);
    RingReleaseOp::create(b, loc, it, at, rings.stages);
  }
  for (CopiedTile &t : m.tiles) {
    t.copy.erase();
    t.tile.erase();
  }
  m.release.erase();
}

void WarpSpecializer::run(int64_t consumerWarps) {
  Block *block = loop->getBlock();
  b.setInsertionPoint(loop);
  auto roles = ProducerWarpOp::build(b, loop.getLoc(), consumerWarps);
  Block &consumers = roles.getConsumerBlock();
  consumers.getOperations().splice(consumers.end(), block->getOperations(),
                                   loop->getIterator(),
                                   block->getTerminator()->getIterator());
  buildProducer(roles.getProducerBlock());
  rewriteConsumers();
}

/// The last CTA barrier ahead of `loop` in its block: the rings' barriers
/// are initialised before it, so every thread sees them initialised.
static gpu::BarrierOp barrierAhead(scf::ForOp loop) {
  for (Operation *op = loop->getPrevNode(); op; op = op->getPrevNode())
    if (auto barrier = dyn_cast<gpu::BarrierOp>(op))
      return barrier;
  return {};
}

static LogicalResult specializeKernel(gpu::GPUFuncOp func,
                                      int64_t consumerWarps) {
  FailureOr<SmallVector<UnpipelinedLoop>> matched = matchKeyLoops(func);
  if (failed(matched))
    return failure();
  if (matched->size() != 1)
    return func.emitOpError("expected one key loop with copies for a "
                            "producer warp, got ")
           << matched->size();
  UnpipelinedLoop &m = matched->front();
  if (!isa<gpu::ReturnOp>(m.loop->getBlock()->getTerminator()) ||
      m.loop->getParentOp() != func)
    return m.loop.emitOpError("expected the key loop in the kernel's body "
                              "(the consumers run it and all that follows)");
  gpu::BarrierOp ahead = barrierAhead(m.loop);
  if (!ahead)
    return m.loop.emitOpError("expected a gpu.barrier ahead of the key loop "
                              "(it publishes the rings' barriers)");
  int64_t stages = std::max<int64_t>(planStages(func), 1);
  FailureOr<RingLayout> rings = RingLayout::grow(func, *matched, stages);
  if (failed(rings))
    return failure();
  // The rings' mbarriers follow the tiles.
  SharedMemoryOp buffer = *kernelSharedMemory(func);
  int64_t elemBytes = buffer.getElementType().getIntOrFloatBitWidth() / 8;
  int64_t at = ringBarrierBase(buffer.getElements() * elemBytes);
  SmallVector<int64_t> barriers;
  OpBuilder b(ahead);
  for (size_t i = 0; i < m.tiles.size(); ++i) {
    barriers.push_back(at);
    RingInitOp::create(b, ahead.getLoc(), at, stages, /*producers=*/32,
                       /*consumers=*/consumerWarps * 32);
    at += ringBarrierBytes(stages);
  }
  buffer.setElements(llvm::divideCeil(at, elemBytes));
  WarpSpecializer(m, *rings, barriers).run(consumerWarps);
  rings->moveOtherTiles(func);
  return success();
}

struct AttnGPUWarpSpecializePass final
    : attn_gpu::impl::AttnGPUWarpSpecializePassBase<AttnGPUWarpSpecializePass> {
  void runOnOperation() override {
    WalkResult walk = getOperation().walk([](gpu::GPUFuncOp func) {
      auto plan = func->getAttrOfType<DictionaryAttr>(attn::kKernelPlanAttr);
      if (!plan || !plan.contains("producer_warp"))
        return WalkResult::advance();
      auto warps = plan.getAs<IntegerAttr>("warps");
      if (!warps) {
        func.emitOpError("expected the plan's warps for a producer warp");
        return WalkResult::interrupt();
      }
      return succeeded(specializeKernel(func, warps.getInt()))
                 ? WalkResult::advance()
                 : WalkResult::interrupt();
    });
    if (walk.wasInterrupted())
      signalPassFailure();
  }
};

} // namespace
