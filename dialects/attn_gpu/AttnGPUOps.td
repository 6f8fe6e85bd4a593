//===- AttnGPUOps.td - attn_gpu tile-level ops --------------*- tablegen -*-===//
//
// The ops of one forward kernel's schedule, in the order the kernel runs
// them: the shared buffer and its tiles, packed GQA's rows, asynchronous
// tile copies (a gather for packed Q), the operand fragments, the key band,
// then per key block Q·Kᵀ, score_mod, mask_mod, the mask, the online
// softmax and P·V, and the epilogue. Then the ops the recompute backward
// adds (its fragments transposed: a warp's 16 keys as rows, the query
// tile's queries as columns): the row statistics, the transposed mods and
// mask, the recompute of P, dS, dSᵀ into shared memory, the dQ reduction
// and the dK / dV epilogue. mma_qk and mma_pv serve both directions. Last,
// the warpgroup roles of the warp-specialised (wgmma) kernels.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_GPU_OPS_TD
#define ATTN_GPU_OPS_TD

include "attn_gpu/AttnGPUBase.td"
include "attn/AttnBase.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def AttnGPU_Fragment : Type<CPred<"::llvm::isa<::mlir::fa::attn_gpu::FragmentType>($_self)">,
                            "register fragment", "::mlir::fa::attn_gpu::FragmentType">;
def AttnGPU_SharedTile : Type<CPred<"::llvm::isa<::mlir::fa::attn_gpu::SharedTileType>($_self)">,
                              "shared-memory tile", "::mlir::fa::attn_gpu::SharedTileType">;
def AttnGPU_KeyBounds : Type<CPred<"::llvm::isa<::mlir::fa::attn_gpu::KeyBoundsType>($_self)">,
                             "key bounds", "::mlir::fa::attn_gpu::KeyBoundsType">;
def AttnGPU_PackedRows
    : Type<CPred<"::llvm::isa<::mlir::fa::attn_gpu::PackedRowsType>($_self)">,
           "packed rows", "::mlir::fa::attn_gpu::PackedRowsType">,
      BuildableType<"::mlir::fa::attn_gpu::PackedRowsType::get($_builder.getContext())">;

def AttnGPU_SharedMemoryOp : AttnGPU_Op<"shared_memory"> {
  let summary = "the kernel's dynamic shared buffer";
  let description = [{
    `elements` elements of `element_type` of dynamic shared memory, which the
    kernel's `shared_tile`s divide; one per kernel, before every tile.
  }];
  let arguments = (ins I64Attr:$elements, TypeAttr:$element_type);
  let assemblyFormat = "$elements `x` $element_type attr-dict";
  let hasVerifier = 1;
}

def AttnGPU_SharedTileOp : AttnGPU_Op<"shared_tile", [Pure]> {
  let summary = "a tile of the shared buffer, or a stage of a ring of tiles";
  let description = [{
    The tile at element `offset` of the buffer; with `stage`, stage `stage`
    of a ring of tiles `stage_elements` apart from `offset` (the K/V
    double buffers).
    ```mlir
    %k = attn_gpu.shared_tile offset 8704 stage %s of 8704
        : !attn_gpu.shared_tile<64x128xbf16, stride = 136>
    ```
  }];
  let arguments = (ins Optional<Index>:$stage, I64Attr:$offset,
                       OptionalAttr<I64Attr>:$stage_elements);
  let results = (outs AttnGPU_SharedTile:$tile);
  let assemblyFormat = [{
    `offset` $offset (`stage` $stage^ `of` $stage_elements)? attr-dict `:`
    type($tile)
  }];
  let hasVerifier = 1;
}

def AttnGPU_AsyncCopyOp : AttnGPU_Op<"async_copy", [AttrSizedOperandSegments]> {
  let summary = "copy rows of a global matrix into a shared tile (cp.async)";
  let description = [{
    Rows [row_begin, row_begin + rows) of the matrix whose row 0 is at
    element `base` of `source`, rows `row_stride` elements apart, into
    `tile`; rows at or past `row_limit` and the padding columns are zeros.
    All threads take part; the copies form one cp.async group.

    Paged (`paged(%table[%first] page %size pages %count)`, a paged KV
    cache): row n is the matrix's row p·size + n mod size, p the i32
    page_table[first + n / size] (a global pointer, read with
    ld.global.nc) clamped into [0, count).

    `threads b to e`: only threads [b, e) run it and share the copy (a
    role of attn_gpu.producer_warp).

    `tma(%map [%h, %b])`: the same rows are also box (0, row_begin, h, b)
    onward of `map`, a 4-D CUtensorMap (columns, rows, heads, batch) whose
    rows end at row_limit, so a producer warp may load them by TMA
    (attn-gpu-warp-specialize makes it an attn_gpu.tma_copy); the tile is
    then swizzled 64-column slabs. Paged, `tma(%map [%h])`: the map is the
    pool's (columns, page rows, heads, pages) and the page coordinate comes
    through the table.
  }];
  let arguments = (ins AnyMemRef:$source, Index:$base, Index:$row_begin,
                       Index:$row_limit, Index:$row_stride,
                       AttnGPU_SharedTile:$tile,
                       Optional<AnyType>:$page_table,
                       Variadic<Index>:$paging,
                       Optional<AnyType>:$tensor_map,
                       Variadic<Index>:$map_coords,
                       OptionalAttr<I64Attr>:$thread_begin,
                       OptionalAttr<I64Attr>:$thread_end);
  let assemblyFormat = [{
    $source `[` $base `]` `rows` $row_begin `below` $row_limit `stride`
    $row_stride (`paged` `(` $page_table^ `[` $paging `]` `:` type($page_table) `)`)?
    (`tma` `(` $tensor_map^ `[` $map_coords `]` `:` type($tensor_map) `)`)?
    `into` $tile (`threads` $thread_begin^ `to` $thread_end)? attr-dict `:`
    type($source) `,` type($tile)
  }];
  let builders = [
    // All threads copy.
    OpBuilder<(ins "Value":$source, "Value":$base, "Value":$row_begin,
                   "Value":$row_limit, "Value":$row_stride, "Value":$tile,
                   "Value":$page_table, "ValueRange":$paging,
                   CArg<"Value", "{}">:$tensor_map,
                   CArg<"ValueRange", "{}">:$map_coords), [{
      build($_builder, $_state, source, base, row_begin, row_limit,
            row_stride, tile, page_table, paging, tensor_map, map_coords,
            IntegerAttr(), IntegerAttr());
    }]>
  ];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Paged: the page table's first entry of the sequence, the page size
    /// and the page count (the `paging` operands).
    ::mlir::Value getTableBase() { return getPaging()[0]; }
    ::mlir::Value getPageSize() { return getPaging()[1]; }
    ::mlir::Value getNumPages() { return getPaging()[2]; }
  }];
}

def AttnGPU_AsyncWaitOp : AttnGPU_Op<"async_wait"> {
  let summary = "wait until at most `pending` copy groups are in flight";
  let arguments = (ins I64Attr:$pending);
  let assemblyFormat = "$pending attr-dict";
}

def AttnGPU_PackedRowsOp : AttnGPU_Op<"packed_rows", [Pure]> {
  let summary = "the rows of a packed-GQA query tile";
  let description = [{
    The query tile `query_block` of key head `key_head` of batch `batch`
    (H query heads over Hkv key heads, Nq queries) holds the G = H / Hkv
    heads of the key head, n = max(block_rows / G, 1) queries of each:
    `rows` maps tile row r to head hk·G + r mod G, query q0 + r div G, and
    `first_query` is q0 = query_block·n. The split-KV decode kernel is such a
    tile whose key loop runs one split's blocks.
    ```mlir
    %rows, %q0 = attn_gpu.packed_rows key_head %y block %x of [%b, %h, %hkv, %nq]
        {block_rows = 64 : i64} : !attn_gpu.packed_rows
    ```
  }];
  let arguments = (ins Index:$key_head, Index:$query_block, Index:$batch,
                       Index:$heads, Index:$kv_heads, Index:$nq,
                       I64Attr:$block_rows);
  let results = (outs AttnGPU_PackedRows:$rows, Index:$first_query);
  let assemblyFormat = [{
    `key_head` $key_head `block` $query_block `of` ` ` `[` $batch `,` $heads
    `,` $kv_heads `,` $nq `]` attr-dict `:` type($rows)
  }];
  let hasVerifier = 1;
}

def AttnGPU_AsyncGatherOp : AttnGPU_Op<"async_gather"> {
  let summary = "gather the rows of a packed query tile into a shared tile";
  let description = [{
    Tile row r of `tile` receives query q of head h of batch `batch` of
    `source`, (h, q) as `rows` maps r, at element batch·batch_stride +
    h·head_stride + q·row_stride (the caller's layout); padding rows, rows
    past Nq and the padding columns are zeros. All threads take part (or
    threads [b, e) with `threads b to e`); the copies form one cp.async
    group.
  }];
  let arguments = (ins AnyMemRef:$source, Index:$batch, Index:$batch_stride,
                       Index:$head_stride, Index:$row_stride,
                       AttnGPU_PackedRows:$rows, AttnGPU_SharedTile:$tile,
                       OptionalAttr<I64Attr>:$thread_begin,
                       OptionalAttr<I64Attr>:$thread_end);
  let assemblyFormat = [{
    $source `[` $batch `]` `strides` ` ` `[` $batch_stride `,` $head_stride `,`
    $row_stride `]` `rows` $rows `into` $tile (`threads` $thread_begin^ `to`
    $thread_end)? attr-dict `:` type($source) `,` type($tile)
  }];
  let builders = [
    // All threads copy.
    OpBuilder<(ins "Value":$source, "Value":$batch, "Value":$batch_stride,
                   "Value":$head_stride, "Value":$row_stride, "Value":$rows,
                   "Value":$tile), [{
      build($_builder, $_state, source, batch, batch_stride, head_stride,
            row_stride, rows, tile, IntegerAttr(), IntegerAttr());
    }]>
  ];
  let hasVerifier = 1;
}

def AttnGPU_WarpRowOffsetOp : AttnGPU_Op<"warp_row_offset", [Pure]> {
  let summary = "the first query-tile row of this warp's 16";
  let description = [{
    Warp w owns rows [16w, 16w + 16) of the query tile: its fragments hold
    them.
  }];
  let results = (outs Index:$row);
  let assemblyFormat = "attr-dict `:` type($row)";
}

def AttnGPU_LoadOperandAOp : AttnGPU_Op<"load_operand_a"> {
  let summary = "load a warp's 16 rows of a shared tile as A fragments";
  let description = [{
    Rows [row, row + 16) of `tile`, every k16 step of its padded columns,
    through ldmatrix, into the operand_a layout.
  }];
  let arguments = (ins AttnGPU_SharedTile:$tile, Index:$row);
  let results = (outs AttnGPU_Fragment:$fragment);
  let assemblyFormat = [{
    $tile `[` $row `]` attr-dict `:` type($tile) `->` type($fragment)
  }];
  let hasVerifier = 1;
}

def AttnGPU_FillOp : AttnGPU_Op<"fill", [Pure]> {
  let summary = "a fragment with every element `value`";
  let arguments = (ins F32:$value);
  let results = (outs AttnGPU_Fragment:$result);
  let assemblyFormat = "$value attr-dict `:` type($result)";
}

def AttnGPU_KeyBoundsOp : AttnGPU_Op<"key_bounds",
    [Pure, AttrSizedOperandSegments]> {
  let summary = "the band of keys visible to a warp's rows and to the tile";
  let description = [{
    For the query tile of `block_rows` rows from `query_begin` of head `head`
    of batch `batch` (problem lengths `nq`, `nk`), the keys the lane's rows
    `row` + g, + 8 may see under `mask`, and the keys inside the band for
    every row of the tile: computed once, read by `attn_gpu.mask` in the
    key loop. With `rows` the lane's rows are packed GQA's (their queries
    from `rows`, the tile's last query that of its last head). With
    `block %begin` the block of `block_rows` rows starts at query `begin`
    instead, its lanes' rows still counted from `query_begin` (the wgmma
    forward's 64 rows of a consumer warpgroup in its 128-row tile). `mask_mod`:
    the kernel also has an `attn_gpu.mask_mod`, whose rows keep an upper
    edge (Nk) without a band. A window's sizes are `window_left` and
    `window_right`, or, for a kernel that serves every window,
    `window(%left, %right)`: index values bound at the kernel's entry from
    its window parameters, already clamped (unbounded is max(Nq, Nk)).
  }];
  let arguments = (ins Index:$batch, Index:$head, Index:$query_begin,
                       Index:$nq, Index:$nk, Index:$row,
                       Optional<AttnGPU_PackedRows>:$rows,
                       Optional<Index>:$block_begin,
                       Variadic<Index>:$window_sizes,
                       I64Attr:$block_rows, UnitAttr:$mask_mod,
                       DefaultValuedAttr<Attn_MaskKindAttr,
                           "::mlir::fa::attn::MaskKind::None">:$mask,
                       OptionalAttr<I64Attr>:$window_left,
                       OptionalAttr<I64Attr>:$window_right);
  let results = (outs AttnGPU_KeyBounds:$bounds);
  let assemblyFormat = [{
    `at` ` ` `[` $batch `,` $head `,` $query_begin `]` `of` ` ` `[` $nq `,` $nk `]`
    `row` $row (`rows` $rows^)? (`block` $block_begin^)?
    (`window` `(` $window_sizes^ `)`)? attr-dict
    `:` type($bounds)
  }];
  let hasVerifier = 1;
}

def AttnGPU_MmaQKOp : AttnGPU_Op<"mma_qk"> {
  let summary = "S = Q·Kᵀ on tensor cores (mma.sync m16n8k16)";
  let description = [{
    The warp's 16 × block_kv scores in the accumulator layout, from Q as
    operand_a fragments in registers or, with `[row]`, read from its shared
    tile at every k step, and the n-major K tile through ldmatrix. The
    backward forms Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ with it: the warp's 16 keys of
    the K (V) tile at `[row]` against the Q (dO) tile.
  }];
  let arguments = (ins AnyType:$query, Optional<Index>:$query_row,
                       AttnGPU_SharedTile:$key);
  let results = (outs AttnGPU_Fragment:$scores);
  let assemblyFormat = [{
    $query (`[` $query_row^ `]`)? `,` $key attr-dict `:` type($query) `,`
    type($key) `->` type($scores)
  }];
  let hasVerifier = 1;
}

def AttnGPU_ScoreModOp : AttnGPU_Op<"score_mod",
    [AllTypesMatch<["scores", "result"]>]> {
  let summary = "apply a score_mod to each element of a score fragment";
  let description = [{
    Each score s of the fragment becomes score_mod(scale·s, b, h, q, kv)
    with its position: the lane's rows `row` + g, + 8 from `query_begin`,
    its columns 2t, 2t + 1 of each n8 tile from `key_begin`. The region is
    the attn op's (its terminator an `attn_gpu.yield`), built by the CPU
    decomposition's score builder; its mod_args are the kernel's trailing
    parameters. With `rows` each row's head and query are packed GQA's.

    With `query_anchored` (set by attn-gpu-anchor-score-mod, for a region
    whose q_idx enters only as an added term g(b, h, q):
    attn::scoreModQueryAdditive) both rows of a lane are evaluated at the
    query of its first row: row r's scores then differ from the mod's by a
    constant, which cancels in the softmax and which `score_mod_shift` gives
    back to finalize_softmax. The per-key terms are then shared by a lane's
    two rows.
  }];
  let arguments = (ins AttnGPU_Fragment:$scores, F32:$scale, Index:$batch,
                       Index:$head, Index:$query_begin, Index:$nq, Index:$nk,
                       Index:$row, Index:$key_begin,
                       Optional<AttnGPU_PackedRows>:$rows,
                       UnitAttr:$query_anchored);
  let results = (outs AttnGPU_Fragment:$result);
  let regions = (region SizedRegion<1>:$score_mod);
  let hasRegionVerifier = 1;
  let assemblyFormat = [{
    $scores `scale` $scale `at` ` ` `[` $batch `,` $head `,` $query_begin `]` `of`
    ` ` `[` $nq `,` $nk `]` `row` $row `key` $key_begin (`rows` $rows^)?
    attr-dict `:` type($scores) $score_mod
  }];
}

def AttnGPU_ScoreModShiftOp : AttnGPU_Op<"score_mod_shift"> {
  let summary = "each row's shift under a query-anchored score_mod";
  let description = [{
    For the lane's rows (as `attn_gpu.score_mod` places them, `row` + g,
    + 8 from `query_begin`, or packed GQA's `rows`) and the score_mod region
    of a `query_anchored` score_mod: g(q_r) − g(q_0), where q_0 is the query
    of the lane's first row, evaluated as score_mod(0, b, h_r, q_r, q_0) −
    score_mod(0, b, h_r, q_0, q_0). Added to a row's LSE it gives the LSE of
    the mod's own scores (finalize_softmax's `shift`).
  }];
  let arguments = (ins F32:$scale, Index:$batch, Index:$head,
                       Index:$query_begin, Index:$nq, Index:$nk, Index:$row,
                       Optional<AttnGPU_PackedRows>:$rows);
  let results = (outs AttnGPU_Fragment:$shift);
  let regions = (region SizedRegion<1>:$score_mod);
  let hasRegionVerifier = 1;
  let assemblyFormat = [{
    `scale` $scale `at` ` ` `[` $batch `,` $head `,` $query_begin `]` `of`
    ` ` `[` $nq `,` $nk `]` `row` $row (`rows` $rows^)? attr-dict `:`
    type($shift) $score_mod
  }];
}

def AttnGPU_MaskModOp : AttnGPU_Op<"mask_mod",
    [AllTypesMatch<["scores", "result"]>]> {
  let summary = "apply a mask_mod to each element of a score fragment";
  let description = [{
    Each score of the fragment whose position (b, h, q, kv) the region
    rejects (yields false) becomes -inf; positions as in
    `attn_gpu.score_mod` (with `rows`, packed GQA's). The region is the attn
    op's mask_mod (its terminator an `attn_gpu.yield` of an i1), evaluated
    on every score of every key block by the CPU decomposition's predicate
    builder; its mod_args are the kernel's trailing parameters.
  }];
  let arguments = (ins AttnGPU_Fragment:$scores, Index:$batch, Index:$head,
                       Index:$query_begin, Index:$nq, Index:$nk, Index:$row,
                       Index:$key_begin, Optional<AttnGPU_PackedRows>:$rows);
  let results = (outs AttnGPU_Fragment:$result);
  let regions = (region SizedRegion<1>:$mask_mod);
  let hasRegionVerifier = 1;
  let assemblyFormat = [{
    $scores `at` ` ` `[` $batch `,` $head `,` $query_begin `]` `of` ` ` `[`
    $nq `,` $nk `]` `row` $row `key` $key_begin (`rows` $rows^)? attr-dict
    `:` type($scores) $mask_mod
  }];
}

def AttnGPU_YieldOp : AttnGPU_Op<"yield", [Pure, ReturnLike, Terminator,
    ParentOneOf<["ScoreModOp", "ScoreModShiftOp", "MaskModOp",
                 "TransposedScoreModOp",
                 "TransposedMaskModOp"]>]> {
  let summary = "yields a score_mod's score (f32) or a mask_mod's verdict (i1)";
  let arguments = (ins AnyTypeOf<[F32, I1]>:$value);
  let assemblyFormat = "$value attr-dict `:` type($value)";
  let hasVerifier = 1;
}

def AttnGPU_MaskOp : AttnGPU_Op<"mask", [AllTypesMatch<["scores", "result"]>]> {
  let summary = "set the scores outside the key band to -inf";
  let description = [{
    Scores of the key block from `key_begin` that lie outside `bounds` (the
    mask's band, or past Nk) become -inf; a block wholly inside the band
    for every row of the tile is left as it is without evaluating the mask.
    With `every_element` the block is known to need masking (the
    block-sparse forward's partial blocks, on the masked path of an
    `scf.if`) and the whole-tile test is not made; `key_begin` is then
    taken as given (without it the lowering reads it through an opaque
    copy, which keeps LLVM from splitting the key loop at the diagonal: a
    partial block's caller makes that copy before its branch).
  }];
  let arguments = (ins AttnGPU_Fragment:$scores, AttnGPU_KeyBounds:$bounds,
                       Index:$key_begin, UnitAttr:$every_element);
  let results = (outs AttnGPU_Fragment:$result);
  let assemblyFormat = [{
    $scores `,` $bounds `key` $key_begin attr-dict `:` type($scores) `,`
    type($bounds)
  }];
}

def AttnGPU_OnlineSoftmaxOp : AttnGPU_Op<"online_softmax", [Pure,
    AllTypesMatch<["scores", "probs"]>,
    AllTypesMatch<["max", "sum", "new_max", "new_sum"]>,
    AllTypesMatch<["acc", "new_acc"]>]> {
  let summary = "the online-softmax update of (max, sum, acc) by a score block";
  let description = [{
    attn.online_attention's update on fragments: in base-2 units
    t = s·scale_log2, m' = max(m, rowmax t), α = 2^(m − m'), P = 2^(t − m'),
    l' = α·l + rowsum P, acc' = α·acc; `probs` is P, in the scores'
    accumulator layout, for `attn_gpu.mma_pv`. Row reductions run over the
    4 lanes of a row. Rows with nothing unmasked keep m = -inf, α = P = 0.

    The wgmma forward rescales O after P·V(j−1) lands, so it updates a
    16 × 8 accumulator of ones: `new_acc` then holds each row's α (lane
    values 0 and 2). With `lazy_rescale_log2` = τ a row keeps its max while
    it grows by at most τ (P and l then run up to 2^τ; α stays exactly 1).

    With `scale_block` = w the scale varies by columns: `scale_log2` holds
    one positive value per w columns (ceil(cols / w) of them, w a multiple
    of 8) and column c takes value c / w (the fp8 forward's block descales:
    each 64 keys of a tile their K factor). Row maxima are then taken per
    column block before they are scaled, so the update still costs one
    multiply per score.

    With `poly_exp2` = k, k of every 8 n8 tiles of scores (spread evenly)
    take P = 2^x from a polynomial on the FMA pipe — x split into a nearest
    integer j and f in [-1/2, 1/2], 2^f by a degree-3 minimax polynomial,
    j added to the exponent bits, 0 below 2^-125 — instead of ex2.approx on
    the special-function unit, whose rate is the fp8 forward's second limit
    beside the tensor cores.
  }];
  let arguments = (ins AttnGPU_Fragment:$scores, AttnGPU_Fragment:$max,
                       AttnGPU_Fragment:$sum, AttnGPU_Fragment:$acc,
                       Variadic<F32>:$scale_log2,
                       OptionalAttr<I64Attr>:$scale_block,
                       OptionalAttr<F64Attr>:$lazy_rescale_log2,
                       OptionalAttr<I64Attr>:$poly_exp2);
  let results = (outs AttnGPU_Fragment:$probs, AttnGPU_Fragment:$new_max,
                      AttnGPU_Fragment:$new_sum, AttnGPU_Fragment:$new_acc);
  let assemblyFormat = [{
    $scores `,` $max `,` $sum `,` $acc `scale` $scale_log2 attr-dict `:`
    type($scores) `,` type($max) `,` type($sum) `,` type($acc) `->`
    type($probs) `,` type($new_max) `,` type($new_sum) `,` type($new_acc)
  }];
  let hasVerifier = 1;
}

def AttnGPU_MmaPVOp : AttnGPU_Op<"mma_pv", [AllTypesMatch<["acc", "result"]>]> {
  let summary = "acc += P·V on tensor cores (mma.sync m16n8k16)";
  let description = [{
    P from the scores' accumulator layout, packed in registers into A
    fragments (the two layouts agree lane for lane), V from its k-major
    shared tile through ldmatrix.trans; n8 column tiles wholly past the
    accumulator's columns are not accumulated. With `columns %c` the
    accumulator holds the value tile's columns [c, c + its width) (a column
    slice of a split backward). The backward's dV += Pᵀ·dO and dK += dSᵀ·Q
    are this op on the transposed fragments.
  }];
  let arguments = (ins AttnGPU_Fragment:$probs, AttnGPU_SharedTile:$value,
                       Optional<Index>:$first_column, AttnGPU_Fragment:$acc);
  let results = (outs AttnGPU_Fragment:$result);
  let assemblyFormat = [{
    $probs `,` $value (`columns` $first_column^)? `,` $acc attr-dict `:`
    type($probs) `,` type($value) `,` type($acc)
  }];
  let hasVerifier = 1;
}

def AttnGPU_FinalizeSoftmaxOp : AttnGPU_Op<"finalize_softmax", [Pure,
    AllTypesMatch<["max", "sum", "inv_sum", "lse"]>,
    AttrSizedOperandSegments]> {
  let summary = "1/l and LSE = ln2·(m + log2 l) per row";
  let description = [{
    Reduces the lane-local row sums over the 4 lanes of a row; rows with
    l = 0 get 1/l = 0 and LSE = -inf (O = 0, never NaN). With `sink` (the
    head's attention-sink logit, natural units) the sink joins every row
    once as a key without a value (OnlineSoftmaxMath::finalizeRowWithSink):
    `inv_sum` then also carries the rescale of acc to the joined max.
    With `shift` (a row's `score_mod_shift`: its scores were shifted by
    −shift) the LSE gets it back, and the sink is shifted as the scores were.
  }];
  let arguments = (ins AttnGPU_Fragment:$max, AttnGPU_Fragment:$sum,
                       Optional<F32>:$sink,
                       Optional<AttnGPU_Fragment>:$shift);
  let results = (outs AttnGPU_Fragment:$inv_sum, AttnGPU_Fragment:$lse);
  let assemblyFormat = [{
    $max `,` $sum (`sink` $sink^)? (`shift` $shift^ `:` type($shift))? attr-dict
    `:` type($max) `,` type($sum) `->` type($inv_sum) `,` type($lse)
  }];
  let hasVerifier = 1;
}

def AttnGPU_StoreOutputOp : AttnGPU_Op<"store_output",
    [AttrSizedOperandSegments]> {
  let summary = "the epilogue: O = acc / l and LSE of the warp's rows";
  let description = [{
    Stores the rows `query_begin` + `row` + g, + 8 below `nq`: acc · inv_sum
    into `output` (row r at `output_base` + r·`output_row_stride`, columns
    below the value head dim, in the output's element type; without a row
    stride the rows are a split's contiguous f32 partials) and `lse` into
    `lse_out` at `lse_base` + r. With `rows` (packed GQA, f32 partials only)
    the lane's rows are those `rows` maps to (h, q), padding rows and rows
    past `nq` not stored, each at row R = `lse_base` + (b·H + h)·Nq + q, or
    with `split` s of `batches` B (the kernel's i32 parameter; split-KV
    decode) R = `lse_base` + ((s·B + b)·H + h)·Nq + q: O at `output_base` +
    R·Dv, LSE at R.

    `staged in %smem group %g` (the wgmma forward's shared-memory epilogue,
    `-fa-wgmma-smem-epilogue`): consumer warpgroup g's 64 rows go first into
    the shared slabs of its own Q rows (128 B swizzle, conflict-free 4-byte
    stores), then, after a named barrier of the warpgroup's 128 threads,
    out to global memory in whole 16-byte chunks, consecutive threads on
    consecutive chunks of a row.
  }];
  let arguments = (ins AttnGPU_Fragment:$acc, AttnGPU_Fragment:$inv_sum,
                       AttnGPU_Fragment:$lse, AnyMemRef:$output,
                       Index:$output_base, Optional<Index>:$output_row_stride,
                       AnyMemRef:$lse_out, Index:$lse_base,
                       Index:$query_begin, Index:$row, Index:$nq,
                       Optional<AttnGPU_PackedRows>:$rows,
                       Optional<Index>:$split, Optional<I32>:$batches,
                       Optional<AnyMemRef>:$staging,
                       Optional<Index>:$staging_group);
  let assemblyFormat = [{
    $acc `,` $inv_sum `,` $lse `to` $output `[` $output_base (`stride`
    $output_row_stride^)? `]` `,` $lse_out `[` $lse_base `]` `rows`
    $query_begin `+` $row `below` $nq (`packed` $rows^)? (`split` $split^
    `of` $batches)? (`staged` `in` $staging^ `group` $staging_group)?
    attr-dict `:` type($acc) `,`
    type($inv_sum) `,` type($lse) `,` type($output) `,` type($lse_out)
    (`,` type($staging)^)?
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// The recompute backward (fa_bwd): one CTA per key block, warp w owning keys
// [16w, 16w + 16); per query tile Sᵀ and dPᵀ are 16 × block_q fragments.
//===----------------------------------------------------------------------===//

def AttnGPU_SharedF32ViewOp : AttnGPU_Op<"shared_f32_view", [Pure]> {
  let summary = "the kernel's shared buffer seen as f32 words";
  let description = [{
    The same bytes as `attn_gpu.shared_memory`'s buffer, as a memref of f32
    words: where the backward keeps a query tile's LSE and Delta (in the
    row padding of its K tile, `attn_gpu.async_copy_row_stats`).
  }];
  let results = (outs MemRefRankOf<[F32], [1]>:$view);
  let assemblyFormat = "attr-dict `:` type($view)";
  let hasVerifier = 1;
}

def AttnGPU_AsyncCopyRowStatsOp : AttnGPU_Op<"async_copy_row_stats"> {
  let summary = "copy a query tile's LSE and Delta into a tile's row padding";
  let description = [{
    LSE and Delta of rows [query_begin, query_begin + block_rows) (row r at
    `rows_base` + r of `lse` and `delta`; rows at or past `nq` read 0) into
    the 16-byte padding of `tile`'s rows, which ldmatrix never reads: value
    c (LSE c < block_rows, Delta block_rows + c) is word c mod 4 of the
    padding of tile row c / 4 in `stats` (the buffer as f32 words), so a
    lane's two query columns are one 8-byte load (`attn_gpu.recompute_probs`).
    One cp.async group.
  }];
  let arguments = (ins AnyMemRef:$lse, AnyMemRef:$delta, Index:$rows_base,
                       Index:$query_begin, Index:$nq,
                       MemRefRankOf<[F32], [1]>:$stats,
                       AttnGPU_SharedTile:$tile, I64Attr:$block_rows);
  let assemblyFormat = [{
    $lse `,` $delta `[` $rows_base `]` `rows` $query_begin `below` $nq `into`
    $stats `beside` $tile attr-dict `:` type($lse) `,` type($delta) `,`
    type($stats) `,` type($tile)
  }];
  let hasVerifier = 1;
}

def AttnGPU_TransposedScoreModOp : AttnGPU_Op<"transposed_score_mod",
    [AllTypesMatch<["scores", "result", "derivative"]>]> {
  let summary = "apply a score_mod to Sᵀ, keeping d(score)/dS";
  let description = [{
    `attn_gpu.score_mod` on Sᵀ: the lane's rows are keys `key_begin` +
    `row` + g, + 8, its columns queries `query_begin` + 2t, 2t + 1 of each
    n8 tile. `derivative` is each element's d(score_mod)/dS (the scale
    included), which `attn_gpu.score_gradient` multiplies into dS; the
    region is the attn op's, differentiated by the CPU decomposition's
    score builder.
  }];
  let arguments = (ins AttnGPU_Fragment:$scores, F32:$scale, Index:$batch,
                       Index:$head, Index:$query_begin, Index:$nq, Index:$nk,
                       Index:$row, Index:$key_begin);
  let results = (outs AttnGPU_Fragment:$result, AttnGPU_Fragment:$derivative);
  let regions = (region SizedRegion<1>:$score_mod);
  let hasRegionVerifier = 1;
  let assemblyFormat = [{
    $scores `scale` $scale `at` ` ` `[` $batch `,` $head `,` $query_begin `]`
    `of` ` ` `[` $nq `,` $nk `]` `row` $row `key` $key_begin attr-dict `:`
    type($scores) $score_mod
  }];
}

def AttnGPU_TransposedMaskModOp : AttnGPU_Op<"transposed_mask_mod",
    [AllTypesMatch<["scores", "result"]>]> {
  let summary = "apply a mask_mod to Sᵀ";
  let description = [{
    `attn_gpu.mask_mod` on Sᵀ, positions as in
    `attn_gpu.transposed_score_mod`.
  }];
  let arguments = (ins AttnGPU_Fragment:$scores, Index:$batch, Index:$head,
                       Index:$query_begin, Index:$nq, Index:$nk, Index:$row,
                       Index:$key_begin);
  let results = (outs AttnGPU_Fragment:$result);
  let regions = (region SizedRegion<1>:$mask_mod);
  let hasRegionVerifier = 1;
  let assemblyFormat = [{
    $scores `at` ` ` `[` $batch `,` $head `,` $query_begin `]` `of` ` ` `[`
    $nq `,` $nk `]` `row` $row `key` $key_begin attr-dict `:` type($scores)
    $mask_mod
  }];
}

def AttnGPU_TransposedBoundsOp : AttnGPU_Op<"transposed_bounds",
    [AttrSizedOperandSegments]> {
  let summary = "whether an Sᵀ tile lies wholly inside the mask";
  let description = [{
    For the Sᵀ tile of `block_keys` keys from `key_begin` (with
    `block_index %i`: block i of `block_keys` keys from there, as the wgmma
    backward's warpgroups each take 64 keys of the key block) ×
    `block_queries` queries from `query_begin`, in a problem of `nq` × `nk`:
    `inside`, whether the tile lies wholly inside the mask's band and below
    both lengths, so that its elements need no `attn_gpu.transposed_mask`;
    and `query`, the tile's first query through an opaque copy, which the
    mask reads so that LLVM does not hoist per-element offsets out of the
    loop. The band's sizes as in `attn_gpu.key_bounds` (`window_left` /
    `window_right`, or `window(%left, %right)` bound at the kernel's entry).
  }];
  let arguments = (ins Index:$query_begin, Index:$key_begin, Index:$nq,
                       Index:$nk, Optional<Index>:$block_index,
                       Variadic<Index>:$window_sizes,
                       I64Attr:$block_keys, I64Attr:$block_queries,
                       DefaultValuedAttr<Attn_MaskKindAttr,
                           "::mlir::fa::attn::MaskKind::None">:$mask,
                       OptionalAttr<I64Attr>:$window_left,
                       OptionalAttr<I64Attr>:$window_right);
  let results = (outs Index:$query, I1:$inside);
  let assemblyFormat = [{
    `at` ` ` `[` $query_begin `,` $key_begin `]` `of` ` ` `[` $nq `,` $nk `]`
    (`block_index` $block_index^)? (`window` `(` $window_sizes^ `)`)?
    attr-dict
  }];
  let hasVerifier = 1;
}

def AttnGPU_TransposedMaskOp : AttnGPU_Op<"transposed_mask",
    [AllTypesMatch<["scores", "result"]>]> {
  let summary = "set the elements of Sᵀ outside the mask to -inf";
  let description = [{
    Elements of Sᵀ (rows keys `key_begin` + `row` + g, + 8; columns queries
    from `query_begin`) outside the kernel's band (its
    `attn_gpu.transposed_bounds`'), at keys past `nk` or at queries past
    `nq` become -inf: the masked path of a tile that is not wholly inside.
    `opaque_lengths`: `nq` and `nk` are read through opaque copies, so that
    LLVM keeps the per-element bounds in the loop instead of holding them in
    registers across it (the wgmma backward's consumers).
  }];
  let arguments = (ins AttnGPU_Fragment:$scores, Index:$batch, Index:$head,
                       Index:$query_begin, Index:$key_begin, Index:$nq,
                       Index:$nk, Index:$row, UnitAttr:$opaque_lengths);
  let results = (outs AttnGPU_Fragment:$result);
  let assemblyFormat = [{
    $scores `at` ` ` `[` $batch `,` $head `,` $query_begin `,` $key_begin `]`
    `of` ` ` `[` $nq `,` $nk `]` `row` $row attr-dict `:` type($scores)
  }];
  let hasVerifier = 1;
}

def AttnGPU_RecomputeProbsOp : AttnGPU_Op<"recompute_probs",
    [AllTypesMatch<["scores", "probs"]>, AttrSizedOperandSegments]> {
  let summary = "Pᵀ = 2^(Sᵀ·scale_log2 − LSE·log2 e)";
  let description = [{
    The backward's recompute of P from the forward's LSE; -inf rows give
    P = 0. Each lane reads the LSE of its query columns from `stats`: from
    a stage of statistics at `stats_base` (LSE of column c at + c, Delta at
    + block_q + c; the wgmma backward's, whose `attn_gpu.score_gradient`
    reads the Delta), each pair right before its columns' math; or from the
    row padding of `tile` (`attn_gpu.async_copy_row_stats`), where it also
    reads Delta, all before the math, and returns it in the columns layout
    for `attn_gpu.score_gradient`. With `folded_lse` the stage holds the
    exponent's addend −LSE·log2 e (−inf for −inf rows) instead of the LSE:
    the warp that stores it folded it once a row, not each lane a column.
  }];
  let arguments = (ins AttnGPU_Fragment:$scores,
                       MemRefRankOf<[F32], [1]>:$stats,
                       Optional<Index>:$stats_base,
                       Optional<AttnGPU_SharedTile>:$tile, F32:$scale_log2,
                       UnitAttr:$folded_lse);
  let results = (outs AttnGPU_Fragment:$probs,
                     Optional<AttnGPU_Fragment>:$delta);
  let assemblyFormat = [{
    $scores `,` $stats (`[` $stats_base^ `]`)? (`beside` $tile^)? `scale`
    $scale_log2 attr-dict `:` type($scores) `,` type($stats) (`,`
    type($tile)^)? (`->` type($delta)^)?
  }];
  let hasVerifier = 1;
}

def AttnGPU_ScoreGradientOp : AttnGPU_Op<"score_gradient",
    [AllTypesMatch<["probs", "dp", "result"]>, AttrSizedOperandSegments]> {
  let summary = "dSᵀ = Pᵀ∘(dPᵀ − Delta)·scale";
  let description = [{
    The softmax's backward on fragments (OnlineSoftmaxMath::scoreGradient):
    the factor is the kernel's `scale`, or under a score_mod each element's
    `derivative` from `attn_gpu.transposed_score_mod`, or with `prescaled`
    none (`probs` carry it: the wgmma backward's split roles exchange
    Pᵀ·scale; or the caller applies it: the fp8 backward joins it to each
    e4m3 copy's power of two). Delta is a columns fragment (`attn_gpu.recompute_probs`), or
    read by each lane from the stage of statistics at `stats_base` of
    `stats` (Delta of query column c at + block_q + c). With
    `scaled_delta` the stage holds −Delta·scale and dSᵀ = Pᵀ∘(dPᵀ·scale −
    Delta·scale): one FMA and one multiply an element
    (OnlineSoftmaxMath::scoreGradientScaledDelta).
  }];
  let arguments = (ins AttnGPU_Fragment:$probs, AttnGPU_Fragment:$dp,
                       Optional<AttnGPU_Fragment>:$delta,
                       Optional<MemRefRankOf<[F32], [1]>>:$stats,
                       Optional<Index>:$stats_base, Optional<F32>:$scale,
                       Optional<AttnGPU_Fragment>:$derivative,
                       UnitAttr:$prescaled, UnitAttr:$scaled_delta);
  let results = (outs AttnGPU_Fragment:$result);
  let assemblyFormat = [{
    $probs `,` $dp (`,` $delta^)? (`delta` `(` $stats^ `[` $stats_base `]`
    `:` type($stats) `)`)? (`scale` $scale^)? (`derivative` $derivative^)?
    attr-dict `:` type($probs) (`,` type($delta)^)? (`,`
    type($derivative)^)?
  }];
  let hasVerifier = 1;
}

def AttnGPU_StoreTileOp : AttnGPU_Op<"store_tile"> {
  let summary = "store a warp's accumulator fragment into a shared tile";
  let description = [{
    Rows `row` + g, + 8 and columns 8n + 2t, +1 of the fragment, in the
    tile's element type, as 4-byte pairs (dSᵀ for the dQ reduction).
  }];
  let arguments = (ins AttnGPU_Fragment:$value, AttnGPU_SharedTile:$tile,
                       Index:$row);
  let assemblyFormat = [{
    $value `,` $tile `[` $row `]` attr-dict `:` type($value) `,` type($tile)
  }];
  let hasVerifier = 1;
}

def AttnGPU_ReduceDQOp : AttnGPU_Op<"reduce_dq"> {
  let summary = "dq_accum += dS·K, reduced in global memory";
  let description = [{
    dS (the transpose of `ds`, a block_kv × block_q tile) times `key`'s
    `columns` columns from `first_column`, added with f32 vector reductions
    (red.global.add) into the rows `rows_base` + `query_begin` + r below
    `nq` of dq_accum at byte address `address` (rows of `row_elements` f32).
    The warps split the block_q × columns tile into 16-row groups and, when
    there are more warps than groups, 16-column pairs round-robin. Not
    bit-reproducible run to run (the additions' order varies).
  }];
  let arguments = (ins AttnGPU_SharedTile:$ds, AttnGPU_SharedTile:$key,
                       Optional<Index>:$first_column, Index:$address,
                       Index:$rows_base, Index:$query_begin, Index:$nq,
                       I64Attr:$columns, I64Attr:$row_elements);
  let assemblyFormat = [{
    $ds `,` $key (`columns` $first_column^)? `into` $address `[` $rows_base
    `]` `rows` $query_begin `below` $nq attr-dict `:` type($ds) `,`
    type($key)
  }];
  let hasVerifier = 1;
}

def AttnGPU_StoreAccumulatorOp : AttnGPU_Op<"store_accumulator"> {
  let summary = "store a warp's accumulator rows to a global matrix";
  let description = [{
    Rows `row` + g, + 8 below `row_limit` of the fragment, in `output`'s
    element type, at `base` + row·`row_stride` (the caller's layout; rows
    are aligned as rows of `row_elements` elements), columns below the
    fragment's width (dK and dV of the backward).
  }];
  let arguments = (ins AttnGPU_Fragment:$acc, AnyMemRef:$output, Index:$base,
                       Index:$row, Index:$row_limit, Index:$row_stride,
                       I64Attr:$row_elements);
  let assemblyFormat = [{
    $acc `to` $output `[` $base `stride` $row_stride `]` `rows` $row `below`
    $row_limit attr-dict `:` type($acc) `,` type($output)
  }];
  let hasVerifier = 1;
}

def AttnGPU_WarpSpecializeOp : AttnGPU_Op<"warp_specialize",
    [SingleBlock, NoTerminator, RecursiveMemoryEffects]> {
  let summary = "warpgroup roles of a kernel, with their register budgets";
  let description = [{
    The CTA's warpgroups (128 threads each) take roles: warpgroup 0 runs
    `producer` after lowering its registers per thread to
    `producer_registers` (setmaxnreg.dec), warpgroups 1 … n − 1 run
    `consumers`, whose argument is the consumer's index (0 …), after raising
    theirs to `consumer_registers` (setmaxnreg.inc). A raise waits until the
    register file has the registers, so the budgets must fit what the CTA
    holds at entry (its `known_block_size` threads at the .maxntid cap):
    producer + (n − 1)·consumer ≤ n·entry, producer ≤ entry ≤ consumer.
    ```mlir
    attn_gpu.warp_specialize producer registers 24 {
      // TMA loads of the K/V ring
    } consumers registers 240 {
    ^bb0(%consumer: index):
      // wgmma, softmax, epilogue
    }
    ```
  }];
  let arguments = (ins I32Attr:$producer_registers,
                       I32Attr:$consumer_registers);
  let regions = (region SizedRegion<1>:$producer, SizedRegion<1>:$consumers);
  let assemblyFormat = [{
    `producer` `registers` $producer_registers $producer
    `consumers` `registers` $consumer_registers $consumers attr-dict
  }];
  let hasRegionVerifier = 1;
  let extraClassDeclaration = [{
    /// The op with its two blocks (the consumers' with its index argument).
    static WarpSpecializeOp build(::mlir::OpBuilder &b, ::mlir::Location loc,
                                  int32_t producerRegisters,
                                  int32_t consumerRegisters);
    ::mlir::Block &getProducerBlock() { return getProducer().front(); }
    ::mlir::Block &getConsumerBlock() { return getConsumers().front(); }
  }];
}

def AttnGPU_ProducerWarpOp : AttnGPU_Op<"producer_warp",
    [SingleBlock, NoTerminator, RecursiveMemoryEffects]> {
  let summary = "a last warp that fills the rings while the others compute";
  let description = [{
    The CTA's first `consumer_warps` warps run `consumers`; the warp after
    them runs `producer`, whose copies (`async_copy ... threads` of its
    lanes) fill ring slots that `ring_commit` signals and the consumers'
    `ring_wait` takes, so the key loop has no CTA barrier
    (attn-gpu-warp-specialize builds it). A `gpu.barrier` in `consumers`
    synchronises the consumer warps only. The kernel's `known_block_size`
    counts both roles.
    ```mlir
    attn_gpu.producer_warp after 2 warps {
      // ring_acquire, async_copy by_warp, ring_commit per key tile
    } consumers {
      // ring_wait, mma_qk, ..., ring_release per key tile; the epilogue
    }
    ```
  }];
  let arguments = (ins I64Attr:$consumer_warps);
  let regions = (region SizedRegion<1>:$producer, SizedRegion<1>:$consumers);
  let assemblyFormat = [{
    `after` $consumer_warps `warps` $producer `consumers` $consumers attr-dict
  }];
  let hasRegionVerifier = 1;
  let extraClassDeclaration = [{
    /// The op with its two (empty) blocks.
    static ProducerWarpOp build(::mlir::OpBuilder &b, ::mlir::Location loc,
                                int64_t consumerWarps);
    ::mlir::Block &getProducerBlock() { return getProducer().front(); }
    ::mlir::Block &getConsumerBlock() { return getConsumers().front(); }
  }];
}

def AttnGPU_WgmmaQKOp : AttnGPU_Op<"wgmma_qk", [AttrSizedOperandSegments]> {
  let summary = "S = Q·Kᵀ on wgmma, both operands in shared memory (issued only)";
  let description = [{
    One warpgroup's m64nN product, N the scores' columns: a k step (32
    bytes of each row: k16 of 16-bit or k32 of e4m3 `operand_type`) per
    pair of shared-memory descriptors, Q's K-major rows against K's, the
    first step overwriting the accumulator. A warp's view of the result is
    its 16 rows in the accumulator layout (lane (g, t) of warp w holds rows
    16w + g, + 8), which the score ops read unchanged. Issued only: the
    operands and the result are valid between a `nvvm.wgmma.fence` before
    it and the `nvvm.wgmma.wait.group` after its commit. The backward forms
    Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ with it, and with `mn_major` (both operands
    MN-major, 16-bit only) dQ = dS·K.
    ```mlir
    %s = attn_gpu.wgmma_qk (%q0, %q1, ...), (%k0, %k1, ...) of bf16
        : !attn_gpu.fragment<16x128xf32, accumulator>
    ```
  }];
  let arguments = (ins Variadic<I64>:$query_descriptors,
                       Variadic<I64>:$key_descriptors,
                       TypeAttr:$operand_type, UnitAttr:$mn_major);
  let results = (outs AttnGPU_Fragment:$scores);
  let assemblyFormat = [{
    `(` $query_descriptors `)` `,` `(` $key_descriptors `)` (`mn_major`
    $mn_major^)? `of` $operand_type attr-dict `:` type($scores)
  }];
  let hasVerifier = 1;
}

def AttnGPU_TransposeFp8TileOp : AttnGPU_Op<"transpose_fp8_tile"> {
  let summary = "V → Vᵀ of one ring slot in shared memory, for fp8 P·V";
  let description = [{
    An e4m3 wgmma's B operand must be K-major, so the fp8 forward's producer
    warps 1-3 (warp 0 holds the TMA thread) transpose each V tile the TMA
    wrote: V [`rows` keys][`cols`] from byte `v_base` of `smem` (128 B
    swizzled rows, 128-column slabs of `rows` rows) into Vᵀ [`cols`][keys]
    from byte `vt_base`, its key positions in the order P's e4m3 A registers
    take them (HopperFp8.h). Each warp moves 16-key × 32-column units by
    ldmatrix.trans, byte permutes and stmatrix, several units' loads in
    flight a trip. `warps` warps from `first_warp` share the units (the fp8
    backward's producer warps 2-3 transpose K, and each query tile's Q and
    dO, of 64 rows).
    ```mlir
    attn_gpu.transpose_fp8_tile %smem[%v] to [%vt] {rows = 128, cols = 128}
        : memref<0xbf16, 3>
    ```
  }];
  let arguments = (ins AnyMemRef:$smem, Index:$v_base, Index:$vt_base,
                       I64Attr:$rows, I64Attr:$cols,
                       DefaultValuedAttr<I64Attr, "1">:$first_warp,
                       DefaultValuedAttr<I64Attr, "3">:$warps);
  let assemblyFormat = [{
    $smem `[` $v_base `]` `to` ` ` `[` $vt_base `]` attr-dict `:`
    type($smem)
  }];
  let hasVerifier = 1;
}

def AttnGPU_WgmmaPVOp : AttnGPU_Op<"wgmma_pv",
    [AllTypesMatch<["acc", "result"]>, AttrSizedOperandSegments]> {
  let summary = "acc += P·V on wgmma, P in registers (issued only)";
  let description = [{
    P as wgmma A registers (four i32 words per k step: 16-bit pairs of k16
    or e4m3 quads of k32 `operand_type`), V through one shared-memory
    descriptor per k step (MN-major, or an fp8 plan's K-major Vᵀ), into the
    accumulator's columns. Issued only, as `attn_gpu.wgmma_qk`. The
    backward's dV += Pᵀ·dO and dK += dSᵀ·Q are this op.
    ```mlir
    %o1 = attn_gpu.wgmma_pv (%p0, ...), (%v0, ...), %o of bf16
        : !attn_gpu.fragment<16x128xf32, accumulator>
    ```
  }];
  let arguments = (ins Variadic<I32>:$probs, Variadic<I64>:$value_descriptors,
                       AttnGPU_Fragment:$acc, TypeAttr:$operand_type);
  let results = (outs AttnGPU_Fragment:$result);
  let assemblyFormat = [{
    `(` $probs `)` `,` `(` $value_descriptors `)` `,` $acc `of`
    $operand_type attr-dict `:` type($acc)
  }];
  let hasVerifier = 1;
}

class AttnGPU_TurnOp<string mnemonic, string summaryText>
    : AttnGPU_Op<mnemonic> {
  let summary = summaryText;
  let description = [{
    Ping-pong of two consumer warpgroups (256 threads): consumer 0
    (`first`) issues its GEMMs between `bar.sync 1` and `bar.arrive 2`,
    consumer 1 between `bar.sync 2` and `bar.arrive 1`, so one warpgroup's
    softmax runs under the other's GEMMs. Both pass the same turns; consumer
    0's own `bar.arrive 1` before its first tile lets it go first.
  }];
  let arguments = (ins I1:$first);
  let assemblyFormat = "$first attr-dict";
}

def AttnGPU_TurnBeginOp : AttnGPU_TurnOp<"turn_begin",
    "ping-pong: wait for this consumer warpgroup's turn to issue">;
def AttnGPU_TurnEndOp : AttnGPU_TurnOp<"turn_end",
    "ping-pong: hand the turn to the other consumer warpgroup">;

def AttnGPU_TmaCopyOp : AttnGPU_Op<"tma_copy", [AttrSizedOperandSegments]> {
  let summary = "producer: load a ring slot's tile by TMA";
  let description = [{
    Thread `thread` arms the full barrier of slot `iteration` mod `slots`
    of the ring at byte `at` with the tile's bytes
    (mbarrier.arrive.expect_tx) and loads the tile as one TMA box per
    64-column slab at coordinates (64·slab, row, coords...) of `tensor_map`
    (a 4-D CUtensorMap of 64 × rows boxes, 128-byte swizzle; rows outside
    the map read as zeros). The slot is full when the boxes land, so its
    ring_init counts one producer. The tile is 1024-byte aligned slabs.
    ```mlir
    attn_gpu.tma_copy %k_map [%row, %kv_head, %batch] into %slot ring %it
        at 73728 slots 2 thread 64 : !llvm.ptr, <64x128xbf16, stride = 64, swizzle>
    ```
    Paged (`pages(%page0, %offset0, %page1, ...)`, an attn_gpu.page_walk's
    results): the map is the pool's (columns, page rows, heads, pages) with
    boxes of 16 rows (kPagedTmaBoxRows), which never straddle a page (page
    sizes are multiples of 16); each 16-key group g of the tile is a box per
    slab at (64·slab, offset_g, head, page_g); `coords` is the head alone.
    Every key of the tile must lie below the sequence's used length (the
    caller tests it: rows past it would read the page's stale rows).
  }];
  let arguments = (ins AnyType:$tensor_map, Index:$row,
                       Variadic<Index>:$coords, Variadic<I32>:$pages,
                       AttnGPU_SharedTile:$tile, Index:$iteration,
                       I64Attr:$at, I64Attr:$slots, I64Attr:$thread);
  let assemblyFormat = [{
    $tensor_map `[` $row `,` $coords `]` (`pages` `(` $pages^ `)`)?
    `into` $tile `ring` $iteration `at` $at `slots` $slots `thread` $thread
    attr-dict `:` type($tensor_map) `,` type($tile)
  }];
  let hasVerifier = 1;
}

def AttnGPU_PageWalkOp : AttnGPU_Op<"page_walk"> {
  let summary = "the pages of a paged tile's 16-key groups";
  let description = [{
    For each 16-key group g of the `groups` from key `row`: the key row +
    16g, held below `limit` (a tile past the sequence's end reads no table
    slot past its pages), its page — page_table[first + key / size] (i32,
    global, read with ld.global.nc) clamped into [0, count) — and its offset
    key mod size in the page. Results page_0, offset_0, page_1, ... (i32).
    The lanes that run it read the same entries; the producer warp walks a
    tile's pages before it waits for the tile's ring slot, so the table's
    latency overlaps the wait.
    ```mlir
    %w:8 = attn_gpu.page_walk %table[%first, %size, %count] rows %row
        below %keys groups 4 : !llvm.ptr<1> -> i32, i32, i32, i32, i32, i32, i32, i32
    ```
  }];
  let arguments = (ins AnyType:$page_table, Index:$first, Index:$page_size,
                       Index:$num_pages, Index:$row, Index:$limit,
                       I64Attr:$groups);
  let results = (outs Variadic<I32>:$walk);
  let assemblyFormat = [{
    $page_table `[` $first `,` $page_size `,` $num_pages `]` `rows` $row
    `below` $limit `groups` $groups attr-dict `:` type($page_table) `->`
    type($walk)
  }];
  let hasVerifier = 1;
}

def AttnGPU_RingInitOp : AttnGPU_Op<"ring_init"> {
  let summary = "the mbarriers of a ring of shared tiles";
  let description = [{
    A ring of `slots` slots has a full and an empty mbarrier per slot, at
    byte `at` of the shared buffer (full ones first, 8 bytes each). A full
    barrier completes when each of the `producers` threads' copies into the
    slot have landed; an empty one when `consumers` threads have released
    the slot. One thread initialises them; a CTA barrier must follow before
    any use.
  }];
  let arguments = (ins I64Attr:$at, I64Attr:$slots, I64Attr:$producers,
                       I64Attr:$consumers);
  let assemblyFormat = [{
    `at` $at `slots` $slots `producers` $producers `consumers` $consumers
    attr-dict
  }];
  let hasVerifier = 1;
}

class AttnGPU_RingOp<string mnemonic, string summaryText>
    : AttnGPU_Op<mnemonic> {
  let summary = summaryText;
  let description = [{
    On slot `iteration` mod `slots` of the ring whose barriers start at byte
    `at` (attn_gpu.ring_init); the (iteration / slots)-th use of the slot
    picks the barrier's phase.
  }];
  let arguments = (ins Index:$iteration, I64Attr:$at, I64Attr:$slots);
  let assemblyFormat = "$iteration `at` $at `slots` $slots attr-dict";
  let hasVerifier = 1;
}

def AttnGPU_RingAcquireOp : AttnGPU_RingOp<"ring_acquire",
    "producer: wait until the consumers have released the slot">;
def AttnGPU_RingCommitOp : AttnGPU_RingOp<"ring_commit",
    "producer: the slot is full once this thread's copies so far land">;
def AttnGPU_RingWaitOp : AttnGPU_RingOp<"ring_wait",
    "consumer: wait until the slot is full">;
def AttnGPU_RingReleaseOp : AttnGPU_RingOp<"ring_release",
    "consumer: this thread is done reading the slot">;

def AttnGPU_RingArriveOp : AttnGPU_Op<"ring_arrive"> {
  let summary = "producer: one thread marks the slot full for its warp";
  let description = [{
    After the producer warp's copies into slot `iteration` mod `slots` have
    landed (each lane's attn_gpu.async_wait 0), the warp synchronises and
    thread `thread` arrives on the slot's full barrier: the one arrival a
    TMA ring's ring_init counts, for a slot its producer filled by cp.async
    (the paged TMA ring's tile that ends past the sequence).
  }];
  let arguments = (ins Index:$iteration, I64Attr:$at, I64Attr:$slots,
                       I64Attr:$thread);
  let assemblyFormat = [{
    $iteration `at` $at `slots` $slots `thread` $thread attr-dict
  }];
  let hasVerifier = 1;
}

#endif // ATTN_GPU_OPS_TD
