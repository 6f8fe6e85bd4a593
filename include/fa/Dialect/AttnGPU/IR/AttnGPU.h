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
} // namespace mlir::fa::attn_gpu

#endif // FA_DIALECT_ATTNGPU_IR_ATTNGPU_H
