//===- KeyLoop.h - the unpipelined key loop of the tile level ---*- C++ -*-===//
//
// The shape convert-attn-to-gpu writes each key-block loop in (Passes.td):
// a barrier, then a copy of every tile the iteration reads, each reader
// after an async_wait and a barrier. The schedule passes match it here and
// rewrite it: attn-gpu-pipeline into a cp.async ring, attn-gpu-warp-
// specialize into a producer warp and its consumers.
//
//===----------------------------------------------------------------------===//

#ifndef FA_LIB_DIALECT_ATTNGPU_TRANSFORMS_KEYLOOP_H
#define FA_LIB_DIALECT_ATTNGPU_TRANSFORMS_KEYLOOP_H

#include "fa/Dialect/AttnGPU/IR/AttnGPU.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <map>

namespace mlir::fa::attn_gpu {

/// One tile the loop copies each iteration: its copy, the tile (a
/// shared_tile without stage), the op that reads it and the wait before
/// that read.
struct CopiedTile {
  AsyncCopyOp copy;
  SharedTileOp tile;
  Operation *reader;
  AsyncWaitOp wait;
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

/// The unpipelined loops of `func` with copies; failure (diagnosed) if a
/// loop with copies has another shape.
FailureOr<SmallVector<UnpipelinedLoop>> matchKeyLoops(gpu::GPUFuncOp func);

/// Elements of one slot of the ring that replaces `tile`.
inline int64_t slotElements(SharedTileOp tile) {
  return tile.getType().getElements();
}

/// The copied tiles of a kernel's key loops as rings of `stages` slots in
/// its shared buffer: a tile's offset moves by (stages − 1) times the ring
/// tiles below it.
struct RingLayout {
  int64_t stages;
  std::map<int64_t, int64_t> slotElems; // a ring's old offset → slot size
  DenseMap<int64_t, int64_t> newOffset; // a ring's old offset → its new one

  /// The rings of `loops`' copied tiles; grows the kernel's shared buffer by
  /// them.
  static FailureOr<RingLayout> grow(gpu::GPUFuncOp func,
                                    ArrayRef<UnpipelinedLoop> loops,
                                    int64_t stages);
  /// Where a tile at `offset` lies once the rings have grown.
  int64_t moved(int64_t offset) const;
  /// Slot `slot` (index) of the ring that replaced `tile`, built by `b`.
  SharedTileOp slotTile(OpBuilder &b, SharedTileOp tile, Value slot) const;
  /// Moves the tiles outside the rings (those without stage) behind them,
  /// once the loops' stage-less tiles are gone.
  void moveOtherTiles(gpu::GPUFuncOp func) const;
};

/// The ops of `loop`'s body that `values` are computed from, in body order.
SmallVector<Operation *> bodySlice(scf::ForOp loop, ArrayRef<Value> values);

/// The operands of `copy` other than its tile.
SmallVector<Value> copyOperands(AsyncCopyOp copy);

/// The plan's `stages` of a tile-level kernel (0 without a plan).
int64_t planStages(gpu::GPUFuncOp func);

/// The kernel's one attn_gpu.shared_memory (diagnosed otherwise).
FailureOr<SharedMemoryOp> kernelSharedMemory(gpu::GPUFuncOp func);

} // namespace mlir::fa::attn_gpu

#endif // FA_LIB_DIALECT_ATTNGPU_TRANSFORMS_KEYLOOP_H
