//===- AttnGPUPipeline.cpp - attn-gpu-pipeline ------------------*- C++ -*-===//
//
// Software-pipelines the key-block loops of the tile level over the kernel
// plan's `stages` (Passes.td has the shape before and after). The loop
// convert-attn-to-gpu writes copies each tile right before it is read; here
// each copied tile becomes a ring of `stages` slots and its copy runs
// stages − 1 iterations ahead, right after the read that frees the slot.
//
//===----------------------------------------------------------------------===//

#include "fa/Dialect/AttnGPU/Transforms/Passes.h"

#include "fa/Dialect/AttnGPU/IR/AttnGPU.h"
#include "fa/Dialect/Attn/Transforms/Transforms.h"

#include "mlir/Analysis/SliceAnalysis.h"
#include "mlir/IR/Dominance.h"
#include "mlir/IR/IRMapping.h"

namespace mlir::fa::attn_gpu {
#define GEN_PASS_DEF_ATTNGPUPIPELINEPASS
#include "fa/Dialect/AttnGPU/Transforms/Passes.h.inc"
} // namespace mlir::fa::attn_gpu

using namespace mlir;
using namespace mlir::fa;
namespace ag = mlir::fa::attn_gpu;

namespace {

/// One tile the loop copies each iteration: its copy, the tile (a
/// shared_tile without stage), the op that reads it and the wait before
/// that read.
struct CopiedTile {
  ag::AsyncCopyOp copy;
  ag::SharedTileOp tile;
  Operation *reader;
  ag::AsyncWaitOp wait;
};

/// The loop's copied tiles in copy order and the barrier that opens the
/// body, after checking the unpipelined shape of Passes.td (none for a loop
/// without copies or one already pipelined).
struct UnpipelinedLoop {
  scf::ForOp loop;
  gpu::BarrierOp release;
  SmallVector<CopiedTile> tiles;

  static FailureOr<UnpipelinedLoop> match(scf::ForOp loop);
};

/// Elements of one slot of the ring that replaces `tile`.
static int64_t slotElements(ag::SharedTileOp tile) {
  return tile.getType().getRows() * tile.getType().getStride();
}

/// The wait and barrier right before `reader`.
static ag::AsyncWaitOp waitBefore(Operation *reader) {
  auto barrier = dyn_cast_or_null<gpu::BarrierOp>(reader->getPrevNode());
  if (!barrier)
    return {};
  // The tile op of the reader may stand between the barrier and it.
  return dyn_cast_or_null<ag::AsyncWaitOp>(barrier->getPrevNode());
}

/// The ops of `loop`'s body that `values` are computed from, in body order.
static SmallVector<Operation *> bodySlice(scf::ForOp loop,
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
static SmallVector<Value> copyOperands(ag::AsyncCopyOp copy) {
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
  auto copies = body->getOps<ag::AsyncCopyOp>();
  if (llvm::all_of(copies, [](ag::AsyncCopyOp copy) {
        auto tile = copy.getTile().getDefiningOp<ag::SharedTileOp>();
        return tile && tile.getStage();
      }))
    return m;
  for (auto copy : copies) {
    auto tile = copy.getTile().getDefiningOp<ag::SharedTileOp>();
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
    ag::AsyncWaitOp wait = waitBefore(readers[0]);
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

/// Rewrites one matched loop into its `stages`-deep pipeline.
class LoopPipeliner {
public:
  LoopPipeliner(UnpipelinedLoop &m, int64_t stages,
                const DenseMap<int64_t, int64_t> &newOffset)
      : m(m), loop(m.loop), stages(stages), newOffset(newOffset),
        b(loop) {}

  LogicalResult run();

private:
  Value idx(int64_t v) {
    return arith::ConstantIndexOp::create(b, loop.getLoc(), v);
  }
  /// Slot `stage` of the ring that replaced `tile`.
  Value ringSlot(ag::SharedTileOp tile, Value stage);
  /// The coefficient of the induction variable in `v` if `v` is linear in
  /// it (through adds of loop invariants and multiplies by constants).
  std::optional<int64_t> linearCoefficient(Value v);
  /// `v` of iteration j + `ahead`, emitted at the builder's point.
  Value shifted(Value v, int64_t ahead);
  LogicalResult emitPrologue();
  void emitBody();

  UnpipelinedLoop &m;
  scf::ForOp loop;
  int64_t stages;
  const DenseMap<int64_t, int64_t> &newOffset;
  OpBuilder b;
  Value stage, next;
};

Value LoopPipeliner::ringSlot(ag::SharedTileOp tile, Value slot) {
  return ag::SharedTileOp::create(b, tile.getLoc(), tile.getType(), slot,
                                  newOffset.lookup(tile.getOffset()),
                                  b.getI64IntegerAttr(slotElements(tile)));
}

std::optional<int64_t> LoopPipeliner::linearCoefficient(Value v) {
  if (v == loop.getInductionVar())
    return 1;
  if (loop.isDefinedOutsideOfLoop(v))
    return 0;
  auto constant = [](Value x) -> std::optional<int64_t> {
    if (auto c = x.getDefiningOp<arith::ConstantIndexOp>())
      return c.value();
    return std::nullopt;
  };
  if (auto add = v.getDefiningOp<arith::AddIOp>()) {
    auto l = linearCoefficient(add.getLhs());
    auto r = linearCoefficient(add.getRhs());
    if (l && r)
      return *l + *r;
  }
  if (auto mul = v.getDefiningOp<arith::MulIOp>()) {
    auto l = linearCoefficient(mul.getLhs());
    if (auto c = constant(mul.getRhs()); l && c)
      return *l * *c;
  }
  return std::nullopt;
}

Value LoopPipeliner::shifted(Value v, int64_t ahead) {
  if (std::optional<int64_t> coef = linearCoefficient(v)) {
    if (*coef == 0)
      return v;
    return arith::AddIOp::create(b, v.getLoc(), v, idx(*coef * ahead));
  }
  // Recompute v's ops in the body for the later iteration.
  IRMapping map;
  map.map(loop.getInductionVar(),
          arith::AddIOp::create(b, v.getLoc(), loop.getInductionVar(),
                                idx(ahead)));
  for (Operation *op : bodySlice(loop, v))
    b.clone(*op, map);
  return map.lookup(v);
}

LogicalResult LoopPipeliner::emitPrologue() {
  // The last wait ahead of the loop keeps waiting for what it waited for.
  ag::AsyncWaitOp before;
  for (Operation *op = loop->getPrevNode(); op && !before;
       op = op->getPrevNode())
    before = dyn_cast<ag::AsyncWaitOp>(op);
  if (!before)
    return loop.emitOpError("expected an attn_gpu.async_wait ahead of a "
                            "pipelined loop (its prologue's copies go "
                            "before it)");
  int64_t count = m.tiles.size();
  b.setInsertionPoint(before);
  // The copies' operands of iteration i, recomputed from the lower bound.
  SmallVector<Value> operands;
  for (CopiedTile &t : m.tiles)
    llvm::append_range(operands, copyOperands(t.copy));
  SmallVector<Operation *> ordered = bodySlice(loop, operands);
  // What the cloned ops read from outside the loop must exist there.
  SmallVector<Operation *> cloned(ordered);
  for (CopiedTile &t : m.tiles)
    cloned.push_back(t.copy);
  DominanceInfo dom(loop->getParentOp());
  for (Operation *op : cloned)
    for (Value v : op->getOperands())
      if (loop.isDefinedOutsideOfLoop(v) && !dom.properlyDominates(v, before))
        return op->emitOpError("expected the operands of a pipelined copy "
                               "to be defined before the last wait ahead "
                               "of the loop (its prologue's copies go "
                               "there)");
  for (int64_t i = 0; i + 1 < stages; ++i) {
    IRMapping map;
    Value lower = loop.getLowerBound();
    map.map(loop.getInductionVar(),
            i ? arith::AddIOp::create(b, loop.getLoc(), lower, idx(i))
                    .getResult()
              : lower);
    for (Operation *op : ordered)
      b.clone(*op, map);
    for (CopiedTile &t : m.tiles) {
      map.map(t.tile.getResult(), ringSlot(t.tile, idx(i)));
      b.clone(*t.copy, map);
    }
  }
  before.setPending(before.getPending() + count * (stages - 1));
  return success();
}

void LoopPipeliner::emitBody() {
  Location loc = loop.getLoc();
  b.setInsertionPointToStart(loop.getBody());
  Value offset = arith::SubIOp::create(b, loc, loop.getInductionVar(),
                                       loop.getLowerBound());
  stage = arith::RemUIOp::create(b, loc, offset, idx(stages));
  next = stages == 2 ? arith::SubIOp::create(b, loc, idx(1), stage)
                     : arith::RemUIOp::create(
                           b, loc,
                           arith::AddIOp::create(b, loc, stage,
                                                 idx(stages - 1)),
                           idx(stages))
                           .getResult();
  int64_t count = m.tiles.size();
  for (CopiedTile &t : m.tiles) {
    t.wait.setPending(count * (stages - 1) - 1);
    b.setInsertionPoint(t.reader);
    Value slot = ringSlot(t.tile, stage);
    t.reader->replaceUsesOfWith(t.tile, slot);
    // The copy for iteration j + stages − 1, into the slot j − 1 read.
    b.setInsertionPointAfter(t.reader);
    Value into = ringSlot(t.tile, next);
    IRMapping map;
    for (Value operand : t.copy->getOperands())
      if (operand != t.copy.getTile() && !map.contains(operand))
        map.map(operand, shifted(operand, stages - 1));
    map.map(t.tile.getResult(), into);
    b.clone(*t.copy, map);
  }
  for (CopiedTile &t : m.tiles) {
    t.copy.erase();
    t.tile.erase();
  }
  m.release.erase();
}

LogicalResult LoopPipeliner::run() {
  if (failed(emitPrologue()))
    return failure();
  emitBody();
  return success();
}

/// The pipelined loops of one kernel, and its shared buffer grown by their
/// rings: a tile's offset moves by (stages − 1) times the ring tiles below.
static LogicalResult pipelineKernel(gpu::GPUFuncOp func, int64_t stages) {
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
  if (loops.empty())
    return success();
  std::map<int64_t, int64_t> ringElems; // offset → one slot's elements
  for (UnpipelinedLoop &m : loops)
    for (CopiedTile &t : m.tiles)
      ringElems[t.tile.getOffset()] = slotElements(t.tile);
  auto moved = [&](int64_t offset) {
    int64_t below = 0;
    for (auto [ringOffset, elems] : ringElems)
      if (ringOffset < offset)
        below += elems;
    return offset + (stages - 1) * below;
  };
  DenseMap<int64_t, int64_t> newOffset;
  for (auto [offset, elems] : ringElems)
    newOffset[offset] = moved(offset);
  SmallVector<ag::SharedMemoryOp> buffers;
  func.walk([&](ag::SharedMemoryOp op) { buffers.push_back(op); });
  if (buffers.size() != 1)
    return func.emitOpError("expected one attn_gpu.shared_memory in a "
                            "pipelined kernel, got ")
           << buffers.size();
  int64_t grown = 0;
  for (auto [offset, elems] : ringElems)
    grown += (stages - 1) * elems;
  buffers[0].setElements(buffers[0].getElements() + grown);
  for (UnpipelinedLoop &m : loops)
    if (failed(LoopPipeliner(m, stages, newOffset).run()))
      return failure();
  // Tiles outside the rings keep their bytes: those behind move.
  func.walk([&](ag::SharedTileOp tile) {
    if (!tile.getStage())
      tile.setOffset(moved(tile.getOffset()));
  });
  return success();
}

struct AttnGPUPipelinePass final
    : ag::impl::AttnGPUPipelinePassBase<AttnGPUPipelinePass> {
  void runOnOperation() override {
    WalkResult walk = getOperation().walk([](gpu::GPUFuncOp func) {
      auto plan = func->getAttrOfType<DictionaryAttr>(attn::kKernelPlanAttr);
      auto stages = plan ? plan.getAs<IntegerAttr>("stages") : IntegerAttr();
      if (!stages || stages.getInt() < 2)
        return WalkResult::advance();
      return succeeded(pipelineKernel(func, stages.getInt()))
                 ? WalkResult::advance()
                 : WalkResult::interrupt();
    });
    if (walk.wasInterrupted())
      signalPassFailure();
  }
};

} // namespace
