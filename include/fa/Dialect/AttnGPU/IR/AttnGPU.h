//===- AttnGPU.h - attn_gpu dialect: the GPU tile level ---------*- C++ -*-===//

#ifndef FA_DIALECT_ATTNGPU_IR_ATTNGPU_H
#define FA_DIALECT_ATTNGPU_IR_ATTNGPU_H

#include "fa/Dialect/Attn/IR/Attn.h"

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include <algorithm>

#include "attn_gpu/AttnGPUDialect.h.inc"
#include "attn_gpu/AttnGPUEnums.h.inc"

#define GET_TYPEDEF_CLASSES
#include "attn_gpu/AttnGPUTypes.h.inc"

#define GET_OP_CLASSES
#include "attn_gpu/AttnGPUOps.h.inc"

namespace mlir::fa::attn_gpu {
/// Shared bytes of the mbarriers of one ring of `slots` slots (a full and
/// an empty barrier per slot, 8 bytes each; attn_gpu.ring_init).
inline constexpr int64_t ringBarrierBytes(int64_t slots) { return 16 * slots; }
/// The first byte after `bytes` where mbarriers may start (8-byte aligned).
inline constexpr int64_t ringBarrierBase(int64_t bytes) {
  return (bytes + 7) / 8 * 8;
}
/// Registers per thread a kernel of `threads` threads holds at entry: the
/// .maxntid cap, 64K registers shared, in steps of 8, at most 248.
inline constexpr int64_t entryRegisters(int64_t threads) {
  return std::min<int64_t>(65536 / threads / 8 * 8, 248);
}
/// The largest budget (a multiple of 8) of each consumer warpgroup of
/// attn_gpu.warp_specialize beside a producer of `producerRegisters`, in a
/// CTA of `threads` threads: 240 for FA3's 24-register producer and two
/// consumer warpgroups, 160 with three.
inline constexpr int64_t consumerRegisters(int64_t threads,
                                           int64_t producerRegisters) {
  const int64_t groups = threads / 128;
  return (groups * entryRegisters(threads) - producerRegisters) / (groups - 1) /
         8 * 8;
}
} // namespace mlir::fa::attn_gpu

#endif // FA_DIALECT_ATTNGPU_IR_ATTNGPU_H
