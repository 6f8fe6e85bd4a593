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

/// Byte (row, col) of a 128 B-swizzled tile of 128 B rows: 16 B chunk c of
/// row r at chunk c ^ (r mod 8).
static Value swizzledByte(KernelBuilder &kb, Value row, Value col) {
  OpBuilder &b = kb.b;
  Value chunk = arith::XOrIOp::create(b, kb.loc, kb.divui(col, 16),
                                      kb.remui(row, 8));
  return kb.add(kb.add(kb.mul(row, kSlabRowBytes), kb.mul(chunk, 16)),
                kb.remui(col, 16));
}

/// Bit `i` of `v` (index).
static Value bit(KernelBuilder &kb, Value v, int64_t i) {
  return kb.remui(kb.divui(v, int64_t(1) << i), 2);
}

void mlir::fa::gpu_lowering::transposeVTile(KernelBuilder &kb, Value words,
                                            Value vBase, Value vtBase,
                                            int64_t blockKV, int64_t headDimV) {
  OpBuilder &b = kb.b;
  Location loc = kb.loc;
  // Warp iteration w moves the blocks (p, q): dv columns 4p..4p+3, key
  // positions 4q..4q+3, with lane bits l0..l4
  //   p = l0 + 2 l1 + 4 l4 + 8 (w mod Dv/32)
  //   q = l2 + 2 l3 + 4 (l1 ^ x0) + 8 (l4 ^ x1) + 16 h,  (x, h) = w div Dv/32
  // Loads of row r hit bank 4 ((p div 4) ^ (r mod 8)) + p mod 4 and
  // stores to row n bank 4 ((q div 4) ^ (n mod 8)) + q mod 4: 32 distinct
  // banks each. 8 · Dv/32 iterations cover the Dv × 128 tile.
  const int64_t pBlocks = headDimV / 32;
  const int64_t iterations = pBlocks * (blockKV / 16);
  Value lane = kb.lane;
  Value l[5];
  for (int64_t i = 0; i < 5; ++i)
    l[i] = bit(kb, lane, i);
  Value transposer = kb.sub(kb.warp, kb.idx(1)); // 0..2
  auto loop = scf::ForOp::create(b, loc, transposer, kb.idx(iterations),
                                 kb.idx(kFp8TransposeWarps));
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(loop.getBody());
  Value w = loop.getInductionVar();
  Value pBlock = kb.remui(w, pBlocks), sel = kb.divui(w, pBlocks);
  Value x0 = bit(kb, sel, 0), x1 = bit(kb, sel, 1), h = kb.divui(sel, 4);
  auto xorI = [&](Value x, Value y) {
    return arith::XOrIOp::create(b, loc, x, y).getResult();
  };
  Value p = kb.add(kb.add(l[0], kb.mul(l[1], 2)),
                   kb.add(kb.mul(l[4], 4), kb.mul(pBlock, 8)));
  Value q = kb.add(kb.add(l[2], kb.mul(l[3], 2)),
                   kb.add(kb.add(kb.mul(xorI(l[1], x0), 4),
                                 kb.mul(xorI(l[4], x1), 8)),
                          kb.mul(h, 16)));
  Value col = kb.mul(p, 4);
  // V's columns past 128 live in the next slab of bkv rows.
  Value slabBase = kb.add(vBase, kb.mul(kb.divui(col, 128),
                                        blockKV * kSlabRowBytes));
  Value inSlab = kb.remui(col, 128);
  Value keyBase = kb.add(kb.mul(kb.divui(q, 4), 16), kb.mul(kb.remui(q, 4), 2));
  SmallVector<Value> in;
  for (int64_t key : {0, 1, 8, 9}) {
    Value byte = kb.add(slabBase, swizzledByte(kb, kb.add(keyBase, key), inSlab));
    in.push_back(memref::LoadOp::create(b, loc, words,
                                        ValueRange{kb.divui(byte, 4)}));
  }
  // out_j byte i = in_i byte j.
  Type i32 = b.getI32Type();
  auto structTy = LLVM::LLVMStructType::getLiteral(
      b.getContext(), SmallVector<Type>(4, i32));
  auto asmOp = inlinePtx(b, loc, structTy, in,
                         "{\n.reg .b32 t0, t1, t2, t3;\n"
                         "prmt.b32 t0, $4, $5, 0x5140;\n"
                         "prmt.b32 t1, $4, $5, 0x7362;\n"
                         "prmt.b32 t2, $6, $7, 0x5140;\n"
                         "prmt.b32 t3, $6, $7, 0x7362;\n"
                         "prmt.b32 $0, t0, t2, 0x5410;\n"
                         "prmt.b32 $1, t0, t2, 0x7632;\n"
                         "prmt.b32 $2, t1, t3, 0x5410;\n"
                         "prmt.b32 $3, t1, t3, 0x7632;\n}",
                         "=r,=r,=r,=r,r,r,r,r");
  SmallVector<Value> out = unpackStruct(b, loc, asmOp.getResult(0), 4);
  Value position = kb.mul(q, 4);
  for (int64_t j = 0; j < 4; ++j) {
    Value byte = kb.add(vtBase, swizzledByte(kb, kb.add(col, j), position));
    memref::StoreOp::create(b, loc, out[j], words,
                            ValueRange{kb.divui(byte, 4)});
  }
}
