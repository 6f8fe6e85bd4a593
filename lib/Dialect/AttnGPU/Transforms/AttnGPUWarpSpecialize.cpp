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
  /// `split` (at or ahead of the loop) and all that follows it.
  void run(int64_t consumerWarps, Operation *split);

private:
  Value idx(int64_t v) {
    return arith::ConstantIndexOp::create(b, loop.getLoc(), v);
  }
  /// The loop's iteration count so far and its ring slot at the builder's
  /// point, for induction variable `iv`.
  std::pair<Value, Value> iterationAndSlot(Value iv);
  Value ringSlot(SharedTileOp tile, Value slot);
  void buildProducer(Block &into, int64_t consumerWarps);
  ValueRange walkPages(CopiedTile &t, IRMapping &map);
  void buildTmaCopy(CopiedTile &t, IRMapping &map, ValueRange pages, Value it,
                    int64_t at, int64_t consumerWarps);
  AsyncCopyOp cloneWarpCopy(CopiedTile &t, IRMapping &map,
                            int64_t consumerWarps);
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
  return rings.slotTile(b, tile, slot);
}

/// The producer: per iteration and copied tile, wait for the slot to be
/// free, copy (the warp's lanes), signal it full; at the end, wait for its
/// copies before the warp exits.
void WarpSpecializer::buildProducer(Block &into, int64_t consumerWarps) {
  Location loc = loop.getLoc();
  b.setInsertionPointToStart(&into);
  // The constants it reads that moved to the consumers (the loop's step).
  IRMapping map;
  auto cloneConstants = [&](ValueRange values) {
    for (Value v : values)
      if (Operation *def = v.getDefiningOp();
          def && def->hasTrait<OpTrait::ConstantLike>() && !map.contains(v) &&
          def->getParentOp() == into.getParentOp())
        b.clone(*def, map);
  };
  cloneConstants(
      {loop.getLowerBound(), loop.getUpperBound(), loop.getStep()});
  auto producer = scf::ForOp::create(
      b, loc, map.lookupOrDefault(loop.getLowerBound()),
      map.lookupOrDefault(loop.getUpperBound()),
      map.lookupOrDefault(loop.getStep()));
  AsyncWaitOp::create(b, loc, 0);
  b.setInsertionPointToStart(producer.getBody());
  auto [it, slot] = iterationAndSlot(producer.getInductionVar());
  map.map(loop.getInductionVar(), producer.getInductionVar());
  // What a copy reads, cloned before its slot's wait; with paged TMA
  // copies, what all copies read and their pages ahead of the first wait
  // (the table's latency overlaps it).
  auto prepare = [&](CopiedTile &t) {
    for (Operation *op : bodySlice(loop, copyOperands(t.copy))) {
      cloneConstants(op->getOperands());
      b.clone(*op, map);
    }
    cloneConstants(t.copy->getOperands());
    map.map(t.tile.getResult(), ringSlot(t.tile, slot));
    return walkPages(t, map);
  };
  bool walkFirst = llvm::any_of(m.tiles, [](CopiedTile &t) {
    return t.copy.getTensorMap() && t.copy.getPageTable();
  });
  SmallVector<ValueRange> walks(m.tiles.size());
  for (auto [t, walk] : llvm::zip(m.tiles, walks))
    if (walkFirst)
      walk = prepare(t);
  for (auto [t, at, walk] : llvm::zip(m.tiles, barriers, walks)) {
    if (!walkFirst)
      walk = prepare(t);
    RingAcquireOp::create(b, loc, it, at, rings.stages);
    if (t.copy.getTensorMap()) {
      buildTmaCopy(t, map, walk, it, at, consumerWarps);
      continue;
    }
    cloneWarpCopy(t, map, consumerWarps);
    RingCommitOp::create(b, loc, it, at, rings.stages);
  }
}

/// The pages of a paged TMA copy's 16-key groups (none for other copies):
/// page sizes are multiples of 16, so a group never straddles a page.
ValueRange WarpSpecializer::walkPages(CopiedTile &t, IRMapping &map) {
  constexpr int64_t kGroupKeys = 16;
  AsyncCopyOp copy = t.copy;
  if (!copy.getTensorMap() || !copy.getPageTable())
    return {};
  int64_t groups =
      cast<SharedTileType>(t.tile.getType()).getRows() / kGroupKeys;
  SmallVector<Type> types(2 * groups, b.getI32Type());
  auto paging = llvm::map_to_vector(
      copy.getPaging(), [&](Value v) { return map.lookupOrDefault(v); });
  return PageWalkOp::create(b, loop.getLoc(), types,
                            map.lookupOrDefault(copy.getPageTable()),
                            paging[0], paging[1], paging[2],
                            map.lookupOrDefault(copy.getRowBegin()),
                            map.lookupOrDefault(copy.getRowLimit()), groups)
      .getWalk();
}

/// The copy of `t` by the producer warp's lanes (cp.async).
AsyncCopyOp WarpSpecializer::cloneWarpCopy(CopiedTile &t, IRMapping &map,
                                           int64_t consumerWarps) {
  auto copy = cast<AsyncCopyOp>(b.clone(*t.copy, map));
  copy.setThreadBegin(consumerWarps * 32);
  copy.setThreadEnd(consumerWarps * 32 + 32);
  return copy;
}

/// The warp's first thread arms the slot and loads it by TMA (paged: from
/// the walked `pages`). A paged tile that ends past the sequence's used
/// length is the warp's cp.async copy instead, zero-filled past it (a
/// page's later rows are stale, and P = 0 times a NaN there would still be
/// NaN); once the copies land, that thread arrives: the one arrival the
/// ring counts either way.
void WarpSpecializer::buildTmaCopy(CopiedTile &t, IRMapping &map,
                                   ValueRange pages, Value it, int64_t at,
                                   int64_t consumerWarps) {
  Location loc = loop.getLoc();
  AsyncCopyOp copy = t.copy;
  SmallVector<Value> coords;
  for (Value c : copy.getMapCoords())
    coords.push_back(map.lookupOrDefault(c));
  Value row = map.lookupOrDefault(copy.getRowBegin());
  Value tile = map.lookup(t.tile.getResult());
  int64_t thread = consumerWarps * 32;
  if (pages.empty()) {
    TmaCopyOp::create(b, loc, map.lookupOrDefault(copy.getTensorMap()), row,
                      coords, ValueRange(), tile, it, at, rings.stages,
                      thread);
    return;
  }
  int64_t rows = cast<SharedTileType>(t.tile.getType()).getRows();
  Value whole = arith::CmpIOp::create(
      b, loc, arith::CmpIPredicate::ule,
      arith::AddIOp::create(b, loc, row, idx(rows)),
      map.lookupOrDefault(copy.getRowLimit()));
  auto ifOp = scf::IfOp::create(b, loc, whole, /*withElseRegion=*/true);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(&ifOp.getThenRegion().front());
  TmaCopyOp::create(b, loc, map.lookupOrDefault(copy.getTensorMap()), row,
                    coords, pages, tile, it, at, rings.stages, thread);
  b.setInsertionPointToStart(&ifOp.getElseRegion().front());
  AsyncCopyOp gather = cloneWarpCopy(t, map, consumerWarps);
  gather.getTensorMapMutable().clear();
  gather.getMapCoordsMutable().clear();
  AsyncWaitOp::create(b, loc, 0);
  RingArriveOp::create(b, loc, it, at, rings.stages, thread);
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

void WarpSpecializer::run(int64_t consumerWarps, Operation *split) {
  Block *block = loop->getBlock();
  b.setInsertionPoint(split);
  auto roles = ProducerWarpOp::build(b, loop.getLoc(), consumerWarps);
  Block &consumers = roles.getConsumerBlock();
  consumers.getOperations().splice(consumers.end(), block->getOperations(),
                                   split->getIterator(),
                                   block->getTerminator()->getIterator());
  // The copies ahead of the loop (Q) are the consumers' alone now.
  for (Operation &op : consumers) {
    if (&op == loop.getOperation())
      break;
    if (auto copy = dyn_cast<AsyncCopyOp>(op)) {
      copy.setThreadBegin(0);
      copy.setThreadEnd(consumerWarps * 32);
    } else if (auto gather = dyn_cast<AsyncGatherOp>(op)) {
      gather.setThreadBegin(0);
      gather.setThreadEnd(consumerWarps * 32);
    }
  }
  buildProducer(roles.getProducerBlock(), consumerWarps);
  rewriteConsumers();
}

/// Where the roles part: at the first copy ahead of the loop (the
/// producer's first copies then overlap the consumers' Q), or at the loop.
/// Fails unless what the producer's loop reads is defined before it.
static FailureOr<Operation *> splitPoint(UnpipelinedLoop &m) {
  Operation *split = m.loop;
  for (Operation *op = m.loop->getPrevNode(); op; op = op->getPrevNode())
    if (isa<AsyncCopyOp, AsyncGatherOp>(op))
      split = op;
  SmallVector<Operation *> producer{m.loop};
  for (CopiedTile &t : m.tiles) {
    llvm::append_range(producer, bodySlice(m.loop, copyOperands(t.copy)));
    producer.push_back(t.copy);
  }
  for (Operation *op : producer)
    for (Value v : op == m.loop.getOperation()
                       ? ValueRange{m.loop.getLowerBound(),
                                    m.loop.getUpperBound(), m.loop.getStep()}
                       : ValueRange(op->getOperands())) {
      Operation *def = v.getDefiningOp();
      // Constants are cloned into the producer.
      if (def && def->getBlock() == split->getBlock() &&
          !def->isBeforeInBlock(split) &&
          !def->hasTrait<OpTrait::ConstantLike>())
        return op->emitOpError("expected what the producer warp reads to be "
                               "defined before the first copy ahead of the "
                               "key loop (where the roles part)");
    }
  return split;
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
  FailureOr<Operation *> split = splitPoint(m);
  if (failed(split))
    return failure();
  int64_t stages = std::max<int64_t>(planStages(func), 1);
  FailureOr<RingLayout> rings = RingLayout::grow(func, *matched, stages);
  if (failed(rings))
    return failure();
  // The rings' mbarriers follow the tiles.
  SharedMemoryOp buffer = *kernelSharedMemory(func);
  int64_t elemBytes = buffer.getElementType().getIntOrFloatBitWidth() / 8;
  int64_t at = ringBarrierBase(buffer.getElements() * elemBytes);
  // Initialised by one thread, published to all by a barrier.
  SmallVector<int64_t> barriers;
  OpBuilder b(*split);
  Location loc = m.loop.getLoc();
  for (CopiedTile &t : m.tiles) {
    barriers.push_back(at);
    // A TMA slot is full when its one thread's boxes land.
    RingInitOp::create(b, loc, at, stages,
                       /*producers=*/t.copy.getTensorMap() ? 1 : 32,
                       /*consumers=*/consumerWarps * 32);
    at += ringBarrierBytes(stages);
  }
  gpu::BarrierOp::create(b, loc);
  buffer.setElements(llvm::divideCeil(at, elemBytes));
  WarpSpecializer(m, *rings, barriers).run(consumerWarps, *split);
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
