//===- Fragments.cpp - registers, shared tiles, tensor-core ops -*- C++ -*-===//
//
// The lane-to-element maps of mma.sync m16n8k16 and ldmatrix, cp.async tile
// copies, and the scalar helpers the mainloops use.
//
//===----------------------------------------------------------------------===//

#include "Fragments.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace mlir::fa;
using namespace mlir::fa::gpu_lowering;

Value mlir::fa::gpu_lowering::inlinePtx(OpBuilder &b, Location loc, Type result,
                                        StringRef text, ValueRange operands,
                                        StringRef constraints,
                                        bool sideEffects) {
  auto op = LLVM::InlineAsmOp::create(
      b, loc, result ? TypeRange(result) : TypeRange(), operands, text,
      constraints, sideEffects, /*is_align_stack=*/false,
      LLVM::TailCallKind::None, /*asm_dialect=*/nullptr,
      /*operand_attrs=*/nullptr);
  return result ? op.getResult(0) : Value();
}

void mlir::fa::gpu_lowering::inlinePtx(OpBuilder &b, Location loc,
                                       StringRef text, ValueRange operands,
                                       StringRef constraints) {
  inlinePtx(b, loc, Type(), text, operands, constraints);
}

Value KernelBuilder::idx(int64_t v) {
  return arith::ConstantIndexOp::create(b, loc, v);
}
Value KernelBuilder::c32(int64_t v) {
  return arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(v));
}
Value KernelBuilder::f32(double v) {
  return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v));
}
Value KernelBuilder::add(Value x, Value y) {
  return arith::AddIOp::create(b, loc, x, y);
}
Value KernelBuilder::sub(Value x, Value y) {
  return arith::SubIOp::create(b, loc, x, y);
}
Value KernelBuilder::mul(Value x, Value y) {
  return arith::MulIOp::create(b, loc, x, y);
}
Value KernelBuilder::divui(Value x, int64_t y) {
  return arith::DivUIOp::create(b, loc, x, idx(y));
}
Value KernelBuilder::remui(Value x, int64_t y) {
  return arith::RemUIOp::create(b, loc, x, idx(y));
}
Value KernelBuilder::ceilDiv(Value x, int64_t y) {
  return divui(add(x, y - 1), y);
}
MemRefType mlir::fa::gpu_lowering::flatMemRef(Type t) {
  return MemRefType::get({kFlatExtent}, t);
}

gpu::GPUFuncOp mlir::fa::gpu_lowering::createKernelFunc(
    OpBuilder &b, Location loc, gpu::GPUModuleOp module, StringRef name,
    const KernelParams &params, const KernelPlan &plan, int64_t sharedBytes) {
  b.setInsertionPointToEnd(module.getBody());
  auto func = gpu::GPUFuncOp::create(b, loc, name,
                                     b.getFunctionType(params.types, {}));
  if (!params.tensorMaps.empty())
    func->setAttr(kGridConstantParamsAttr,
                  b.getDenseI32ArrayAttr(params.tensorMaps));
  func->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b.getUnitAttr());
  func.setKnownBlockSizeAttr(
      b.getDenseI32ArrayAttr({static_cast<int32_t>(plan.threads()), 1, 1}));
  func->setAttr("fa.shared_bytes", b.getI64IntegerAttr(sharedBytes));
  // KernelPlan::capsTmaRegisters (ptxas alone takes 168 and spills 16 B).
  if (plan.capsTmaRegisters())
    func->setAttr("nvvm.maxnreg", b.getI32IntegerAttr(kTmaDecodeRegisters));
  b.setInsertionPointToStart(&func.getBody().front());
  return func;
}

std::pair<Value, Value>
KernelBuilder::tileRange(std::pair<Value, Value> band, Value extent,
                         int64_t tile) {
  return attn::buildBlockRange(b, loc, band, extent, tile);
}
Value KernelBuilder::minsi(Value x, Value y) {
  return arith::MinSIOp::create(b, loc, x, y);
}
Value KernelBuilder::maxsi(Value x, Value y) {
  return arith::MaxSIOp::create(b, loc, x, y);
}
Value KernelBuilder::lt(Value x, Value y) {
  return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, x, y);
}
Value KernelBuilder::eq(Value x, Value y) {
  return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, x, y);
}
Value KernelBuilder::select(Value c, Value x, Value y) {
  return arith::SelectOp::create(b, loc, c, x, y);
}
Value KernelBuilder::toIndex(Value i32) {
  return arith::IndexCastUIOp::create(b, loc, b.getIndexType(), i32);
}
Value KernelBuilder::toI32(Value index) {
  return arith::IndexCastUIOp::create(b, loc, b.getI32Type(), index);
}

Value KernelBuilder::opaqueIndex(Value v) {
  Value i32v = arith::IndexCastUIOp::create(b, loc, b.getI32Type(), v);
  return toIndex(
      inlinePtx(b, loc, b.getI32Type(), kOpaqueMove, ValueRange{i32v}, "=r,r"));
}

void KernelBuilder::setupThreadIds() {
  deriveThreadIds(gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x));
}

void KernelBuilder::setupOpaqueThreadIds() {
  deriveThreadIds(
      opaqueIndex(gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x)));
}

void KernelBuilder::deriveThreadIds(Value threadId) {
  tid = threadId;
  warp = divui(tid, 32);
  lane = remui(tid, 32);
  groupId = divui(lane, 4);
  threadInGroup = remui(lane, 4);
}

void KernelBuilder::setupSharedMemory(gpu::GPUModuleOp module, int64_t elems) {
  smem = sharedView(module, plan.elemType, elems);
}

Value KernelBuilder::sharedView(gpu::GPUModuleOp module, Type elemType,
                                int64_t elems) {
  // gpu.dynamic_shared_memory becomes a 1-byte static symbol that can overlap
  // other shared memory; a size-0 public global gives `.extern .shared`.
  // One symbol per element type: a view of a second type of the same width
  // (i32 beside f32) takes the next free name.
  std::string base = "fa_smem_" +
                     std::to_string(elemType.getIntOrFloatBitWidth()) +
                     (elemType.isBF16() ? "bf" : "f");
  auto gTy = MemRefType::get({0}, elemType, MemRefLayoutAttrInterface(),
                             b.getI64IntegerAttr(3));
  std::string name = base;
  for (int i = 1;; ++i) {
    auto existing = module.lookupSymbol<memref::GlobalOp>(name);
    if (!existing || existing.getType() == gTy)
      break;
    name = base + "_" + std::to_string(i);
  }
  if (!module.lookupSymbol(name)) {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(module.getBody());
    memref::GlobalOp::create(b, loc, name, b.getStringAttr("public"), gTy,
                             Attribute(), /*constant=*/false,
                             b.getI64IntegerAttr(1024));
  }
  Value g = memref::GetGlobalOp::create(b, loc, gTy, name);
  auto ty = MemRefType::get({elems}, elemType, MemRefLayoutAttrInterface(),
                            b.getI64IntegerAttr(3));
  return memref::ReinterpretCastOp::create(b, loc, ty, g, /*offset=*/0,
                                           ArrayRef<int64_t>{elems},
                                           ArrayRef<int64_t>{1});
}

Value KernelBuilder::globalAddress(Value mem) {
  Value p = memref::ExtractAlignedPointerAsIndexOp::create(b, loc, mem);
  p = arith::IndexCastUIOp::create(b, loc, b.getI64Type(), p);
  return toIndex(inlinePtx(b, loc, b.getI64Type(), "cvta.to.global.u64 $0, $1;",
                           ValueRange{p}, "=l,l", /*sideEffects=*/false));
}

void KernelBuilder::redAddF32(Value addr, int64_t byteOffset,
                              ValueRange values) {
  // The offset is part of the instruction so LLVM has no per-column 64-bit
  // addresses to hoist out of the loop.
  Value a = arith::IndexCastUIOp::create(b, loc, b.getI64Type(), addr);
  std::string at = "[$0+" + std::to_string(byteOffset) + "]";
  std::string text = values.size() == 2
                         ? "red.global.add.v2.f32 " + at + ", {$1, $2};"
                         : "red.global.add.f32 " + at + ", $1;";
  SmallVector<Value> operands{a};
  operands.append(values.begin(), values.end());
  inlinePtx(b, loc, text, operands, values.size() == 2 ? "l,f,f" : "l,f");
}

Value StridedTensor::headBase(KernelBuilder &kb, Value batch,
                              Value head) const {
  return kb.add(kb.mul(batch, batchStride), kb.mul(head, headStride));
}

Value StridedTensor::rowOffset(KernelBuilder &kb, Value headBase,
                               Value row) const {
  return kb.add(headBase, kb.mul(row, rowStride));
}

StridedTensor
mlir::fa::gpu_lowering::stridedTensor(KernelBuilder &kb, Value mem,
                                      const std::array<Value, 3> &strides) {
  auto toIndex = [&](Value i64) {
    return arith::IndexCastOp::create(kb.b, kb.loc, kb.b.getIndexType(), i64)
        .getResult();
  };
  return {mem, toIndex(strides[0]), toIndex(strides[1]), toIndex(strides[2])};
}

void KernelBuilder::copyTileAsync(Value gmem, Value gBase, Value rowBegin,
                                  Value rowLimit, const SharedTile &tile,
                                  Value rowStride) {
  copyRowsAsync(
      gmem, gBase, rowBegin, rowLimit, tile.rows, tile.cols,
      [&](Value row, Value, Value col) {
        return tileOffset(tile, row, col);
      },
      rowStride);
}

void KernelBuilder::copyGatheredTileAsync(Value gmem, RowSource rowSource,
                                          const SharedTile &tile,
                                          bool blocked) {
  copyRowsAsync(
      gmem, idx(0), Value(), Value(), tile.rows, tile.cols,
      [&](Value row, Value, Value col) {
        return tileOffset(tile, row, col);
      },
      /*rowStride: rowSource gives element offsets=*/idx(1), rowSource,
      blocked);
}

void KernelBuilder::copyTileAsyncSwizzled(Value gmem, Value gBase,
                                          Value rowBegin, Value rowLimit,
                                          int64_t rows, int64_t cols,
                                          Value base, Value rowStride) {
  copyRowsAsync(
      gmem, gBase, rowBegin, rowLimit, rows, cols,
      [&](Value row, Value chunk, Value) {
        Value slab = divui(chunk, 8);
        Value swz =
            arith::XOrIOp::create(b, loc, remui(chunk, 8), remui(row, 8));
        return add(base,
                   add(mul(slab, rows * 64), add(mul(row, 64), mul(swz, 8))));
      },
      rowStride);
}

void KernelBuilder::copyRowsAsync(
    Value gmem, Value gBase, Value rowBegin, Value rowLimit, int64_t rows,
    int64_t cols, function_ref<Value(Value, Value, Value)> dst, Value rowStride,
    RowSource rowSource, bool blocked) {
  // Caller's strides: a tile's rows are addressed from one base per thread
  // (its first row), so each copy adds a multiple of the stride.
  const bool strided = static_cast<bool>(rowStride);
  if (!strided)
    rowStride = idx(cols);
  // Rows are padded to whole 16-column groups; the padding chunks read
  // nothing. A chunk is as wide as the global rows' alignment allows: 8
  // elements (16-byte cp.async.cg) for head dims that are multiples of 8,
  // else 4 or 2 (8 or 4-byte cp.async.ca), else 1: cp.async has no 2-byte
  // size, so odd rows take plain loads and shared stores, which are
  // published by the same barriers that publish the cp.async groups.
  const int64_t width = rowChunkElems(cols, plan.elemBytes());
  const int64_t validChunks = cols / width;
  const int64_t chunksPerRow = (cols + 15) / 16 * 16 / width;
  const int64_t threads = copyThreads ? copyThreads : plan.threads();
  // Narrow chunks are many per thread. Their slots per row are rounded up to
  // a power of two (slots past the padded row copy nothing), so a thread
  // keeps its row and column offsets from step to step and its addresses
  // differ by constants; the thread id goes through an opaque copy so they
  // are formed where they are used, not hoisted out of the mainloop (where
  // they would hold registers throughout).
  const bool narrow = width < plan.chunkElems();
  const int64_t slots =
      narrow ? static_cast<int64_t>(llvm::PowerOf2Ceil(chunksPerRow))
             : chunksPerRow;
  const bool fixedSlots =
      narrow && (threads % slots == 0 || slots % threads == 0);
  const int64_t chunks = rows * slots;
  auto tokTy = nvgpu::DeviceAsyncTokenType::get(b.getContext());
  Value t = narrow ? opaqueIndex(tid) : tid;
  const bool splitRows = fixedSlots || (strided && threads % slots == 0);
  Value tRow, tChunk, threadBase;
  if (splitRows) {
    tRow = divui(t, slots);
    tChunk = remui(t, slots);
  }
  if (strided && splitRows && !rowSource)
    threadBase = add(gBase, mul(add(rowBegin, tRow), rowStride));
  // A blocked gather: thread row tRow copies rows [tRow·run, tRow·run +
  // run), one per pass, each pass's chunk the same column of its row.
  const int64_t run = chunks / threads;
  blocked = blocked && rowSource && splitRows && threads % slots == 0 &&
            chunks % threads == 0 && llvm::isPowerOf2_64(run);
  // The tile row of copy `first` past the thread's first: a pass's rows
  // apart, or the next of its run.
  auto rowOffset = [&](int64_t first) {
    return blocked ? first / threads : first / slots;
  };
  Value runBase = blocked ? mul(tRow, idx(run)) : tRow;
  // The element offset of global row `grow` (tile row `row`, copy `first`).
  auto rowAddress = [&](Value grow, int64_t first) {
    if (threadBase)
      return add(threadBase, mul(rowStride, idx(first / slots)));
    return add(gBase, mul(grow, rowStride));
  };
  // `rowsInside`: every row of the tile lies before rowLimit, so only the
  // padding columns need a clamped address.
  auto copyAll = [&](bool rowsInside) {
    // Gathered rows (a page-table load each): every source before the first
    // copy, so the loads overlap instead of each one stalling the cp.async
    // behind it (in-order issue: one round trip per row otherwise).
    DenseMap<int64_t, std::pair<Value, Value>> gathered;
    int64_t previous = -1;
    if (rowSource && splitRows)
      for (int64_t first = 0; first < chunks; first += threads) {
        int64_t r = rowOffset(first);
        if (gathered.count(r))
          continue;
        GatherRow at{add(runBase, idx(r)), previous < 0 ? 0 : r - previous};
        if (blocked)
          at.offset = r, at.run = run;
        gathered[r] = rowSource(at);
        previous = r;
      }
    for (int64_t first = 0; first < chunks; first += threads) {
      Value c = add(t, first);
      auto emit = [&]() {
        OpBuilder::InsertionGuard g(b);
        Value row =
            splitRows ? add(runBase, rowOffset(first)) : divui(c, slots);
        Value chunk = splitRows ? add(tChunk, first % slots) : remui(c, slots);
        if (slots != chunksPerRow) {
          auto inRow = scf::IfOp::create(b, loc, lt(chunk, idx(chunksPerRow)),
                                         /*withElseRegion=*/false);
          b.setInsertionPointToStart(&inRow.getThenRegion().front());
        }
        Value col = mul(chunk, width);
        Value grow, valid;
        if (rowSource) {
          auto known = gathered.find(rowOffset(first));
          std::tie(grow, valid) = known != gathered.end()
                                      ? known->second
                                      : rowSource(GatherRow{row});
        } else {
          grow = add(rowBegin, row);
          valid = rowsInside ? Value() : lt(grow, rowLimit);
        }
        if (validChunks != chunksPerRow) {
          Value inCols = lt(chunk, idx(validChunks));
          valid = valid ? arith::AndIOp::create(b, loc, valid, inCols) : inCols;
        }
        if (!valid)
          valid = arith::ConstantIntOp::create(b, loc, 1, 1);
        if (width == 1) {
          // A predicated load: rows past the end and padding columns read
          // nothing and store zero.
          Value src = strided ? add(rowAddress(grow, first), col)
                              : add(gBase, add(mul(grow, rowStride), col));
          Value at = dst(row, chunk, col);
          auto load = scf::IfOp::create(b, loc, TypeRange{plan.elemType}, valid,
                                        /*withElseRegion=*/true);
          b.setInsertionPointToStart(&load.getThenRegion().front());
          scf::YieldOp::create(
              b, loc, ValueRange{memref::LoadOp::create(b, loc, gmem, src)});
          b.setInsertionPointToStart(&load.getElseRegion().front());
          scf::YieldOp::create(
              b, loc,
              ValueRange{arith::ConstantOp::create(
                  b, loc, b.getFloatAttr(plan.elemType, 0.0))});
          b.setInsertionPointAfter(load);
          memref::StoreOp::create(b, loc, load.getResult(0), smem, at);
          return;
        }
        // Rows past the end and padding columns read nothing (src-size 0
        // zero-fills); their address is clamped to the first row (and column)
        // so it stays in the allocation.
        Value srcCol = col;
        if (validChunks != chunksPerRow)
          srcCol = select(valid, col, idx(0));
        Value srcElems = select(valid, idx(width), idx(0));
        Value src;
        if (strided) {
          Value at = rowAddress(grow, first);
          src = add(rowsInside ? at : select(valid, at, gBase), srcCol);
        } else {
          Value srcRow = rowsInside ? grow : select(valid, grow, idx(0));
          src = add(gBase, add(mul(srcRow, rowStride), srcCol));
        }
        Value at = dst(row, chunk, col);
        // .cg (bypassing L1) exists only for 16-byte copies.
        nvgpu::DeviceAsyncCopyOp::create(
            b, loc, tokTy, smem, ValueRange{at}, gmem, ValueRange{src},
            b.getIndexAttr(width), srcElems,
            width == plan.chunkElems() ? b.getUnitAttr() : UnitAttr());
      };
      if (first + threads <= chunks) {
        emit();
        continue;
      }
      auto ifOp = scf::IfOp::create(b, loc, lt(c, idx(chunks)),
                                    /*withElseRegion=*/false);
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(&ifOp.getThenRegion().front());
      emit();
    }
  };
  if (!narrow || rowSource) {
    copyAll(/*rowsInside=*/false);
  } else {
    // Narrow copies are many: all but a tile at the end of the rows take
    // the branch whose addresses need no per-row clamp.
    auto inside = scf::IfOp::create(
        b, loc,
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sle,
                              add(rowBegin, rows), rowLimit),
        /*withElseRegion=*/true);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&inside.getThenRegion().front());
    copyAll(/*rowsInside=*/true);
    b.setInsertionPointToStart(&inside.getElseRegion().front());
    copyAll(/*rowsInside=*/false);
  }
  commitAsync();
}

void KernelBuilder::copyRowStatsAsync(Value stats, Value lseMem,
                                      Value deltaMem, Value qRowsBase,
                                      Value qBegin, Value nq, int64_t rows,
                                      function_ref<Value()> dst) {
  auto tokTy = nvgpu::DeviceAsyncTokenType::get(b.getContext());
  Value isLse = lt(tid, idx(rows));
  Value row = add(qBegin, select(isLse, tid, sub(tid, idx(rows))));
  Value valid = lt(row, nq);
  Value src = add(qRowsBase, select(valid, row, idx(0)));
  Value srcElems = select(valid, idx(1), idx(0));
  Value at = dst();
  auto copyStat = [&](Value mem) {
    nvgpu::DeviceAsyncCopyOp::create(b, loc, tokTy, stats, ValueRange{at}, mem,
                                     ValueRange{src}, b.getIndexAttr(1),
                                     srcElems, UnitAttr());
  };
  auto lseIf = scf::IfOp::create(b, loc, isLse, /*withElseRegion=*/true);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(&lseIf.getThenRegion().front());
  copyStat(lseMem);
  b.setInsertionPointToStart(&lseIf.getElseRegion().front());
  auto deltaIf = scf::IfOp::create(b, loc, lt(tid, idx(2 * rows)),
                                   /*withElseRegion=*/false);
  b.setInsertionPointToStart(&deltaIf.getThenRegion().front());
  copyStat(deltaMem);
}

void KernelBuilder::commitAsync() { NVVM::CpAsyncCommitGroupOp::create(b, loc); }

void KernelBuilder::waitAsync(int64_t pending) {
  NVVM::CpAsyncWaitGroupOp::create(b, loc, static_cast<uint32_t>(pending));
}

Type KernelBuilder::fragType() {
  if (plan.elemType.isBF16())
    return b.getI32Type();
  return VectorType::get({2}, plan.elemType);
}

SmallVector<Value, 4> KernelBuilder::ldmatrixX4(Value offset, bool transpose) {
  // f32: each 8×8 b16 matrix is an 8×4 f32 one, a lane's register one f32.
  const bool f32 = plan.isF32();
  auto vecTy = VectorType::get({4, f32 ? 1 : 2}, plan.elemType);
  Value m = nvgpu::LdMatrixOp::create(b, loc, vecTy, smem, ValueRange{offset},
                                      transpose, 4);
  SmallVector<Value, 4> regs;
  for (int64_t i = 0; i < 4; ++i) {
    Value v = vector::ExtractOp::create(b, loc, m, ArrayRef<int64_t>{i});
    if (f32)
      v = vector::ExtractOp::create(b, loc, v, ArrayRef<int64_t>{0});
    if (plan.elemType.isBF16()) {
      v = vector::BitCastOp::create(
          b, loc, VectorType::get({1}, b.getI32Type()), v);
      v = vector::ExtractOp::create(b, loc, v, ArrayRef<int64_t>{0});
    }
    regs.push_back(v);
  }
  return regs;
}

Value KernelBuilder::tileOffset(const SharedTile &t, Value row, Value col) {
  if (!t.swizzle)
    return add(t.base, add(mul(row, t.stride), col));
  const int64_t e = plan.chunkElems();
  Value chunk = arith::XOrIOp::create(b, loc, divui(col, e), remui(row, 8));
  if (!t.slabbed())
    return add(t.base, add(mul(row, t.stride),
                           add(mul(chunk, e), remui(col, e))));
  // Slab col / 64 of rows × 64 elements; the xor leaves chunk / 8 as it is.
  Value slab = divui(col, 64);
  return add(t.base,
             add(mul(slab, t.rows * 64),
                 add(mul(row, 64), add(mul(remui(chunk, 8), 8),
                                       remui(col, 8)))));
}

SmallVector<Value, 4> KernelBuilder::loadA(const SharedTile &t, Value row0,
                                           int64_t k0) {
  // Lanes 0-15 address rows 0-15 at k0, lanes 16-31 the same rows one
  // 16-byte chunk on (k0 + 8, or + 4 for f32: a0..a3 of m16n8k8 TF32 are
  // (g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4) as for 16-bit pairs).
  Value row = add(row0, remui(lane, 16));
  Value col = add(mul(divui(lane, 16), plan.chunkElems()), k0);
  return ldmatrixX4(tileOffset(t, row, col), false);
}

SmallVector<Value, 4> KernelBuilder::loadBFromNMajor(const SharedTile &t,
                                                     Value n0, int64_t k0) {
  // Matrices: (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15)
  // (f32: k 0-3 and 4-7, TF32's b0 = (k t, n g) and b1 = (k t + 4, n g)).
  Value row = add(n0, add(remui(lane, 8), mul(divui(lane, 16), 8)));
  Value col = add(mul(remui(divui(lane, 8), 2), plan.chunkElems()), k0);
  return ldmatrixX4(tileOffset(t, row, col), false);
}

SmallVector<Value, 4> KernelBuilder::loadBFromKMajor(const SharedTile &t,
                                                     int64_t k0, Value n0) {
  // Matrices: (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15),
  // each transposed so a lane holds two consecutive k of one n.
  Value row = add(add(remui(lane, 8), mul(remui(divui(lane, 8), 2), 8)), k0);
  Value col = add(n0, mul(divui(lane, 16), 8));
  return ldmatrixX4(tileOffset(t, row, col), true);
}

SmallVector<Value, 4> KernelBuilder::loadAFromTransposed(const SharedTile &t,
                                                         Value row0,
                                                         int64_t k0) {
  // Matrices a0..a3 = (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15),
  // (rows 8-15, k 8-15); stored rows are k, so lanes address k rows.
  Value row = add(add(remui(lane, 8), mul(divui(lane, 16), 8)), k0);
  Value col = add(row0, mul(remui(divui(lane, 8), 2), 8));
  return ldmatrixX4(tileOffset(t, row, col), true);
}

SmallVector<Value, 2> KernelBuilder::loadTf32BFromKMajor(const SharedTile &t,
                                                         int64_t k0, Value n0) {
  // With rows of a multiple of 32 words plus 4, lanes (g, t) hit 32 banks.
  Value row = add(mul(threadInGroup, 2), k0), col = add(n0, groupId);
  SmallVector<Value, 2> regs;
  for (int64_t r = 0; r < 2; ++r)
    regs.push_back(memref::LoadOp::create(
        b, loc, smem, ValueRange{tileOffset(t, add(row, r), col)}));
  return regs;
}

SmallVector<Value, 4>
KernelBuilder::loadTf32AFromTransposed(const SharedTile &t, Value row0,
                                       int64_t k0) {
  // a0..a3 = (g, k t), (g + 8, k t), (g, k t + 4), (g + 8, k t + 4).
  Value row = add(mul(threadInGroup, 2), k0), col = add(row0, groupId);
  SmallVector<Value, 4> regs;
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t c = 0; c < 2; ++c)
      regs.push_back(memref::LoadOp::create(
          b, loc, smem, ValueRange{tileOffset(t, add(row, r), add(col, 8 * c))}));
  return regs;
}

SmallVector<Value, 4>
mlir::fa::gpu_lowering::accumulatorToA(KernelBuilder &kb, ArrayRef<Value> c) {
  return {kb.pack(c[0], c[1]), kb.pack(c[2], c[3]), kb.pack(c[4], c[5]),
          kb.pack(c[6], c[7])};
}

void mlir::fa::gpu_lowering::forColumnPair(
    KernelBuilder &kb, int64_t n, int64_t cols, bool pairs, Value lo, Value hi,
    function_ref<void(int64_t, ValueRange)> emit) {
  // Columns of this n8 tile inside the row; lane t holds 2t and 2t + 1.
  const int64_t inside = cols - n * 8;
  auto guarded = [&](int64_t off, ValueRange values) {
    int64_t last = off + static_cast<int64_t>(values.size()) - 1;
    if (inside >= 8)
      return emit(off, values);
    if (inside <= last) // no lane holds this column inside the row
      return;
    auto ifOp = scf::IfOp::create(
        kb.b, kb.loc, kb.lt(kb.mul(kb.threadInGroup, 2), kb.idx(inside - last)),
        false);
    OpBuilder::InsertionGuard g(kb.b);
    kb.b.setInsertionPointToStart(&ifOp.getThenRegion().front());
    emit(off, values);
  };
  if (pairs) {
    guarded(0, {lo, hi});
  } else {
    guarded(0, {lo});
    guarded(1, {hi});
  }
}

void mlir::fa::gpu_lowering::storeColumnPair(KernelBuilder &kb, Value mem,
                                             Value rowOff, int64_t n,
                                             int64_t cols, int64_t rowStride,
                                             Value lo, Value hi) {
  forColumnPair(
      kb, n, cols, rowStride % 2 == 0, lo, hi, [&](int64_t off, ValueRange v) {
        Value col = kb.laneColumn(n * 8 + off);
        if (v.size() == 2) {
          kb.storePair(kb.truncPair(v[0], v[1]), mem, kb.add(rowOff, col));
          return;
        }
        Value e = v[0];
        if (!kb.plan.outputElemType().isF32())
          e = arith::TruncFOp::create(kb.b, kb.loc, kb.plan.elemType, e);
        memref::StoreOp::create(kb.b, kb.loc, e, mem,
                                ValueRange{kb.add(rowOff, col)});
      });
}

void mlir::fa::gpu_lowering::storeAccumulator(KernelBuilder &kb,
                                              ArrayRef<Value> acc, Value mem,
                                              Value base, Value row0,
                                              Value rowLimit, int64_t cols,
                                              ArrayRef<Value> rowScale,
                                              int64_t rowStride,
                                              Value dynamicRowStride) {
  OpBuilder &b = kb.b;
  if (!rowStride)
    rowStride = cols;
  Value rowElems = dynamicRowStride ? dynamicRowStride : kb.idx(rowStride);
  for (int64_t r = 0; r < 2; ++r) {
    Value row = kb.add(row0, kb.add(kb.groupId, r * 8));
    auto ifOp = scf::IfOp::create(b, kb.loc, kb.lt(row, rowLimit), false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&ifOp.getThenRegion().front());
    Value rowOff = kb.add(base, kb.mul(row, rowElems));
    for (int64_t n = 0; n < llvm::divideCeil(cols, 8); ++n) {
      Value lo = acc[n * 4 + 2 * r], hi = acc[n * 4 + 2 * r + 1];
      if (!rowScale.empty()) {
        lo = arith::MulFOp::create(b, kb.loc, lo, rowScale[r]);
        hi = arith::MulFOp::create(b, kb.loc, hi, rowScale[r]);
      }
      storeColumnPair(kb, mem, rowOff, n, cols, rowStride, lo, hi);
    }
  }
}

/// c += a·b by one row.col mma.sync of `shape` on operands of `type`
/// (4 f32 accumulators).
static void mmaSync(KernelBuilder &kb, ArrayRef<int64_t> shape,
                    NVVM::MMATypes type, ArrayRef<Value> a,
                    ArrayRef<Value> bFrag, MutableArrayRef<Value> c) {
  OpBuilder &b = kb.b;
  Type f32Ty = b.getF32Type();
  auto resTy = LLVM::LLVMStructType::getLiteral(
      b.getContext(), {f32Ty, f32Ty, f32Ty, f32Ty});
  std::array<NVVM::MMATypes, 2> types{type, type};
  std::array<NVVM::MMALayout, 2> layouts{NVVM::MMALayout::row,
                                         NVVM::MMALayout::col};
  Value r = NVVM::MmaOp::create(b, kb.loc, resTy, a, bFrag, c, shape,
                                std::nullopt, std::nullopt, types, layouts);
  for (int64_t i = 0; i < 4; ++i)
    c[i] = LLVM::ExtractValueOp::create(b, kb.loc, r, ArrayRef<int64_t>{i});
}

void KernelBuilder::mma(ArrayRef<Value> a, ArrayRef<Value> bFrag,
                        MutableArrayRef<Value> c) {
  // nvgpu.mma.sync cannot deduce bf16 PTX types in MLIR 22: use NVVM directly.
  mmaSync(*this, {16, 8, 16},
          plan.elemType.isBF16() ? NVVM::MMATypes::bf16 : NVVM::MMATypes::f16,
          a, bFrag, c);
}

/// f32 → TF32 bits (round to nearest, ties away from zero).
static Value roundTf32(KernelBuilder &kb, Value x) {
  return inlinePtx(kb.b, kb.loc, kb.b.getI32Type(), "cvt.rna.tf32.f32 $0, $1;",
                   ValueRange{x}, "=r,f", /*sideEffects=*/false);
}

SmallVector<Value, 8> KernelBuilder::splitTf32(ArrayRef<Value> x) {
  SmallVector<Value, 8> regs;
  for (Value v : x)
    regs.push_back(roundTf32(*this, v));
  if (plan.tf32)
    return regs;
  for (size_t i = 0; i < x.size(); ++i) {
    Value big = arith::BitcastOp::create(b, loc, b.getF32Type(), regs[i]);
    regs.push_back(
        roundTf32(*this, arith::SubFOp::create(b, loc, x[i], big)));
  }
  return regs;
}

void KernelBuilder::mmaTf32(ArrayRef<Value> a, ArrayRef<Value> bFrag,
                            MutableArrayRef<Value> c) {
  auto one = [&](ArrayRef<Value> a4, ArrayRef<Value> b2,
                 MutableArrayRef<Value> acc) {
    mmaSync(*this, {16, 8, 8}, NVVM::MMATypes::tf32, a4, b2, acc);
  };
  ArrayRef<Value> aBig = a.take_front(4), bBig = bFrag.take_front(2);
  if (plan.tf32)
    return one(aBig, bBig, c);
  // The tensor core adds into its accumulator truncating below the largest
  // addend's precision: the three products go into a fresh one, which joins
  // c by a rounded f32 add (c is the whole row's sum, many steps long).
  SmallVector<Value, 4> step(4, f32(0));
  one(a.drop_front(4), bBig, step);
  one(aBig, bFrag.drop_front(2), step);
  one(aBig, bBig, step);
  for (int64_t i = 0; i < 4; ++i)
    c[i] = arith::AddFOp::create(b, loc, c[i], step[i]);
}

Value KernelBuilder::truncPair(Value lo, Value hi) {
  Value v = vector::FromElementsOp::create(
      b, loc, VectorType::get({2}, b.getF32Type()), ValueRange{lo, hi});
  if (plan.outputElemType().isF32())
    return v;
  return arith::TruncFOp::create(
      b, loc, VectorType::get({2}, plan.outputElemType()), v);
}

Value KernelBuilder::pack(Value lo, Value hi) {
  Value v = truncPair(lo, hi);
  if (!plan.elemType.isBF16())
    return v;
  v = vector::BitCastOp::create(b, loc, VectorType::get({1}, b.getI32Type()),
                                v);
  return vector::ExtractOp::create(b, loc, v, ArrayRef<int64_t>{0});
}

Value KernelBuilder::exp2(Value x) {
  // ex2.approx.ftz directly: libdevice's exp2f adds non-ftz fixups.
  return LLVM::CallIntrinsicOp::create(b, loc, b.getF32Type(),
                                       b.getStringAttr("llvm.nvvm.ex2.approx.ftz.f"),
                                       ValueRange{x})
      .getResult(0);
}

Value KernelBuilder::exp2Poly(Value x) {
  // 1.5·2^23: the sum rounds x to its nearest integer j, kept in the low
  // mantissa bits, so bits(t) << 23 is j << 23 (mod 2^32).
  Value magic = f32(12582912.0);
  Value t = arith::AddFOp::create(b, loc, x, magic);
  Value j = arith::SubFOp::create(b, loc, t, magic);
  Value f = arith::SubFOp::create(b, loc, x, j);
  // 2^f on [-1/2, 1/2], relative minimax of degree 3 (error 7.5e-5).
  auto fma = [&](Value a, Value c, double d) {
    return LLVM::FMAOp::create(b, loc, a, c, f32(d)).getResult();
  };
  Value p = fma(fma(fma(f32(0.055171675980091095), f, 0.24261116981506348), f,
                    0.6932609677314758),
                f, 0.9999280571937561);
  Type i32 = b.getI32Type();
  Value exponent = arith::ShLIOp::create(
      b, loc, arith::BitcastOp::create(b, loc, i32, t), c32(23));
  Value scaled = arith::BitcastOp::create(
      b, loc, b.getF32Type(),
      arith::AddIOp::create(b, loc, arith::BitcastOp::create(b, loc, i32, p),
                            exponent));
  Value tiny =
      arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT, x, f32(-125.0));
  return select(tiny, f32(0.0), scaled);
}

attn::OnlineSoftmaxMath KernelBuilder::softmaxMath() {
  return {b, loc, [this](Value x) { return exp2(x); },
          [this](Value x) { return log2(x); }};
}

Value KernelBuilder::log2(Value x) {
  return LLVM::CallIntrinsicOp::create(b, loc, b.getF32Type(),
                                       b.getStringAttr("llvm.nvvm.lg2.approx.ftz.f"),
                                       ValueRange{x})
      .getResult(0);
}

Value KernelBuilder::shuffleXor(Value x, int64_t mask) {
  return gpu::ShuffleOp::create(b, loc, x, static_cast<int32_t>(mask), 32,
                                gpu::ShuffleMode::XOR)
      .getShuffleResult();
}

Value KernelBuilder::maxf(Value x, Value y) {
  return arith::MaxNumFOp::create(b, loc, x, y);
}

void KernelBuilder::storePair(Value vec, Value mem, Value index) {
  // A pair starts at an even column of a row whose stride is even.
  int64_t bytes = cast<VectorType>(vec.getType()).getElementTypeBitWidth() / 4;
  vector::StoreOp::create(b, loc, vec, mem, ValueRange{index},
                          /*nontemporal=*/false, llvm::MaybeAlign(bytes));
}

SmallVector<Value> KernelBuilder::maskUnlessInside(
    Value inside, ValueRange scores,
    function_ref<void(SmallVector<Value> &)> applyMask) {
  auto ifOp = scf::IfOp::create(b, loc, TypeRange(scores), inside,
                                /*withElseRegion=*/true);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(&ifOp.getThenRegion().front());
  scf::YieldOp::create(b, loc, scores);
  b.setInsertionPointToStart(&ifOp.getElseRegion().front());
  SmallVector<Value> masked(scores.begin(), scores.end());
  applyMask(masked);
  scf::YieldOp::create(b, loc, masked);
  return SmallVector<Value>(ifOp.getResults());
}

/// storeColumnPair for an f32 matrix (a split's partial O): 8-byte pairs
/// where the row length is even.
void mlir::fa::gpu_lowering::storeColumnPairF32(KernelBuilder &kb, Value mem, Value rowOff,
                               int64_t n, int64_t cols, Value lo, Value hi) {
  forColumnPair(
      kb, n, cols, cols % 2 == 0, lo, hi, [&](int64_t off, ValueRange v) {
        Value col = kb.laneColumn(n * 8 + off);
        Value at = kb.add(rowOff, col);
        if (v.size() == 2) {
          Value pair = vector::FromElementsOp::create(
              kb.b, kb.loc, VectorType::get({2}, kb.b.getF32Type()), v);
          vector::StoreOp::create(kb.b, kb.loc, pair, mem, ValueRange{at},
                                  /*nontemporal=*/false, llvm::MaybeAlign(8));
          return;
        }
        memref::StoreOp::create(kb.b, kb.loc, v[0], mem, ValueRange{at});
      });
}

Value mlir::fa::gpu_lowering::reduceOverCta(
    KernelBuilder &kb, gpu::GPUModuleOp module, Value value, int64_t warps,
    function_ref<Value(Value, Value)> combine) {
  OpBuilder &b = kb.b;
  Location loc = kb.loc;
  for (int64_t mask = 16; mask > 0; mask /= 2)
    value = combine(value, kb.shuffleXor(value, mask));
  Value perWarp = kb.sharedView(module, b.getF32Type(), warps);
  Value firstLane = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                                          kb.lane, kb.idx(0));
  auto store = scf::IfOp::create(b, loc, firstLane, false);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&store.getThenRegion().front());
    memref::StoreOp::create(b, loc, value, perWarp, ValueRange{kb.warp});
  }
  gpu::BarrierOp::create(b, loc);
  Value total = kb.f32(0);
  for (int64_t w = 0; w < warps; ++w)
    total = combine(
        total, memref::LoadOp::create(b, loc, perWarp, ValueRange{kb.idx(w)}));
  return total;
}
