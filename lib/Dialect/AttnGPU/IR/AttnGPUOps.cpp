//===- AttnGPUOps.cpp - attn_gpu types, ops and verifiers -------*- C++ -*-===//

#include "fa/Dialect/AttnGPU/IR/AttnGPU.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::fa::attn_gpu;

#include "attn_gpu/AttnGPUDialect.cpp.inc"
#include "attn_gpu/AttnGPUEnums.cpp.inc"
#define GET_TYPEDEF_CLASSES
#include "attn_gpu/AttnGPUTypes.cpp.inc"
#define GET_OP_CLASSES
#include "attn_gpu/AttnGPUOps.cpp.inc"

void AttnGPUDialect::initialize() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "attn_gpu/AttnGPUTypes.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "attn_gpu/AttnGPUOps.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// Types
//===----------------------------------------------------------------------===//

/// `<RxCxT` of both types' syntax.
static ParseResult parseTileShape(AsmParser &parser, int64_t &rows,
                                  int64_t &cols, Type &elementType) {
  SmallVector<int64_t, 2> shape;
  if (parser.parseLess() ||
      parser.parseDimensionList(shape, /*allowDynamic=*/false) ||
      parser.parseType(elementType))
    return failure();
  if (shape.size() != 2)
    return parser.emitError(parser.getNameLoc(),
                            "expected a rows x cols shape, got ")
           << shape.size() << " dims";
  rows = shape[0], cols = shape[1];
  return success();
}

Type FragmentType::parse(AsmParser &parser) {
  int64_t rows, cols;
  Type elementType;
  if (failed(parseTileShape(parser, rows, cols, elementType)) ||
      parser.parseComma())
    return {};
  StringRef keyword;
  SMLoc at = parser.getCurrentLocation();
  if (parser.parseKeyword(&keyword) || parser.parseGreater())
    return {};
  std::optional<FragmentLayout> layout = symbolizeFragmentLayout(keyword);
  if (!layout) {
    parser.emitError(at,
                     "expected accumulator, operand_a, rows or columns, got ")
        << keyword;
    return {};
  }
  return parser.getChecked<FragmentType>(parser.getContext(), rows, cols,
                                         elementType, *layout);
}

void FragmentType::print(AsmPrinter &printer) const {
  printer << "<" << getRows() << "x" << getCols() << "x" << getElementType()
          << ", " << stringifyFragmentLayout(getLayout()) << ">";
}

LogicalResult
FragmentType::verify(function_ref<InFlightDiagnostic()> emitError,
                     int64_t rows, int64_t cols, Type elementType,
                     FragmentLayout layout) {
  if (rows != 16)
    return emitError() << "expected a warp's 16 rows, got " << rows;
  switch (layout) {
  case FragmentLayout::Accumulator:
  case FragmentLayout::Rows:
  case FragmentLayout::Columns:
    if (!elementType.isF32())
      return emitError() << "expected f32 elements in the "
                         << stringifyFragmentLayout(layout)
                         << " layout, got " << elementType;
    if (layout == FragmentLayout::Rows && cols != 1)
      return emitError() << "expected 1 column in the rows layout, got "
                         << cols;
    if (layout == FragmentLayout::Columns && (cols <= 0 || cols % 8 != 0))
      return emitError() << "expected the columns layout in n8 tiles, got "
                         << cols << " columns";
    if (cols <= 0)
      return emitError() << "expected a positive column count, got " << cols;
    return success();
  case FragmentLayout::OperandA:
    if (!elementType.isF16() && !elementType.isBF16() && !elementType.isF32())
      return emitError() << "expected f16, bf16 or f32 (TF32) operand_a "
                            "elements, got "
                         << elementType;
    if (cols <= 0 || cols % 16 != 0)
      return emitError() << "expected operand_a columns in k16 steps, got "
                         << cols;
    return success();
  }
  return success();
}

int64_t FragmentType::getLaneValueCount() const {
  switch (getLayout()) {
  case FragmentLayout::Accumulator:
    return (getCols() + 7) / 8 * 4;
  case FragmentLayout::OperandA:
    // Four registers per m16n8k16 step (16-bit pairs) or m16n8k8 (f32).
    return getCols() / (getElementType().isF32() ? 8 : 16) * 4;
  case FragmentLayout::Rows:
    return 2;
  case FragmentLayout::Columns:
    return getCols() / 8 * 2;
  }
  return 0;
}

Type SharedTileType::parse(AsmParser &parser) {
  int64_t rows = 0, cols = 0, stride = 0;
  Type elementType;
  if (failed(parseTileShape(parser, rows, cols, elementType)) ||
      parser.parseComma() || parser.parseKeyword("stride") ||
      parser.parseEqual() || parser.parseInteger(stride))
    return {};
  bool swizzle = succeeded(parser.parseOptionalComma());
  if ((swizzle && parser.parseKeyword("swizzle")) || parser.parseGreater())
    return {};
  return parser.getChecked<SharedTileType>(parser.getContext(), rows, cols,
                                           elementType, stride, swizzle);
}

void SharedTileType::print(AsmPrinter &printer) const {
  printer << "<" << getRows() << "x" << getCols() << "x" << getElementType()
          << ", stride = " << getStride() << (getSwizzle() ? ", swizzle" : "")
          << ">";
}

LogicalResult
SharedTileType::verify(function_ref<InFlightDiagnostic()> emitError,
                       int64_t rows, int64_t cols, Type elementType,
                       int64_t stride, bool swizzle) {
  if (swizzle && (cols % 64 != 0 || (stride != cols && stride != 64)))
    return emitError() << "expected a swizzled tile's columns to be a "
                          "multiple of 64 and its stride to be them (rows) "
                          "or 64 (slabs), got "
                       << cols << " columns, stride " << stride;
  if (rows <= 0 || rows % 16 != 0)
    return emitError() << "expected rows in steps of 16, got " << rows;
  if (!elementType.isF16() && !elementType.isBF16() && !elementType.isF32())
    return emitError() << "expected f16, bf16 or f32 elements, got "
                       << elementType;
  int64_t padded = (cols + 15) / 16 * 16;
  if (cols <= 0 || (stride < padded && !(swizzle && stride == 64)))
    return emitError() << "expected a row stride of at least the columns "
                          "padded to 16 ("
                       << padded << "), got " << stride;
  return success();
}

//===----------------------------------------------------------------------===//
// Ops
//===----------------------------------------------------------------------===//

static bool isLayout(Type t, FragmentLayout layout) {
  auto f = dyn_cast<FragmentType>(t);
  return f && f.getLayout() == layout;
}

LogicalResult SharedMemoryOp::verify() {
  Type t = getElementType();
  if (!t.isF16() && !t.isBF16() && !t.isF32())
    return emitOpError("expected f16, bf16 or f32 elements, got ") << t;
  if (getElements() <= 0)
    return emitOpError("expected a positive element count, got ")
           << getElements();
  return success();
}

WarpSpecializeOp WarpSpecializeOp::build(OpBuilder &b, Location loc,
                                         int32_t producerRegisters,
                                         int32_t consumerRegisters) {
  auto op = WarpSpecializeOp::create(b, loc, producerRegisters,
                                     consumerRegisters);
  op.getProducer().emplaceBlock();
  op.getConsumers().emplaceBlock().addArgument(b.getIndexType(), loc);
  return op;
}

LogicalResult WarpSpecializeOp::verifyRegions() {
  if (getProducerBlock().getNumArguments() != 0 ||
      getConsumerBlock().getNumArguments() != 1 ||
      !getConsumerBlock().getArgument(0).getType().isIndex())
    return emitOpError("expected no producer argument and one index "
                       "argument (the consumer) of the consumers");
  int64_t producer = getProducerRegisters(), consumer = getConsumerRegisters();
  for (int64_t r : {producer, consumer})
    if (r < 24 || r > 256 || r % 8)
      return emitOpError("expected register budgets that are multiples of 8 "
                         "in [24, 256], got ")
             << r;
  auto func = (*this)->getParentOfType<gpu::GPUFuncOp>();
  DenseI32ArrayAttr block = func ? func.getKnownBlockSizeAttr() : nullptr;
  if (!block)
    return emitOpError("expected to lie in a gpu.func with known_block_size "
                       "(setmaxnreg needs the .maxntid cap)");
  int64_t threads = 1;
  for (int32_t d : block.asArrayRef())
    threads *= d;
  if (threads % 128 || threads < 256)
    return emitOpError("expected whole warpgroups and at least two, got ")
           << threads << " threads";
  int64_t groups = threads / 128, entry = entryRegisters(threads);
  if (producer > entry || consumer < entry ||
      producer + (groups - 1) * consumer > groups * entry)
    return emitOpError("expected budgets within the ")
           << entry << " registers per thread of " << threads
           << " threads at entry (producer <= " << entry << " <= consumer, "
           << "producer + " << groups - 1 << " x consumer <= " << groups * entry
           << "), got " << producer << " and " << consumer;
  return success();
}

ProducerWarpOp ProducerWarpOp::build(OpBuilder &b, Location loc,
                                     int64_t consumerWarps) {
  auto op = ProducerWarpOp::create(b, loc, consumerWarps);
  op.getProducer().emplaceBlock();
  op.getConsumers().emplaceBlock();
  return op;
}

LogicalResult ProducerWarpOp::verifyRegions() {
  if (getProducerBlock().getNumArguments() || getConsumerBlock().getNumArguments())
    return emitOpError("expected producer and consumer blocks without "
                       "arguments");
  int64_t warps = getConsumerWarps();
  if (warps < 1 || warps > 31)
    return emitOpError("expected 1 to 31 consumer warps, got ") << warps;
  auto func = (*this)->getParentOfType<gpu::GPUFuncOp>();
  DenseI32ArrayAttr block = func ? func.getKnownBlockSizeAttr() : nullptr;
  if (block && (block[0] != (warps + 1) * 32 || block[1] * block[2] != 1))
    return emitOpError("expected a known_block_size of ")
           << (warps + 1) * 32 << " threads (" << warps
           << " consumer warps and the producer), got " << block;
  return success();
}

/// A TMA-loaded tile: swizzled 64-column slabs (or one 64-column tile),
/// 1024-byte aligned where its shared_tile op says so statically.
static LogicalResult verifyTmaTile(Operation *op, Value tile) {
  auto type = cast<SharedTileType>(tile.getType());
  if (!type.getSwizzle() || type.getStride() != 64)
    return op->emitOpError("expected a TMA copy's tile to be swizzled "
                           "64-column slabs (stride = 64, swizzle), got ")
           << type;
  auto def = tile.getDefiningOp<SharedTileOp>();
  int64_t bytes = type.getElementType().getIntOrFloatBitWidth() / 8;
  if (def && ((def.getOffset() * bytes) % 1024 ||
              (def.getStageElements().value_or(0) * bytes) % 1024))
    return op->emitOpError("expected a TMA copy's tile and its stages at "
                           "multiples of 1024 bytes (the 128-byte swizzle's "
                           "period), got offset ")
           << def.getOffset() << " and stage "
           << def.getStageElements().value_or(0) << " elements of " << bytes
           << " bytes";
  return success();
}

/// A ring's barriers lie 8-byte aligned in the shared buffer.
static LogicalResult verifyRing(Operation *op, int64_t at, int64_t slots) {
  if (at < 0 || at % 8)
    return op->emitOpError("expected the ring's barriers at a non-negative "
                           "multiple of 8 bytes, got ")
           << at;
  if (slots < 1)
    return op->emitOpError("expected at least one slot, got ") << slots;
  return success();
}

LogicalResult RingInitOp::verify() {
  if (getProducers() < 1 || getConsumers() < 1)
    return emitOpError("expected producer and consumer thread counts >= 1, "
                       "got ")
           << getProducers() << " and " << getConsumers();
  return verifyRing(*this, getAt(), getSlots());
}
LogicalResult TmaCopyOp::verify() {
  if (!isa<LLVM::LLVMPointerType>(getTensorMap().getType()))
    return emitOpError("expected the tensor map as a pointer to the kernel's "
                       "CUtensorMap parameter, got ")
           << getTensorMap().getType();
  auto tileType = cast<SharedTileType>(getTile().getType());
  if (!getPages().empty()) {
    int64_t pages = 2 * tileType.getRows() / 16;
    if (getCoords().size() != 1 ||
        static_cast<int64_t>(getPages().size()) != pages)
      return emitOpError("expected a paged TMA copy to give the head "
                         "coordinate and a page and offset per 16-key group "
                         "(")
             << pages << " for " << tileType.getRows() << " rows), got "
             << getCoords().size() << " coordinates and "
             << getPages().size() << " pages and offsets";
  } else if (getCoords().size() != 2) {
    return emitOpError("expected the head and batch coordinates after the "
                       "row (a 4-D map), got ")
           << getCoords().size() << " coordinates";
  }
  if (getThread() < 0 || getThread() >= 1024)
    return emitOpError("expected the issuing thread in [0, 1024), got ")
           << getThread();
  if (failed(verifyTmaTile(*this, getTile())))
    return failure();
  return verifyRing(*this, getAt(), getSlots());
}
LogicalResult PageWalkOp::verify() {
  if (getGroups() < 1 ||
      static_cast<int64_t>(getWalk().size()) != 2 * getGroups())
    return emitOpError("expected a page and an offset per group (")
           << 2 * getGroups() << " results for " << getGroups()
           << " groups), got " << getWalk().size();
  return success();
}
LogicalResult RingArriveOp::verify() {
  if (getThread() < 0 || getThread() >= 1024)
    return emitOpError("expected the arriving thread in [0, 1024), got ")
           << getThread();
  return verifyRing(*this, getAt(), getSlots());
}
LogicalResult RingAcquireOp::verify() {
  return verifyRing(*this, getAt(), getSlots());
}
LogicalResult RingCommitOp::verify() {
  return verifyRing(*this, getAt(), getSlots());
}
LogicalResult RingWaitOp::verify() {
  return verifyRing(*this, getAt(), getSlots());
}
LogicalResult RingReleaseOp::verify() {
  return verifyRing(*this, getAt(), getSlots());
}

LogicalResult SharedTileOp::verify() {
  if (static_cast<bool>(getStage()) != getStageElements().has_value())
    return emitOpError("expected a stage together with its stage_elements");
  if (getOffset() < 0)
    return emitOpError("expected a non-negative offset, got ") << getOffset();
  return success();
}

LogicalResult PackedRowsOp::verify() {
  if (getBlockRows() <= 0 || getBlockRows() % 16 != 0)
    return emitOpError("expected block_rows in steps of a warp's 16, got ")
           << getBlockRows();
  return success();
}

/// A copy's thread range [begin, end): whole warps, within a CTA.
static LogicalResult verifyCopyThreads(Operation *op,
                                       std::optional<uint64_t> begin,
                                       std::optional<uint64_t> end) {
  if (!begin)
    return success();
  if (*begin % 32 || *end % 32 || *begin >= *end || *end > 1024)
    return op->emitOpError("expected a thread range of whole warps within "
                           "1024 threads, got ")
           << *begin << " to " << *end;
  return success();
}

LogicalResult AsyncCopyOp::verify() {
  if (failed(verifyCopyThreads(*this, getThreadBegin(), getThreadEnd())))
    return failure();
  if (getTensorMap()) {
    if (!isa<LLVM::LLVMPointerType>(getTensorMap().getType()))
      return emitOpError("expected the tensor map as a pointer to the "
                         "kernel's CUtensorMap parameter, got ")
             << getTensorMap().getType();
    // Paged, the page coordinate comes through the table.
    size_t coords = getPageTable() ? 1 : 2;
    if (getMapCoords().size() != coords)
      return emitOpError("expected a TMA-capable copy to give the map's head")
             << (coords == 2 ? " and batch coordinates" : " coordinate")
             << " (" << coords << " operands, got " << getMapCoords().size()
             << ")";
    if (failed(verifyTmaTile(*this, getTile())))
      return failure();
  } else if (!getMapCoords().empty()) {
    return emitOpError("expected map coordinates only with a tensor map");
  }
  if (!getPageTable())
    return getPaging().empty()
               ? success()
               : emitOpError("expected paging operands only with a page table");
  if (getPaging().size() != 3)
    return emitOpError("expected a paged copy's table base, page size and "
                       "page count, got ")
           << getPaging().size() << " operands";
  if (!isa<LLVM::LLVMPointerType>(getPageTable().getType()))
    return emitOpError("expected the page table as a global pointer (its "
                       "i32 entries read with ld.global.nc), got ")
           << getPageTable().getType();
  return success();
}

LogicalResult AsyncGatherOp::verify() {
  if (failed(verifyCopyThreads(*this, getThreadBegin(), getThreadEnd())))
    return failure();
  Type source = cast<MemRefType>(getSource().getType()).getElementType();
  Type tile = getTile().getType().getElementType();
  if (source != tile)
    return emitOpError("expected the source's elements (")
           << source << ") to be the tile's (" << tile << ")";
  return success();
}

LogicalResult LoadOperandAOp::verify() {
  SharedTileType tile = getTile().getType();
  FragmentType frag = getFragment().getType();
  int64_t padded = (tile.getCols() + 15) / 16 * 16;
  if (frag.getLayout() != FragmentLayout::OperandA ||
      frag.getCols() != padded || frag.getElementType() != tile.getElementType())
    return emitOpError("expected a 16x")
           << padded << "x" << tile.getElementType()
           << " operand_a fragment, got " << frag;
  return success();
}

/// A window's sizes: window_left and window_right, or two run-time operands,
/// exactly with a window mask.
static LogicalResult verifyWindowSizes(Operation *op, fa::attn::MaskKind mask,
                                       bool sizes, ValueRange operands) {
  bool window = mask == fa::attn::MaskKind::Window;
  bool given = operands.size() == 2;
  if (!operands.empty() && !given)
    return op->emitOpError("expected two run-time window sizes (left, "
                           "right), got ")
           << operands.size();
  if (window != (sizes || given) || (sizes && given))
    return op->emitOpError("expected window_left and window_right, or "
                           "window(%left, %right), exactly with a window mask");
  return success();
}

LogicalResult KeyBoundsOp::verify() {
  KeyBoundsType type = getBounds().getType();
  bool window = getMask() == fa::attn::MaskKind::Window;
  // A mask_mod keeps the rows' upper edges even without a band.
  bool masked = getMask() != fa::attn::MaskKind::None || getMaskMod();
  if (type.getLeft() != window || type.getRight() != masked)
    return emitOpError("expected bounds with left = ")
           << window << ", right = " << masked << " for mask "
           << fa::attn::stringifyMaskKind(getMask())
           << (getMaskMod() ? " with a mask_mod" : "") << ", got " << type;
  if (getRows() && getBlockBegin())
    return emitOpError("expected packed rows or a block begin, not both");
  return verifyWindowSizes(*this, getMask(),
                           getWindowLeft() && getWindowRight(),
                           getWindowSizes());
}

LogicalResult MmaQKOp::verify() {
  SharedTileType key = getKey().getType();
  Type query = getQuery().getType();
  int64_t padded = (key.getCols() + 15) / 16 * 16;
  if (auto tile = dyn_cast<SharedTileType>(query)) {
    if (!getQueryRow())
      return emitOpError("expected the warp's row of a shared query tile");
    if (tile.getCols() != key.getCols())
      return emitOpError("expected query and key head dims to match, got ")
             << tile.getCols() << " and " << key.getCols();
  } else if (isLayout(query, FragmentLayout::OperandA)) {
    if (getQueryRow())
      return emitOpError("expected no row for a query fragment");
    if (cast<FragmentType>(query).getCols() != padded)
      return emitOpError("expected a query fragment of ")
             << padded << " columns, got " << query;
  } else {
    return emitOpError("expected the query as a shared tile or an "
                       "operand_a fragment, got ")
           << query;
  }
  FragmentType scores = getScores().getType();
  if (scores.getLayout() != FragmentLayout::Accumulator ||
      scores.getCols() != key.getRows())
    return emitOpError("expected 16x") << key.getRows()
           << "xf32 accumulator scores, got " << scores;
  return success();
}

LogicalResult OnlineSoftmaxOp::verify() {
  if (!isLayout(getScores().getType(), FragmentLayout::Accumulator) ||
      !isLayout(getAcc().getType(), FragmentLayout::Accumulator))
    return emitOpError("expected scores and acc in the accumulator layout");
  if (!isLayout(getMax().getType(), FragmentLayout::Rows))
    return emitOpError("expected max and sum in the rows layout, got ")
           << getMax().getType();
  const int64_t cols = getScores().getType().getCols();
  const int64_t scales = getScaleLog2().size();
  if (IntegerAttr blockAttr = getScaleBlockAttr()) {
    const int64_t block = blockAttr.getInt();
    if (block < 8 || block % 8)
      return emitOpError("expected a scale block of a positive multiple of "
                         "8 columns, got ")
             << block;
    if (scales != llvm::divideCeil(cols, block))
      return emitOpError("expected ")
             << llvm::divideCeil(cols, block) << " scales for " << cols
             << " columns in blocks of " << block << ", got " << scales;
  } else if (scales != 1) {
    return emitOpError("expected one scale without a scale block, got ")
           << scales;
  }
  FloatAttr lazy = getLazyRescaleLog2Attr();
  if (lazy && !(lazy.getValueAsDouble() > 0))
    return emitOpError("expected a positive lazy rescale threshold, got ")
           << lazy.getValueAsDouble();
  IntegerAttr poly = getPolyExp2Attr();
  if (poly && (poly.getInt() < 1 || poly.getInt() > 8))
    return emitOpError("expected poly_exp2 in [1, 8] n8 tiles of every 8, "
                       "got ")
           << poly.getInt();
  return success();
}

LogicalResult MmaPVOp::verify() {
  FragmentType probs = getProbs().getType();
  SharedTileType value = getValue().getType();
  FragmentType acc = getAcc().getType();
  if (probs.getLayout() != FragmentLayout::Accumulator ||
      probs.getCols() != value.getRows())
    return emitOpError("expected accumulator probabilities of ")
           << value.getRows() << " columns, got " << probs;
  // A column slice (first_column) may be narrower than the tile.
  bool fits = getFirstColumn() ? acc.getCols() <= value.getCols()
                               : acc.getCols() == value.getCols();
  if (acc.getLayout() != FragmentLayout::Accumulator || !fits)
    return emitOpError("expected an accumulator of ")
           << (getFirstColumn() ? "at most " : "") << value.getCols()
           << " columns, got " << acc;
  return success();
}

/// Fails unless `type` is a wgmma operand type fa issues (bf16, f16, e4m3)
/// and `acc` an accumulator of a wgmma width (8 … 256 columns, n8 steps).
static LogicalResult verifyWgmma(Operation *op, Type type, FragmentType acc) {
  if (!type.isBF16() && !type.isF16() && !isa<Float8E4M3FNType>(type))
    return op->emitOpError("expected bf16, f16 or f8E4M3FN operands, got ")
           << type;
  int64_t n = acc.getCols();
  if (acc.getLayout() != FragmentLayout::Accumulator || n % 8 != 0 || n < 8 ||
      n > 256)
    return op->emitOpError("expected an accumulator of 8 to 256 columns in "
                           "n8 steps (a wgmma m64nN), got ")
           << acc;
  return success();
}

LogicalResult WgmmaQKOp::verify() {
  size_t steps = getQueryDescriptors().size();
  if (steps == 0 || steps != getKeyDescriptors().size())
    return emitOpError("expected one Q and one K descriptor per k step, got ")
           << steps << " and " << getKeyDescriptors().size();
  if (getMnMajor() && isa<Float8E4M3FNType>(getOperandType()))
    return emitOpError("expected K-major e4m3 operands (an 8-bit wgmma has "
                       "no transpose)");
  return verifyWgmma(*this, getOperandType(), getScores().getType());
}

LogicalResult WgmmaPVOp::verify() {
  size_t steps = getValueDescriptors().size();
  if (steps == 0 || getProbs().size() != 4 * steps)
    return emitOpError("expected four P registers per V descriptor (k "
                       "step), got ")
           << getProbs().size() << " and " << steps;
  return verifyWgmma(*this, getOperandType(), getAcc().getType());
}

LogicalResult TransposeFp8TileOp::verify() {
  // 64-key halves of 128-column slabs; past 128 keys only one slab.
  int64_t rows = getRows(), cols = getCols();
  if (cols <= 0 || cols % 128 || rows <= 0 || rows % 64 ||
      (rows > 128 && cols != 128))
    return emitOpError("expected a multiple of 64 rows and of 128 columns "
                       "(more than 128 rows only at 128 columns), got ")
           << rows << " x " << cols;
  // Warp 0 of the producer warpgroup holds the TMA thread.
  int64_t first = getFirstWarp(), warps = getWarps();
  if (first < 1 || warps < 1 || first + warps > 4)
    return emitOpError("expected transposing warps inside warps 1-3 of the "
                       "producer warpgroup, got ")
           << warps << " from warp " << first;
  return success();
}

LogicalResult StoreOutputOp::verify() {
  if (!isLayout(getAcc().getType(), FragmentLayout::Accumulator) ||
      !isLayout(getInvSum().getType(), FragmentLayout::Rows) ||
      !isLayout(getLse().getType(), FragmentLayout::Rows))
    return emitOpError("expected an accumulator and rows of 1/l and LSE");
  Type elem = getOutput().getType().getElementType();
  if (getRows() && getOutputRowStride())
    return emitOpError("expected packed rows to store f32 partial rows, "
                       "without a row stride");
  if (static_cast<bool>(getSplit()) != static_cast<bool>(getBatches()) ||
      (getSplit() && !getRows()))
    return emitOpError("expected a split together with its batch count, "
                       "for packed rows only (plain splits are in lse_base)");
  if (!getOutputRowStride() && !elem.isF32())
    return emitOpError("expected f32 partial rows without a row stride, got ")
           << elem;
  if (getStaging() && (getRows() || !getOutputRowStride()))
    return emitOpError("expected a staged store of plain rows with a row "
                       "stride (the wgmma forward's epilogue)");
  return success();
}


/// The leading arguments of a score_mod region: (f32, index × 4).
static LogicalResult verifyScoreModRegion(Operation *op, Region &region) {
  Block &body = region.front();
  if (body.getNumArguments() < 5)
    return op->emitOpError("expected the score_mod arguments (score, b, h, "
                           "q_idx, kv_idx, mod_args...), got ")
           << body.getNumArguments();
  Type f32 = Float32Type::get(op->getContext());
  Type index = IndexType::get(op->getContext());
  if (body.getArgument(0).getType() != f32 ||
      llvm::any_of(body.getArguments().slice(1, 4),
                   [&](BlockArgument a) { return a.getType() != index; }))
    return op->emitOpError("expected (f32, index, index, index, index) "
                           "leading score_mod arguments");
  return success();
}

/// The leading arguments of a mask_mod region: (index × 4).
static LogicalResult verifyMaskModRegion(Operation *op, Region &region) {
  Block &body = region.front();
  if (body.getNumArguments() < 4)
    return op->emitOpError("expected the mask_mod arguments (b, h, q_idx, "
                           "kv_idx, mod_args...), got ")
           << body.getNumArguments();
  Type index = IndexType::get(op->getContext());
  if (llvm::any_of(body.getArguments().take_front(4),
                   [&](BlockArgument a) { return a.getType() != index; }))
    return op->emitOpError("expected (index, index, index, index) leading "
                           "mask_mod arguments");
  return success();
}

LogicalResult ScoreModOp::verifyRegions() {
  return verifyScoreModRegion(*this, getScoreMod());
}

LogicalResult ScoreModShiftOp::verifyRegions() {
  if (!isLayout(getShift().getType(), FragmentLayout::Rows))
    return emitOpError("expected a shift in the rows layout, got ")
           << getShift().getType();
  return verifyScoreModRegion(*this, getScoreMod());
}

LogicalResult FinalizeSoftmaxOp::verify() {
  if (getShift() && getShift().getType() != getMax().getType())
    return emitOpError("expected a shift of the max's type ")
           << getMax().getType() << ", got " << getShift().getType();
  return success();
}

LogicalResult MaskModOp::verifyRegions() {
  return verifyMaskModRegion(*this, getMaskMod());
}

LogicalResult TransposedScoreModOp::verifyRegions() {
  if (!isLayout(getScores().getType(), FragmentLayout::Accumulator))
    return emitOpError("expected Sᵀ in the accumulator layout, got ")
           << getScores().getType();
  return verifyScoreModRegion(*this, getScoreMod());
}

LogicalResult TransposedMaskModOp::verifyRegions() {
  if (!isLayout(getScores().getType(), FragmentLayout::Accumulator))
    return emitOpError("expected Sᵀ in the accumulator layout, got ")
           << getScores().getType();
  return verifyMaskModRegion(*this, getMaskMod());
}

LogicalResult SharedF32ViewOp::verify() {
  if (getView().getType().getMemorySpaceAsInt() != 3 ||
      !getView().getType().hasStaticShape())
    return emitOpError("expected a static memref in shared memory (address "
                       "space 3), got ")
           << getView().getType();
  return success();
}

/// The backward's row statistics live in the row padding of a tile at an
/// even element offset of the buffer (whole f32 words), padded by at least
/// the 4 words a padding row holds.
static LogicalResult verifyStatsTile(Operation *op, Value tile) {
  auto def = tile.getDefiningOp<SharedTileOp>();
  if (!def || def.getStage() || def.getOffset() % 2 != 0)
    return op->emitOpError("expected the statistics' tile as an unstaged "
                           "attn_gpu.shared_tile at an even offset");
  auto type = cast<SharedTileType>(tile.getType());
  int64_t padded = (type.getCols() + 15) / 16 * 16;
  int64_t pad = 128 / type.getElementType().getIntOrFloatBitWidth();
  if (type.getStride() - padded != pad)
    return op->emitOpError("expected ")
           << pad << " elements of row padding (4 words) beside the tile's "
           << "columns, got " << type.getStride() - padded;
  return success();
}

LogicalResult AsyncCopyRowStatsOp::verify() {
  auto tile = getTile().getType();
  if (getBlockRows() <= 0 || getBlockRows() % 16 != 0 ||
      2 * getBlockRows() > 4 * tile.getRows())
    return emitOpError("expected block_rows in steps of 16 whose LSE and "
                       "Delta fit the padding of the tile's ")
           << tile.getRows() << " rows, got " << getBlockRows();
  return verifyStatsTile(*this, getTile());
}

LogicalResult TransposedBoundsOp::verify() {
  if (failed(verifyWindowSizes(*this, getMask(),
                               getWindowLeft() && getWindowRight(),
                               getWindowSizes())))
    return failure();
  if (getBlockKeys() <= 0 || getBlockKeys() % 16 != 0)
    return emitOpError("expected block_keys in steps of 16, got ")
           << getBlockKeys();
  if (getBlockQueries() <= 0 || getBlockQueries() % 8 != 0)
    return emitOpError("expected block_queries in steps of 8, got ")
           << getBlockQueries();
  return success();
}

LogicalResult TransposedMaskOp::verify() {
  if (!isLayout(getScores().getType(), FragmentLayout::Accumulator))
    return emitOpError("expected Sᵀ in the accumulator layout");
  return success();
}

/// The columns fragment Delta of `probs`' query columns.
static LogicalResult verifyColumnsDelta(Operation *op, FragmentType probs,
                                        FragmentType delta) {
  if (probs.getLayout() != FragmentLayout::Accumulator ||
      delta.getLayout() != FragmentLayout::Columns ||
      delta.getCols() != probs.getCols())
    return op->emitOpError("expected accumulator scores and a columns Delta "
                           "of ")
           << probs.getCols() << " columns, got " << delta;
  return success();
}

LogicalResult RecomputeProbsOp::verify() {
  FragmentType scores = getScores().getType();
  if (static_cast<bool>(getStatsBase()) == static_cast<bool>(getTile()))
    return emitOpError("expected the statistics at a base or beside a tile");
  if (getFoldedLse() && !getStatsBase())
    return emitOpError("expected folded_lse with statistics at a base");
  if (getStatsBase()) {
    if (getDelta())
      return emitOpError("expected no Delta from statistics at a base (its "
                         "score_gradient reads it)");
    if (scores.getLayout() != FragmentLayout::Accumulator)
      return emitOpError("expected accumulator scores, got ") << scores;
    return success();
  }
  if (!getDelta())
    return emitOpError("expected the Delta beside the tile");
  if (failed(verifyColumnsDelta(*this, scores, getDelta().getType())))
    return failure();
  if (2 * scores.getCols() > 4 * getTile().getType().getRows())
    return emitOpError("expected the ") << scores.getCols()
           << " columns' statistics to fit the tile's padding";
  return verifyStatsTile(*this, getTile());
}

LogicalResult ScoreGradientOp::verify() {
  if (static_cast<int>(static_cast<bool>(getScale())) +
          static_cast<bool>(getDerivative()) + getPrescaled() !=
      1)
    return emitOpError("expected one of the scale, a score_mod's derivative "
                       "or prescaled probabilities");
  if (getDerivative() && getDerivative().getType() != getProbs().getType())
    return emitOpError("expected the derivative in the scores' type, got ")
           << getDerivative().getType();
  if (static_cast<bool>(getDelta()) == static_cast<bool>(getStats()))
    return emitOpError("expected Delta as a fragment or from statistics");
  if (getScaledDelta() && !(getScale() && getStats()))
    return emitOpError("expected scaled_delta with the scale and Delta from "
                       "statistics");
  if (getDelta())
    return verifyColumnsDelta(*this, getProbs().getType(),
                              getDelta().getType());
  if (getProbs().getType().getLayout() != FragmentLayout::Accumulator)
    return emitOpError("expected accumulator fragments, got ")
           << getProbs().getType();
  return success();
}

LogicalResult StoreTileOp::verify() {
  FragmentType value = getValue().getType();
  SharedTileType tile = getTile().getType();
  if (value.getLayout() != FragmentLayout::Accumulator ||
      value.getCols() != tile.getCols())
    return emitOpError("expected an accumulator of the tile's ")
           << tile.getCols() << " columns, got " << value;
  return success();
}

LogicalResult ReduceDQOp::verify() {
  SharedTileType ds = getDs().getType(), key = getKey().getType();
  if (ds.getRows() != key.getRows())
    return emitOpError("expected dSᵀ and K tiles of the same keys, got ")
           << ds.getRows() << " and " << key.getRows();
  if (getColumns() <= 0 || getColumns() > key.getCols() ||
      getRowElements() < getColumns())
    return emitOpError("expected 1 to ")
           << key.getCols() << " columns within rows of "
           << getRowElements() << " elements, got " << getColumns();
  if (!getFirstColumn() && getColumns() != key.getCols())
    return emitOpError("expected every column of K without a first_column");
  return success();
}

LogicalResult StoreAccumulatorOp::verify() {
  if (!isLayout(getAcc().getType(), FragmentLayout::Accumulator))
    return emitOpError("expected an accumulator fragment, got ")
           << getAcc().getType();
  if (getRowElements() < getAcc().getType().getCols())
    return emitOpError("expected rows of at least the fragment's ")
           << getAcc().getType().getCols() << " columns, got "
           << getRowElements();
  return success();
}

LogicalResult YieldOp::verify() {
  bool maskMod =
      isa<MaskModOp, TransposedMaskModOp>((*this)->getParentOp());
  Type expected = maskMod ? Type(IntegerType::get(getContext(), 1))
                          : Type(Float32Type::get(getContext()));
  if (getValue().getType() != expected)
    return emitOpError("expected ")
           << (maskMod ? "a mask_mod to yield " : "a score_mod to yield ")
           << expected << ", got " << getValue().getType();
  return success();
}
