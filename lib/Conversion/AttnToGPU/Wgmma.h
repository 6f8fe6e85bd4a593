//===- Wgmma.h - sm_90a warpgroup MMA building blocks -----------*- C++ -*-===//
//
// What the wgmma kernels (HopperForward.h, HopperBackward.h)
// share: shared-memory matrix descriptors of 128 B-swizzled tiles, the
// shared-memory and register-A forms of wgmma.mma_async, the operand fence
// of their accumulators, named barriers.
//
// A wgmma m64nN f32 accumulator is N/2 registers per lane, laid out per warp
// as N/8 mma.sync m16n8 tiles (Fragments.h): lane (g, t) of warp w holds rows
// 16w + g, +8 and columns 8n + 2t, +1 of n8 tile n.
//
// Tiles are 64-column slabs of 128 B rows, 16 B chunk c of row r stored at
// chunk c ^ (r mod 8), each slab 1024 B aligned. Descriptors:
//   K-major operand (rows of k):   +32 B per k16 step inside a slab, +one
//                                  slab per 64 k; SBO = 1024 B (8 rows).
//   MN-major operand ("transposed", rows of k holding m or n):
//                                  LBO = one slab (the next 64 of m or n),
//                                  SBO = 1024 B, +2048 B (16 rows) per k16.
//
//===----------------------------------------------------------------------===//

#ifndef FA_LIB_CONVERSION_ATTNTOGPU_WGMMA_H
#define FA_LIB_CONVERSION_ATTNTOGPU_WGMMA_H

#include "Fragments.h"
#include "TiledLoopNest.h"

#include "fa/Dialect/AttnGPU/IR/AttnGPU.h"

namespace mlir::fa::gpu_lowering {

/// Bytes of one row of a 64-column slab (64 16-bit elements).
constexpr int64_t kSlabRowBytes = 128;
constexpr int64_t kSlabCols = 64;
/// Rows of one consumer warpgroup (a wgmma's M).
constexpr int64_t kRowsPerConsumer = 64;

/// The literal struct of `n` f32 accumulators a wgmma returns.
Type wgmmaAccType(OpBuilder &b, int64_t n);

/// The `n` members of a struct value.
SmallVector<Value> unpackStruct(OpBuilder &b, Location loc, Value s, int64_t n);

/// Passes `vals` through an empty side-effecting asm that claims to rewrite
/// them: reads of wgmma accumulators then cannot move above the
/// `wgmma.wait_group` that makes them valid (CUTLASS's operand fence).
SmallVector<Value> fenceOperands(OpBuilder &b, Location loc,
                                 ArrayRef<Value> vals);

/// Lowers attn_gpu.store_output `staged in %smem group %g` (the wgmma
/// forward's epilogue through its Q slabs) given the lowered fragments.
void storeOutputStaged(KernelBuilder &kb, attn_gpu::StoreOutputOp op,
                       ValueRange acc, ValueRange invSum, ValueRange lse);

/// `bar.sync` or `bar.arrive` on named barrier `id` for `threads` threads.
void namedBarrier(OpBuilder &b, Location loc, StringRef op, int64_t id,
                  int64_t threads);

/// Two f32 → one i32 of two packed 16-bit elements (a wgmma A register).
Value packI32(KernelBuilder &kb, Value lo, Value hi);

/// The descriptor bits shared by every tile of `kb.smem`: 128 B swizzle,
/// SBO = 1024 B, and the buffer's start address.
Value wgmmaDescriptorBase(KernelBuilder &kb);

/// The descriptor of the operand at `byteOffset` (index) of the shared
/// buffer with leading byte offset `lbo`, built from `descBase`.
Value wgmmaDescriptor(KernelBuilder &kb, Value descBase, Value byteOffset,
                      int64_t lbo);

/// `v` (i64) through a side-effecting `mov`, so LLVM cannot reason across
/// it: built inside a loop, what depends on it stays in the loop.
Value opaqueI64(KernelBuilder &kb, Value v);

/// acc = A·B for one m64nN product with both operands in shared memory
/// (descriptor pairs per k step: k16 of 16-bit operands, k32 of an fp8
/// plan's e4m3, both K-major); the first step overwrites the accumulator.
/// Issued only: the caller fences, commits and waits.
Value issueWgmmaShared(KernelBuilder &kb, int64_t n, ArrayRef<Value> aDescs,
                       ArrayRef<Value> bDescs, NVVM::MMALayout layoutA,
                       NVVM::MMALayout layoutB);

/// acc += A·B with A in registers (4 packed registers per k16 step, the
/// accumulator layout of Fragments.h's A) and an MN-major B in shared
/// memory; acc has N/2 values. Issued only. An fp8 plan's: e4m3 A per k32
/// step (HopperFp8.h's packFp8A) and a K-major e4m3 B.
SmallVector<Value> issueWgmmaRegisterA(KernelBuilder &kb, ArrayRef<Value> a,
                                       ArrayRef<Value> bDescs,
                                       ArrayRef<Value> acc);

/// A warp's view of the m64n`cols` f32 accumulator (16 rows of it).
attn_gpu::FragmentType accumulatorType(MLIRContext *ctx, int64_t cols);

/// attn_gpu.wgmma_qk: acc = A·B of one m64n`n` product over descriptor pairs
/// (K-major A and B, or both MN-major), its accumulator fragment (a warp's
/// 16 rows of the warpgroup's 64). The kernel builders issue their
/// shared-memory GEMMs as this tile op; convert-attn-gpu-to-nvvm lowers it
/// with issueWgmmaShared.
Value buildWgmmaQK(KernelBuilder &kb, int64_t n, ArrayRef<Value> aDescs,
                   ArrayRef<Value> bDescs, bool mnMajor = false);

/// attn_gpu.wgmma_pv: acc += A·B with A in registers (issueWgmmaRegisterA's
/// operands), on the lane values `acc`; returns the result's lane values.
SmallVector<Value> buildWgmmaPV(KernelBuilder &kb, ArrayRef<Value> a,
                                ArrayRef<Value> bDescs, ArrayRef<Value> acc);

/// The lane values of an f32 fragment, and the fragment of `cols` columns in
/// `layout` holding `lanes`: casts between a kernel builder's code and the
/// tile ops it emits, which convert-attn-gpu-to-nvvm folds into its
/// lowering's values.
SmallVector<Value> laneValues(OpBuilder &b, Location loc, Value fragment);
Value fragmentOf(OpBuilder &b, Location loc, ArrayRef<Value> lanes,
                 int64_t cols, attn_gpu::FragmentLayout layout);

/// The lane values of an attn_gpu.key_bounds result (tileHi; lo[0], lo[1],
/// tileLo with a lower edge; hi[0], hi[1] with an upper one), their types,
/// and the bounds they make.
SmallVector<Type> keyBoundsLaneTypes(attn_gpu::KeyBoundsType type);
RowKeyBounds unpackKeyBounds(ValueRange lanes, attn_gpu::KeyBoundsType type);
RowKeyBounds keyBoundsLanes(OpBuilder &b, Location loc, Value bounds);

/// Packs an m64nN accumulator (f32, N/2 values) as the A registers of
/// N/16 k16 steps: n8 tiles 2kk and 2kk + 1 in order.
SmallVector<Value> accumulatorToWgmmaA(KernelBuilder &kb, ArrayRef<Value> c);

/// The map parameter `ptr` (!llvm.ptr to a CUtensorMap of docs/ABI.md) as
/// the nvgpu tensor map of (64 columns × `rows` × 1 …) boxes of a `rank`-D
/// map, 128 B swizzle, out-of-bounds elements read as zero.
Value tmaMap(KernelBuilder &kb, Value ptr, int64_t rows, int64_t rank = 3);

/// Prefetches the CUtensorMap of `map` (a tmaMap) into the TMA unit's cache
/// by its generic address. Inline PTX: LLVM 22 lowers the intrinsic on a
/// grid-constant parameter to two prefetches, one per address space.
void prefetchTensorMap(KernelBuilder &kb, Value map);
/// The same for `ptr`, the map parameter itself (an !llvm.ptr).
void prefetchTensorMapAt(OpBuilder &b, Location loc, Value ptr);

/// Expects the bytes of a `rows` × `cols` tile on mbarrier `barrier` of
/// `group` (arrive.expect_tx) and loads it with one TMA box per 64 columns
/// at coordinates (64·slab, row, outer...) into 64-column slabs from shared
/// byte `byteBase` (the layout above): `outer` is {b·H + h} for a 3-D map,
/// {h, b} for a 4-D one.
void tmaLoadTile(KernelBuilder &kb, Value group, Value map, int64_t rows,
                 int64_t cols, Value byteBase, Value row,
                 ArrayRef<Value> outer, Value barrier);

/// The shared-window address (i64) of `kb.smem`'s first byte, what wgmma
/// descriptors and bulk copies take (below 2^32: truncate for `r` operands).
Value sharedAddress(KernelBuilder &kb);

/// A group of `count` mbarriers in shared memory, not yet initialised. The
/// wgmma kernels keep each ring of barriers at consecutive indices of one
/// group and address barrier `first` + slot.
Value createBarrierGroup(KernelBuilder &kb, int64_t count);

/// Initialises barrier `index` of `group` to complete a phase on `arrivals`
/// arrivals (one thread, before a CTA barrier).
void initBarrier(KernelBuilder &kb, Value group, int64_t index,
                 int64_t arrivals);

/// Waits for the phase of parity `parity` of barrier `first` + `slot`.
void waitBarrier(KernelBuilder &kb, Value group, int64_t first, Value slot,
                 Value parity);

/// Arrives (this thread) on barrier `first` + `slot`.
void arriveBarrier(KernelBuilder &kb, Value group, int64_t first, Value slot);

/// Bit 0 of `v` (index) as i1: the parity operand of waitBarrier.
Value phaseParity(KernelBuilder &kb, Value v);

/// A ring of `stages` slots, each with a "full" barrier (completed by the
/// producer's loads) and an "empty" one (completed by the consumers'
/// arrivals): iteration i uses slot i mod stages for the (i / stages)-th
/// time. A fresh barrier passes a wait on the parity before its first
/// phase, so the producer's first round finds every slot empty.
struct BarrierRing {
  int64_t stages;
  Value slot(KernelBuilder &kb, Value iteration) const {
    return kb.remui(iteration, stages);
  }
  /// The phase in which iteration's data lands on its full barrier.
  Value fullParity(KernelBuilder &kb, Value iteration) const {
    return phaseParity(kb, kb.divui(iteration, stages));
  }
  /// The phase in which the consumers of the previous round free the slot.
  Value emptyParity(KernelBuilder &kb, Value iteration) const {
    return phaseParity(kb, kb.add(kb.divui(iteration, stages), 1));
  }
  /// The same for an i32 iteration (the producers' loops count in 32 bits
  /// to fit their 24-40 registers): the slot as an index, parities as i1.
  Value slot32(KernelBuilder &kb, Value iteration) const;
  Value fullParity32(KernelBuilder &kb, Value iteration) const;
  Value emptyParity32(KernelBuilder &kb, Value iteration) const;
};

/// The producer warpgroup's register budget (FA3's 24); the consumers take
/// what it leaves of the CTA's registers at entry (attn_gpu::
/// consumerRegisters: 240 each for two consumer warpgroups, 24·128 +
/// 2·240·128 = 168·384; setmaxnreg.inc waits until the pool has them, and
/// attn_gpu.warp_specialize checks the sum).
constexpr int32_t kProducerRegs = 24;
/// Threads of the two consumer warpgroups (the ping-pong's named barriers).
constexpr int64_t kConsumerThreads = 256;

/// Fills the body of `func`, fa_bwd of docs/ABI.md, with the wgmma main
/// backward (HopperBackwardKernel.cpp), running the query-block loop of
/// `loops` for its key block.
void buildBackwardMainWgmma(KernelBuilder &kb, gpu::GPUModuleOp module,
                            gpu::GPUFuncOp func, const TiledLoopNest &loops);

} // namespace mlir::fa::gpu_lowering

#endif // FA_LIB_CONVERSION_ATTNTOGPU_WGMMA_H
