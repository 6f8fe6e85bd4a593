//===- Attn.h - attn dialect ------------------------------------*- C++ -*-===//

#ifndef FA_DIALECT_ATTN_IR_ATTN_H
#define FA_DIALECT_ATTN_IR_ATTN_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "attn/AttnDialect.h.inc"
#include "attn/AttnEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "attn/AttnAttrs.h.inc"

namespace mlir::fa::attn {

/// How scores are formed and masked; shared by every op that evaluates scores.
struct ScoreSpec {
  double scale = 1.0;
  MaskKind mask = MaskKind::None;
  int64_t windowLeft = 0;
  int64_t windowRight = 0;
  /// Run-time window sizes (mask window with `window(%left, %right)`
  /// operands), null for compile-time ones. An integer value (the op's i64
  /// operand, a kernel's i32 parameter) is read through windowSize(), which
  /// makes a negative size unbounded; an index value is already in that
  /// form (normalizeWindowSize, bound once at a kernel's entry).
  Value windowLeftValue, windowRightValue;
  /// The score_mod region, or null.
  Region *scoreMod = nullptr;
  /// The mask_mod region (b, h, q_idx, kv_idx, mod_args...) -> i1, or null.
  Region *maskMod = nullptr;
  /// The op's mod_args: the tensors behind the score_mod's and the
  /// mask_mod's block arguments after their position arguments.
  SmallVector<Value, 2> modArgs;

  /// The score_mod's block argument for mod_arg `i`.
  BlockArgument modArgOperand(unsigned i) const {
    return scoreMod->front().getArgument(kScoreModPositionArgs + i);
  }
  /// The mask_mod's block argument for mod_arg `i`.
  BlockArgument maskModArgOperand(unsigned i) const {
    return maskMod->front().getArgument(kMaskModPositionArgs + i);
  }
  /// The score_mod's arguments before the mod_args: score, b, h, q_idx, kv_idx.
  static constexpr unsigned kScoreModPositionArgs = 5;
  /// The mask_mod's arguments before the mod_args: b, h, q_idx, kv_idx.
  static constexpr unsigned kMaskModPositionArgs = 4;

  /// Whether some (q, kv) may be masked out: an enum mask or a mask_mod.
  bool hasMask() const { return mask != MaskKind::None || maskMod; }
  /// Whether the mask's visible set is a band the tiling can bound and
  /// classify by indices alone (no mask_mod: it can hit any tile).
  bool maskIsBand() const { return !maskMod; }
  /// This spec without its mask_mod: the enum mask's band alone.
  ScoreSpec bandOnly() const {
    ScoreSpec band = *this;
    band.maskMod = nullptr;
    return band;
  }
  /// Whether the band's diagonal is aligned to the bottom-right corner
  /// (offset Nk - Nq) rather than the top-left (offset 0).
  bool bottomRight() const {
    return mask == MaskKind::CausalBottomRight || mask == MaskKind::Window;
  }
  /// Whether the window's sizes are run-time values.
  bool runtimeWindow() const {
    return mask == MaskKind::Window && windowLeftValue;
  }
  /// Compile-time keys allowed left of the diagonal (-1: unbounded). A
  /// run-time window reads as unbounded here: only windowSize() sees it.
  int64_t left() const {
    return mask == MaskKind::Window && !windowLeftValue ? windowLeft : -1;
  }
  /// Compile-time keys allowed right of the diagonal (-1: unbounded).
  int64_t right() const {
    return mask == MaskKind::None                       ? -1
           : mask == MaskKind::Window && windowRightValue ? -1
           : mask == MaskKind::Window                  ? windowRight
                                                       : 0;
  }
};

/// Rows (queries of a head, or keys of a key head) that share one factor of
/// fp8 block descales (dq [B, H, ceil(Nq/64)], dk [B, Hkv, ceil(Nk/64)]).
inline constexpr int64_t kDescaleBlockRows = 64;

/// Whether an op's fp8 descale_q (null without fp8) is a block descale.
inline bool isBlockDescale(Value descaleQ) {
  return descaleQ && cast<ShapedType>(descaleQ.getType()).getRank() == 3;
}

} // namespace mlir::fa::attn

#define GET_OP_CLASSES
#include "attn/AttnOps.h.inc"

#endif // FA_DIALECT_ATTN_IR_ATTN_H
