//===- KeyLoop.cpp - the unpipelined key loop of the tile level -*- C++ -*-===//

#include "KeyLoop.h"

#include "fa/Dialect/Attn/Transforms/Transforms.h"

#include "mlir/Analysis/SliceAnalysis.h"

using namespace mlir;
using namespace mlir::fa;
using namespace mlir::fa::attn_gpu;

/// The wait and barrier right before `reader`.
static AsyncWaitOp waitBefore(Operation *reader) {
  auto barrier = dyn_cast_or_null<gpu::BarrierOp>(reader->getPrevNode());
  if (!barrier)
    return {};
  // The tile op of the reader may stand between the barrier and it.
  return dyn_cast_or_null<AsyncWaitOp>(barrier->getPrevNode());
}

/// The ops of `loop`'s body that `values` are computed from, in body order.
SmallVector<Operation *>
mlir::fa::attn_gpu::bodySlice(scf::ForOp loop,
                                          ArrayRef<Value> values) {
  SetVector<Operation *> slice;
  BackwardSliceOptions options;
  options.inclusive = true;
  options.omitBlockArguments = true;
  options.filter = [&](Operation *op) {
    return op->getBlock() == loop.getBody();
  };
  for (Value v : values)
    if (Operation *def = v.getDefiningOp();
        def && def->getBlock() == loop.getBody())
      (void)getBackwardSlice(def, &slice, options);
  SmallVector<Operation *> ordered(slice.begin(), slice.end());
  llvm::sort(ordered,
             [](Operation *x, Operation *y) { return x->isBeforeInBlock(y); });
  return ordered;
}

/// The operands of `copy` other than its tile.
SmallVector<Value> mlir::fa::attn_gpu::copyOperands(AsyncCopyOp copy) {
  SmallVector<Value> operands;
  for (Value v : copy->getOperands())
    if (v != copy.getTile())
      operands.push_back(v);
  return operands;
}

FailureOr<UnpipelinedLoop> UnpipelinedLoop::match(scf::ForOp loop) {
  UnpipelinedLoop m{loop, {}, {}};
  Block *body = loop.getBody();
  // A loop whose copies all fill ring slots is pipelined already.
  auto copies = body->getOps<AsyncCopyOp>();
  if (llvm::all_of(copies, [](AsyncCopyOp copy) {
        auto tile = copy.getTile().getDefiningOp<SharedTileOp>();
        return tile && tile.getStage();
      }))
    return m;
  for (auto copy : copies) {
    auto tile = copy.getTile().getDefiningOp<SharedTileOp>();
    if (!tile || tile.getStage() || tile->getBlock() != body)
      return copy.emitOpError("expected a copy into a shared_tile without "
                              "stage defined in the loop body (the "
                              "unpipelined form of attn-gpu-pipeline)");
    SmallVector<Operation *> readers;
    for (Operation *user : tile->getUsers())
      if (user != copy)
        readers.push_back(user);
    if (readers.size() != 1 || readers[0]->getBlock() != body ||
        !copy->isBeforeInBlock(readers[0]))
      return copy.emitOpError("expected its tile to be read by one op after "
                              "it in the loop body, got ")
             << readers.size() << " readers";
    AsyncWaitOp wait = waitBefore(readers[0]);
    if (!wait)
      return readers[0]->emitOpError(
          "expected attn_gpu.async_wait and gpu.barrier right before the "
          "reader of a copied tile");
    // Its operands are recomputed for other iterations.
    for (Operation *op : bodySlice(loop, copyOperands(copy)))
      if (!isPure(op))
        return op->emitOpError("expected pure ops to compute the operands "
                               "of a pipelined copy (they are recomputed "
                               "for later iterations)");
    m.tiles.push_back({copy, tile, readers[0], wait});
  }
  if (m.tiles.empty())
    return m;
  int64_t count = m.tiles.size();
  for (int64_t i = 0; i < count; ++i) {
    CopiedTile &t = m.tiles[i];
    // Copies first, then the readers in the same order.
    if (!m.tiles.back().copy->isBeforeInBlock(t.wait) ||
        (i && !m.tiles[i - 1].reader->isBeforeInBlock(t.wait)))
      return t.reader->emitOpError("expected the readers of the copied "
                                   "tiles after every copy, in copy order");
    if (static_cast<int64_t>(t.wait.getPending()) != count - 1 - i)
      return t.wait.emitOpError("expected to leave in flight only the ")
             << count - 1 - i
             << " copies issued after the tile it waits for, got "
             << t.wait.getPending();
  }
  for (Operation &op : *body) {
    if (&op == m.tiles.front().copy.getOperation())
      break;
    if (auto barrier = dyn_cast<gpu::BarrierOp>(op))
      m.release = barrier;
  }
  if (!m.release)
    return m.tiles.front().copy.emitOpError(
        "expected a gpu.barrier before the loop's first copy (the previous "
        "iteration's readers are done with the tiles)");
  return m;
}

FailureOr<SmallVector<UnpipelinedLoop>>
mlir::fa::attn_gpu::matchKeyLoops(gpu::GPUFuncOp func) {
  SmallVector<UnpipelinedLoop> loops;
  WalkResult walk = func.walk([&](scf::ForOp loop) {
    FailureOr<UnpipelinedLoop> m = UnpipelinedLoop::match(loop);
    if (failed(m))
      return WalkResult::interrupt();
    if (!m->tiles.empty())
      loops.push_back(*m);
    return WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return failure();
  return loops;
}

int64_t mlir::fa::attn_gpu::planStages(gpu::GPUFuncOp func) {
  auto plan = func->getAttrOfType<DictionaryAttr>(attn::kKernelPlanAttr);
  auto stages = plan ? plan.getAs<IntegerAttr>("stages") : IntegerAttr();
  return stages ? stages.getInt() : 0;
}

FailureOr<SharedMemoryOp>
mlir::fa::attn_gpu::kernelSharedMemory(gpu::GPUFuncOp func) {
  SmallVector<SharedMemoryOp> buffers;
  func.walk([&](SharedMemoryOp op) { buffers.push_back(op); });
  if (buffers.size() != 1)
    return func.emitOpError("expected one attn_gpu.shared_memory in a "
                            "kernel with a key-loop schedule, got ")
           << buffers.size();
  return buffers[0];
}

FailureOr<RingLayout> RingLayout::grow(gpu::GPUFuncOp func,
                                       ArrayRef<UnpipelinedLoop> loops,
                                       int64_t stages) {
  FailureOr<SharedMemoryOp> buffer = kernelSharedMemory(func);
  if (failed(buffer))
    return failure();
  RingLayout rings;
  rings.stages = stages;
  for (const UnpipelinedLoop &m : loops)
    for (CopiedTile t : m.tiles)
      rings.slotElems[t.tile.getOffset()] = slotElements(t.tile);
  int64_t grown = 0;
  for (auto [offset, elems] : rings.slotElems) {
    rings.newOffset[offset] = rings.moved(offset);
    grown += (stages - 1) * elems;
  }
  buffer->setElements(buffer->getElements() + grown);
  return rings;
}

int64_t RingLayout::moved(int64_t offset) const {
  int64_t below = 0;
  for (auto [ringOffset, elems] : slotElems)
    if (ringOffset < offset)
      below += elems;
  return offset + (stages - 1) * below;
}

SharedTileOp RingLayout::slotTile(OpBuilder &b, SharedTileOp tile,
                                  Value slot) const {
  return SharedTileOp::create(b, tile.getLoc(), tile.getType(), slot,
                              newOffset.lookup(tile.getOffset()),
                              b.getI64IntegerAttr(slotElements(tile)));
}

void RingLayout::moveOtherTiles(gpu::GPUFuncOp func) const {
  func.walk([&](SharedTileOp tile) {
    if (!tile.getStage())
      tile.setOffset(moved(tile.getOffset()));
  });
}
