//===- HopperFp8.cpp - the fp8 e4m3 pieces of the wgmma forward -*- C++ -*-===//

#include "HopperFp8.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

using namespace mlir;
using namespace mlir::fa::gpu_lowering;

// cvt's second source lands in the low byte of its pair.
Value mlir::fa::gpu_lowering::packE4M3x4(KernelBuilder &kb, Value x0, Value x1,
                                         Value x2, Value x3) {
  return inlinePtx(kb.b, kb.loc, kb.b.getI32Type(),
                   "{\n.reg .b16 lo, hi;\n"
                   "cvt.rn.satfinite.e4m3x2.f32 lo, $2, $1;\n"
                   "cvt.rn.satfinite.e4m3x2.f32 hi, $4, $3;\n"
                   "mov.b32 $0, {lo, hi};\n}",
                   ValueRange{x0, x1, x2, x3}, "=r,f,f,f,f");
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

/// Per unit (two operands after the two selectors: where to load, where
/// to store): ldmatrix.trans takes a 16-key × 32-column unit of V (4 b16
/// matrices: keys 0-7 and 8-15 of two 16-byte column chunks), a byte permute
/// per pair of registers makes the Vᵀ words, stmatrix writes them. Every
/// unit's load comes first: a warp waits for shared memory once per
/// statement, not per unit.
static void transposeUnits(OpBuilder &b, Location loc, ValueRange operands) {
  const int64_t units = (operands.size() - 2) / 2;
  std::string regs, loads, permutes, stores;
  for (int64_t u = 0; u < units; ++u) {
    auto reg = [&](const char *name, int64_t i) {
      return std::string(name) + std::to_string(u) + "_" + std::to_string(i);
    };
    auto quad = [&](const char *name) {
      return "{" + reg(name, 0) + ", " + reg(name, 1) + ", " + reg(name, 2) +
             ", " + reg(name, 3) + "}";
    };
    for (const char *name : {"a", "o"})
      for (int64_t i = 0; i < 4; ++i)
        regs += (regs.empty() ? "" : ", ") + reg(name, i);
    std::string load = "$" + std::to_string(2 + 2 * u);
    std::string store = "$" + std::to_string(3 + 2 * u);
    loads += "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 " + quad("a") +
             ", [" + load + "];\n";
    for (int64_t i = 0; i < 4; ++i)
      permutes += "prmt.b32 " + reg("o", i) + ", " + reg("a", i & 2) + ", " +
                  reg("a", (i & 2) + 1) + ", $" + std::to_string(i & 1) +
                  ";\n";
    stores += "stmatrix.sync.aligned.m8n8.x4.shared.b16 [" + store + "], " +
              quad("o") + ";\n";
  }
  std::string constraints;
  for (size_t i = 0; i < operands.size(); ++i)
    constraints += "r,";
  inlinePtx(b, loc,
            "{\n.reg .b32 " + regs + ";\n" + loads + permutes + stores + "}",
            operands, constraints + "~{memory}");
}

void mlir::fa::gpu_lowering::transposeVTile(KernelBuilder &kb, Value vBase,
                                            Value vtBase, int64_t blockKV,
                                            int64_t headDimV, int64_t firstWarp,
                                            int64_t warps) {
  // V rows are keys, Vᵀ rows dv columns, both 128 B rows with 16 B chunks
  // swizzled by row mod 8. Keys past 128 continue in V's rows and in Vᵀ's
  // next slab of keys (Dv rows on). Dv = 256: V's second 128-column slab
  // (bkv rows on) goes to Vᵀ rows 128-255 (16 KB on) by the same moves.
  assert(headDimV % 128 == 0 && blockKV % 64 == 0 &&
         (blockKV <= 128 || headDimV == 128) &&
         "fp8 transposes 64-key halves of 128-column slabs");
  OpBuilder &b = kb.b;
  Location loc = kb.loc;
  Bits32 i32{kb};
  // Unit (G, p): keys 16G..16G+15 of column chunks c = 2p, 2p + 1. Lane
  // L = 8j + r = 4g + t gives ldmatrix matrix j's row r: key
  // 16G + 8 (j mod 2) + r of chunk 2p + j div 2, at
  //   2048 G + (128 (8 (j mod 2) + r) + 16 ((j div 2) ^ r)) ^ 32 p;
  // and receives, as b16 pairs, keys 2t, 2t + 1 (+8 from matrices 1, 3) of
  // columns 2g, 2g + 1: bytes (k 2t, n 2g), (2t, 2g + 1), (2t + 1, 2g),
  // (2t + 1, 2g + 1). prmt 0x6420 of matrices 0 and 1 is then Vᵀ row
  // 16c + 2g at positions 4t..4t+3 = keys 2t + {0, 1, 8, 9} (P's order,
  // HopperFp8.h), 0x7531 row 16c + 2g + 1. stmatrix's matrix j row r takes
  // row 16 c + 2r + (r div 4 xor j mod 2) (lanes g >= 4 swap selectors), so
  // its 8 rows cover every row mod 8 and the stores hit distinct banks:
  //   (G div 8)·Dv·128 + 4096 p + (2048 (j div 2) + 128 n' + 16 (n' mod 8))
  //   ^ 16 (G mod 8),  n' = 2r + (r div 4 xor j mod 2).
  Value lane = kb.toI32(kb.lane);
  Value r = i32.bitAnd(lane, 7), j = i32.shr(lane, 3);
  Value laneKey = i32.bitOr(r, i32.shl(i32.bitAnd(j, 1), 3));
  Value laneLoad = i32.bitOr(
      i32.shl(laneKey, 7),
      i32.shl(i32.bitAnd(i32.bitXor(r, i32.shr(lane, 4)), 7), 4));
  Value nLane =
      i32.bitOr(i32.shl(r, 1), i32.bitXor(i32.shr(r, 2), i32.bitAnd(j, 1)));
  Value laneStore =
      i32.bitOr(i32.bitOr(i32.shl(i32.shr(j, 1), 11), i32.shl(nLane, 7)),
                i32.shl(i32.bitAnd(nLane, 7), 4));
  Value swap = i32.bitAnd(i32.shr(lane, 4), 1); // g >= 4
  Value swapBytes = arith::MulIOp::create(b, loc, swap, kb.c32(0x1111));
  Value selectors[2] = {i32.add(kb.c32(0x6420), swapBytes),
                        arith::SubIOp::create(b, loc, kb.c32(0x7531),
                                              swapBytes)};
  Value shared = arith::TruncIOp::create(b, loc, b.getI32Type(),
                                         sharedAddress(kb));
  Value vTile = i32.add(shared, kb.toI32(vBase));
  Value vtTile = i32.add(shared, kb.toI32(vtBase));

  Value transposer = arith::SubIOp::create(b, loc, kb.toI32(kb.warp),
                                           kb.c32(firstWarp)); // 0..warps-1
  // bkv / 4 units per 128-column slab of V. A trip moves
  // kFp8TransposeUnits: units w, w + trips, ... of each slab.
  const int64_t slabs = headDimV / 128;
  const int64_t perSlab = std::max<int64_t>(kFp8TransposeUnits / slabs, 1);
  const int64_t trips = blockKV / 4 / perSlab;
  auto loop =
      scf::ForOp::create(b, loc, transposer, kb.c32(trips), kb.c32(warps));
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(loop.getBody());
  SmallVector<Value> operands{selectors[0], selectors[1]};
  for (int64_t k = 0; k < perSlab; ++k) {
    Value w = loop.getInductionVar();
    if (k)
      w = i32.add(w, kb.c32(k * trips));
    Value group = i32.shr(w, 2), pair = i32.bitAnd(w, 3);
    Value load = i32.add(i32.shl(group, 11),
                         i32.bitXor(laneLoad, i32.shl(pair, 5)));
    Value store = i32.add(
        i32.shl(pair, 12),
        i32.bitXor(laneStore, i32.shl(i32.bitAnd(group, 7), 4)));
    if (blockKV > 128)
      store = i32.add(store, arith::MulIOp::create(
                                 b, loc, i32.shr(group, 3),
                                 kb.c32(headDimV * kSlabRowBytes)));
    for (int64_t slab = 0; slab < slabs; ++slab) {
      Value vSlab =
          slab ? i32.add(vTile, kb.c32(slab * blockKV * kSlabRowBytes)) : vTile;
      Value vtSlab =
          slab ? i32.add(vtTile, kb.c32(slab * 128 * kSlabRowBytes)) : vtTile;
      operands.append({i32.add(vSlab, load), i32.add(vtSlab, store)});
    }
  }
  transposeUnits(b, loc, operands);
}
