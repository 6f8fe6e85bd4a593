//===- AttnGPUBase.td - attn_gpu dialect, types -------------*- tablegen -*-===//
//
// The GPU tile level: the schedule of one attention kernel as IR. Values are
// a warp's register fragments and the CTA's shared-memory tiles, whose types
// carry their layouts; the ops move tiles (cp.async into a stage of the K/V
// ring), multiply them on tensor cores and run the online softmax on the
// fragments. `convert-attn-gpu-to-nvvm` lowers them to the fragment
// builders' mma.sync / ldmatrix / cp.async code.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_GPU_BASE_TD
#define ATTN_GPU_BASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def AttnGPU_Dialect : Dialect {
  let name = "attn_gpu";
  let cppNamespace = "::mlir::fa::attn_gpu";
  let summary = "The GPU tile level of attention kernels";
  let description = [{
    One kernel's schedule between the tiled attn IR (`attn-tile`) and the
    tensor-core code: shared-memory tiles with padded rows, register
    fragments in the mma.sync m16n8k16 layouts, asynchronous tile copies into
    the stages of a ring, the two MMAs with their operand sources, the online
    softmax update, masking and score_mod on score fragments, and the
    epilogue. Built by `convert-attn-to-gpu`, lowered by
    `convert-attn-gpu-to-nvvm`.
  }];
  let useDefaultTypePrinterParser = 1;
  let dependentDialects = ["::mlir::fa::attn::AttnDialect"];
}

// Which lane holds which element of a warp's 16-row fragment (Fragments.h):
//   accumulator: the m16n8 f32 C layout, per n8 column tile lane (g, t) holds
//                (g, 2t..2t+1) and (g+8, 2t..2t+1): 4 values per 8 columns;
//   operand_a:   the m16k16 A layout, packed pairs of the element type: 4
//                registers per 16 columns;
//   rows:        one value per accumulator row (g and g+8): 2 values;
//   columns:     one value per accumulator column the lane holds (2t, 2t+1
//                of each n8 tile): 2 values per 8 columns.
def AttnGPU_FragmentLayout : I32EnumAttr<"FragmentLayout",
    "lane layout of a register fragment", [
    I32EnumAttrCase<"Accumulator", 0, "accumulator">,
    I32EnumAttrCase<"OperandA", 1, "operand_a">,
    I32EnumAttrCase<"Rows", 2, "rows">,
    I32EnumAttrCase<"Columns", 3, "columns">]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::mlir::fa::attn_gpu";
}

class AttnGPU_Type<string name, string typeMnemonic>
    : TypeDef<AttnGPU_Dialect, name> {
  let mnemonic = typeMnemonic;
}

def AttnGPU_FragmentType : AttnGPU_Type<"Fragment", "fragment"> {
  let summary = "a warp's 16-row register fragment in an mma.sync layout";
  let description = [{
    `!attn_gpu.fragment<16x64xf32, accumulator>`: the 16 × 64 tile of a warp
    spread over its 32 lanes in the named layout; lowers to the values one
    lane holds (FragmentType::getLaneValueCount).
  }];
  let parameters = (ins "int64_t":$rows, "int64_t":$cols,
                        "::mlir::Type":$elementType,
                        "::mlir::fa::attn_gpu::FragmentLayout":$layout);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Values one lane holds: 4 per n8 column tile (accumulator), 4 per k16
    /// step (operand_a), 2 (rows), 2 per n8 column tile (columns).
    int64_t getLaneValueCount() const;
  }];
}

def AttnGPU_SharedTileType : AttnGPU_Type<"SharedTile", "shared_tile"> {
  let summary = "a row-padded or swizzled tile of the CTA's dynamic shared memory";
  let description = [{
    `!attn_gpu.shared_tile<64x128xbf16, stride = 136>`: `rows` rows of `cols`
    elements, `stride` elements apart (the padding spreads an ldmatrix's row
    addresses over distinct banks; columns from `cols` to the next multiple
    of 16 hold zeros). Lowers to the element offset of its row 0 in the
    shared buffer.

    `!attn_gpu.shared_tile<64x128xbf16, stride = 128, swizzle>`: unpadded
    rows (cols a multiple of 64) whose 16-byte chunk c of row r is stored at
    chunk c xor (r mod 8): the eight rows an ldmatrix reads at one chunk
    fall on distinct banks without padding.

    `!attn_gpu.shared_tile<64x128xbf16, stride = 64, swizzle>`: a swizzled
    tile of 64-column slabs (stride 64 below cols), slab after slab, each
    `rows` rows of 128 bytes swizzled as above: what a TMA box of 64
    columns writes with a 128-byte swizzle, 1024-byte aligned.
  }];
  let parameters = (ins "int64_t":$rows, "int64_t":$cols,
                        "::mlir::Type":$elementType, "int64_t":$stride,
                        "bool":$swizzle);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Swizzled 64-column slabs (a TMA box's layout).
    bool isSlabbed() const {
      return getSwizzle() && getStride() == 64 && getCols() > 64;
    }
    /// Elements the tile spans in the shared buffer.
    int64_t getElements() const {
      return getRows() * (isSlabbed() ? getCols() : getStride());
    }
  }];
}

def AttnGPU_KeyBoundsType : AttnGPU_Type<"KeyBounds", "key_bounds"> {
  let summary = "the keys a lane's two accumulator rows may see";
  let description = [{
    The band of the mask per accumulator row and for the whole query tile,
    computed once per tile (RowKeyBounds in Fragments.h). `left`: the band
    has a lower edge (window); `right`: an upper one (any mask; without it
    every row ends at Nk). Lowers to tileHi, then lo[2] and tileLo (left),
    then hi[2] (right).
  }];
  let parameters = (ins "bool":$left, "bool":$right);
  let assemblyFormat = "`<` `left` `=` $left `,` `right` `=` $right `>`";
}

def AttnGPU_PackedRowsType : AttnGPU_Type<"PackedRows", "packed_rows"> {
  let summary = "which (head, query) each row of a packed-GQA query tile holds";
  let description = [{
    Packed GQA: the CTA of key head hk holds the G = H / Hkv query heads
    sharing it, n = max(block_rows / G, 1) queries of each; tile row r is
    head hk·G + r mod G at query q0 + r div G, and rows from G·n on are
    padding. Made by `attn_gpu.packed_rows`, read by the ops that need a
    row's position (the Q gather, the key band, score_mod, mask_mod, the
    epilogue). Lowers to (batch, H, Nq, hk·G, q0, G, n).
  }];
}

class AttnGPU_Op<string mnemonic, list<Trait> traits = []>
    : Op<AttnGPU_Dialect, mnemonic, traits>;

#endif // ATTN_GPU_BASE_TD
