//===- HopperFp8.h - the fp8 e4m3 pieces of the wgmma forward ---*- C++ -*-===//
//
// What the fp8 forward (FA3's) adds to the wgmma forward (HopperForward.h):
// e4m3 wgmma (m64nNk32, both operands K-major), P rounded to e4m3 in the
// register layout of wgmma's A operand, and V transposed in shared memory
// by the producer warpgroup's spare warps, since an fp8 B operand must be
// K-major.
//
// P without data movement: lane (g, t) holds S columns 8n + 2t, +1 of each
// n8 tile (Wgmma.h), but a k32 step of an 8-bit A takes columns 4t..4t+3
// and 16 + 4t..19 + 4t of its rows. The lane's own four values of tiles
// 4kk and 4kk + 1 fill the first register pair, those of 4kk + 2 and
// 4kk + 3 the second; position 16c + 4t + i of a k32 step then holds key
// 16c + 2t + {0, 1, 8, 9}[i], and the transpose writes V's rows into Vᵀ in
// that same order (P·V sums over keys in any order).
//
//===----------------------------------------------------------------------===//

#ifndef FA_LIB_CONVERSION_ATTNTOGPU_HOPPERFP8_H
#define FA_LIB_CONVERSION_ATTNTOGPU_HOPPERFP8_H

#include "Wgmma.h"

namespace mlir::fa::gpu_lowering {

/// Warps 1-3 of the producer warpgroup transpose V (warp 0 holds the TMA
/// thread).
constexpr int64_t kFp8TransposeWarps = 3;
constexpr int64_t kFp8TransposeThreads = kFp8TransposeWarps * 32;
/// fp8: the producer warpgroup's transposing warps need more than 24
/// registers; 40·128 + 2·232·128 = 168·384.
constexpr int32_t kFp8ProducerRegs = 40;
/// The fp8 backward's transposing warps also load the row statistics (40
/// spill 84 B): 56·128 + 2·224·128 = 168·384.
constexpr int32_t kFp8BackwardProducerRegs = 56;
/// 16-key × 32-column units a transposing warp moves per loop trip, their
/// loads issued together: the transposer is bound by shared-memory latency
/// (4 rather than 1: +5-14% on the fp8 forward, PERF.md; 8 spill).
constexpr int64_t kFp8TransposeUnits = 4;

/// Four f32 → one i32 of e4m3 bytes (round to nearest even, saturated to
/// ±448), x0 in the lowest byte.
Value packE4M3x4(KernelBuilder &kb, Value x0, Value x1, Value x2, Value x3);

/// An m64nN f32 accumulator (N/2 values) rounded to e4m3 (satfinite) as the
/// A registers of N/32 k32 steps, keys permuted as the file comment says.
SmallVector<Value> packFp8A(KernelBuilder &kb, ArrayRef<Value> c);

/// Transposes V of one ring slot into Vᵀ for P·V (called by each thread of
/// warps 1-3 of the producer warpgroup): attn_gpu.transpose_fp8_tile's
/// lowering. V [bkv keys][Dv] is the TMA tile:
/// 128 B rows of 128 columns in slabs of bkv rows from byte `vBase`; Vᵀ
/// [Dv][bkv = 128 key positions] is 128 B rows from byte `vtBase`, both
/// 128 B-swizzled (byte offsets from the shared buffer's base).
/// A warp moves 16-key × 32-column units: ldmatrix.trans of four 8 × 8 b16
/// matrices (keys as rows), two byte permutes per matrix pair, stmatrix of
/// the four Vᵀ row chunks; both hit 8 distinct 16-byte bank groups a matrix.
/// Warps firstWarp … firstWarp + warps − 1 share the units (the forward's
/// 1-3).
void transposeVTile(KernelBuilder &kb, Value vBase, Value vtBase,
                    int64_t blockKV, int64_t headDimV, int64_t firstWarp = 1,
                    int64_t warps = kFp8TransposeWarps);

/// Emits `fa_quantize_amax_<tag>` and `fa_quantize_<tag>` into `module`
/// (QuantizeKernel.cpp): attn.quantize of plan.quantize's inputs, Hadamard
/// rotation optional, for the fp8 forward beside them. Grid (ceil(N/64), H,
/// B) of kQuantizeThreads.
void buildQuantizeKernels(OpBuilder &b, Location loc, gpu::GPUModuleOp module,
                          const KernelPlan &plan);

} // namespace mlir::fa::gpu_lowering

#endif // FA_LIB_CONVERSION_ATTNTOGPU_HOPPERFP8_H
