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

#include "KeyLoop.h"

#include "fa/Dialect/AttnGPU/IR/AttnGPU.h"
#include "fa/Dialect/Attn/Transforms/Transforms.h"

#include "mlir/IR/Dominance.h"
#include "mlir/IR/IRMapping.h"

namespace mlir::fa::attn_gpu {
#define GEN_PASS_DEF_ATTNGPUPIPELINEPASS
#include "fa/Dialect/AttnGPU/Transforms/Passes.h.inc"
} // namespace mlir::fa::attn_gpu

using namespace mlir;
using namespace mlir::fa;
using namespace mlir::fa::attn_gpu;
namespace ag = mlir::fa::attn_gpu;

namespace {

/// Rewrites one matched loop into its `stages`-deep pipeline.
class LoopPipeliner {
public:
  LoopPipeliner(UnpipelinedLoop &m, const RingLayout &rings)
      : m(m), loop(m.loop), stages(rings.stages), rings(rings), b(loop) {}

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
  const RingLayout &rings;
  OpBuilder b;
  Value stage, next;
};

Value LoopPipeliner::ringSlot(ag::SharedTileOp tile, Value slot) {
  return rings.slotTile(b, tile, slot);
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
  FailureOr<SmallVector<UnpipelinedLoop>> matched = matchKeyLoops(func);
  if (failed(matched))
    return failure();
  SmallVector<UnpipelinedLoop> &loops = *matched;
  if (loops.empty())
    return success();
  FailureOr<RingLayout> rings = RingLayout::grow(func, loops, stages);
  if (failed(rings))
    return failure();
  for (UnpipelinedLoop &m : loops)
    if (failed(LoopPipeliner(m, *rings).run()))
      return failure();
  rings->moveOtherTiles(func);
  return success();
}

struct AttnGPUPipelinePass final
    : ag::impl::AttnGPUPipelinePassBase<AttnGPUPipelinePass> {
  void runOnOperation() override {
    WalkResult walk = getOperation().walk([](gpu::GPUFuncOp func) {
      int64_t stages = planStages(func);
      if (stages < 2)
        return WalkResult::advance();
      return succeeded(pipelineKernel(func, stages))
                 ? WalkResult::advance()
                 : WalkResult::interrupt();
    });
    if (walk.wasInterrupted())
      signalPassFailure();
  }
};

} // namespace
