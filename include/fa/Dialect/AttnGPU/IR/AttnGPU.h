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

#endif // FA_DIALECT_ATTNGPU_IR_ATTNGPU_H
