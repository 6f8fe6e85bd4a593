//===- HopperFp8.cpp - the fp8 e4m3 pieces of the wgmma forward -*- C++ -*-===//

#include "HopperFp8.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

using namespace mlir;
using namespace mlir::fa::gpu_lowering;

/// A side-effecting inline PTX block returning `results` i32 (or one value
/// of `resultType`).
static LLVM::InlineAsmOp inlinePtx(OpBuilder &b, Location loc, Type resultType,
                                   ValueRange operands, StringRef text,
                                   StringRef constraints) {
  return LLVM::InlineAsmOp::create(
      b, loc, resultType, operands, text, constraints,
      /*has_side_effects=*/true, /*is_align_stack=*/false,
      LLVM::TailCallKind::None, /*asm_dialect=*/nullptr,
      /*operand_attrs=*/nullptr);
}

Value mlir::fa::gpu_lowering::issueWgmmaSharedFp8(KernelBuilder &kb, int64_t n,
                                                  ArrayRef<Value> aDescs,
                                                  ArrayRef<Value> bDescs) {
  OpBuilder &b = kb.b;
  Type accTy = wgmmaAccType(b, n / 2);
  Value acc = LLVM::PoisonOp::create(b, kb.loc, accTy);
  for (int64_t ks = 0; ks < static_cast<int64_t>(aDescs.size()); ++ks)
    acc = NVVM::WgmmaMmaAsyncOp::create(
        b, kb.loc, accTy, acc, aDescs[ks], bDescs[ks],
        NVVM::MMAShapeAttr::get(b.getContext(), 64, n, 32),
        NVVM::WGMMATypes::e4m3, NVVM::WGMMATypes::e4m3, NVVM::WGMMATypes::f32,
        ks == 0 ? NVVM::WGMMAScaleOut::zero : NVVM::WGMMAScaleOut::one,
        NVVM::WGMMAScaleIn::one, NVVM::WGMMAScaleIn::one, NVVM::MMALayout::row,
        NVVM::MMALayout::col, /*satfinite=*/nullptr);
  return acc;
}

/// Four f32 → one i32 of e4m3 bytes, x0 in the lowest (cvt's second source
/// lands in the low byte of its pair).
static Value packE4M3x4(KernelBuilder &kb, Value x0, Value x1, Value x2,
                        Value x3) {
  return inlinePtx(kb.b, kb.loc, kb.b.getI32Type(), ValueRange{x0, x1, x2, x3},
                   "{\n.reg .b16 lo, hi;\n"
                   "cvt.rn.satfinite.e4m3x2.f32 lo, $2, $1;\n"
                   "cvt.rn.satfinite.e4m3x2.f32 hi, $4, $3;\n"
                   "mov.b32 $0, {lo, hi};\n}",
                   "=r,f,f,f,f")
      .getResult(0);
}

SmallVector<Value> mlir::fa::gpu_lowering::packFp8A(KernelBuilder &kb,
                                                    ArrayRef<Value> c) {
  // n8 tile n holds c[4n..4n+3] = (row g: 2t, 2t+1; row g+8: 2t, 2t+1).
  SmallVector<Value> a;
  for (int64_t kk = 0; kk < static_cast<int64_t>(c.size()) / 16; ++kk)
    for (int64_t half = 0; half < 2; ++half) {
      int64_t t0 = 4 * (4 * kk + 2 * half), t1 = t0 + 4;
      for (int64_t row = 0; row < 2; ++row)
        a.push_back(packE4M3x4(kb, c[t0 + 2 * row], c[t0 + 2 * row + 1],
                               c[t1 + 2 * row], c[t1 + 2 * row + 1]));
    }
  return a;
}

/// i32 arithmetic of the transposer's addresses (32-bit shared offsets).
namespace {
struct Bits32 {
  KernelBuilder &kb;
  Value c(int64_t v) { return kb.c32(v); }
  Value bitAnd(Value x, int64_t m) {
    return arith::AndIOp::create(kb.b, kb.loc, x, c(m));
  }
  Value bitOr(Value x, Value y) {
    return arith::OrIOp::create(kb.b, kb.loc, x, y);
  }
  Value bitXor(Value x, Value y) {
    return arith::XOrIOp::create(kb.b, kb.loc, x, y);
  }
  Value bitXor(Value x, int64_t y) { return bitXor(x, c(y)); }
  Value shl(Value x, int64_t n) {
    return arith::ShLIOp::create(kb.b, kb.loc, x, c(n));
  }
  Value shr(Value x, int64_t n) {
    return arith::ShRUIOp::create(kb.b, kb.loc, x, c(n));
  }
  /// Bit `i` of `v`.
  Value bit(Value v, int64_t i) { return bitAnd(shr(v, i), 1); }
  Value add(Value x, Value y) {
    return arith::AddIOp::create(kb.b, kb.loc, x, y);
  }
};
} // namespace

/// Per block (six `addresses`: two to load from, four to store to): keys 0,
/// 1, 8, 9 in from addresses 0 and 1 (+1024 for keys 8, 9), four transposed
/// words out, out_j byte i = in_i byte j. Every block's loads come first:
/// a warp then waits for shared memory once per statement, not per block.
static void transposeBlocks(OpBuilder &b, Location loc,
                            ValueRange addresses) {
  const int64_t blocks = addresses.size() / 6;
  std::string regs, loads, permutes, stores;
  for (int64_t k = 0; k < blocks; ++k) {
    std::string x = std::to_string(k);
    auto reg = [&](const char *name, int64_t i) {
      return std::string(name) + x + "_" + std::to_string(i);
    };
    auto arg = [&](int64_t i) { return "$" + std::to_string(6 * k + i); };
    for (const char *name : {"a", "t", "o"})
      for (int64_t i = 0; i < 4; ++i)
        regs += (regs.empty() ? "" : ", ") + reg(name, i);
    loads += "ld.shared.b32 " + reg("a", 0) + ", [" + arg(0) + "];\n" +
             "ld.shared.b32 " + reg("a", 1) + ", [" + arg(1) + "];\n" +
             "ld.shared.b32 " + reg("a", 2) + ", [" + arg(0) + "+1024];\n" +
             "ld.shared.b32 " + reg("a", 3) + ", [" + arg(1) + "+1024];\n";
    auto prmt = [&](std::string d, std::string a, std::string c,
                    const char *sel) {
      permutes += "prmt.b32 " + d + ", " + a + ", " + c + ", " + sel + ";\n";
    };
    prmt(reg("t", 0), reg("a", 0), reg("a", 1), "0x5140");
    prmt(reg("t", 1), reg("a", 0), reg("a", 1), "0x7362");
    prmt(reg("t", 2), reg("a", 2), reg("a", 3), "0x5140");
    prmt(reg("t", 3), reg("a", 2), reg("a", 3), "0x7362");
    prmt(reg("o", 0), reg("t", 0), reg("t", 2), "0x5410");
    prmt(reg("o", 1), reg("t", 0), reg("t", 2), "0x7632");
    prmt(reg("o", 2), reg("t", 1), reg("t", 3), "0x5410");
    prmt(reg("o", 3), reg("t", 1), reg("t", 3), "0x7632");
    for (int64_t i = 0; i < 4; ++i)
      stores += "st.shared.b32 [" + arg(2 + i) + "], " + reg("o", i) + ";\n";
  }
  std::string constraints;
  for (int64_t i = 0; i < 6 * blocks; ++i)
    constraints += "r,";
  LLVM::InlineAsmOp::create(
      b, loc, TypeRange{}, addresses,
      "{\n.reg .b32 " + regs + ";\n" + loads + permutes + stores + "}",
      constraints + "~{memory}", /*has_side_effects=*/true,
      /*is_align_stack=*/false, LLVM::TailCallKind::None,
      /*asm_dialect=*/nullptr, /*operand_attrs=*/nullptr);
}

void mlir::fa::gpu_lowering::transposeVTile(KernelBuilder &kb, Value vBase,
                                            Value vtBase, int64_t blockKV,
                                            int64_t headDimV) {
  // The bit layout below is that of 128 × 128-byte tiles: V rows are keys,
  // Vᵀ rows dv columns, 16 B chunks swizzled. Keys past 128 continue in the
  // next 16 KB of V (its rows) and in Vᵀ's next slab of keys (Dv rows on).
  // Dv = 256: V's second 128-column slab (bkv rows on) goes to Vᵀ rows
  // 128-255 (16 KB on), by the same moves.
  assert(headDimV % 128 == 0 && blockKV % 64 == 0 &&
         (blockKV <= 128 || headDimV == 128) &&
         "fp8 transposes 64-key halves of 128-column slabs");
  OpBuilder &b = kb.b;
  Location loc = kb.loc;
  Bits32 i32{kb};
  // Warp iteration w (0..31) moves the 4 × 4-byte blocks (p, q): dv columns
  // 4p..4p+3, key positions 4q..4q+3, with lane bits l0..l4, m = l2 + 2 l3,
  //   p = l0 + 2 l1 + 4 l4 + 8 (w mod 4),  q = m + 4 (s ^ (l1 + 2 l4)),
  // s = w div 4. Loads of a warp hit 32 distinct banks (row mod 8 spreads
  // the swizzle), and so do its stores (the lane-dependent s ^ (l1 + 2 l4)).
  // Every field of both byte offsets sits on its own bits, so w enters each
  // by one xor with a per-iteration mask: (lane part) ^ X(w).
  //   load  (key row 16 u + 2 m + k, k ∈ {0, 1, 8, 9}, u = s ^ (l1 + 2 l4)):
  //     2048 u + 128 k' + 256 m + 32 m + 16 (l4 ^ k mod 2) + 4 (l0 + 2 l1)
  //     ^ 32 (w mod 4); k = 8, 9 add 1024 to k = 0, 1.
  //   store (Vᵀ row n = 4p + j, position 4q):
  //     128 n + 16 ((u ^ (n mod 8))) + 4 m = S0 ^ 144 j ^ 4096 (w mod 4).
  Value lane = kb.toI32(kb.lane);
  Value l0 = i32.bit(lane, 0), l1 = i32.bit(lane, 1), l4 = i32.bit(lane, 4);
  Value m = i32.bitAnd(i32.shr(lane, 2), 3);
  Value laneU = i32.bitOr(l1, i32.shl(l4, 1));
  Value load0 = i32.bitOr(
      i32.bitOr(i32.shl(laneU, 11), i32.bitOr(i32.shl(m, 8), i32.shl(m, 5))),
      i32.bitOr(i32.shl(l4, 4), i32.shl(i32.bitAnd(lane, 3), 2)));
  Value load1 = i32.bitXor(load0, 128 | 16);
  Value store0 = i32.bitOr(
      i32.bitOr(i32.shl(l0, 9), i32.bitOr(i32.shl(l1, 10), i32.shl(l4, 11))),
      i32.bitOr(i32.shl(i32.bitXor(laneU, i32.shl(l0, 2)), 4),
                i32.shl(m, 2)));
  Value shared = arith::TruncIOp::create(b, loc, b.getI32Type(),
                                         sharedAddress(kb));
  Value vTile = i32.add(shared, kb.toI32(vBase));
  Value vtTile = i32.add(shared, kb.toI32(vtBase));

  Value transposer = arith::SubIOp::create(b, loc, kb.toI32(kb.warp),
                                           kb.c32(1)); // 0..2
  // Iteration w of 128-key slab i is g = 32 i + w (16 per 64 keys): s's
  // bit 3 is the slab, 16 KB on in V as in Vᵀ (for the load mask its bit
  // 14 lies above the lane part, so the xor adds it). A trip moves
  // kFp8TransposeBlocks blocks: iterations w, w + trips, ... of each
  // 128-column slab of V.
  const int64_t slabs = headDimV / 128;
  const int64_t perSlab = std::max<int64_t>(kFp8TransposeBlocks / slabs, 1);
  const int64_t trips = blockKV / 4 / perSlab;
  auto loop = scf::ForOp::create(b, loc, transposer, kb.c32(trips),
                                 kb.c32(kFp8TransposeWarps));
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(loop.getBody());
  SmallVector<Value> addresses;
  for (int64_t k = 0; k < perSlab; ++k) {
    Value w = loop.getInductionVar();
    if (k)
      w = i32.add(w, kb.c32(k * trips));
    Value s = i32.shr(w, 2), pBlock = i32.bitAnd(w, 3);
    Value loadMask = i32.bitOr(i32.shl(s, 11), i32.shl(pBlock, 5));
    Value storeMask = i32.bitOr(
        i32.shl(blockKV > 128 ? i32.bitAnd(s, 7) : s, 4), i32.shl(pBlock, 12));
    if (blockKV > 128)
      storeMask = i32.bitOr(storeMask, i32.shl(i32.shr(s, 3), 14));
    Value load[2] = {i32.bitXor(load0, loadMask),
                     i32.bitXor(load1, loadMask)};
    Value store = i32.bitXor(store0, storeMask);
    for (int64_t slab = 0; slab < slabs; ++slab) {
      Value vSlab =
          slab ? i32.add(vTile, kb.c32(slab * blockKV * kSlabRowBytes)) : vTile;
      Value vtSlab =
          slab ? i32.add(vtTile, kb.c32(slab * 128 * kSlabRowBytes)) : vtTile;
      addresses.append({i32.add(vSlab, load[0]), i32.add(vSlab, load[1])});
      for (int64_t j = 0; j < 4; ++j)
        addresses.push_back(i32.add(vtSlab, i32.bitXor(store, 144 * j)));
    }
  }
  transposeBlocks(b, loc, addresses);
}
